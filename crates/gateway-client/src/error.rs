//! The client-side error classes of INTERFACE.md §2.3, parsed from the error body
//! `{"error", "code", "details"}`, the status and the `Retry-After` header.
//!
//! Each variant is one thing a caller does differently: log in again, ask for other scopes, fix
//! a field, wait, give up on an id, or retry later. Parsing never fails: a body that is not the
//! error body's shape still yields the class its status implies. This module does not decide
//! whether to retry (see [`crate::retry`]) and does not print advice for humans (the CLI does).

use std::collections::BTreeMap;

use serde_json::Value;

/// Everything a gateway call can fail with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// 401: the token is missing, invalid or expired, or a login signature was refused. Log in
    /// again.
    #[error("authentication failed: {message}")]
    Authentication {
        /// The gateway's message.
        message: String,
        /// `details.reason` when the gateway gave one: a request-signature refusal
        /// (`signature_required`, `nonce_replayed`, … in `docs/SIGNING.md`) or a login's reason.
        reason: Option<String>,
    },
    /// 403: the token lacks a scope (`required_scopes`), a login asked for scopes the role does
    /// not allow (`refused_scopes`), the path names another cooperative, or the caller's trust
    /// is too low (`trust`, the interface's `INSUFFICIENT_TRUST`).
    #[error("not authorized: {message}")]
    Authorization {
        /// The gateway's message.
        message: String,
        /// Scopes the route needs and the token does not carry.
        required_scopes: Vec<String>,
        /// Scopes a login asked for that the member's role does not allow.
        refused_scopes: Vec<String>,
        /// The gateway's free-form reason, or the cooperative the token is limited to.
        reason: Option<String>,
        /// Set when the refusal is `INSUFFICIENT_TRUST`.
        trust: Option<TrustShortfall>,
    },
    /// 400: the request is invalid; `fields` maps each faulty field (a JSON path such as
    /// `payments[2].amount`) to its messages, and is empty when no single field is to blame.
    #[error("invalid request: {message}")]
    Validation {
        /// `BAD_REQUEST` or `UNSUPPORTED_DID_METHOD`.
        code: String,
        /// The gateway's message.
        message: String,
        /// Field → messages.
        fields: BTreeMap<String, Vec<String>>,
    },
    /// 429: a rate limit refused the request before it had any effect; it may be sent again
    /// after `retry_after_secs`.
    #[error("rate limited ({}): retry in {retry_after_secs} s", layer.as_deref().unwrap_or("unknown layer"))]
    RateLimited {
        /// The gateway's message.
        message: String,
        /// From `Retry-After`, else `details.retry_after_secs`, else 1.
        retry_after_secs: u64,
        /// `ip`, `did` or `velocity`.
        layer: Option<String>,
        /// The limit that was hit.
        limit: Option<u64>,
        /// The count in the window (velocity only).
        count: Option<u64>,
    },
    /// 404: no such resource (`NOT_FOUND` with `resource` and `id`), or a receipt that does
    /// not exist (`RECEIPT_UNAVAILABLE` with `reason`, e.g. `keystore_locked`).
    #[error("{resource} '{id}' not found{}", reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default())]
    NotFound {
        /// `NOT_FOUND` or `RECEIPT_UNAVAILABLE`.
        code: String,
        /// The gateway's message.
        message: String,
        /// What kind of thing was looked for (`coop`, `proposal`, `route`, `receipt`, …).
        resource: String,
        /// Its id, as the gateway reported it (may be empty).
        id: String,
        /// Why a receipt is unavailable.
        reason: Option<String>,
    },
    /// 409: the request conflicts with the current state: `CONFLICT` (duplicate id, invalid
    /// transition, idempotency-key reuse), `INSUFFICIENT_CREDIT`, `SLIPPAGE_EXCEEDED`.
    #[error("conflict ({code}): {message}")]
    Conflict {
        /// The error code.
        code: String,
        /// The gateway's message.
        message: String,
        /// The code-specific details (`reason`, `balance`/`credit_limit`, …).
        details: Value,
    },
    /// Any other 4xx (405 `METHOD_NOT_ALLOWED`, 413 `PAYLOAD_TOO_LARGE`, …).
    #[error("request refused ({status} {code}): {message}")]
    Api {
        /// HTTP status.
        status: u16,
        /// The error code.
        code: String,
        /// The gateway's message.
        message: String,
        /// The details object.
        details: Value,
    },
    /// 5xx: the gateway failed. `retryable` is true for 502, 503 and 504, which a restart, a
    /// proxy or an overloaded store produce and which usually pass.
    #[error("gateway error {status}: {message}")]
    Server {
        /// HTTP status.
        status: u16,
        /// Whether sending again later is expected to help.
        retryable: bool,
        /// The gateway's message.
        message: String,
    },
    /// The request did not complete: connection refused, reset, timed out, TLS failure.
    /// `connect` is true when no byte reached the gateway, which makes any request safe to
    /// send again.
    #[error("could not reach the gateway: {message}")]
    Transport {
        /// What failed.
        message: String,
        /// The connection could not be opened.
        connect: bool,
    },
    /// A success status with a body that is not what the route documents.
    #[error("unexpected response ({status}): {message}")]
    UnexpectedResponse {
        /// HTTP status.
        status: u16,
        /// What did not parse.
        message: String,
    },
    /// The client was used in a way that cannot work: no token and no key to log in with, a
    /// malformed key file, a base URL that cannot be a base.
    #[error("{0}")]
    Usage(String),
}

/// The scores of an `INSUFFICIENT_TRUST` refusal.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TrustShortfall {
    /// The score the operation needs (0.3 compute, 0.4 proposals, 0.5 high-value payments).
    pub required: f64,
    /// The caller's score.
    pub actual: f64,
}

/// Convenience alias.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Builds the error of a non-success response. `retry_after` is the `Retry-After` header in
    /// seconds, if present and numeric.
    pub fn from_response(status: u16, retry_after: Option<u64>, body: &[u8]) -> Error {
        let parsed: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let message = parsed
            .get("error")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| fallback_message(status, body));
        let code = parsed.get("code").and_then(Value::as_str).unwrap_or("").to_owned();
        let details = match parsed.get("details") {
            Some(Value::Object(map)) => Value::Object(map.clone()),
            _ => Value::Object(Default::default()),
        };
        let text = |key: &str| details.get(key).and_then(Value::as_str).map(str::to_owned);
        let number = |key: &str| details.get(key).and_then(Value::as_u64);
        match status {
            401 => Error::Authentication { message, reason: text("reason") },
            403 => Error::Authorization {
                message,
                required_scopes: strings(details.get("required_scopes")),
                refused_scopes: strings(details.get("refused_scopes")),
                reason: text("reason").or_else(|| text("coop_id").map(|coop| format!("the token is for coop {coop}"))),
                trust: (code == "INSUFFICIENT_TRUST").then(|| TrustShortfall {
                    required: details.get("required").and_then(Value::as_f64).unwrap_or(0.0),
                    actual: details.get("actual").and_then(Value::as_f64).unwrap_or(0.0),
                }),
            },
            400 => Error::Validation {
                code: if code.is_empty() { "BAD_REQUEST".into() } else { code },
                message,
                fields: fields(details.get("fields")),
            },
            429 => Error::RateLimited {
                message,
                retry_after_secs: retry_after.or_else(|| number("retry_after_secs")).unwrap_or(1).max(1),
                layer: text("layer"),
                limit: number("limit"),
                count: number("count"),
            },
            404 => Error::NotFound {
                resource: text("resource").unwrap_or_else(|| {
                    if code == "RECEIPT_UNAVAILABLE" { "receipt".into() } else { "resource".into() }
                }),
                id: text("id").unwrap_or_default(),
                reason: text("reason"),
                code: if code.is_empty() { "NOT_FOUND".into() } else { code },
                message,
            },
            409 => Error::Conflict { code: if code.is_empty() { "CONFLICT".into() } else { code }, message, details },
            500..=599 => Error::Server { status, retryable: matches!(status, 502..=504), message },
            _ => Error::Api { status, code, message, details },
        }
    }

    /// Whether the error is a 5xx that is expected to pass (502, 503, 504).
    pub fn is_retryable_server_error(&self) -> bool {
        matches!(self, Error::Server { retryable: true, .. })
    }

    /// The interface's code, when the gateway sent one.
    pub fn code(&self) -> Option<&str> {
        match self {
            Error::Authorization { trust: Some(_), .. } => Some("INSUFFICIENT_TRUST"),
            Error::Authorization { .. } => Some("AUTHORIZATION_FAILED"),
            Error::Validation { code, .. }
            | Error::NotFound { code, .. }
            | Error::Conflict { code, .. }
            | Error::Api { code, .. } => Some(code),
            Error::Authentication { .. } => Some("AUTHENTICATION_FAILED"),
            Error::RateLimited { .. } => Some("RATE_LIMIT_EXCEEDED"),
            _ => None,
        }
    }

    pub(crate) fn transport(err: &reqwest::Error) -> Error {
        // `reqwest::Error`'s own text is terse ("error sending request"); the source chain says
        // what actually failed (connection refused, TLS, timeout).
        let mut message = err.to_string();
        let mut source = std::error::Error::source(err);
        while let Some(cause) = source {
            message.push_str(": ");
            message.push_str(&cause.to_string());
            source = cause.source();
        }
        Error::Transport { message, connect: err.is_connect() }
    }
}

fn fallback_message(status: u16, body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() { format!("HTTP {status}") } else { text.chars().take(200).collect() }
}

fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default()
}

fn fields(value: Option<&Value>) -> BTreeMap<String, Vec<String>> {
    let Some(Value::Object(map)) = value else {
        return BTreeMap::new();
    };
    map.iter()
        .map(|(field, messages)| {
            let messages = match messages {
                Value::Array(items) => items.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
                Value::String(one) => vec![one.clone()],
                _ => Vec::new(),
            };
            (field.clone(), messages)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(status: u16, retry_after: Option<u64>, body: Value) -> Error {
        Error::from_response(status, retry_after, body.to_string().as_bytes())
    }

    #[test]
    fn authentication_from_401() {
        let err = parse(401, None, json!({"error": "invalid token", "code": "AUTHENTICATION_FAILED", "details": {}}));
        assert_eq!(err, Error::Authentication { message: "invalid token".into(), reason: None });
        assert_eq!(err.code(), Some("AUTHENTICATION_FAILED"));
        let replayed = parse(
            401,
            None,
            json!({"error": "the request signature's nonce was already used", "code": "AUTHENTICATION_FAILED", "details": {"reason": "nonce_replayed"}}),
        );
        assert!(
            matches!(&replayed, Error::Authentication { reason: Some(reason), .. } if reason == "nonce_replayed"),
            "{replayed:?}"
        );
    }

    #[test]
    fn authorization_lists_required_and_refused_scopes() {
        let err = parse(
            403,
            None,
            json!({"error": "missing scope", "code": "AUTHORIZATION_FAILED", "details": {"required_scopes": ["ledger:write"]}}),
        );
        let Error::Authorization { required_scopes, refused_scopes, trust, .. } = &err else { panic!("{err:?}") };
        assert_eq!(required_scopes, &["ledger:write"]);
        assert!(refused_scopes.is_empty());
        assert_eq!((trust, err.code()), (&None, Some("AUTHORIZATION_FAILED")));

        let err = parse(
            403,
            None,
            json!({"error": "refused", "code": "AUTHORIZATION_FAILED", "details": {"refused_scopes": ["coop:write", "oracle:write"]}}),
        );
        let Error::Authorization { refused_scopes, .. } = &err else { panic!("{err:?}") };
        assert_eq!(refused_scopes, &["coop:write", "oracle:write"]);
    }

    #[test]
    fn insufficient_trust_is_an_authorization_error_with_scores() {
        let err = parse(
            403,
            None,
            json!({"error": "trust too low", "code": "INSUFFICIENT_TRUST", "details": {"required": 0.4, "actual": 0.1}}),
        );
        let Error::Authorization { trust, .. } = &err else { panic!("{err:?}") };
        assert_eq!(*trust, Some(TrustShortfall { required: 0.4, actual: 0.1 }));
        assert_eq!(err.code(), Some("INSUFFICIENT_TRUST"));
        let err = parse(
            403,
            None,
            json!({"error": "other coop", "code": "AUTHORIZATION_FAILED", "details": {"coop_id": "c2"}}),
        );
        assert!(matches!(err, Error::Authorization { reason: Some(ref r), .. } if r == "the token is for coop c2"));
    }

    #[test]
    fn validation_maps_fields_to_messages() {
        let err = parse(
            400,
            None,
            json!({"error": "bad", "code": "BAD_REQUEST", "details": {"fields": {"amount": ["amount must be greater than 0"], "payments[2].to": ["invalid DID"]}}}),
        );
        let Error::Validation { fields, .. } = &err else { panic!("{err:?}") };
        assert_eq!(fields["amount"], vec!["amount must be greater than 0"]);
        assert_eq!(fields["payments[2].to"], vec!["invalid DID"]);
        let err = parse(400, None, json!({"error": "malformed JSON", "code": "BAD_REQUEST", "details": {}}));
        assert!(matches!(err, Error::Validation { ref fields, .. } if fields.is_empty()));
    }

    #[test]
    fn rate_limit_prefers_the_header_then_details() {
        let body = json!({"error": "slow down", "code": "RATE_LIMIT_EXCEEDED",
                          "details": {"layer": "velocity", "limit": 10, "retry_after_secs": 30, "count": 10}});
        let err = parse(429, Some(12), body.clone());
        assert_eq!(
            err,
            Error::RateLimited {
                message: "slow down".into(),
                retry_after_secs: 12,
                layer: Some("velocity".into()),
                limit: Some(10),
                count: Some(10),
            }
        );
        assert!(matches!(parse(429, None, body), Error::RateLimited { retry_after_secs: 30, .. }));
        assert!(matches!(parse(429, None, json!({})), Error::RateLimited { retry_after_secs: 1, layer: None, .. }));
    }

    #[test]
    fn not_found_names_resource_and_id() {
        let err = parse(
            404,
            None,
            json!({"error": "proposal p1 not found", "code": "NOT_FOUND", "details": {"resource": "proposal", "id": "p1"}}),
        );
        assert_eq!(err.to_string(), "proposal 'p1' not found");
        let err = parse(
            404,
            None,
            json!({"error": "no receipt", "code": "RECEIPT_UNAVAILABLE", "details": {"reason": "keystore_locked"}}),
        );
        let Error::NotFound { code, resource, reason, .. } = &err else { panic!("{err:?}") };
        assert_eq!(
            (code.as_str(), resource.as_str(), reason.as_deref()),
            ("RECEIPT_UNAVAILABLE", "receipt", Some("keystore_locked"))
        );
    }

    #[test]
    fn conflicts_keep_code_and_details() {
        let err = parse(
            409,
            None,
            json!({"error": "credit", "code": "INSUFFICIENT_CREDIT", "details": {"balance": -1000, "credit_limit": -1000, "currency": "hours"}}),
        );
        let Error::Conflict { code, details, .. } = &err else { panic!("{err:?}") };
        assert_eq!(code, "INSUFFICIENT_CREDIT");
        assert_eq!(details["currency"], "hours");
    }

    #[test]
    fn server_errors_are_retryable_only_when_transient() {
        for (status, retryable) in [(500, false), (502, true), (503, true), (504, true), (501, false)] {
            let err = parse(status, None, json!({"error": "x", "code": "INTERNAL_ERROR", "details": {}}));
            assert_eq!(err.is_retryable_server_error(), retryable, "{status}");
        }
    }

    #[test]
    fn other_client_errors_and_non_contract_bodies() {
        let err = parse(
            413,
            None,
            json!({"error": "too large", "code": "PAYLOAD_TOO_LARGE", "details": {"limit_bytes": 1048576}}),
        );
        assert!(matches!(err, Error::Api { status: 413, ref code, .. } if code == "PAYLOAD_TOO_LARGE"));
        // A proxy's HTML page still yields the class of its status.
        let err = Error::from_response(502, None, b"<html>Bad Gateway</html>");
        assert_eq!(err, Error::Server { status: 502, retryable: true, message: "<html>Bad Gateway</html>".into() });
        let err = Error::from_response(404, None, b"");
        assert!(matches!(err, Error::NotFound { ref message, .. } if message == "HTTP 404"));
    }
}
