//! Wrappers around axum's `Json`, `Path` and `Query` whose rejections use the interface's error
//! body, with `details.fields` naming the field at fault.
//!
//! Bodies are parsed from the exact request bytes with `serde_path_to_error`, so money amounts
//! keep their exact decimal text (see `gateway_core::Amount`) and the error names the path of the
//! offending field. Unknown fields are ignored, as INTERFACE.md says.

use axum::extract::rejection::{BytesRejection, FailedToBufferBody};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::header;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use gateway_core::Error;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::future::Future as _;

use crate::error::ApiError;

/// The request body limit, 1 MiB.
pub const BODY_LIMIT_BYTES: usize = 1024 * 1024;

/// How long a request's body may take to arrive once its head has (INTERFACE.md §1).
pub const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// A body that could not be read, as INTERFACE.md answers it: over the limit 413, past its
/// deadline 408, anything else 400.
pub(crate) fn body_rejection(rejection: BytesRejection) -> ApiError {
    match rejection {
        BytesRejection::FailedToBufferBody(FailedToBufferBody::LengthLimitError(_)) => {
            ApiError::PayloadTooLarge { limit_bytes: BODY_LIMIT_BYTES }
        }
        other if timed_out(&other) => ApiError::BodyTimeout,
        other => Error::bad_request(format!("could not read the request body: {other}")).into(),
    }
}

/// Whether an error, or one of its sources, is a body deadline passing.
pub(crate) fn timed_out(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(error);
    while let Some(error) = current {
        if error.is::<BodyTimedOut>() {
            return true;
        }
        current = error.source();
    }
    false
}

/// The error a [`Deadline`] body yields once its time is up.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive in time")]
pub struct BodyTimedOut;

/// A request body that must arrive whole by a deadline: past it, reading yields
/// [`BodyTimedOut`], which the extractors answer 408.
#[derive(Debug)]
pub struct Deadline {
    inner: axum::body::Body,
    sleep: std::pin::Pin<Box<tokio::time::Sleep>>,
    /// Set once the body has been read to its end.
    read: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl Deadline {
    /// `body`, due within `within` from now.
    pub fn new(body: axum::body::Body, within: std::time::Duration) -> Self {
        Self { inner: body, sleep: Box::pin(tokio::time::sleep(within)), read: None }
    }

    /// The same body, setting `read` once it has been read to its end (the edge asks, to know
    /// whether the connection can carry another request).
    pub fn telling(mut self, read: std::sync::Arc<std::sync::atomic::AtomicBool>) -> Self {
        self.read = Some(read);
        self
    }
}

impl http_body::Body for Deadline {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        if let std::task::Poll::Ready(frame) = std::pin::Pin::new(&mut self.inner).poll_frame(cx) {
            if frame.is_none()
                && let Some(read) = &self.read
            {
                read.store(true, std::sync::atomic::Ordering::Release);
            }
            return std::task::Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        match self.sleep.as_mut().poll(cx) {
            std::task::Poll::Ready(()) => std::task::Poll::Ready(Some(Err(Box::new(BodyTimedOut)))),
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A JSON request body (extractor) or response body (responder).
#[derive(Debug, Clone, Copy, Default)]
pub struct Json<T>(pub T);

impl<T, S> FromRequest<S> for Json<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !has_json_content_type(req.headers()) {
            return Err(Error::bad_request("expected a JSON body with Content-Type: application/json").into());
        }
        let bytes = Bytes::from_request(req, state).await.map_err(body_rejection)?;
        parse_json(&bytes).map(Json)
    }
}

/// A JSON body kept as bytes (content type and size checked), for handlers that also need the
/// exact bytes, e.g. to hash them for `Idempotency-Key`. Parse it with [`parse_json`].
#[derive(Debug, Clone)]
pub struct JsonBytes(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for JsonBytes {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !has_json_content_type(req.headers()) {
            return Err(Error::bad_request("expected a JSON body with Content-Type: application/json").into());
        }
        Bytes::from_request(req, state).await.map(JsonBytes).map_err(body_rejection)
    }
}

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

fn has_json_content_type(headers: &axum::http::HeaderMap) -> bool {
    let Some(value) = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    essence == "application/json" || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Parses JSON bytes into `T`, turning failures into `BAD_REQUEST` with the field's path.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut deserializer).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            return Error::bad_request(format!("malformed JSON: {inner}")).into();
        }
        let message = strip_position(&inner.to_string());
        let field = if path == "." { missing_field_name(&message).unwrap_or_default() } else { path };
        field_error(&field, message)
    })?;
    deserializer.end().map_err(|err| ApiError::from(Error::bad_request(format!("malformed JSON: {err}"))))?;
    Ok(value)
}

/// A `BAD_REQUEST` naming `field` (or none when empty).
fn field_error(field: &str, message: String) -> ApiError {
    if field.is_empty() {
        Error::bad_request(message).into()
    } else {
        Error::bad_request_field(field, format!("{field}: {message}")).into()
    }
}

/// serde_json appends " at line L column C"; the field path says more to a client.
fn strip_position(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(i) => message[..i].to_owned(),
        None => message.to_owned(),
    }
}

/// The field name in serde's "missing field `name`" message.
fn missing_field_name(message: &str) -> Option<String> {
    let rest = message.strip_prefix("missing field `")?;
    Some(rest[..rest.find('`')?].to_owned())
}

/// Path parameters, with an error body on rejection.
#[derive(Debug, Clone, Copy, Default)]
pub struct Path<T>(pub T);

impl<T, S> FromRequestParts<S> for Path<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(value)| Path(value))
            .map_err(|rejection| {
                Error::bad_request(format!("invalid path parameter: {}", rejection.body_text())).into()
            })
    }
}

/// Query parameters, with an error body naming the parameter on rejection.
#[derive(Debug, Clone, Copy, Default)]
pub struct Query<T>(pub T);

impl<T, S> FromRequestParts<S> for Query<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        let query = parts.uri.query().unwrap_or_default();
        let deserializer = serde_urlencoded::Deserializer::new(form_urlencoded_parse(query));
        serde_path_to_error::deserialize(deserializer).map(Query).map_err(|err| {
            let path = err.path().to_string();
            let message = err.into_inner().to_string();
            let field = if path == "." { missing_field_name(&message).unwrap_or_default() } else { path };
            field_error(&field, message)
        })
    }
}

fn form_urlencoded_parse(query: &str) -> form_urlencoded::Parse<'_> {
    form_urlencoded::parse(query.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gateway_core::Amount;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Payment {
        to: String,
        amount: Amount,
    }

    fn fields(err: ApiError) -> Vec<String> {
        match err {
            ApiError::Core(Error::BadRequest { fields, .. }) => fields.into_keys().collect(),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn names_missing_and_mistyped_fields() {
        assert_eq!(fields(parse_json::<Payment>(br#"{"amount": 1}"#).unwrap_err()), vec!["to"]);
        assert_eq!(fields(parse_json::<Payment>(br#"{"to": 5, "amount": 1}"#).unwrap_err()), vec!["to"]);
        assert_eq!(fields(parse_json::<Payment>(br#"{"to": "x", "amount": "1"}"#).unwrap_err()), vec!["amount"]);
        assert!(fields(parse_json::<Payment>(br#"{"to": "x""#).unwrap_err()).is_empty());
    }

    #[test]
    fn amounts_keep_exact_text_and_unknown_fields_are_ignored() {
        let p: Payment = parse_json(br#"{"to": "x", "amount": 123456789012.123456, "extra": [1]}"#).unwrap();
        assert_eq!(p.amount.micros(), 123_456_789_012_123_456);
    }
}
