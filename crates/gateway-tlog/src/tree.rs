//! RFC 6962 / RFC 9162 Merkle trees: roots, inclusion and consistency proofs, and their
//! verification.
//!
//! Proof generation reads hashes through a [`HashReader`], which serves only the hashes of
//! *complete* subtrees: the node at `(level, index)` covers the `2^level` leaves
//! `[index·2^level, (index+1)·2^level)`. Every other hash a proof needs (the root of a right-hand
//! fringe that is not a power of two wide) is folded from complete subtrees, as Go's
//! `golang.org/x/mod/sumdb/tlog` does with its stored hash indices, unless the reader kept it
//! from an earlier fold ([`HashReader::kept_range`]). Complete subtrees never change once
//! written, so a store that keeps only tiles (see [`crate::tile`]) can serve them.
//!
//! Verification follows the algorithms of RFC 9162 sections 2.1.3.2 and 2.1.4.2 literally.

use crate::hash::{Hash, empty_root, leaf_hash, node_hash};

/// A failure to read subtree hashes or to build a proof.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    /// A leaf index at or past the tree size.
    #[error("leaf index {index} is not below the tree size {size}")]
    IndexOutOfRange {
        /// The leaf index asked for.
        index: u64,
        /// The tree size.
        size: u64,
    },
    /// A consistency proof from a larger tree to a smaller one.
    #[error("tree size {old} is larger than tree size {new}")]
    SizeOrder {
        /// The size of the earlier tree.
        old: u64,
        /// The size of the later tree.
        new: u64,
    },
    /// The reader does not hold the hash of this complete subtree.
    #[error("the hash of the subtree at level {level}, index {index} is not available")]
    Unavailable {
        /// The subtree's level (its height above the leaves).
        level: u8,
        /// The subtree's index within its level.
        index: u64,
    },
    /// The storage behind a reader failed or returned inconsistent data.
    #[error("reading subtree hashes failed: {0}")]
    Storage(String),
}

/// A proof that does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// A leaf index at or past the tree size.
    #[error("leaf index {index} is not below the tree size {size}")]
    IndexOutOfRange {
        /// The leaf index of the proof.
        index: u64,
        /// The tree size of the proof.
        size: u64,
    },
    /// A consistency proof from a larger tree to a smaller one.
    #[error("tree size {old} is larger than tree size {new}")]
    SizeOrder {
        /// The size of the earlier tree.
        old: u64,
        /// The size of the later tree.
        new: u64,
    },
    /// The proof does not have the number of hashes the sizes and index call for.
    #[error("the proof has {actual} hashes, {expected} expected")]
    ProofLength {
        /// The number of hashes such a proof has.
        expected: usize,
        /// The number of hashes given.
        actual: usize,
    },
    /// The proof leads to a different root (or, for consistency, a different old root).
    #[error("the proof does not lead to the expected root")]
    RootMismatch,
}

/// A source of complete-subtree hashes.
///
/// `subtree_hash(level, index)` returns the Merkle tree hash of the leaves
/// `[index·2^level, (index+1)·2^level)`; level 0 is the leaf hashes themselves. Callers in this
/// crate only ask for subtrees that are complete within the tree size they work on.
pub trait HashReader {
    /// The hash of the complete subtree at `(level, index)`.
    fn subtree_hash(&self, level: u8, index: u64) -> Result<Hash, TreeError>;

    /// `MTH(D[lo:hi])` of a range that is several complete subtrees wide, when the reader kept it
    /// from an earlier fold (see [`keep_range`](Self::keep_range)); `None`, the default, has the
    /// caller fold it from complete subtrees.
    fn kept_range(&self, _lo: u64, _hi: u64) -> Option<Hash> {
        None
    }

    /// Offered each range hash folded from several complete subtrees, for a reader that keeps
    /// them. The leaves of a range never change, so its hash holds in every tree that contains
    /// it: every proof against one tree size asks for the same few ranges of its right edge.
    fn keep_range(&self, _lo: u64, _hi: u64, _hash: &Hash) {}
}

/// The largest power of two strictly smaller than `n` (`n ≥ 2`): RFC 6962's split point `k`.
fn split_point(n: u64) -> u64 {
    debug_assert!(n >= 2);
    1u64 << (63 - (n - 1).leading_zeros())
}

/// The largest power of two not larger than `n` (`n ≥ 1`).
fn largest_power_at_most(n: u64) -> u64 {
    debug_assert!(n >= 1);
    1u64 << (63 - n.leading_zeros())
}

/// MTH(D[lo:hi]) for a range that arises in RFC 6962's recursion (`lo` is a multiple of the
/// smallest power of two not below `hi - lo`), built from complete subtrees only: the range is
/// cut greedily into aligned power-of-two pieces and folded from the right.
fn range_hash<R: HashReader + ?Sized>(reader: &R, lo: u64, hi: u64) -> Result<Hash, TreeError> {
    debug_assert!(lo < hi);
    let folded = !(hi - lo).is_power_of_two();
    if folded && let Some(hash) = reader.kept_range(lo, hi) {
        return Ok(hash);
    }
    let mut pieces = [[0u8; 32]; 64];
    let mut count = 0;
    let mut pos = lo;
    while pos < hi {
        let width = largest_power_at_most(hi - pos);
        debug_assert_eq!(pos % width, 0, "range [{lo}, {hi}) is not an RFC 6962 subtree");
        let level = width.trailing_zeros();
        // A piece is at most 2^63 leaves wide, so its level is at most 63.
        pieces[count] = reader.subtree_hash(level as u8, pos >> level)?;
        count += 1;
        pos += width;
    }
    let mut hash = pieces[count - 1];
    for piece in pieces[..count - 1].iter().rev() {
        hash = node_hash(piece, &hash);
    }
    if folded {
        reader.keep_range(lo, hi, &hash);
    }
    Ok(hash)
}

/// The RFC 6962 Merkle tree hash of a list of leaf hashes (the empty list gives [`empty_root`]).
///
/// This computes the definition directly (recursively, splitting at the largest power of two
/// below the length); [`tree_root`] computes the same value from complete subtrees.
pub fn merkle_root(leaves: &[Hash]) -> Hash {
    match leaves.len() {
        0 => empty_root(),
        1 => leaves[0],
        n => {
            let k = split_point(n as u64) as usize;
            node_hash(&merkle_root(&leaves[..k]), &merkle_root(&leaves[k..]))
        }
    }
}

/// The root of the tree of `size` leaves, from the complete-subtree hashes of `reader`.
pub fn tree_root<R: HashReader + ?Sized>(size: u64, reader: &R) -> Result<Hash, TreeError> {
    if size == 0 { Ok(empty_root()) } else { range_hash(reader, 0, size) }
}

/// The inclusion proof (RFC 9162 section 2.1.3.1, RFC 6962's audit path) of leaf `index` in the
/// tree of `size` leaves: the sibling hashes from the leaf's up to the root's children.
pub fn inclusion_proof<R: HashReader + ?Sized>(index: u64, size: u64, reader: &R) -> Result<Vec<Hash>, TreeError> {
    if index >= size {
        return Err(TreeError::IndexOutOfRange { index, size });
    }
    let mut proof = Vec::with_capacity(64);
    let (mut lo, mut hi) = (0, size);
    while hi - lo > 1 {
        let k = split_point(hi - lo);
        if index < lo + k {
            proof.push(range_hash(reader, lo + k, hi)?);
            hi = lo + k;
        } else {
            proof.push(range_hash(reader, lo, lo + k)?);
            lo += k;
        }
    }
    proof.reverse();
    Ok(proof)
}

/// The consistency proof (RFC 9162 section 2.1.4.1) between the trees of `old` and `new`
/// leaves. It is empty when `old` is 0 or equal to `new`.
pub fn consistency_proof<R: HashReader + ?Sized>(old: u64, new: u64, reader: &R) -> Result<Vec<Hash>, TreeError> {
    if old > new {
        return Err(TreeError::SizeOrder { old, new });
    }
    let mut proof = Vec::with_capacity(64);
    if old == 0 || old == new {
        return Ok(proof);
    }
    // SUBPROOF(m, D[lo:hi], b), unrolled: the node [lo, hi) of the new tree, with `complete`
    // telling whether it is still the left spine (whose hash the verifier already knows).
    let (mut lo, mut hi, mut complete) = (0, new, true);
    loop {
        if old == hi {
            if !complete {
                proof.push(range_hash(reader, lo, hi)?);
            }
            break;
        }
        let k = split_point(hi - lo);
        if old <= lo + k {
            proof.push(range_hash(reader, lo + k, hi)?);
            hi = lo + k;
        } else {
            proof.push(range_hash(reader, lo, lo + k)?);
            lo += k;
            complete = false;
        }
    }
    proof.reverse();
    Ok(proof)
}

/// The number of hashes in the inclusion proof of `index` in a tree of `size` leaves
/// (`index < size`): the levels below the point where the paths of `index` and `size - 1`
/// part, plus one per left sibling above it.
fn inclusion_proof_len(index: u64, size: u64) -> usize {
    let inner = 64 - (index ^ (size - 1)).leading_zeros();
    let border = index.checked_shr(inner).unwrap_or(0).count_ones();
    (inner + border) as usize
}

/// Checks an inclusion proof with the algorithm of RFC 9162 section 2.1.3.2: that the leaf with
/// hash `leaf` is at `index` in the tree of `size` leaves whose root is `root`.
pub fn verify_inclusion(index: u64, size: u64, leaf: &Hash, proof: &[Hash], root: &Hash) -> Result<(), VerifyError> {
    if index >= size {
        return Err(VerifyError::IndexOutOfRange { index, size });
    }
    let expected = inclusion_proof_len(index, size);
    if proof.len() != expected {
        return Err(VerifyError::ProofLength { expected, actual: proof.len() });
    }
    let (mut fn_, mut sn) = (index, size - 1);
    let mut r = *leaf;
    for p in proof {
        if sn == 0 {
            return Err(VerifyError::ProofLength { expected, actual: proof.len() });
        }
        if fn_ & 1 == 1 || fn_ == sn {
            r = node_hash(p, &r);
            while fn_ & 1 == 0 && fn_ != 0 {
                fn_ >>= 1;
                sn >>= 1;
            }
        } else {
            r = node_hash(&r, p);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    if sn != 0 {
        return Err(VerifyError::ProofLength { expected, actual: proof.len() });
    }
    if r == *root { Ok(()) } else { Err(VerifyError::RootMismatch) }
}

/// Checks a consistency proof with the algorithm of RFC 9162 section 2.1.4.2: that the tree of
/// `old` leaves with root `old_root` is a prefix of the tree of `new` leaves with root
/// `new_root`.
///
/// Equal sizes need an empty proof and equal roots. Size 0 needs an empty proof and `old_root`
/// equal to [`empty_root`] (the empty tree is a prefix of every tree).
pub fn verify_consistency(
    old: u64,
    new: u64,
    old_root: &Hash,
    new_root: &Hash,
    proof: &[Hash],
) -> Result<(), VerifyError> {
    if old > new {
        return Err(VerifyError::SizeOrder { old, new });
    }
    if old == 0 || old == new {
        if !proof.is_empty() {
            return Err(VerifyError::ProofLength { expected: 0, actual: proof.len() });
        }
        let expected_old = if old == 0 { empty_root() } else { *new_root };
        return if *old_root == expected_old { Ok(()) } else { Err(VerifyError::RootMismatch) };
    }
    // 0 < old < new from here on.
    let shift = old.trailing_zeros();
    let inner = 64 - ((old - 1) ^ (new - 1)).leading_zeros() - shift;
    let border = (old - 1).checked_shr(inner + shift).unwrap_or(0).count_ones();
    let power_of_two = old.is_power_of_two();
    let expected = usize::from(!power_of_two) + (inner + border) as usize;
    if proof.len() != expected {
        return Err(VerifyError::ProofLength { expected, actual: proof.len() });
    }
    // Step 2: when `old` is a power of two its root is the first element of the path.
    let (first, rest) = if power_of_two { (*old_root, proof) } else { (proof[0], &proof[1..]) };
    let (mut fn_, mut sn) = (old - 1, new - 1);
    while fn_ & 1 == 1 {
        fn_ >>= 1;
        sn >>= 1;
    }
    let (mut fr, mut sr) = (first, first);
    for c in rest {
        if sn == 0 {
            return Err(VerifyError::ProofLength { expected, actual: proof.len() });
        }
        if fn_ & 1 == 1 || fn_ == sn {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            while fn_ & 1 == 0 && fn_ != 0 {
                fn_ >>= 1;
                sn >>= 1;
            }
        } else {
            sr = node_hash(&sr, c);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    if sn != 0 {
        return Err(VerifyError::ProofLength { expected, actual: proof.len() });
    }
    if fr == *old_root && sr == *new_root { Ok(()) } else { Err(VerifyError::RootMismatch) }
}

/// An in-memory tree that keeps the hash of every complete subtree, level by level.
///
/// Appending a leaf stores its hash and the hashes of the subtrees it completes, so the tree
/// holds about two hashes per leaf and serves any [`HashReader`] request for its current or
/// any earlier size.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryTree {
    /// `levels[l][i]` is the hash of the complete subtree at `(l, i)`.
    levels: Vec<Vec<Hash>>,
}

impl MemoryTree {
    /// An empty tree.
    pub fn new() -> Self {
        Self::default()
    }

    /// A tree of the given leaf hashes, in order.
    pub fn from_leaf_hashes<I: IntoIterator<Item = Hash>>(leaves: I) -> Self {
        let mut tree = Self::new();
        for leaf in leaves {
            tree.append(leaf);
        }
        tree
    }

    /// The number of leaves.
    pub fn size(&self) -> u64 {
        self.levels.first().map_or(0, |leaves| leaves.len() as u64)
    }

    /// Appends a leaf hash and returns its index.
    pub fn append(&mut self, leaf: Hash) -> u64 {
        let index = self.size();
        let mut hash = leaf;
        let mut level = 0;
        loop {
            if self.levels.len() == level {
                self.levels.push(Vec::new());
            }
            let row = &mut self.levels[level];
            row.push(hash);
            if row.len() % 2 == 1 {
                break;
            }
            hash = node_hash(&row[row.len() - 2], &row[row.len() - 1]);
            level += 1;
        }
        index
    }

    /// Appends an entry (hashed with [`leaf_hash`]) and returns its index.
    pub fn append_entry(&mut self, entry: &[u8]) -> u64 {
        self.append(leaf_hash(entry))
    }

    /// The hash of the leaf at `index`, if there is one.
    pub fn leaf(&self, index: u64) -> Option<Hash> {
        let index = usize::try_from(index).ok()?;
        self.levels.first()?.get(index).copied()
    }

    /// The root of the tree at its current size.
    pub fn root(&self) -> Hash {
        // The tree serves every complete subtree of its own size, so this cannot fail.
        tree_root(self.size(), self).unwrap_or_else(|_| empty_root())
    }

    /// The root of the tree as it was at `size` leaves.
    pub fn root_at(&self, size: u64) -> Result<Hash, TreeError> {
        if size > self.size() {
            return Err(TreeError::IndexOutOfRange { index: size, size: self.size() });
        }
        tree_root(size, self)
    }
}

impl HashReader for MemoryTree {
    fn subtree_hash(&self, level: u8, index: u64) -> Result<Hash, TreeError> {
        usize::try_from(index)
            .ok()
            .and_then(|i| self.levels.get(usize::from(level))?.get(i).copied())
            .ok_or(TreeError::Unavailable { level, index })
    }
}

#[cfg(test)]
mod tests;
