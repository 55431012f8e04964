//! Scopes (`resource:action`) and cheap sets of them.
//!
//! The interface's eleven scopes plus `compute:execute` (the executor protocol's addition). A
//! [`ScopeSet`] is a bit set so that the check on every protected request is one AND.

use std::fmt;

/// One permission a token can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(into = "&'static str", try_from = "String")]
pub enum Scope {
    /// Balances and transaction history.
    LedgerRead,
    /// Create payments.
    LedgerWrite,
    /// View cooperatives and members.
    CoopRead,
    /// Modify settings, manage members.
    CoopWrite,
    /// View proposals, domains, votes.
    GovRead,
    /// Create proposals, cast votes.
    GovWrite,
    /// Query trust scores and edges.
    TrustRead,
    /// Create or revoke trust attestations.
    TrustWrite,
    /// Submit compute tasks.
    ComputeSubmit,
    /// Claim and complete compute tasks as an executor.
    ComputeExecute,
    /// Query exchange rates.
    OracleRead,
    /// Set manual exchange rates.
    OracleWrite,
}

impl Scope {
    /// Every scope, in a stable order.
    pub const ALL: [Scope; 12] = [
        Scope::LedgerRead,
        Scope::LedgerWrite,
        Scope::CoopRead,
        Scope::CoopWrite,
        Scope::GovRead,
        Scope::GovWrite,
        Scope::TrustRead,
        Scope::TrustWrite,
        Scope::ComputeSubmit,
        Scope::ComputeExecute,
        Scope::OracleRead,
        Scope::OracleWrite,
    ];

    /// The wire spelling, e.g. `ledger:read`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Scope::LedgerRead => "ledger:read",
            Scope::LedgerWrite => "ledger:write",
            Scope::CoopRead => "coop:read",
            Scope::CoopWrite => "coop:write",
            Scope::GovRead => "gov:read",
            Scope::GovWrite => "gov:write",
            Scope::TrustRead => "trust:read",
            Scope::TrustWrite => "trust:write",
            Scope::ComputeSubmit => "compute:submit",
            Scope::ComputeExecute => "compute:execute",
            Scope::OracleRead => "oracle:read",
            Scope::OracleWrite => "oracle:write",
        }
    }

    /// Parses the wire spelling; scopes are case-sensitive.
    pub fn parse(text: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|s| s.as_str() == text)
    }

    const fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of scopes as a bit set.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ScopeSet(u16);

impl ScopeSet {
    /// No scope at all (an identity-only token).
    pub const EMPTY: ScopeSet = ScopeSet(0);

    /// Every scope.
    pub const fn all() -> ScopeSet {
        let mut bits = 0;
        let mut i = 0;
        while i < Scope::ALL.len() {
            bits |= Scope::ALL[i].bit();
            i += 1;
        }
        ScopeSet(bits)
    }

    /// A set of the given scopes.
    pub fn of(scopes: &[Scope]) -> ScopeSet {
        scopes.iter().copied().collect()
    }

    /// Whether the set holds the scope.
    pub const fn contains(self, scope: Scope) -> bool {
        self.0 & scope.bit() != 0
    }

    /// Whether every scope of `other` is in this set.
    pub const fn contains_all(self, other: ScopeSet) -> bool {
        self.0 & other.0 == other.0
    }

    /// Adds a scope.
    pub fn insert(&mut self, scope: Scope) {
        self.0 |= scope.bit();
    }

    /// The scopes in both sets.
    pub const fn intersection(self, other: ScopeSet) -> ScopeSet {
        ScopeSet(self.0 & other.0)
    }

    /// The scopes of `self` that are not in `other`.
    pub const fn difference(self, other: ScopeSet) -> ScopeSet {
        ScopeSet(self.0 & !other.0)
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The scopes in the set, in [`Scope::ALL`] order.
    pub fn iter(self) -> impl Iterator<Item = Scope> {
        Scope::ALL.into_iter().filter(move |s| self.contains(*s))
    }

    /// The wire spellings, in [`Scope::ALL`] order.
    pub fn to_strings(self) -> Vec<String> {
        self.iter().map(|s| s.as_str().to_owned()).collect()
    }

    /// Parses wire spellings; the first unknown one is returned as the error.
    pub fn parse_all<S: AsRef<str>>(texts: &[S]) -> Result<ScopeSet, String> {
        let mut set = ScopeSet::EMPTY;
        for text in texts {
            let text = text.as_ref();
            set.insert(Scope::parse(text).ok_or_else(|| text.to_owned())?);
        }
        Ok(set)
    }
}

impl FromIterator<Scope> for ScopeSet {
    fn from_iter<I: IntoIterator<Item = Scope>>(iter: I) -> Self {
        let mut set = ScopeSet::EMPTY;
        for scope in iter {
            set.insert(scope);
        }
        set
    }
}

impl fmt::Debug for ScopeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter().map(Scope::as_str)).finish()
    }
}

impl From<Scope> for &'static str {
    fn from(scope: Scope) -> Self {
        scope.as_str()
    }
}

impl TryFrom<String> for Scope {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        Scope::parse(&text).ok_or_else(|| format!("unknown scope '{text}'"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scope_round_trips() {
        for scope in Scope::ALL {
            assert_eq!(Scope::parse(scope.as_str()), Some(scope));
        }
        assert_eq!(Scope::parse("Ledger:read"), None);
        assert_eq!(Scope::parse("ledger:delete"), None);
    }

    #[test]
    fn set_operations() {
        let set = ScopeSet::of(&[Scope::LedgerRead, Scope::GovWrite]);
        assert!(set.contains(Scope::LedgerRead));
        assert!(!set.contains(Scope::LedgerWrite));
        assert!(ScopeSet::all().contains_all(set));
        assert!(!set.contains_all(ScopeSet::all()));
        assert_eq!(ScopeSet::all().difference(set).iter().count(), Scope::ALL.len() - 2);
        assert_eq!(ScopeSet::parse_all(&["gov:write", "x:y"]), Err("x:y".to_owned()));
        assert_eq!(set.to_strings(), vec!["ledger:read", "gov:write"]);
    }
}
