//! Cross-cutting request handling: authentication of protected routes, security headers, CORS,
//! request ids and the one place where internal errors are logged.

use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use gateway_auth::Authenticator;
use gateway_core::Error;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::request_id::RequestId;

use crate::caller::Caller;
use crate::error::{ApiError, InternalCause};
use crate::state::{AppState, CorsMode, HttpConfig};

/// Verifies the bearer token of a protected route, applies the DID rate-limit layer and the
/// membership check, and leaves the [`Caller`] in the request. Authenticated answers carry the
/// `X-RateLimit-*` headers and `Cache-Control: no-store`.
pub async fn authenticate(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let mut caller = match bearer_token(&request).and_then(|token| verify(&state.auth, token)) {
        Ok(caller) => caller,
        Err(err) => return err.into_response(),
    };
    let admission = match state.limits.check_did(&caller.did) {
        Ok(admission) => admission,
        Err((err, limit)) => {
            let retry = match &err {
                ApiError::Core(Error::RateLimited { retry_after_secs, .. }) => Duration::from_secs(*retry_after_secs),
                _ => Duration::ZERO,
            };
            let mut response = err.into_response();
            state.limits.write_headers(response.headers_mut(), limit, 0, retry);
            return response;
        }
    };
    if let Some(coop) = &caller.coop_id {
        match state.membership.effective_scopes(coop, &caller.did, caller.scopes).await {
            Ok(scopes) => caller.scopes = scopes,
            Err(err) => return ApiError::from(err).into_response(),
        }
    }
    request.extensions_mut().insert(caller);
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    state.limits.write_headers(headers, admission.limit, admission.remaining, admission.reset_after);
    response
}

fn bearer_token(request: &Request) -> Result<&str, ApiError> {
    let value = request
        .headers()
        .get(header::AUTHORIZATION)
        .ok_or_else(|| Error::AuthenticationFailed("missing bearer token".into()))?;
    let value = value.to_str().map_err(|_| Error::AuthenticationFailed("malformed Authorization header".into()))?;
    match value.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() => Ok(token.trim()),
        _ => Err(Error::AuthenticationFailed("the Authorization header must be 'Bearer <token>'".into()).into()),
    }
}

/// Verifies a token into a [`Caller`], counting failures.
pub fn verify(auth: &Authenticator, token: &str) -> Result<Caller, ApiError> {
    let verified = auth.tokens().verify(token).map_err(|err| {
        metrics::counter!("icn_gateway_auth_failures_total", "reason" => err.reason()).increment(1);
        ApiError::from(Error::from(err))
    })?;
    Ok(Caller {
        did: verified.did,
        coop_id: verified.coop_id,
        scopes: verified.scopes,
        expires_at: verified.expires_at,
    })
}

/// Sets the security headers on every response. The Swagger UI pages get the relaxed
/// Content-Security-Policy they need (inline styles and scripts, data: images); nothing else does.
pub async fn security_headers(State(tls): State<bool>, request: Request, next: Next) -> Response {
    let swagger = request.uri().path().starts_with("/swagger-ui");
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    let csp = if swagger {
        "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; img-src 'self' data:"
    } else {
        "default-src 'self'"
    };
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(csp));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    if tls {
        headers
            .insert(header::STRICT_TRANSPORT_SECURITY, HeaderValue::from_static("max-age=31536000; includeSubDomains"));
    }
    response
}

/// Logs the cause of an internal error once, with the request id; the client only ever sees the
/// opaque message.
pub async fn log_internal_errors(request: Request, next: Next) -> Response {
    let request_id = request
        .extensions()
        .get::<RequestId>()
        .and_then(|id| id.header_value().to_str().ok())
        .unwrap_or("-")
        .to_owned();
    let (method, path) = (request.method().clone(), request.uri().path().to_owned());
    let response = next.run(request).await;
    if let Some(InternalCause(cause)) = response.extensions().get::<InternalCause>() {
        tracing::error!(request_id, %method, path, status = response.status().as_u16(), cause, "request failed");
    }
    response
}

/// The CORS layer for the configured mode.
pub fn cors_layer(config: &HttpConfig) -> CorsLayer {
    match &config.cors {
        CorsMode::Development => CorsLayer::permissive(),
        CorsMode::Production { origin } => {
            let layer = CorsLayer::new()
                .allow_methods([Method::GET, Method::POST, Method::PUT, Method::DELETE])
                .allow_headers([header::AUTHORIZATION, header::CONTENT_TYPE])
                .max_age(Duration::from_secs(3600));
            match origin {
                Some(origin) => layer.allow_origin(AllowOrigin::list([origin.clone()])),
                None => layer.allow_origin(AllowOrigin::list(Vec::<HeaderValue>::new())),
            }
        }
    }
}

/// The request-id header name.
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
