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
use std::task::{Context, Poll};

use axum::Router;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use futures_util::future::Either;

use crate::caller::Authorized;
use crate::caller::scopes::LedgerRead;
use crate::edge::{Edge, EdgeLayer};
use crate::extract::{Path, Query};
use crate::routes::ledger::{self, BalanceQuery};
use crate::state::AppState;

/// The route template of the balance read, as the router names it.
pub const BALANCE_ROUTE: &str = "/v1/ledger/{coop}/balance/{did}";

/// The whole HTTP API as served: see the module's description.
#[derive(Clone)]
pub struct Gateway {
    router: Router,
    balance: Edge<BalanceRead>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway").finish_non_exhaustive()
    }
}

impl Gateway {
    /// `router` (from [`crate::router_with`] over `state`), with balance reads taken before it.
    pub(crate) fn new(state: AppState, router: Router, edge: &EdgeLayer) -> Self {
        Self { router, balance: edge.for_route(BALANCE_ROUTE, BalanceRead { state }) }
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
fn balance_path(path: &str) -> Option<(&str, &str)> {
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
