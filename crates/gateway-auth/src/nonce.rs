//! Request-signature nonces, each accepted once while its signature is valid, whatever happens
//! to the memory that holds them.
//!
//! [`NonceStore`] is a trait, like [`ChallengeStore`](crate::ChallengeStore), so that replicas
//! share nonces (through Redis, or without Redis through the shared PostgreSQL database);
//! [`MemoryNonceStore`] serves a single gateway. What is remembered is a fixed-size digest of
//! the signer and the nonce ([`nonce_digest`]), never the client's text, until the signature
//! that carried it expires: after that the signature itself is refused, so the nonce no longer
//! needs remembering.
//!
//! Every store has an *epoch*: the whole second from which it remembers every nonce it
//! accepted (a memory store's start, the time a Redis found itself empty, 0 for a durable
//! database). A signature created before the epoch is refused ([`Remembered::Predates`]): its
//! nonce may have been accepted and then forgotten (a restart, a Redis that lost its data).
//!
//! The memory a signer's nonces take is bounded per signer ([`MAX_NONCES_PER_SIGNER`]): past
//! it the signer is refused ([`Remembered::SignerFull`], a 429) until one of its nonces expires.
//! No store forgets an unexpired nonce to make room. This module checks no signatures.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::fmt;
use std::sync::Mutex;

use async_trait::async_trait;
use gateway_core::Error;
use sha2::{Digest, Sha256};

/// How many unexpired nonces one signer may hold in a store at once: the busiest trust tier's
/// 1,000 requests a minute, each signed with the SDK's 60 s lifetime. A signer that signs with
/// longer lifetimes reaches it sooner and is answered 429 until its oldest nonce expires.
pub const MAX_NONCES_PER_SIGNER: usize = 1_000;

/// The SHA-256 of a signer's nonce, which is what a store keeps: each part length-prefixed (a
/// big-endian `u64` of its byte length), after a domain-separating label, so that no two
/// (signer, nonce) pairs have one encoding (`("a:b", "c")` is not `("a", "b:c")`).
pub fn nonce_digest(signer: &str, nonce: &str) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update(b"icn-gateway request nonce v1\0");
    for part in [signer, nonce] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    hash.finalize().into()
}

/// The SHA-256 of a signer, the key of its count of held nonces (fixed size, whatever its DID).
pub fn signer_digest(signer: &str) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update(b"icn-gateway nonce signer v1\0");
    hash.update(signer.as_bytes());
    hash.finalize().into()
}

/// The epoch of a memory that starts (or finds itself empty) at `now_millis`: the next whole
/// second, or this one when `now_millis` is on it. `created` is in whole seconds, so a
/// signature created in the second the memory began may have been accepted just before it:
/// only a signature created at the epoch or later is certainly unseen.
pub const fn epoch_at(now_millis: u64) -> u64 {
    now_millis.div_ceil(1000)
}

/// A verified signature's nonce, as a store needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignedNonce<'a> {
    /// The signer (the signature's `keyid`, already checked against the token).
    pub signer: &'a str,
    /// The nonce, of the profile's syntax (already checked).
    pub nonce: &'a str,
    /// The signature's `created`, Unix seconds.
    pub created_secs: u64,
    /// The signature's `expires`, Unix seconds: the nonce is remembered until then.
    pub expires_secs: u64,
}

impl SignedNonce<'_> {
    /// [`nonce_digest`] of this signer and nonce.
    pub fn digest(&self) -> [u8; 32] {
        nonce_digest(self.signer, self.nonce)
    }

    /// When the signature expires, Unix milliseconds.
    pub const fn expires_millis(&self) -> u64 {
        self.expires_secs.saturating_mul(1000)
    }
}

/// What a store decided about a nonce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Remembered {
    /// First seen: the request may proceed (and the nonce is now remembered).
    Accepted,
    /// Already accepted while its signature is valid: a replay (401 `nonce_replayed`).
    Replayed,
    /// The signature was created before the store's epoch, so the store cannot tell whether
    /// it was accepted already (401 `signature_expired`; signing again succeeds).
    Predates {
        /// The store's epoch, Unix seconds.
        epoch_secs: u64,
    },
    /// The signer holds as many unexpired nonces as it may (429 `RATE_LIMIT_EXCEEDED`).
    SignerFull {
        /// The bound ([`MAX_NONCES_PER_SIGNER`] unless configured otherwise).
        limit: usize,
        /// Seconds until the signer's oldest nonce expires and frees a place.
        retry_after_secs: u64,
    },
}

/// Where seen nonces are remembered.
#[async_trait]
pub trait NonceStore: Send + Sync + fmt::Debug {
    /// Accepts `nonce` once, at `now_millis` on the caller's clock: [`Remembered::Accepted`] the
    /// first time (it is then remembered until it expires), and for a nonce already remembered
    /// [`Remembered::Replayed`]; a signature created before the store's epoch is
    /// [`Remembered::Predates`] and a signer at its bound [`Remembered::SignerFull`], and neither
    /// is remembered. Concurrent calls with one nonce: at most one is accepted. An error means
    /// the store could not answer (the request must not proceed).
    async fn remember(&self, nonce: SignedNonce<'_>, now_millis: u64) -> Result<Remembered, Error>;
}

/// A single gateway's nonces, in its memory. Its epoch is its creation: nonces accepted by an
/// earlier process are gone, so signatures created before it are refused.
#[derive(Debug)]
pub struct MemoryNonceStore {
    max_entries: usize,
    max_per_signer: usize,
    epoch_secs: u64,
    inner: Mutex<Seen>,
}

/// A SHA-256 digest, already uniformly distributed: a fast hasher is enough.
type Digest32 = [u8; 32];
type FastSet<T> = HashSet<T, foldhash::fast::RandomState>;
type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

#[derive(Debug, Default)]
struct Seen {
    /// Every remembered nonce's digest.
    digests: FastSet<Digest32>,
    /// Every remembered nonce by its expiry (ms), earliest first, with its signer's digest.
    expiries: BinaryHeap<Reverse<(u64, Digest32, Digest32)>>,
    /// Each signer's remembered nonces' expiries, earliest first (its count is the heap's).
    signers: FastMap<Digest32, BinaryHeap<Reverse<u64>>>,
}

impl Seen {
    /// Forgets every nonce expired at `now_millis`.
    fn prune(&mut self, now_millis: u64) {
        while let Some(Reverse((expires, _, _))) = self.expiries.peek() {
            if *expires > now_millis {
                break;
            }
            let Some(Reverse((_, digest, signer))) = self.expiries.pop() else { break };
            self.digests.remove(&digest);
            if let Some(held) = self.signers.get_mut(&signer) {
                // The signer's earliest expiry is this one (both heaps are in expiry order).
                held.pop();
                if held.is_empty() {
                    self.signers.remove(&signer);
                }
            }
        }
    }
}

impl MemoryNonceStore {
    /// A store created at `now_millis` (its epoch is [`epoch_at`] of it), holding at most a
    /// million nonces, [`MAX_NONCES_PER_SIGNER`] of them per signer.
    pub fn starting_at(now_millis: u64) -> Self {
        Self::with_limits(now_millis, 1_000_000, MAX_NONCES_PER_SIGNER)
    }

    /// A store created at `now_millis` remembering at most `max_entries` unexpired nonces,
    /// `max_per_signer` of them per signer.
    pub fn with_limits(now_millis: u64, max_entries: usize, max_per_signer: usize) -> Self {
        Self { max_entries, max_per_signer, epoch_secs: epoch_at(now_millis), inner: Mutex::new(Seen::default()) }
    }

    /// The second from which this store remembers every nonce it accepted, Unix seconds.
    pub fn epoch_secs(&self) -> u64 {
        self.epoch_secs
    }

    /// Nonces remembered now (expired ones included until the next call prunes them).
    pub fn len(&self) -> usize {
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner).digests.len()
    }

    /// Whether none is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[async_trait]
impl NonceStore for MemoryNonceStore {
    async fn remember(&self, nonce: SignedNonce<'_>, now_millis: u64) -> Result<Remembered, Error> {
        if nonce.created_secs < self.epoch_secs {
            return Ok(Remembered::Predates { epoch_secs: self.epoch_secs });
        }
        let (digest, signer) = (nonce.digest(), signer_digest(nonce.signer));
        let mut seen = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        seen.prune(now_millis);
        if seen.digests.contains(&digest) {
            return Ok(Remembered::Replayed);
        }
        if let Some(held) = seen.signers.get(&signer)
            && held.len() >= self.max_per_signer
        {
            let oldest = held.peek().map_or(now_millis, |Reverse(expires)| *expires);
            let retry_after_secs = oldest.saturating_sub(now_millis).div_ceil(1000).max(1);
            return Ok(Remembered::SignerFull { limit: self.max_per_signer, retry_after_secs });
        }
        if seen.digests.len() >= self.max_entries {
            return Err(Error::ServiceUnavailable("too many signed requests at once; retry shortly".into()));
        }
        let expires = nonce.expires_millis();
        seen.digests.insert(digest);
        seen.expiries.push(Reverse((expires, digest, signer)));
        seen.signers.entry(signer).or_default().push(Reverse(expires));
        Ok(Remembered::Accepted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EPOCH: u64 = 1_800_000_000;

    fn signed<'a>(signer: &'a str, nonce: &'a str, created_secs: u64, expires_secs: u64) -> SignedNonce<'a> {
        SignedNonce { signer, nonce, created_secs, expires_secs }
    }

    fn ms(secs: u64) -> u64 {
        secs * 1000
    }

    #[tokio::test]
    async fn a_nonce_is_accepted_once_per_signer_until_it_expires() {
        let store = MemoryNonceStore::starting_at(ms(EPOCH));
        let once = signed("did:a", "nonce-0123456789ab", EPOCH, EPOCH + 1);
        assert_eq!(store.remember(once, ms(EPOCH)).await.unwrap(), Remembered::Accepted);
        assert_eq!(store.remember(once, ms(EPOCH) + 10).await.unwrap(), Remembered::Replayed);
        let other_signer = signed("did:b", "nonce-0123456789ab", EPOCH, EPOCH + 1);
        assert_eq!(store.remember(other_signer, ms(EPOCH) + 10).await.unwrap(), Remembered::Accepted);
        let later = signed("did:a", "nonce-0123456789ab", EPOCH + 1, EPOCH + 2);
        assert_eq!(store.remember(later, ms(EPOCH) + 999).await.unwrap(), Remembered::Replayed, "still remembered");
        assert_eq!(store.remember(later, ms(EPOCH + 1)).await.unwrap(), Remembered::Accepted, "forgotten once expired");
    }

    /// What is kept is a fixed-size digest whose encoding of (signer, nonce) is unambiguous: a
    /// separator moved from one part to the other names another nonce, and a 60,000-character
    /// nonce (had it passed the profile) takes the same 32 bytes as a short one.
    #[tokio::test]
    async fn the_store_keeps_unambiguous_fixed_size_digests() {
        assert_ne!(nonce_digest("did:a:b", "c0123456789abcdef"), nonce_digest("did:a", "b:c0123456789abcdef"));
        assert_ne!(nonce_digest("did:a", "bc"), nonce_digest("did:ab", "c"));
        assert_ne!(nonce_digest("", "x"), nonce_digest("x", ""));
        assert_eq!(nonce_digest("did:a", "n"), nonce_digest("did:a", "n"));
        let store = MemoryNonceStore::starting_at(ms(EPOCH));
        let (left, right) = (signed("did:a:b", "c", EPOCH, EPOCH + 60), signed("did:a", "b:c", EPOCH, EPOCH + 60));
        assert_eq!(store.remember(left, ms(EPOCH)).await.unwrap(), Remembered::Accepted);
        assert_eq!(store.remember(right, ms(EPOCH)).await.unwrap(), Remembered::Accepted, "not the same nonce");
        let huge = "n".repeat(60_000);
        assert_eq!(
            store.remember(signed("did:a", &huge, EPOCH, EPOCH + 60), ms(EPOCH)).await.unwrap(),
            Remembered::Accepted
        );
        let seen = store.inner.lock().unwrap();
        assert!(seen.digests.iter().all(|d| std::mem::size_of_val(d) == 32));
        assert_eq!(seen.digests.len(), 3);
    }

    /// The epoch is the first whole second of the store: a signature created before it (its
    /// nonce may have been accepted by the process before this one) is refused, however fresh
    /// its nonce, and is not remembered; one created at the epoch or later is accepted.
    #[tokio::test]
    async fn signatures_older_than_the_store_are_refused() {
        let store = MemoryNonceStore::starting_at(ms(EPOCH) + 1);
        assert_eq!(store.epoch_secs(), EPOCH + 1);
        let before = signed("did:a", "nonce-0123456789ab", EPOCH, EPOCH + 300);
        assert_eq!(
            store.remember(before, ms(EPOCH) + 2).await.unwrap(),
            Remembered::Predates { epoch_secs: EPOCH + 1 },
            "created in the second the store began: it may have been accepted just before"
        );
        assert!(store.is_empty(), "a refused nonce is not remembered");
        let at = signed("did:a", "nonce-0123456789ab", EPOCH + 1, EPOCH + 300);
        assert_eq!(store.remember(at, ms(EPOCH + 1)).await.unwrap(), Remembered::Accepted);
        // A store starting on a whole second accepts signatures of that second.
        let store = MemoryNonceStore::starting_at(ms(EPOCH));
        assert_eq!(store.remember(before, ms(EPOCH)).await.unwrap(), Remembered::Accepted);
        assert_eq!(epoch_at(0), 0);
        assert_eq!(epoch_at(999), 1);
        assert_eq!(epoch_at(1000), 1);
    }

    /// A signer holds at most its bound of unexpired nonces; past it, it is told when a place
    /// frees, other signers are untouched, and nothing it holds is forgotten to make room.
    #[tokio::test]
    async fn each_signer_is_bounded_and_nothing_is_forgotten_to_make_room() {
        let store = MemoryNonceStore::with_limits(ms(EPOCH), 100, 3);
        let nonces: Vec<String> = (0..4).map(|i| format!("nonce-{i:012}")).collect();
        for (i, nonce) in nonces.iter().take(3).enumerate() {
            let n = signed("did:greedy", nonce, EPOCH, EPOCH + 10 + i as u64);
            assert_eq!(store.remember(n, ms(EPOCH)).await.unwrap(), Remembered::Accepted);
        }
        let fourth = signed("did:greedy", &nonces[3], EPOCH, EPOCH + 60);
        assert_eq!(
            store.remember(fourth, ms(EPOCH) + 500).await.unwrap(),
            Remembered::SignerFull { limit: 3, retry_after_secs: 10 },
            "the oldest frees a place in 9.5 s"
        );
        for (i, nonce) in nonces.iter().take(3).enumerate() {
            let again = signed("did:greedy", nonce, EPOCH, EPOCH + 10 + i as u64);
            assert_eq!(store.remember(again, ms(EPOCH) + 600).await.unwrap(), Remembered::Replayed, "{nonce} kept");
        }
        let neighbour = signed("did:neighbour", &nonces[3], EPOCH, EPOCH + 60);
        assert_eq!(store.remember(neighbour, ms(EPOCH) + 700).await.unwrap(), Remembered::Accepted);
        assert_eq!(store.len(), 4, "the refused nonce was not remembered");
        // Once the oldest expired, the fourth fits, and the others are still remembered.
        assert_eq!(store.remember(fourth, ms(EPOCH + 10)).await.unwrap(), Remembered::Accepted);
        let second = signed("did:greedy", &nonces[1], EPOCH, EPOCH + 11);
        assert_eq!(store.remember(second, ms(EPOCH + 10)).await.unwrap(), Remembered::Replayed);
    }

    #[tokio::test]
    async fn a_full_store_refuses_instead_of_forgetting() {
        let store = MemoryNonceStore::with_limits(ms(EPOCH), 2, 10);
        let first = signed("s", "1", EPOCH, EPOCH + 1);
        assert_eq!(store.remember(first, ms(EPOCH)).await.unwrap(), Remembered::Accepted);
        assert_eq!(store.remember(signed("t", "2", EPOCH, EPOCH + 2), ms(EPOCH)).await.unwrap(), Remembered::Accepted);
        let third = signed("u", "3", EPOCH, EPOCH + 3);
        let err = store.remember(third, ms(EPOCH) + 50).await.unwrap_err();
        assert!(matches!(err, Error::ServiceUnavailable(_)), "{err:?}");
        assert_eq!(store.remember(first, ms(EPOCH) + 50).await.unwrap(), Remembered::Replayed, "nothing forgotten");
        assert_eq!(store.remember(third, ms(EPOCH + 1)).await.unwrap(), Remembered::Accepted, "room once expired");
        assert_eq!(store.len(), 2);
    }
}
