//! Trust routes: scores, edges (set, replace, revoke), and a DID's edges.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use gateway_domain::ports::TrustEdge;
use gateway_limits::TrustClass;
use serde::Deserialize;
use utoipa::ToSchema;

use crate::caller::Authorized;
use crate::caller::scopes::{TrustRead, TrustWrite};
use crate::error::ApiResult;
use crate::extract::{Json, Path, Query};
use crate::routes::common::{self, PageQuery};
use crate::state::AppState;

/// Setting an edge.
#[derive(Debug, Deserialize, ToSchema)]
pub struct EdgeBody {
    /// Whom the caller trusts.
    pub target_did: String,
    /// `0 ..= 1`.
    pub score: f64,
}

/// A trust score.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct ScoreDto {
    /// The DID.
    pub did: String,
    /// `0 ..= 1`.
    pub score: f64,
    /// `Isolated`, `Known`, `Partner` or `Federated`.
    pub class: String,
}

/// A trust edge: `source_did` trusts `target_did` at `score`.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct EdgeDto {
    /// Who trusts.
    pub source_did: String,
    /// Whom.
    pub target_did: String,
    /// `0 ..= 1`.
    pub score: f64,
    /// Unix seconds.
    pub updated_at: u64,
    /// In a DID's edge list: `outgoing` (the DID trusts) or `incoming` (the DID is trusted).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub direction: Option<&'static str>,
}

impl From<&TrustEdge> for EdgeDto {
    fn from(edge: &TrustEdge) -> Self {
        Self {
            source_did: edge.source.to_string(),
            target_did: edge.target.to_string(),
            score: edge.score,
            updated_at: edge.updated_at,
            direction: None,
        }
    }
}

/// A page of a DID's edges, outgoing first.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct EdgePage {
    /// The edges, each with its `direction`.
    pub edges: Vec<EdgeDto>,
    /// Where this page is.
    pub pagination: common::PaginationDto,
}

/// The score and class of a DID.
#[utoipa::path(get, path = "/v1/trust/{did}/score", tag = "trust", security(("bearer" = [])), params(("did" = String, Path)),
    responses((status = 200, body = ScoreDto)))]
pub async fn score(
    State(state): State<AppState>,
    _caller: Authorized<TrustRead>,
    Path(did): Path<String>,
) -> ApiResult<Json<ScoreDto>> {
    let did = common::did("did", &did)?;
    let score = state.trust.graph().score(&did);
    Ok(Json(ScoreDto { did: did.to_string(), score, class: TrustClass::from_score(score).as_str().to_owned() }))
}

/// A DID's edges, outgoing first, then incoming, each marked with its `direction`.
#[utoipa::path(get, path = "/v1/trust/{did}/edges", tag = "trust", security(("bearer" = [])), params(("did" = String, Path), PageQuery),
    responses((status = 200, description = "A page of the DID's edges, outgoing first", body = EdgePage),
              (status = 400, description = "Invalid DID, limit or offset", body = crate::openapi::ErrorBody)))]
pub async fn edges(
    State(state): State<AppState>,
    _caller: Authorized<TrustRead>,
    Path(did): Path<String>,
    Query(query): Query<PageQuery>,
) -> ApiResult<Json<EdgePage>> {
    let did = common::did("did", &did)?;
    let page = query.page()?;
    let (outgoing, incoming) = state.trust.graph().edges_of(&did);
    let total = (outgoing.len() + incoming.len()) as u64;
    let directed = outgoing.iter().map(|e| (e, "outgoing")).chain(incoming.iter().map(|e| (e, "incoming")));
    let items = directed
        .skip(usize::try_from(page.offset).unwrap_or(usize::MAX))
        .take(page.limit as usize)
        .map(|(edge, direction)| EdgeDto { direction: Some(direction), ..EdgeDto::from(edge) })
        .collect();
    Ok(Json(EdgePage { edges: items, pagination: page.info(total).into() }))
}

/// Sets or replaces the caller's edge: 201 when created, 200 when replaced.
#[utoipa::path(post, path = "/v1/trust/edges", tag = "trust", security(("bearer" = [])), request_body = EdgeBody,
    responses((status = 201, description = "Created", body = EdgeDto), (status = 200, description = "Replaced", body = EdgeDto),
              (status = 400, body = crate::openapi::ErrorBody)))]
pub async fn set_edge(
    State(state): State<AppState>,
    caller: Authorized<TrustWrite>,
    Json(body): Json<EdgeBody>,
) -> ApiResult<Response> {
    let target = common::did("target_did", &body.target_did)?;
    let (edge, replaced) = state.trust.set_edge(&caller.did, &target, body.score).await?;
    let status = if replaced { StatusCode::OK } else { StatusCode::CREATED };
    Ok((status, Json(EdgeDto::from(&edge))).into_response())
}

/// Revokes the caller's edge to a DID.
#[utoipa::path(delete, path = "/v1/trust/edges/{did}", tag = "trust", security(("bearer" = [])), params(("did" = String, Path)),
    responses((status = 204, description = "Revoked"), (status = 404, body = crate::openapi::ErrorBody)))]
pub async fn remove_edge(
    State(state): State<AppState>,
    caller: Authorized<TrustWrite>,
    Path(did): Path<String>,
) -> ApiResult<StatusCode> {
    let target = common::did("did", &did)?;
    state.trust.remove_edge(&caller.did, &target).await?;
    Ok(StatusCode::NO_CONTENT)
}
