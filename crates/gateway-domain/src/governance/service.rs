//! The governance service: domains, proposals (draft → open → closed), votes, delegations and
//! the close with its tally, effects and signed receipt, all through the store's unit of work.
//!
//! The arithmetic (tally, rules, receipts) is in the sibling modules; this module decides who may
//! do what when, executes approved payloads in the close's transaction, and writes events and
//! notifications. It holds no key material: receipts are signed through [`ReceiptKeys`].

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use gateway_core::{Clock, CoopId, Did, Error, PageRequest, Role};
use serde_json::Value;

use super::{
    COOP_DOMAIN, Choice, Delegation, DelegationScope, DirectVote, Effect, MembershipAction, Outcome, ProposalPayload,
    ProposalStatus, Rule, Tally, decide, sign_receipt, tally,
};
use crate::coops::{add_member_in, lock_coop, remove_member_in, require_coop, require_signature, update_settings_in};
use crate::events::{CoopEvent, VoteCast, emit, new_id};
use crate::ledger::{record_transaction, transfer, treasury_account};
use crate::notifications::{Note, NoteData, notify_all, spawn_expansion};
use crate::ports::{
    CoopTx, DelegationRecord, DomainRecord, EventTx, GovReads, GovTx, MemberRecord, MembershipObserver, NotificationTx,
    ProposalQuery, ProposalRecord, SigningKeyRecord, TransactionKind, TransactionRecord, Transactor, Tx, transaction,
};
use crate::trust::TrustGraph;

/// Trust needed to create a proposal.
pub const PROPOSAL_MIN_TRUST: f64 = 0.4;
/// Voting time when a proposal names none (7 days).
pub const DEFAULT_VOTING_SECS: u64 = 604_800;

/// How many proposals one author may create in one coop within [`PROPOSAL_WINDOW_SECS`]: enough
/// for any real agenda, and a bound on how fast one member can fill every other member's
/// notifications and the coop's log.
pub const PROPOSALS_PER_WINDOW: u64 = 20;

/// The sliding window of [`PROPOSALS_PER_WINDOW`]: an hour.
pub const PROPOSAL_WINDOW_SECS: u64 = 3_600;

/// Where receipts get their signature: each coop's key, derived from the current master secret
/// (see `governance::derive_receipt_key`). No method changes the master: that is the operator's
/// `gatewayd keystore rotate`, never a coop's decision.
pub trait ReceiptKeys: Send + Sync + fmt::Debug {
    /// The signer of `coop` at key generation `generation` under the current master, or the
    /// machine reason there is none (`no_keystore`, `keystore_locked`).
    fn signer(&self, coop: &CoopId, generation: u32) -> Result<super::ReceiptSigner, &'static str>;

    /// Whether receipts can be signed at all (a keystore unlocked, or keys held in memory).
    fn available(&self) -> bool;
}

/// A request to create a domain.
#[derive(Debug, Clone)]
pub struct NewDomain {
    /// Id within the coop (`[A-Za-z0-9_-]`, 1 to 64).
    pub domain_id: String,
    /// Display name.
    pub name: String,
    /// Who may vote: members of the coop.
    pub members: Vec<Did>,
    /// Quorum override, percent.
    pub quorum_percent: Option<u32>,
    /// Default rule of its proposals.
    pub rule: Option<String>,
}

/// A change to a domain: `None` keeps the current value.
#[derive(Debug, Clone, Default)]
pub struct DomainChange {
    /// New display name.
    pub name: Option<String>,
    /// New member list (not for the coop domain, whose members are the coop's).
    pub members: Option<Vec<Did>>,
    /// New quorum override, percent.
    pub quorum_percent: Option<u32>,
    /// New default rule.
    pub rule: Option<String>,
}

/// A request to create a proposal; `payload` is already the tagged form.
#[derive(Debug, Clone)]
pub struct NewProposal {
    /// Domain.
    pub domain_id: String,
    /// Title.
    pub title: String,
    /// Description.
    pub description: String,
    /// `{"type": "text"|"membership"|"settings"|"budget"|"signing_key_rotation", …}`.
    pub payload: Value,
    /// Rule text; the domain's (or majority) when absent.
    pub rule: Option<String>,
    /// Voting time once opened.
    pub voting_duration_secs: Option<u64>,
}

/// The result of a vote.
#[derive(Debug, Clone)]
pub struct VoteOutcome {
    /// Normalised choice.
    pub choice: Choice,
    /// Whether it replaced the voter's earlier vote.
    pub replaced: bool,
}

/// The effective tally of an open or closed proposal.
#[derive(Debug, Clone)]
pub struct VotesView {
    /// The tally (delegation applied).
    pub tally: Tally,
    /// The request signatures of the votes cast by signed requests (INTERFACE.md §11's evidence).
    pub signatures: Vec<(Did, gateway_core::RequestSignature)>,
}

/// The governance service.
#[derive(Debug, Clone)]
pub struct Governance {
    transactor: Arc<dyn Transactor>,
    reads: Arc<dyn GovReads>,
    trust: Arc<TrustGraph>,
    keys: Arc<dyn ReceiptKeys>,
    clock: Arc<dyn Clock>,
    observer: Option<Arc<dyn MembershipObserver>>,
}

fn member_strings(members: &[Did]) -> Vec<String> {
    members.iter().map(ToString::to_string).collect()
}

/// A domain with its members: the coop domain's are the coop's current members.
async fn require_domain<T: GovTx + CoopTx + ?Sized>(
    tx: &mut T,
    coop: &CoopId,
    domain_id: &str,
) -> Result<DomainRecord, Error> {
    let mut domain = tx.domain(coop, domain_id).await?.ok_or_else(|| Error::not_found("domain", domain_id))?;
    domain.members = if domain.domain_id == COOP_DOMAIN {
        tx.member_dids(coop).await?
    } else {
        // Only current members of the coop count, whatever the stored list still says.
        let listed: Vec<&Did> = domain.members.iter().collect();
        let mut current: Vec<Did> = tx.members_among(coop, &listed).await?.into_iter().map(|m| m.did).collect();
        current.sort();
        current
    };
    Ok(domain)
}

async fn require_proposal<T: GovTx + ?Sized>(tx: &mut T, coop: &CoopId, id: &str) -> Result<ProposalRecord, Error> {
    tx.proposal(coop, id).await?.ok_or_else(|| Error::not_found("proposal", id))
}

/// The proposal, or `NOT_FOUND`, holding its row until the transaction ends: opens, votes and
/// closes take it before they read the status, so a second close waits for the first and then
/// finds the proposal closed (409) instead of paying out again.
async fn lock_proposal<T: GovTx + ?Sized>(tx: &mut T, coop: &CoopId, id: &str) -> Result<ProposalRecord, Error> {
    tx.lock_proposal(coop, id).await?.ok_or_else(|| Error::not_found("proposal", id))
}

/// Creating and changing domains is for the coop's admins (403 `admin_only` otherwise).
async fn require_admin<T: CoopTx + ?Sized>(tx: &mut T, coop: &CoopId, caller: &Did) -> Result<(), Error> {
    match tx.member(coop, caller).await? {
        Some(MemberRecord { role: Role::Admin, .. }) => Ok(()),
        _ => Err(Error::denied("admin_only", "only an admin of the cooperative may create or change a domain")),
    }
}

/// Every listed DID must be a member of the coop (400 naming `members`).
async fn require_coop_members<T: CoopTx + ?Sized>(tx: &mut T, coop: &CoopId, members: &[Did]) -> Result<(), Error> {
    for member in members {
        if tx.member(coop, member).await?.is_none() {
            return Err(Error::bad_request_field("members", format!("{member} is not a member of the cooperative")));
        }
    }
    Ok(())
}

fn check_domain_settings(quorum_percent: Option<u32>, rule: Option<&str>) -> Result<(), Error> {
    if quorum_percent.is_some_and(|q| q > 100) {
        return Err(Error::bad_request_field("quorum_percent", "quorum_percent is 0 to 100"));
    }
    if let Some(rule) = rule {
        Rule::parse(rule).map_err(Error::from)?;
    }
    Ok(())
}

fn unique(members: Vec<Did>) -> Vec<Did> {
    members.into_iter().collect::<BTreeSet<Did>>().into_iter().collect()
}

impl Governance {
    /// The service over its ports.
    pub fn new(
        transactor: Arc<dyn Transactor>,
        reads: Arc<dyn GovReads>,
        trust: Arc<TrustGraph>,
        keys: Arc<dyn ReceiptKeys>,
        clock: Arc<dyn Clock>,
    ) -> Self {
        Self { transactor, reads, trust, keys, clock, observer: None }
    }

    /// Tells `observer` after a close that changed the coop's membership.
    pub fn with_membership_observer(mut self, observer: Arc<dyn MembershipObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Creates a domain of the coop (admins only); every member must be a member of the coop.
    pub async fn create_domain(&self, coop: &CoopId, caller: &Did, request: NewDomain) -> Result<DomainRecord, Error> {
        let record = DomainRecord {
            coop_id: coop.clone(),
            domain_id: request.domain_id,
            name: request.name,
            members: unique(request.members),
            quorum_percent: request.quorum_percent,
            rule: request.rule,
            created_at: self.clock.now_unix_secs(),
        };
        let caller = caller.clone();
        transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                require_coop(tx, &record.coop_id).await?;
                require_admin(tx, &record.coop_id, &caller).await?;
                let id = &record.domain_id;
                if id.is_empty()
                    || id.len() > 64
                    || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                {
                    return Err(Error::bad_request_field(
                        "domain_id",
                        "domain_id is 1 to 64 characters of [A-Za-z0-9_-]",
                    ));
                }
                check_domain_settings(record.quorum_percent, record.rule.as_deref())?;
                if tx.domain(&record.coop_id, &record.domain_id).await?.is_some() {
                    return Err(Error::conflict(format!("domain '{}' already exists", record.domain_id)));
                }
                require_coop_members(tx, &record.coop_id, &record.members).await?;
                tx.insert_domain(&record).await?;
                emit(tx, &record.coop_id, record.created_at, CoopEvent::GovernanceDomainCreated(&record)).await?;
                Ok(record)
            })
        })
        .await
    }

    /// Changes a domain (admins only). The coop domain's members cannot be set: they are the
    /// coop's.
    pub async fn update_domain(
        &self,
        coop: &CoopId,
        caller: &Did,
        domain_id: &str,
        change: DomainChange,
    ) -> Result<DomainRecord, Error> {
        let (coop, caller, domain_id) = (coop.clone(), caller.clone(), domain_id.to_owned());
        let clock = self.clock.clone();
        transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                require_coop(tx, &coop).await?;
                // Authority first: a non-admin learns nothing about what would be valid.
                require_admin(tx, &coop, &caller).await?;
                check_domain_settings(change.quorum_percent, change.rule.as_deref())?;
                if domain_id == COOP_DOMAIN && change.members.is_some() {
                    return Err(Error::bad_request_field(
                        "members",
                        "the members of the coop domain are always the cooperative's members and cannot be set",
                    ));
                }
                let mut domain =
                    tx.domain(&coop, &domain_id).await?.ok_or_else(|| Error::not_found("domain", &domain_id))?;
                if let Some(members) = change.members {
                    let members = unique(members);
                    require_coop_members(tx, &coop, &members).await?;
                    domain.members = members;
                }
                if let Some(name) = change.name {
                    domain.name = name;
                }
                if let Some(q) = change.quorum_percent {
                    domain.quorum_percent = Some(q);
                }
                if let Some(rule) = change.rule {
                    domain.rule = Some(rule);
                }
                tx.update_domain(&domain).await?;
                let updated = require_domain(tx, &coop, &domain_id).await?;
                let now = clock.now_unix_secs();
                emit(tx, &coop, now, CoopEvent::GovernanceDomainUpdated(&updated)).await?;
                Ok(updated)
            })
        })
        .await
    }

    /// A page of the coop's domains, in id order, and how many there are.
    pub async fn domains(&self, coop: &CoopId, page: PageRequest) -> Result<(Vec<DomainRecord>, u64), Error> {
        let mut all = self.reads.domains(coop).await?;
        all.sort_by(|a, b| a.domain_id.cmp(&b.domain_id));
        let total = all.len() as u64;
        let mut items: Vec<DomainRecord> =
            all.into_iter().skip(page.offset as usize).take(page.limit as usize).collect();
        for domain in &mut items {
            if domain.domain_id == COOP_DOMAIN {
                domain.members = self.reads.member_dids(coop).await?;
            }
        }
        Ok((items, total))
    }

    /// One domain.
    pub async fn domain(&self, coop: &CoopId, id: &str) -> Result<DomainRecord, Error> {
        let mut domain = self
            .reads
            .domains(coop)
            .await?
            .into_iter()
            .find(|d| d.domain_id == id)
            .ok_or_else(|| Error::not_found("domain", id))?;
        if domain.domain_id == COOP_DOMAIN {
            domain.members = self.reads.member_dids(coop).await?;
        }
        Ok(domain)
    }

    /// Creates a draft proposal; with `open` it is opened in the same transaction. The author
    /// needs trust ≥ 0.4 and must be a member of the domain (403 `not_a_domain_member`), and a
    /// proposal that acts on the coop belongs in the coop domain (400 naming `payload`).
    pub async fn create_proposal(
        &self,
        coop: &CoopId,
        author: &Did,
        request: NewProposal,
        open: bool,
    ) -> Result<ProposalRecord, Error> {
        // The trust gate is a request-level check (docs/INTERFACE.md §3.7's order), before any lookup.
        let score = self.trust.score(author);
        if score < PROPOSAL_MIN_TRUST {
            return Err(Error::InsufficientTrust { required: PROPOSAL_MIN_TRUST, actual: score });
        }
        if request.title.trim().is_empty() || request.title.chars().count() > 300 {
            return Err(Error::bad_request_field("title", "title is 1 to 300 characters"));
        }
        if request.description.chars().count() > super::MAX_DESCRIPTION_CHARS {
            return Err(Error::bad_request_field(
                "description",
                format!("description is at most {} characters", super::MAX_DESCRIPTION_CHARS),
            ));
        }
        let duration = request.voting_duration_secs.unwrap_or(DEFAULT_VOTING_SECS);
        if duration == 0 || duration > 365 * 86_400 {
            return Err(Error::bad_request_field(
                "voting_duration_secs",
                "voting_duration_secs is 1 second to 365 days",
            ));
        }
        let payload = ProposalPayload::from_json(&request.payload)?;
        if payload.acts_on_coop() && request.domain_id != COOP_DOMAIN {
            return Err(Error::bad_request_field(
                "payload",
                format!(
                    "a '{}' proposal acts on the cooperative and may only be made in the '{COOP_DOMAIN}' domain",
                    match &payload {
                        ProposalPayload::Text { kind: Some(kind), .. } => kind.as_str(),
                        other => other.type_name(),
                    }
                ),
            ));
        }
        let own_rule = match &request.rule {
            Some(text) => Some(Rule::parse(text).map_err(|err| Error::bad_request_field("rule_ccl", err.to_string()))?),
            None => None,
        };
        let (coop, author, now) = (coop.clone(), author.clone(), self.clock.now_unix_secs());
        let created = transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                // The coop's row, held to the commit, orders concurrent creations in the coop,
                // so the count below cannot be raced past its bound on PostgreSQL.
                lock_coop(tx, &coop).await?;
                let domain = require_domain(tx, &coop, &request.domain_id).await?;
                if !domain.members.contains(&author) {
                    return Err(Error::denied(
                        "not_a_domain_member",
                        format!("only members of domain '{}' may make proposals in it", domain.domain_id),
                    ));
                }
                let rule = proposal_rule(&domain, &payload, own_rule)?;
                let window_start = now.saturating_sub(PROPOSAL_WINDOW_SECS);
                let recent = tx.proposal_times_by_author(&coop, &author, window_start).await?;
                if recent.len() as u64 >= PROPOSALS_PER_WINDOW {
                    let oldest = recent.iter().copied().min().unwrap_or(now);
                    return Err(Error::RateLimited {
                        message: format!(
                            "at most {PROPOSALS_PER_WINDOW} proposals per author and coop in an hour; try again later"
                        ),
                        layer: gateway_core::RateLimitLayer::Did,
                        limit: PROPOSALS_PER_WINDOW,
                        retry_after_secs: (oldest + PROPOSAL_WINDOW_SECS).saturating_sub(now).max(1),
                        count: Some(recent.len() as u64),
                    });
                }
                let mut proposal = ProposalRecord {
                    id: new_id(),
                    coop_id: coop.clone(),
                    domain_id: domain.domain_id.clone(),
                    title: request.title,
                    description: request.description,
                    payload,
                    rule: rule.to_string(),
                    author,
                    status: ProposalStatus::Draft,
                    voting_duration_secs: duration,
                    created_at: now,
                    opened_at: None,
                    closes_at: None,
                    closed_at: None,
                    outcome: None,
                    tally: None,
                    receipt_unavailable: None,
                    effect: None,
                };
                tx.insert_proposal(&proposal).await?;
                emit(tx, &coop, now, CoopEvent::GovernanceProposalCreated(&proposal)).await?;
                if open {
                    open_in(tx, &mut proposal, &domain, now).await?;
                }
                Ok(proposal)
            })
        })
        .await;
        if open {
            spawn_expansion(self.transactor.clone());
        }
        created
    }

    /// Opens a draft (its author or a domain member).
    pub async fn open(&self, coop: &CoopId, caller: &Did, id: &str) -> Result<ProposalRecord, Error> {
        let (coop, caller, id, now) = (coop.clone(), caller.clone(), id.to_owned(), self.clock.now_unix_secs());
        let opened = transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                let mut proposal = lock_proposal(tx, &coop, &id).await?;
                let domain = require_domain(tx, &coop, &proposal.domain_id).await?;
                if proposal.author != caller && !domain.members.contains(&caller) {
                    return Err(Error::denied(
                        "not_a_domain_member",
                        "only the author or a member of the domain may open a proposal",
                    ));
                }
                if proposal.status != ProposalStatus::Draft {
                    return Err(Error::conflict(format!("proposal '{id}' is {}, not draft", proposal.status.as_str())));
                }
                open_in(tx, &mut proposal, &domain, now).await?;
                Ok(proposal)
            })
        })
        .await?;
        spawn_expansion(self.transactor.clone());
        Ok(opened)
    }

    /// Casts or replaces a domain member's vote while the proposal is open.
    pub async fn vote(&self, coop: &CoopId, voter: &Did, id: &str, choice: &str) -> Result<VoteOutcome, Error> {
        self.vote_signed(coop, voter, id, choice, None).await
    }

    /// [`Governance::vote`] by a signed request: the vote keeps its signature as evidence.
    pub async fn vote_signed(
        &self,
        coop: &CoopId,
        voter: &Did,
        id: &str,
        choice: &str,
        signature: Option<gateway_core::RequestSignature>,
    ) -> Result<VoteOutcome, Error> {
        let choice = Choice::parse(choice).ok_or_else(|| {
            Error::bad_request_field("choice", "choice must be for/approve/yes, against/reject/no or abstain")
        })?;
        let (coop, voter, id, now) = (coop.clone(), voter.clone(), id.to_owned(), self.clock.now_unix_secs());
        let outcome = transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                require_signature(tx, &coop).await?;
                let proposal = lock_proposal(tx, &coop, &id).await?;
                if proposal.status != ProposalStatus::Open {
                    return Err(Error::conflict(format!("proposal '{id}' is {}, not open", proposal.status.as_str())));
                }
                if proposal.closes_at.is_some_and(|end| now >= end) {
                    return Err(Error::conflict(format!("voting on proposal '{id}' has ended")));
                }
                let domain = require_domain(tx, &coop, &proposal.domain_id).await?;
                if !domain.members.contains(&voter) {
                    return Err(Error::denied(
                        "not_a_domain_member",
                        format!("only members of domain '{}' vote", domain.domain_id),
                    ));
                }
                let replaced = tx.upsert_vote(&id, &voter, choice.as_str(), now, signature.as_ref()).await?;
                let vote = VoteCast { proposal_id: &id, voter: &voter, choice: choice.as_str(), replaced };
                emit(tx, &coop, now, CoopEvent::GovernanceVoteCast(vote)).await?;
                Ok(VoteOutcome { choice, replaced })
            })
        })
        .await?;
        metrics::counter!("icn_gateway_governance_votes_total", "choice" => outcome.choice.as_str()).increment(1);
        Ok(outcome)
    }

    /// The effective tally now (delegation applied).
    pub async fn votes(&self, coop: &CoopId, id: &str) -> Result<VotesView, Error> {
        let (coop, id, now) = (coop.clone(), id.to_owned(), self.clock.now_unix_secs());
        transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                let proposal = require_proposal(tx, &coop, &id).await?;
                let domain = require_domain(tx, &coop, &proposal.domain_id).await?;
                let tally = current_tally(tx, &proposal, &domain, now).await?;
                Ok(VotesView { tally, signatures: tx.vote_signatures(&id).await? })
            })
        })
        .await
    }

    /// Whether closes are signed (a receipt key is at hand), for the health summary.
    pub fn receipts_available(&self) -> bool {
        self.keys.available()
    }

    /// A proposal.
    pub async fn proposal(&self, coop: &CoopId, id: &str) -> Result<ProposalRecord, Error> {
        self.reads.proposal(coop, id).await?.ok_or_else(|| Error::not_found("proposal", id))
    }

    /// A page of proposals.
    pub async fn proposals(&self, query: ProposalQuery) -> Result<(Vec<ProposalRecord>, u64), Error> {
        self.reads.proposals(&query).await
    }

    /// All and open proposals of a coop.
    pub async fn counts(&self, coop: &CoopId) -> Result<(u64, u64), Error> {
        self.reads.proposal_counts(coop).await
    }

    /// Closes a proposal: by its author at any time, by a domain member once voting has ended or
    /// every member's vote is effectively cast, by the sweeper (`caller` `None`) once it has ended.
    /// An approved proposal's effect is applied in the same transaction; an effect that can no
    /// longer be applied does not undo the close, it is recorded as not applied, with why.
    pub async fn close(&self, coop: &CoopId, caller: Option<&Did>, id: &str) -> Result<ProposalRecord, Error> {
        let (coop_id, caller, id, now) = (coop.clone(), caller.cloned(), id.to_owned(), self.clock.now_unix_secs());
        let keys = self.keys.clone();
        let closed = transaction(self.transactor.as_ref(), move |tx| {
            let coop = coop_id;
            Box::pin(async move {
                let mut proposal = lock_proposal(tx, &coop, &id).await?;
                if proposal.status != ProposalStatus::Open {
                    return Err(Error::conflict(format!("proposal '{id}' is {}, not open", proposal.status.as_str())));
                }
                let domain = require_domain(tx, &coop, &proposal.domain_id).await?;
                let ended = proposal.closes_at.is_some_and(|end| now >= end);
                let result = current_tally(tx, &proposal, &domain, now).await?;
                let everyone = result.participants >= domain.members.len() as u64;
                let decided_by_domain = decided_by_domain(&domain, &proposal.payload);
                match &caller {
                    None if !ended => return Err(Error::conflict("voting has not ended")),
                    None => {}
                    Some(c) if *c == proposal.author && !proposal.payload.acts_on_coop() => {}
                    Some(c) if (*c == proposal.author || domain.members.contains(c)) && !ended && !everyone => {
                        return Err(Error::conflict(if proposal.payload.acts_on_coop() {
                            "voting is still open: a proposal that acts on the coop closes when voting ends or every member has voted"
                        } else {
                            "voting is still open: only the author may close it early"
                        }));
                    }
                    Some(c) if *c == proposal.author || domain.members.contains(c) => {}
                    Some(_) => {
                        return Err(Error::denied(
                            "not_a_domain_member",
                            "only the author or a member of the domain may close a proposal",
                        ));
                    }
                }
                let record = require_coop(tx, &coop).await?;
                let quorum = domain.quorum_percent.unwrap_or(record.settings.quorum_percent);
                // The domain's rule as it is now decides; a proposal outside the coop domain
                // that acts on nothing may have asked for a stricter one. A rule stored before
                // this held (an author's looser rule on an effect) is never used.
                let domain_rule = domain_rule(&domain)?;
                let rule = if decided_by_domain {
                    domain_rule
                } else {
                    Rule::parse(&proposal.rule).map_err(Error::from)?.stricter(domain_rule)
                };
                proposal.rule = rule.to_string();
                let outcome = decide(&rule, quorum, domain.members.len() as u64, &result);
                if outcome == Outcome::Approved && proposal.payload.has_effect() {
                    proposal.effect = Some(match execute(tx, &record, &proposal, now).await {
                        Ok(()) => Effect::applied(),
                        Err(err @ (Error::Internal(_) | Error::ServiceUnavailable(_))) => return Err(err),
                        Err(err) => Effect::failed(err.to_string()),
                    });
                }
                proposal.status = ProposalStatus::Closed;
                proposal.closed_at = Some(now);
                proposal.outcome = Some(outcome);
                proposal.tally = Some((result.for_, result.against, result.abstain));
                let mut signed = None;
                match super::keys::coop_signer(tx, keys.as_ref(), &coop, now).await? {
                    Ok(signer) => {
                        let receipt =
                            sign_receipt(signer.as_ref(), &proposal.id, &proposal.domain_id, outcome, &result, now);
                        let body = serde_json::to_value(&receipt).map_err(|e| Error::Internal(e.to_string()))?;
                        tx.insert_receipt(&coop, &proposal.id, now, &body).await?;
                        signed = Some(body);
                    }
                    Err(reason) => proposal.receipt_unavailable = Some(reason.to_owned()),
                }
                if proposal.payload == ProposalPayload::SigningKeyRotation && outcome == Outcome::Approved {
                    // In the close's own transaction, after its receipt was signed with the old
                    // key: the new key signs nothing before this decision is durable, and a
                    // crash cannot commit the decision without the rotation.
                    rotate_in(tx, keys.as_ref(), &coop, now).await?;
                }
                tx.update_proposal(&proposal).await?;
                emit(tx, &coop, now, CoopEvent::GovernanceProposalClosed(&proposal, signed.as_ref())).await?;
                let note = Note {
                    title: format!("Proposal closed: {}", proposal.title),
                    body: format!("The proposal '{}' closed: {}.", proposal.title, outcome.as_str()),
                    data: NoteData::ProposalClosed { proposal_id: proposal.id.clone(), outcome: outcome.as_str() },
                };
                notify_all(tx, &domain.members, &coop, note, now).await?;
                Ok(proposal)
            })
        })
        .await?;
        spawn_expansion(self.transactor.clone());
        let outcome = closed.outcome.map_or("", Outcome::as_str);
        metrics::counter!("icn_gateway_governance_proposals_closed_total", "outcome" => outcome).increment(1);
        let applied = closed.effect.as_ref().is_some_and(|e| e.applied);
        match &closed.payload {
            ProposalPayload::Membership { .. } if applied => {
                if let Some(observer) = &self.observer {
                    observer.membership_changed(coop);
                }
            }
            _ => {}
        }
        Ok(closed)
    }

    /// Records the coop's current key in the signing-keys list if it is not there yet (first
    /// use after start, after a rotation while locked, or after `keystore rotate`), so the list
    /// shows the key the coop signs with before it signs anything.
    async fn register_key(&self, coop: &CoopId) -> Result<(), Error> {
        let (coop, keys, now) = (coop.clone(), self.keys.clone(), self.clock.now_unix_secs());
        transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                if tx.coop(&coop).await?.is_some() {
                    // No key (locked, or an outdated keystore) leaves the list as it is.
                    let _ = super::keys::coop_signer(tx, keys.as_ref(), &coop, now).await?;
                }
                Ok(())
            })
        })
        .await
    }

    /// The receipt of a closed proposal, or why there is none.
    pub async fn proof(&self, coop: &CoopId, id: &str) -> Result<Value, Error> {
        let proposal = self.proposal(coop, id).await?;
        if proposal.status != ProposalStatus::Closed {
            return Err(Error::ReceiptUnavailable { reason: "not_closed".into() });
        }
        match self.reads.receipt(coop, id).await? {
            Some(receipt) => Ok(receipt),
            None => Err(Error::ReceiptUnavailable {
                reason: proposal.receipt_unavailable.unwrap_or_else(|| "receipt_storage_unavailable".into()),
            }),
        }
    }

    /// The coop's signing keys, current and retired, oldest first (with the gateway-wide keys of
    /// before per-coop keys, which signed every coop's receipts then).
    pub async fn signing_keys(&self, coop: &CoopId) -> Result<Vec<SigningKeyRecord>, Error> {
        let listed = self.reads.signing_keys(coop).await?;
        let Ok(signer) = self.keys.signer(coop, 0) else { return Ok(listed) };
        let current = listed.iter().find(|k| k.valid_until.is_none() && k.coop_id.as_ref() == Some(coop));
        if current.is_some_and(|k| k.master >= Some(signer.master)) {
            return Ok(listed);
        }
        self.register_key(coop).await?;
        self.reads.signing_keys(coop).await
    }

    /// Creates a delegation from `delegator`.
    pub async fn delegate(
        &self,
        coop: &CoopId,
        delegator: &Did,
        delegate: &Did,
        scope: &str,
        expires_at: Option<u64>,
    ) -> Result<DelegationRecord, Error> {
        if delegator == delegate {
            return Err(Error::bad_request_field("delegate", "a DID cannot delegate to itself"));
        }
        let parsed = DelegationScope::parse(scope).map_err(Error::from)?;
        let now = self.clock.now_unix_secs();
        if expires_at.is_some_and(|e| e <= now) {
            return Err(Error::bad_request_field("expires_at", "expires_at is in the past"));
        }
        let record = DelegationRecord {
            id: new_id(),
            coop_id: coop.clone(),
            delegator: delegator.clone(),
            delegate: delegate.clone(),
            scope: parsed.to_string(),
            expires_at,
            created_at: now,
        };
        transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                // The membership lock: a removal of the delegate, which revokes their
                // delegations, is either committed before this check or waits for this insert.
                lock_coop(tx, &record.coop_id).await?;
                if tx.member(&record.coop_id, &record.delegator).await?.is_none() {
                    return Err(Error::denied("not_a_member", "only members of the cooperative delegate"));
                }
                if tx.member(&record.coop_id, &record.delegate).await?.is_none() {
                    return Err(Error::bad_request_field(
                        "delegate",
                        format!("{} is not a member of the cooperative", record.delegate),
                    ));
                }
                tx.insert_delegation(&record).await?;
                emit(tx, &record.coop_id, record.created_at, CoopEvent::DelegationCreated(&record)).await?;
                Ok(record)
            })
        })
        .await
    }

    /// Delegations given and received by a DID in the coop.
    pub async fn delegations_of(
        &self,
        coop: &CoopId,
        did: &Did,
    ) -> Result<(Vec<DelegationRecord>, Vec<DelegationRecord>), Error> {
        let coop = coop.clone();
        let all = transaction(self.transactor.as_ref(), move |tx| Box::pin(async move { tx.delegations(&coop).await }))
            .await?;
        let given = all.iter().filter(|d| &d.delegator == did).cloned().collect();
        let received = all.into_iter().filter(|d| &d.delegate == did).collect();
        Ok((given, received))
    }

    /// Revokes a delegation; anyone but its delegator gets `NOT_FOUND`.
    pub async fn revoke(&self, coop: &CoopId, delegator: &Did, id: &str) -> Result<(), Error> {
        let (coop, delegator, id) = (coop.clone(), delegator.clone(), id.to_owned());
        let now = self.clock.now_unix_secs();
        transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                require_signature(tx, &coop).await?;
                if tx.delete_delegation(&coop, &delegator, &id).await? {
                    emit(tx, &coop, now, CoopEvent::DelegationRevoked { id: &id, delegator: &delegator }).await?;
                    Ok(())
                } else {
                    Err(Error::not_found("delegation", id))
                }
            })
        })
        .await
    }

    /// Closes every open proposal whose voting time has ended; returns how many. Each is closed
    /// on its own: one that cannot be closed now is logged and retried on the next sweep, and
    /// never holds up the others.
    pub async fn sweep(&self) -> Result<usize, Error> {
        let due = self.reads.expired_proposals(self.clock.now_unix_secs()).await?;
        let mut closed = 0;
        for (coop, id) in due {
            match self.close(&coop, None, &id).await {
                Ok(_) => closed += 1,
                // Closed meanwhile by a member or another replica.
                Err(Error::Conflict { .. }) => {}
                Err(err) => tracing::warn!(%coop, proposal = %id, "the sweeper could not close a proposal: {err}"),
            }
        }
        Ok(closed)
    }
}

/// Moves `coop`, and only it, to its next key generation in the transaction: its current key is
/// retired (and stays listed), and its next key is recorded at once when the master is unlocked
/// (else at its first use). Neither the master secret nor any other coop's key changes.
async fn rotate_in<T: GovTx + EventTx + ?Sized>(
    tx: &mut T,
    keys: &dyn ReceiptKeys,
    coop: &CoopId,
    now: u64,
) -> Result<(), Error> {
    let generation = tx.bump_receipt_key_generation(coop, now).await?;
    let activated = super::keys::coop_signer(tx, keys, coop, now).await?;
    tracing::info!(coop = %coop, generation, signing = activated.is_ok(), "receipt key rotated");
    Ok(())
}

async fn open_in<T: GovTx + CoopTx + EventTx + NotificationTx + ?Sized>(
    tx: &mut T,
    proposal: &mut ProposalRecord,
    domain: &DomainRecord,
    now: u64,
) -> Result<(), Error> {
    proposal.status = ProposalStatus::Open;
    proposal.opened_at = Some(now);
    proposal.closes_at = Some(now + proposal.voting_duration_secs);
    tx.update_proposal(proposal).await?;
    emit(tx, &proposal.coop_id, now, CoopEvent::GovernanceProposalOpened(proposal)).await?;
    let note = Note {
        title: format!("New proposal: {}", proposal.title),
        body: format!(
            "A proposal in domain '{}' is open for voting until {}.",
            domain.domain_id,
            now + proposal.voting_duration_secs
        ),
        data: NoteData::ProposalOpened { proposal_id: proposal.id.clone(), domain_id: domain.domain_id.clone() },
    };
    notify_all(tx, &domain.members, &proposal.coop_id, note, now).await?;
    Ok(())
}

/// Whether a proposal is decided by its domain's rule alone: every proposal of the coop domain,
/// and every one that acts on the coop (INTERFACE.md §7: the author does not pick how the coop
/// decides).
fn decided_by_domain(domain: &DomainRecord, payload: &ProposalPayload) -> bool {
    domain.domain_id == COOP_DOMAIN || payload.acts_on_coop()
}

/// The domain's rule (`majority` when it sets none).
fn domain_rule(domain: &DomainRecord) -> Result<Rule, Error> {
    domain.rule.as_deref().map_or(Ok(Rule::Majority), |text| Rule::parse(text).map_err(Error::from))
}

/// The rule a new proposal records: its domain's, or the author's own where INTERFACE.md §7 allows
/// one (outside the coop domain, on a proposal that acts on nothing, and only as strict as the
/// domain's or stricter); anything else is 400 naming `rule_ccl`.
fn proposal_rule(domain: &DomainRecord, payload: &ProposalPayload, own: Option<Rule>) -> Result<Rule, Error> {
    let base = domain_rule(domain)?;
    match own {
        None => Ok(base),
        Some(_) if decided_by_domain(domain, payload) => Err(Error::bad_request_field(
            "rule_ccl",
            format!(
                "a proposal in the '{COOP_DOMAIN}' domain or with an effect is decided by its domain's rule ({base}); rule_ccl is not accepted"
            ),
        )),
        Some(own) if !own.at_least_as_strict_as(&base) => Err(Error::bad_request_field(
            "rule_ccl",
            format!("rule_ccl '{own}' is looser than the domain's rule '{base}'; it may only be as strict or stricter"),
        )),
        Some(own) => Ok(own),
    }
}

async fn current_tally<T: GovTx + ?Sized>(
    tx: &mut T,
    proposal: &ProposalRecord,
    domain: &DomainRecord,
    now: u64,
) -> Result<Tally, Error> {
    let votes: Vec<DirectVote> = tx
        .votes(&proposal.id)
        .await?
        .into_iter()
        .filter_map(|(voter, choice)| {
            Choice::parse(&choice).map(|choice| DirectVote { voter: voter.to_string(), choice })
        })
        .collect();
    let delegations: Vec<Delegation> = tx
        .delegations(&proposal.coop_id)
        .await?
        .into_iter()
        .filter_map(|d| {
            Some(Delegation {
                id: d.id,
                delegator: d.delegator.to_string(),
                delegate: d.delegate.to_string(),
                scope: DelegationScope::parse(&d.scope).ok()?,
                expires_at: d.expires_at,
                created_at: d.created_at,
            })
        })
        .collect();
    Ok(tally(&member_strings(&domain.members), &votes, &delegations, &domain.domain_id, &proposal.id, now))
}

/// Applies an approved proposal's effect inside the close's transaction. Every rule is checked
/// before the first write, so an effect refused with a client error has written nothing and the
/// close goes on without it.
async fn execute(
    tx: &mut dyn Tx,
    coop: &crate::ports::CoopRecord,
    proposal: &ProposalRecord,
    now: u64,
) -> Result<(), Error> {
    match &proposal.payload {
        ProposalPayload::Membership { action: MembershipAction::Add, did, role } => {
            let member = MemberRecord {
                did: did.clone(),
                role: role.unwrap_or(Role::Member),
                joined_at: now,
                credit_limit: None,
            };
            add_member_in(tx, &coop.id, &member, now).await
        }
        ProposalPayload::Membership { action: MembershipAction::Remove, did, .. } => {
            remove_member_in(tx, &coop.id, did, now).await
        }
        ProposalPayload::Settings(patch) => update_settings_in(tx, &coop.id, patch, now).await.map(drop),
        ProposalPayload::Budget { to, amount, currency } => {
            let currency = currency.clone().unwrap_or_else(|| coop.settings.default_currency.clone());
            if tx.member(&coop.id, to).await?.is_none() {
                return Err(Error::conflict(format!("the budget's recipient {to} is not a member")));
            }
            let treasury = treasury_account(&coop.id);
            transfer(tx, &coop.id, &treasury, to.as_str(), *amount, &currency, None).await?;
            let record = TransactionRecord {
                id: new_id(),
                coop_id: coop.id.clone(),
                kind: TransactionKind::Payment,
                from: treasury,
                to: to.to_string(),
                amount: *amount,
                currency,
                memo: Some(format!("budget: proposal {}", proposal.id)),
                timestamp: now,
                conversion: None,
                request_signature: None,
                batch_id: None,
            };
            record_transaction(tx, &record, Some(to)).await
        }
        // Key rotation: done by the close after its receipt is signed with the old key.
        ProposalPayload::SigningKeyRotation | ProposalPayload::Text { .. } => Ok(()),
    }
}

/// Receipt keys held in memory: for tests and embedders that manage key storage themselves.
/// Each coop's key is derived from the master as a keystore's is.
#[derive(Debug)]
pub struct MemoryReceiptKeys {
    master: std::sync::RwLock<Option<super::MasterSecret>>,
    missing_reason: &'static str,
}

impl MemoryReceiptKeys {
    /// Signing with keys derived from `master` (master number 0).
    pub fn new(master: [u8; 32]) -> Self {
        Self {
            master: std::sync::RwLock::new(Some(super::MasterSecret::new(0, master))),
            missing_reason: "no_keystore",
        }
    }

    /// No key, for the given reason (`no_keystore`, `keystore_locked`).
    pub fn unavailable(reason: &'static str) -> Self {
        Self { master: std::sync::RwLock::new(None), missing_reason: reason }
    }

    /// Signs from now on under `master`, numbered after the current one: the in-memory
    /// counterpart of the operator's `gatewayd keystore rotate` (no proposal can do this).
    /// Returns the new master's number.
    pub fn rotate_master(&self, master: [u8; 32]) -> u32 {
        let mut current = self.master.write().expect("keys lock");
        let id = current.as_ref().map_or(0, |m| m.id() + 1);
        *current = Some(super::MasterSecret::new(id, master));
        id
    }
}

impl ReceiptKeys for MemoryReceiptKeys {
    fn signer(&self, coop: &CoopId, generation: u32) -> Result<super::ReceiptSigner, &'static str> {
        match self.master.read().expect("keys lock").as_ref() {
            Some(master) => Ok(master.signer(coop, generation)),
            None => Err(self.missing_reason),
        }
    }

    fn available(&self) -> bool {
        self.master.read().expect("keys lock").is_some()
    }
}
