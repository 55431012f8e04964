//! The outermost handling of every request, in one place and one pass ([`EdgeLayer`]): the
//! request id (a trusted proxy's, or a new one) and its trace span, the client's quarantine,
//! the HTTP metrics by route template, the one access-log line per request and the one error line
//! per failure, the misbehaviour a response reports, counted against the client's address, and
//! the security headers of every answer, the cross-origin policy ([`CorsPolicy`]: preflights
//! answered here, its headers on every answer) and the refusal of a declared oversize body. One
//! hand-written service instead of a stack of middleware: each layer of a stack is cloned and
//! boxed for every request, and a profile of balance reads put the stack at a third of the
//! gateway's time (docs/PERFORMANCE.md). Its headers are built once, when the router is.
//!
//! Labels stay bounded: the route is the matched template (`/v1/ledger/{coop}/balance/{did}`),
//! never the raw path, the method is one of the standard ones or `other`, the status a number.
//! This module makes no decision about a request beyond the quarantine and the origin of a
//! WebSocket upgrade.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, MatchedPath, Request};
use axum::http::{HeaderMap, HeaderValue, Method, header};
use axum::response::{IntoResponse, Response};
use gateway_core::Error;
use gateway_limits::Violation;
use metrics::{Counter, Gauge, Histogram};

use crate::cors::CorsPolicy;
use crate::error::{ApiError, InternalCause};
use crate::limits::{RateLimits, request_client_ip};
use crate::middleware::REQUEST_ID;
use crate::state::AppState;

/// Requests answered, by method, route template and status.
pub const REQUESTS_TOTAL: &str = "icn_gateway_http_requests_total";
/// Time from receiving a request's head to the response's head, by method and route template.
pub const REQUEST_DURATION: &str = "icn_gateway_http_request_duration_seconds";
/// Requests being handled now.
pub const REQUESTS_IN_FLIGHT: &str = "icn_gateway_http_requests_in_flight";
/// The buckets of [`REQUEST_DURATION`], in seconds: from 100 µs (a cached read) to 10 s.
pub const DURATION_BUCKETS: &[f64] =
    &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// The route label of a request no route matched.
const UNMATCHED: &str = "unmatched";

/// The longest request id kept from a trusted proxy.
const MAX_REQUEST_ID: usize = 128;

/// Metric handles by route template, looked up without allocating once a combination has been
/// seen (the `metrics` macros would build and hash a key, with owned label strings, every time).
pub struct HttpMetrics {
    enabled: bool,
    in_flight: Gauge,
    /// By route template (never a client's text: unmatched requests share one label), so a
    /// fast hash.
    routes: RwLock<HashMap<Box<str>, Vec<RouteHandles>, foldhash::fast::RandomState>>,
}

struct RouteHandles {
    method: Method,
    status: u16,
    requests: Counter,
    duration: Histogram,
}

impl std::fmt::Debug for HttpMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpMetrics").field("enabled", &self.enabled).finish_non_exhaustive()
    }
}

impl HttpMetrics {
    /// Handles on the installed recorder; `enabled: false` records nothing at all.
    pub fn new(enabled: bool) -> Self {
        Self { enabled, in_flight: metrics::gauge!(REQUESTS_IN_FLIGHT), routes: RwLock::default() }
    }

    fn record(&self, method: &Method, route: &str, status: u16, elapsed: Duration) {
        if !self.enabled {
            return;
        }
        let seen = |handles: &Vec<RouteHandles>| {
            handles.iter().find(|h| h.status == status && h.method == *method).map(|h| {
                h.requests.increment(1);
                h.duration.record(elapsed.as_secs_f64());
            })
        };
        if let Some(handles) = self.routes.read().unwrap_or_else(std::sync::PoisonError::into_inner).get(route)
            && seen(handles).is_some()
        {
            return;
        }
        let method_label = method_label(method);
        let handles = RouteHandles {
            method: method.clone(),
            status,
            requests: metrics::counter!(REQUESTS_TOTAL, "method" => method_label, "route" => route.to_owned(), "status" => status.to_string()),
            duration: metrics::histogram!(REQUEST_DURATION, "method" => method_label, "route" => route.to_owned()),
        };
        handles.requests.increment(1);
        handles.duration.record(elapsed.as_secs_f64());
        let mut routes = self.routes.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let list = routes.entry(route.into()).or_default();
        if !list.iter().any(|h| h.status == status && h.method == *method) {
            list.push(handles);
        }
    }
}

/// A bounded method label.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// Counts a request in flight while alive (dropped with the request's future if the client goes
/// away first).
struct InFlight(Option<Gauge>);

impl InFlight {
    fn new(metrics: &HttpMetrics) -> Self {
        let gauge = metrics.enabled.then(|| metrics.in_flight.clone());
        if let Some(gauge) = &gauge {
            gauge.increment(1.0);
        }
        Self(gauge)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(gauge) = &self.0 {
            gauge.decrement(1.0);
        }
    }
}

/// The request id of a request: the `X-Request-Id` it came with when a trusted proxy sent it (a
/// short, printable token), or a new one. A client cannot choose the id its requests are
/// logged under.
fn request_id(limits: &RateLimits, headers: &HeaderMap, peer: IpAddr) -> HeaderValue {
    if let Some(value) = headers.get(REQUEST_ID) {
        let printable = !value.is_empty()
            && value.len() <= MAX_REQUEST_ID
            && value.as_bytes().iter().all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(b));
        if printable && limits.is_trusted(peer) {
            return value.clone();
        }
    }
    new_request_id()
}

/// A new request id: a random (version 4) UUID, from the thread's cryptographically seeded
/// generator rather than one `getrandom` system call per request.
pub fn new_request_id() -> HeaderValue {
    uuid_v4(rand::random())
}

/// The hyphenated text of a version 4 UUID made of `bytes`: each byte's two hex digits from a
/// table, into fixed places (a request id is made for every request).
fn uuid_v4(mut bytes: [u8; 16]) -> HeaderValue {
    /// Where each byte's two digits go in `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`.
    const AT: [usize; 16] = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34];
    const HEX_PAIRS: [[u8; 2]; 256] = {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut pairs = [[0u8; 2]; 256];
        let mut i = 0;
        while i < 256 {
            pairs[i] = [HEX[i >> 4], HEX[i & 0x0f]];
            i += 1;
        }
        pairs
    };
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let mut text = *b"00000000-0000-0000-0000-000000000000";
    for (byte, at) in bytes.iter().zip(AT) {
        text[at..at + 2].copy_from_slice(&HEX_PAIRS[usize::from(*byte)]);
    }
    HeaderValue::from_bytes(&text).expect("hex digits and hyphens are a valid header value")
}

fn peer_ip(request: &Request) -> IpAddr {
    request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| addr.ip())
        .unwrap_or(IpAddr::from([127, 0, 0, 1]))
}

/// The edge of every route: see the module's description. Built once per router
/// ([`crate::router_with`]); axum gives each route its own copy, which shares everything the
/// edge holds.
#[derive(Clone)]
pub struct EdgeLayer {
    shared: Arc<Shared>,
}

/// What every copy of the edge shares.
struct Shared {
    state: AppState,
    cors: CorsPolicy,
}

impl EdgeLayer {
    /// The edge over the gateway's services (rate-limit settings, metrics, quarantine, TLS,
    /// cross-origin mode).
    pub fn new(state: AppState) -> Self {
        let cors = CorsPolicy::new(&state.config.cors);
        Self { shared: Arc::new(Shared { state, cors }) }
    }
}

impl std::fmt::Debug for EdgeLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdgeLayer").finish_non_exhaustive()
    }
}

impl<S> std::fmt::Debug for Edge<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Edge").finish_non_exhaustive()
    }
}

impl<S> tower::Layer<S> for EdgeLayer {
    type Service = Edge<S>;

    fn layer(&self, inner: S) -> Edge<S> {
        Edge { shared: self.shared.clone(), inner }
    }
}

/// The service [`EdgeLayer`] makes.
#[derive(Clone)]
pub struct Edge<S> {
    shared: Arc<Shared>,
    inner: S,
}

/// What the edge learnt of a request before passing it on, for its answer.
struct Seen {
    started: Instant,
    method: Method,
    /// The matched route template.
    route: Option<MatchedPath>,
    request_id: HeaderValue,
    client: IpAddr,
    exempt: bool,
    swagger: bool,
    /// `Access-Control-Allow-Origin` for this request's origin, if it is an allowed one.
    allow_origin: Option<HeaderValue>,
    /// For a request that declared a body: whether it has been read to its end. An answer
    /// given before then says `Connection: close`, since hyper will not read the rest to keep
    /// the connection; without it, the client's next request on the connection would fail.
    body_read: Option<Arc<AtomicBool>>,
}

impl<S> tower::Service<Request> for Edge<S>
where
    S: tower::Service<Request, Response = Response, Error = Infallible>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = EdgeFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    /// Everything before the route runs is synchronous, so the route's future is made here,
    /// on this copy of the route (axum copies each route's stack once per request), with no
    /// second copy of the inner service as an async middleware would make, and no box.
    fn call(&mut self, mut request: Request) -> Self::Future {
        let Shared { state, cors } = &*self.shared;
        let request_id = request_id(&state.limits, request.headers(), peer_ip(&request));
        request.headers_mut().insert(REQUEST_ID, request_id.clone());
        // The router's match (axum shares it: cloning it allocates nothing).
        let route = request.extensions().get::<MatchedPath>().cloned();
        let client = request_client_ip(&state.limits, &request);
        // A trusted proxy is never quarantined: its clients are, by the address it forwards.
        let exempt = state.limits.is_trusted(client);
        let seen = Seen {
            started: Instant::now(),
            method: request.method().clone(),
            route,
            request_id,
            client,
            exempt,
            swagger: request.uri().path().starts_with("/swagger-ui"),
            allow_origin: cors.allow_origin(request.headers()),
            body_read: has_body(&request).then(|| Arc::new(AtomicBool::new(false))),
        };
        // A span per request, so that whatever a handler logs carries the request id (under the
        // crate's target, as before the edge was one service: log filters name it).
        let span = tracing::info_span!(target: "gateway_http", "request", request_id = seen.request_id.to_str().unwrap_or("-"));
        let quarantined = if exempt { None } else { state.misbehavior.quarantined_for(client) };
        let early = if let Some(wait) = quarantined {
            Some(quarantine_response(wait))
        } else if seen.method == Method::OPTIONS {
            // Every OPTIONS request is a preflight: no route answers OPTIONS.
            Some(cors.preflight())
        } else if is_websocket_upgrade(&request) && cors.refuses_origin(request.headers()) {
            // Browsers do not preflight a WebSocket upgrade, and the socket is not bound by the
            // same-origin policy: a page elsewhere could open one with its visitor's cookies
            // or token. Refused before the route, so before any frame (INTERFACE.md §10).
            Some(origin_refused())
        } else {
            declared_oversize(&request)
        };
        if let Some(response) = early {
            let response = span.in_scope(|| answered(&self.shared, seen, response));
            return EdgeFuture { state: State::Answered { response: Some(response) } };
        }
        request.extensions_mut().insert(gateway_limits::ClientAddress { ip: client, exempt });
        if let Some(read) = &seen.body_read {
            // The body is due within the body timeout of the head (INTERFACE.md §1).
            let body = std::mem::take(request.body_mut());
            let timed = crate::extract::Deadline::new(body, state.config.body_timeout).telling(read.clone());
            *request.body_mut() = axum::body::Body::new(timed);
        }
        let in_flight = InFlight::new(&state.http_metrics);
        let route = span.in_scope(|| self.inner.call(request));
        EdgeFuture { state: State::Routing { route, span, done: Some((self.shared.clone(), seen, in_flight)) } }
    }
}

pin_project_lite::pin_project! {
    /// The future of [`Edge`]: an answer given at the edge, or the route's, which the edge
    /// completes (metrics, logs, headers) inside the request's span.
    pub struct EdgeFuture<F> {
        #[pin]
        state: State<F>,
    }

    impl<F> PinnedDrop for EdgeFuture<F> {
        /// A route's future dropped before it answered (its client went away) is dropped inside
        /// the request's span, as `tracing`'s `Instrumented` does: whatever it logs then keeps
        /// the request id.
        fn drop(this: Pin<&mut Self>) {
            let mut state = this.project().state;
            let unfinished = match state.as_mut().project() {
                StateProj::Routing { span, done: Some(_), .. } => Some(span.clone()),
                _ => None,
            };
            if let Some(span) = unfinished {
                let _entered = span.enter();
                state.set(State::Answered { response: None });
            }
        }
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<F> {
        Answered { response: Option<Response> },
        Routing {
            #[pin]
            route: F,
            span: tracing::Span,
            done: Option<(Arc<Shared>, Seen, InFlight)>,
        },
    }
}

impl<F> Future for EdgeFuture<F>
where
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = Result<Response, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Answered { response } => {
                Poll::Ready(Ok(response.take().expect("an edge future is not polled after it is ready")))
            }
            StateProj::Routing { route, span, done } => {
                let _entered = span.enter();
                let Ok(response) = std::task::ready!(route.poll(cx));
                let (shared, seen, in_flight) = done.take().expect("an edge future is not polled after it is ready");
                drop(in_flight);
                Poll::Ready(Ok(answered(&shared, seen, response)))
            }
        }
    }
}

/// Records what an answer says ([`recorded`]) and gives it the request id and the security
/// headers.
fn answered(shared: &Shared, seen: Seen, mut response: Response) -> Response {
    recorded(shared, &seen, response.status().as_u16(), response.extensions());
    let Seen { method, request_id, swagger, allow_origin, body_read, .. } = seen;
    // The id the lines were logged under, whatever the route set.
    let headers = response.headers_mut();
    if body_read.is_some_and(|read| !read.load(Ordering::Acquire)) {
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    headers.insert(REQUEST_ID, request_id);
    security_headers(headers, shared.state.config.tls, swagger);
    shared.cors.answer_headers(headers, allow_origin, method == Method::OPTIONS);
    response
}

/// Records what an answer says: the metrics, the client's misbehaviour, the cause of a failure,
/// the access-log line.
fn recorded(shared: &Shared, seen: &Seen, status: u16, extensions: &axum::http::Extensions) {
    let state = &shared.state;
    let Seen { started, method, route, client, exempt, .. } = seen;
    let route = route.as_ref().map_or(UNMATCHED, MatchedPath::as_str);
    let elapsed = started.elapsed();
    state.http_metrics.record(method, route, status, elapsed);
    // Counted against the client (a trusted proxy never is); only the kinds that need a crafted
    // credential count toward a quarantine, which the tracker logs itself.
    if !exempt && let Some(violation) = extensions.get::<Violation>() {
        state.misbehavior.record(*client, *violation);
    }
    // Both lines are written inside the request's span, which carries its id: once per line.
    if let Some(InternalCause(cause)) = extensions.get::<InternalCause>() {
        tracing::error!(%client, %method, route, status, cause, "request failed");
    }
    // Microsecond precision: `0.09`, not `0.08999900000000001`.
    let latency_ms = (elapsed.as_secs_f64() * 1_000_000.0).round() / 1000.0;
    if PROBES.contains(&route) {
        // A load balancer's probes every few seconds would drown the traffic: debug only.
        tracing::debug!(target: "gateway::access", %client, %method, route, status, latency_ms, "request");
    } else {
        tracing::info!(target: "gateway::access", %client, %method, route, status, latency_ms, "request");
    }
}

/// The health and readiness probes, whose access lines are logged at debug.
const PROBES: [&str; 3] = ["/healthz", "/readyz", "/v1/health"];

/// The security headers of every answer. The Swagger UI pages get the relaxed
/// Content-Security-Policy they need (inline styles and scripts, data: images); nothing else does.
fn security_headers(headers: &mut HeaderMap, tls: bool, swagger: bool) {
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
}

/// 413 with the error body for a request whose declared `Content-Length` is over the body
/// limit: refused before any of it is read, and before any other work (authentication
/// included). A client that sent `Expect: 100-continue` is never told to send the body.
fn declared_oversize(request: &Request) -> Option<Response> {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    declared
        .is_some_and(|length| length > crate::extract::BODY_LIMIT_BYTES as u64)
        .then(|| ApiError::PayloadTooLarge { limit_bytes: crate::extract::BODY_LIMIT_BYTES }.into_response())
}

/// Whether a request announces a body (a length, or chunks).
fn has_body(request: &Request) -> bool {
    let headers = request.headers();
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).is_some_and(|v| v.trim() != "0")
}

/// Whether `request` asks for a WebSocket: an HTTP/1.1 `Upgrade` naming `websocket` (in any
/// case, among other protocols), or an HTTP/2 extended `CONNECT` (RFC 8441).
fn is_websocket_upgrade(request: &Request) -> bool {
    request.method() == Method::CONNECT
        || request
            .headers()
            .get_all(header::UPGRADE)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .any(|protocol| protocol.trim().eq_ignore_ascii_case("websocket"))
}

/// 403 `AUTHORIZATION_FAILED` with `details.reason = "origin_not_allowed"`: a WebSocket upgrade
/// from a page of an origin the cross-origin policy does not allow.
fn origin_refused() -> Response {
    ApiError::from(Error::denied("origin_not_allowed", "WebSocket connections from this origin are not allowed"))
        .into_response()
}

/// 403 `AUTHORIZATION_FAILED` with `details.reason = "quarantined"` and `Retry-After`.
fn quarantine_response(wait: Duration) -> Response {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let mut response = ApiError::from(Error::denied(
        "quarantined",
        format!("this address is quarantined for repeated protocol violations; retry in {secs} s"),
    ))
    .into_response();
    response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs.max(1)));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_version_4_uuids() {
        assert_eq!(uuid_v4([0; 16]).to_str().unwrap(), "00000000-0000-4000-8000-000000000000");
        assert_eq!(uuid_v4([0xff; 16]).to_str().unwrap(), "ffffffff-ffff-4fff-bfff-ffffffffffff");
        let counting: [u8; 16] = std::array::from_fn(|i| (i as u8) * 0x11);
        assert_eq!(uuid_v4(counting).to_str().unwrap(), "00112233-4455-4677-8899-aabbccddeeff");
        let ids: std::collections::HashSet<String> =
            (0..1000).map(|_| new_request_id().to_str().unwrap().to_owned()).collect();
        assert_eq!(ids.len(), 1000, "every id is new");
        for id in &ids {
            let parts: Vec<&str> = id.split('-').collect();
            assert_eq!(parts.iter().map(|p| p.len()).collect::<Vec<_>>(), [8, 4, 4, 4, 12], "{id}");
            assert!(parts[2].starts_with('4') && matches!(&parts[3][..1], "8" | "9" | "a" | "b"), "{id}");
        }
    }
}
