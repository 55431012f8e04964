//! Governance routes of both families: domains, proposals (three create shapes), open, vote,
//! votes, close, proof, delegations and signing keys. Proposals live in the token's coop.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use gateway_core::{Did, Error};
use gateway_domain::governance::{
    DomainChange, Effect, EffectiveVote, NewDomain, NewProposal, Outcome, ProposalStatus, VotesView,
};
use gateway_domain::ports::{DelegationRecord, DomainRecord, ProposalQuery, ProposalRecord, SigningKeyRecord};
use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::caller::scopes::{AnyToken, GovRead, GovWrite};
use crate::caller::{CoopCaller, Family};
use crate::error::ApiResult;
use crate::extract::{Json, Path, Query};
use crate::routes::common::RequestSignatureDto;
use crate::routes::common::{self, PageQuery, PaginationDto};
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
    /// The proposal's own decision rule. Refused (400) for a proposal with an effect and for any
    /// proposal in the `coop` domain, which its domain's rule decides; elsewhere accepted only as
    /// strict as the domain's rule or stricter.
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
        None => {
            let mut map = serde_json::Map::new();
            map.insert("type".into(), Value::from("text"));
            map.insert("content".into(), Value::from(body.description.as_str()));
            if let Some(kind) = &body.kind {
                map.insert("kind".into(), Value::from(kind.as_str()));
            }
            Ok(Value::Object(map))
        }
    }
}

/// The tally of a closed proposal.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct TallyDto {
    /// Sum of the weights of `For` votes.
    #[serde(rename = "for")]
    pub for_: u64,
    /// Sum of the weights of `Against` votes.
    pub against: u64,
    /// Sum of the weights of `Abstain` votes.
    pub abstain: u64,
}

/// What closing an approved proposal did to the coop.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct EffectDto {
    /// Whether the change was made.
    pub applied: bool,
    /// Why it was not; `null` when it was.
    pub error: Option<String>,
}

impl From<&Effect> for EffectDto {
    fn from(effect: &Effect) -> Self {
        Self { applied: effect.applied, error: effect.error.clone() }
    }
}

/// A proposal. `outcome`, `accepted`, `tally` and `effect` are present only once it closed
/// (with an outcome and a tally).
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct ProposalDto {
    /// Id.
    pub id: String,
    /// Same as `id`.
    pub proposal_id: String,
    /// Domain.
    pub domain_id: String,
    /// Title.
    pub title: String,
    /// Description.
    pub description: String,
    /// Tagged payload: `{"type": "text"|"membership"|"settings"|"budget"|"signing_key_rotation", …}`.
    #[schema(value_type = Object)]
    pub payload: Value,
    /// Decision rule.
    pub rule: String,
    /// Author DID.
    pub author: String,
    /// `draft`, `open` or `closed`.
    pub status: String,
    /// Seconds of voting once opened.
    pub voting_duration_secs: u64,
    /// Unix seconds.
    pub created_at: u64,
    /// When opened; `null` for a draft.
    pub opened_at: Option<u64>,
    /// When voting ends; `null` for a draft.
    pub closes_at: Option<u64>,
    /// When closed; `null` until then.
    pub closed_at: Option<u64>,
    /// Once closed: `Approved`, `Rejected` or `NoQuorum`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub outcome: Option<String>,
    /// Once closed: whether the outcome is `Approved`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub accepted: Option<bool>,
    /// Once closed: the counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false)]
    pub tally: Option<TallyDto>,
    /// Once closed: the effect of an approved proposal that acts on the coop, `null` for
    /// anything else.
    // Absent (outer `None`) until closed; once closed, present and `null` (`Some(None)`) when
    // there was no effect, so a closed proposal always carries the key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub effect: Option<Option<EffectDto>>,
}

impl From<&ProposalRecord> for ProposalDto {
    fn from(p: &ProposalRecord) -> Self {
        // The closing keys come together, and only when both the outcome and the tally are set.
        let closing = p.outcome.zip(p.tally);
        Self {
            id: p.id.clone(),
            proposal_id: p.id.clone(),
            domain_id: p.domain_id.clone(),
            title: p.title.clone(),
            description: p.description.clone(),
            payload: p.payload.to_json(),
            rule: p.rule.clone(),
            author: p.author.as_str().to_owned(),
            status: p.status.as_str().to_owned(),
            voting_duration_secs: p.voting_duration_secs,
            created_at: p.created_at,
            opened_at: p.opened_at,
            closes_at: p.closes_at,
            closed_at: p.closed_at,
            outcome: closing.map(|(outcome, _)| outcome.as_str().to_owned()),
            accepted: closing.map(|(outcome, _)| outcome == Outcome::Approved),
            tally: closing.map(|(_, (f, a, ab))| TallyDto { for_: f, against: a, abstain: ab }),
            effect: closing.map(|_| p.effect.as_ref().map(EffectDto::from)),
        }
    }
}

/// A page of the coop's proposals, newest first.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct ProposalPage {
    /// The proposals.
    pub proposals: Vec<ProposalDto>,
    /// Where this page is.
    pub pagination: PaginationDto,
}

/// A governance domain.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct DomainDto {
    /// Id within the coop.
    pub domain_id: String,
    /// Display name.
    pub name: String,
    /// DIDs of who may vote.
    pub members: Vec<String>,
    /// Quorum override, percent; `null` when the coop's setting applies.
    pub quorum_percent: Option<u32>,
    /// Default rule of its proposals; `null` means `majority`.
    pub rule: Option<String>,
    /// Unix seconds.
    pub created_at: u64,
}

impl From<&DomainRecord> for DomainDto {
    fn from(d: &DomainRecord) -> Self {
        Self {
            domain_id: d.domain_id.clone(),
            name: d.name.clone(),
            members: d.members.iter().map(|m| m.as_str().to_owned()).collect(),
            quorum_percent: d.quorum_percent,
            rule: d.rule.clone(),
            created_at: d.created_at,
        }
    }
}

/// A page of the coop's domains, in id order.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct DomainPage {
    /// The domains.
    pub domains: Vec<DomainDto>,
    /// Where this page is.
    pub pagination: PaginationDto,
}

/// A delegation.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct DelegationDto {
    /// Id.
    pub id: String,
    /// Who delegates (DID).
    pub delegator: String,
    /// To whom (DID).
    pub delegate: String,
    /// `blanket`, `domain:<domain_id>` or `proposal:<proposal_id>`.
    pub scope: String,
    /// Unix seconds, exclusive; `null` when it does not expire.
    pub expires_at: Option<u64>,
    /// Unix seconds.
    pub created_at: u64,
}

impl From<&DelegationRecord> for DelegationDto {
    fn from(d: &DelegationRecord) -> Self {
        Self {
            id: d.id.clone(),
            delegator: d.delegator.as_str().to_owned(),
            delegate: d.delegate.as_str().to_owned(),
            scope: d.scope.clone(),
            expires_at: d.expires_at,
            created_at: d.created_at,
        }
    }
}

/// The delegations a DID gave and received in the coop.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct DelegationsDto {
    /// Given by the caller.
    pub given: Vec<DelegationDto>,
    /// Received by the caller.
    pub received: Vec<DelegationDto>,
}

/// The answer to a vote.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct VoteCastDto {
    /// The proposal voted on.
    pub proposal_id: String,
    /// The voter's DID.
    pub voter: String,
    /// The normalised choice: `For`, `Against` or `Abstain`.
    pub choice: String,
    /// Whether it replaced the voter's earlier vote.
    pub replaced: bool,
}

/// A direct voter's vote as counted.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct EffectiveVoteDto {
    /// The DID of the member who voted directly.
    pub voter: String,
    /// `For`, `Against` or `Abstain`.
    pub choice: String,
    /// 1 plus the number of members whose vote reached them through delegation.
    pub weight: u64,
    /// The signature of the request that cast this vote, when it was signed: evidence anyone
    /// can verify offline (`gatewayctl verify-request`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_signature: Option<RequestSignatureDto>,
}

impl From<&EffectiveVote> for EffectiveVoteDto {
    fn from(vote: &EffectiveVote) -> Self {
        Self {
            voter: vote.voter.clone(),
            choice: vote.choice.as_str().to_owned(),
            weight: vote.weight,
            request_signature: None,
        }
    }
}

/// The effective tally of a proposal (delegation applied).
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct VotesDto {
    /// Sum of the weights of `For` votes.
    pub votes_for: u64,
    /// Sum of the weights of `Against` votes.
    pub votes_against: u64,
    /// Sum of the weights of `Abstain` votes.
    pub votes_abstain: u64,
    /// One entry per member who voted directly, sorted by `voter`.
    pub voters: Vec<EffectiveVoteDto>,
}

impl From<&VotesView> for VotesDto {
    fn from(view: &VotesView) -> Self {
        let t = &view.tally;
        Self {
            votes_for: t.for_,
            votes_against: t.against,
            votes_abstain: t.abstain,
            voters: t
                .effective_votes
                .iter()
                .map(|vote| EffectiveVoteDto {
                    request_signature: view
                        .signatures
                        .iter()
                        .find(|(voter, _)| voter.as_str() == vote.voter)
                        .map(|(_, signature)| RequestSignatureDto::from(signature)),
                    ..EffectiveVoteDto::from(vote)
                })
                .collect(),
        }
    }
}

/// A receipt signing key, current or retired.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct SigningKeyDto {
    /// 32-byte Ed25519 key, hex.
    pub public_key: String,
    /// Its `did:key`.
    pub did: String,
    /// Unix seconds, inclusive.
    pub valid_from: u64,
    /// Unix seconds, exclusive; `null` for the current key.
    pub valid_until: Option<u64>,
    /// Whether it is the current key (`valid_until` is `null`).
    pub current: bool,
    /// The coop's key generation it was derived for; `null` for a gateway-wide key of before
    /// per-coop keys.
    pub generation: Option<u32>,
    /// The number of the master secret it was derived from; `null` for a gateway-wide key of
    /// before per-coop keys.
    pub master: Option<u32>,
}

impl From<&SigningKeyRecord> for SigningKeyDto {
    fn from(k: &SigningKeyRecord) -> Self {
        Self {
            public_key: k.public_key.clone(),
            did: k.did.clone(),
            valid_from: k.valid_from,
            valid_until: k.valid_until,
            current: k.valid_until.is_none(),
            generation: k.generation,
            master: k.master,
        }
    }
}

/// The coop's receipt signing keys, oldest first.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct SigningKeysDto {
    /// The keys.
    pub keys: Vec<SigningKeyDto>,
}

fn created<T: serde::Serialize>(dto: T) -> Response {
    (StatusCode::CREATED, Json(dto)).into_response()
}

fn members(listed: &[String]) -> ApiResult<Vec<Did>> {
    listed.iter().map(|m| common::did("members", m)).collect()
}

/// Creates a governance domain in the token's coop (coop admins only).
#[utoipa::path(post, path = "/v1/gov/domains", tag = "governance", security(("bearer" = [])), request_body = DomainBody,
    responses((status = 201, description = "The domain", body = DomainDto),
              (status = 400, description = "A listed DID is not a member of the coop, or a bad field", body = crate::openapi::ErrorBody),
              (status = 403, description = "Not an admin of the coop (`details.reason = \"admin_only\"`)", body = crate::openapi::ErrorBody),
              (status = 404, description = "The token's cooperative does not exist", body = crate::openapi::ErrorBody),
              (status = 409, description = "The domain exists", body = crate::openapi::ErrorBody)))]
pub async fn create_domain(
    State(state): State<AppState>,
    caller: CoopCaller<GovWrite>,
    Json(body): Json<DomainBody>,
) -> ApiResult<Response> {
    let coop = caller.coop.clone();
    let request = NewDomain {
        domain_id: body.domain_id,
        name: body.name,
        members: members(&body.members)?,
        quorum_percent: body.quorum_percent,
        rule: body.rule,
    };
    let domain = state.governance.create_domain(&coop, &caller.did, request).await?;
    Ok(created(DomainDto::from(&domain)))
}

/// Changes a governance domain of the token's coop (coop admins only).
#[utoipa::path(put, path = "/v1/gov/domains/{id}", tag = "governance", security(("bearer" = [])), params(("id" = String, Path)),
    request_body = DomainUpdateBody,
    responses((status = 200, description = "The domain", body = DomainDto),
              (status = 400, description = "Members of the `coop` domain cannot be set, a listed DID is not a member, or a bad field", body = crate::openapi::ErrorBody),
              (status = 403, description = "Not an admin of the coop (`details.reason = \"admin_only\"`)", body = crate::openapi::ErrorBody),
              (status = 404, description = "No such domain", body = crate::openapi::ErrorBody)))]
pub async fn update_domain(
    State(state): State<AppState>,
    caller: CoopCaller<GovWrite>,
    Path(id): Path<String>,
    Json(body): Json<DomainUpdateBody>,
) -> ApiResult<Json<DomainDto>> {
    let coop = caller.coop.clone();
    let change = DomainChange {
        name: body.name,
        members: body.members.as_deref().map(members).transpose()?,
        quorum_percent: body.quorum_percent,
        rule: body.rule,
    };
    Ok(Json(DomainDto::from(&state.governance.update_domain(&coop, &caller.did, &id, change).await?)))
}

/// Domains of the token's coop, in id order.
#[utoipa::path(get, path = "/v1/gov/domains", tag = "governance", security(("bearer" = [])), params(PageQuery),
    responses((status = 200, description = "`{domains, pagination}`", body = DomainPage),
              (status = 400, description = "A `limit` or `offset` that is not a non-negative integer", body = crate::openapi::ErrorBody)))]
pub async fn list_domains(
    State(state): State<AppState>,
    caller: CoopCaller<GovRead>,
    Query(query): Query<PageQuery>,
) -> ApiResult<Json<DomainPage>> {
    let coop = caller.coop.clone();
    let page = query.page()?;
    let (domains, total) = state.governance.domains(&coop, page).await?;
    Ok(Json(DomainPage { domains: domains.iter().map(DomainDto::from).collect(), pagination: page.info(total).into() }))
}

/// One domain.
#[utoipa::path(get, path = "/v1/gov/domains/{id}", tag = "governance", security(("bearer" = [])), params(("id" = String, Path)),
    responses((status = 200, description = "The domain", body = DomainDto), (status = 404, body = crate::openapi::ErrorBody)))]
pub async fn get_domain(
    State(state): State<AppState>,
    caller: CoopCaller<GovRead>,
    Path(id): Path<String>,
) -> ApiResult<Json<DomainDto>> {
    let coop = caller.coop.clone();
    Ok(Json(DomainDto::from(&state.governance.domain(&coop, &id).await?)))
}

/// Creates a proposal: a draft on `/v1` (open it with `/open`), open at once on the short
/// family's `POST /governance/proposals`.
#[utoipa::path(post, path = "/v1/gov/proposals", tag = "governance", security(("bearer" = [])), request_body = ProposalBody,
    responses((status = 201, description = "The proposal, with `proposal_id`", body = ProposalDto),
              (status = 403, description = "Trust below 0.4", body = crate::openapi::ErrorBody),
              (status = 404, description = "`domain_id` (or `domain`) names no governance domain of the token's coop",
               body = crate::openapi::ErrorBody)))]
pub async fn create_proposal(
    State(state): State<AppState>,
    caller: CoopCaller<GovWrite>,
    Json(body): Json<ProposalBody>,
) -> ApiResult<Response> {
    let open_now = caller.family == Family::Short;
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
    let proposal = state.governance.create_proposal(&caller.coop, &caller.did, request, open_now).await?;
    Ok(created(ProposalDto::from(&proposal)))
}

/// Proposals of the token's coop, newest first.
#[utoipa::path(get, path = "/v1/gov/proposals", tag = "governance", security(("bearer" = [])), params(ProposalFilters),
    responses((status = 200, description = "`{proposals, pagination}`", body = ProposalPage)))]
pub async fn list_proposals(
    State(state): State<AppState>,
    caller: CoopCaller<GovRead>,
    Query(filters): Query<ProposalFilters>,
) -> ApiResult<Json<ProposalPage>> {
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
    let (items, total) = state
        .governance
        .proposals(ProposalQuery { coop: caller.coop.clone(), domain: filters.domain, status, page })
        .await?;
    Ok(Json(ProposalPage {
        proposals: items.iter().map(ProposalDto::from).collect(),
        pagination: page.info(total).into(),
    }))
}

/// One proposal.
#[utoipa::path(get, path = "/v1/gov/proposals/{id}", tag = "governance", security(("bearer" = [])), params(("id" = String, Path)),
    responses((status = 200, description = "The proposal", body = ProposalDto), (status = 404, body = crate::openapi::ErrorBody)))]
pub async fn get_proposal(
    State(state): State<AppState>,
    caller: CoopCaller<GovRead>,
    Path(id): Path<String>,
) -> ApiResult<Json<ProposalDto>> {
    let coop = caller.coop.clone();
    Ok(Json(ProposalDto::from(&state.governance.proposal(&coop, &id).await?)))
}

/// Opens a draft (its author or a domain member).
#[utoipa::path(post, path = "/v1/gov/proposals/{id}/open", tag = "governance", security(("bearer" = [])), params(("id" = String, Path)),
    responses((status = 200, description = "The open proposal", body = ProposalDto), (status = 409, body = crate::openapi::ErrorBody)))]
pub async fn open(
    State(state): State<AppState>,
    caller: CoopCaller<GovWrite>,
    Path(id): Path<String>,
) -> ApiResult<Json<ProposalDto>> {
    let coop = caller.coop.clone();
    Ok(Json(ProposalDto::from(&state.governance.open(&coop, &caller.did, &id).await?)))
}

/// Casts or replaces the caller's vote.
#[utoipa::path(post, path = "/v1/gov/proposals/{id}/vote", tag = "governance", security(("bearer" = [])), params(("id" = String, Path)),
    request_body = VoteBody,
    responses((status = 200, description = "`{proposal_id, voter, choice, replaced}`", body = VoteCastDto),
              (status = 409, description = "The proposal is not open, or its voting time has ended",
               body = crate::openapi::ErrorBody)))]
pub async fn vote(
    State(state): State<AppState>,
    caller: CoopCaller<GovWrite>,
    Path(id): Path<String>,
    signature: crate::signing::Signature,
    Json(body): Json<VoteBody>,
) -> ApiResult<Json<VoteCastDto>> {
    let outcome = state.governance.vote_signed(&caller.coop, &caller.did, &id, &body.choice, signature.0).await?;
    Ok(Json(VoteCastDto {
        proposal_id: id,
        voter: caller.did.as_str().to_owned(),
        choice: outcome.choice.as_str().to_owned(),
        replaced: outcome.replaced,
    }))
}

/// The effective tally (delegation applied).
#[utoipa::path(get, path = "/v1/gov/proposals/{id}/votes", tag = "governance", security(("bearer" = [])), params(("id" = String, Path)),
    responses((status = 200, description = "`{votes_for, votes_against, votes_abstain, voters}`", body = VotesDto)))]
pub async fn votes(
    State(state): State<AppState>,
    caller: CoopCaller<GovRead>,
    Path(id): Path<String>,
) -> ApiResult<Json<VotesDto>> {
    let coop = caller.coop.clone();
    Ok(Json(VotesDto::from(&state.governance.votes(&coop, &id).await?)))
}

/// Closes a proposal: tally under its domain's rule, effects, receipt. Any domain member once
/// voting has ended or every member's vote is cast; its author earlier only if it has no effect.
#[utoipa::path(post, path = "/v1/gov/proposals/{id}/close", tag = "governance", security(("bearer" = [])), params(("id" = String, Path)),
    responses((status = 200, description = "The closed proposal", body = ProposalDto),
              (status = 409, description = "Not open, or voting still open for this caller", body = crate::openapi::ErrorBody)))]
pub async fn close(
    State(state): State<AppState>,
    caller: CoopCaller<AnyToken>,
    Path(id): Path<String>,
) -> ApiResult<Json<ProposalDto>> {
    let coop = caller.coop.clone();
    Ok(Json(ProposalDto::from(&state.governance.close(&coop, Some(&caller.did), &id).await?)))
}

/// The signed decision receipt of a closed proposal.
#[utoipa::path(get, path = "/v1/gov/proposals/{id}/proof", tag = "governance", security(("bearer" = [])), params(("id" = String, Path)),
    responses((status = 200, description = "The receipt", body = Object),
              (status = 404, description = "`RECEIPT_UNAVAILABLE` with a reason, or not found", body = crate::openapi::ErrorBody)))]
pub async fn proof(
    State(state): State<AppState>,
    caller: CoopCaller<AnyToken>,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let coop = caller.coop.clone();
    Ok(Json(state.governance.proof(&coop, &id).await?))
}

/// Creates a delegation from the caller.
#[utoipa::path(post, path = "/v1/gov/delegations", tag = "governance", security(("bearer" = [])), request_body = DelegationBody,
    responses((status = 201, description = "The delegation", body = DelegationDto),
              (status = 404, description = "The token's cooperative does not exist",
               body = crate::openapi::ErrorBody)))]
pub async fn delegate(
    State(state): State<AppState>,
    caller: CoopCaller<GovWrite>,
    Json(body): Json<DelegationBody>,
) -> ApiResult<Response> {
    let coop = caller.coop.clone();
    let delegate = common::did("delegate", &body.delegate)?;
    let record = state.governance.delegate(&coop, &caller.did, &delegate, &body.scope, body.expires_at).await?;
    Ok(created(DelegationDto::from(&record)))
}

/// Delegations the caller gave and received.
#[utoipa::path(get, path = "/v1/gov/delegations", tag = "governance", security(("bearer" = [])),
    responses((status = 200, description = "`{given, received}`", body = DelegationsDto)))]
pub async fn delegations(
    State(state): State<AppState>,
    caller: CoopCaller<GovRead>,
) -> ApiResult<Json<DelegationsDto>> {
    let coop = caller.coop.clone();
    let (given, received) = state.governance.delegations_of(&coop, &caller.did).await?;
    Ok(Json(DelegationsDto {
        given: given.iter().map(DelegationDto::from).collect(),
        received: received.iter().map(DelegationDto::from).collect(),
    }))
}

/// Revokes one of the caller's delegations.
#[utoipa::path(delete, path = "/v1/gov/delegations/{id}", tag = "governance", security(("bearer" = [])), params(("id" = String, Path)),
    responses((status = 204, description = "Revoked"), (status = 404, body = crate::openapi::ErrorBody)))]
pub async fn revoke(
    State(state): State<AppState>,
    caller: CoopCaller<GovWrite>,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    let coop = caller.coop.clone();
    state.governance.revoke(&coop, &caller.did, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The token's coop's receipt signing keys, current and retired, with their validity intervals.
#[utoipa::path(get, path = "/v1/gov/signing-keys", tag = "governance", security(("bearer" = [])),
    responses((status = 200, description = "`{keys: [{public_key, did, valid_from, valid_until, current, generation, master}]}`, \
oldest first: the keys of the token's coop (each derived from master secret `master` at the coop's key generation \
`generation`), and the gateway-wide keys of before per-coop keys (`generation` and `master` null)", body = SigningKeysDto),
              (status = 401, description = "No bearer token, or an invalid or expired one", body = crate::openapi::ErrorBody),
              (status = 403, description = "The token is not for a cooperative, or its holder is no longer a member", body = crate::openapi::ErrorBody)))]
pub async fn signing_keys(
    State(state): State<AppState>,
    caller: CoopCaller<AnyToken>,
) -> ApiResult<Json<SigningKeysDto>> {
    let coop = caller.coop.clone();
    let keys = state.governance.signing_keys(&coop).await?;
    Ok(Json(SigningKeysDto { keys: keys.iter().map(SigningKeyDto::from).collect() }))
}
