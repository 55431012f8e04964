//! The per-cooperative event stream of the gateway, over WebSocket: `GET /v1/ws/{coop_id}` and
//! the short `GET /ws`.
//!
//! A client upgrades, authenticates (an `Auth` frame, or `?access_token=` on the upgrade), and
//! then receives its coop's committed events in sequence order, live, with `Backfill` to catch
//! up after a reconnect. The outbox in the store, read by sequence number, is the source of
//! truth; commit signals only say when to read. The crate owns the graceful shutdown of upgraded
//! sockets (axum does not track them) and the retention task of the outbox.
//!
//! Pieces: [`WsState`] (built once from the domain's ports), [`router`] and [`openapi`] (merged
//! into the gateway's router and document by the binary), [`ShutdownHandle`], and
//! [`run_pruning`]. The wire protocol is in [`protocol`] and `docs/WEBSOCKET.md`.
//!
//! This crate never reaches the store or SQL directly (only the `EventReads`, `EventFeed` and
//! `MembershipLookup` ports) and holds no business rule: what becomes an event is decided by
//! the domain, in the transaction of each change.

mod auth;
mod config;
mod connection;
mod hub;
pub mod metrics;
pub mod protocol;
mod prune;
mod routes;
mod shutdown;
mod state;
#[cfg(test)]
mod testing;

use axum::Router;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub use config::{Retention, WsConfig};
pub use prune::{prune_once, run_pruning};
pub use shutdown::ShutdownHandle;
pub use state::{WsDeps, WsState};

/// The fixed parts of this crate's OpenAPI document: the tag its routes use.
#[derive(Debug, OpenApi)]
#[openapi(
    tags((name = "events", description = "The per-cooperative event stream (WebSocket); frames in docs/WEBSOCKET.md")),
    components(schemas(gateway_http::openapi::ErrorBody))
)]
struct ApiDoc;

fn api_routes() -> OpenApiRouter<WsState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(routes::coop_stream))
        .routes(routes!(routes::token_coop_stream))
}

/// The two stream routes with the state applied, ready to be merged into the gateway's router
/// (it sets no fallback, so merging cannot conflict).
pub fn router(state: WsState) -> Router {
    api_routes().split_for_parts().0.with_state(state)
}

/// The OpenAPI description of the two routes (paths and the `events` tag), for the gateway to
/// merge into its document.
pub fn openapi() -> utoipa::openapi::OpenApi {
    api_routes().split_for_parts().1
}
