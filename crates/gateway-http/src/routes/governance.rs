//! Governance routes of both families: domains, proposals (three create shapes), open, vote,
//! votes, close, proof, delegations and signing keys. Proposals live in the token's coop.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use gateway_core::{Did, Error};
use gateway_domain::governance::{DomainChange, NewDomain, NewProposal, Outcome, ProposalStatus, VotesView};
use gateway_domain::ports::{DelegationRecord, DomainRecord, ProposalQuery, ProposalRecord};
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa::ToSchema;

use crate::caller::Authorized;
use crate::caller::scopes::{AnyToken, GovRead, GovWrite};
use crate::error::ApiResult;
use crate::extract::{Json, Path, Query};
use crate::routes::common::{self, PageQuery, list};
use crate::state::AppState;

/// Creating a domain.
#[derive(Debug, Deserialize, ToSchema)]
pub struct DomainBody {
    /// Id within the coop (`[A-Za-z0-9_-]`, at most 64).
    pub domain_id: String,
    /// Display name.
    pub name: String,
    /// Who may vote (members of the coop).
    pub members: Vec<String>,
    /// Quorum override, percent.
    pub quorum_percent: Option<u32>,
    /// Default rule: `majority`, `supermajority:<pct>` or `unanimous`.
    pub rule: Option<String>,
}

/// Changing a domain: absent fields keep their value. The `coop` domain's members cannot be set.
#[derive(Debug, Deserialize, ToSchema)]
pub struct DomainUpdateBody {
    /// New display name.
    pub name: Option<String>,
    /// New member list (members of the coop).
    pub members: Option<Vec<String>>,
    /// New quorum override, percent.
    pub quorum_percent: Option<u32>,
    /// New default rule.
    pub rule: Option<String>,
}

/// Creating a proposal: the short family's, the /v1 family's and the SDK's shapes.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ProposalBody {
    /// Domain (short family).
    pub domain: Option<String>,
    /// Domain (SDK).
    pub domain_id: Option<String>,
    /// Title.
    pub title: String,
    /// Description.
    #[serde(default)]
    pub description: String,
    /// Tagged payload (`{"type": "text", "content": …}`, or the variant form `{"Text": {"content": …}}`).
    #[schema(value_type = Option<Object>)]
    pub payload: Option<Value>,
    /// SDK kind (e.g. `budget`); without a payload it labels a text proposal.
    pub kind: Option<String>,
    /// Decision rule.
    pub rule_ccl: Option<String>,
    /// Voting time, seconds (default 604800).
    pub voting_duration_secs: Option<u64>,
}

/// A vote.
#[derive(Debug, Deserialize, ToSchema)]
pub struct VoteBody {
    /// `for`/`approve`/`yes`, `against`/`reject`/`no` or `abstain`, any case.
    pub choice: String,
}

/// A delegation.
#[derive(Debug, Deserialize, ToSchema)]
pub struct DelegationBody {
    /// Delegate DID.
    pub delegate: String,
    /// `blanket`, `domain:<domain_id>` or `proposal:<proposal_id>`.
    pub scope: String,
    /// Unix seconds, exclusive.
    pub expires_at: Option<u64>,
}

/// Proposal list filters.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
pub struct ProposalFilters {
    /// Only this domain.
    pub domain: Option<String>,
    /// `draft`, `open`, `closed`, or `active` (= open).
    pub status: Option<String>,
    /// Same as `status`.
    pub state: Option<String>,
    /// `true`: only open proposals.
    pub active: Option<bool>,
    /// Page size.
    pub limit: Option<u64>,
    /// Items to skip.
    pub offset: Option<u64>,
}

/// Maps the variant form (`{"Text": {"content": …}}`) and SDK `kind` to the tagged payload.
fn normalise_payload(body: &ProposalBody) -> ApiResult<Value> {
    let snake = |variant: &str| {
        let mut out = String::new();
        for (i, ch) in variant.chars().enumerate() {
            if ch.is_ascii_uppercase() {
                if i > 0 {
                    out.push('_');
                }
                out.push(ch.to_ascii_lowercase());
            } else {
                out.push(ch);
            }
        }
        out
    };
    match &body.payload {
        Some(Value::Object(map)) if map.contains_key("type") => {
            let mut map = map.clone();
            if let Some(Value::String(t)) = map.get("type").cloned() {
                map.insert("type".into(), Value::String(snake(&t)));
            }
            Ok(Value::Object(map))
        }
        Some(Value::Object(map)) if map.len() == 1 => {
            let (variant, inner) = map.iter().next().expect("one entry");
            let mut fields = match inner {
                Value::Object(fields) => fields.clone(),
                Value::Null => serde_json::Map::new(),
                other => {
                    let mut m = serde_json::Map::new();
                    m.insert("content".into(), other.clone());
                    m
                }
            };
            fields.insert("type".into(), Value::String(snake(variant)));
            Ok(Value::Object(fields))
        }
        Some(_) => Err(Error::bad_request_field("payload", "payload must be a tagged object").into()),
        None => Ok(match &body.kind {
            Some(kind) => json!({ "type": "text", "content": body.description, "kind": kind }),
            None => json!({ "type": "text", "content": body.description }),
        }),
    }
}

fn proposal_json(p: &ProposalRecord) -> Value {
    let mut value = json!({
        "id": p.id,
        "proposal_id": p.id,
        "domain_id": p.domain_id,
        "title": p.title,
        "description": p.description,
        "payload": p.payload.to_json(),
        "rule": p.rule,
        "author": p.author.as_str(),
        "status": p.status.as_str(),
        "voting_duration_secs": p.voting_duration_secs,
        "created_at": p.created_at,
        "opened_at": p.opened_at,
        "closes_at": p.closes_at,
        "closed_at": p.closed_at,
    });
    if let (Some(outcome), Some((f, a, ab))) = (p.outcome, p.tally) {
        let map = value.as_object_mut().expect("object");
        map.insert("outcome".into(), json!(outcome.as_str()));
        map.insert("accepted".into(), json!(outcome == Outcome::Approved));
        map.insert("tally".into(), json!({ "for": f, "against": a, "abstain": ab }));
        // The effect of an approved proposal that acts on the coop; `null` for anything else.
        let effect = p.effect.as_ref().map(|e| json!({ "applied": e.applied, "error": e.error }));
        map.insert("effect".into(), effect.unwrap_or(Value::Null));
    }
    value
}

fn domain_json(d: &DomainRecord) -> Value {
    json!({
        "domain_id": d.domain_id,
        "name": d.name,
        "members": d.members.iter().map(Did::as_str).collect::<Vec<_>>(),
        "quorum_percent": d.quorum_percent,
        "rule": d.rule,
        "created_at": d.created_at,
    })
}

fn delegation_json(d: &DelegationRecord) -> Value {
    json!({
        "id": d.id,
        "delegator": d.delegator.as_str(),
        "delegate": d.delegate.as_str(),
        "scope": d.scope,
        "expires_at": d.expires_at,
        "created_at": d.created_at,
    })
}

fn created(value: Value) -> Response {
    (StatusCode::CREATED, axum::Json(value)).into_response()
}

fn members(listed: &[String]) -> ApiResult<Vec<Did>> {
    listed.iter().map(|m| common::did("members", m)).collect()
}

/// Creates a governance domain in the token's coop (coop admins only).
#[utoipa::path(post, path = "/v1/gov/domains", tag = "governance", security(("bearer" = [])), request_body = DomainBody,
    responses((status = 201, description = "The domain", body = Object),
              (status = 400, description = "A listed DID is not a member of the coop, or a bad field", body = crate::openapi::ErrorBody),
              (status = 403, description = "Not an admin of the coop (`details.reason = \"admin_only\"`)", body = crate::openapi::ErrorBody),
              (status = 404, description = "The token's cooperative does not exist", body = crate::openapi::ErrorBody),
              (status = 409, description = "The domain exists", body = crate::openapi::ErrorBody)))]
pub async fn create_domain(
    State(state): State<AppState>,
    caller: Authorized<GovWrite>,
    Json(body): Json<DomainBody>,
) -> ApiResult<Response> {
    let coop = caller.coop()?.clone();
    let request = NewDomain {
        domain_id: body.domain_id,
        name: body.name,
        members: members(&body.members)?,
        quorum_percent: body.quorum_percent,
        rule: body.rule,
    };
    let domain = state.governance.create_domain(&coop, &caller.did, request).await?;
    Ok(created(domain_json(&domain)))
}

/// Changes a governance domain of the token's coop (coop admins only).
#[utoipa::path(put, path = "/v1/gov/domains/{id}", tag = "governance", security(("bearer" = [])), params(("id" = String, Path)),
    request_body = DomainUpdateBody,
    responses((status = 200, description = "The domain", body = Object),
              (status = 400, description = "Members of the `coop` domain cannot be set, a listed DID is not a member, or a bad field", body = crate::openapi::ErrorBody),
              (status = 403, description = "Not an admin of the coop (`details.reason = \"admin_only\"`)", body = crate::openapi::ErrorBody),
              (status = 404, description = "No such domain", body = crate::openapi::ErrorBody)))]
pub async fn update_domain(
    State(state): State<AppState>,
    caller: Authorized<GovWrite>,
    Path(id): Path<String>,
    Json(body): Json<DomainUpdateBody>,
) -> ApiResult<Json<Value>> {
    let coop = caller.coop()?.clone();
    let change = DomainChange {
        name: body.name,
        members: body.members.as_deref().map(members).transpose()?,
        quorum_percent: body.quorum_percent,
        rule: body.rule,
    };
    Ok(Json(domain_json(&state.governance.update_domain(&coop, &caller.did, &id, change).await?)))
}

/// Domains of the token's coop, in id order.
#[utoipa::path(get, path = "/v1/gov/domains", tag = "governance", security(("bearer" = [])), params(PageQuery),
    responses((status = 200, description = "`{domains, pagination}`", body = Object),
              (status = 400, description = "A `limit` or `offset` that is not a non-negative integer", body = crate::openapi::ErrorBody)))]
pub async fn list_domains(
    State(state): State<AppState>,
    caller: Authorized<GovRead>,
    Query(query): Query<PageQuery>,
) -> ApiResult<Json<Value>> {
    let coop = caller.coop()?.clone();
    let page = query.page()?;
    let (domains, total) = state.governance.domains(&coop, page).await?;
    Ok(Json(Value::Object(list("domains", domains.iter().map(domain_json).collect(), page.info(total)))))
}

/// One domain.
#[utoipa::path(get, path = "/v1/gov/domains/{id}", tag = "governance", security(("bearer" = [])), params(("id" = String, Path)),
    responses((status = 200, description = "The domain", body = Object), (status = 404, body = crate::openapi::ErrorBody)))]
pub async fn get_domain(
    State(state): State<AppState>,
    caller: Authorized<GovRead>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let coop = caller.coop()?.clone();
    Ok(Json(domain_json(&state.governance.domain(&coop, &id).await?)))
}

async fn create(state: &AppState, caller: &crate::Caller, body: ProposalBody, open: bool) -> ApiResult<Response> {
    let coop = caller.coop()?.clone();
    let payload = normalise_payload(&body)?;
    let domain_id = body
        .domain_id
        .clone()
        .or(body.domain.clone())
        .ok_or_else(|| Error::bad_request_field("domain_id", "domain (or domain_id) is required"))?;
    let request = NewProposal {
        domain_id,
        title: body.title,
        description: body.description,
        payload,
        rule: body.rule_ccl,
        voting_duration_secs: body.voting_duration_secs,
    };
    let proposal = state.governance.create_proposal(&coop, &caller.did, request, open).await?;
    Ok(created(proposal_json(&proposal)))
}

/// Creates a proposal (a draft; open it with `/open`).
#[utoipa::path(post, path = "/v1/gov/proposals", tag = "governance", security(("bearer" = [])), request_body = ProposalBody,
    responses((status = 201, description = "The proposal, with `proposal_id`", body = Object),
              (status = 403, description = "Trust below 0.4", body = crate::openapi::ErrorBody),
              (status = 404, description = "`domain_id` (or `domain`) names no governance domain of the token's coop",
               body = crate::openapi::ErrorBody)))]
pub async fn create_proposal(
    State(state): State<AppState>,
    caller: Authorized<GovWrite>,
    Json(body): Json<ProposalBody>,
) -> ApiResult<Response> {
    create(&state, &caller, body, false).await
}

/// Creates and opens a proposal (short family).
#[utoipa::path(post, path = "/governance/proposals", tag = "governance", security(("bearer" = [])), request_body = ProposalBody,
    responses((status = 201, description = "The open proposal", body = Object),
              (status = 404, description = "`domain_id` (or `domain`) names no governance domain of the token's coop",
               body = crate::openapi::ErrorBody)))]
pub async fn short_create(
    State(state): State<AppState>,
    caller: Authorized<GovWrite>,
    Json(body): Json<ProposalBody>,
) -> ApiResult<Response> {
    create(&state, &caller, body, true).await
}

async fn list_proposals_of(
    state: &AppState,
    caller: &crate::Caller,
    filters: ProposalFilters,
) -> ApiResult<Json<Value>> {
    let coop = caller.coop()?.clone();
    let page = PageQuery { limit: filters.limit, offset: filters.offset }.page()?;
    let status = match filters.status.or(filters.state).as_deref() {
        _ if filters.active == Some(true) => Some(ProposalStatus::Open),
        None => None,
        Some("active") => Some(ProposalStatus::Open),
        Some(text) => Some(
            ProposalStatus::parse(text)
                .ok_or_else(|| Error::bad_request_field("status", "status is draft, open, closed or active"))?,
        ),
    };
    let (items, total) =
        state.governance.proposals(ProposalQuery { coop, domain: filters.domain, status, page }).await?;
    Ok(Json(Value::Object(list("proposals", items.iter().map(proposal_json).collect(), page.info(total)))))
}

/// Proposals of the token's coop, newest first.
#[utoipa::path(get, path = "/v1/gov/proposals", tag = "governance", security(("bearer" = [])), params(ProposalFilters),
    responses((status = 200, description = "`{proposals, pagination}`", body = Object)))]
pub async fn list_proposals(
    State(state): State<AppState>,
    caller: Authorized<GovRead>,
    Query(filters): Query<ProposalFilters>,
) -> ApiResult<Json<Value>> {
    list_proposals_of(&state, &caller, filters).await
}

/// Proposals (short family).
#[utoipa::path(get, path = "/governance/proposals", tag = "governance", security(("bearer" = [])), params(ProposalFilters),
    responses((status = 200, description = "`{proposals, pagination}`", body = Object)))]
pub async fn short_list(
    State(state): State<AppState>,
    caller: Authorized<GovRead>,
    Query(filters): Query<ProposalFilters>,
) -> ApiResult<Json<Value>> {
    list_proposals_of(&state, &caller, filters).await
}

/// One proposal.
#[utoipa::path(get, path = "/v1/gov/proposals/{id}", tag = "governance", security(("bearer" = [])), params(("id" = String, Path)),
    responses((status = 200, description = "The proposal", body = Object), (status = 404, body = crate::openapi::ErrorBody)))]
pub async fn get_proposal(
    State(state): State<AppState>,
    caller: Authorized<GovRead>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let coop = caller.coop()?.clone();
    Ok(Json(proposal_json(&state.governance.proposal(&coop, &id).await?)))
}

/// Opens a draft (its author or a domain member).
#[utoipa::path(post, path = "/v1/gov/proposals/{id}/open", tag = "governance", security(("bearer" = [])), params(("id" = String, Path)),
    responses((status = 200, description = "The open proposal", body = Object), (status = 409, body = crate::openapi::ErrorBody)))]
pub async fn open(
    State(state): State<AppState>,
    caller: Authorized<GovWrite>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let coop = caller.coop()?.clone();
    Ok(Json(proposal_json(&state.governance.open(&coop, &caller.did, &id).await?)))
}

async fn vote_on(state: &AppState, caller: &crate::Caller, id: &str, body: VoteBody) -> ApiResult<Json<Value>> {
    let coop = caller.coop()?.clone();
    let outcome = state.governance.vote(&coop, &caller.did, id, &body.choice).await?;
    Ok(Json(
        json!({ "proposal_id": id, "voter": caller.did.as_str(), "choice": outcome.choice.as_str(), "replaced": outcome.replaced }),
    ))
}

/// Casts or replaces the caller's vote.
#[utoipa::path(post, path = "/v1/gov/proposals/{id}/vote", tag = "governance", security(("bearer" = [])), params(("id" = String, Path)),
    request_body = VoteBody,
    responses((status = 200, description = "`{proposal_id, voter, choice, replaced}`", body = Object),
              (status = 409, description = "The proposal is not open, or its voting time has ended",
               body = crate::openapi::ErrorBody)))]
pub async fn vote(
    State(state): State<AppState>,
    caller: Authorized<GovWrite>,
    Path(id): Path<String>,
    Json(body): Json<VoteBody>,
) -> ApiResult<Json<Value>> {
    vote_on(&state, &caller, &id, body).await
}

/// Votes (short family).
#[utoipa::path(post, path = "/governance/proposals/{id}/vote", tag = "governance", security(("bearer" = [])), params(("id" = String, Path)),
    request_body = VoteBody,
    responses((status = 200, description = "`{proposal_id, voter, choice, replaced}`", body = Object),
              (status = 409, description = "The proposal is not open, or its voting time has ended",
               body = crate::openapi::ErrorBody)))]
pub async fn short_vote(
    State(state): State<AppState>,
    caller: Authorized<GovWrite>,
    Path(id): Path<String>,
    Json(body): Json<VoteBody>,
) -> ApiResult<Json<Value>> {
    vote_on(&state, &caller, &id, body).await
}

fn votes_json(view: &VotesView) -> Value {
    let t = &view.tally;
    json!({
        "votes_for": t.for_,
        "votes_against": t.against,
        "votes_abstain": t.abstain,
        "voters": t.effective_votes.iter().map(|v| json!({ "voter": v.voter, "choice": v.choice.as_str(), "weight": v.weight })).collect::<Vec<_>>(),
    })
}

/// The effective tally (delegation applied).
#[utoipa::path(get, path = "/v1/gov/proposals/{id}/votes", tag = "governance", security(("bearer" = [])), params(("id" = String, Path)),
    responses((status = 200, description = "`{votes_for, votes_against, votes_abstain, voters}`", body = Object)))]
pub async fn votes(
    State(state): State<AppState>,
    caller: Authorized<GovRead>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let coop = caller.coop()?.clone();
    Ok(Json(votes_json(&state.governance.votes(&coop, &id).await?)))
}

/// Closes a proposal: tally, effects, receipt.
#[utoipa::path(post, path = "/v1/gov/proposals/{id}/close", tag = "governance", security(("bearer" = [])), params(("id" = String, Path)),
    responses((status = 200, description = "The closed proposal", body = Object), (status = 409, body = crate::openapi::ErrorBody)))]
pub async fn close(
    State(state): State<AppState>,
    caller: Authorized<AnyToken>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let coop = caller.coop()?.clone();
    Ok(Json(proposal_json(&state.governance.close(&coop, Some(&caller.did), &id).await?)))
}

/// The signed decision receipt of a closed proposal.
#[utoipa::path(get, path = "/v1/gov/proposals/{id}/proof", tag = "governance", security(("bearer" = [])), params(("id" = String, Path)),
    responses((status = 200, description = "The receipt", body = Object),
              (status = 404, description = "`RECEIPT_UNAVAILABLE` with a reason, or not found", body = crate::openapi::ErrorBody)))]
pub async fn proof(
    State(state): State<AppState>,
    caller: Authorized<AnyToken>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let coop = caller.coop()?.clone();
    Ok(Json(state.governance.proof(&coop, &id).await?))
}

/// Creates a delegation from the caller.
#[utoipa::path(post, path = "/v1/gov/delegations", tag = "governance", security(("bearer" = [])), request_body = DelegationBody,
    responses((status = 201, description = "The delegation", body = Object),
              (status = 404, description = "The token's cooperative does not exist",
               body = crate::openapi::ErrorBody)))]
pub async fn delegate(
    State(state): State<AppState>,
    caller: Authorized<GovWrite>,
    Json(body): Json<DelegationBody>,
) -> ApiResult<Response> {
    let coop = caller.coop()?.clone();
    let delegate = common::did("delegate", &body.delegate)?;
    let record = state.governance.delegate(&coop, &caller.did, &delegate, &body.scope, body.expires_at).await?;
    Ok(created(delegation_json(&record)))
}

/// Delegations the caller gave and received.
#[utoipa::path(get, path = "/v1/gov/delegations", tag = "governance", security(("bearer" = [])),
    responses((status = 200, description = "`{given, received}`", body = Object)))]
pub async fn delegations(State(state): State<AppState>, caller: Authorized<GovRead>) -> ApiResult<Json<Value>> {
    let coop = caller.coop()?.clone();
    let (given, received) = state.governance.delegations_of(&coop, &caller.did).await?;
    Ok(Json(json!({
        "given": given.iter().map(delegation_json).collect::<Vec<_>>(),
        "received": received.iter().map(delegation_json).collect::<Vec<_>>(),
    })))
}

/// Revokes one of the caller's delegations.
#[utoipa::path(delete, path = "/v1/gov/delegations/{id}", tag = "governance", security(("bearer" = [])), params(("id" = String, Path)),
    responses((status = 204, description = "Revoked"), (status = 404, body = crate::openapi::ErrorBody)))]
pub async fn revoke(
    State(state): State<AppState>,
    caller: Authorized<GovWrite>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let coop = caller.coop()?.clone();
    state.governance.revoke(&coop, &caller.did, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The token's coop's receipt signing keys, current and retired, with their validity intervals.
#[utoipa::path(get, path = "/v1/gov/signing-keys", tag = "governance", security(("bearer" = [])),
    responses((status = 200, description = "`{keys: [{public_key, did, valid_from, valid_until, current, generation, master}]}`, \
oldest first: the keys of the token's coop (each derived from master secret `master` at the coop's key generation \
`generation`), and the gateway-wide keys of before per-coop keys (`generation` and `master` null)", body = Object),
              (status = 401, description = "No bearer token, or an invalid or expired one", body = crate::openapi::ErrorBody),
              (status = 403, description = "The token is not for a cooperative, or its holder is no longer a member", body = crate::openapi::ErrorBody)))]
pub async fn signing_keys(State(state): State<AppState>, caller: Authorized<AnyToken>) -> ApiResult<Json<Value>> {
    let coop = caller.coop()?.clone();
    let keys = state.governance.signing_keys(&coop).await?;
    Ok(Json(json!({
        "keys": keys.iter().map(|k| json!({
            "public_key": k.public_key, "did": k.did, "valid_from": k.valid_from, "valid_until": k.valid_until,
            "current": k.valid_until.is_none(), "generation": k.generation, "master": k.master,
        })).collect::<Vec<_>>(),
    })))
}
