//! Where trust scores come from.
//!
//! The limiters only need a number in [0, 1] per DID; this module defines that seam and a
//! configuration-backed implementation. It deliberately computes nothing: a trust graph will
//! implement [`TrustScores`] later without the limiters changing.

use std::collections::HashMap;
use std::sync::Arc;

/// A source of trust scores, conventionally in [0, 1].
///
/// Lookups happen on the request path, so implementations should answer from memory.
pub trait TrustScores: Send + Sync {
    /// The trust score of `did`; an unknown DID gets the implementation's default.
    fn score(&self, did: &str) -> f64;
}

impl<T: TrustScores + ?Sized> TrustScores for Arc<T> {
    fn score(&self, did: &str) -> f64 {
        (**self).score(did)
    }
}

impl<T: TrustScores + ?Sized> TrustScores for &T {
    fn score(&self, did: &str) -> f64 {
        (**self).score(did)
    }
}

/// Scores fixed by configuration: one default and a list of per-DID overrides.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StaticTrustScores {
    /// The score of every DID without an override.
    pub default: f64,
    /// Scores of particular DIDs.
    pub overrides: HashMap<String, f64>,
}

impl StaticTrustScores {
    /// Gives every DID the score `default`.
    pub fn new(default: f64) -> Self {
        Self { default, overrides: HashMap::new() }
    }

    /// Gives `did` its own score.
    pub fn with_override(mut self, did: impl Into<String>, score: f64) -> Self {
        self.overrides.insert(did.into(), score);
        self
    }
}

impl TrustScores for StaticTrustScores {
    fn score(&self, did: &str) -> f64 {
        self.overrides.get(did).copied().unwrap_or(self.default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{DidTier, TrustClass};

    #[test]
    fn overrides_win_over_the_default() {
        let scores = StaticTrustScores::new(0.2).with_override("did:key:partner", 0.9);
        assert_eq!(scores.score("did:key:partner"), 0.9);
        assert_eq!(scores.score("did:key:stranger"), 0.2);
    }

    #[test]
    fn scores_drive_tiers_through_a_trait_object() {
        let scores: Arc<dyn TrustScores> = Arc::new(StaticTrustScores::new(0.05).with_override("did:key:coop", 0.75));
        assert_eq!(DidTier::from_score(scores.score("did:key:coop")), DidTier::Medium);
        assert_eq!(TrustClass::from_score(scores.score("did:key:coop")), TrustClass::Federated);
        assert_eq!(TrustClass::from_score(scores.score("did:key:other")), TrustClass::Isolated);
    }
}
