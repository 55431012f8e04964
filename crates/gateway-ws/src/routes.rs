//! The two upgrade routes, `GET /v1/ws/{coop_id}` and the short `GET /ws`, with their OpenAPI
//! annotations and the HTTP-level rejections in the error body.
//!
//! The gateway's edge (gateway-http) refuses an upgrade from an origin its cross-origin policy
//! does not allow, 403 before the handler runs. A handler checks what can be checked before
//! the upgrade (shutdown, the coop id, a token in `?access_token=`), then hands the upgraded socket to the connection loop through adapters
//! between axum's `Message` and the loop's [`Frame`]. Everything after the upgrade happens in
//! frames, in `connection`.

use axum::Extension;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{Message, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use futures_util::{SinkExt, StreamExt};
use gateway_core::{AuthorizationDetail, CoopId, Error};
use gateway_http::ApiError;
use gateway_limits::ClientAddress;
use serde::Deserialize;

use crate::auth::{AuthFailure, authenticate};
use crate::connection;
use crate::protocol::Frame;
use crate::state::WsState;

/// The optional token of the upgrade request.
#[derive(Debug, Deserialize)]
pub(crate) struct TokenQuery {
    access_token: Option<String>,
}

/// The event stream of one cooperative.
///
/// After the upgrade the client sends `{"type":"Auth","token":…}` within 10 s (unless the
/// upgrade carried `?access_token=`); the server answers `AuthOk` and streams the coop's events
/// in sequence order. Frames and rules: docs/WEBSOCKET.md.
#[utoipa::path(
    get,
    path = "/v1/ws/{coop_id}",
    tag = "events",
    params(
        ("coop_id" = String, Path, description = "The cooperative whose events to follow"),
        ("access_token" = Option<String>, Query,
         description = "A token for clients that cannot send a frame before authenticating (browsers); the socket is then authenticated at once"),
    ),
    responses(
        (status = 101, description = "Switching protocols: the event stream follows"),
        (status = 400, description = "Not a WebSocket upgrade, or an invalid coop id", body = gateway_http::openapi::ErrorBody),
        (status = 401, description = "`access_token` is invalid, expired or names no cooperative", body = gateway_http::openapi::ErrorBody),
        (status = 403, description = "`access_token` is for another cooperative, or its subject is not a member; or the page's `Origin` is not allowed (production CORS mode)", body = gateway_http::openapi::ErrorBody),
        (status = 503, description = "The gateway is shutting down, or membership could not be checked", body = gateway_http::openapi::ErrorBody),
    ),
)]
pub(crate) async fn coop_stream(
    State(state): State<WsState>,
    client: Option<Extension<ClientAddress>>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<TokenQuery>, QueryRejection>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    if state.shared.shutdown.is_shutting_down() {
        return shutting_down();
    }
    let coop = match path.map(|Path(raw)| CoopId::parse(&raw).map_err(|m| m.to_owned())) {
        Ok(Ok(coop)) => coop,
        Ok(Err(message)) => return refuse(Error::bad_request_field("coop_id", message)),
        Err(rejection) => return refuse(Error::bad_request(rejection.body_text())),
    };
    accept(state, client.map(|Extension(c)| c), Some(coop), query, upgrade).await
}

/// The event stream of the token's own cooperative (the short route family).
///
/// The same stream as `/v1/ws/{coop_id}` for the coop named in the token; an identity-only
/// token is refused.
#[utoipa::path(
    get,
    path = "/ws",
    tag = "events",
    params(
        ("access_token" = Option<String>, Query,
         description = "A token for clients that cannot send a frame before authenticating (browsers); the socket is then authenticated at once"),
    ),
    responses(
        (status = 101, description = "Switching protocols: the event stream follows"),
        (status = 400, description = "Not a WebSocket upgrade", body = gateway_http::openapi::ErrorBody),
        (status = 401, description = "`access_token` is invalid, expired or names no cooperative", body = gateway_http::openapi::ErrorBody),
        (status = 403, description = "The token's subject is not a member of its cooperative; or the page's `Origin` is not allowed (production CORS mode)", body = gateway_http::openapi::ErrorBody),
        (status = 503, description = "The gateway is shutting down, or membership could not be checked", body = gateway_http::openapi::ErrorBody),
    ),
)]
pub(crate) async fn token_coop_stream(
    State(state): State<WsState>,
    client: Option<Extension<ClientAddress>>,
    query: Result<Query<TokenQuery>, QueryRejection>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    if state.shared.shutdown.is_shutting_down() {
        return shutting_down();
    }
    accept(state, client.map(|Extension(c)| c), None, query, upgrade).await
}

async fn accept(
    state: WsState,
    client: Option<ClientAddress>,
    path_coop: Option<CoopId>,
    query: Result<Query<TokenQuery>, QueryRejection>,
    upgrade: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
) -> Response {
    let shared = state.shared;
    let upgrade = match upgrade {
        Ok(upgrade) => upgrade,
        Err(rejection) => {
            return refuse(Error::bad_request(format!("expected a WebSocket upgrade: {}", rejection.body_text())));
        }
    };
    let token = match query {
        Ok(Query(query)) => query.access_token,
        Err(rejection) => return refuse(Error::bad_request(rejection.body_text())),
    };
    let session = match token {
        None => None,
        Some(token) => match authenticate(&shared, &token, path_coop.as_ref()).await {
            Ok(session) => Some(session),
            Err(AuthFailure::Unauthenticated(message)) => return refuse(Error::AuthenticationFailed(message)),
            Err(AuthFailure::Forbidden { message, coop_id }) => {
                let detail = AuthorizationDetail::CoopId(coop_id.to_string());
                return refuse(Error::AuthorizationFailed { message, detail });
            }
            Err(AuthFailure::Unavailable(message)) => return refuse(Error::ServiceUnavailable(message)),
        },
    };
    // Counted from here, so that a shutdown starting now waits for this socket too.
    let guard = shared.shutdown.track();
    if shared.shutdown.is_shutting_down() {
        return shutting_down();
    }
    let config = &shared.config;
    upgrade
        .read_buffer_size(config.read_buffer_bytes)
        .write_buffer_size(config.write_buffer_bytes)
        .max_message_size(config.max_message_bytes)
        .max_frame_size(config.max_message_bytes)
        .on_upgrade(move |socket| async move {
            let (sink, stream) = socket.split();
            let sink = sink.with(|frame: Frame| std::future::ready(Ok::<_, axum::Error>(Message::from(frame))));
            // A frame the socket layer refused becomes a violation with its close code (INTERFACE.md
            // §9), reported like any other protocol violation: it counts in the metric, never
            // toward a quarantine (a hostile page can make its visitors' browsers send these).
            let violations = shared.misbehavior.clone();
            let stream = stream.filter_map(move |message| {
                let frame = match message {
                    Ok(message) => Some(Ok(Frame::from(message))),
                    Err(err) => match Frame::violation(err.into_inner().as_ref()) {
                        Some(violation) => Some(Ok(violation)),
                        None => Some(Err(())),
                    },
                };
                if matches!(frame, Some(Ok(Frame::Violation { .. } | Frame::Binary(_))))
                    && let (Some(misbehavior), Some(client)) = (&violations, client)
                    && !client.exempt
                {
                    misbehavior.record(client.ip, gateway_limits::Violation::WsProtocol);
                }
                std::future::ready(frame)
            });
            connection::serve(shared, path_coop, session, guard, sink, stream).await;
        })
}

/// A refusal in the error body, written by the HTTP layer's one renderer.
fn refuse(err: Error) -> Response {
    ApiError::from(err).into_response()
}

fn shutting_down() -> Response {
    refuse(Error::ServiceUnavailable("the gateway is shutting down".into()))
}
