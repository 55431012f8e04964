//! The outermost handling of every request, in one place: the request id a trusted proxy sent,
//! the client's quarantine, the HTTP metrics by route template, the one access-log line per
//! request and the one error line per failure, and the misbehaviour a response reports, counted
//! against the client's address.
//!
//! Labels stay bounded: the route is the matched template (`/v1/ledger/{coop}/balance/{did}`),
//! never the raw path, the method is one of the standard ones or `other`, the status a number.
//! This module makes no decision about a request beyond the quarantine.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, MatchedPath, Request, State};
use axum::http::{HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use gateway_core::Error;
use gateway_limits::Violation;
use metrics::{Counter, Gauge, Histogram};

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
    routes: RwLock<HashMap<Box<str>, Vec<RouteHandles>>>,
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

/// Counts a request in flight while alive.
struct InFlight<'a>(Option<&'a Gauge>);

impl<'a> InFlight<'a> {
    fn new(metrics: &'a HttpMetrics) -> Self {
        let gauge = metrics.enabled.then_some(&metrics.in_flight);
        if let Some(gauge) = gauge {
            gauge.increment(1.0);
        }
        Self(gauge)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(gauge) = self.0 {
            gauge.decrement(1.0);
        }
    }
}

/// Keeps an incoming `X-Request-Id` only when it comes from a trusted proxy (and is a short,
/// printable token); anyone else's is dropped, so the request-id layer after this one issues a
/// fresh one. A client cannot choose the id its requests are logged under.
pub async fn keep_trusted_request_id(
    State(limits): State<Arc<RateLimits>>,
    mut request: Request,
    next: Next,
) -> Response {
    if let Some(value) = request.headers().get(REQUEST_ID) {
        let peer = peer_ip(&request);
        let printable = value.len() <= MAX_REQUEST_ID
            && value.as_bytes().iter().all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(b));
        if !(printable && limits.is_trusted(peer)) {
            request.headers_mut().remove(REQUEST_ID);
        }
    }
    next.run(request).await
}

/// Makes the request ids the edge issues: random (version 4) UUIDs, from the thread's
/// cryptographically seeded generator rather than one `getrandom` system call per request.
#[derive(Debug, Clone, Copy, Default)]
pub struct MakeRandomRequestId;

impl tower_http::request_id::MakeRequestId for MakeRandomRequestId {
    fn make_request_id<B>(&mut self, _: &axum::http::Request<B>) -> Option<tower_http::request_id::RequestId> {
        Some(tower_http::request_id::RequestId::new(uuid_v4(rand::random())))
    }
}

/// The hyphenated text of a version 4 UUID made of `bytes`.
fn uuid_v4(mut bytes: [u8; 16]) -> HeaderValue {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let mut text = [0u8; 36];
    let mut at = 0;
    for (i, byte) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            text[at] = b'-';
            at += 1;
        }
        text[at] = HEX[usize::from(byte >> 4)];
        text[at + 1] = HEX[usize::from(byte & 0x0f)];
        at += 2;
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

/// Refuses a quarantined client, then serves the request and records what its answer says:
/// metrics, the access-log line, the cause of a failure, and the client's misbehaviour.
pub async fn observe(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = request.method().clone();
    let route: Arc<str> = match request.extensions().get::<MatchedPath>() {
        Some(path) => path.as_str().into(),
        None => UNMATCHED.into(),
    };
    let request_id = request.headers().get(REQUEST_ID).and_then(|v| v.to_str().ok()).unwrap_or("-").to_owned();
    let client = request_client_ip(&state.limits, &request);
    // A trusted proxy is never quarantined: its clients are, by the address it forwards.
    let exempt = state.limits.is_trusted(client);
    request.extensions_mut().insert(gateway_limits::ClientAddress { ip: client, exempt });
    if has_body(&request) {
        // The body is due within the body timeout of the head (contract 1).
        let request_with_deadline = std::mem::take(request.body_mut());
        *request.body_mut() =
            axum::body::Body::new(crate::extract::Deadline::new(request_with_deadline, state.config.body_timeout));
    }
    let quarantined = if exempt { None } else { state.misbehavior.quarantined_for(client) };
    let response = match quarantined {
        Some(wait) => quarantine_response(wait),
        None => {
            let _in_flight = InFlight::new(&state.http_metrics);
            next.run(request).await
        }
    };
    let status = response.status().as_u16();
    let elapsed = started.elapsed();
    state.http_metrics.record(&method, &route, status, elapsed);
    if !exempt
        && let Some(violation) = response.extensions().get::<Violation>()
        && let Some(quarantine) = state.misbehavior.record(client, *violation)
    {
        tracing::warn!(
            %client,
            violation = violation.as_str(),
            quarantine_secs = quarantine.as_secs(),
            "client quarantined after repeated protocol violations"
        );
    }
    if let Some(InternalCause(cause)) = response.extensions().get::<InternalCause>() {
        tracing::error!(request_id, %method, route = &*route, status, cause, "request failed");
    }
    tracing::info!(
        target: "gateway::access",
        request_id,
        %method,
        route = &*route,
        status,
        // Microsecond precision: `0.09`, not `0.08999900000000001`.
        latency_ms = (elapsed.as_secs_f64() * 1_000_000.0).round() / 1000.0,
        "request"
    );
    response
}

/// Whether a request announces a body (a length, or chunks).
fn has_body(request: &Request) -> bool {
    let headers = request.headers();
    headers.contains_key(header::TRANSFER_ENCODING)
        || headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).is_some_and(|v| v.trim() != "0")
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
        let mut make = MakeRandomRequestId;
        let request = axum::http::Request::new(());
        let ids: std::collections::HashSet<String> = (0..1000)
            .map(|_| {
                use tower_http::request_id::MakeRequestId;
                make.make_request_id(&request).unwrap().header_value().to_str().unwrap().to_owned()
            })
            .collect();
        assert_eq!(ids.len(), 1000, "every id is new");
        for id in &ids {
            let parts: Vec<&str> = id.split('-').collect();
            assert_eq!(parts.iter().map(|p| p.len()).collect::<Vec<_>>(), [8, 4, 4, 4, 12], "{id}");
            assert!(parts[2].starts_with('4') && matches!(&parts[3][..1], "8" | "9" | "a" | "b"), "{id}");
        }
    }
}
