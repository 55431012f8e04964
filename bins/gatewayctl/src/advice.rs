//! Error messages that say what to do next: each client-side error class of the spec gets the
//! command or wait that fixes it.
//!
//! Only wording: the classes come from `gateway_client::Error`, and this module changes no
//! state and retries nothing.

use gateway_client::Error;

/// The message for a failed command: the error, then what to do about it.
pub(crate) fn explain(error: &anyhow::Error) -> String {
    let Some(client) = error.chain().find_map(|cause| cause.downcast_ref::<Error>()) else {
        return format!("error: {error:#}");
    };
    let context = error.chain().next().filter(|c| c.downcast_ref::<Error>().is_none()).map(|c| format!("{c}: "));
    let mut message = format!("error: {}{client}", context.unwrap_or_default());
    if let Some(hint) = hint(client) {
        message.push_str("\n  ");
        message.push_str(&hint);
    }
    message
}

fn hint(error: &Error) -> Option<String> {
    Some(match error {
        Error::Authentication { .. } => {
            "your token is missing, expired or not accepted by this gateway: run `gatewayctl login`".into()
        }
        Error::Authorization { trust: Some(trust), .. } => format!(
            "your trust score is {:.2}, this needs {:.2}: ask members to vouch for you (`gatewayctl trust set <your DID> <score>`)",
            trust.actual, trust.required
        ),
        Error::Authorization { required_scopes, .. } if !required_scopes.is_empty() => format!(
            "your token lacks {}: log in with `gatewayctl login --scopes {}` if your role allows it (admins: `--scopes all`)",
            required_scopes.join(", "),
            required_scopes.join(",")
        ),
        Error::Authorization { refused_scopes, .. } if !refused_scopes.is_empty() => format!(
            "your role does not allow {}: log in without them (`--scopes member`), or `--scopes bootstrap` to create a new cooperative",
            refused_scopes.join(", ")
        ),
        Error::Authorization { reason: Some(reason), .. } => {
            format!("{reason}; log in for the right cooperative with `gatewayctl --coop <id> login`")
        }
        Error::Authorization { .. } => {
            "you are not a member of this cooperative, or not for this operation: check --coop, or ask an admin".into()
        }
        Error::Validation { fields, .. } if !fields.is_empty() => {
            let lines: Vec<String> =
                fields.iter().map(|(field, messages)| format!("{field}: {}", messages.join("; "))).collect();
            format!("fix: {}", lines.join("\n  fix: "))
        }
        Error::RateLimited { retry_after_secs, .. } => format!("retry in {retry_after_secs} s"),
        Error::NotFound { code, reason, .. } if code == "RECEIPT_UNAVAILABLE" => match reason.as_deref() {
            Some("not_closed") => "the proposal is not closed yet: `gatewayctl proposal close <id>`".into(),
            Some("no_keystore" | "keystore_locked") => {
                "the gateway had no unlocked signing key when the proposal closed, so no receipt exists".into()
            }
            _ => return None,
        },
        Error::NotFound { resource, .. } if resource == "route" => {
            "this gateway does not serve that route: check --gateway, or the gateway's version".into()
        }
        Error::Conflict { code, .. } if code == "INSUFFICIENT_CREDIT" => {
            "the payment would take you below your credit limit: pay less, or ask an admin to raise the limit".into()
        }
        Error::Server { retryable: true, .. } => "the gateway is restarting or overloaded: try again shortly".into(),
        Error::Server { .. } => {
            "the gateway failed; its logs have the details (the request id is in the response)".into()
        }
        Error::Transport { .. } => "is the gateway running? check --gateway (or GATEWAYCTL_URL)".into(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn explained(error: Error) -> String {
        explain(&anyhow::Error::new(error))
    }

    #[test]
    fn each_class_says_what_to_do() {
        assert!(explained(Error::Authentication { message: "expired".into() }).contains("gatewayctl login"));
        let scopes = Error::Authorization {
            message: "missing scope".into(),
            required_scopes: vec!["ledger:write".into()],
            refused_scopes: vec![],
            reason: None,
            trust: None,
        };
        assert!(explained(scopes).contains("--scopes ledger:write"));
        let refused = Error::Authorization {
            message: "refused".into(),
            required_scopes: vec![],
            refused_scopes: vec!["coop:write".into()],
            reason: None,
            trust: None,
        };
        assert!(explained(refused).contains("your role does not allow coop:write"));
        let limited = Error::RateLimited {
            message: "slow".into(),
            retry_after_secs: 42,
            layer: Some("did".into()),
            limit: None,
            count: None,
        };
        assert!(explained(limited).contains("retry in 42 s"));
        let fields = BTreeMap::from([("amount".to_owned(), vec!["too precise".to_owned()])]);
        let invalid = Error::Validation { code: "BAD_REQUEST".into(), message: "bad".into(), fields };
        assert!(explained(invalid).contains("fix: amount: too precise"));
        let down = Error::Transport { message: "refused".into(), connect: true };
        assert!(explained(down).contains("GATEWAYCTL_URL"));
    }

    #[test]
    fn context_is_kept_and_other_errors_pass_through() {
        let error = anyhow::Error::new(Error::Authentication { message: "m".into() }).context("paying");
        assert!(explain(&error).starts_with("error: paying: authentication failed"));
        assert_eq!(explain(&anyhow::anyhow!("plain")), "error: plain");
    }
}
