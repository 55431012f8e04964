//! The one error type of the HTTP layer and its single `IntoResponse`.
//!
//! Every failure a client can see becomes `{"error", "code", "details"}` here, with the status the
//! contract fixes for the code. Internal errors reach the client as an opaque message; their cause
//! is attached to the response as an extension and logged once, with the request id, by the
//! `log_internal_errors` middleware.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use gateway_core::{AuthorizationDetail, Error, ErrorCode};
use serde_json::{Map, Value, json};

/// A failure as the HTTP layer reports it.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A contract error from the domain, authentication or validation; status from its code.
    #[error(transparent)]
    Core(#[from] Error),
    /// 413: the body is larger than the limit.
    #[error("request body too large: the limit is {limit_bytes} bytes")]
    PayloadTooLarge {
        /// The configured limit.
        limit_bytes: usize,
    },
    /// 405: the path exists, the method does not.
    #[error("method not allowed")]
    MethodNotAllowed,
}

/// The cause of an internal error, carried to the logging middleware in response extensions.
#[derive(Debug, Clone)]
pub struct InternalCause(pub String);

impl ApiError {
    /// The contract code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            ApiError::Core(e) => e.code(),
            ApiError::PayloadTooLarge { .. } => ErrorCode::PayloadTooLarge,
            ApiError::MethodNotAllowed => ErrorCode::MethodNotAllowed,
        }
    }

    fn details(&self) -> Value {
        let Self::Core(err) = self else {
            return match self {
                ApiError::PayloadTooLarge { limit_bytes } => json!({ "limit_bytes": limit_bytes }),
                _ => json!({}),
            };
        };
        match err {
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
            Error::InsufficientCredit { balance, credit_limit, currency } => {
                json!({ "balance": balance, "credit_limit": credit_limit, "currency": currency })
            }
            Error::SlippageExceeded { net_target_amount, bound } => {
                json!({ "net_target_amount": net_target_amount, "bound": bound })
            }
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
        }
    }

    pub(crate) fn message(&self) -> String {
        match self {
            ApiError::Core(Error::Internal(_)) => "internal error".to_owned(),
            ApiError::Core(Error::ServiceUnavailable(_)) => "service unavailable".to_owned(),
            other => other.to_string(),
        }
    }
}

impl ApiError {
    /// The status and the contract body, e.g. to store as an idempotent response.
    pub fn status_and_body(&self) -> (u16, Value) {
        let code = self.code();
        (code.status(), json!({ "error": self.message(), "code": code.as_str(), "details": self.details() }))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = self.code();
        let (status, body) = self.status_and_body();
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, axum::Json(body)).into_response();
        let headers = response.headers_mut();
        match &self {
            ApiError::Core(Error::AuthenticationFailed(_)) => {
                headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
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
            _ => {}
        }
        response
    }
}

/// Result of a handler.
pub type ApiResult<T> = Result<T, ApiError>;
