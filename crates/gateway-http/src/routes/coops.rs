//! Cooperative and member routes of both families, and the public statistics.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use gateway_core::{Amount, Error, Role};
use gateway_domain::coops::{NewCoop, SettingsPatch, fee_percent};
use gateway_domain::ports::{CoopRecord, CoopSettings, MemberRecord};
use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::caller::scopes::{CoopRead, CoopWrite};
use crate::caller::{Authorized, CoopCaller};
use crate::error::ApiResult;
use crate::extract::{Json, Path, Query};
use crate::routes::common::{self, DidPath, PageQuery, PaginationDto};
use crate::state::AppState;

/// Creating a coop.
#[derive(Debug, Deserialize, ToSchema)]
pub struct CreateCoopBody {
    /// Its id; the token's coop when absent (and it must be the token's coop).
    pub id: Option<String>,
    /// Display name.
    pub name: String,
    /// Kind, e.g. `worker`.
    pub coop_type: String,
    /// Free text.
    #[serde(default)]
    pub description: String,
}

/// Adding a member.
#[derive(Debug, Deserialize, ToSchema)]
pub struct AddMemberBody {
    /// The member's DID.
    pub did: String,
    /// `admin` or `member` (default).
    pub role: Option<String>,
}

/// Changing a role.
#[derive(Debug, Deserialize, ToSchema)]
pub struct RoleBody {
    /// `admin` or `member`.
    pub role: String,
}

/// Setting a member's credit-limit override.
#[derive(Debug, Deserialize, ToSchema)]
pub struct CreditLimitBody {
    /// Zero or negative; `null` returns the member to the coop's limit.
    #[schema(value_type = Option<f64>)]
    pub credit_limit: Option<Amount>,
}

/// Changing settings; absent fields keep their value.
#[derive(Debug, Deserialize, ToSchema)]
pub struct SettingsBody {
    /// Currency of payments that name none.
    pub default_currency: Option<String>,
    /// Default lowest balance (zero or negative).
    #[schema(value_type = Option<f64>)]
    pub credit_limit: Option<Amount>,
    /// Payments of at least this amount need trust 0.5.
    #[schema(value_type = Option<f64>)]
    pub high_value_threshold: Option<Amount>,
    /// Conversion fee, percent (at most 4 decimals).
    #[schema(value_type = Option<f64>)]
    pub conversion_fee_percent: Option<Amount>,
    /// Governance quorum, percent.
    pub quorum_percent: Option<u32>,
    /// Whether critical operations (payments, votes, member and settings changes, …) need a
    /// valid request signature (docs/SIGNING.md).
    pub require_signed_requests: Option<bool>,
}

/// A coop's settings.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct SettingsDto {
    /// Currency of payments that name none.
    pub default_currency: String,
    /// Default lowest balance (zero or negative).
    #[schema(value_type = f64)]
    pub credit_limit: Amount,
    /// Payments of at least this amount need trust 0.5.
    #[schema(value_type = f64)]
    pub high_value_threshold: Amount,
    /// Conversion fee, percent.
    #[schema(value_type = f64)]
    pub conversion_fee_percent: Amount,
    /// Governance quorum, percent.
    pub quorum_percent: u32,
    /// Whether critical operations need a valid request signature.
    pub require_signed_requests: bool,
}

impl From<&CoopSettings> for SettingsDto {
    fn from(settings: &CoopSettings) -> Self {
        Self {
            default_currency: settings.default_currency.to_string(),
            credit_limit: settings.credit_limit,
            high_value_threshold: settings.high_value_threshold,
            conversion_fee_percent: fee_percent(settings.conversion_fee_ppm),
            quorum_percent: settings.quorum_percent,
            require_signed_requests: settings.require_signed_requests,
        }
    }
}

/// A cooperative.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct CoopDto {
    /// Id.
    pub id: String,
    /// Name.
    pub name: String,
    /// Kind.
    pub coop_type: String,
    /// Free text.
    pub description: String,
    /// Unix seconds.
    pub created_at: u64,
    /// Creator DID.
    pub created_by: String,
    /// Settings.
    pub settings: SettingsDto,
    /// Members.
    pub member_count: u64,
}

impl From<&CoopRecord> for CoopDto {
    fn from(coop: &CoopRecord) -> Self {
        Self {
            id: coop.id.to_string(),
            name: coop.name.clone(),
            coop_type: coop.coop_type.clone(),
            description: coop.description.clone(),
            created_at: coop.created_at,
            created_by: coop.created_by.to_string(),
            settings: SettingsDto::from(&coop.settings),
            member_count: coop.member_count,
        }
    }
}

/// A member of a cooperative.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct MemberDto {
    /// DID.
    pub did: String,
    /// `admin` or `member`.
    pub role: String,
    /// Unix seconds.
    pub joined_at: u64,
    /// Override of the coop's credit limit; `null` when the coop's limit applies.
    #[schema(value_type = Option<f64>)]
    pub credit_limit: Option<Amount>,
}

impl From<&MemberRecord> for MemberDto {
    fn from(member: &MemberRecord) -> Self {
        Self {
            did: member.did.to_string(),
            role: member.role.as_str().to_owned(),
            joined_at: member.joined_at,
            credit_limit: member.credit_limit,
        }
    }
}

/// A coop's public statistics.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct StatsDto {
    /// The coop.
    pub coop_id: String,
    /// Members.
    pub member_count: u64,
    /// Ledger transactions recorded.
    pub transaction_count: u64,
    /// Currencies in use.
    pub currencies: Vec<String>,
    /// Proposals of every status.
    pub proposal_count: u64,
    /// Proposals open for voting.
    pub open_proposal_count: u64,
    /// Unix seconds.
    pub created_at: u64,
}

/// A page of the caller's cooperatives.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct CoopPage {
    /// The cooperatives.
    pub coops: Vec<CoopDto>,
    /// Where this page is.
    pub pagination: PaginationDto,
}

/// A page of a cooperative's members.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct MemberPage {
    /// The members.
    pub members: Vec<MemberDto>,
    /// Where this page is.
    pub pagination: PaginationDto,
}

fn created<T: serde::Serialize>(dto: T) -> Response {
    (StatusCode::CREATED, Json(dto)).into_response()
}

fn role(text: Option<&str>) -> ApiResult<Role> {
    match text {
        None => Ok(Role::Member),
        Some(t) => {
            Role::parse(t).ok_or_else(|| Error::bad_request_field("role", "role must be 'admin' or 'member'").into())
        }
    }
}

/// Creates a coop; the caller becomes its first admin.
#[utoipa::path(post, path = "/v1/coops", tag = "coops", security(("bearer" = [])), request_body = CreateCoopBody,
    responses((status = 201, body = CoopDto), (status = 403, body = crate::openapi::ErrorBody),
              (status = 409, description = "A cooperative with this id already exists",
               body = crate::openapi::ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    caller: CoopCaller<CoopWrite>,
    Json(body): Json<CreateCoopBody>,
) -> ApiResult<Response> {
    let token_coop = caller.coop.clone();
    let id = body.id.as_deref().map(common::coop_id).transpose()?;
    let request = NewCoop { id, name: body.name, coop_type: body.coop_type, description: body.description };
    let coop = state.coops.create(&caller.did, &token_coop, request).await?;
    Ok(created(CoopDto::from(&coop)))
}

/// Coops the caller is a member of.
#[utoipa::path(get, path = "/v1/coops", tag = "coops", security(("bearer" = [])), params(PageQuery),
    responses((status = 200, description = "A page of the caller's cooperatives", body = CoopPage)))]
pub async fn list_coops(
    State(state): State<AppState>,
    caller: Authorized<CoopRead>,
    Query(query): Query<PageQuery>,
) -> ApiResult<Json<CoopPage>> {
    let page = query.page()?;
    let (coops, total) = state.coops.list_for(&caller.did, page).await?;
    Ok(Json(CoopPage { coops: coops.iter().map(CoopDto::from).collect(), pagination: page.info(total).into() }))
}

/// A coop's details (the token's coop only).
#[utoipa::path(get, path = "/v1/coops/{id}", tag = "coops", security(("bearer" = [])), params(("id" = String, Path)),
    responses((status = 200, body = CoopDto), (status = 403, body = crate::openapi::ErrorBody), (status = 404, body = crate::openapi::ErrorBody)))]
pub async fn get(State(state): State<AppState>, caller: CoopCaller<CoopRead>) -> ApiResult<Json<CoopDto>> {
    let coop = caller.coop.clone();
    Ok(Json(CoopDto::from(&state.coops.get(&coop).await?)))
}

/// Members of the coop.
#[utoipa::path(get, path = "/v1/coops/{id}/members", tag = "coops", security(("bearer" = [])), params(("id" = String, Path), PageQuery),
    responses((status = 200, description = "A page of the cooperative's members", body = MemberPage)))]
pub async fn members(
    State(state): State<AppState>,
    caller: CoopCaller<CoopRead>,
    Query(query): Query<PageQuery>,
) -> ApiResult<Json<MemberPage>> {
    let coop = caller.coop.clone();
    let page = query.page()?;
    let (members, total) = state.coops.members(&coop, page).await?;
    Ok(Json(MemberPage { members: members.iter().map(MemberDto::from).collect(), pagination: page.info(total).into() }))
}

/// Adds a member.
#[utoipa::path(post, path = "/v1/coops/{id}/members", tag = "coops", security(("bearer" = [])), params(("id" = String, Path)),
    request_body = AddMemberBody,
    responses((status = 201, body = MemberDto),
              (status = 409, description = "The DID is already a member of the cooperative",
               body = crate::openapi::ErrorBody)))]
pub async fn add_member(
    State(state): State<AppState>,
    caller: CoopCaller<CoopWrite>,
    Json(body): Json<AddMemberBody>,
) -> ApiResult<Response> {
    let coop = caller.coop.clone();
    let did = common::did("did", &body.did)?;
    let member = state.coops.add_member(&coop, &did, role(body.role.as_deref())?).await?;
    Ok(created(MemberDto::from(&member)))
}

/// Removes a member (not the last admin).
#[utoipa::path(delete, path = "/v1/coops/{id}/members/{did}", tag = "coops", security(("bearer" = [])),
    params(("id" = String, Path), ("did" = String, Path)),
    responses((status = 204, description = "Removed"), (status = 404, body = crate::openapi::ErrorBody), (status = 409, body = crate::openapi::ErrorBody)))]
pub async fn remove_member(
    State(state): State<AppState>,
    caller: CoopCaller<CoopWrite>,
    Path(DidPath { did }): Path<DidPath>,
) -> ApiResult<StatusCode> {
    let coop = caller.coop.clone();
    let did = common::did("did", &did)?;
    state.coops.remove_member(&coop, &did).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Changes a member's role (the last admin cannot be demoted).
#[utoipa::path(put, path = "/v1/coops/{id}/members/{did}/role", tag = "coops", security(("bearer" = [])),
    params(("id" = String, Path), ("did" = String, Path)), request_body = RoleBody,
    responses((status = 200, body = MemberDto), (status = 409, body = crate::openapi::ErrorBody)))]
pub async fn set_role(
    State(state): State<AppState>,
    caller: CoopCaller<CoopWrite>,
    Path(DidPath { did }): Path<DidPath>,
    Json(body): Json<RoleBody>,
) -> ApiResult<Json<MemberDto>> {
    let coop = caller.coop.clone();
    let did = common::did("did", &did)?;
    let member = state.coops.set_role(&coop, &did, role(Some(&body.role))?).await?;
    Ok(Json(MemberDto::from(&member)))
}

/// Sets a member's credit-limit override.
#[utoipa::path(put, path = "/v1/coops/{id}/members/{did}/credit-limit", tag = "coops", security(("bearer" = [])),
    params(("id" = String, Path), ("did" = String, Path)), request_body = CreditLimitBody,
    responses((status = 200, body = MemberDto)))]
pub async fn set_credit_limit(
    State(state): State<AppState>,
    caller: CoopCaller<CoopWrite>,
    Path(DidPath { did }): Path<DidPath>,
    Json(body): Json<CreditLimitBody>,
) -> ApiResult<Json<MemberDto>> {
    let coop = caller.coop.clone();
    let did = common::did("did", &did)?;
    Ok(Json(MemberDto::from(&state.coops.set_member_credit_limit(&coop, &did, body.credit_limit).await?)))
}

/// Changes the coop's settings.
#[utoipa::path(put, path = "/v1/coops/{id}/settings", tag = "coops", security(("bearer" = [])), params(("id" = String, Path)),
    request_body = SettingsBody, responses((status = 200, body = CoopDto)))]
pub async fn update_settings(
    State(state): State<AppState>,
    caller: CoopCaller<CoopWrite>,
    Json(body): Json<serde_json::Map<String, Value>>,
) -> ApiResult<Json<CoopDto>> {
    let coop = caller.coop.clone();
    let patch = SettingsPatch::from_wire(&body)?;
    Ok(Json(CoopDto::from(&state.coops.update_settings(&coop, patch).await?)))
}

/// Public statistics of a coop (no token).
#[utoipa::path(get, path = "/v1/coops/{id}/stats", tag = "coops", params(("id" = String, Path)),
    responses((status = 200, description = "The coop's public figures", body = StatsDto),
              (status = 404, body = crate::openapi::ErrorBody)))]
pub async fn stats(State(state): State<AppState>, Path(id): Path<String>) -> ApiResult<Json<StatsDto>> {
    let coop = common::coop_id(&id)?;
    let stats = state.coops.stats(&coop).await?;
    let (proposal_count, open_proposal_count) = state.governance.counts(&coop).await?;
    Ok(Json(StatsDto {
        coop_id: stats.coop.id.to_string(),
        member_count: stats.coop.member_count,
        transaction_count: stats.transaction_count,
        currencies: stats.currencies.iter().map(ToString::to_string).collect(),
        proposal_count,
        open_proposal_count,
        created_at: stats.coop.created_at,
    }))
}
