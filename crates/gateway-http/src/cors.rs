//! The cross-origin policy (INTERFACE.md §10.4): permissive in development; in production
//! only the configured origin, methods GET, POST, PUT and DELETE, max age 3600. In both modes
//! the request headers a client of this API sends are admitted by name ([`ALLOW_HEADERS`]:
//! a wildcard does not cover `Authorization`), and the answer headers it reads are exposed by
//! name ([`EXPOSE_HEADERS`]: the rate-limit headers, `Retry-After`, `X-Request-Id`,
//! `ICN-Event-Seq`). The edge ([`crate::edge`]) applies it: it answers every `OPTIONS` request
//! as a preflight, puts the policy's headers on every other answer, and refuses a WebSocket
//! upgrade from an origin the policy does not allow ([`CorsPolicy::refuses_origin`]). Every
//! header value is built once, when the router is; a request only compares its `Origin` with
//! the allowed one.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;

use crate::state::CorsMode;

/// `Vary` of every answer: what a cache must key a cross-origin answer on.
const VARY: HeaderValue =
    HeaderValue::from_static("origin, access-control-request-method, access-control-request-headers");
/// Any origin, method or header (development).
const WILDCARD: HeaderValue = HeaderValue::from_static("*");
/// The request headers admitted in both modes (INTERFACE.md §10): authentication, JSON bodies,
/// idempotent retries, request signatures (INTERFACE.md §11) and a caller's request id.
pub const ALLOW_HEADERS: &str =
    "authorization,content-type,idempotency-key,signature,signature-input,content-digest,x-request-id";
/// Development admits any other header as well. `*` covers every name but `Authorization`
/// (Fetch standard), which is why the names are listed too.
const DEV_ALLOW_HEADERS: &str =
    "*,authorization,content-type,idempotency-key,signature,signature-input,content-digest,x-request-id";
/// The answer headers a cross-origin page may read, in both modes (INTERFACE.md §10): the DID
/// layer's `X-RateLimit-*`, `Retry-After` of a 429 or a quarantine, the request id, and the
/// event sequence a write answers with.
pub const EXPOSE_HEADERS: &str =
    "x-ratelimit-limit,x-ratelimit-remaining,x-ratelimit-reset,retry-after,x-request-id,icn-event-seq";

/// The cross-origin headers of one mode, built once.
#[derive(Debug, Clone)]
pub struct CorsPolicy {
    /// Development: every origin, answered `*`.
    any_origin: bool,
    /// Production: the one origin allowed, if one is configured.
    origin: Option<HeaderValue>,
    allow_methods: HeaderValue,
    allow_headers: HeaderValue,
    max_age: Option<HeaderValue>,
    expose_headers: HeaderValue,
}

impl CorsPolicy {
    /// The policy of `mode`.
    pub fn new(mode: &CorsMode) -> Self {
        match mode {
            CorsMode::Development => Self {
                any_origin: true,
                origin: None,
                allow_methods: WILDCARD,
                allow_headers: HeaderValue::from_static(DEV_ALLOW_HEADERS),
                max_age: None,
                expose_headers: HeaderValue::from_static(EXPOSE_HEADERS),
            },
            CorsMode::Production { origin } => Self {
                any_origin: false,
                origin: origin.clone(),
                allow_methods: HeaderValue::from_static("GET,POST,PUT,DELETE"),
                allow_headers: HeaderValue::from_static(ALLOW_HEADERS),
                max_age: Some(HeaderValue::from_static("3600")),
                expose_headers: HeaderValue::from_static(EXPOSE_HEADERS),
            },
        }
    }

    /// `Access-Control-Allow-Origin` for a request with these headers: `*` in development, the
    /// request's own `Origin` in production when it is the configured one, else none.
    pub fn allow_origin(&self, request: &HeaderMap) -> Option<HeaderValue> {
        if self.any_origin {
            return Some(WILDCARD);
        }
        let origin = request.get(header::ORIGIN)?;
        (self.origin.as_ref() == Some(origin)).then(|| origin.clone())
    }

    /// Whether a WebSocket upgrade with these headers is refused for its origin: in
    /// production, when `Origin` is present and not the configured one (a page of another
    /// origin, or an opaque `null` one). Without `Origin` the client is not a browser page,
    /// and the same-origin policy has nothing to protect; development allows every origin.
    pub fn refuses_origin(&self, request: &HeaderMap) -> bool {
        !self.any_origin && request.contains_key(header::ORIGIN) && self.allow_origin(request).is_none()
    }

    /// The answer to a preflight: 200, no body, the methods, headers and max age allowed (the
    /// origin and `Vary` come with [`CorsPolicy::answer_headers`], as on every answer).
    pub fn preflight(&self) -> Response {
        let mut response = Response::new(axum::body::Body::empty());
        *response.status_mut() = StatusCode::OK;
        let headers = response.headers_mut();
        headers.insert(header::ACCESS_CONTROL_ALLOW_METHODS, self.allow_methods.clone());
        headers.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, self.allow_headers.clone());
        if let Some(max_age) = &self.max_age {
            headers.insert(header::ACCESS_CONTROL_MAX_AGE, max_age.clone());
        }
        response
    }

    /// The policy's headers on an answer (a preflight's included): `Vary` added to any the
    /// route set, the allowed origin, and (but on a preflight) the exposed headers.
    pub fn answer_headers(&self, headers: &mut HeaderMap, allow_origin: Option<HeaderValue>, preflight: bool) {
        headers.append(header::VARY, VARY);
        if let Some(origin) = allow_origin {
            headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        }
        if !preflight {
            headers.insert(header::ACCESS_CONTROL_EXPOSE_HEADERS, self.expose_headers.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(origin: Option<&'static str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(origin) = origin {
            headers.insert(header::ORIGIN, HeaderValue::from_static(origin));
        }
        headers
    }

    #[test]
    fn production_allows_only_the_configured_origin() {
        let policy =
            CorsPolicy::new(&CorsMode::Production { origin: Some(HeaderValue::from_static("https://app.example")) });
        assert_eq!(policy.allow_origin(&request(Some("https://app.example"))).unwrap(), "https://app.example");
        assert_eq!(policy.allow_origin(&request(Some("https://evil.example"))), None);
        assert_eq!(policy.allow_origin(&request(Some("https://app.example.evil"))), None);
        assert_eq!(policy.allow_origin(&request(None)), None);
        let closed = CorsPolicy::new(&CorsMode::Production { origin: None });
        assert_eq!(closed.allow_origin(&request(Some("https://app.example"))), None);
        assert_eq!(closed.allow_origin(&request(Some("null"))), None);
    }

    #[test]
    fn a_websocket_origin_is_refused_only_when_present_and_not_allowed_in_production() {
        let policy =
            CorsPolicy::new(&CorsMode::Production { origin: Some(HeaderValue::from_static("https://app.example")) });
        assert!(!policy.refuses_origin(&request(Some("https://app.example"))));
        assert!(!policy.refuses_origin(&request(None)), "not a browser page");
        for hostile in ["https://evil.example", "null", "https://app.example.evil", "HTTPS://APP.EXAMPLE", ""] {
            let mut headers = HeaderMap::new();
            headers.insert(header::ORIGIN, HeaderValue::from_str(hostile).unwrap());
            assert!(policy.refuses_origin(&headers), "{hostile:?}");
        }
        let closed = CorsPolicy::new(&CorsMode::Production { origin: None });
        assert!(closed.refuses_origin(&request(Some("https://app.example"))));
        let dev = CorsPolicy::new(&CorsMode::Development);
        assert!(!dev.refuses_origin(&request(Some("https://evil.example"))));
    }

    #[test]
    fn production_preflight_names_the_spec_methods_headers_and_max_age() {
        let policy = CorsPolicy::new(&CorsMode::Production { origin: None });
        let mut preflight = policy.preflight();
        assert_eq!(preflight.status(), StatusCode::OK);
        policy.answer_headers(preflight.headers_mut(), None, true);
        let headers = preflight.headers();
        assert_eq!(headers[header::ACCESS_CONTROL_ALLOW_METHODS], "GET,POST,PUT,DELETE");
        assert_eq!(headers[header::ACCESS_CONTROL_ALLOW_HEADERS], ALLOW_HEADERS);
        assert_eq!(headers[header::ACCESS_CONTROL_MAX_AGE], "3600");
        assert_eq!(headers[header::VARY], VARY);
        assert!(!headers.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN));
        assert!(!headers.contains_key(header::ACCESS_CONTROL_EXPOSE_HEADERS));
    }

    #[test]
    fn development_allows_everything_and_exposes_the_api_headers() {
        let policy = CorsPolicy::new(&CorsMode::Development);
        let origin = policy.allow_origin(&request(Some("http://localhost:5173")));
        assert_eq!(origin.as_ref().unwrap(), "*");
        let mut headers = HeaderMap::new();
        headers.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
        policy.answer_headers(&mut headers, origin, false);
        assert_eq!(headers[header::ACCESS_CONTROL_ALLOW_ORIGIN], "*");
        assert_eq!(headers[header::ACCESS_CONTROL_EXPOSE_HEADERS], EXPOSE_HEADERS);
        let vary: Vec<_> = headers.get_all(header::VARY).iter().collect();
        assert_eq!(vary, [&HeaderValue::from_static("accept-encoding"), &VARY], "a route's Vary is kept");
        let preflight = policy.preflight();
        assert_eq!(preflight.headers()[header::ACCESS_CONTROL_ALLOW_METHODS], "*");
        let allowed = preflight.headers()[header::ACCESS_CONTROL_ALLOW_HEADERS].to_str().unwrap();
        assert!(allowed.split(',').any(|h| h == "*"), "{allowed}");
        for name in ALLOW_HEADERS.split(',') {
            assert!(allowed.split(',').any(|h| h == name), "{name} is named, not left to the wildcard");
        }
        assert!(!preflight.headers().contains_key(header::ACCESS_CONTROL_MAX_AGE));
    }
}
