//! C2SP tlog-tiles: the static resources a tiled log serves, their paths, and entry bundles.
//!
//! A tile at level `L` with index `N` holds up to 256 consecutive hashes of complete subtrees at
//! Merkle level `8·L` (level-0 tiles hold leaf hashes), those with indices `N·256 .. N·256+W`.
//! A full tile is 256 hashes (8,192 bytes); the rightmost tile of a level in a tree of size `s`
//! is partial, with `floor(s / 256^L) mod 256` hashes. Tiles are served at
//! `tile/<L>/<N>[.p/<W>]` and entry bundles at `tile/entries/<N>[.p/<W>]`, `N` written in
//! zero-padded groups of three digits, all but the last prefixed with `x` (`x001/x234/067`).
//!
//! [`TileHashReader`] turns a store that holds only tiles into a [`HashReader`], so proofs can be
//! generated from tiles alone.

use std::fmt::Write as _;

use crate::hash::{HASH_SIZE, Hash, node_hash};
use crate::tree::{HashReader, TreeError};

/// The height of a tile: a tile spans 8 Merkle levels.
pub const TILE_HEIGHT: u8 = 8;

/// The number of hashes in a full tile (and of entries in a full bundle).
pub const FULL_WIDTH: u16 = 256;

/// The highest tile level a path may name.
pub const MAX_TILE_LEVEL: u8 = 63;

/// The largest entry an entry bundle can hold (its length is a big-endian `u16`).
pub const MAX_ENTRY_SIZE: usize = 65_535;

/// A malformed tile, tile path or entry bundle.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TileError {
    /// A tile level above [`MAX_TILE_LEVEL`].
    #[error("tile level {0} is above {MAX_TILE_LEVEL}")]
    Level(u8),
    /// A width outside `1..=256`.
    #[error("tile width {0} is not between 1 and 256")]
    Width(u16),
    /// A path that is not a tile or entry bundle path, or not in its canonical form.
    #[error("malformed tile path: {0}")]
    Path(&'static str),
    /// An entry too large for an entry bundle.
    #[error("an entry of {0} bytes is larger than {MAX_ENTRY_SIZE} bytes")]
    EntryTooLarge(usize),
    /// More than 256 entries for one bundle.
    #[error("an entry bundle holds at most 256 entries")]
    TooManyEntries,
    /// A bundle whose bytes are not a sequence of length-prefixed entries.
    #[error("truncated entry bundle")]
    TruncatedBundle,
    /// Reading the hashes of a tile failed.
    #[error(transparent)]
    Tree(#[from] TreeError),
}

/// A tile: its level, its index within the level, and its width in hashes (256 when full).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tile {
    level: u8,
    index: u64,
    width: u16,
}

impl Tile {
    /// A tile, checking the level (at most 63) and the width (1 to 256).
    pub fn new(level: u8, index: u64, width: u16) -> Result<Self, TileError> {
        if level > MAX_TILE_LEVEL {
            return Err(TileError::Level(level));
        }
        if width == 0 || width > FULL_WIDTH {
            return Err(TileError::Width(width));
        }
        Ok(Self { level, index, width })
    }

    /// The tile level `L`.
    pub fn level(&self) -> u8 {
        self.level
    }

    /// The tile index `N` within its level.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The number of hashes in the tile.
    pub fn width(&self) -> u16 {
        self.width
    }

    /// Whether the tile holds all 256 hashes.
    pub fn is_full(&self) -> bool {
        self.width == FULL_WIDTH
    }

    /// The tile's path, `tile/<L>/<N>[.p/<W>]`.
    pub fn path(&self) -> String {
        let mut path = format!("tile/{}/", self.level);
        push_index_and_width(&mut path, self.index, self.width);
        path
    }

    /// The path of the entry bundle that goes with this level-0 tile,
    /// `tile/entries/<N>[.p/<W>]`; `None` for tiles of other levels.
    pub fn entries_path(&self) -> Option<String> {
        (self.level == 0).then(|| {
            let mut path = String::from("tile/entries/");
            push_index_and_width(&mut path, self.index, self.width);
            path
        })
    }
}

/// `N` as zero-padded groups of three digits, all but the last prefixed with `x`, then `.p/W`
/// for a partial width.
fn push_index_and_width(path: &mut String, index: u64, width: u16) {
    let mut groups = [0u16; 7];
    let mut count = 0;
    let mut n = index;
    loop {
        groups[count] = (n % 1000) as u16;
        count += 1;
        n /= 1000;
        if n == 0 {
            break;
        }
    }
    for (i, group) in groups[..count].iter().rev().enumerate() {
        if i > 0 {
            path.push('/');
        }
        if i + 1 < count {
            path.push('x');
        }
        let _ = write!(path, "{group:03}");
    }
    if width != FULL_WIDTH {
        let _ = write!(path, ".p/{width}");
    }
}

/// The path of tile `n` at `level` with `width` hashes: `tile/<L>/<N>` for a full tile (256),
/// `tile/<L>/<N>.p/<W>` for a partial one.
pub fn tile_path(level: u8, n: u64, width: u16) -> Result<String, TileError> {
    Ok(Tile::new(level, n, width)?.path())
}

/// The path of entry bundle `n` with `width` entries: `tile/entries/<N>[.p/<W>]`.
pub fn entries_path(n: u64, width: u16) -> Result<String, TileError> {
    let tile = Tile::new(0, n, width)?;
    let mut path = String::from("tile/entries/");
    push_index_and_width(&mut path, tile.index, tile.width);
    Ok(path)
}

/// What a parsed tile path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TilePath {
    /// A tile of hashes.
    Hashes(Tile),
    /// An entry bundle, described by the level-0 tile whose leaves it holds.
    Entries(Tile),
}

/// Parses `tile/<L>/<N>[.p/<W>]` or `tile/entries/<N>[.p/<W>]`, accepting only the canonical
/// form: no leading zeros (in `L`, `W` or the first group of `N`), `L` at most 63, `W` from 1 to
/// 255, three-digit groups of which all but the last start with `x`.
pub fn parse_tile_path(path: &str) -> Result<TilePath, TileError> {
    let rest = path.strip_prefix("tile/").ok_or(TileError::Path("does not start with tile/"))?;
    let (level_text, rest) = rest.split_once('/').ok_or(TileError::Path("no tile index"))?;
    let entries = level_text == "entries";
    let level = if entries {
        0
    } else {
        let level = parse_decimal(level_text).ok_or(TileError::Path("level is not a decimal number"))?;
        u8::try_from(level).ok().filter(|l| *l <= MAX_TILE_LEVEL).ok_or(TileError::Path("level above 63"))?
    };
    let (index_text, width) = match rest.split_once(".p/") {
        Some((index_text, width_text)) => {
            let width = parse_decimal(width_text).ok_or(TileError::Path("width is not a decimal number"))?;
            let width = u16::try_from(width)
                .ok()
                .filter(|w| (1..FULL_WIDTH).contains(w))
                .ok_or(TileError::Path("partial width not between 1 and 255"))?;
            (index_text, width)
        }
        None => (rest, FULL_WIDTH),
    };
    let mut index: u64 = 0;
    let mut groups = index_text.split('/').peekable();
    while let Some(group) = groups.next() {
        let last = groups.peek().is_none();
        let digits = if last { group } else { group.strip_prefix('x').ok_or(TileError::Path("group without x"))? };
        if digits.len() != 3 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(TileError::Path("index group is not three digits"));
        }
        let value = digits.bytes().fold(0u64, |v, b| v * 10 + u64::from(b - b'0'));
        index = index
            .checked_mul(1000)
            .and_then(|i| i.checked_add(value))
            .ok_or(TileError::Path("index overflows 64 bits"))?;
    }
    let tile = Tile::new(level, index, width)?;
    let canonical = if entries { tile.entries_path() } else { Some(tile.path()) };
    if canonical.as_deref() != Some(path) {
        return Err(TileError::Path("not in canonical form"));
    }
    Ok(if entries { TilePath::Entries(tile) } else { TilePath::Hashes(tile) })
}

/// A decimal number of ASCII digits without leading zeros (`0` itself is allowed).
fn parse_decimal(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) || (text.len() > 1 && text.starts_with('0')) {
        return None;
    }
    text.parse().ok()
}

/// The tile at `(level, n)` of a tree of `size` leaves, with its width then (256 if full, the
/// number of hashes so far if partial), or `None` if that tile does not exist yet.
pub fn tile_at(size: u64, level: u8, n: u64) -> Option<Tile> {
    if level > MAX_TILE_LEVEL {
        return None;
    }
    let shift = u32::from(level) * u32::from(TILE_HEIGHT);
    // The number of complete subtrees at the tile's base Merkle level.
    let hashes = if shift >= 64 { 0 } else { size >> shift };
    let start = n.checked_mul(u64::from(FULL_WIDTH))?;
    if hashes <= start {
        return None;
    }
    let width = (hashes - start).min(u64::from(FULL_WIDTH)) as u16;
    Some(Tile { level, index: n, width })
}

/// The tiles a tree of `size` leaves publishes at the right edge: for each level, the partial
/// tile if there is one. (All tiles to the left of these are full.)
pub fn partial_tiles(size: u64) -> Vec<Tile> {
    (0..=MAX_TILE_LEVEL)
        .filter_map(|level| {
            let shift = u32::from(level) * u32::from(TILE_HEIGHT);
            let hashes = if shift >= 64 { 0 } else { size >> shift };
            let width = (hashes % u64::from(FULL_WIDTH)) as u16;
            (width > 0).then(|| Tile { level, index: hashes / u64::from(FULL_WIDTH), width })
        })
        .collect()
}

/// The bytes of `tile`: its `width` hashes of complete subtrees at Merkle level `8·level`,
/// concatenated, read from `reader`.
pub fn read_tile<R: HashReader + ?Sized>(tile: Tile, reader: &R) -> Result<Vec<u8>, TileError> {
    let merkle_level = u32::from(tile.level) * u32::from(TILE_HEIGHT);
    let first = tile.index.checked_mul(u64::from(FULL_WIDTH));
    let (Ok(level), Some(first)) = (u8::try_from(merkle_level), first) else {
        return Err(TreeError::Unavailable { level: u8::MAX, index: tile.index }.into());
    };
    if level > 63 {
        return Err(TreeError::Unavailable { level, index: first }.into());
    }
    let mut data = Vec::with_capacity(usize::from(tile.width) * HASH_SIZE);
    for i in 0..u64::from(tile.width) {
        let index = first.checked_add(i).ok_or(TreeError::Unavailable { level, index: first })?;
        data.extend_from_slice(&reader.subtree_hash(level, index)?);
    }
    Ok(data)
}

/// A store of tiles.
pub trait TileReader {
    /// Copies the hashes `first..first + out.len()` of `tile` into `out` (all within its
    /// `width`). A store may hold a wider tile of the same level and index (the full tile, or a
    /// wider partial one): it has the same first hashes. [`copy_hashes`] does the copy from a
    /// tile's bytes.
    fn read_hashes(&self, tile: Tile, first: usize, out: &mut [Hash]) -> Result<(), TreeError>;
}

impl<T: TileReader + ?Sized> TileReader for &T {
    fn read_hashes(&self, tile: Tile, first: usize, out: &mut [Hash]) -> Result<(), TreeError> {
        (**self).read_hashes(tile, first, out)
    }
}

/// Copies the hashes `first..first + out.len()` of `tile`, whose stored bytes are `bytes`, into
/// `out`: a storage error when `bytes` is shorter than that.
pub fn copy_hashes(tile: Tile, bytes: &[u8], first: usize, out: &mut [Hash]) -> Result<(), TreeError> {
    let offset = first * HASH_SIZE;
    let end = offset + out.len() * HASH_SIZE;
    let Some(bytes) = bytes.get(offset..end) else {
        return Err(TreeError::Storage(format!("{} holds {} bytes, {end} needed", tile.path(), bytes.len())));
    };
    for (slot, chunk) in out.iter_mut().zip(bytes.chunks_exact(HASH_SIZE)) {
        slot.copy_from_slice(chunk);
    }
    Ok(())
}

/// A [`HashReader`] over a tree of known size whose only storage is tiles.
///
/// The hash of the complete subtree at `(level, index)` is rebuilt from the `2^(level mod 8)`
/// hashes of the tile at level `level / 8` that it spans. Tiles are not authenticated here: a
/// proof built from wrong tiles fails verification against the signed root.
#[derive(Debug, Clone)]
pub struct TileHashReader<T> {
    size: u64,
    tiles: T,
}

impl<T: TileReader> TileHashReader<T> {
    /// A reader for the tree of `size` leaves stored in `tiles`.
    pub fn new(size: u64, tiles: T) -> Self {
        Self { size, tiles }
    }

    /// The tree size this reader serves.
    pub fn size(&self) -> u64 {
        self.size
    }
}

impl<T: TileReader> HashReader for TileHashReader<T> {
    fn subtree_hash(&self, level: u8, index: u64) -> Result<Hash, TreeError> {
        let unavailable = TreeError::Unavailable { level, index };
        // The subtree must be complete within the tree: (index + 1) · 2^level ≤ size.
        if level > 63 || index >= self.size >> level {
            return Err(unavailable);
        }
        let tile_level = level / TILE_HEIGHT;
        let height = level % TILE_HEIGHT;
        let first = index << height;
        let count = 1usize << height;
        let tile = tile_at(self.size, tile_level, first >> 8).ok_or(unavailable)?;
        let mut row = [[0u8; HASH_SIZE]; 128];
        self.tiles.read_hashes(tile, (first & 0xff) as usize, &mut row[..count])?;
        let mut width = count;
        while width > 1 {
            for i in 0..width / 2 {
                row[i] = node_hash(&row[2 * i], &row[2 * i + 1]);
            }
            width /= 2;
        }
        Ok(row[0])
    }
}

/// Appends one entry to an entry bundle: its length as a big-endian `u16`, then its bytes.
pub fn append_bundle_entry(bundle: &mut Vec<u8>, entry: &[u8]) -> Result<(), TileError> {
    let len = u16::try_from(entry.len()).map_err(|_| TileError::EntryTooLarge(entry.len()))?;
    bundle.extend_from_slice(&len.to_be_bytes());
    bundle.extend_from_slice(entry);
    Ok(())
}

/// An entry bundle of up to 256 entries.
pub fn encode_entry_bundle<I, E>(entries: I) -> Result<Vec<u8>, TileError>
where
    I: IntoIterator<Item = E>,
    E: AsRef<[u8]>,
{
    let mut bundle = Vec::new();
    for (count, entry) in entries.into_iter().enumerate() {
        if count == usize::from(FULL_WIDTH) {
            return Err(TileError::TooManyEntries);
        }
        append_bundle_entry(&mut bundle, entry.as_ref())?;
    }
    Ok(bundle)
}

/// The entries of an entry bundle (at most 256, each length-prefixed, nothing left over).
pub fn parse_entry_bundle(bundle: &[u8]) -> Result<Vec<&[u8]>, TileError> {
    let mut entries = Vec::new();
    let mut rest = bundle;
    while !rest.is_empty() {
        if entries.len() == usize::from(FULL_WIDTH) {
            return Err(TileError::TooManyEntries);
        }
        let (len, tail) = rest.split_first_chunk::<2>().ok_or(TileError::TruncatedBundle)?;
        let len = usize::from(u16::from_be_bytes(*len));
        let (entry, tail) = tail.split_at_checked(len).ok_or(TileError::TruncatedBundle)?;
        entries.push(entry);
        rest = tail;
    }
    Ok(entries)
}

#[cfg(test)]
mod tests;
