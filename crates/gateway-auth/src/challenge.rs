//! Outstanding login challenges: issued with a lifetime, each consumed at most once.
//!
//! [`ChallengeStore`] is a trait so that replicas can share challenges through Redis; the
//! [`MemoryChallengeStore`] here serves a single gateway. Its memory is bounded twice: a cap on
//! challenges per DID (a DID at its cap is refused a new challenge with 429 until one is used
//! or expires, so nobody can push a member's pending challenge out by asking for more in its
//! name) and a global cap (the oldest overall is dropped), so a flood of challenge requests can
//! cost at most `max_total` entries. This module does not
//! generate nonces or check signatures.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Mutex;

use async_trait::async_trait;
use gateway_core::Error;

/// One issued challenge.
#[derive(Clone, PartialEq, Eq)]
pub struct Challenge {
    /// Opaque id returned to the client as `challenge_id`.
    pub id: String,
    /// The DID it was issued to.
    pub did: String,
    /// 32 random bytes, hex-encoded: the message to sign.
    pub nonce: String,
    /// When it stops being usable, Unix milliseconds.
    pub expires_at_millis: u64,
}

impl fmt::Debug for Challenge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The nonce is a one-time secret until used; keep it out of logs.
        f.debug_struct("Challenge")
            .field("id", &self.id)
            .field("did", &self.did)
            .field("expires_at_millis", &self.expires_at_millis)
            .finish_non_exhaustive()
    }
}

/// Where outstanding challenges live.
#[async_trait]
pub trait ChallengeStore: Send + Sync + fmt::Debug {
    /// Stores a newly issued challenge; `now_millis` lets the store drop expired ones. A DID
    /// that already has the most outstanding challenges allowed is refused with
    /// [`challenge_cap_reached`], and none of its challenges is dropped.
    async fn insert(&self, challenge: Challenge, now_millis: u64) -> Result<(), Error>;

    /// The unexpired outstanding challenges of `did`, oldest first, left in place: a verify
    /// without `challenge_id` looks for the one its signature verifies before consuming it.
    async fn outstanding(&self, did: &str, now_millis: u64) -> Result<Vec<Challenge>, Error>;

    /// Removes and returns the challenge `id` when it belongs to `did` and has not expired (an
    /// atomic get-and-delete: of concurrent calls, at most one gets it). A challenge of another
    /// DID is neither returned nor removed.
    async fn take(&self, did: &str, id: &str, now_millis: u64) -> Result<Option<Challenge>, Error>;
}

/// The refusal of a new challenge to a DID with `cap` unexpired ones outstanding: 429 on the
/// per-DID layer, retryable when its oldest expires, `retry_after_secs` from now.
pub fn challenge_cap_reached(cap: usize, retry_after_secs: u64) -> Error {
    Error::RateLimited {
        message: format!(
            "this DID already has {cap} outstanding login challenges: use one, or wait until the oldest expires"
        ),
        layer: gateway_core::RateLimitLayer::Did,
        limit: cap as u64,
        retry_after_secs: retry_after_secs.max(1),
        count: None,
    }
}

/// Bounds of the in-memory store.
#[derive(Debug, Clone, Copy)]
pub struct ChallengeLimits {
    /// Most outstanding challenges in total.
    pub max_total: usize,
    /// Most outstanding challenges of one DID.
    pub max_per_did: usize,
}

impl Default for ChallengeLimits {
    fn default() -> Self {
        Self { max_total: 100_000, max_per_did: 32 }
    }
}

/// A single gateway's challenge store.
#[derive(Debug)]
pub struct MemoryChallengeStore {
    limits: ChallengeLimits,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    by_id: HashMap<String, Challenge>,
    by_did: HashMap<String, Vec<String>>,
    /// Ids in issue order. Every challenge has the same lifetime, so this is also expiry order.
    /// It may hold ids already taken; those are skipped when met.
    order: VecDeque<String>,
}

impl Inner {
    fn remove(&mut self, id: &str) -> Option<Challenge> {
        let challenge = self.by_id.remove(id)?;
        if let Some(ids) = self.by_did.get_mut(&challenge.did) {
            ids.retain(|i| i != id);
            if ids.is_empty() {
                self.by_did.remove(&challenge.did);
            }
        }
        Some(challenge)
    }

    /// Drops expired challenges from the front, and the oldest ones while over `max_total`.
    /// The queue itself is kept within `2 × max_total` (stale ids of taken challenges count
    /// there), so repeated requests for one DID cannot grow it either.
    fn prune(&mut self, now_millis: u64, max_total: usize) {
        while let Some(id) = self.order.front() {
            let over = self.by_id.len() > max_total || self.order.len() > 2 * max_total;
            let drop = match self.by_id.get(id) {
                None => true,
                Some(c) => c.expires_at_millis <= now_millis || over,
            };
            if !drop {
                break;
            }
            let id = self.order.pop_front().expect("front exists");
            self.remove(&id);
        }
    }
}

impl MemoryChallengeStore {
    /// A store with the given bounds.
    pub fn new(limits: ChallengeLimits) -> Self {
        Self { limits, inner: Mutex::new(Inner::default()) }
    }

    /// Outstanding challenges (including expired ones not yet pruned).
    pub fn len(&self) -> usize {
        self.inner.lock().expect("challenge store lock").by_id.len()
    }

    /// Whether no challenge is outstanding.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for MemoryChallengeStore {
    fn default() -> Self {
        Self::new(ChallengeLimits::default())
    }
}

#[async_trait]
impl ChallengeStore for MemoryChallengeStore {
    async fn insert(&self, challenge: Challenge, now_millis: u64) -> Result<(), Error> {
        let mut inner = self.inner.lock().expect("challenge store lock");
        inner.prune(now_millis, self.limits.max_total);
        let live: Vec<u64> = inner
            .by_did
            .get(&challenge.did)
            .into_iter()
            .flatten()
            .filter_map(|id| inner.by_id.get(id))
            .map(|c| c.expires_at_millis)
            .filter(|&expires| expires > now_millis)
            .collect();
        if live.len() >= self.limits.max_per_did {
            let oldest = live.iter().copied().min().unwrap_or(now_millis);
            return Err(challenge_cap_reached(self.limits.max_per_did, (oldest - now_millis).div_ceil(1000)));
        }
        inner.by_did.entry(challenge.did.clone()).or_default().push(challenge.id.clone());
        inner.order.push_back(challenge.id.clone());
        inner.by_id.insert(challenge.id.clone(), challenge);
        inner.prune(now_millis, self.limits.max_total);
        Ok(())
    }

    async fn outstanding(&self, did: &str, now_millis: u64) -> Result<Vec<Challenge>, Error> {
        let mut inner = self.inner.lock().expect("challenge store lock");
        inner.prune(now_millis, self.limits.max_total);
        let ids = inner.by_did.get(did).cloned().unwrap_or_default();
        Ok(ids
            .iter()
            .filter_map(|id| inner.by_id.get(id))
            .filter(|c| c.expires_at_millis > now_millis)
            .cloned()
            .collect())
    }

    async fn take(&self, did: &str, id: &str, now_millis: u64) -> Result<Option<Challenge>, Error> {
        let mut inner = self.inner.lock().expect("challenge store lock");
        inner.prune(now_millis, self.limits.max_total);
        if inner.by_id.get(id).is_none_or(|c| c.did != did) {
            return Ok(None);
        }
        Ok(inner.remove(id).filter(|c| c.expires_at_millis > now_millis))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn challenge(id: &str, did: &str, expires: u64) -> Challenge {
        Challenge { id: id.into(), did: did.into(), nonce: format!("n-{id}"), expires_at_millis: expires }
    }

    fn ids(challenges: Vec<Challenge>) -> Vec<String> {
        challenges.into_iter().map(|c| c.id).collect()
    }

    #[tokio::test]
    async fn single_use_and_several_per_did() {
        let store = MemoryChallengeStore::default();
        store.insert(challenge("a", "did:x:1", 1000), 0).await.unwrap();
        store.insert(challenge("b", "did:x:1", 1000), 0).await.unwrap();
        store.insert(challenge("c", "did:x:2", 1000), 0).await.unwrap();
        // By id, only for its own DID; a foreign DID neither gets nor consumes it.
        assert!(store.take("did:x:2", "a", 10).await.unwrap().is_none());
        assert_eq!(store.take("did:x:1", "a", 10).await.unwrap().unwrap().id, "a");
        assert!(store.take("did:x:1", "a", 10).await.unwrap().is_none());
        // Looking at the outstanding ones consumes nothing.
        assert_eq!(ids(store.outstanding("did:x:1", 10).await.unwrap()), vec!["b"]);
        assert_eq!(ids(store.outstanding("did:x:1", 10).await.unwrap()), vec!["b"]);
        assert!(store.take("did:x:1", "b", 10).await.unwrap().is_some());
        assert!(store.outstanding("did:x:1", 10).await.unwrap().is_empty());
        assert_eq!(store.len(), 1);
    }

    #[tokio::test]
    async fn expired_challenges_are_never_returned() {
        let store = MemoryChallengeStore::default();
        store.insert(challenge("a", "did:x:1", 1000), 0).await.unwrap();
        assert!(store.outstanding("did:x:1", 1000).await.unwrap().is_empty());
        assert!(store.take("did:x:1", "a", 1000).await.unwrap().is_none());
        assert!(store.is_empty());
    }

    #[tokio::test]
    async fn memory_is_bounded_per_did_and_in_total() {
        let store = MemoryChallengeStore::new(ChallengeLimits { max_total: 10, max_per_did: 2 });
        store.insert(challenge("a0", "did:x:1", 1000), 0).await.unwrap();
        store.insert(challenge("a1", "did:x:1", 1500), 0).await.unwrap();
        // A third for the same DID is refused, and the pending ones stay usable: nobody can
        // push a member's challenge out by asking for more in its name.
        for i in 2..5 {
            let refused = store.insert(challenge(&format!("a{i}"), "did:x:1", 1000), 200).await.unwrap_err();
            match refused {
                Error::RateLimited { layer, limit, retry_after_secs, .. } => {
                    assert_eq!((layer, limit, retry_after_secs), (gateway_core::RateLimitLayer::Did, 2, 1));
                }
                other => panic!("expected 429, got {other:?}"),
            }
        }
        assert_eq!(store.len(), 2);
        assert_eq!(ids(store.outstanding("did:x:1", 0).await.unwrap()), vec!["a0", "a1"]);
        // Once one is used, or has expired, the DID may have another.
        assert!(store.take("did:x:1", "a0", 0).await.unwrap().is_some());
        store.insert(challenge("a5", "did:x:1", 1000), 0).await.unwrap();
        store.insert(challenge("a6", "did:x:1", 2000), 1000).await.expect("a5 expired at 1000");
        for i in 0..50 {
            store.insert(challenge(&format!("f{i}"), &format!("did:x:f{i}"), 1000), 0).await.unwrap();
        }
        assert_eq!(store.len(), 10);
        assert!(store.take("did:x:f49", "f49", 0).await.unwrap().is_some());
        for i in 0..100 {
            let id = format!("r{i}");
            store.insert(challenge(&id, "did:x:same", 1000), 0).await.unwrap();
            assert!(store.take("did:x:same", &id, 0).await.unwrap().is_some());
        }
        assert!(store.inner.lock().unwrap().order.len() <= 20);
        assert!(store.outstanding("did:x:f0", 0).await.unwrap().is_empty());
    }
}
