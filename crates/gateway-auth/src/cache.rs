//! A bounded map shared by the workers, for values that are costly to compute again and cheap to
//! keep: verified tokens by their text ([`crate::token`]), decoded public keys by their bytes
//! ([`crate::signature`]).

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::sync::Mutex;

const SHARDS: usize = 16;

/// At most `capacity` entries, in shards under their own locks. A hit compares the whole key,
/// never only its hash. A full shard starts over: what it held is computed again when next
/// asked for, which costs time and never gives a wrong answer.
pub(crate) struct Bounded<K, V> {
    hasher: foldhash::fast::RandomState,
    shards: [Mutex<Shard<K, V>>; SHARDS],
    per_shard: usize,
}

/// One shard: the key's hash → the key and its value.
type Shard<K, V> = HashMap<u64, (K, V), BuildHasherDefault<Prehashed>>;

/// The shards' keys are already hashes (foldhash, seeded at random per process: a hit is
/// confirmed by the whole key, so a collision can cost a computation, never a wrong answer).
#[derive(Default)]
struct Prehashed(u64);

impl Hasher for Prehashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used; fold anything else in so the hasher stays correct.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

impl<K, V: Clone> Bounded<K, V> {
    /// An empty map of at most `capacity` entries (at least one a shard).
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            hasher: foldhash::fast::RandomState::default(),
            shards: std::array::from_fn(|_| Mutex::default()),
            per_shard: (capacity / SHARDS).max(1),
        }
    }

    fn shard(&self, hash: u64) -> &Mutex<Shard<K, V>> {
        &self.shards[(hash >> 59) as usize % SHARDS]
    }

    /// The value kept for `key`, if any.
    pub(crate) fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let shard = self.shard(hash).lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        shard.get(&hash).filter(|(kept, _)| kept.borrow() == key).map(|(_, value)| value.clone())
    }

    /// Keeps `value` for `key` (found again by anything `key` borrows as: `Box<str>` and `str`
    /// hash alike).
    pub(crate) fn insert(&self, key: K, value: V)
    where
        K: Hash,
    {
        let hash = self.hasher.hash_one(&key);
        let mut shard = self.shard(hash).lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if shard.len() >= self.per_shard {
            shard.clear();
        }
        shard.insert(hash, (key, value));
    }

    /// Entries kept now.
    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().unwrap_or_else(std::sync::PoisonError::into_inner).len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hit_needs_the_whole_key_and_a_full_shard_starts_over() {
        let map: Bounded<Box<str>, u32> = Bounded::new(SHARDS * 2);
        map.insert("one".into(), 1);
        assert_eq!(map.get("one"), Some(1));
        assert_eq!(map.get("on"), None);
        assert_eq!(map.get("one "), None);
        for n in 0..1_000 {
            map.insert(n.to_string().into(), n);
        }
        assert!(map.len() <= SHARDS * 2, "{} entries", map.len());
        assert_eq!(map.get("999"), Some(999), "the last insert is kept");
    }
}
