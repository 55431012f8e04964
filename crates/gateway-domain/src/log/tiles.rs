//! The hash tiles a unit of work reads and extends: loaded from the store once, served to the
//! tree code synchronously, and extended leaf by leaf as entries are appended.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use gateway_core::{CoopId, Error};
use gateway_tlog::tile::{FULL_WIDTH, Tile, TileHashReader, TileReader, copy_hashes};
use gateway_tlog::tree::{HashReader, TreeError};
use gateway_tlog::{Hash, merkle_root};

use crate::ports::{LogReads, LogTx};

const HASH: usize = 32;

/// Tiles by `(level, index)`, as far as they are known; the ones a read asked for and did not
/// find are noted, to be loaded before the read is tried again.
#[derive(Debug, Default)]
pub(crate) struct Tiles {
    known: BTreeMap<(u8, u64), Vec<u8>>,
    changed: BTreeSet<(u8, u64)>,
    /// Asked for and not known: the width each read needed.
    missing: RefCell<BTreeMap<(u8, u64), u16>>,
}

impl TileReader for Tiles {
    fn read_hashes(&self, tile: Tile, first: usize, out: &mut [Hash]) -> Result<(), TreeError> {
        let width = usize::from(tile.width()) * HASH;
        match self.known.get(&(tile.level(), tile.index())) {
            Some(bytes) if bytes.len() >= width => copy_hashes(tile, &bytes[..width], first, out),
            Some(bytes) => Err(TreeError::Storage(format!(
                "{} holds {} hashes, {} expected",
                tile.path(),
                bytes.len() / HASH,
                tile.width()
            ))),
            None => {
                let mut missing = self.missing.borrow_mut();
                let width = missing.entry((tile.level(), tile.index())).or_default();
                *width = (*width).max(tile.width());
                Err(TreeError::Unavailable { level: tile.level().saturating_mul(8), index: tile.index() })
            }
        }
    }
}

/// The tiles a unit of work or a read has loaded, then those the process's cache keeps.
struct Cached<'a> {
    tiles: &'a Tiles,
    cache: Option<&'a TileCache>,
    coop: &'a CoopId,
}

impl TileReader for Cached<'_> {
    fn read_hashes(&self, tile: Tile, first: usize, out: &mut [Hash]) -> Result<(), TreeError> {
        let key = (tile.level(), tile.index());
        if !self.tiles.known.contains_key(&key)
            && let Some(cache) = self.cache
            && let Some(bytes) = cache.get(self.coop, key, tile.width())
        {
            return copy_hashes(tile, &bytes[..usize::from(tile.width()) * HASH], first, out);
        }
        self.tiles.read_hashes(tile, first, out)
    }
}

/// A reader that takes the hashes of complete subtrees, and of the ranges the tree code folds
/// from them (a tree's right edge), from the [`TileCache`] when it has computed them before
/// (such a hash is the same in every tree that holds its leaves), and keeps those it computes.
struct Memo<'a, R> {
    reader: &'a R,
    cache: &'a TileCache,
    coop: &'a CoopId,
    size: u64,
}

impl<R: HashReader> HashReader for Memo<'_, R> {
    fn subtree_hash(&self, level: u8, index: u64) -> Result<Hash, TreeError> {
        // A hash at a tile's own height is one of its stored hashes: nothing to keep.
        if level.is_multiple_of(8) {
            return self.reader.subtree_hash(level, index);
        }
        // The leaves of a subtree complete within the tree (so neither shift overflows).
        let leaves = (level < 64 && index < self.size >> level).then(|| (index << level, (index + 1) << level));
        if let Some(leaves) = leaves
            && let Some(hash) = self.cache.subtree(self.coop, leaves)
        {
            return Ok(hash);
        }
        let hash = self.reader.subtree_hash(level, index)?;
        if let Some(leaves) = leaves {
            self.cache.keep_subtree(self.coop, leaves, hash);
        }
        Ok(hash)
    }

    fn kept_range(&self, lo: u64, hi: u64) -> Option<Hash> {
        if hi > self.size { None } else { self.cache.subtree(self.coop, (lo, hi)) }
    }

    fn keep_range(&self, lo: u64, hi: u64, hash: &Hash) {
        if lo < hi && hi <= self.size {
            self.cache.keep_subtree(self.coop, (lo, hi), *hash);
        }
    }
}

/// Where tiles are loaded from.
pub(crate) enum Source<'a, T: LogTx + ?Sized> {
    /// A unit of work.
    Tx(&'a mut T),
    /// The read pool, through the process's cache of tiles when given.
    Reads(&'a dyn LogReads, Option<&'a TileCache>),
}

impl Tiles {
    /// Runs `op` over the tree of `size` leaves, loading each tile it asks for from `source`
    /// until it completes (a proof touches at most two tiles per level). Reading through the
    /// process's [`TileCache`], kept tiles, and the hashes of complete subtrees and of folded
    /// right edges computed before, are taken from it without a pass of their own.
    pub(crate) async fn with<R, T: LogTx + ?Sized>(
        &mut self,
        coop: &CoopId,
        source: &mut Source<'_, T>,
        size: u64,
        op: impl Fn(&dyn HashReader) -> Result<R, TreeError>,
    ) -> Result<R, Error> {
        let cache = match source {
            Source::Reads(_, cache) => *cache,
            Source::Tx(_) => None,
        };
        for _ in 0..64 {
            let outcome = {
                let reader = TileHashReader::new(size, Cached { tiles: &*self, cache, coop });
                match cache {
                    Some(cache) => op(&Memo { reader: &reader, cache, coop, size }),
                    None => op(&reader),
                }
            };
            let missing = std::mem::take(&mut *self.missing.borrow_mut());
            match outcome {
                Ok(value) => return Ok(value),
                Err(TreeError::Unavailable { .. }) if !missing.is_empty() => {
                    for ((level, index), width) in missing {
                        let bytes = match source {
                            Source::Tx(tx) => tx.log_tile(coop, level, index).await?,
                            Source::Reads(reads, Some(cache)) => cache.read(*reads, coop, level, index, width).await?,
                            Source::Reads(reads, None) => reads.log_tile(coop, level, index).await?,
                        };
                        // A tile the store does not hold reads as empty: the op then fails
                        // with the shortfall rather than asking again.
                        self.known.insert((level, index), bytes.unwrap_or_default());
                    }
                }
                Err(err) => return Err(integrity(coop, &err.to_string())),
            }
        }
        Err(integrity(coop, "reading the log's tiles did not settle"))
    }

    /// Loads the right-edge tiles of a tree of `size` leaves, the ones an append extends, and
    /// checks that each holds exactly the hashes the size says.
    pub(crate) async fn load_edge<T: LogTx + ?Sized>(
        &mut self,
        tx: &mut T,
        coop: &CoopId,
        size: u64,
    ) -> Result<(), Error> {
        for tile in gateway_tlog::tile::partial_tiles(size) {
            let bytes = tx.log_tile(coop, tile.level(), tile.index()).await?.unwrap_or_default();
            if bytes.len() != usize::from(tile.width()) * HASH {
                return Err(integrity(
                    coop,
                    &format!(
                        "{} holds {} bytes, the tree of {size} needs {}",
                        tile.path(),
                        bytes.len(),
                        usize::from(tile.width()) * HASH
                    ),
                ));
            }
            self.known.insert((tile.level(), tile.index()), bytes);
        }
        Ok(())
    }

    /// The hashes of tile `(level, index)` as loaded (empty when not loaded).
    pub(crate) fn stored(&self, level: u8, index: u64) -> &[u8] {
        self.known.get(&(level, index)).map_or(&[], Vec::as_slice)
    }

    /// Appends the leaf hash of entry `index` (the tree had `index` leaves), completing and
    /// hashing upward every tile it fills.
    pub(crate) fn append(&mut self, index: u64, leaf: Hash) {
        let mut hash = leaf;
        let mut position = index;
        let mut level = 0u8;
        loop {
            let key = (level, position / u64::from(FULL_WIDTH));
            let tile = self.known.entry(key).or_default();
            tile.extend_from_slice(&hash);
            self.changed.insert(key);
            if tile.len() < usize::from(FULL_WIDTH) * HASH {
                return;
            }
            // Full: its root is the next level's hash.
            let hashes: Vec<Hash> = tile.chunks_exact(HASH).map(|c| c.try_into().expect("32-byte chunks")).collect();
            hash = merkle_root(&hashes);
            position /= u64::from(FULL_WIDTH);
            level += 1;
        }
    }

    /// Writes every tile an append changed.
    pub(crate) async fn store<T: LogTx + ?Sized>(&mut self, tx: &mut T, coop: &CoopId) -> Result<(), Error> {
        for key in std::mem::take(&mut self.changed) {
            tx.put_log_tile(coop, key.0, key.1, &self.known[&key]).await?;
        }
        Ok(())
    }
}

/// The hash tiles the log's reads (proofs, consistency proofs, the public tile route) loaded,
/// kept in memory up to a bound. A stored tile only ever grows at its end (an append adds
/// hashes; a partial tile is replaced by a wider one with the same first hashes), so a kept tile
/// serves any read of that tile at its width or narrower; a wider read loads it again. Tiles
/// read inside a unit of work (the checkpointer's, which checks them against the signed root)
/// never come from here.
///
/// The bound is kept with two generations: new and used tiles go into the young one; when it
/// holds half the bound, it becomes the old one and the previous old one is dropped. A tile read
/// again from the old generation moves back to the young one, so tiles in use stay.
#[derive(Debug)]
pub struct TileCache {
    tiles: Mutex<Generations<Position, Arc<[u8]>>>,
    /// The hashes of complete subtrees and of the right edges folded from them, by the leaves
    /// they cover (a quarter of the bound), the same way.
    subtrees: Mutex<Generations<Leaves, Hash>>,
}

/// What one kept subtree hash costs, roughly: the hash, its key and the map's slot.
const SUBTREE_BYTES: usize = 96;

/// A tile's `(level, index)` in its coop's log.
type Position = (u8, u64);

/// The leaves `[lo, hi)` a kept hash covers.
type Leaves = (u64, u64);

/// Kept values by coop, then key: a look-up borrows the coop's id rather than copying it. Hashed
/// with foldhash (seeded per map), cheaper than SipHash for these short keys: a proof makes
/// some twenty look-ups.
type Kept<K, V> = HashMap<CoopId, HashMap<K, V, foldhash::fast::RandomState>, foldhash::fast::RandomState>;

/// What a kept value counts against the bound.
trait Weighed: Clone {
    fn weight(&self) -> usize;
}

impl Weighed for Arc<[u8]> {
    fn weight(&self) -> usize {
        self.len()
    }
}

impl Weighed for Hash {
    fn weight(&self) -> usize {
        SUBTREE_BYTES
    }
}

/// Two generations of kept values: new and used ones go into the young one; when it weighs
/// `half`, it becomes the old one and the previous old one is dropped.
#[derive(Debug)]
struct Generations<K, V> {
    young: Kept<K, V>,
    young_bytes: usize,
    old: Kept<K, V>,
    old_bytes: usize,
    half: usize,
}

impl<K: std::hash::Hash + Eq, V: Weighed> Generations<K, V> {
    fn new(half: usize) -> Self {
        Self { young: Kept::default(), young_bytes: 0, old: Kept::default(), old_bytes: 0, half }
    }

    /// The kept value, moved back to the young generation when it was in the old one.
    fn get(&mut self, coop: &CoopId, key: K) -> Option<V> {
        if let Some(value) = self.young.get(coop).and_then(|kept| kept.get(&key)) {
            return Some(value.clone());
        }
        let value = self.old.get_mut(coop)?.remove(&key)?;
        self.old_bytes -= value.weight();
        self.insert(coop, key, value.clone());
        Some(value)
    }

    fn insert(&mut self, coop: &CoopId, key: K, value: V) {
        if let Some(previous) = self.old.get_mut(coop).and_then(|kept| kept.remove(&key)) {
            self.old_bytes -= previous.weight();
        }
        let added = value.weight();
        if let Some(previous) = self.young.entry(coop.clone()).or_default().insert(key, value) {
            self.young_bytes -= previous.weight();
        }
        self.young_bytes += added;
        if self.young_bytes >= self.half {
            self.old = std::mem::take(&mut self.young);
            self.old_bytes = std::mem::take(&mut self.young_bytes);
        }
    }
}

impl TileCache {
    /// A cache holding at most about `bytes` of tiles.
    pub fn new(bytes: usize) -> Self {
        let half = (bytes / 2).max(HASH);
        Self {
            tiles: Mutex::new(Generations::new(half)),
            subtrees: Mutex::new(Generations::new((half / 4).max(SUBTREE_BYTES))),
        }
    }

    fn subtree(&self, coop: &CoopId, leaves: Leaves) -> Option<Hash> {
        self.subtrees.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(coop, leaves)
    }

    fn keep_subtree(&self, coop: &CoopId, leaves: Leaves, hash: Hash) {
        self.subtrees.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(coop, leaves, hash);
    }

    /// Tile `(level, index)` of the coop's log with at least `width` hashes, from memory when
    /// kept, else from the store (and kept). `None` when the store has no such tile.
    pub(crate) async fn read(
        &self,
        reads: &dyn LogReads,
        coop: &CoopId,
        level: u8,
        index: u64,
        width: u16,
    ) -> Result<Option<Vec<u8>>, Error> {
        if let Some(bytes) = self.get(coop, (level, index), width) {
            return Ok(Some(bytes.to_vec()));
        }
        let bytes = reads.log_tile(coop, level, index).await?;
        if let Some(bytes) = &bytes
            && bytes.len() >= usize::from(width) * HASH
        {
            self.put(coop, (level, index), bytes);
        }
        Ok(bytes)
    }

    /// The kept tile at `position` when it holds at least `width` hashes.
    pub(crate) fn get(&self, coop: &CoopId, position: Position, width: u16) -> Option<Arc<[u8]>> {
        let mut tiles = self.tiles.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        tiles.get(coop, position).filter(|bytes| bytes.len() >= usize::from(width) * HASH)
    }

    fn put(&self, coop: &CoopId, position: Position, bytes: &[u8]) {
        self.tiles.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(coop, position, bytes.into());
    }

    /// The bytes of tiles kept now (both generations).
    pub fn bytes(&self) -> usize {
        let tiles = self.tiles.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        tiles.young_bytes + tiles.old_bytes
    }
}

/// The store's tiles do not hold the tree they should.
pub(crate) fn integrity(coop: &CoopId, what: &str) -> Error {
    Error::Internal(format!("{INTEGRITY}: coop {coop}: {what}"))
}

/// The marker of an integrity failure's message.
pub(crate) const INTEGRITY: &str = "log integrity";

#[cfg(test)]
mod tests {
    use super::*;

    fn coop(id: &str) -> CoopId {
        CoopId::parse(id).unwrap()
    }

    #[test]
    fn a_kept_tile_serves_its_width_and_narrower_and_a_wider_read_misses() {
        let (cache, c1) = (TileCache::new(1 << 20), coop("c1"));
        cache.put(&c1, (0, 0), &[7u8; 10 * HASH]);
        assert_eq!(cache.get(&c1, (0, 0), 10).unwrap().len(), 10 * HASH);
        assert_eq!(cache.get(&c1, (0, 0), 3).unwrap().len(), 10 * HASH, "the reader takes the first hashes");
        assert!(cache.get(&c1, (0, 0), 11).is_none(), "a wider partial tile is loaded again");
        assert!(cache.get(&c1, (0, 1), 1).is_none());
        assert!(cache.get(&c1, (1, 0), 1).is_none(), "another level's tile is another tile");
        assert!(cache.get(&coop("c2"), (0, 0), 1).is_none(), "another coop's log is another log");
        cache.put(&c1, (0, 0), &[7u8; 11 * HASH]);
        assert_eq!(cache.get(&c1, (0, 0), 11).unwrap().len(), 11 * HASH);
        assert_eq!(cache.bytes(), 11 * HASH, "the wider tile replaced the narrower one");
    }

    #[test]
    fn the_cache_stays_within_its_bound_and_keeps_the_tiles_in_use() {
        let full = usize::from(FULL_WIDTH) * HASH;
        let (cache, c1, c2) = (TileCache::new(16 * full), coop("c1"), coop("c2"));
        cache.put(&c1, (0, 0), &vec![1u8; full]);
        for index in 1..1_000 {
            // Two coops' tiles share the bound.
            let owner = if index % 2 == 0 { &c1 } else { &c2 };
            cache.put(owner, (0, index), &vec![1u8; full]);
            assert!(cache.bytes() <= 16 * full, "{} bytes kept after {index} tiles", cache.bytes());
            // Tile 0 is read between every two loads: it is never dropped.
            assert!(cache.get(&c1, (0, 0), FULL_WIDTH).is_some(), "tile 0 dropped after {index} loads");
        }
        assert!(cache.get(&c2, (0, 1), FULL_WIDTH).is_none(), "an unused tile is dropped");
        assert!(cache.get(&c2, (0, 999), FULL_WIDTH).is_some(), "the newest tile is kept");
        // What the two generations hold is what they count: every kept tile is a full one.
        let bytes = cache.bytes();
        let tiles = cache.tiles.lock().unwrap();
        let kept: usize = [&tiles.young, &tiles.old].iter().flat_map(|g| g.values()).map(HashMap::len).sum();
        assert_eq!(bytes, kept * full);
    }

    /// Proofs through the cache, for two coops whose logs differ, at several sizes of each,
    /// are the proofs of each coop's own tree: a kept subtree or right edge never serves
    /// another coop or another tree size wrongly.
    #[test]
    fn proofs_through_the_cache_are_each_trees_own() {
        use gateway_tlog::MemoryTree;
        use gateway_tlog::tree::{consistency_proof, inclusion_proof};
        let cache = TileCache::new(1 << 20);
        let tree_of = |name: &str| {
            let mut tree = MemoryTree::new();
            for i in 0..600u64 {
                tree.append_entry(format!("{name} {i}").as_bytes());
            }
            tree
        };
        let coops = [(coop("c1"), tree_of("c1")), (coop("c2"), tree_of("c2"))];
        for size in [5u64, 300, 299, 600, 300, 517] {
            for (coop, tree) in &coops {
                let memo = Memo { reader: tree, cache: &cache, coop, size };
                for index in (0..size).step_by(7).chain([size - 1]) {
                    assert_eq!(
                        inclusion_proof(index, size, &memo).unwrap(),
                        inclusion_proof(index, size, tree).unwrap(),
                        "{coop}: leaf {index} of {size}"
                    );
                }
                for old in (0..=size).step_by(11) {
                    assert_eq!(
                        consistency_proof(old, size, &memo).unwrap(),
                        consistency_proof(old, size, tree).unwrap()
                    );
                }
            }
        }
        let subtrees = cache.subtrees.lock().unwrap();
        let ranges = subtrees.young.values().flat_map(HashMap::keys).filter(|(lo, hi)| !(hi - lo).is_power_of_two());
        assert!(ranges.count() > 0, "the right edges were kept");
    }

    #[test]
    fn kept_subtree_hashes_are_the_coops_own_and_stay_within_their_share() {
        let (cache, c1, c2) = (TileCache::new(64 * SUBTREE_BYTES * 8), coop("c1"), coop("c2"));
        // The subtree at level 3, index 5 covers leaves [40, 48).
        cache.keep_subtree(&c1, (40, 48), [1; 32]);
        assert_eq!(cache.subtree(&c1, (40, 48)), Some([1; 32]));
        assert_eq!(cache.subtree(&c2, (40, 48)), None);
        assert_eq!(cache.subtree(&c1, (40, 47)), None, "another range is another hash");
        for index in 0..10_000 {
            cache.keep_subtree(&c2, (2 * index, 2 * index + 2), [2; 32]);
        }
        let subtrees = cache.subtrees.lock().unwrap();
        let kept: usize = [&subtrees.young, &subtrees.old].iter().flat_map(|g| g.values()).map(HashMap::len).sum();
        assert!(kept * SUBTREE_BYTES <= 2 * subtrees.half, "{kept} subtree hashes kept");
    }
}
