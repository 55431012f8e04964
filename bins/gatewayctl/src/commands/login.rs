//! `login`: challenge, signature, token; the token is cached beside the key (mode 0600) for
//! the following commands, which renew it with the key when it nears expiry. It never prints
//! the token itself.

use anyhow::{Context as _, bail};
use gateway_client::{BOOTSTRAP_SCOPES, MEMBER_SCOPES};
use gateway_core::Scope;

use super::Context;
use crate::cli::LoginArgs;
use crate::files;
use crate::output::time;
use crate::spinner::Spinner;

/// Expands `member`, `all` and `bootstrap`, and checks every other name.
pub(crate) fn scopes(names: &[String]) -> anyhow::Result<Vec<Scope>> {
    let mut scopes = Vec::new();
    for name in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        match name {
            "member" => scopes.extend(MEMBER_SCOPES),
            "all" => scopes.extend(Scope::ALL),
            "bootstrap" => scopes.extend(BOOTSTRAP_SCOPES),
            other => scopes.push(Scope::parse(other).with_context(|| {
                let known: Vec<&str> = Scope::ALL.iter().map(|s| s.as_str()).collect();
                format!("unknown scope '{other}' (known: {}, or member, all, bootstrap)", known.join(", "))
            })?),
        }
    }
    scopes.sort();
    scopes.dedup();
    Ok(scopes)
}

pub(crate) async fn run(context: &Context, args: LoginArgs) -> anyhow::Result<()> {
    let identity = files::read_key(&context.key_path)?;
    let client = context.public_client()?;
    let spinner = Spinner::start(&format!("logging in to {}", context.gateway));
    let session = if args.identity_only {
        client.login_identity_only(identity).await
    } else {
        let Some(coop) = context.coop_option()? else {
            bail!("which cooperative? pass --coop <id> or set GATEWAYCTL_COOP (or use --identity-only)");
        };
        client.login(identity, coop, &scopes(&args.scopes)?).await
    };
    spinner.stop();
    let session = session?;
    context.save_session(session.clone())?;
    context.out.show(&session_summary(&session, &context.token_path()), || {
        format!(
            "logged in as {}\ncooperative  {}\nscopes       {}\nexpires      {} UTC\ntoken cached in {}",
            session.did,
            session.coop_id.as_deref().unwrap_or("(none: identity only)"),
            if session.scopes.is_empty() { "(none)".into() } else { session.scopes.join(", ") },
            time(session.expires_at),
            context.token_path().display()
        )
    })
}

/// The session without its token, for `--json`.
fn session_summary(session: &gateway_client::Session, cache: &std::path::Path) -> serde_json::Value {
    serde_json::json!({
        "did": session.did,
        "coop_id": session.coop_id,
        "scopes": session.scopes,
        "expires_at": session.expires_at,
        "token_cache": cache.display().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_shorthands_expand_and_unknown_names_are_refused() {
        assert_eq!(scopes(&["member".into()]).unwrap().len(), 10);
        assert_eq!(scopes(&["all".into()]).unwrap().len(), Scope::ALL.len());
        assert_eq!(scopes(&["bootstrap".into()]).unwrap(), [Scope::CoopRead, Scope::CoopWrite]);
        assert_eq!(scopes(&["ledger:read".into(), "ledger:read".into()]).unwrap(), [Scope::LedgerRead]);
        let err = scopes(&["ledger:admin".into()]).unwrap_err().to_string();
        assert!(err.contains("unknown scope 'ledger:admin'"), "{err}");
    }
}
