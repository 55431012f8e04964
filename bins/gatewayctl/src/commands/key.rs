//! `key generate` and `key show`: the member's Ed25519 key file. Local only; no gateway call.

use serde_json::json;

use super::Context;
use crate::cli::KeyCommand;
use crate::files;

pub(crate) fn run(context: &Context, command: KeyCommand) -> anyhow::Result<()> {
    let (identity, created) = match command {
        KeyCommand::Generate => {
            let identity = gateway_client::Identity::generate();
            files::write_new_key(&context.key_path, &identity)?;
            (identity, true)
        }
        KeyCommand::Show { did: true } => {
            println!("{}", files::read_key(&context.key_path)?.did_key());
            return Ok(());
        }
        KeyCommand::Show { did: false } => (files::read_key(&context.key_path)?, false),
    };
    let value = json!({
        "did": identity.did_key().as_str(),
        "did_icn": identity.did_icn().as_str(),
        "public_key": identity.public_key().to_hex(),
        "path": context.key_path.display().to_string(),
    });
    context.out.show(&value, || {
        let verb = if created { "wrote a new key to" } else { "key file" };
        format!(
            "{verb} {}\ndid:key     {}\ndid:icn     {}\npublic key  {}",
            context.key_path.display(),
            identity.did_key(),
            identity.did_icn(),
            identity.public_key().to_hex()
        )
    })
}
