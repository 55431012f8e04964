//! The HTTP adapter of the gateway: the axum router for both route families (`/v1/...` and the
//! short family), authentication extractors, the error body, OpenAPI and Swagger UI,
//! and serving with graceful shutdown.
//!
//! Handlers translate between wire DTOs and domain calls; no business rule lives here. WebSocket
//! streams are served by `gateway-ws`, whose router is merged in by the binary.

pub mod caller;
pub mod cors;
pub mod edge;
pub mod error;
pub mod extract;
pub mod limits;
pub mod membership;
pub mod middleware;
pub mod openapi;
pub mod routes;
pub mod serve;
pub mod signing;
pub mod state;

use std::future::Future;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::Uri;
use axum::middleware::{from_fn, from_fn_with_state};
use tokio::net::TcpListener;
use tower::ServiceBuilder;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use utoipa_swagger_ui::SwaggerUi;

use crate::routes::{auth, compute, coops, governance, health, identity, ledger, log, notifications, trust};
pub use caller::{Authorized, Caller};
pub use error::{ApiError, ApiResult};
pub use state::{AppState, Cluster, CorsMode, HttpConfig, Services};

/// The login routes: public, behind the IP rate-limit layer.
fn login_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(auth::challenge)).routes(routes!(auth::verify))
}

/// Health and readiness probes: no token, no limit.
fn probe_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(health::health))
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
}

/// Public reads: no token, the public-read IP bucket.
fn public_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(identity::resolve))
        .routes(routes!(coops::stats))
        .routes(routes!(log::checkpoint))
        .routes(routes!(log::key))
        // A tile path has several segments: mounted with a catch-all, documented by `LogTiles`.
        .route("/v1/coops/{id}/log/tile/{*path}", axum::routing::get(log::tile))
}

/// The OpenAPI entries of the log's tile routes, whose paths end in a catch-all.
#[derive(OpenApi)]
#[openapi(paths(log::tile, log::entries))]
struct LogTiles;

/// Routes behind the `authenticate` middleware.
fn protected_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(identity::own_did))
        .routes(routes!(identity::own_public_key))
        .routes(routes!(ledger::payment))
        .routes(routes!(ledger::balance))
        .routes(routes!(ledger::history))
        .routes(routes!(ledger::batch))
        .routes(routes!(ledger::quote))
        .routes(routes!(ledger::convert))
        .routes(routes!(ledger::get_rate))
        .routes(routes!(ledger::set_rate))
        .routes(routes!(routes::export::export))
        .routes(routes!(coops::create, coops::list_coops))
        .routes(routes!(coops::get))
        .routes(routes!(coops::members, coops::add_member))
        .routes(routes!(coops::remove_member))
        .routes(routes!(coops::set_role))
        .routes(routes!(coops::set_credit_limit))
        .routes(routes!(coops::update_settings))
        .routes(routes!(trust::score))
        .routes(routes!(trust::edges))
        .routes(routes!(trust::set_edge))
        .routes(routes!(trust::remove_edge))
        .routes(routes!(notifications::list_notifications))
        .routes(routes!(notifications::mark_read))
        .routes(routes!(notifications::mark_all_read))
        .routes(routes!(governance::create_domain, governance::list_domains))
        .routes(routes!(governance::get_domain, governance::update_domain))
        .routes(routes!(governance::create_proposal, governance::list_proposals))
        .routes(routes!(governance::get_proposal))
        .routes(routes!(governance::open))
        .routes(routes!(governance::vote))
        .routes(routes!(governance::votes))
        .routes(routes!(governance::close))
        .routes(routes!(governance::proof))
        .routes(routes!(governance::signing_keys))
        .routes(routes!(governance::delegate, governance::delegations))
        .routes(routes!(governance::revoke))
        .routes(routes!(compute::submit))
        .routes(routes!(compute::list_tasks))
        .routes(routes!(compute::get_task))
        .routes(routes!(compute::cancel))
        .routes(routes!(compute::claim))
        .routes(routes!(compute::complete))
        .routes(routes!(log::proof))
        .routes(routes!(log::opened))
        .routes(routes!(log::consistency))
        .route("/v1/coops/{id}/log/tile/entries/{*path}", axum::routing::get(log::entries))
        .merge(OpenApiRouter::from(short_routes()))
}

/// Declares the short family once: each line mounts the specification's unversioned path on the
/// handler of its `/v1` operation and lists it in [`SHORT_FAMILY`], from which the OpenAPI
/// document describes it as an alias of that operation ([`openapi::add_aliases`]).
macro_rules! short_family {
    ($($method:ident $path:literal => $handler:path, of $of:literal $(, $note:literal)?;)*) => {
        /// The short family: every unversioned path of the specification with the `/v1`
        /// operation whose handler serves it. The cooperative is the token's; where the
        /// specification gives a short route another default, the handler reads the route's
        /// [`caller::Family`].
        pub const SHORT_FAMILY: &[openapi::Alias] = &[
            $(openapi::Alias { method: stringify!($method), path: $path, of: $of, note: short_family!(@note $($note)?) },)*
        ];

        fn short_routes() -> Router<AppState> {
            Router::new()$(.route($path, axum::routing::$method($handler)))*
        }
    };
    (@note $note:literal) => { $note };
    (@note) => { "" };
}

short_family! {
    post "/ledger/transaction" => ledger::payment, of "/v1/ledger/{coop}/payment",
        "in the token's cooperative; `from` may be left out (it is the caller) and `description` is the memo";
    get "/ledger/balance" => ledger::balance, of "/v1/ledger/{coop}/balance/{did}",
        "the caller's own balance in the token's cooperative";
    get "/ledger/history" => ledger::history, of "/v1/ledger/{coop}/history", "in the token's cooperative";
    get "/coops" => coops::list_coops, of "/v1/coops";
    post "/coops" => coops::create, of "/v1/coops";
    get "/coops/{id}" => coops::get, of "/v1/coops/{id}";
    get "/coops/{id}/members" => coops::members, of "/v1/coops/{id}/members";
    post "/coops/{id}/members" => coops::add_member, of "/v1/coops/{id}/members";
    get "/trust/score/{did}" => trust::score, of "/v1/trust/{did}/score";
    post "/trust/edge" => trust::set_edge, of "/v1/trust/edges";
    get "/governance/proposals" => governance::list_proposals, of "/v1/gov/proposals";
    post "/governance/proposals" => governance::create_proposal, of "/v1/gov/proposals",
        "the proposal is created open (no separate `/open`)";
    post "/governance/proposals/{id}/vote" => governance::vote, of "/v1/gov/proposals/{id}/vote";
    get "/compute/tasks" => compute::list_tasks, of "/v1/compute/tasks";
    post "/compute/tasks" => compute::submit, of "/v1/compute/submit";
    get "/compute/tasks/{id}" => compute::get_task, of "/v1/compute/tasks/{id}";
    post "/compute/tasks/{id}/cancel" => compute::cancel, of "/v1/compute/tasks/{id}/cancel";
    get "/notifications" => notifications::list_notifications, of "/v1/notifications";
    post "/notifications/{id}/read" => notifications::mark_read, of "/v1/notifications/{id}/read";
    post "/notifications/read-all" => notifications::mark_all_read, of "/v1/notifications/read-all";
}

/// The OpenAPI document of every route.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let mut doc = openapi::ApiDoc::openapi();
    for routes in [login_routes(), probe_routes(), public_routes(), protected_routes()] {
        doc.merge(routes.split_for_parts().1);
    }
    doc.merge(LogTiles::openapi());
    openapi::complete(&mut doc);
    doc
}

/// The whole HTTP API with its middleware, ready to serve.
pub fn router(state: AppState) -> Router {
    router_with(state, Router::new(), utoipa::openapi::OpenApi::default())
}

/// [`router`] plus routes served by another crate (the WebSocket stream), which get the same
/// middleware (request ids, security headers, CORS) and whose paths join the OpenAPI document.
pub fn router_with(state: AppState, extra: Router, extra_doc: utoipa::openapi::OpenApi) -> Router {
    let (login, login_api) = login_routes().split_for_parts();
    let login = login
        .route_layer(limits::address_layer(&state.limits, limits::AddressBucket::Login))
        .route_layer(from_fn(middleware::no_store));
    let (probes, probe_api) = probe_routes().split_for_parts();
    let (public, public_api) = public_routes().split_for_parts();
    let public = public.route_layer(limits::address_layer(&state.limits, limits::AddressBucket::PublicRead));
    // The other crate's routes (the WebSocket upgrade) are public too.
    let extra = if extra.has_routes() {
        extra.route_layer(limits::address_layer(&state.limits, limits::AddressBucket::PublicRead))
    } else {
        extra
    };
    let (protected, protected_api) = protected_routes().split_for_parts();
    // Authentication, then the request's signature, in one layer.
    let protected = protected.route_layer(from_fn_with_state(state.clone(), middleware::authenticate));
    let mut doc = openapi::ApiDoc::openapi();
    doc.merge(login_api);
    doc.merge(probe_api);
    doc.merge(public_api);
    doc.merge(protected_api);
    doc.merge(LogTiles::openapi());
    doc.merge(extra_doc);
    openapi::complete(&mut doc);

    let edge = edge::EdgeLayer::new(state.clone());
    Router::new()
        .merge(login)
        .merge(probes)
        .merge(public)
        .merge(protected)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
        .merge(extra)
        .merge(SwaggerUi::new("/swagger-ui").url("/api-docs/openapi.json", doc))
        .layer(ServiceBuilder::new().layer(edge).layer(DefaultBodyLimit::max(extract::BODY_LIMIT_BYTES)))
}

async fn not_found(uri: Uri) -> ApiError {
    gateway_core::Error::not_found("route", uri.path()).into()
}

async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

/// Serves `app` on `listener` with the edge's default limits (INTERFACE.md §1's timeouts, a cap on
/// connections per address) until `shutdown` resolves, then lets in-flight requests finish.
pub async fn serve<S>(
    listener: TcpListener,
    app: S,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    S: serve::App,
{
    serve::serve(listener, app, serve::EdgeLimits::default(), shutdown).await
}
