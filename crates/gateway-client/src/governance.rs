//! Governance routes: domains, proposals (create, list, get, open, vote, votes, close, proof),
//! delegations and the public signing-key list. Everything lives in the token's coop.
//!
//! The receipt is returned as data; verifying it (JCS, SHA-256, Ed25519, key validity) is
//! deliberately left to `gateway_domain::governance::verify_receipt`, which `gatewayctl` uses,
//! so that the SDK does not carry a second copy of the canonical form.

use reqwest::Method;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::client::{Call, Client};
use crate::common::{PageRequest, Pagination};
use crate::error::Result;

/// Creating a governance domain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NewDomain {
    /// Id within the coop (`[A-Za-z0-9_-]`, at most 64).
    pub domain_id: String,
    /// Display name.
    pub name: String,
    /// Who may vote (members of the coop).
    pub members: Vec<String>,
    /// Quorum override, percent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quorum_percent: Option<u32>,
    /// Default rule: `majority`, `supermajority:<pct>` or `unanimous`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

/// A governance domain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Domain {
    /// Id.
    pub domain_id: String,
    /// Name.
    pub name: String,
    /// Voters.
    pub members: Vec<String>,
    /// Quorum override.
    #[serde(default)]
    pub quorum_percent: Option<u32>,
    /// Default rule.
    #[serde(default)]
    pub rule: Option<String>,
    /// Unix seconds.
    #[serde(default)]
    pub created_at: u64,
}

/// The coop's domains.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DomainPage {
    /// The domains.
    pub domains: Vec<Domain>,
    /// Where the page sits.
    pub pagination: Pagination,
}

/// Creating a proposal (the /v1 family creates a draft; see [`Client::open_proposal`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NewProposal {
    /// The domain.
    pub domain_id: String,
    /// Title.
    pub title: String,
    /// Description (also the content of a text proposal without payload).
    pub description: String,
    /// Tagged payload: `{"type": "text"|"membership"|"settings"|"budget"|"signing_key_rotation", …}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload: Option<Value>,
    /// SDK-style label of a text proposal (e.g. `budget`), used when there is no payload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Decision rule overriding the domain's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule_ccl: Option<String>,
    /// Voting time, seconds (default 604800).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub voting_duration_secs: Option<u64>,
}

impl NewProposal {
    /// A text proposal in `domain_id` with the gateway's defaults.
    pub fn text(domain_id: &str, title: &str, description: &str) -> Self {
        Self {
            domain_id: domain_id.to_owned(),
            title: title.to_owned(),
            description: description.to_owned(),
            payload: None,
            kind: None,
            rule_ccl: None,
            voting_duration_secs: None,
        }
    }
}

/// Weighted counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TallyCounts {
    /// For.
    #[serde(rename = "for")]
    pub for_: u64,
    /// Against.
    pub against: u64,
    /// Abstain.
    pub abstain: u64,
}

/// A proposal record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    /// Id (the same as `proposal_id`).
    pub id: String,
    /// Id.
    pub proposal_id: String,
    /// Domain.
    pub domain_id: String,
    /// Title.
    pub title: String,
    /// Description.
    pub description: String,
    /// Tagged payload.
    pub payload: Value,
    /// Decision rule.
    pub rule: String,
    /// Author DID.
    pub author: String,
    /// `draft`, `open` or `closed`.
    pub status: String,
    /// Voting time, seconds.
    #[serde(default)]
    pub voting_duration_secs: u64,
    /// Unix seconds.
    pub created_at: u64,
    /// When it opened.
    #[serde(default)]
    pub opened_at: Option<u64>,
    /// When voting ends.
    #[serde(default)]
    pub closes_at: Option<u64>,
    /// When it closed.
    #[serde(default)]
    pub closed_at: Option<u64>,
    /// `Approved`, `Rejected` or `NoQuorum`, once closed.
    #[serde(default)]
    pub outcome: Option<String>,
    /// SDK-style flag: the outcome is `Approved`.
    #[serde(default)]
    pub accepted: Option<bool>,
    /// Counts, once closed.
    #[serde(default)]
    pub tally: Option<TallyCounts>,
}

/// Proposal list filters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProposalQuery {
    /// Only this domain.
    pub domain: Option<String>,
    /// `draft`, `open`, `closed` or `active` (= open).
    pub status: Option<String>,
    /// Which page.
    pub page: PageRequest,
}

/// A page of proposals, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProposalPage {
    /// The proposals.
    pub proposals: Vec<Proposal>,
    /// Where the page sits.
    pub pagination: Pagination,
}

/// A vote choice. The gateway also accepts `approve`/`yes` and `reject`/`no`, in any case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VoteChoice {
    /// For.
    For,
    /// Against.
    Against,
    /// Counts for the quorum only.
    Abstain,
}

impl VoteChoice {
    /// Parses the spellings the gateway accepts.
    pub fn parse(text: &str) -> Option<Self> {
        match text.to_ascii_lowercase().as_str() {
            "for" | "approve" | "yes" => Some(Self::For),
            "against" | "reject" | "no" => Some(Self::Against),
            "abstain" => Some(Self::Abstain),
            _ => None,
        }
    }

    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::For => "for",
            Self::Against => "against",
            Self::Abstain => "abstain",
        }
    }
}

/// A recorded vote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VoteResult {
    /// The proposal.
    pub proposal_id: String,
    /// The voter.
    pub voter: String,
    /// `For`, `Against` or `Abstain`.
    pub choice: String,
    /// Whether an earlier vote of the voter was replaced.
    pub replaced: bool,
}

/// One effective vote (delegations applied).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectiveVote {
    /// The direct voter.
    pub voter: String,
    /// `For`, `Against` or `Abstain`.
    pub choice: String,
    /// 1 plus the votes delegated to the voter.
    pub weight: u64,
    /// The signature of the request that cast the vote, when it was signed: evidence anyone can
    /// check offline (`gateway_httpsig::verify_evidence`, `gatewayctl verify-request`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_signature: Option<gateway_core::RequestSignature>,
}

/// The effective tally of a proposal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Votes {
    /// Weighted for.
    pub votes_for: u64,
    /// Weighted against.
    pub votes_against: u64,
    /// Weighted abstentions.
    pub votes_abstain: u64,
    /// One entry per direct voter.
    pub voters: Vec<EffectiveVote>,
}

/// A signed decision receipt, as the gateway serves it (see `docs/RECEIPTS.md`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    /// `0x` + hex SHA-256 of the canonical decision.
    pub decision_hash: String,
    /// The proposal.
    pub proposal_id: String,
    /// Its domain.
    pub domain_id: String,
    /// `Approved`, `Rejected` or `NoQuorum`.
    pub outcome: String,
    /// Weighted counts.
    pub tally: TallyCounts,
    /// `0x` + hex SHA-256 of the effective votes.
    pub votes_hash: String,
    /// Unix seconds of the decision.
    pub timestamp: u64,
    /// The `did:key` of `public_key`.
    pub signer: String,
    /// The signing key, hex.
    pub public_key: String,
    /// Ed25519 over the 32 digest bytes, hex.
    pub signature: String,
}

/// Creating a delegation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NewDelegation {
    /// The delegate's DID.
    pub delegate: String,
    /// `blanket`, `domain:<domain_id>` or `proposal:<proposal_id>`.
    pub scope: String,
    /// Unix seconds, exclusive.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
}

/// A delegation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delegation {
    /// Id.
    pub id: String,
    /// Who delegates.
    pub delegator: String,
    /// To whom.
    pub delegate: String,
    /// `blanket`, `domain:<id>` or `proposal:<id>`.
    pub scope: String,
    /// Unix seconds, exclusive.
    #[serde(default)]
    pub expires_at: Option<u64>,
    /// Unix seconds.
    pub created_at: u64,
}

/// The caller's delegations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delegations {
    /// Given by the caller.
    pub given: Vec<Delegation>,
    /// Received by the caller.
    pub received: Vec<Delegation>,
}

/// A receipt signing key of the caller's coop with its validity interval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SigningKey {
    /// The key, hex.
    pub public_key: String,
    /// Its `did:key`.
    pub did: String,
    /// Valid from (inclusive), Unix seconds.
    pub valid_from: u64,
    /// Retired at (exclusive), Unix seconds; `None` for the current key.
    #[serde(default)]
    pub valid_until: Option<u64>,
    /// Whether it is the current key.
    #[serde(default)]
    pub current: bool,
    /// The coop's key generation it was derived for (`None` for the gateway-wide key of before
    /// per-coop keys).
    #[serde(default)]
    pub generation: Option<u32>,
    /// The number of the gateway's master secret it was derived from (`None` likewise).
    #[serde(default)]
    pub master: Option<u32>,
}

impl SigningKey {
    /// Whether the key was the gateway's at `timestamp`: activated at or before it and not
    /// yet retired at it.
    pub fn valid_at(&self, timestamp: u64) -> bool {
        self.valid_from <= timestamp && self.valid_until.is_none_or(|until| timestamp < until)
    }
}

/// `GET /v1/gov/signing-keys`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SigningKeys {
    /// Oldest first.
    pub keys: Vec<SigningKey>,
}

impl Client {
    /// `POST /v1/gov/domains`.
    pub async fn create_domain(&self, domain: &NewDomain) -> Result<Domain> {
        self.call_json(Call::new(Method::POST, &["v1", "gov", "domains"]).json(domain)?).await
    }

    /// `GET /v1/gov/domains`.
    pub async fn domains(&self) -> Result<DomainPage> {
        self.call_json(Call::new(Method::GET, &["v1", "gov", "domains"])).await
    }

    /// `GET /v1/gov/domains/{id}`.
    pub async fn domain(&self, domain_id: &str) -> Result<Domain> {
        self.call_json(Call::new(Method::GET, &["v1", "gov", "domains", domain_id])).await
    }

    /// `POST /v1/gov/proposals`: a draft (trust ≥ 0.4).
    pub async fn create_proposal(&self, proposal: &NewProposal) -> Result<Proposal> {
        self.call_json(Call::new(Method::POST, &["v1", "gov", "proposals"]).json(proposal)?).await
    }

    /// `POST /governance/proposals` (short family): creates and opens at once.
    pub async fn create_and_open_proposal(&self, proposal: &NewProposal) -> Result<Proposal> {
        self.call_json(Call::new(Method::POST, &["governance", "proposals"]).json(proposal)?).await
    }

    /// `GET /v1/gov/proposals`.
    pub async fn proposals(&self, query: &ProposalQuery) -> Result<ProposalPage> {
        let call = Call::new(Method::GET, &["v1", "gov", "proposals"])
            .query("domain", query.domain.as_deref())
            .query("status", query.status.as_deref())
            .query("limit", query.page.limit)
            .query("offset", query.page.offset);
        self.call_json(call).await
    }

    /// `GET /v1/gov/proposals/{id}`.
    pub async fn proposal(&self, id: &str) -> Result<Proposal> {
        self.call_json(Call::new(Method::GET, &["v1", "gov", "proposals", id])).await
    }

    /// `POST /v1/gov/proposals/{id}/open` (author or domain member).
    pub async fn open_proposal(&self, id: &str) -> Result<Proposal> {
        self.call_json(Call::new(Method::POST, &["v1", "gov", "proposals", id, "open"])).await
    }

    /// `POST /v1/gov/proposals/{id}/vote`; a later vote replaces an earlier one while open.
    pub async fn vote(&self, id: &str, choice: VoteChoice) -> Result<VoteResult> {
        let call = Call::new(Method::POST, &["v1", "gov", "proposals", id, "vote"])
            .json(&serde_json::json!({ "choice": choice.as_str() }))?;
        self.call_json(call).await
    }

    /// `GET /v1/gov/proposals/{id}/votes`: the effective tally.
    pub async fn votes(&self, id: &str) -> Result<Votes> {
        self.call_json(Call::new(Method::GET, &["v1", "gov", "proposals", id, "votes"])).await
    }

    /// `POST /v1/gov/proposals/{id}/close`: tallies, applies an approved payload, signs a
    /// receipt when the gateway's key is unlocked.
    pub async fn close_proposal(&self, id: &str) -> Result<Proposal> {
        self.call_json(Call::new(Method::POST, &["v1", "gov", "proposals", id, "close"])).await
    }

    /// `GET /v1/gov/proposals/{id}/proof`: the signed receipt (404 `RECEIPT_UNAVAILABLE` with
    /// a reason when there is none).
    pub async fn proof(&self, id: &str) -> Result<Receipt> {
        self.call_json(Call::new(Method::GET, &["v1", "gov", "proposals", id, "proof"])).await
    }

    /// `POST /v1/gov/delegations`.
    pub async fn delegate(&self, delegation: &NewDelegation) -> Result<Delegation> {
        self.call_json(Call::new(Method::POST, &["v1", "gov", "delegations"]).json(delegation)?).await
    }

    /// `GET /v1/gov/delegations`.
    pub async fn delegations(&self) -> Result<Delegations> {
        self.call_json(Call::new(Method::GET, &["v1", "gov", "delegations"])).await
    }

    /// `DELETE /v1/gov/delegations/{id}` (the delegator only; others get 404).
    pub async fn revoke_delegation(&self, id: &str) -> Result<()> {
        self.call_empty(Call::new(Method::DELETE, &["v1", "gov", "delegations", id])).await
    }

    /// `GET /v1/gov/signing-keys` (any token of the coop): the coop's receipt keys, current and
    /// retired, with their validity.
    pub async fn signing_keys(&self) -> Result<SigningKeys> {
        self.call_json(Call::new(Method::GET, &["v1", "gov", "signing-keys"])).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vote_choices_accept_every_spelling() {
        for (text, choice) in [
            ("For", VoteChoice::For),
            ("approve", VoteChoice::For),
            ("YES", VoteChoice::For),
            ("reject", VoteChoice::Against),
            ("no", VoteChoice::Against),
            ("Abstain", VoteChoice::Abstain),
        ] {
            assert_eq!(VoteChoice::parse(text), Some(choice), "{text}");
        }
        assert_eq!(VoteChoice::parse("maybe"), None);
    }

    #[test]
    fn key_validity_is_inclusive_from_and_exclusive_until() {
        let key = SigningKey {
            public_key: String::new(),
            did: String::new(),
            valid_from: 100,
            valid_until: Some(200),
            current: false,
            generation: Some(0),
            master: Some(0),
        };
        assert!(!key.valid_at(99));
        assert!(key.valid_at(100));
        assert!(key.valid_at(199));
        assert!(!key.valid_at(200));
        assert!(SigningKey { valid_until: None, ..key }.valid_at(u64::MAX));
    }

    #[test]
    fn receipts_round_trip_the_contract_shape() {
        let text = r#"{"decision_hash":"0xbcaf","proposal_id":"prop-7","domain_id":"budget","outcome":"Approved","tally":{"for":4,"against":1,"abstain":0},"votes_hash":"0xa614","timestamp":1735689600,"signer":"did:key:z6Mk","public_key":"8a88","signature":"be0d"}"#;
        let receipt: Receipt = serde_json::from_str(text).unwrap();
        assert_eq!(receipt.tally, TallyCounts { for_: 4, against: 1, abstain: 0 });
        assert_eq!(serde_json::to_value(&receipt).unwrap(), serde_json::from_str::<serde_json::Value>(text).unwrap());
    }
}
