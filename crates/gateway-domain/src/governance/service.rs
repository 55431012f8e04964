//! The governance service: domains, proposals (draft → open → closed), votes, delegations and
//! the close with its tally, effects and signed receipt, all through the store's unit of work.
//!
//! The arithmetic (tally, rules, receipts) is in the sibling modules; this module decides who may
//! do what when, executes approved payloads in the close's transaction, and writes events and
//! notifications. It holds no key material: receipts are signed through [`ReceiptKeys`].

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use gateway_core::{Amount, Clock, CoopId, Currency, Did, Error, Role};
use serde_json::{Value, json};

use super::{Choice, Delegation, DelegationScope, DirectVote, Outcome, Rule, Tally, decide, sign_receipt, tally};
use crate::coops::require_coop;
use crate::events::{CoopEventType, emit, new_id};
use crate::ledger::{record_transaction, transfer, treasury_account};
use crate::notifications::{Note, notify_all, spawn_expansion};
use crate::ports::{
    DelegationRecord, DomainRecord, GovReads, ProposalQuery, ProposalRecord, SigningKeyRecord, TransactionKind,
    TransactionRecord, Transactor, Tx, transaction,
};
use crate::trust::TrustGraph;

/// Trust needed to create a proposal.
pub const PROPOSAL_MIN_TRUST: f64 = 0.4;
/// Voting time when a proposal names none (7 days).
pub const DEFAULT_VOTING_SECS: u64 = 604_800;

/// Where receipts get their signature: each coop's key, derived from the current master secret
/// (see `governance::derive_receipt_key`). No method changes the master: that is the operator's
/// `gatewayd keystore rotate`, never a coop's decision.
pub trait ReceiptKeys: Send + Sync + fmt::Debug {
    /// The signer of `coop` at key generation `generation` under the current master, or the
    /// machine reason there is none (`no_keystore`, `keystore_locked`).
    fn signer(&self, coop: &CoopId, generation: u32) -> Result<super::ReceiptSigner, &'static str>;
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
}

/// The governance service.
#[derive(Debug, Clone)]
pub struct Governance {
    transactor: Arc<dyn Transactor>,
    reads: Arc<dyn GovReads>,
    trust: Arc<TrustGraph>,
    keys: Arc<dyn ReceiptKeys>,
    clock: Arc<dyn Clock>,
}

fn member_strings(members: &[Did]) -> Vec<String> {
    members.iter().map(ToString::to_string).collect()
}

fn proposal_event(p: &ProposalRecord) -> Value {
    json!({ "proposal_id": p.id, "domain_id": p.domain_id, "title": p.title, "status": p.status, "author": p.author.as_str() })
}

async fn require_domain(tx: &mut dyn Tx, coop: &CoopId, domain_id: &str) -> Result<DomainRecord, Error> {
    tx.domain(coop, domain_id).await?.ok_or_else(|| Error::not_found("domain", domain_id))
}

async fn require_proposal(tx: &mut dyn Tx, coop: &CoopId, id: &str) -> Result<ProposalRecord, Error> {
    tx.proposal(coop, id).await?.ok_or_else(|| Error::not_found("proposal", id))
}

/// Validates a payload and returns it in the stored (tagged) form.
pub fn validate_payload(payload: Value) -> Result<Value, Error> {
    let bad = |m: &str| Error::bad_request_field("payload", m.to_owned());
    let kind = payload.get("type").and_then(Value::as_str).ok_or_else(|| bad("payload needs a \"type\""))?;
    match kind {
        "text" => {
            payload.get("content").and_then(Value::as_str).ok_or_else(|| bad("a text payload needs \"content\""))?;
        }
        "membership" => {
            let action = payload.get("action").and_then(Value::as_str);
            if !matches!(action, Some("add" | "remove")) {
                return Err(bad("a membership payload needs \"action\": \"add\" or \"remove\""));
            }
            let did =
                payload.get("did").and_then(Value::as_str).ok_or_else(|| bad("a membership payload needs \"did\""))?;
            Did::parse(did).map_err(|e| bad(&format!("invalid DID: {e}")))?;
            if let Some(role) = payload.get("role").and_then(Value::as_str) {
                Role::parse(role).ok_or_else(|| bad("role must be \"admin\" or \"member\""))?;
            }
        }
        "settings" => {
            let settings = payload
                .get("settings")
                .and_then(Value::as_object)
                .ok_or_else(|| bad("a settings payload needs \"settings\""))?;
            for key in settings.keys() {
                if !matches!(
                    key.as_str(),
                    "default_currency" | "credit_limit" | "high_value_threshold" | "quorum_percent"
                ) {
                    return Err(bad(&format!("unknown setting '{key}'")));
                }
            }
        }
        "budget" => {
            let to = payload.get("to").and_then(Value::as_str).ok_or_else(|| bad("a budget payload needs \"to\""))?;
            Did::parse(to).map_err(|e| bad(&format!("invalid DID: {e}")))?;
            let amount = payload.get("amount").ok_or_else(|| bad("a budget payload needs \"amount\""))?;
            Amount::parse_payment(&amount.to_string()).map_err(|e| bad(&format!("amount {e}")))?;
            if let Some(c) = payload.get("currency").and_then(Value::as_str) {
                Currency::parse(c).map_err(bad)?;
            }
        }
        "signing_key_rotation" => {}
        other => return Err(bad(&format!("unknown payload type '{other}'"))),
    }
    Ok(payload)
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
        Self { transactor, reads, trust, keys, clock }
    }

    /// Creates a domain of the coop; every member must be a member of the coop.
    pub async fn create_domain(
        &self,
        coop: &CoopId,
        domain_id: String,
        name: String,
        members: Vec<Did>,
        quorum_percent: Option<u32>,
        rule: Option<String>,
    ) -> Result<DomainRecord, Error> {
        if domain_id.is_empty()
            || domain_id.len() > 64
            || !domain_id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(Error::bad_request_field("domain_id", "domain_id is 1 to 64 characters of [A-Za-z0-9_-]"));
        }
        if quorum_percent.is_some_and(|q| q > 100) {
            return Err(Error::bad_request_field("quorum_percent", "quorum_percent is 0 to 100"));
        }
        if let Some(rule) = &rule {
            Rule::parse(rule).map_err(Error::from)?;
        }
        let unique: BTreeSet<Did> = members.into_iter().collect();
        let record = DomainRecord {
            coop_id: coop.clone(),
            domain_id,
            name,
            members: unique.into_iter().collect(),
            quorum_percent,
            rule,
            created_at: self.clock.now_unix_secs(),
        };
        transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                require_coop(tx, &record.coop_id).await?;
                if tx.domain(&record.coop_id, &record.domain_id).await?.is_some() {
                    return Err(Error::conflict(format!("domain '{}' already exists", record.domain_id)));
                }
                for member in &record.members {
                    if tx.member(&record.coop_id, member).await?.is_none() {
                        return Err(Error::bad_request_field("members", format!("{member} is not a member of the cooperative")));
                    }
                }
                tx.insert_domain(&record).await?;
                let data = json!({ "domain_id": record.domain_id, "name": record.name, "members": member_strings(&record.members) });
                emit(tx, &record.coop_id, CoopEventType::GovernanceDomainCreated, record.created_at, data).await?;
                Ok(record)
            })
        })
        .await
    }

    /// Domains of a coop.
    pub async fn domains(&self, coop: &CoopId) -> Result<Vec<DomainRecord>, Error> {
        self.reads.domains(coop).await
    }

    /// One domain.
    pub async fn domain(&self, coop: &CoopId, id: &str) -> Result<DomainRecord, Error> {
        self.domains(coop).await?.into_iter().find(|d| d.domain_id == id).ok_or_else(|| Error::not_found("domain", id))
    }

    /// Creates a draft proposal (trust ≥ 0.4); with `open` it is opened in the same transaction.
    pub async fn create_proposal(
        &self,
        coop: &CoopId,
        author: &Did,
        request: NewProposal,
        open: bool,
    ) -> Result<ProposalRecord, Error> {
        let score = self.trust.score(author);
        if score < PROPOSAL_MIN_TRUST {
            return Err(Error::InsufficientTrust { required: PROPOSAL_MIN_TRUST, actual: score });
        }
        if request.title.trim().is_empty() || request.title.chars().count() > 300 {
            return Err(Error::bad_request_field("title", "title is 1 to 300 characters"));
        }
        let duration = request.voting_duration_secs.unwrap_or(DEFAULT_VOTING_SECS);
        if duration == 0 || duration > 365 * 86_400 {
            return Err(Error::bad_request_field(
                "voting_duration_secs",
                "voting_duration_secs is 1 second to 365 days",
            ));
        }
        let payload = validate_payload(request.payload)?;
        if let Some(rule) = &request.rule {
            Rule::parse(rule).map_err(Error::from)?;
        }
        let (coop, author, now) = (coop.clone(), author.clone(), self.clock.now_unix_secs());
        let created = transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                let domain = require_domain(tx, &coop, &request.domain_id).await?;
                let mut proposal = ProposalRecord {
                    id: new_id(),
                    coop_id: coop.clone(),
                    domain_id: domain.domain_id.clone(),
                    title: request.title,
                    description: request.description,
                    payload,
                    rule: request.rule.or(domain.rule.clone()).unwrap_or_else(|| Rule::Majority.to_string()),
                    author,
                    status: "draft".into(),
                    voting_duration_secs: duration,
                    created_at: now,
                    opened_at: None,
                    closes_at: None,
                    closed_at: None,
                    outcome: None,
                    tally: None,
                    receipt_unavailable: None,
                };
                tx.insert_proposal(&proposal).await?;
                emit(tx, &coop, CoopEventType::GovernanceProposalCreated, now, proposal_event(&proposal)).await?;
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
                let mut proposal = require_proposal(tx, &coop, &id).await?;
                let domain = require_domain(tx, &coop, &proposal.domain_id).await?;
                if proposal.author != caller && !domain.members.contains(&caller) {
                    return Err(Error::forbidden("only the author or a member of the domain may open a proposal"));
                }
                if proposal.status != "draft" {
                    return Err(Error::conflict(format!("proposal '{id}' is {}, not draft", proposal.status)));
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
        let choice = Choice::parse(choice).ok_or_else(|| {
            Error::bad_request_field("choice", "choice must be for/approve/yes, against/reject/no or abstain")
        })?;
        let (coop, voter, id, now) = (coop.clone(), voter.clone(), id.to_owned(), self.clock.now_unix_secs());
        let outcome = transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                let proposal = require_proposal(tx, &coop, &id).await?;
                if proposal.status != "open" {
                    return Err(Error::conflict(format!("proposal '{id}' is {}, not open", proposal.status)));
                }
                if proposal.closes_at.is_some_and(|end| now >= end) {
                    return Err(Error::conflict(format!("voting on proposal '{id}' has ended")));
                }
                let domain = require_domain(tx, &coop, &proposal.domain_id).await?;
                if !domain.members.contains(&voter) {
                    return Err(Error::forbidden(format!("only members of domain '{}' vote", domain.domain_id)));
                }
                let replaced = tx.upsert_vote(&id, &voter, choice.as_str(), now).await?;
                let data = json!({ "proposal_id": id, "voter": voter.as_str(), "choice": choice.as_str(), "replaced": replaced });
                emit(tx, &coop, CoopEventType::GovernanceVoteCast, now, data).await?;
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
                Ok(VotesView { tally: current_tally(tx, &proposal, &domain, now).await? })
            })
        })
        .await
    }

    /// A proposal.
    pub async fn proposal(&self, coop: &CoopId, id: &str) -> Result<ProposalRecord, Error> {
        let (coop, id) = (coop.clone(), id.to_owned());
        transaction(self.transactor.as_ref(), move |tx| Box::pin(async move { require_proposal(tx, &coop, &id).await }))
            .await
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
    pub async fn close(&self, coop: &CoopId, caller: Option<&Did>, id: &str) -> Result<ProposalRecord, Error> {
        let (coop, caller, id, now) = (coop.clone(), caller.cloned(), id.to_owned(), self.clock.now_unix_secs());
        let keys = self.keys.clone();
        let closed = transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                let mut proposal = require_proposal(tx, &coop, &id).await?;
                if proposal.status != "open" {
                    return Err(Error::conflict(format!("proposal '{id}' is {}, not open", proposal.status)));
                }
                let domain = require_domain(tx, &coop, &proposal.domain_id).await?;
                let ended = proposal.closes_at.is_some_and(|end| now >= end);
                let result = current_tally(tx, &proposal, &domain, now).await?;
                let everyone = result.participants >= domain.members.len() as u64;
                match &caller {
                    None if !ended => return Err(Error::conflict("voting has not ended")),
                    None => {}
                    Some(c) if *c == proposal.author => {}
                    Some(c) if domain.members.contains(c) && !ended && !everyone => {
                        return Err(Error::conflict("voting is still open: only the author may close it early"));
                    }
                    Some(c) if domain.members.contains(c) => {}
                    Some(_) => {
                        return Err(Error::forbidden("only the author or a member of the domain may close a proposal"));
                    }
                }
                let record = require_coop(tx, &coop).await?;
                let quorum = domain.quorum_percent.unwrap_or(record.settings.quorum_percent);
                let rule = Rule::parse(&proposal.rule).map_err(Error::from)?;
                let outcome = decide(&rule, quorum, domain.members.len() as u64, &result);
                if outcome == Outcome::Approved {
                    execute(tx, &record, &proposal, now).await?;
                }
                proposal.status = "closed".into();
                proposal.closed_at = Some(now);
                proposal.outcome = Some(outcome.as_str().to_owned());
                proposal.tally = Some((result.for_, result.against, result.abstain));
                match super::keys::coop_signer(tx, keys.as_ref(), &coop, now).await? {
                    Ok(signer) => {
                        let receipt =
                            sign_receipt(signer.as_ref(), &proposal.id, &proposal.domain_id, outcome, &result, now);
                        let body = serde_json::to_value(&receipt).map_err(|e| Error::Internal(e.to_string()))?;
                        tx.insert_receipt(&coop, &proposal.id, now, &body).await?;
                    }
                    Err(reason) => proposal.receipt_unavailable = Some(reason.to_owned()),
                }
                tx.update_proposal(&proposal).await?;
                let mut data = proposal_event(&proposal);
                data["outcome"] = json!(outcome.as_str());
                data["tally"] = json!({ "for": result.for_, "against": result.against, "abstain": result.abstain });
                emit(tx, &coop, CoopEventType::GovernanceProposalClosed, now, data).await?;
                let note = Note {
                    kind: "proposal_closed",
                    title: format!("Proposal closed: {}", proposal.title),
                    body: format!("The proposal '{}' closed: {}.", proposal.title, outcome.as_str()),
                    data: json!({ "proposal_id": proposal.id, "outcome": outcome.as_str() }),
                };
                notify_all(tx, &domain.members, &coop, note, now).await?;
                Ok(proposal)
            })
        })
        .await?;
        spawn_expansion(self.transactor.clone());
        metrics::counter!("icn_gateway_governance_proposals_closed_total", "outcome" => closed.outcome.clone().unwrap_or_default())
            .increment(1);
        if closed.outcome.as_deref() == Some("Approved")
            && closed.payload.get("type").and_then(Value::as_str) == Some("signing_key_rotation")
        {
            self.rotate_key(&closed.coop_id).await?;
        }
        Ok(closed)
    }

    /// Moves `coop`, and only it, to its next key generation: its current key is retired (and
    /// stays listed), and its next key is recorded at once when the master is unlocked (else at
    /// its first use). Neither the master secret nor any other coop's key changes.
    async fn rotate_key(&self, coop: &CoopId) -> Result<(), Error> {
        let (coop, keys, now) = (coop.clone(), self.keys.clone(), self.clock.now_unix_secs());
        transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                let generation = tx.bump_receipt_key_generation(&coop, now).await?;
                let activated = super::keys::coop_signer(tx, keys.as_ref(), &coop, now).await?;
                tracing::info!(coop = %coop, generation, signing = activated.is_ok(), "receipt key rotated");
                Ok(())
            })
        })
        .await
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
        if proposal.status != "closed" {
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
                require_coop(tx, &record.coop_id).await?;
                tx.insert_delegation(&record).await?;
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
        transaction(self.transactor.as_ref(), move |tx| {
            Box::pin(async move {
                if tx.delete_delegation(&coop, &delegator, &id).await? {
                    Ok(())
                } else {
                    Err(Error::not_found("delegation", id))
                }
            })
        })
        .await
    }

    /// Closes every open proposal whose voting time has ended; returns how many.
    pub async fn sweep(&self) -> Result<usize, Error> {
        let due = self.reads.expired_proposals(self.clock.now_unix_secs()).await?;
        let mut closed = 0;
        for (coop, id) in due {
            match self.close(&coop, None, &id).await {
                Ok(_) => closed += 1,
                Err(Error::Conflict { .. }) => {}
                Err(err) => return Err(err),
            }
        }
        Ok(closed)
    }
}

async fn open_in(tx: &mut dyn Tx, proposal: &mut ProposalRecord, domain: &DomainRecord, now: u64) -> Result<(), Error> {
    proposal.status = "open".into();
    proposal.opened_at = Some(now);
    proposal.closes_at = Some(now + proposal.voting_duration_secs);
    tx.update_proposal(proposal).await?;
    emit(tx, &proposal.coop_id, CoopEventType::GovernanceProposalOpened, now, proposal_event(proposal)).await?;
    let note = Note {
        kind: "proposal_opened",
        title: format!("New proposal: {}", proposal.title),
        body: format!(
            "A proposal in domain '{}' is open for voting until {}.",
            domain.domain_id,
            now + proposal.voting_duration_secs
        ),
        data: json!({ "proposal_id": proposal.id, "domain_id": domain.domain_id }),
    };
    notify_all(tx, &domain.members, &proposal.coop_id, note, now).await?;
    Ok(())
}

async fn current_tally(
    tx: &mut dyn Tx,
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

/// Executes an approved proposal's payload inside the close's transaction.
async fn execute(
    tx: &mut dyn Tx,
    coop: &crate::ports::CoopRecord,
    proposal: &ProposalRecord,
    now: u64,
) -> Result<(), Error> {
    let payload = &proposal.payload;
    let text = |key: &str| payload.get(key).and_then(Value::as_str);
    match text("type") {
        Some("membership") => {
            let did = Did::parse(text("did").unwrap_or_default())
                .map_err(|e| Error::Internal(format!("stored payload: {e}")))?;
            let existing = tx.member(&coop.id, &did).await?;
            match (text("action"), existing) {
                (Some("add"), None) => {
                    let role = text("role").and_then(Role::parse).unwrap_or(Role::Member);
                    let member =
                        crate::ports::MemberRecord { did: did.clone(), role, joined_at: now, credit_limit: None };
                    tx.insert_member(&coop.id, &member).await?;
                    emit(
                        tx,
                        &coop.id,
                        CoopEventType::MemberAdded,
                        now,
                        json!({ "did": did.as_str(), "role": role.as_str(), "joined_at": now, "credit_limit": null }),
                    )
                    .await?;
                }
                (Some("remove"), Some(member)) => {
                    if member.role == Role::Admin && tx.count_admins(&coop.id).await? <= 1 {
                        return Err(Error::conflict("the approved proposal would remove the last admin"));
                    }
                    tx.delete_member(&coop.id, &did).await?;
                    emit(tx, &coop.id, CoopEventType::MemberRemoved, now, json!({ "did": did.as_str() })).await?;
                }
                // Already a member / not a member: the approved change already holds.
                _ => {}
            }
        }
        Some("settings") => {
            let mut settings = coop.settings.clone();
            let changes = payload.get("settings").and_then(Value::as_object).cloned().unwrap_or_default();
            for (key, value) in changes {
                let amount =
                    || Amount::parse_decimal(&value.to_string()).map_err(|e| Error::bad_request(format!("{key}: {e}")));
                match key.as_str() {
                    "default_currency" => {
                        settings.default_currency =
                            Currency::parse(value.as_str().unwrap_or_default()).map_err(Error::bad_request)?
                    }
                    "credit_limit" => settings.credit_limit = amount()?,
                    "high_value_threshold" => settings.high_value_threshold = amount()?,
                    "quorum_percent" => {
                        settings.quorum_percent =
                            value.as_u64().and_then(|v| u32::try_from(v).ok()).unwrap_or(settings.quorum_percent)
                    }
                    _ => {}
                }
            }
            tx.update_settings(&coop.id, &settings).await?;
            emit(tx, &coop.id, CoopEventType::SettingsUpdated, now, crate::coops::settings_json(&settings)).await?;
        }
        Some("budget") => {
            let to = text("to").unwrap_or_default().to_owned();
            let amount = payload.get("amount").map(Value::to_string).unwrap_or_default();
            let amount = Amount::parse_payment(&amount).map_err(|e| Error::Internal(format!("stored payload: {e}")))?;
            let currency = match text("currency") {
                Some(c) => Currency::parse(c).map_err(|e| Error::Internal(format!("stored payload: {e}")))?,
                None => coop.settings.default_currency.clone(),
            };
            let payee = Did::parse(&to).map_err(|e| Error::Internal(format!("stored payload: {e}")))?;
            if tx.member(&coop.id, &payee).await?.is_none() {
                return Err(Error::conflict(format!("the budget's recipient {payee} is no longer a member")));
            }
            let treasury = treasury_account(&coop.id);
            transfer(tx, &coop.id, &treasury, &to, amount, &currency, None).await?;
            let record = TransactionRecord {
                id: new_id(),
                coop_id: coop.id.clone(),
                kind: TransactionKind::Payment,
                from: treasury,
                to,
                amount,
                currency,
                memo: Some(format!("budget: proposal {}", proposal.id)),
                timestamp: now,
                conversion: None,
            };
            record_transaction(tx, &record, Some(&payee)).await?;
        }
        // Text: nothing to execute. Key rotation: done by the service after the commit, since
        // the new key must not sign before the decision that introduced it is durable.
        _ => {}
    }
    Ok(())
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
}
