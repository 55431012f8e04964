//! Governance's ports: domains, proposals, votes, delegations, receipts and signing keys.

use std::fmt;

use async_trait::async_trait;
use gateway_core::{CoopId, Did, Error, PageRequest};
use serde_json::Value;

use crate::governance::{Effect, Outcome, ProposalPayload, ProposalStatus};

/// A governance domain.
#[derive(Debug, Clone, PartialEq)]
pub struct DomainRecord {
    /// Cooperative.
    pub coop_id: CoopId,
    /// Id within the coop.
    pub domain_id: String,
    /// Display name.
    pub name: String,
    /// Who may vote.
    pub members: Vec<Did>,
    /// Quorum override (else the coop's setting).
    pub quorum_percent: Option<u32>,
    /// Default rule of its proposals (`majority` when absent).
    pub rule: Option<String>,
    /// Unix seconds.
    pub created_at: u64,
}

/// A proposal as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct ProposalRecord {
    /// Id.
    pub id: String,
    /// Cooperative.
    pub coop_id: CoopId,
    /// Domain.
    pub domain_id: String,
    /// Title.
    pub title: String,
    /// Description.
    pub description: String,
    /// What it changes when approved.
    pub payload: ProposalPayload,
    /// Decision rule.
    pub rule: String,
    /// Author.
    pub author: Did,
    /// Where it is in its life.
    pub status: ProposalStatus,
    /// Seconds of voting once opened.
    pub voting_duration_secs: u64,
    /// Unix seconds.
    pub created_at: u64,
    /// When opened.
    pub opened_at: Option<u64>,
    /// When voting ends.
    pub closes_at: Option<u64>,
    /// When closed.
    pub closed_at: Option<u64>,
    /// The outcome, once closed.
    pub outcome: Option<Outcome>,
    /// `(for, against, abstain)`, once closed.
    pub tally: Option<(u64, u64, u64)>,
    /// Why no receipt was stored at close, if none was.
    pub receipt_unavailable: Option<String>,
    /// What closing it did to the coop: set when an approved proposal with an effect closed.
    pub effect: Option<Effect>,
}

/// A delegation as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct DelegationRecord {
    /// Id.
    pub id: String,
    /// Cooperative.
    pub coop_id: CoopId,
    /// Who delegates.
    pub delegator: Did,
    /// To whom.
    pub delegate: Did,
    /// `blanket`, `domain:<id>` or `proposal:<id>`.
    pub scope: String,
    /// Unix seconds, exclusive.
    pub expires_at: Option<u64>,
    /// Unix seconds.
    pub created_at: u64,
}

/// A receipt signing key, current or retired.
///
/// Each coop signs with its own key, derived from the keystore's master secret number `master`
/// at the coop's key generation `generation` (`governance::derive_receipt_key`). Rows from
/// before per-coop keys (one key for the whole gateway) have no coop, master or generation:
/// they are listed to every coop, since they signed every coop's receipts.
#[derive(Debug, Clone, PartialEq)]
pub struct SigningKeyRecord {
    /// 32-byte Ed25519 key, hex.
    pub public_key: String,
    /// Its `did:key`.
    pub did: String,
    /// Unix seconds, inclusive.
    pub valid_from: u64,
    /// Unix seconds, exclusive; `None` for the current key.
    pub valid_until: Option<u64>,
    /// The coop whose key it is; `None` for the gateway-wide key of before per-coop keys.
    pub coop_id: Option<CoopId>,
    /// The number of the keystore master secret it was derived from.
    pub master: Option<u32>,
    /// The coop's key generation it was derived for.
    pub generation: Option<u32>,
}

/// Governance writes (and reads that must see the transaction).
#[async_trait]
pub trait GovTx: Send {
    /// A domain of the coop.
    async fn domain(&mut self, coop: &CoopId, domain_id: &str) -> Result<Option<DomainRecord>, Error>;
    /// Creates a domain.
    async fn insert_domain(&mut self, domain: &DomainRecord) -> Result<(), Error>;
    /// Every domain of the coop, as stored (the coop domain's members are not stored).
    async fn domains(&mut self, coop: &CoopId) -> Result<Vec<DomainRecord>, Error>;
    /// Replaces a domain's name, members, quorum and rule.
    async fn update_domain(&mut self, domain: &DomainRecord) -> Result<(), Error>;
    /// A proposal of the coop.
    async fn proposal(&mut self, coop: &CoopId, id: &str) -> Result<Option<ProposalRecord>, Error>;
    /// A proposal of the coop, holding its row until the transaction ends (`FOR UPDATE` on
    /// PostgreSQL; a plain read under SQLite's single writer), so that concurrent opens, votes
    /// and closes of one proposal decide on its latest status one after the other.
    async fn lock_proposal(&mut self, coop: &CoopId, id: &str) -> Result<Option<ProposalRecord>, Error>;
    /// Creates a proposal.
    async fn insert_proposal(&mut self, proposal: &ProposalRecord) -> Result<(), Error>;
    /// When each proposal `author` created in the coop at or after `since` (Unix seconds) was
    /// created: the per-author creation bound's window.
    async fn proposal_times_by_author(&mut self, coop: &CoopId, author: &Did, since: u64) -> Result<Vec<u64>, Error>;
    /// Replaces a proposal's mutable fields (status, times, outcome, tally, effect, and the rule
    /// that decided it).
    async fn update_proposal(&mut self, proposal: &ProposalRecord) -> Result<(), Error>;
    /// Sets a voter's vote, with the signature of the request that cast it (or none, which
    /// clears an earlier one's); returns whether it replaced an earlier vote.
    async fn upsert_vote(
        &mut self,
        proposal_id: &str,
        voter: &Did,
        choice: &str,
        at: u64,
        signature: Option<&gateway_core::RequestSignature>,
    ) -> Result<bool, Error>;
    /// The request signatures of the current votes of a proposal that were cast signed.
    async fn vote_signatures(&mut self, proposal_id: &str)
    -> Result<Vec<(Did, gateway_core::RequestSignature)>, Error>;
    /// Every direct vote of a proposal: (voter, choice).
    async fn votes(&mut self, proposal_id: &str) -> Result<Vec<(Did, String)>, Error>;
    /// Creates a delegation.
    async fn insert_delegation(&mut self, delegation: &DelegationRecord) -> Result<(), Error>;
    /// Every delegation of the coop (revoked ones excluded).
    async fn delegations(&mut self, coop: &CoopId) -> Result<Vec<DelegationRecord>, Error>;
    /// Deletes a delegation of this delegator; returns whether it existed.
    async fn delete_delegation(&mut self, coop: &CoopId, delegator: &Did, id: &str) -> Result<bool, Error>;
    /// Deletes every delegation of the coop given or received by `did`; returns how many.
    async fn delete_delegations_involving(&mut self, coop: &CoopId, did: &Did) -> Result<u64, Error>;
    /// Stores a receipt (unique per proposal and per (timestamp, proposal)).
    async fn insert_receipt(
        &mut self,
        coop: &CoopId,
        proposal_id: &str,
        timestamp: u64,
        body: &Value,
    ) -> Result<(), Error>;
    /// The coop's receipt key generation (0 until its first rotation), holding it (a row lock
    /// where the backend has them) until the transaction ends, so that a concurrent rotation
    /// and a close of the same coop are serialised.
    async fn receipt_key_generation(&mut self, coop: &CoopId) -> Result<u32, Error>;
    /// Moves the coop to its next key generation and retires its current key (valid through
    /// the second `at`); returns the new generation.
    async fn bump_receipt_key_generation(&mut self, coop: &CoopId, at: u64) -> Result<u32, Error>;
    /// The coop's current signing key (`valid_until` unset), if one is recorded.
    async fn current_signing_key(&mut self, coop: &CoopId) -> Result<Option<SigningKeyRecord>, Error>;
    /// Records `key` (which names its coop) as the coop's current key from `key.valid_from`,
    /// retiring the coop's previous current key (valid through that second).
    async fn activate_signing_key(&mut self, key: &SigningKeyRecord) -> Result<(), Error>;
}

/// A proposal list query.
#[derive(Debug, Clone)]
pub struct ProposalQuery {
    /// Cooperative.
    pub coop: CoopId,
    /// Only this domain.
    pub domain: Option<String>,
    /// Only this status.
    pub status: Option<ProposalStatus>,
    /// Page.
    pub page: PageRequest,
}

/// Governance reads.
#[async_trait]
pub trait GovReads: Send + Sync + fmt::Debug {
    /// The DIDs of every member of the coop, in DID order (the coop domain's members).
    async fn member_dids(&self, coop: &CoopId) -> Result<Vec<Did>, Error>;
    /// Domains of a coop.
    async fn domains(&self, coop: &CoopId) -> Result<Vec<DomainRecord>, Error>;
    /// One proposal, read without queuing behind the writer.
    async fn proposal(&self, coop: &CoopId, id: &str) -> Result<Option<ProposalRecord>, Error>;
    /// A page of proposals (newest first) and the total.
    async fn proposals(&self, query: &ProposalQuery) -> Result<(Vec<ProposalRecord>, u64), Error>;
    /// All and open proposals of a coop.
    async fn proposal_counts(&self, coop: &CoopId) -> Result<(u64, u64), Error>;
    /// Open proposals whose voting time has ended: (coop, id).
    async fn expired_proposals(&self, now: u64) -> Result<Vec<(CoopId, String)>, Error>;
    /// A stored receipt.
    async fn receipt(&self, coop: &CoopId, proposal_id: &str) -> Result<Option<Value>, Error>;
    /// The coop's signing keys, current and retired (with the gateway-wide keys of before
    /// per-coop keys), oldest first.
    async fn signing_keys(&self, coop: &CoopId) -> Result<Vec<SigningKeyRecord>, Error>;
}
