//! The API as served: the router, with the gateway's hottest request, a plain balance read
//! (`GET /v1/ledger/{coop}/balance/{did}`), taken before routing.
//!
//! Matching a path against every route, decoding its parameters into shared strings, and the
//! route's boxed layers cost about a fifth of a balance read's work (docs/PERFORMANCE.md). A
//! read whose path has that exact shape and needs nothing the router would treat specially
//! (see [`takes`]) is served by the same pieces the router would run, in the same order: the
//! edge ([`EdgeLayer::for_route`], labelled with the route's template), authentication and the
//! rate limits ([`crate::middleware::authenticated`]), the scope check ([`Authorized`]) and the
//! handler itself ([`ledger::balance`]). Anything else goes to the router. The answers are the
//! same either way: `tests/it/hot.rs` sends the same requests both ways and compares them.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::Router;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use futures_util::future::Either;

use crate::caller::Authorized;
use crate::caller::scopes::LedgerRead;
use crate::edge::{Edge, EdgeLayer, FrontEdge};
use crate::extract::{Path, Query};
use crate::routes::ledger::{self, BalanceAnswer, BalanceQuery};
use crate::state::AppState;

/// The route template of the balance read, as the router names it.
pub const BALANCE_ROUTE: &str = "/v1/ledger/{coop}/balance/{did}";

/// The whole HTTP API as served: see the module's description.
#[derive(Clone)]
pub struct Gateway {
    router: Router,
    balance: Edge<BalanceRead>,
    front: Front,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway").finish_non_exhaustive()
    }
}

impl Gateway {
    /// `router` (from [`crate::router_with`] over `state`), with balance reads taken before it.
    pub(crate) fn new(state: AppState, router: Router, edge: &EdgeLayer) -> Self {
        let front = Front { inner: Arc::new(FrontInner { state: state.clone(), edge: edge.front() }) };
        Self { router, balance: edge.for_route(BALANCE_ROUTE, BalanceRead { state }), front }
    }

    /// The balance reads its connections answer themselves ([`Front`]).
    pub(crate) fn front(&self) -> &Front {
        &self.front
    }
}

/// Whether a request is a plain balance read the router would hand to [`ledger::balance`] with
/// nothing else to decide: `GET` (not `HEAD`), no query, the path exactly
/// `/v1/ledger/{coop}/balance/{did}` with both segments non-empty and nothing percent-encoded
/// (so that the segments are the parameters the router would decode), and no request
/// signature (whose check the router's route runs).
pub fn takes(request: &Request) -> bool {
    request.method() == Method::GET
        && request.uri().query().is_none()
        && balance_path(request.uri().path()).is_some()
        && !crate::signing::is_signed(request)
}

/// `(coop, did)` of a path of the balance route's exact shape, without `%`.
pub(crate) fn balance_path(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix("/v1/ledger/")?;
    let (coop, rest) = rest.split_once('/')?;
    let did = rest.strip_prefix("balance/")?;
    let plain = !coop.is_empty() && !did.is_empty() && !did.contains('/') && !path.contains('%');
    plain.then_some((coop, did))
}

impl<B> tower::Service<axum::http::Request<B>> for Gateway
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Either<
        futures_util::future::Map<<Edge<BalanceRead> as tower::Service<Request>>::Future, fn(Answer) -> Answer>,
        <Router as tower::Service<Request>>::Future,
    >;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // Both are always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: axum::http::Request<B>) -> Self::Future {
        let request = request.map(axum::body::Body::new);
        if takes(&request) {
            let finish: fn(Answer) -> Answer = |answer| answer.map(with_content_length);
            Either::Left(futures_util::FutureExt::map(tower::Service::call(&mut self.balance, request), finish))
        } else {
            Either::Right(tower::Service::call(&mut self.router, request))
        }
    }
}

type Answer = Result<Response, Infallible>;

/// What the router does last to every answer of a `GET` route: a body of known size gets its
/// `Content-Length` (axum's `set_content_length`).
fn with_content_length(mut response: Response) -> Response {
    use http_body::Body as _;
    if !response.headers().contains_key(axum::http::header::CONTENT_LENGTH)
        && let Some(size) = response.body().size_hint().exact()
    {
        response.headers_mut().insert(axum::http::header::CONTENT_LENGTH, axum::http::HeaderValue::from(size));
    }
    response
}

/// The balance read behind the edge: authentication, the scope, the handler.
#[derive(Clone)]
pub struct BalanceRead {
    state: AppState,
}

impl tower::Service<Request> for BalanceRead {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let state = self.state.clone();
        Box::pin(async move { Ok(read_balance(state, request).await) })
    }
}

/// What the router's route runs for the request, in its order: authentication (the token, the
/// per-DID limit, membership, the limit's headers), then the handler's extractors (the state,
/// the `ledger:read` scope, the path, the query) and the handler.
async fn read_balance(state: AppState, request: Request) -> Response {
    let handler_state = state.clone();
    crate::middleware::authenticated(&state, request, move |request| async move {
        let Some((coop, did)) = balance_path(request.uri().path()).map(|(c, d)| (c.to_owned(), d.to_owned())) else {
            unreachable!("a request is only sent here when `takes` it")
        };
        let (mut parts, _body) = request.into_parts();
        let caller = match Authorized::<LedgerRead>::from_request_parts(&mut parts, &handler_state).await {
            Ok(caller) => caller,
            Err(rejection) => return rejection.into_response(),
        };
        ledger::balance(State(handler_state), caller, Path((coop, did)), Query(BalanceQuery { currency: None }))
            .await
            .into_response()
    })
    .await
}

/// A plain balance read that its connection answers itself (plain HTTP: `serve`'s front):
/// hyper's parsing and dispatch, the request and answer header maps and the edge's header
/// inserts were about a third of a read's instructions (docs/PERFORMANCE.md), and none of it decides
/// anything for a read. The connection parses the head itself and gives this only a request
/// whose answer no field but these can change: a `GET` of the route's exact shape (as [`takes`]),
/// HTTP/1.1, no body, no `Connection`, `Upgrade`, `Expect`, `Origin` or signature field, one
/// `Authorization` at most.
///
/// Its answer is the router's, by the router's steps in the router's order: the edge's
/// ([`FrontEdge`]), then those of [`middleware::authenticated`](crate::middleware) (the bearer
/// token, the DID's limit, [`admit`](crate::middleware::admit)), the `ledger:read` scope
/// ([`Authorized::check`]) and the handler ([`ledger::plain_balance`]). A token that is not a
/// valid bearer token is refused by [`read_balance`] itself, over a request of the path and the
/// fields (nothing is counted before that: the token's check is pure). A refusal after the
/// limit is the route's answer with the admission's headers, written by [`write_answer`]; the
/// balance is written directly, with the same headers. `tests/it/hot.rs` compares the answers
/// over sockets, refusals included.
#[derive(Clone)]
pub struct Front {
    inner: Arc<FrontInner>,
}

struct FrontInner {
    state: AppState,
    edge: FrontEdge,
}

/// A plain balance read's head, as the connection parsed it.
#[derive(Debug)]
pub(crate) struct PlainRead<'a> {
    /// The path: the balance route's shape, nothing percent-encoded, no query.
    pub(crate) path: &'a str,
    /// Its `{coop}` and `{did}`.
    pub(crate) coop: &'a str,
    pub(crate) did: &'a str,
    /// Its one `Authorization` field.
    pub(crate) authorization: Option<&'a [u8]>,
    /// Its `X-Forwarded-For` and `X-Request-Id` fields, in order, when it has any.
    pub(crate) proxy: Option<axum::http::HeaderMap>,
}

impl PlainRead<'_> {
    /// The request the router's route would get: the path and the fields.
    fn request(self) -> Result<Request, crate::error::ApiError> {
        let uri = axum::http::Uri::from_maybe_shared(bytes::Bytes::copy_from_slice(self.path.as_bytes()))
            .map_err(|_| gateway_core::Error::bad_request("the request target is not a valid path"))?;
        let mut request = Request::new(axum::body::Body::empty());
        *request.uri_mut() = uri;
        let headers = request.headers_mut();
        if let Some(proxy) = self.proxy {
            *headers = proxy;
        }
        if let Some(value) = self.authorization {
            let value = axum::http::HeaderValue::from_bytes(value)
                .map_err(|_| gateway_core::Error::bad_request("the Authorization field is malformed"))?;
            headers.insert(axum::http::header::AUTHORIZATION, value);
        }
        Ok(request)
    }
}

/// What a plain read came to.
enum Read {
    /// The balance, to an admitted caller.
    Balance { answer: BalanceAnswer, admission: gateway_limits::Admission },
    /// Any other answer, with the headers the route gave it.
    Answer(Response),
}

impl Front {
    /// The whole answer to `read` from `peer`, as wire bytes, appended to `out` (`body` is room
    /// for the body while the head is written).
    pub(crate) async fn answer(
        &self,
        read: PlainRead<'_>,
        peer: std::net::IpAddr,
        out: &mut Vec<u8>,
        body: &mut Vec<u8>,
    ) -> std::io::Result<()> {
        let FrontInner { state, edge } = &*self.inner;
        let begun = match edge.begin(peer, read.proxy.as_ref().unwrap_or(&axum::http::HeaderMap::new()), BALANCE_ROUTE)
        {
            Ok(begun) => begun,
            Err(answered) => return write_answer(*answered, None, out).await,
        };
        let span = begun.span.clone();
        match tracing::Instrument::instrument(self.read(read), span).await {
            Read::Balance { answer, admission } => {
                let request_id = edge.end(begun, 200, &axum::http::Extensions::new());
                body.clear();
                answer.write_json(body);
                let reset = state.limits.reset_secs(admission.limit, admission.remaining, admission.reset_after);
                let mut number = itoa::Buffer::new();
                // What `BalanceAnswer`, `admitted_headers` and the edge set, in one pass.
                out.extend_from_slice(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncache-control: no-store\r\n",
                );
                wire_field(out, b"x-ratelimit-limit", number.format(admission.limit).as_bytes());
                wire_field(out, b"x-ratelimit-remaining", number.format(admission.remaining).as_bytes());
                wire_field(out, b"x-ratelimit-reset", number.format(reset).as_bytes());
                wire_field(out, crate::middleware::REQUEST_ID.as_str().as_bytes(), request_id.as_bytes());
                out.extend_from_slice(edge.decoration());
                wire_field(out, b"content-length", number.format(body.len()).as_bytes());
                http_date(|date| wire_field(out, b"date", date));
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(body);
                Ok(())
            }
            Read::Answer(response) => {
                let request_id = edge.end(begun, response.status().as_u16(), response.extensions());
                write_answer(response, Some((edge, request_id)), out).await
            }
        }
    }

    /// [`read_balance`]'s steps for a plain read (see [`Front`]).
    async fn read(&self, read: PlainRead<'_>) -> Read {
        let state = &self.inner.state;
        // `HeaderValue::to_str`'s test: visible ASCII and tabs.
        let token = read
            .authorization
            .and_then(|value| std::str::from_utf8(value).ok())
            .filter(|value| value.bytes().all(|b| b == b'\t' || (0x20..0x7f).contains(&b)))
            .and_then(crate::middleware::bearer);
        let Some(verified) = token.and_then(|token| state.auth.tokens().verify(token).ok()) else {
            // Refused before anything is counted: the router's steps say how.
            return Read::Answer(match read.request() {
                Ok(request) => read_balance(state.clone(), request).await,
                Err(err) => err.into_response(),
            });
        };
        let mut caller = crate::middleware::caller_of(verified);
        let admission = match state.limits.check_did(&caller.did).await {
            Ok(admission) => admission,
            Err((err, limit)) => return Read::Answer(crate::middleware::over_limit(state, err, limit)),
        };
        let answer = match crate::middleware::admit(state, &mut caller, read.path, false).await {
            Ok(()) => match Authorized::<LedgerRead>::check(caller) {
                Ok(caller) => ledger::plain_balance(state, &caller, read.coop, read.did).await,
                Err(refusal) => Err(refusal),
            },
            Err(refusal) => Err(refusal),
        };
        match answer {
            Ok(answer) => Read::Balance { answer, admission },
            Err(refusal) => {
                let mut response = refusal.into_response();
                crate::middleware::admitted_headers(state, response.headers_mut(), &admission);
                Read::Answer(response)
            }
        }
    }
}

/// `response` as hyper writes it (status line, fields, `content-length`, `date`, body), with the
/// edge's request id and headers when `edge` gives them (over the route's own, as [`Edge`] sets
/// them).
async fn write_answer(
    response: Response,
    edge: Option<(&FrontEdge, axum::http::HeaderValue)>,
    out: &mut Vec<u8>,
) -> std::io::Result<()> {
    use axum::http::header;
    let (parts, body) = response.into_parts();
    // Every answer of this route is whole in memory: collecting it takes no wait.
    let body = axum::body::to_bytes(body, usize::MAX).await.map_err(std::io::Error::other)?;
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(parts.status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(parts.status.canonical_reason().unwrap_or("<none>").as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in &parts.headers {
        let set_here = *name == header::CONTENT_LENGTH || *name == header::DATE;
        if !set_here && !edge.as_ref().is_some_and(|(edge, _)| edge.replaces(name)) {
            wire_field(out, name.as_str().as_bytes(), value.as_bytes());
        }
    }
    if let Some((edge, request_id)) = &edge {
        wire_field(out, crate::middleware::REQUEST_ID.as_str().as_bytes(), request_id.as_bytes());
        out.extend_from_slice(edge.decoration());
    }
    wire_field(out, b"content-length", itoa::Buffer::new().format(body.len()).as_bytes());
    http_date(|date| wire_field(out, b"date", date));
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&body);
    Ok(())
}

/// One header field of an answer on the wire: `name: value\r\n`.
pub(crate) fn wire_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// Calls `write` with the `Date` of an answer now (as hyper writes it: made once a second).
fn http_date(write: impl FnOnce(&[u8])) {
    thread_local! {
        static LAST: std::cell::RefCell<(u64, [u8; 29])> = const { std::cell::RefCell::new((0, [0; 29])) };
    }
    let now = std::time::SystemTime::now();
    let secs = now.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    LAST.with_borrow_mut(|(at, text)| {
        if *at != secs || text[0] == 0 {
            let formatted = httpdate::fmt_http_date(now);
            if let Ok(bytes) = <[u8; 29]>::try_from(formatted.as_bytes()) {
                *text = bytes;
                *at = secs;
            }
        }
        write(text);
    });
}

impl std::fmt::Debug for Front {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Front").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for BalanceRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BalanceRead").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_shape_is_taken() {
        let did = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK";
        assert_eq!(balance_path(&format!("/v1/ledger/c1/balance/{did}")), Some(("c1", did)));
        for path in [
            "/v1/ledger/c1/balance/".to_owned(),
            format!("/v1/ledger//balance/{did}"),
            format!("/v1/ledger/c1/balance/{did}/"),
            format!("/v1/ledger/c1/balance/{did}/x"),
            format!("/v1/ledger/c1/balances/{did}"),
            format!("/ledger/c1/balance/{did}"),
            "/v1/ledger/c1/balance/did%3Akey%3Az6Mk".to_owned(),
            format!("/v1/ledger/c%31/balance/{did}"),
            "/v1/ledger/c1/history".to_owned(),
        ] {
            assert_eq!(balance_path(&path), None, "{path}");
        }
    }
}
