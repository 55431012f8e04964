//! Error messages that say what to do next: each client-side error class of INTERFACE.md §2.3 gets the
//! command or wait that fixes it.
//!
//! Only wording: the classes come from `gateway_client::Error`, and this module changes no
//! state and retries nothing.

use gateway_client::{Error, MEMBER_SCOPES};
use gateway_core::Scope;

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

/// What someone who is not a member does (their DID is in the gateway's message too).
const ASK_AN_ADMIN: &str = "ask one of its admins to run `gatewayctl coop add-member <your DID>` (`gatewayctl key show` prints your DID), then log in again";

/// How a cooperative that does not exist yet is founded.
const FOUND_IT: &str = "`gatewayctl login --scopes bootstrap`, then `gatewayctl coop create --name <name>`";

/// Whether a 401's `details.reason` is a refused request signature (`docs/SIGNING.md`).
fn is_signature_refusal(reason: &str) -> bool {
    gateway_httpsig::Failure::ALL.iter().any(|failure| failure.reason() == reason)
}

fn hint(error: &Error) -> Option<String> {
    Some(match error {
        Error::Authentication { reason: Some(reason), .. } if is_signature_refusal(reason) => {
            if reason != gateway_httpsig::Failure::SignatureExpired.reason() {
                // The gateway's message names what was wrong with the signature; a new login
                // would not change it.
                return None;
            }
            "a request signature is accepted for 60 s around the gateway's clock: check this machine's clock (e.g. `timedatectl`)".into()
        }
        Error::Authentication { .. } => {
            "your token is missing, expired or not accepted by this gateway: run `gatewayctl login`".into()
        }
        Error::Authorization { trust: Some(trust), .. } => format!(
            "your trust score is {:.2}, this needs {:.2}\n  trust flows from the gateway's trust anchors: ask the operator to start gatewayd with --trust-anchor <DID of a founder> (or `gatewayd init --founder`), and a member with trust to vouch for you (`gatewayctl trust set <your DID> <score>`)",
            trust.actual, trust.required
        ),
        Error::Authorization { required_scopes, .. } if !required_scopes.is_empty() => {
            let admin_only: Vec<&str> =
                required_scopes.iter().map(String::as_str).filter(|scope| !member_scope(scope)).collect();
            if admin_only.is_empty() {
                format!(
                    "your token lacks {}: log in again with `gatewayctl login`, which asks for every scope a member may have (admins: `--scopes all`)",
                    required_scopes.join(", ")
                )
            } else {
                format!(
                    "this needs {}, which only admins of the cooperative get: an admin logs in with `gatewayctl login --scopes all`; a member asks an admin to do it",
                    admin_only.join(", ")
                )
            }
        }
        Error::Authorization { refused_scopes, message, .. } if !refused_scopes.is_empty() => {
            match login_refusal(message, refused_scopes) {
                LoginRefusal::NotAMember => format!(
                    "you are not a member of this cooperative: {ASK_AN_ADMIN}\n  (to found a new cooperative instead, pick an id that is not taken: `gatewayctl --coop <new id> login --scopes bootstrap`)"
                ),
                LoginRefusal::AdminOnly => format!(
                    "your role does not allow {}: only admins get them. Log in without them (`gatewayctl login` asks for every scope a member may have), and ask an admin to do what needs them",
                    refused_scopes.join(", ")
                ),
                LoginRefusal::NoSuchCoop => format!(
                    "this cooperative does not exist yet (until it does, a login gets only coop:read and coop:write): found it with {FOUND_IT}\n  if you meant an existing cooperative, check its id (--coop or GATEWAYCTL_COOP); if the id is right, you are not a member: {ASK_AN_ADMIN}"
                ),
            }
        }
        Error::Authorization { reason: Some(reason), .. } => match reason.as_str() {
            "not_a_member" | "membership_revoked" => {
                format!("you are not (or no longer) a member of this cooperative: {ASK_AN_ADMIN}")
            }
            "identity_only" => {
                "this token is identity-only (no cooperative): log in for one with `gatewayctl --coop <id> login`"
                    .into()
            }
            "admin_only" => "only an admin of the cooperative can do this: ask one of its admins".into(),
            "not_a_domain_member" => {
                "only the voting members of that governance domain can do this (they are named when it is created)"
                    .into()
            }
            other if other.starts_with("the token is for coop") => {
                format!("{other}: log in for the right cooperative with `gatewayctl --coop <id> login`")
            }
            other if other.contains("not a member") => {
                format!("you are not a member of this cooperative: {ASK_AN_ADMIN}")
            }
            // The gateway's message says it all (not the submitter, not the executor, quarantined, …).
            _ => return None,
        },
        Error::Authorization { .. } => format!(
            "check that you logged in for the right cooperative (`gatewayctl --coop <id> login`); if you are not one of its members, {ASK_AN_ADMIN}"
        ),
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

/// Whether a member's role allows `scope` (all but `coop:write` and `oracle:write`).
fn member_scope(scope: &str) -> bool {
    MEMBER_SCOPES.iter().any(|s| s.as_str() == scope)
}

/// Why a login was refused scopes (docs/INTERFACE.md §3.6, "Who gets which scopes"), as far as the refusal
/// tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LoginRefusal {
    /// The cooperative exists and the DID is not a member: every requested scope is refused.
    NotAMember,
    /// Only scopes a member's role lacks were refused: they are for admins.
    AdminOnly,
    /// Scopes a member would get were refused, but not the bootstrap ones: the cooperative does
    /// not exist yet (or, when the login asked for no bootstrap scope, the DID is not a member).
    NoSuchCoop,
}

fn login_refusal(message: &str, refused: &[String]) -> LoginRefusal {
    // Members and founders alike get coop:read, so its refusal means "not a member"; the
    // gateway also says so in its message, which covers a login that did not ask for coop:read.
    if refused.iter().any(|s| s == Scope::CoopRead.as_str()) || message.contains("is not a member") {
        LoginRefusal::NotAMember
    } else if refused.iter().all(|s| !member_scope(s)) {
        LoginRefusal::AdminOnly
    } else {
        LoginRefusal::NoSuchCoop
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn explained(error: Error) -> String {
        explain(&anyhow::Error::new(error))
    }

    fn authorization(message: &str, required: &[&str], refused: &[&str], reason: Option<&str>) -> Error {
        Error::Authorization {
            message: message.into(),
            required_scopes: required.iter().map(|s| (*s).to_owned()).collect(),
            refused_scopes: refused.iter().map(|s| (*s).to_owned()).collect(),
            reason: reason.map(str::to_owned),
            trust: None,
        }
    }

    fn member_scopes() -> Vec<&'static str> {
        MEMBER_SCOPES.iter().map(|s| s.as_str()).collect()
    }

    #[test]
    fn each_class_says_what_to_do() {
        assert!(
            explained(Error::Authentication { message: "expired".into(), reason: None }).contains("gatewayctl login")
        );
        let late = Error::Authentication { message: "expired".into(), reason: Some("signature_expired".into()) };
        assert!(explained(late).contains("check this machine's clock"));
        let replayed = Error::Authentication { message: "nonce used".into(), reason: Some("nonce_replayed".into()) };
        assert!(!explained(replayed).contains("gatewayctl login"), "a new login does not fix a replayed nonce");
        let refused = authorization("refused", &[], &["coop:write"], None);
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
    fn a_missing_scope_says_who_can_have_it() {
        let member_scope = explained(authorization("missing scope", &["ledger:write"], &[], None));
        assert!(
            member_scope.contains(
                "your token lacks ledger:write: log in again with `gatewayctl login`, which asks for every scope a member may have (admins: `--scopes all`)"
            ),
            "{member_scope}"
        );
        let admin_scope = explained(authorization("missing scope", &["coop:write"], &[], None));
        assert!(
            admin_scope.contains(
                "this needs coop:write, which only admins of the cooperative get: an admin logs in with `gatewayctl login --scopes all`; a member asks an admin to do it"
            ),
            "{admin_scope}"
        );
    }

    #[test]
    fn a_non_member_is_sent_to_an_admin_not_back_to_login() {
        let ask = "ask one of its admins to run `gatewayctl coop add-member <your DID>` (`gatewayctl key show` prints your DID), then log in again";
        // The default login (member scopes), then a bootstrap login, then one that did not ask
        // for coop:read: the gateway's message tells.
        for error in [
            authorization("did:key:z6Mk is not a member of cooperative 'bakery'", &[], &member_scopes(), None),
            authorization("refused", &[], &["coop:read", "coop:write"], None),
            authorization("did:key:z6Mk is not a member of cooperative 'bakery'", &[], &["ledger:read"], None),
        ] {
            let text = explained(error);
            assert!(text.contains(&format!("you are not a member of this cooperative: {ask}")), "{text}");
            assert!(
                text.contains("pick an id that is not taken: `gatewayctl --coop <new id> login --scopes bootstrap`")
            );
            assert!(
                !text.contains("--scopes member") && !text.contains("`gatewayctl login --scopes bootstrap`"),
                "{text}"
            );
        }
        // A token that no longer opens the coop, and a stream ended by a removal.
        for reason in ["not_a_member", "membership_revoked"] {
            let text = explained(authorization("forbidden", &[], &[], Some(reason)));
            assert!(
                text.contains(&format!("you are not (or no longer) a member of this cooperative: {ask}")),
                "{text}"
            );
        }
        let bare = explained(authorization("forbidden", &[], &[], None));
        assert!(
            bare.contains(&format!(
                "check that you logged in for the right cooperative (`gatewayctl --coop <id> login`); if you are not one of its members, {ask}"
            )),
            "{bare}"
        );
    }

    #[test]
    fn a_cooperative_that_does_not_exist_is_founded_not_logged_into() {
        let refused: Vec<&str> = member_scopes().into_iter().filter(|s| *s != "coop:read").collect();
        let text =
            explained(authorization("scopes not allowed for did:key:z6Mk in cooperative 'new'", &[], &refused, None));
        assert!(
            text.contains(
                "this cooperative does not exist yet (until it does, a login gets only coop:read and coop:write): found it with `gatewayctl login --scopes bootstrap`, then `gatewayctl coop create --name <name>`"
            ),
            "{text}"
        );
        assert!(
            text.contains("if the id is right, you are not a member: ask one of its admins to run `gatewayctl coop add-member <your DID>`"),
            "{text}"
        );
    }

    #[test]
    fn admin_scopes_refused_to_a_member_are_for_admins() {
        let text = explained(authorization("scopes not allowed", &[], &["coop:write", "oracle:write"], None));
        assert!(
            text.contains(
                "your role does not allow coop:write, oracle:write: only admins get them. Log in without them (`gatewayctl login` asks for every scope a member may have), and ask an admin to do what needs them"
            ),
            "{text}"
        );
    }

    #[test]
    fn trust_comes_from_the_anchors() {
        let short = Error::Authorization {
            message: "insufficient trust".into(),
            required_scopes: vec![],
            refused_scopes: vec![],
            reason: None,
            trust: Some(gateway_client::TrustShortfall { required: 0.4, actual: 0.0 }),
        };
        let text = explained(short);
        assert!(text.contains("your trust score is 0.00, this needs 0.40"), "{text}");
        assert!(
            text.contains(
                "trust flows from the gateway's trust anchors: ask the operator to start gatewayd with --trust-anchor <DID of a founder> (or `gatewayd init --founder`), and a member with trust to vouch for you (`gatewayctl trust set <your DID> <score>`)"
            ),
            "{text}"
        );
        assert!(!text.contains("ask members to vouch"), "{text}");
    }

    #[test]
    fn refusal_reasons_get_their_own_advice() {
        let identity = explained(authorization("identity-only", &[], &[], Some("identity_only")));
        assert!(identity.contains("log in for one with `gatewayctl --coop <id> login`"), "{identity}");
        let admin = explained(authorization("admins only", &[], &[], Some("admin_only")));
        assert!(admin.contains("only an admin of the cooperative can do this: ask one of its admins"), "{admin}");
        let other_coop = explained(authorization("forbidden", &[], &[], Some("the token is for coop c2")));
        assert!(
            other_coop.contains(
                "the token is for coop c2: log in for the right cooperative with `gatewayctl --coop <id> login`"
            ),
            "{other_coop}"
        );
        // A message that says it all gets no hint, rather than a wrong one.
        let submitter =
            explained(authorization("only the submitter may cancel a task", &[], &[], Some("not_the_submitter")));
        assert_eq!(submitter, "error: not authorized: only the submitter may cancel a task");
    }

    #[test]
    fn context_is_kept_and_other_errors_pass_through() {
        let error = anyhow::Error::new(Error::Authentication { message: "m".into(), reason: None }).context("paying");
        assert!(explain(&error).starts_with("error: paying: authentication failed"));
        assert_eq!(explain(&anyhow::anyhow!("plain")), "error: plain");
    }
}
