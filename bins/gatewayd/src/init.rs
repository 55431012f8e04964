//! `gatewayd init`: the first minute of a new gateway. Writes `gateway.toml` (the commented
//! example with a fresh random JWT secret, readable by its owner only) and, when
//! `ICN_PASSPHRASE` is set, a keystore for signed receipts; names the founder's DID as the first
//! trust anchor, so that the founder can open proposals and submit compute tasks at once.
//!
//! It refuses to overwrite an existing `gateway.toml` (unless `--force`) or keystore, and starts
//! nothing.

use std::io::Write;
use std::path::Path;

use anyhow::{Context, bail};
use gateway_core::Did;
use rand::RngCore;

/// The commented example every setting is documented in; `init` fills in its own values.
const EXAMPLE: &str = include_str!("../../../gateway.example.toml");

/// Writes `dir/gateway.toml` (and `dir/keystore.json` when a passphrase is set).
pub fn run(dir: &Path, founder: Option<&str>, force: bool) -> anyhow::Result<()> {
    let founder = founder
        .map(|text| Did::parse(text).map_err(|e| anyhow::anyhow!("--founder {text}: not a DID ({e})")))
        .transpose()?;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let config = dir.join("gateway.toml");
    if config.exists() && !force {
        bail!(
            "{} exists: keep it, or run `gatewayd init --force` to replace it (its secret changes)",
            config.display()
        );
    }
    let keystore = dir.join("keystore.json");
    let passphrase = std::env::var(crate::PASSPHRASE_VAR).ok().filter(|p| !p.is_empty());
    let secret = {
        let mut bytes = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut bytes);
        hex::encode(bytes)
    };
    let text = render(&secret, founder.as_ref(), passphrase.is_some() || keystore.exists());
    write_private(&config, &text)?;
    println!("wrote {} (JWT secret: 32 random bytes; readable by you only)", config.display());
    match (&passphrase, keystore.exists()) {
        (_, true) => println!("kept the existing {}", keystore.display()),
        (Some(passphrase), false) => {
            let master = gateway_auth::keystore::init(&keystore, passphrase)?;
            println!(
                "wrote {} (receipt master {}; unlocked with {})",
                keystore.display(),
                master.id,
                crate::PASSPHRASE_VAR
            );
        }
        (None, false) => println!(
            "no keystore: proposals will close without signed receipts; to sign them, set {} and run `gatewayd keystore init --keystore {}`, then add keystore = \"keystore.json\" to gateway.toml",
            crate::PASSPHRASE_VAR,
            keystore.display()
        ),
    }
    match &founder {
        Some(did) => {
            println!("trust anchor: {did} (trust 1.0: the founder can open proposals and submit compute tasks)")
        }
        None => println!(
            "no trust anchor: every DID has trust 0.0, so nobody can open a proposal or submit a compute task; run `gatewayd init --force --founder <your DID>` (`gatewayctl key show` prints it)"
        ),
    }
    println!("start it: gatewayd --config {}", config.display());
    Ok(())
}

/// The example with the secret, the store, the anchor and the keystore set.
fn render(secret: &str, founder: Option<&Did>, keystore: bool) -> String {
    let mut text = String::from(
        "# Written by `gatewayd init`. It holds the JWT secret: keep it readable by the gateway only.\n\n",
    );
    for line in EXAMPLE.lines() {
        let set = if line.starts_with("# jwt_secret = ") {
            Some(format!("jwt_secret = \"{secret}\""))
        } else if line.starts_with("# store = ") {
            Some("store = \"sqlite:gateway.db\"".to_owned())
        } else if line.starts_with("# trust_anchor = ") {
            founder.map(|did| format!("trust_anchor = [\"{did}\"]"))
        } else if line.starts_with("# keystore = ") && keystore {
            Some("keystore = \"keystore.json\"".to_owned())
        } else {
            None
        };
        text.push_str(&set.unwrap_or_else(|| line.to_owned()));
        text.push('\n');
    }
    text
}

/// Writes `text` to `path`, created with mode 0600 (the secret is in it).
fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(path).with_context(|| format!("writing {}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    file.write_all(text.as_bytes()).with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Settings;

    const FOUNDER: &str = "did:key:z6Mkon3Necd6NkkyfoGoHxid2znGc59LU3K7mubaRcFbLfLX";

    #[test]
    fn init_writes_a_private_config_that_resolves_with_the_founder_as_anchor() {
        let dir = tempfile::tempdir().unwrap();
        run(dir.path(), Some(FOUNDER), false).unwrap();
        let path = dir.path().join("gateway.toml");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        }
        let config = crate::GatewayConfig::resolve(Settings { config: Some(path.clone()), ..Settings::default() })
            .expect("the written file resolves on its own");
        assert_eq!(config.jwt_secret.len(), 64);
        assert_eq!(config.trust_anchors.iter().map(ToString::to_string).collect::<Vec<_>>(), [FOUNDER]);
        assert!(config.check().unwrap().is_empty(), "no warnings: {:?}", config.check());
        let err = run(dir.path(), None, false).unwrap_err().to_string();
        assert!(err.contains("exists") && err.contains("--force"), "{err}");
        run(dir.path(), None, true).unwrap();
        let again = crate::GatewayConfig::resolve(Settings { config: Some(path), ..Settings::default() }).unwrap();
        assert_ne!(again.jwt_secret, config.jwt_secret, "a fresh secret");
        assert!(again.trust_anchors.is_empty());
    }

    #[test]
    fn a_founder_that_is_not_a_did_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let err = run(dir.path(), Some("alice"), false).unwrap_err().to_string();
        assert!(err.contains("--founder alice: not a DID"), "{err}");
        assert!(!dir.path().join("gateway.toml").exists());
    }
}
