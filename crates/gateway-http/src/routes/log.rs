//! The coop's log (INTERFACE.md §12): its checkpoint, keys and hash tiles, public; its entry bundles,
//! inclusion proofs and consistency proofs, for members. Paths and encodings are C2SP
//! tlog-tiles' and tlog-proof's; answers are `text/plain` or `application/octet-stream`.

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use crate::caller::CoopCaller;
use crate::caller::scopes::AnyToken;
use crate::error::ApiResult;
use crate::extract::{Path, Query};
use crate::routes::common;
use crate::state::AppState;

fn text(body: String, cache: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    response
}

fn tile_answer(bytes: Vec<u8>, full: bool) -> Response {
    let mut response = bytes.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    // A full tile never changes; a partial one is replaced by wider ones.
    let cache = if full { "public, max-age=31536000, immutable" } else { "no-cache" };
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    response
}

/// The coop's latest signed checkpoint: a C2SP checkpoint in a signed note, signed by the coop's
/// receipt key under the log's origin, with any witness cosignatures.
#[utoipa::path(get, path = "/v1/coops/{id}/log/checkpoint", tag = "log", params(("id" = String, Path, description = "Cooperative id")),
    responses((status = 200, description = "The signed checkpoint (`text/plain`)", content_type = "text/plain", body = String),
              (status = 404, description = "No such cooperative, or no checkpoint of its log is signed yet (the \
receipt keys are unavailable, or the log has just begun: `details.resource` = `checkpoint`)", body = crate::openapi::ErrorBody)))]
pub async fn checkpoint(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    let coop = common::coop_id(&id)?;
    Ok(text(state.log.latest_checkpoint(&coop).await?, "no-cache"))
}

/// The log's verifier keys, current and retired, one signed-note `vkey` a line.
#[utoipa::path(get, path = "/v1/coops/{id}/log/key", tag = "log", params(("id" = String, Path, description = "Cooperative id")),
    responses((status = 200, description = "`<origin>+<key id>+<base64 key>` lines", content_type = "text/plain", body = String)))]
pub async fn key(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Response> {
    let coop = common::coop_id(&id)?;
    state.coops.get(&coop).await?;
    Ok(text(state.log.verifier_keys(&coop).await?, "no-cache"))
}

/// `{id}` and the rest of a tile path.
#[derive(Debug, Deserialize)]
pub struct TilePathParams {
    /// The cooperative.
    pub id: String,
    /// The tile, as tlog-tiles names it after `tile/`.
    pub path: String,
}

/// A hash tile of the log at its signed size: `{L}/{N}` or `{L}/{N}.p/{W}`, with `N` in
/// tlog-tiles' `x001/x234/067` form. Full tiles are immutable.
#[utoipa::path(get, path = "/v1/coops/{id}/log/tile/{path}", tag = "log",
    params(("id" = String, Path, description = "Cooperative id"),
           ("path" = String, Path, description = "`<L>/<N>[.p/<W>]`, e.g. `0/x001/234` or `1/000.p/7`")),
    responses((status = 200, description = "The tile's hashes, 32 bytes each", content_type = "application/octet-stream", body = Vec<u8>),
              (status = 404, description = "The signed tree has no such tile (yet)", body = crate::openapi::ErrorBody)))]
pub async fn tile(State(state): State<AppState>, Path(params): Path<TilePathParams>) -> ApiResult<Response> {
    let coop = common::coop_id(&params.id)?;
    let (bytes, full) = state.log.tile(&coop, &params.path, false).await?;
    Ok(tile_answer(bytes, full))
}

/// `{id}` and the rest of an entry bundle's path.
#[derive(Debug, Deserialize)]
pub struct EntriesPathParams {
    /// The tile, as tlog-tiles names it after `tile/entries/`.
    pub path: String,
}

/// An entry bundle of the log (members only: entries hold memos): `{N}` or `{N}.p/{W}`.
#[utoipa::path(get, path = "/v1/coops/{id}/log/tile/entries/{path}", tag = "log", security(("bearer" = [])),
    params(("id" = String, Path, description = "Cooperative id"),
           ("path" = String, Path, description = "`<N>[.p/<W>]`, e.g. `000` or `x001/234.p/17`")),
    responses((status = 200, description = "The entries, each a big-endian u16 length and its bytes", content_type = "application/octet-stream", body = Vec<u8>),
              (status = 404, description = "The signed tree has no such bundle (yet)", body = crate::openapi::ErrorBody)))]
pub async fn entries(
    State(state): State<AppState>,
    caller: CoopCaller<AnyToken>,
    Path(params): Path<EntriesPathParams>,
) -> ApiResult<Response> {
    let (bytes, full) = state.log.tile(&caller.coop, &format!("entries/{}", params.path), true).await?;
    Ok(tile_answer(bytes, full))
}

/// `LogOpened`'s data whole (members only, like the entries): when entry 0 of a coop's log holds
/// digests (`{"sha256","bytes"}`) of its largest fields (a coop with hundreds of members when its
/// log began), this is the JSON object they are the digests of, field for field (each field's
/// exact text hashes to its digest); otherwise entry 0's own `data`.
#[utoipa::path(get, path = "/v1/coops/{id}/log/opened", tag = "log", security(("bearer" = [])),
    params(("id" = String, Path, description = "Cooperative id")),
    responses((status = 200, description = "`LogOpened`'s data (`application/json`)", content_type = "application/json", body = Object),
              (status = 404, description = "No such cooperative, no signed checkpoint covers entry 0 yet (`details.resource` = `checkpoint`), \
or entry 0 holds digests of a log begun before the gateway kept the data whole (`opened_data`)", body = crate::openapi::ErrorBody)))]
pub async fn opened(State(state): State<AppState>, caller: CoopCaller<AnyToken>) -> ApiResult<Response> {
    let data = state.log.opened_data(&caller.coop).await?;
    let mut response = data.into_response();
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(response)
}

/// `?seq=` and `?wait=` of a proof.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct ProofQuery {
    /// The event whose entry to prove (the `ICN-Event-Seq` of the answer that made it).
    pub seq: u64,
    /// Wait up to 5 s for a checkpoint covering it (else 503).
    #[serde(default)]
    pub wait: bool,
}

/// A `c2sp.org/tlog-proof@v1` of the entry of event `seq`: its index, the inclusion proof and
/// the signed checkpoint (the latest, or one that was the latest less than 0.1 s ago and covers
/// the entry),
/// checkable offline with `gatewayctl log verify`.
#[utoipa::path(get, path = "/v1/coops/{id}/log/proof", tag = "log", security(("bearer" = [])),
    params(("id" = String, Path, description = "Cooperative id"), ProofQuery),
    responses((status = 200, description = "The proof", content_type = "text/plain", body = String),
              (status = 404, description = "No such event, or (without `wait`) no signed checkpoint covers it yet", body = crate::openapi::ErrorBody),
              (status = 503, description = "With `wait=true`: no checkpoint covered it within 5 s", body = crate::openapi::ErrorBody)))]
pub async fn proof(
    State(state): State<AppState>,
    caller: CoopCaller<AnyToken>,
    Query(query): Query<ProofQuery>,
) -> ApiResult<Response> {
    Ok(text(state.log.proof(&caller.coop, query.seq, query.wait).await?, "no-store"))
}

/// `?from=` and `?to=` of a consistency proof.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct ConsistencyQuery {
    /// The earlier tree size (at least 1).
    pub from: u64,
    /// The later tree size (at most the signed size).
    pub to: u64,
}

/// The RFC 9162 consistency proof between two tree sizes, one base64 hash a line.
#[utoipa::path(get, path = "/v1/coops/{id}/log/consistency", tag = "log", security(("bearer" = [])),
    params(("id" = String, Path, description = "Cooperative id"), ConsistencyQuery),
    responses((status = 200, description = "The proof's hashes", content_type = "text/plain", body = String)))]
pub async fn consistency(
    State(state): State<AppState>,
    caller: CoopCaller<AnyToken>,
    Query(query): Query<ConsistencyQuery>,
) -> ApiResult<Response> {
    Ok(text(state.log.consistency(&caller.coop, query.from, query.to).await?, "no-store"))
}
