//! The interface's error kinds, independent of transport.
//!
//! Every library crate has its own error enum for its own failures; they convert into [`Error`],
//! which names each failure the way INTERFACE.md does (code, status, details). The HTTP layer
//! turns an [`Error`] into the interface's JSON body; nothing here writes JSON bodies or knows
//! about response types.

use std::borrow::Cow;
use std::collections::BTreeMap;

use crate::amount::Amount;
use crate::scope::Scope;

/// Field name → messages, the `details.fields` of a `BAD_REQUEST`.
pub type FieldErrors = BTreeMap<String, Vec<String>>;

/// The interface's error codes, each with its fixed HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    /// 400: validation failure.
    BadRequest,
    /// 400: a syntactically valid DID of a method the gateway cannot resolve.
    UnsupportedDidMethod,
    /// 401: missing, invalid or expired credentials.
    AuthenticationFailed,
    /// 403: missing scope, foreign cooperative, or not the account's owner.
    AuthorizationFailed,
    /// 403: trust score below a gate.
    InsufficientTrust,
    /// 404: no such resource (or not visible to the caller).
    NotFound,
    /// 405: the path exists, the method does not.
    MethodNotAllowed,
    /// 409: duplicate, invalid state transition, idempotency-key reuse.
    Conflict,
    /// 409: the payer would pass its credit limit.
    InsufficientCredit,
    /// 409: a conversion's target amount is outside the client's bounds.
    SlippageExceeded,
    /// 408: the request's headers or body did not arrive in time (INTERFACE.md §1: 10 s, 30 s).
    RequestTimeout,
    /// 413: request body over the limit.
    PayloadTooLarge,
    /// 429: a rate-limiting layer refused the request.
    RateLimitExceeded,
    /// 404: the proposal has no receipt (and why).
    ReceiptUnavailable,
    /// 500: a fault of the gateway; details are logged, never sent.
    InternalError,
    /// 503: a dependency is unreachable or the gateway is stopping.
    ServiceUnavailable,
}

impl ErrorCode {
    /// The `code` field's spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "BAD_REQUEST",
            ErrorCode::UnsupportedDidMethod => "UNSUPPORTED_DID_METHOD",
            ErrorCode::AuthenticationFailed => "AUTHENTICATION_FAILED",
            ErrorCode::AuthorizationFailed => "AUTHORIZATION_FAILED",
            ErrorCode::InsufficientTrust => "INSUFFICIENT_TRUST",
            ErrorCode::NotFound => "NOT_FOUND",
            ErrorCode::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            ErrorCode::Conflict => "CONFLICT",
            ErrorCode::InsufficientCredit => "INSUFFICIENT_CREDIT",
            ErrorCode::SlippageExceeded => "SLIPPAGE_EXCEEDED",
            ErrorCode::RequestTimeout => "REQUEST_TIMEOUT",
            ErrorCode::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            ErrorCode::RateLimitExceeded => "RATE_LIMIT_EXCEEDED",
            ErrorCode::ReceiptUnavailable => "RECEIPT_UNAVAILABLE",
            ErrorCode::InternalError => "INTERNAL_ERROR",
            ErrorCode::ServiceUnavailable => "SERVICE_UNAVAILABLE",
        }
    }

    /// The HTTP status INTERFACE.md assigns to the code.
    pub const fn status(self) -> u16 {
        match self {
            ErrorCode::BadRequest | ErrorCode::UnsupportedDidMethod => 400,
            ErrorCode::AuthenticationFailed => 401,
            ErrorCode::AuthorizationFailed | ErrorCode::InsufficientTrust => 403,
            ErrorCode::NotFound | ErrorCode::ReceiptUnavailable => 404,
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::Conflict | ErrorCode::InsufficientCredit | ErrorCode::SlippageExceeded => 409,
            ErrorCode::RequestTimeout => 408,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::RateLimitExceeded => 429,
            ErrorCode::InternalError => 500,
            ErrorCode::ServiceUnavailable => 503,
        }
    }
}

/// What an authorization refusal adds to `details`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum AuthorizationDetail {
    /// `{"required_scopes": [...]}`: the route needs these scopes.
    RequiredScopes(Vec<Scope>),
    /// `{"refused_scopes": [...]}`: token issuance refused these requested scopes.
    RefusedScopes(Vec<String>),
    /// `{"coop_id"}`: the token is not for this cooperative.
    CoopId(String),
    /// `{"reason"}`: any other refusal, e.g. paying from someone else's account.
    Reason(String),
}

/// The rate-limiting layer that refused a request (`details.layer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum RateLimitLayer {
    /// Per client IP, on the unauthenticated routes.
    Ip,
    /// Per token DID, by trust tier.
    Did,
    /// Per payer DID per hour, on payment-creating routes.
    Velocity,
}

impl RateLimitLayer {
    /// The wire spelling.
    pub const fn as_str(self) -> &'static str {
        match self {
            RateLimitLayer::Ip => "ip",
            RateLimitLayer::Did => "did",
            RateLimitLayer::Velocity => "velocity",
        }
    }
}

/// A failure INTERFACE.md names. The `Display` text is the `error` message sent to clients,
/// except for [`Error::Internal`], whose text is only logged.
///
/// It serialises (serde's externally tagged form) so a decided refusal can be stored and
/// replayed as itself: an `Idempotency-Key`'s stored answer is the operation's `Result`.
#[derive(Debug, Clone, PartialEq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum Error {
    /// 400 `BAD_REQUEST`.
    #[error("{message}")]
    BadRequest {
        /// Human message.
        message: String,
        /// Per-field messages, possibly empty.
        fields: FieldErrors,
    },
    /// 400 `UNSUPPORTED_DID_METHOD`.
    #[error("unsupported DID method '{method}': the gateway resolves did:key and did:icn")]
    UnsupportedDidMethod {
        /// The method the DID uses.
        method: String,
    },
    /// 401 `AUTHENTICATION_FAILED`.
    #[error("{0}")]
    AuthenticationFailed(String),
    /// 401 `AUTHENTICATION_FAILED` with `details.reason = "signature_required"`: a critical
    /// operation arrived unsigned, and its coop requires signed requests (INTERFACE.md §11). The
    /// unit of work decides it from the coop it reads, so a change of the setting cannot slip
    /// between the check and the write.
    #[error("this cooperative requires a request signature on this operation")]
    SignatureRequired,
    /// 403 `AUTHORIZATION_FAILED`.
    #[error("{message}")]
    AuthorizationFailed {
        /// Human message.
        message: String,
        /// What to put in `details`.
        detail: AuthorizationDetail,
    },
    /// 403 `INSUFFICIENT_TRUST`.
    #[error("insufficient trust: this operation needs a trust score of at least {required}, yours is {actual}")]
    InsufficientTrust {
        /// The gate.
        required: f64,
        /// The caller's score.
        actual: f64,
    },
    /// 404 `NOT_FOUND`.
    #[error("{resource} '{id}' not found")]
    NotFound {
        /// Resource type, e.g. `coop`.
        resource: Cow<'static, str>,
        /// The id that was looked up.
        id: String,
    },
    /// 409 `CONFLICT`.
    #[error("conflict: {reason}")]
    Conflict {
        /// Why the request conflicts with the current state.
        reason: String,
    },
    /// 409 `INSUFFICIENT_CREDIT`.
    #[error("insufficient credit: the payment would take the balance below the credit limit {credit_limit} {currency}")]
    InsufficientCredit {
        /// The payer's balance before the payment.
        balance: Amount,
        /// The payer's credit limit (a floor, zero or negative).
        credit_limit: Amount,
        /// The currency of the account.
        currency: String,
    },
    /// 409 `SLIPPAGE_EXCEEDED`.
    #[error("slippage exceeded: the net target amount {net_target_amount} is outside the bound {bound}")]
    SlippageExceeded {
        /// The amount the payee would receive.
        net_target_amount: Amount,
        /// The client's bound that it violates.
        bound: Amount,
    },
    /// 429 `RATE_LIMIT_EXCEEDED`.
    #[error("{message}")]
    RateLimited {
        /// Human message (the velocity layer's carries `count/limit per hour`).
        message: String,
        /// Which layer refused.
        layer: RateLimitLayer,
        /// The limit of that layer for this caller.
        limit: u64,
        /// Seconds until a retry can succeed.
        retry_after_secs: u64,
        /// Velocity only: transactions counted in the window.
        count: Option<u64>,
    },
    /// 404 `RECEIPT_UNAVAILABLE`.
    #[error("receipt unavailable: {reason}")]
    ReceiptUnavailable {
        /// Machine reason, e.g. `keystore_locked`, `not_closed`.
        reason: String,
    },
    /// 500 `INTERNAL_ERROR`; the text is for logs only.
    #[error("internal error: {0}")]
    Internal(String),
    /// 503 `SERVICE_UNAVAILABLE`.
    #[error("service unavailable: {0}")]
    ServiceUnavailable(String),
}

impl Error {
    /// A bad request without field details.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Error::BadRequest { message: message.into(), fields: FieldErrors::new() }
    }

    /// A bad request blaming one field; the message is also the field's message.
    pub fn bad_request_field(field: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        let mut fields = FieldErrors::new();
        fields.insert(field.to_owned(), vec![message.clone()]);
        Error::BadRequest { message, fields }
    }

    /// An authorization failure for missing scopes.
    pub fn missing_scopes(required: Vec<Scope>) -> Self {
        let names: Vec<&str> = required.iter().map(|s| s.as_str()).collect();
        Error::AuthorizationFailed {
            message: format!("insufficient permissions: requires {}", names.join(", ")),
            detail: AuthorizationDetail::RequiredScopes(required),
        }
    }

    /// An authorization failure with a reason.
    pub fn forbidden(reason: impl Into<String>) -> Self {
        let reason = reason.into();
        Error::AuthorizationFailed {
            message: format!("forbidden: {reason}"),
            detail: AuthorizationDetail::Reason(reason),
        }
    }

    /// An authorization failure whose `details.reason` is a machine code (`admin_only`,
    /// `not_a_domain_member`, `identity_only`, `not_the_executor`, …), with a human message beside it.
    pub fn denied(reason: &'static str, message: impl Into<String>) -> Self {
        Error::AuthorizationFailed { message: message.into(), detail: AuthorizationDetail::Reason(reason.to_owned()) }
    }

    /// A conflict with a reason.
    pub fn conflict(reason: impl Into<String>) -> Self {
        Error::Conflict { reason: reason.into() }
    }

    /// A missing resource.
    pub fn not_found(resource: &'static str, id: impl Into<String>) -> Self {
        Error::NotFound { resource: Cow::Borrowed(resource), id: id.into() }
    }

    /// The error code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Error::BadRequest { .. } => ErrorCode::BadRequest,
            Error::UnsupportedDidMethod { .. } => ErrorCode::UnsupportedDidMethod,
            Error::AuthenticationFailed(_) | Error::SignatureRequired => ErrorCode::AuthenticationFailed,
            Error::AuthorizationFailed { .. } => ErrorCode::AuthorizationFailed,
            Error::InsufficientTrust { .. } => ErrorCode::InsufficientTrust,
            Error::NotFound { .. } => ErrorCode::NotFound,
            Error::Conflict { .. } => ErrorCode::Conflict,
            Error::InsufficientCredit { .. } => ErrorCode::InsufficientCredit,
            Error::SlippageExceeded { .. } => ErrorCode::SlippageExceeded,
            Error::RateLimited { .. } => ErrorCode::RateLimitExceeded,
            Error::ReceiptUnavailable { .. } => ErrorCode::ReceiptUnavailable,
            Error::Internal(_) => ErrorCode::InternalError,
            Error::ServiceUnavailable(_) => ErrorCode::ServiceUnavailable,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_error_survives_a_round_trip_through_json() {
        let amount = |t: &str| Amount::parse_decimal(t).unwrap();
        let errors = [
            Error::bad_request_field("amount", "must be positive"),
            Error::UnsupportedDidMethod { method: "web".into() },
            Error::AuthenticationFailed("expired".into()),
            Error::missing_scopes(vec![Scope::LedgerWrite]),
            Error::AuthorizationFailed {
                message: "m".into(),
                detail: AuthorizationDetail::RefusedScopes(vec!["x".into()]),
            },
            Error::AuthorizationFailed { message: "m".into(), detail: AuthorizationDetail::CoopId("c".into()) },
            Error::denied("admin_only", "admins only"),
            Error::InsufficientTrust { required: 0.5, actual: 0.25 },
            Error::not_found("coop", "c1"),
            Error::conflict("taken"),
            Error::InsufficientCredit {
                balance: amount("-99.5"),
                credit_limit: amount("-100"),
                currency: "hours".into(),
            },
            Error::SlippageExceeded { net_target_amount: amount("0.000001"), bound: amount("1") },
            Error::RateLimited {
                message: "slow down".into(),
                layer: RateLimitLayer::Velocity,
                limit: 10,
                retry_after_secs: 3,
                count: Some(10),
            },
            Error::ReceiptUnavailable { reason: "keystore_locked".into() },
            Error::Internal("disk".into()),
            Error::ServiceUnavailable("stopping".into()),
        ];
        for error in errors {
            let text = serde_json::to_string(&error).unwrap();
            let back: Error = serde_json::from_str(&text).unwrap();
            assert_eq!(back, error, "{text}");
            assert_eq!(back.to_string(), error.to_string());
        }
        assert!(
            serde_json::from_str::<Error>(
                r#"{"AuthorizationFailed":{"message":"m","detail":{"RequiredScopes":["nope"]}}}"#
            )
            .is_err()
        );
    }

    #[test]
    fn codes_map_to_contract_statuses() {
        assert_eq!(Error::bad_request("x").code().status(), 400);
        assert_eq!(Error::missing_scopes(vec![Scope::LedgerRead]).code().status(), 403);
        assert_eq!(Error::conflict("dup").code().as_str(), "CONFLICT");
        assert_eq!(ErrorCode::RateLimitExceeded.status(), 429);
        assert_eq!(ErrorCode::ReceiptUnavailable.status(), 404);
    }

    #[test]
    fn denied_keeps_the_reason_code_apart_from_the_message() {
        let e = Error::denied("identity_only", "this token is identity-only");
        assert_eq!(e.to_string(), "this token is identity-only");
        assert!(
            matches!(e, Error::AuthorizationFailed { detail: AuthorizationDetail::Reason(r), .. } if r == "identity_only")
        );
    }

    #[test]
    fn missing_scope_message_names_them() {
        let e = Error::missing_scopes(vec![Scope::LedgerRead, Scope::LedgerWrite]);
        assert_eq!(e.to_string(), "insufficient permissions: requires ledger:read, ledger:write");
    }
}
