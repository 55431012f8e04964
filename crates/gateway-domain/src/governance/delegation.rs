//! Delegations: who lets whom vote for them, on what, and until when.
//!
//! This module holds the scope grammar and the per-delegator precedence rule (which of one
//! member's delegations applies to a given proposal). Following chains from delegate to
//! delegate, membership checks and counting are the tally's job ([`super::tally()`]); storing,
//! creating and revoking delegations is the caller's.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::ParseError;

/// What a delegation covers.
///
/// Serialises as its text form (`blanket`, `domain:<id>`, `proposal:<id>`) so that stored and
/// transmitted scopes read the same as what clients send.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum DelegationScope {
    /// Every proposal of every domain.
    Blanket,
    /// Every proposal of one governance domain.
    Domain(String),
    /// One proposal.
    Proposal(String),
}

impl DelegationScope {
    /// Parses `blanket`, `domain:<domain_id>` or `proposal:<proposal_id>`. The keywords are
    /// lowercase and the identifier is taken verbatim after the first colon; an empty
    /// identifier is refused because it could never match a real domain or proposal and would
    /// silently delegate nothing.
    pub fn parse(text: &str) -> Result<Self, ParseError> {
        if text == "blanket" {
            return Ok(DelegationScope::Blanket);
        }
        let (kind, id) = text.split_once(':').ok_or_else(|| ParseError::Scope(text.to_owned()))?;
        let make = match kind {
            "domain" => DelegationScope::Domain,
            "proposal" => DelegationScope::Proposal,
            _ => return Err(ParseError::Scope(text.to_owned())),
        };
        if id.is_empty() {
            return Err(ParseError::EmptyScopeId(text.to_owned()));
        }
        Ok(make(id.to_owned()))
    }

    /// How specific the scope is: proposal (2) > domain (1) > blanket (0). The most specific
    /// applicable delegation of a member is the one that counts, because a member who bothered
    /// to name a proposal or a domain meant to override their general choice of delegate.
    pub fn specificity(&self) -> u8 {
        match self {
            DelegationScope::Blanket => 0,
            DelegationScope::Domain(_) => 1,
            DelegationScope::Proposal(_) => 2,
        }
    }

    /// Whether the scope covers proposal `proposal_id` of domain `domain_id`.
    pub fn covers(&self, domain_id: &str, proposal_id: &str) -> bool {
        match self {
            DelegationScope::Blanket => true,
            DelegationScope::Domain(d) => d == domain_id,
            DelegationScope::Proposal(p) => p == proposal_id,
        }
    }
}

impl fmt::Display for DelegationScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DelegationScope::Blanket => f.write_str("blanket"),
            DelegationScope::Domain(id) => write!(f, "domain:{id}"),
            DelegationScope::Proposal(id) => write!(f, "proposal:{id}"),
        }
    }
}

impl FromStr for DelegationScope {
    type Err = ParseError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        DelegationScope::parse(text)
    }
}

impl From<DelegationScope> for String {
    fn from(scope: DelegationScope) -> Self {
        scope.to_string()
    }
}

impl TryFrom<String> for DelegationScope {
    type Error = ParseError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        DelegationScope::parse(&text)
    }
}

/// One member's delegation of their vote to another DID.
///
/// DIDs are plain strings here: they were validated when the delegation was created, and the
/// tally compares them byte for byte with the member list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delegation {
    /// The delegation's identifier, the last tie-breaker between equally specific delegations.
    pub id: String,
    /// The DID whose vote is delegated.
    pub delegator: String,
    /// The DID who votes on the delegator's behalf.
    pub delegate: String,
    /// Which proposals the delegation covers.
    pub scope: DelegationScope,
    /// Unix seconds after which the delegation no longer applies; `None` never expires.
    pub expires_at: Option<u64>,
    /// Unix seconds of creation, the first tie-breaker.
    pub created_at: u64,
}

impl Delegation {
    /// Whether this delegation takes part in the tally of proposal `proposal_id` of domain
    /// `domain_id` at time `now`: its scope covers the proposal, it has not expired
    /// (`expires_at` is `None` or strictly after `now`), and it is not a self-delegation,
    /// which is ignored as if it did not exist (so a less specific delegation of the same
    /// member still applies). `created_at` is not compared with `now`: the caller passes the
    /// delegations that exist at the tally, and creation time only breaks ties.
    pub fn applies_to(&self, domain_id: &str, proposal_id: &str, now: u64) -> bool {
        self.delegator != self.delegate
            && self.expires_at.is_none_or(|at| at > now)
            && self.scope.covers(domain_id, proposal_id)
    }

    /// Orders two applicable delegations of the same delegator by precedence; the greater one
    /// wins. More specific scope first; among equally specific ones the latest `created_at`
    /// (the member's most recent intent), then the greatest `id` (byte order), so the choice is
    /// deterministic whatever order the store returns them in.
    pub fn precedence_cmp(&self, other: &Delegation) -> Ordering {
        self.scope
            .specificity()
            .cmp(&other.scope.specificity())
            .then(self.created_at.cmp(&other.created_at))
            .then_with(|| self.id.cmp(&other.id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delegation(id: &str, scope: &str, created_at: u64, expires_at: Option<u64>) -> Delegation {
        Delegation {
            id: id.into(),
            delegator: "did:key:a".into(),
            delegate: "did:key:b".into(),
            scope: DelegationScope::parse(scope).unwrap(),
            expires_at,
            created_at,
        }
    }

    #[test]
    fn scopes_parse_and_display_round_trip() {
        for text in ["blanket", "domain:budget", "proposal:p-1", "domain:a:b"] {
            let scope = DelegationScope::parse(text).unwrap();
            assert_eq!(scope.to_string(), text);
            assert_eq!(text.parse::<DelegationScope>().unwrap(), scope);
        }
        assert_eq!(DelegationScope::parse("domain:a:b").unwrap(), DelegationScope::Domain("a:b".into()));
    }

    #[test]
    fn bad_scopes_are_refused() {
        for text in ["", "Blanket", "all", "domain", "coop:x", "blanket:x"] {
            assert_eq!(DelegationScope::parse(text), Err(ParseError::Scope(text.into())), "{text:?}");
        }
        for text in ["domain:", "proposal:"] {
            assert_eq!(DelegationScope::parse(text), Err(ParseError::EmptyScopeId(text.into())));
        }
    }

    #[test]
    fn scopes_serialise_as_their_text() {
        let scope = DelegationScope::Proposal("p".into());
        assert_eq!(serde_json::to_string(&scope).unwrap(), "\"proposal:p\"");
        let back: DelegationScope = serde_json::from_str("\"domain:d\"").unwrap();
        assert_eq!(back, DelegationScope::Domain("d".into()));
        assert!(serde_json::from_str::<DelegationScope>("\"domain:\"").is_err());
    }

    #[test]
    fn scope_coverage_and_specificity() {
        let blanket = DelegationScope::Blanket;
        let domain = DelegationScope::Domain("d".into());
        let proposal = DelegationScope::Proposal("p".into());
        assert!(blanket.covers("d", "p") && blanket.covers("x", "y"));
        assert!(domain.covers("d", "p") && !domain.covers("x", "p"));
        assert!(proposal.covers("d", "p") && !proposal.covers("d", "q"));
        assert!(proposal.specificity() > domain.specificity());
        assert!(domain.specificity() > blanket.specificity());
    }

    #[test]
    fn expiry_is_exclusive_of_now() {
        assert!(delegation("1", "blanket", 0, None).applies_to("d", "p", 100));
        assert!(delegation("1", "blanket", 0, Some(101)).applies_to("d", "p", 100));
        assert!(!delegation("1", "blanket", 0, Some(100)).applies_to("d", "p", 100));
        assert!(!delegation("1", "blanket", 0, Some(5)).applies_to("d", "p", 100));
    }

    #[test]
    fn self_delegation_never_applies() {
        let mut own = delegation("1", "blanket", 0, None);
        own.delegate = own.delegator.clone();
        assert!(!own.applies_to("d", "p", 0));
    }

    #[test]
    fn precedence_is_specificity_then_creation_then_id() {
        let blanket_new = delegation("z", "blanket", 9, None);
        let domain_old = delegation("a", "domain:d", 1, None);
        let proposal_old = delegation("a", "proposal:p", 0, None);
        assert_eq!(domain_old.precedence_cmp(&blanket_new), Ordering::Greater);
        assert_eq!(proposal_old.precedence_cmp(&domain_old), Ordering::Greater);
        let domain_new = delegation("a", "domain:d", 2, None);
        assert_eq!(domain_new.precedence_cmp(&domain_old), Ordering::Greater);
        let domain_old_b = delegation("b", "domain:d", 1, None);
        assert_eq!(domain_old_b.precedence_cmp(&domain_old), Ordering::Greater);
    }
}
