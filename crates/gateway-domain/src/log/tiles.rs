//! The hash tiles a unit of work reads and extends: loaded from the store once, served to the
//! tree code synchronously, and extended leaf by leaf as entries are appended.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};

use gateway_core::{CoopId, Error};
use gateway_tlog::tile::{FULL_WIDTH, Tile, TileHashReader, TileReader};
use gateway_tlog::tree::TreeError;
use gateway_tlog::{Hash, merkle_root};

use crate::ports::{LogReads, LogTx};

const HASH: usize = 32;

/// Tiles by `(level, index)`, as far as they are known; the ones a read asked for and did not
/// find are noted, to be loaded before the read is tried again.
#[derive(Debug, Default)]
pub(crate) struct Tiles {
    known: BTreeMap<(u8, u64), Vec<u8>>,
    changed: BTreeSet<(u8, u64)>,
    missing: RefCell<BTreeSet<(u8, u64)>>,
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
                self.missing.borrow_mut().insert((tile.level(), tile.index()));
                Err(TreeError::Unavailable { level: tile.level().saturating_mul(8), index: tile.index() })
            }
        }
    }
}

/// Where tiles are loaded from.
pub(crate) enum Source<'a, T: LogTx + ?Sized> {
    /// A unit of work.
    Tx(&'a mut T),
    /// The read pool.
    Reads(&'a dyn LogReads),
}

impl Tiles {
    /// Runs `op` over the tree of `size` leaves, loading each tile it asks for from `source`
    /// until it completes (a proof touches at most two tiles per level).
    pub(crate) async fn with<R, T: LogTx + ?Sized>(
        &mut self,
        coop: &CoopId,
        source: &mut Source<'_, T>,
        size: u64,
        op: impl Fn(&TileHashReader<&Tiles>) -> Result<R, TreeError>,
    ) -> Result<R, Error> {
        for _ in 0..64 {
            let outcome = op(&TileHashReader::new(size, &*self));
            let missing = std::mem::take(&mut *self.missing.borrow_mut());
            match outcome {
                Ok(value) => return Ok(value),
                Err(TreeError::Unavailable { .. }) if !missing.is_empty() => {
                    for (level, index) in missing {
                        let bytes = match source {
                            Source::Tx(tx) => tx.log_tile(coop, level, index).await?,
                            Source::Reads(reads) => reads.log_tile(coop, level, index).await?,
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

/// The store's tiles do not hold the tree they should.
pub(crate) fn integrity(coop: &CoopId, what: &str) -> Error {
    Error::Internal(format!("{INTEGRITY}: coop {coop}: {what}"))
}

/// The marker of an integrity failure's message.
pub(crate) const INTEGRITY: &str = "log integrity";
