//! Cross-cutting request handling: authentication of protected routes, `Cache-Control` of login
//! answers, CORS, and the request-id header's name. The edge of every request (request ids,
//! security headers, access log) is `edge`'s.

use std::time::Duration;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use gateway_auth::Authenticator;
use gateway_core::Error;
use gateway_limits::Admission;

use crate::caller::Caller;
use crate::error::ApiError;
use crate::state::AppState;

/// Verifies the bearer token of a protected route, applies the DID rate-limit layer, the
/// identity-only rule and the membership check, then the request signature
/// ([`crate::signing::check`]), and leaves the [`Caller`] in the request. One layer for both,
/// so that a protected request pays for one middleware. Authenticated answers, refusals included, carry the `X-RateLimit-*` headers and
/// `Cache-Control: no-store`.
///
/// This is the one place where an identity-only token (no cooperative: the interface's
/// `{did, challenge_id, signature}` login) is confined to the identity routes
/// ([`identity_route`]): every other protected route answers it 403 with
/// `details.reason = "identity_only"`, so a route added later is closed to it by default.
pub async fn authenticate(State(state): State<AppState>, request: Request, next: Next) -> Response {
    authenticated(&state, request, |request| next.run(request)).await
}

/// [`authenticate`] with the rest of the request's handling given as `run` (the route behind the
/// layer).
pub(crate) async fn authenticated<F, Fut>(state: &AppState, request: Request, run: F) -> Response
where
    F: FnOnce(Request) -> Fut,
    Fut: Future<Output = Response>,
{
    let token = match bearer_token(&request) {
        Ok(token) => token,
        Err(err) => return err.into_response(),
    };
    let mut caller = match verify(&state.auth, token) {
        Ok(caller) => caller,
        Err(err) => {
            let forged = err == gateway_auth::AuthError::InvalidToken;
            let mut response = ApiError::from(Error::from(err)).into_response();
            if forged {
                // Not one of ours (an expired one of ours is not misbehaviour).
                response.extensions_mut().insert(gateway_limits::Violation::ForgedToken);
            }
            return response;
        }
    };
    let admission = match state.limits.check_did(&caller.did).await {
        Ok(admission) => admission,
        Err((err, limit)) => return over_limit(state, err, limit),
    };
    let admitted = admit(state, &mut caller, request.uri().path(), creates_coop(&request)).await;
    let mut response = match admitted {
        Ok(()) => {
            // The request's signature, when it has one or its route needs one (INTERFACE.md §11).
            // Its check's future is large and rarely needed: boxed, so that this future, which
            // every protected request moves around, stays small.
            let unsigned_critical = crate::signing::is_unsigned_critical(&request);
            let checked = if crate::signing::applies(&request) {
                Box::pin(crate::signing::check(state, &caller, request)).await
            } else {
                Ok(request)
            };
            match checked {
                Ok(mut request) => {
                    request.extensions_mut().insert(caller);
                    // The answer of an operation that appended events names the last one
                    // (INTERFACE.md §12), which `/log/proof?seq=` proves.
                    let served = gateway_domain::ports::appended::track(run(request));
                    // An unsigned critical operation that the edge let through is judged again
                    // by its units of work, against the coop they read (`ports::unsigned`).
                    let (mut response, appended) = if unsigned_critical {
                        Box::pin(gateway_domain::ports::unsigned::critical(served)).await
                    } else {
                        served.await
                    };
                    if let Some(seq) = appended {
                        response.headers_mut().insert(EVENT_SEQ, HeaderValue::from(seq));
                    }
                    response
                }
                Err(refusal) => refusal,
            }
        }
        Err(err) => err.into_response(),
    };
    admitted_headers(state, response.headers_mut(), &admission);
    response
}

/// The answer to a caller over its DID's rate limit: 429, `Cache-Control: no-store`, the
/// `X-RateLimit-*` headers with none remaining.
pub(crate) fn over_limit(state: &AppState, err: ApiError, limit: u32) -> Response {
    let retry = match &err {
        ApiError::Core(Error::RateLimited { retry_after_secs, .. }) => Duration::from_secs(*retry_after_secs),
        _ => Duration::ZERO,
    };
    let mut response = err.into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    state.limits.write_headers(response.headers_mut(), limit, 0, retry);
    response
}

/// What an admitted caller may do on `path`: an identity-only token opens the identity routes
/// only; a coop's token, only while its DID is a member, with the scopes its role allows now
/// (which replace the token's).
pub(crate) async fn admit(state: &AppState, caller: &mut Caller, path: &str, creating: bool) -> Result<(), ApiError> {
    match &caller.coop_id {
        None if !identity_route(path) => Err(ApiError::from(Error::denied(
            IDENTITY_ONLY,
            "this token is identity-only (issued without coop_id): it opens the identity routes only; log in with coop_id for this route",
        ))),
        None => Ok(()),
        Some(coop) => match state.membership.effective_scopes(coop, &caller.did, caller.scopes).await {
            Ok(scopes) => {
                caller.scopes = scopes;
                Ok(())
            }
            // Creating a coop that already exists is 409 for whoever asks, members or not:
            // the handler's existence check answers, and creating is all it can do.
            Err(Error::AuthorizationFailed { .. }) if creating => Ok(()),
            Err(err) => Err(ApiError::from(err)),
        },
    }
}

/// The headers of every answer to an admitted caller: `Cache-Control: no-store` and the
/// `X-RateLimit-*` headers of its admission.
pub(crate) fn admitted_headers(state: &AppState, headers: &mut HeaderMap, admission: &Admission) {
    // Room for these four and the edge's headers at once: the map grows once, if at all,
    // instead of once here and again at the edge.
    headers.reserve(12);
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    state.limits.write_headers(headers, admission.limit, admission.remaining, admission.reset_after);
}

/// `details.reason` of a coop route refusing an identity-only token.
pub const IDENTITY_ONLY: &str = "identity_only";

/// Whether an identity-only token may use this protected path: the identity routes of both
/// families (`/identity/*`, `/v1/identity/*`).
pub fn identity_route(path: &str) -> bool {
    path.starts_with("/identity/") || path.starts_with("/v1/identity/")
}

/// Whether the request creates a coop (`POST /coops`, `POST /v1/coops`).
fn creates_coop(request: &Request) -> bool {
    let path = request.extensions().get::<MatchedPath>().map_or(request.uri().path(), MatchedPath::as_str);
    request.method() == Method::POST && matches!(path, "/coops" | "/v1/coops")
}

/// Marks login answers (challenge and verify, refusals included) `Cache-Control: no-store`:
/// a nonce or a token must never be kept by a cache.
pub async fn no_store(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

fn bearer_token(request: &Request) -> Result<&str, ApiError> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)
        .ok_or_else(|| Error::AuthenticationFailed("missing bearer token".into()))?;
    let value = value.to_str().map_err(|_| Error::AuthenticationFailed("malformed Authorization header".into()))?;
    bearer(value)
        .ok_or_else(|| Error::AuthenticationFailed("the Authorization header must be 'Bearer <token>'".into()).into())
}

/// The token of an `Authorization` value of the form `Bearer <token>`.
pub(crate) fn bearer(value: &str) -> Option<&str> {
    match value.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() => {
            Some(token.trim())
        }
        _ => None,
    }
}

/// Verifies a token into a [`Caller`], counting failures by reason.
pub fn verify(auth: &Authenticator, token: &str) -> Result<Caller, gateway_auth::AuthError> {
    let verified = auth.tokens().verify(token).inspect_err(|err| {
        metrics::counter!("icn_gateway_auth_failures_total", "reason" => err.reason()).increment(1);
    })?;
    Ok(caller_of(verified))
}

/// The caller a verified token names.
pub(crate) fn caller_of(verified: gateway_auth::VerifiedToken) -> Caller {
    Caller { did: verified.did, coop_id: verified.coop_id, scopes: verified.scopes, expires_at: verified.expires_at }
}

/// The header naming the last event an operation appended.
pub const EVENT_SEQ: HeaderName = HeaderName::from_static("icn-event-seq");

/// The request-id header name.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
