//! The sharded, bounded key table shared by both limiters.
//!
//! Keys are spread over a fixed set of mutex-protected hash maps so that checks on different
//! keys rarely contend, and every entry knows the instant from which it is *idle*: from then on
//! it behaves exactly like an absent key, so dropping it changes no future decision. The table
//! evicts only idle entries, and refuses new keys when a shard is full of live ones. It
//! deliberately knows nothing about rate limiting beyond that instant.
//!
//! # Keys are stored as their keyed 64-bit hash
//!
//! An entry holds the key's SipHash-1-3 under the table's random 128-bit key, not the key
//! itself: 16 bytes per entry for the GCRA state instead of 32 for an IP address (and a heap
//! string for a DID), so 100k live keys fit in a core's L2 cache and no client address or DID
//! is kept in memory. Two different keys share an entry only if their hashes collide: by
//! accident, with probability about n²/2⁶⁵ for n live keys (3·10⁻⁸ at a million); on purpose,
//! only by someone who can compute SipHash under the process's secret key. A collision makes
//! the two keys share one limit (both are limited sooner), never lifts a limit.

use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash, RandomState};
use std::marker::PhantomData;
use std::num::NonZeroUsize;
use std::sync::{Mutex, MutexGuard, PoisonError};

use hashbrown::HashTable;

/// State stored per key.
pub(crate) trait Expiring: Default {
    /// The instant (clock nanoseconds) from which this entry is indistinguishable from a fresh
    /// `Default` one.
    fn idle_at(&self) -> u64;
}

/// The table refused a new key because its shard holds only live entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Full {
    /// Nanoseconds until the shard's earliest entry becomes idle and can make room.
    pub(crate) retry_after: u64,
}

/// The most shards a table uses; 64 keeps two contending cores apart almost always while the
/// per-shard overhead stays negligible.
const MAX_SHARDS: usize = 64;

/// Small tables get fewer shards so that each still holds a useful number of keys.
const MIN_SHARD_CAPACITY: usize = 16;

/// A shard's table is only shrunk when it takes more than this, so small tables never churn.
const SHRINK_ABOVE_BYTES: usize = 64 * 1024;

/// Keys are hashed once, with the standard library's randomly seeded SipHash because keys such
/// as client addresses are chosen by whoever sends the requests. That one hash picks both the
/// shard and the slot, which is why shards are raw `HashTable`s rather than `HashMap`s that
/// would hash every key a second time.
pub(crate) struct Table<K: ?Sized, V> {
    shards: Box<[Shard<V>]>,
    hasher: RandomState,
    shard_capacity: usize,
    keys: PhantomData<fn(&K)>,
}

/// One shard, aligned to its own cache lines so that two cores locking neighbouring shards do
/// not fight over the same line.
#[repr(align(128))]
struct Shard<V>(Mutex<ShardState<V>>);

/// A key's hash and its state.
type Entry<V> = (u64, V);

struct ShardState<V> {
    entries: HashTable<Entry<V>>,
    /// A lower bound on every entry's `idle_at`, so a full shard only rescans once something
    /// can actually be evicted.
    earliest_idle: u64,
}

impl<K: Hash + ?Sized, V: Expiring> Table<K, V> {
    /// A table holding at most `max_keys` keys.
    ///
    /// The bound is enforced per shard (`max_keys / shards` each, with fewer shards for small
    /// tables), so the total never exceeds `max_keys` but a key can be refused a little before
    /// the whole table is full when its own shard fills first.
    pub(crate) fn new(max_keys: NonZeroUsize) -> Self {
        let wanted = (max_keys.get() / MIN_SHARD_CAPACITY).clamp(1, MAX_SHARDS);
        let shard_count = 1 << wanted.ilog2();
        let shards = (0..shard_count)
            .map(|_| Shard(Mutex::new(ShardState { entries: HashTable::new(), earliest_idle: u64::MAX })))
            .collect();
        Self { shards, hasher: RandomState::new(), shard_capacity: max_keys.get() / shard_count, keys: PhantomData }
    }

    fn shard(&self, hash: u64) -> MutexGuard<'_, ShardState<V>> {
        // The hash table uses the low bits (slot) and the top seven bits (tag) of the hash, so
        // the shard is picked from bits in between to keep the two independent.
        let index = (hash >> 32) as usize & (self.shards.len() - 1);
        lock(&self.shards[index].0)
    }

    /// Runs `f` on the entry for `key` at time `now`, starting from a fresh entry when the key
    /// is absent. The entry is kept only if it is not idle afterwards. A new key that does not
    /// fit is refused without running `f`.
    pub(crate) fn update<Q, R>(&self, key: &Q, now: u64, f: impl FnOnce(&mut V) -> R) -> Result<R, Full>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        let mut shard = self.shard(hash);
        let f = match shard.apply(hash, now, f) {
            Ok(result) => return Ok(result),
            Err(unused) => unused,
        };
        if shard.entries.len() >= self.shard_capacity {
            shard.evict_idle(now);
            if shard.entries.len() >= self.shard_capacity {
                return Err(Full { retry_after: shard.earliest_idle - now });
            }
        }
        let mut entry = V::default();
        let result = f(&mut entry);
        let idle_at = entry.idle_at();
        if idle_at > now {
            shard.earliest_idle = shard.earliest_idle.min(idle_at);
            shard.entries.insert_unique(hash, (hash, entry), |&(h, _)| h);
        }
        Ok(result)
    }

    /// Runs `f` on the entry for `key` if there is one, dropping the entry if that leaves it
    /// idle at `now`.
    pub(crate) fn update_existing<Q>(&self, key: &Q, now: u64, f: impl FnOnce(&mut V))
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        let hash = self.hasher.hash_one(key);
        // An absent key has nothing to update.
        let _ = self.shard(hash).apply(hash, now, f);
    }

    /// Drops every entry that is idle at `now` and returns how many went.
    pub(crate) fn evict_idle(&self, now: u64) -> usize {
        self.shards.iter().map(|shard| lock(&shard.0).evict_idle(now)).sum()
    }

    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|shard| lock(&shard.0).entries.len()).sum()
    }

    /// How many entries satisfy `predicate` (a scan of every shard, one lock at a time).
    pub(crate) fn count(&self, predicate: impl Fn(&V) -> bool) -> usize {
        self.shards.iter().map(|shard| lock(&shard.0).entries.iter().filter(|(_, v)| predicate(v)).count()).sum()
    }

    pub(crate) fn max_keys(&self) -> usize {
        self.shard_capacity * self.shards.len()
    }
}

impl<V: Expiring> ShardState<V> {
    /// Runs `f` on the entry of the key hashed to `hash` and drops the entry if that leaves it
    /// idle at `now`; hands `f` back unused when there is no such entry.
    fn apply<R, F>(&mut self, hash: u64, now: u64, f: F) -> Result<R, F>
    where
        F: FnOnce(&mut V) -> R,
    {
        let Ok(mut occupied) = self.entries.find_entry(hash, |&(h, _)| h == hash) else {
            return Err(f);
        };
        let entry = &mut occupied.get_mut().1;
        let result = f(entry);
        let idle_at = entry.idle_at();
        if idle_at <= now {
            occupied.remove();
        } else {
            self.earliest_idle = self.earliest_idle.min(idle_at);
        }
        Ok(result)
    }

    fn evict_idle(&mut self, now: u64) -> usize {
        if now < self.earliest_idle {
            return 0;
        }
        let before = self.entries.len();
        let mut earliest = u64::MAX;
        self.entries.retain(|(_, entry)| {
            let idle_at = entry.idle_at();
            let live = idle_at > now;
            if live {
                earliest = earliest.min(idle_at);
            }
            live
        });
        self.earliest_idle = earliest;
        // Give memory back after a burst of keys has gone, without thrashing small tables.
        // The allocation is the measure because `capacity` also shrinks as removed slots
        // become tombstones, which would hide how much memory sits unused.
        let allocated = self.entries.allocation_size();
        let used = self.entries.len() * (size_of::<Entry<V>>() + 1);
        if allocated > SHRINK_ABOVE_BYTES && used < allocated / 4 {
            self.entries.shrink_to(self.entries.len() * 2, |&(h, _)| h);
        }
        before - self.entries.len()
    }
}

/// Locks a shard, ignoring poisoning: every update leaves an entry consistent, so a panic in
/// another thread cannot have left half-written state behind.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<K: ?Sized, V> fmt::Debug for Table<K, V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Table")
            .field("shards", &self.shards.len())
            .field("shard_capacity", &self.shard_capacity)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry idle from a fixed instant.
    #[derive(Debug, Default)]
    struct IdleAt(u64);

    impl Expiring for IdleAt {
        fn idle_at(&self) -> u64 {
            self.0
        }
    }

    fn table(max_keys: usize) -> Table<u32, IdleAt> {
        Table::new(NonZeroUsize::new(max_keys).unwrap())
    }

    #[test]
    fn entries_left_idle_are_not_stored() {
        let table = table(64);
        assert_eq!(table.update(&1, 10, |e| e.0 = 10), Ok(()));
        assert_eq!(table.len(), 0);
        assert_eq!(table.update(&1, 10, |e| e.0 = 11), Ok(()));
        assert_eq!(table.len(), 1);
        table.update_existing(&1, 10, |e| e.0 = 5);
        assert_eq!(table.len(), 0);
    }

    #[test]
    fn a_full_shard_evicts_idle_entries_before_refusing() {
        let table = table(2);
        table.update(&1, 0, |e| e.0 = 100).unwrap();
        table.update(&2, 0, |e| e.0 = 50).unwrap();
        assert_eq!(table.update(&3, 10, |e| e.0 = 60), Err(Full { retry_after: 40 }));
        assert_eq!(table.update(&3, 50, |e| e.0 = 60), Ok(()));
        assert_eq!(table.len(), 2);
    }

    #[test]
    fn eviction_gives_memory_back() {
        let table = table(1 << 20);
        for key in 0..300_000 {
            table.update(&key, 0, |e| e.0 = 1 + u64::from(key % 2)).unwrap();
        }
        let allocated = |table: &Table<u32, IdleAt>| -> usize {
            table.shards.iter().map(|s| lock(&s.0).entries.allocation_size()).sum()
        };
        let before = allocated(&table);
        // Half the entries going leaves the tables half full: not worth shrinking.
        assert_eq!(table.evict_idle(1), 150_000);
        assert_eq!(table.evict_idle(1), 0);
        assert_eq!(allocated(&table), before);
        assert_eq!(table.evict_idle(2), 150_000);
        assert_eq!(allocated(&table), 0);
    }
}
