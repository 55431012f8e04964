//! The hash tiles a unit of work reads and extends: loaded from the store once, served to the
//! tree code synchronously, and extended leaf by leaf as entries are appended.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use gateway_core::{CoopId, Error};
use gateway_tlog::tile::{FULL_WIDTH, Tile, TileHashReader, TileReader};
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
    fn read_tile(&self, tile: Tile) -> Result<Cow<'_, [u8]>, TreeError> {
        match self.known.get(&(tile.level(), tile.index())) {
            Some(bytes) if bytes.len() >= usize::from(tile.width()) * HASH => Ok(Cow::Borrowed(bytes)),
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
    fn read_tile(&self, tile: Tile) -> Result<Cow<'_, [u8]>, TreeError> {
        let key = (tile.level(), tile.index());
        if !self.tiles.known.contains_key(&key)
            && let Some(cache) = self.cache
            && let Some(bytes) = cache.get(&(self.coop.clone(), key.0, key.1), tile.width())
        {
            return Ok(Cow::Owned(bytes[..usize::from(tile.width()) * HASH].to_vec()));
        }
        self.tiles.read_tile(tile)
    }
}

/// A reader that takes the hashes of complete subtrees from the [`TileCache`] when it has
/// computed them before (such a hash is the same in every tree that holds the subtree), and
/// keeps those it computes.
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
        let complete = level < 64 && index < self.size >> level;
        let key = (self.coop.clone(), level, index);
        if complete && let Some(hash) = self.cache.subtree(&key) {
            return Ok(hash);
        }
        let hash = self.reader.subtree_hash(level, index)?;
        self.cache.keep_subtree(key, hash);
        Ok(hash)
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
    /// process's [`TileCache`], kept tiles and the complete subtrees' hashes computed before are
    /// taken from it without a pass of their own.
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
    half: usize,
    inner: Mutex<Generations>,
    /// Complete subtrees' hashes (a quarter of the bound), the same way.
    subtrees: Mutex<SubtreeGenerations>,
}

/// What one kept subtree hash costs, roughly: the hash, its key and the map's slot.
const SUBTREE_BYTES: usize = 96;

#[derive(Debug, Default)]
struct SubtreeGenerations {
    young: HashMap<TileKey, Hash>,
    old: HashMap<TileKey, Hash>,
}

type TileKey = (CoopId, u8, u64);

#[derive(Debug, Default)]
struct Generations {
    young: HashMap<TileKey, Arc<[u8]>>,
    young_bytes: usize,
    old: HashMap<TileKey, Arc<[u8]>>,
    old_bytes: usize,
}

impl TileCache {
    /// A cache holding at most about `bytes` of tiles.
    pub fn new(bytes: usize) -> Self {
        Self { half: (bytes / 2).max(HASH), inner: Mutex::default(), subtrees: Mutex::default() }
    }

    fn subtree(&self, key: &TileKey) -> Option<Hash> {
        let mut kept = self.subtrees.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(hash) = kept.young.get(key) {
            return Some(*hash);
        }
        let hash = kept.old.remove(key)?;
        kept.young.insert(key.clone(), hash);
        Some(hash)
    }

    fn keep_subtree(&self, key: TileKey, hash: Hash) {
        let limit = (self.half / 4 / SUBTREE_BYTES).max(1);
        let mut kept = self.subtrees.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.young.insert(key, hash);
        if kept.young.len() >= limit {
            kept.old = std::mem::take(&mut kept.young);
        }
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
        let key = (coop.clone(), level, index);
        if let Some(bytes) = self.get(&key, width) {
            return Ok(Some(bytes.to_vec()));
        }
        let bytes = reads.log_tile(coop, level, index).await?;
        if let Some(bytes) = &bytes
            && bytes.len() >= usize::from(width) * HASH
        {
            self.put(key, bytes);
        }
        Ok(bytes)
    }

    pub(crate) fn get(&self, key: &TileKey, width: u16) -> Option<Arc<[u8]>> {
        let mut inner = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(bytes) = inner.young.get(key) {
            return (bytes.len() >= usize::from(width) * HASH).then(|| bytes.clone());
        }
        let bytes = inner.old.remove(key)?;
        let wide_enough = bytes.len() >= usize::from(width) * HASH;
        inner.insert(self.half, key.clone(), bytes.clone());
        wide_enough.then_some(bytes)
    }

    fn put(&self, key: TileKey, bytes: &[u8]) {
        let mut inner = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        inner.insert(self.half, key, bytes.into());
    }

    /// The bytes of tiles kept now (both generations).
    pub fn bytes(&self) -> usize {
        let inner = self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        inner.young_bytes + inner.old_bytes
    }
}

impl Generations {
    fn insert(&mut self, half: usize, key: TileKey, bytes: Arc<[u8]>) {
        if let Some(previous) = self.old.remove(&key) {
            self.old_bytes -= previous.len();
        }
        let added = bytes.len();
        if let Some(previous) = self.young.insert(key, bytes) {
            self.young_bytes -= previous.len();
        }
        self.young_bytes += added;
        if self.young_bytes >= half {
            self.old = std::mem::take(&mut self.young);
            self.old_bytes = std::mem::take(&mut self.young_bytes);
        }
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

    fn key(index: u64) -> TileKey {
        (CoopId::parse("c1").unwrap(), 0, index)
    }

    #[test]
    fn a_kept_tile_serves_its_width_and_narrower_and_a_wider_read_misses() {
        let cache = TileCache::new(1 << 20);
        cache.put(key(0), &[7u8; 10 * HASH]);
        assert_eq!(cache.get(&key(0), 10).unwrap().len(), 10 * HASH);
        assert_eq!(cache.get(&key(0), 3).unwrap().len(), 10 * HASH, "the reader takes the first hashes");
        assert!(cache.get(&key(0), 11).is_none(), "a wider partial tile is loaded again");
        assert!(cache.get(&key(1), 1).is_none());
        cache.put(key(0), &[7u8; 11 * HASH]);
        assert_eq!(cache.get(&key(0), 11).unwrap().len(), 11 * HASH);
        assert_eq!(cache.bytes(), 11 * HASH, "the wider tile replaced the narrower one");
    }

    #[test]
    fn the_cache_stays_within_its_bound_and_keeps_the_tiles_in_use() {
        let full = usize::from(FULL_WIDTH) * HASH;
        let cache = TileCache::new(16 * full);
        cache.put(key(0), &vec![1u8; full]);
        for index in 1..1_000 {
            cache.put(key(index), &vec![1u8; full]);
            assert!(cache.bytes() <= 16 * full, "{} bytes kept after {index} tiles", cache.bytes());
            // Tile 0 is read between every two loads: it is never dropped.
            assert!(cache.get(&key(0), FULL_WIDTH).is_some(), "tile 0 dropped after {index} loads");
        }
        assert!(cache.get(&key(1), FULL_WIDTH).is_none(), "an unused tile is dropped");
        assert!(cache.get(&key(999), FULL_WIDTH).is_some(), "the newest tile is kept");
    }
}
