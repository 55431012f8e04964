//! The one error type of the HTTP layer and its single `IntoResponse`.
//!
//! Every failure a client can see becomes `{"error", "code", "details"}` here, with the status
//! INTERFACE.md §2.2 fixes for the code. Internal errors reach the client as an opaque message; their cause
//! is attached to the response as an extension and logged once, with the request id, by the
//! edge (`edge::Edge`), which also counts an oversized body as misbehaviour.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use gateway_core::{Amount, AuthorizationDetail, Error, ErrorCode, JsonText};
use serde_json::{Map, Value, json};

/// A failure as the HTTP layer reports it.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// An interface error from the domain, authentication or validation; status from its code.
    #[error(transparent)]
    Core(Error),
    /// 413: the body is larger than the limit.
    #[error("request body too large: the limit is {limit_bytes} bytes")]
    PayloadTooLarge {
        /// The configured limit.
        limit_bytes: usize,
    },
    /// 405: the path exists, the method does not.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// 408: the request's body did not arrive within the body deadline.
    #[error("the request's body did not arrive in time")]
    BodyTimeout,
    /// 408: part of a request's head arrived, not all of it within the head deadline (written
    /// by the connection itself, before hyper has a request).
    #[error("the request's headers did not arrive within the time allowed")]
    HeadTimeout,
    /// 401: a request signature was refused, or a required one is missing (INTERFACE.md §11);
    /// `details.reason` names why, and the answer carries `Accept-Signature`.
    #[error("{0}")]
    RequestSignature(gateway_httpsig::Failure),
}

impl From<Error> for ApiError {
    /// The domain's [`Error::SignatureRequired`] (decided in a unit of work) is answered as the
    /// edge answers a missing signature: one refusal, with `Accept-Signature`, whoever decides.
    fn from(err: Error) -> Self {
        match err {
            Error::SignatureRequired => ApiError::RequestSignature(gateway_httpsig::Failure::SignatureRequired),
            err => ApiError::Core(err),
        }
    }
}

/// The cause of an internal error, carried to the logging middleware in response extensions.
#[derive(Debug, Clone)]
pub struct InternalCause(pub String);

impl ApiError {
    /// The error code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            ApiError::Core(e) => e.code(),
            ApiError::PayloadTooLarge { .. } => ErrorCode::PayloadTooLarge,
            ApiError::MethodNotAllowed => ErrorCode::MethodNotAllowed,
            ApiError::BodyTimeout | ApiError::HeadTimeout => ErrorCode::RequestTimeout,
            ApiError::RequestSignature(_) => ErrorCode::AuthenticationFailed,
        }
    }

    fn details(&self) -> JsonText {
        /// The amounts of a ledger refusal, serialised straight to text so that every digit
        /// reaches the client (a `Value` would hold them as `f64`s).
        #[derive(serde::Serialize)]
        struct Credit<'a> {
            balance: Amount,
            credit_limit: Amount,
            currency: &'a str,
        }
        #[derive(serde::Serialize)]
        struct Slippage {
            net_target_amount: Amount,
            bound: Amount,
        }
        let exact = |value: Result<JsonText, serde_json::Error>| value.unwrap_or_else(|_| json!({}).into());
        let Self::Core(err) = self else {
            return match self {
                ApiError::PayloadTooLarge { limit_bytes } => json!({ "limit_bytes": limit_bytes }).into(),
                ApiError::RequestSignature(failure) => json!({ "reason": failure.reason() }).into(),
                _ => json!({}).into(),
            };
        };
        if let Error::InsufficientCredit { balance, credit_limit, currency } = err {
            return exact(JsonText::of(&Credit { balance: *balance, credit_limit: *credit_limit, currency }));
        }
        if let Error::SlippageExceeded { net_target_amount, bound } = err {
            return exact(JsonText::of(&Slippage { net_target_amount: *net_target_amount, bound: *bound }));
        }
        let details: Value = match err {
            Error::BadRequest { fields, .. } if !fields.is_empty() => json!({ "fields": fields }),
            Error::UnsupportedDidMethod { method } => json!({ "method": method }),
            Error::AuthorizationFailed { detail, .. } => match detail {
                AuthorizationDetail::RequiredScopes(s) => {
                    json!({ "required_scopes": s.iter().map(|s| s.as_str()).collect::<Vec<_>>() })
                }
                AuthorizationDetail::RefusedScopes(s) => json!({ "refused_scopes": s }),
                AuthorizationDetail::CoopId(c) => json!({ "coop_id": c }),
                AuthorizationDetail::Reason(r) => json!({ "reason": r }),
            },
            Error::InsufficientTrust { required, actual } => {
                json!({ "required": required, "actual": actual })
            }
            Error::NotFound { resource, id } => json!({ "resource": resource, "id": id }),
            Error::Conflict { reason } => json!({ "reason": reason }),
            Error::RateLimited { layer, limit, retry_after_secs, count, .. } => {
                let mut map = Map::new();
                map.insert("layer".into(), layer.as_str().into());
                map.insert("limit".into(), (*limit).into());
                map.insert("retry_after_secs".into(), (*retry_after_secs).into());
                if let Some(count) = count {
                    map.insert("count".into(), (*count).into());
                }
                Value::Object(map)
            }
            Error::ReceiptUnavailable { reason } => json!({ "reason": reason }),
            _ => json!({}),
        };
        details.into()
    }

    pub(crate) fn message(&self) -> String {
        match self {
            ApiError::Core(Error::Internal(_)) => "internal error".to_owned(),
            ApiError::Core(Error::ServiceUnavailable(_)) => "service unavailable".to_owned(),
            other => other.to_string(),
        }
    }
}

/// The error body as sent: `{error, code, details}`.
#[derive(Debug, serde::Serialize)]
pub struct ErrorBodyOut {
    /// Human message.
    pub error: String,
    /// The error code.
    pub code: &'static str,
    /// Code-specific details, as exact JSON text.
    pub details: JsonText,
}

impl ApiError {
    /// The status and the error body.
    pub fn status_and_body(&self) -> (u16, ErrorBodyOut) {
        let code = self.code();
        (code.status(), ErrorBodyOut { error: self.message(), code: code.as_str(), details: self.details() })
    }

    /// The status and the error body as JSON text: the one place the body is written, for
    /// the router's answers and for those the connection writes itself (a refused connection,
    /// a head that timed out, a head hyper could not parse).
    pub fn status_and_text(&self) -> (u16, String) {
        let (status, body) = self.status_and_body();
        let text = serde_json::to_string(&body)
            .unwrap_or_else(|_| r#"{"error":"internal error","code":"INTERNAL_ERROR","details":{}}"#.to_owned());
        (status, text)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = self.code();
        let (status, body) = self.status_and_text();
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let json = [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))];
        let mut response = (status, json, body).into_response();
        let headers = response.headers_mut();
        match &self {
            ApiError::Core(Error::AuthenticationFailed(_)) => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            ApiError::RequestSignature(failure) => {
                metrics::counter!("icn_gateway_auth_failures_total", "reason" => failure.reason()).increment(1);
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                headers.insert("accept-signature", HeaderValue::from_static(gateway_httpsig::ACCEPT_SIGNATURE));
            }
            ApiError::Core(Error::RateLimited { retry_after_secs, .. }) => {
                headers.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_secs));
            }
            ApiError::Core(Error::AuthorizationFailed { .. } | Error::InsufficientTrust { .. }) => {
                metrics::counter!("icn_gateway_authorization_failures_total", "code" => code.as_str()).increment(1);
            }
            ApiError::Core(Error::Internal(cause) | Error::ServiceUnavailable(cause)) => {
                response.extensions_mut().insert(InternalCause(cause.clone()));
            }
            ApiError::PayloadTooLarge { .. } => {
                response.extensions_mut().insert(gateway_limits::Violation::OversizedBody);
            }
            _ => {}
        }
        response
    }
}

/// Result of a handler.
pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unit_of_works_signature_refusal_is_the_edges() {
        let from_domain = ApiError::from(Error::SignatureRequired).into_response();
        let from_edge = ApiError::RequestSignature(gateway_httpsig::Failure::SignatureRequired).into_response();
        for response in [from_domain, from_edge] {
            assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
            let headers = response.headers();
            assert_eq!(headers["accept-signature"], gateway_httpsig::ACCEPT_SIGNATURE);
            assert_eq!(headers[header::WWW_AUTHENTICATE], "Bearer");
        }
        let (_, body) = ApiError::from(Error::SignatureRequired).status_and_text();
        assert!(body.contains(r#""code":"AUTHENTICATION_FAILED""#), "{body}");
        assert!(body.contains(r#""details":{"reason":"signature_required"}"#), "{body}");
    }

    #[test]
    fn ledger_refusals_carry_every_digit_of_their_amounts() {
        let amount = |t: &str| Amount::parse_decimal(t).unwrap();
        let credit = Error::InsufficientCredit {
            balance: amount("-999999999999.999999"),
            credit_limit: amount("-1000000000000"),
            currency: "hours".into(),
        };
        let (status, body) = ApiError::from(credit).status_and_body();
        assert_eq!(status, 409);
        let text = serde_json::to_string(&body).unwrap();
        assert!(text.contains(r#""details":{"balance":-999999999999.999999,"credit_limit":-1000000000000,"#), "{text}");
        assert!(text.contains(r#""code":"INSUFFICIENT_CREDIT""#), "{text}");
        let slippage = Error::SlippageExceeded { net_target_amount: amount("123456789012.345678"), bound: amount("1") };
        let text = serde_json::to_string(&ApiError::from(slippage).status_and_body().1).unwrap();
        assert!(text.contains(r#"{"net_target_amount":123456789012.345678,"bound":1}"#), "{text}");
    }
}
