//! Small helpers shared by the route modules: parsing path and body fields into core types with
//! field-named errors, list envelopes, and `Idempotency-Key` handling.

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use gateway_core::{Amount, CoopId, Currency, Did, Error, PageRequest};
use gateway_domain::ledger::{Idempotency, Stored, StoredResponse};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::caller::Caller;
use crate::error::ApiError;

/// A coop id from the path.
pub fn coop_id(text: &str) -> Result<CoopId, ApiError> {
    CoopId::parse(text).map_err(|why| Error::bad_request_field("coop_id", format!("invalid coop_id: {why}")).into())
}

/// The `{did}` of a route's path (its other parameters, such as the coop, are the
/// [`crate::caller::CoopCaller`]'s).
#[derive(Debug, Deserialize)]
pub struct DidPath {
    /// The DID as sent.
    pub did: String,
}

/// A DID from a field.
pub fn did(field: &str, text: &str) -> Result<Did, ApiError> {
    Did::parse(text).map_err(|why| Error::bad_request_field(field, format!("invalid DID: {why}")).into())
}

/// A currency from a field.
pub fn currency(field: &str, text: &str) -> Result<Currency, ApiError> {
    Currency::parse(text).map_err(|why| Error::bad_request_field(field, why).into())
}

/// A payment amount: `0 < x <= 1e12`, at most six decimals (already checked by parsing).
pub fn payment_amount(field: &str, amount: Amount) -> Result<Amount, ApiError> {
    amount.check_payment().map_err(|why| Error::bad_request_field(field, format!("{field} {why}")).into())
}

/// `limit` and `offset` of list routes. Through [`crate::extract::Query`], a value that is not a
/// non-negative integer is 400 with `details.fields.<name>`; [`PageQuery::page`] refuses
/// `limit=0` and offsets past what a store can count.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
pub struct PageQuery {
    /// Page size, default 50, at most 100 (larger values are clamped).
    pub limit: Option<u64>,
    /// Items to skip, default 0.
    pub offset: Option<u64>,
}

impl PageQuery {
    /// The validated page.
    pub fn page(&self) -> Result<PageRequest, ApiError> {
        if self.offset.is_some_and(|o| i64::try_from(o).is_err()) {
            return Err(Error::bad_request_field("offset", format!("offset is at most {}", i64::MAX)).into());
        }
        PageRequest::new(self.limit, self.offset).map_err(|m| Error::bad_request_field("limit", m).into())
    }
}

/// A page's position in the whole list.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct PaginationDto {
    /// Page size used.
    pub limit: u32,
    /// Items skipped.
    pub offset: u64,
    /// Items in the whole list.
    pub total: u64,
    /// Whether items remain after this page.
    pub has_more: bool,
}

impl From<gateway_core::PageInfo> for PaginationDto {
    fn from(page: gateway_core::PageInfo) -> Self {
        Self { limit: page.limit, offset: page.offset, total: page.total, has_more: page.has_more }
    }
}

/// The `Idempotency-Key` of a request, scoped to the caller and coop, with the request's hash:
/// of its method, path and body, the body as canonical JSON (RFC 8785) when it is JSON, so that
/// the same request sent again with its members in another order or other whitespace replays the
/// stored answer instead of conflicting with it.
pub fn idempotency(
    headers: &HeaderMap,
    caller: &Caller,
    coop: &CoopId,
    path: &str,
    body: &[u8],
) -> Result<Option<Idempotency>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    let key = value
        .to_str()
        .ok()
        .filter(|k| !k.is_empty() && k.len() <= 255 && k.bytes().all(|b| b.is_ascii_graphic()))
        .ok_or_else(|| {
            Error::bad_request_field("Idempotency-Key", "Idempotency-Key must be 1 to 255 visible ASCII characters")
        })?;
    let mut hash = Sha256::new();
    hash.update(b"POST ");
    hash.update(path.as_bytes());
    hash.update(b"\n");
    let canonical = serde_json::from_slice::<serde_json::Value>(body).ok().and_then(|v| serde_jcs::to_vec(&v).ok());
    hash.update(canonical.as_deref().unwrap_or(body));
    Ok(Some(Idempotency {
        key: format!("{coop}\u{1f}{}\u{1f}{key}", caller.did),
        request_hash: hex::encode(hash.finalize()),
    }))
}

/// The header marking a replayed idempotent answer.
pub const REPLAYED: &str = "idempotent-replayed";

/// An earlier answer under an `Idempotency-Key`, answered again with `Idempotent-Replayed:
/// true`: a decided result rendered by `answer` (or as the refusal it was), or an answer an
/// earlier gateway stored as HTTP, verbatim.
pub fn replayed<T>(stored: Stored<T>, answer: fn(&T) -> Response) -> Response {
    let mut response = match stored {
        Stored::Decided(Ok(value)) => answer(&value),
        Stored::Decided(Err(err)) => ApiError::from(err).into_response(),
        Stored::Http(StoredResponse { status, body }) => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            (status, [(axum::http::header::CONTENT_TYPE, "application/json")], body).into_response()
        }
    };
    response.headers_mut().insert(REPLAYED, axum::http::HeaderValue::from_static("true"));
    response
}

/// The signature of the request that made a record (INTERFACE.md §11): the verified
/// `Signature-Input` and `Signature` members and what they covered, enough to verify offline
/// with nothing but the signer's DID (`gatewayctl verify-request`).
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct RequestSignatureDto {
    /// The `Signature-Input` member, `label=(…);created=…;expires=…;nonce=…;keyid=…;alg=…;tag=…`.
    pub signature_input: String,
    /// The `Signature` member, `label=:base64:`.
    pub signature: String,
    /// The request's `Content-Digest` (`sha-256=:base64:`), `null` without a body.
    pub content_digest: Option<String>,
    /// Method.
    pub method: String,
    /// The `Host` the gateway received.
    pub authority: String,
    /// Path.
    pub path: String,
    /// Query without `?`, when the request had one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// The exact signed body bytes, standard base64 (`""` without a body): their digest is
    /// `content_digest`, and a checker compares the record's fields with them. `null` only on
    /// evidence kept before bodies were stored.
    #[schema(value_type = Option<String>)]
    pub body: Option<std::sync::Arc<str>>,
}

impl From<&gateway_core::RequestSignature> for RequestSignatureDto {
    fn from(s: &gateway_core::RequestSignature) -> Self {
        Self {
            signature_input: s.signature_input.clone(),
            signature: s.signature.clone(),
            content_digest: s.content_digest.clone(),
            method: s.method.clone(),
            authority: s.authority.clone(),
            path: s.path.clone(),
            query: s.query.clone(),
            body: s.body.clone(),
        }
    }
}
