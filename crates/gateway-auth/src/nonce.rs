//! Request-signature nonces, each accepted once while its signature is valid.
//!
//! [`NonceStore`] is a trait, like [`ChallengeStore`](crate::ChallengeStore), so that replicas
//! share nonces through Redis; [`MemoryNonceStore`] serves a single gateway. A nonce is
//! remembered per signer until the signature that carried it expires: after that the signature
//! itself is refused, so the nonce no longer needs remembering. The memory store is bounded,
//! and when full it refuses (503) rather than forget a nonce that could then be replayed. This
//! module checks no signatures.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet};
use std::fmt;
use std::sync::Mutex;

use async_trait::async_trait;
use gateway_core::Error;

/// Where seen nonces are remembered.
#[async_trait]
pub trait NonceStore: Send + Sync + fmt::Debug {
    /// Remembers `nonce` of `signer` until `expires_at_millis`. `true` the first time; `false`
    /// when it is already remembered (a replay). Concurrent calls with one nonce: exactly one
    /// gets `true`.
    async fn remember(&self, signer: &str, nonce: &str, expires_at_millis: u64, now_millis: u64)
    -> Result<bool, Error>;
}

/// A single gateway's nonces.
#[derive(Debug)]
pub struct MemoryNonceStore {
    max_entries: usize,
    inner: Mutex<Seen>,
}

/// A signer and one of its nonces.
type SignerNonce = (Box<str>, Box<str>);

#[derive(Debug, Default)]
struct Seen {
    keys: HashSet<SignerNonce>,
    /// Every remembered key by its expiry, earliest first.
    expiries: BinaryHeap<Reverse<(u64, SignerNonce)>>,
}

impl MemoryNonceStore {
    /// A store remembering at most `max_entries` unexpired nonces.
    pub fn new(max_entries: usize) -> Self {
        Self { max_entries, inner: Mutex::new(Seen::default()) }
    }

    /// Nonces remembered now (expired ones included until the next call prunes them).
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner).keys.len()
    }

    /// Whether none is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Default for MemoryNonceStore {
    /// One million nonces: at most five minutes each, that is over 3,000 signed requests per
    /// second before the store is full.
    fn default() -> Self {
        Self::new(1_000_000)
    }
}

#[async_trait]
impl NonceStore for MemoryNonceStore {
    async fn remember(
        &self,
        signer: &str,
        nonce: &str,
        expires_at_millis: u64,
        now_millis: u64,
    ) -> Result<bool, Error> {
        let mut seen = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        while let Some(Reverse((expires, _))) = seen.expiries.peek() {
            if *expires > now_millis {
                break;
            }
            let Some(Reverse((_, key))) = seen.expiries.pop() else { break };
            seen.keys.remove(&key);
        }
        let key: SignerNonce = (signer.into(), nonce.into());
        if seen.keys.contains(&key) {
            return Ok(false);
        }
        if seen.keys.len() >= self.max_entries {
            return Err(Error::ServiceUnavailable("too many signed requests at once; retry shortly".into()));
        }
        seen.expiries.push(Reverse((expires_at_millis, key.clone())));
        seen.keys.insert(key);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_nonce_is_accepted_once_per_signer_until_it_expires() {
        let store = MemoryNonceStore::new(10);
        assert!(store.remember("did:a", "n1", 1_000, 0).await.unwrap());
        assert!(!store.remember("did:a", "n1", 1_000, 10).await.unwrap(), "replay");
        assert!(store.remember("did:b", "n1", 1_000, 10).await.unwrap(), "another signer's nonce");
        assert!(!store.remember("did:a", "n1", 2_000, 999).await.unwrap(), "still remembered");
        assert!(store.remember("did:a", "n1", 2_000, 1_000).await.unwrap(), "forgotten once expired");
    }

    #[tokio::test]
    async fn a_full_store_refuses_instead_of_forgetting() {
        let store = MemoryNonceStore::new(2);
        assert!(store.remember("s", "1", 100, 0).await.unwrap());
        assert!(store.remember("s", "2", 200, 0).await.unwrap());
        let err = store.remember("s", "3", 300, 50).await.unwrap_err();
        assert!(matches!(err, Error::ServiceUnavailable(_)), "{err:?}");
        assert!(!store.remember("s", "1", 100, 50).await.unwrap(), "nothing was forgotten");
        assert!(store.remember("s", "3", 300, 100).await.unwrap(), "room once the first expired");
        assert_eq!(store.len(), 2);
    }
}
