//! Request signatures at the HTTP edge (INTERFACE.md §11): every protected request that carries an
//! RFC 9421 signature of the gateway's profile has it checked, critical operations of a coop
//! that requires signatures are refused without one, and a verified signature is left on the
//! request for the handlers that keep it as evidence (payments and votes).
//!
//! The profile itself (signature base, Structured Fields, Ed25519, `Content-Digest`) is
//! `gateway-httpsig`'s; this module reads the request, remembers nonces through the nonce
//! store (in memory, in Redis, or in the shared PostgreSQL database) and answers refusals: a
//! replay, a signature older than the store's memory (401), a signer holding too many
//! unexpired nonces (429). Public routes carry no token, so no signer to compare `keyid` with:
//! there a signature is ignored.

use std::convert::Infallible;

use axum::body::{Body, to_bytes};
use axum::extract::{FromRequestParts, MatchedPath, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, Method, header};
use axum::response::{IntoResponse, Response};
use gateway_auth::nonce::{Remembered, SignedNonce};
use gateway_core::{Error, RequestSignature};
use gateway_httpsig::{Failure, Limits, Message};

use crate::caller::Caller;
use crate::error::ApiError;
use crate::state::AppState;

/// The operations INTERFACE.md §11 calls critical, by method and route template: every
/// payment-creating POST, votes, closing a proposal, member add, remove, role and credit-limit
/// changes, settings, domains, delegations, trust edges and oracle rates.
pub const CRITICAL: &[(Method, &str)] = &[
    (Method::POST, "/v1/ledger/{coop}/payment"),
    (Method::POST, "/ledger/transaction"),
    (Method::POST, "/v1/ledger/{coop}/payments/batch"),
    (Method::POST, "/v1/ledger/{coop}/payment/convert"),
    (Method::POST, "/v1/gov/proposals/{id}/vote"),
    (Method::POST, "/governance/proposals/{id}/vote"),
    (Method::POST, "/v1/gov/proposals/{id}/close"),
    (Method::POST, "/v1/coops/{id}/members"),
    (Method::POST, "/coops/{id}/members"),
    (Method::DELETE, "/v1/coops/{id}/members/{did}"),
    (Method::PUT, "/v1/coops/{id}/members/{did}/role"),
    (Method::PUT, "/v1/coops/{id}/members/{did}/credit-limit"),
    (Method::PUT, "/v1/coops/{id}/settings"),
    (Method::POST, "/v1/gov/domains"),
    (Method::PUT, "/v1/gov/domains/{id}"),
    (Method::POST, "/v1/gov/delegations"),
    (Method::DELETE, "/v1/gov/delegations/{id}"),
    (Method::POST, "/trust/edge"),
    (Method::POST, "/v1/trust/edges"),
    (Method::DELETE, "/v1/trust/edges/{did}"),
    (Method::POST, "/v1/oracle/rate"),
];

/// Whether `method route` is a critical operation.
pub fn is_critical(method: &Method, route: &str) -> bool {
    CRITICAL.iter().any(|(m, r)| m == method && *r == route)
}

/// The verified signature of a request, left for its handler.
#[derive(Debug, Clone)]
struct Evidence(RequestSignature);

/// The request's verified signature, if it was signed: what a payment or a vote keeps.
#[derive(Debug, Clone, Default)]
pub struct Signature(pub Option<RequestSignature>);

impl<S: Send + Sync> FromRequestParts<S> for Signature {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Infallible> {
        Ok(Self(parts.extensions.get::<Evidence>().map(|e| e.0.clone())))
    }
}

/// The `Signature-Input` header.
const SIGNATURE_INPUT: HeaderName = HeaderName::from_static("signature-input");
/// The `Signature` header.
const SIGNATURE: HeaderName = HeaderName::from_static("signature");

/// The check of every protected request, once authentication has admitted `caller`
/// ([`crate::middleware::authenticate`] runs it): checks a signature when the request carries
/// one (whatever the route), and refuses an unsigned critical operation when the token's coop
/// requires signatures: early, before its body is read or counted by any limit. The operation's
/// units of work decide again from the coop record they hold (`gateway_domain::ports::unsigned`),
/// so a settings change committed after this read still stops it. The request comes back to be
/// served, with a verified signature left on it, or the refusal does.
pub async fn check(state: &AppState, caller: &Caller, request: Request) -> Result<Request, Response> {
    let signed = is_signed(&request);
    if !signed && !is_critical_request(&request) {
        return Ok(request);
    }
    if !signed {
        let network_wide = is_network_wide(&request);
        let required = match signatures_required(state, caller, network_wide).await {
            Ok(required) => required,
            Err(err) => return Err(ApiError::from(err).into_response()),
        };
        return if required { Err(refuse(Failure::SignatureRequired)) } else { Ok(request) };
    }
    let (mut parts, body) = request.into_parts();
    let body = match to_bytes(body, crate::extract::BODY_LIMIT_BYTES).await {
        Ok(body) => body,
        Err(err) if crate::extract::timed_out(&err) => return Err(ApiError::BodyTimeout.into_response()),
        Err(_) => {
            return Err(ApiError::PayloadTooLarge { limit_bytes: crate::extract::BODY_LIMIT_BYTES }.into_response());
        }
    };
    let verified = verify(state, &parts, &body, caller).await?;
    parts.extensions.insert(Evidence(verified));
    Ok(Request::from_parts(parts, Body::from(body)))
}

/// The operations whose effect is not confined to the token's coop: the trust graph is one for
/// the whole network, so an edge set with one coop's token counts in every coop.
const NETWORK_WIDE: &[(Method, &str)] =
    &[(Method::POST, "/trust/edge"), (Method::POST, "/v1/trust/edges"), (Method::DELETE, "/v1/trust/edges/{did}")];

/// Whether this unsigned critical request must be refused: its token's coop requires signed
/// requests, or, for a network-wide operation, any coop the caller belongs to does (so a member
/// of a coop that requires them cannot make the change unsigned with another coop's token).
async fn signatures_required(state: &AppState, caller: &Caller, network_wide: bool) -> Result<bool, Error> {
    if let Some(coop) = &caller.coop_id {
        match state.coops.get(coop).await {
            Ok(record) if record.settings.require_signed_requests => return Ok(true),
            Ok(_) => {}
            // An unknown coop: the handler answers 404 (or creates it).
            Err(Error::NotFound { .. }) => {}
            Err(err) => return Err(err),
        }
    }
    if !network_wide {
        return Ok(false);
    }
    let mut page = gateway_core::PageRequest { limit: 100, offset: 0 };
    loop {
        let (coops, total) = state.coops.list_for(&caller.did, page).await?;
        if coops.iter().any(|coop| coop.settings.require_signed_requests) {
            return Ok(true);
        }
        page.offset += coops.len() as u64;
        if coops.is_empty() || page.offset >= total {
            return Ok(false);
        }
    }
}

fn is_network_wide(request: &Request) -> bool {
    request
        .extensions()
        .get::<MatchedPath>()
        .is_some_and(|route| NETWORK_WIDE.iter().any(|(m, r)| m == request.method() && *r == route.as_str()))
}

/// Whether [`check`] has anything to do for this request: it carries a signature, or it is a
/// critical operation. Most requests are neither, and are spared building its future.
pub fn applies(request: &Request) -> bool {
    is_signed(request) || is_critical_request(request)
}

/// Whether the request is a critical operation without a signature: one its units of work refuse
/// in a coop that requires signed requests (`gateway_domain::ports::unsigned`).
pub(crate) fn is_unsigned_critical(request: &Request) -> bool {
    !is_signed(request) && is_critical_request(request)
}

pub(crate) fn is_signed(request: &Request) -> bool {
    request.headers().contains_key(SIGNATURE_INPUT) || request.headers().contains_key(SIGNATURE)
}

fn is_critical_request(request: &Request) -> bool {
    request.extensions().get::<MatchedPath>().is_some_and(|route| is_critical(request.method(), route.as_str()))
}

/// Verifies the request's signature against the caller and remembers its nonce.
async fn verify(state: &AppState, parts: &Parts, body: &[u8], caller: &Caller) -> Result<RequestSignature, Response> {
    let joined = |name: &str| joined(&parts.headers, name);
    let (input, signature) = match (joined(SIGNATURE_INPUT.as_str()), joined(SIGNATURE.as_str())) {
        (Some(input), Some(signature)) => (input, signature),
        _ => return Err(refuse(Failure::SignatureInvalid)),
    };
    let authority = parts
        .headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| parts.uri.authority().map(|a| a.as_str()))
        .unwrap_or("");
    let headers: Vec<(&str, &str)> =
        parts.headers.iter().filter_map(|(name, value)| Some((name.as_str(), value.to_str().ok()?))).collect();
    let message = Message {
        method: parts.method.as_str(),
        authority,
        path: parts.uri.path(),
        query: parts.uri.query(),
        headers: &headers,
    };
    let now_millis = state.clock.now_unix_millis();
    let verified =
        gateway_httpsig::verify(&message, body, &input, &signature, &caller.did, now_millis / 1000, Limits::default())
            .map_err(refuse)?;
    let nonce = SignedNonce {
        signer: verified.keyid.as_str(),
        nonce: &verified.nonce,
        created_secs: verified.created,
        expires_secs: verified.expires,
    };
    match state.nonces.remember(nonce, now_millis).await {
        Ok(Remembered::Accepted) => Ok(verified.evidence),
        Ok(Remembered::Replayed) => Err(refuse(Failure::NonceReplayed)),
        Ok(Remembered::Predates { .. }) => Err(refuse(Failure::PredatesNonceMemory)),
        Ok(Remembered::SignerFull { limit, retry_after_secs }) => Err(signer_full(limit, retry_after_secs)),
        Err(err) => Err(ApiError::from(err).into_response()),
    }
}

/// 429 `RATE_LIMIT_EXCEEDED` (layer `did`, with `Retry-After`) for a signer that holds as many
/// unexpired nonces as it may: the gateway would have to remember one more for it, and it does
/// not forget one to make room.
fn signer_full(limit: usize, retry_after_secs: u64) -> Response {
    metrics::counter!(crate::limits::METRIC_NAMES.rate_limit_exceeded_total, "layer" => "did").increment(1);
    ApiError::from(Error::RateLimited {
        message: format!(
            "too many signed requests still valid: a signer may have at most {limit} unexpired signature nonces at once; retry in {retry_after_secs} s, or sign with a shorter lifetime"
        ),
        layer: gateway_core::RateLimitLayer::Did,
        limit: limit as u64,
        retry_after_secs,
        count: None,
    })
    .into_response()
}

/// Every value of a header field, joined with `, ` as one field value.
fn joined(headers: &HeaderMap, name: &str) -> Option<String> {
    let values: Vec<&str> = headers.get_all(name).iter().filter_map(|v| v.to_str().ok()).collect();
    (!values.is_empty()).then(|| values.join(", "))
}

/// 401 `AUTHENTICATION_FAILED` with `details.reason` and `Accept-Signature`; a signature that
/// is wrong (not merely late or missing) also counts as the client's misbehaviour.
fn refuse(failure: Failure) -> Response {
    let mut response = ApiError::RequestSignature(failure).into_response();
    if matches!(
        failure,
        Failure::SignatureInvalid | Failure::DigestMismatch | Failure::NonceReplayed | Failure::KeyidMismatch
    ) {
        response.extensions_mut().insert(gateway_limits::Violation::BadRequestSignature);
    }
    response
}
