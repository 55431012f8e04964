use super::*;

fn h(hex: &str) -> Hash {
    hex::decode(hex).unwrap().try_into().unwrap()
}

// The eight leaves and the roots of the trees of sizes 1 to 8 built from them, and the known
// inclusion and consistency proofs, from transparency-dev/merkle, proof/verify_test.go (`leaves`,
// `roots`, `inclusionProofs`, `consistencyProofs`; the vectors of the RFC 6962 reference tests).
const LEAVES: [&str; 8] =
    ["", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f"];

const ROOTS: [&str; 8] = [
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
];

/// (leaf index, tree size, proof): verify_test.go lists leaves 1-based; these are 0-based.
const INCLUSION: [(u64, u64, &[&str]); 5] = [
    (0, 1, &[]),
    (
        0,
        8,
        &[
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        5,
        8,
        &[
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (2, 3, &["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (
        1,
        5,
        &[
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
];

/// (old size, new size, proof), from the same file.
const CONSISTENCY: [(u64, u64, &[&str]); 5] = [
    (1, 1, &[]),
    (
        1,
        8,
        &[
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        6,
        8,
        &[
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (
        2,
        5,
        &[
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
    (
        6,
        7,
        &[
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
];

fn vector_tree() -> MemoryTree {
    MemoryTree::from_leaf_hashes(LEAVES.iter().map(|l| leaf_hash(&hex::decode(l).unwrap())))
}

fn hashes(list: &[&str]) -> Vec<Hash> {
    list.iter().map(|x| h(x)).collect()
}

fn tree_of(size: u64) -> MemoryTree {
    MemoryTree::from_leaf_hashes((0..size).map(|i| leaf_hash(format!("leaf {i}").as_bytes())))
}

#[test]
fn roots_of_every_prefix_of_the_vector_tree() {
    let tree = vector_tree();
    let leaves: Vec<Hash> = (0..8).map(|i| tree.leaf(i).unwrap()).collect();
    for (size, root) in (1..=8u64).zip(ROOTS) {
        assert_eq!(merkle_root(&leaves[..size as usize]), h(root), "merkle_root of size {size}");
        assert_eq!(tree.root_at(size).unwrap(), h(root), "tree_root of size {size}");
        assert_eq!(MemoryTree::from_leaf_hashes(leaves[..size as usize].iter().copied()).root(), h(root));
    }
    assert_eq!(tree.root(), h(ROOTS[7]));
    assert_eq!(MemoryTree::new().root(), empty_root());
    assert_eq!(merkle_root(&[]), empty_root());
    assert!(tree.root_at(9).is_err());
}

#[test]
fn known_inclusion_proofs_are_generated_and_verify() {
    let tree = vector_tree();
    for (index, size, proof) in INCLUSION {
        let proof = hashes(proof);
        assert_eq!(inclusion_proof(index, size, &tree).unwrap(), proof, "proof of {index} in {size}");
        let leaf = tree.leaf(index).unwrap();
        let root = h(ROOTS[size as usize - 1]);
        assert_eq!(verify_inclusion(index, size, &leaf, &proof, &root), Ok(()));
        // The probes of corruptInclusionProof in verify_test.go.
        let wrong_leaf = leaf_hash(b"WrongLeaf");
        assert!(verify_inclusion(index.wrapping_sub(1), size, &leaf, &proof, &root).is_err());
        assert!(verify_inclusion(index + 1, size, &leaf, &proof, &root).is_err());
        assert!(verify_inclusion(index ^ 2, size, &leaf, &proof, &root).is_err());
        assert!(verify_inclusion(index, size * 2, &leaf, &proof, &root).is_err());
        assert!(verify_inclusion(index, size / 2, &leaf, &proof, &root).is_err());
        assert!(verify_inclusion(index, size, &wrong_leaf, &proof, &root).is_err());
        assert!(verify_inclusion(index, size, &leaf, &proof, &empty_root()).is_err());
        let mut longer = proof.clone();
        longer.push(root);
        assert!(verify_inclusion(index, size, &leaf, &longer, &root).is_err());
        let mut preceded = vec![root];
        preceded.extend_from_slice(&proof);
        assert!(verify_inclusion(index, size, &leaf, &preceded, &root).is_err());
        if !proof.is_empty() {
            assert!(verify_inclusion(index, size, &leaf, &proof[..proof.len() - 1], &root).is_err());
        }
    }
}

#[test]
fn known_consistency_proofs_are_generated_and_verify() {
    let tree = vector_tree();
    for (old, new, proof) in CONSISTENCY {
        let proof = hashes(proof);
        assert_eq!(consistency_proof(old, new, &tree).unwrap(), proof, "proof {old} -> {new}");
        let (old_root, new_root) = (h(ROOTS[old as usize - 1]), h(ROOTS[new as usize - 1]));
        assert_eq!(verify_consistency(old, new, &old_root, &new_root, &proof), Ok(()));
        if proof.is_empty() {
            continue;
        }
        // The probes of corruptConsistencyProof in verify_test.go.
        let wrong = leaf_hash(b"WrongRoot");
        assert!(verify_consistency(old - 1, new, &old_root, &new_root, &proof).is_err());
        assert!(verify_consistency(old + 1, new, &old_root, &new_root, &proof).is_err());
        assert!(verify_consistency(old ^ 2, new, &old_root, &new_root, &proof).is_err());
        assert!(verify_consistency(old, new * 2, &old_root, &new_root, &proof).is_err());
        assert!(verify_consistency(old, new / 2, &old_root, &new_root, &proof).is_err());
        assert!(verify_consistency(old, new, &wrong, &new_root, &proof).is_err());
        assert!(verify_consistency(old, new, &old_root, &wrong, &proof).is_err());
        assert!(verify_consistency(old, new, &new_root, &old_root, &proof).is_err());
        assert!(verify_consistency(old, new, &old_root, &new_root, &[]).is_err());
        assert!(verify_consistency(old, new, &old_root, &new_root, &proof[..proof.len() - 1]).is_err());
        let mut preceded = vec![proof[0]];
        preceded.extend_from_slice(&proof);
        assert!(verify_consistency(old, new, &old_root, &new_root, &preceded).is_err());
    }
}

#[test]
fn trivial_consistency_cases() {
    let (a, b) = (leaf_hash(b"a"), leaf_hash(b"b"));
    assert_eq!(verify_consistency(0, 0, &empty_root(), &empty_root(), &[]), Ok(()));
    assert_eq!(verify_consistency(0, 5, &empty_root(), &a, &[]), Ok(()));
    assert_eq!(verify_consistency(0, 5, &a, &a, &[]), Err(VerifyError::RootMismatch));
    assert_eq!(verify_consistency(3, 3, &a, &a, &[]), Ok(()));
    assert_eq!(verify_consistency(3, 3, &a, &b, &[]), Err(VerifyError::RootMismatch));
    assert!(verify_consistency(3, 3, &a, &a, &[a]).is_err());
    assert!(verify_consistency(0, 1, &empty_root(), &a, &[a]).is_err());
    assert_eq!(verify_consistency(2, 1, &a, &b, &[]), Err(VerifyError::SizeOrder { old: 2, new: 1 }));
    assert_eq!(verify_consistency(1, 2, &a, &b, &[]), Err(VerifyError::ProofLength { expected: 1, actual: 0 }));
    let tree = tree_of(4);
    assert_eq!(consistency_proof(0, 4, &tree).unwrap(), Vec::<Hash>::new());
    assert_eq!(consistency_proof(4, 4, &tree).unwrap(), Vec::<Hash>::new());
    assert_eq!(consistency_proof(5, 4, &tree), Err(TreeError::SizeOrder { old: 5, new: 4 }));
    assert_eq!(inclusion_proof(4, 4, &tree), Err(TreeError::IndexOutOfRange { index: 4, size: 4 }));
    assert!(consistency_proof(2, 5, &tree).is_err(), "the tree holds only 4 leaves");
}

#[test]
fn trivial_inclusion_cases() {
    let leaf = leaf_hash(b"data");
    assert_eq!(verify_inclusion(0, 1, &leaf, &[], &leaf), Ok(()));
    assert_eq!(verify_inclusion(0, 1, &leaf, &[], &empty_root()), Err(VerifyError::RootMismatch));
    for (index, size) in [(0, 0), (1, 0), (2, 1), (1, 1)] {
        assert_eq!(verify_inclusion(index, size, &leaf, &[], &leaf), Err(VerifyError::IndexOutOfRange { index, size }));
    }
    assert_eq!(verify_inclusion(0, 2, &leaf, &[], &leaf), Err(VerifyError::ProofLength { expected: 1, actual: 0 }));
    // Sizes with the top bit set once overflowed a shift in the length check (found by proptest).
    let long = vec![leaf; 65];
    assert!(verify_inclusion(0, (1 << 63) + 1, &leaf, &long, &leaf).is_err());
    assert!(verify_inclusion(u64::MAX - 1, u64::MAX, &leaf, &long, &leaf).is_err());
    assert!(verify_consistency(3, u64::MAX, &leaf, &leaf, &long).is_err());
    assert!(verify_consistency(1, (1 << 63) + 1, &leaf, &leaf, &long).is_err());
}

/// Every index of every size up to 300: the generated proof verifies, and flipping any one bit
/// of any one of its hashes, or of the leaf or root, makes it fail.
#[test]
fn exhaustive_inclusion_up_to_300() {
    let tree = tree_of(300);
    for size in 1..=300u64 {
        let root = tree.root_at(size).unwrap();
        for index in 0..size {
            let leaf = tree.leaf(index).unwrap();
            let proof = inclusion_proof(index, size, &tree).unwrap();
            assert_eq!(verify_inclusion(index, size, &leaf, &proof, &root), Ok(()), "index {index} size {size}");
            for i in 0..proof.len() {
                let mut bad = proof.clone();
                let bit = (index as usize + i) % 256;
                bad[i][bit / 8] ^= 1 << (bit % 8);
                assert_eq!(verify_inclusion(index, size, &leaf, &bad, &root), Err(VerifyError::RootMismatch));
            }
            let mut bad_leaf = leaf;
            bad_leaf[31] ^= 0x80;
            assert!(verify_inclusion(index, size, &bad_leaf, &proof, &root).is_err());
            if size > 1 {
                assert!(verify_inclusion((index + 1) % size, size, &leaf, &proof, &root).is_err());
            }
        }
    }
}

/// Every pair of sizes `old ≤ new ≤ 130`: the generated proof verifies; dropping, adding or
/// altering a hash, or swapping in another root, makes it fail.
#[test]
fn exhaustive_consistency_up_to_130() {
    let tree = tree_of(130);
    let roots: Vec<Hash> = (0..=130).map(|n| tree.root_at(n).unwrap()).collect();
    for new in 0..=130u64 {
        for old in 0..=new {
            let (old_root, new_root) = (roots[old as usize], roots[new as usize]);
            let proof = consistency_proof(old, new, &tree).unwrap();
            assert_eq!(verify_consistency(old, new, &old_root, &new_root, &proof), Ok(()), "{old} -> {new}");
            if old == 0 || old == new {
                assert!(proof.is_empty());
                if old < new {
                    assert!(verify_consistency(old, new, &new_root, &new_root, &proof).is_err());
                }
                continue;
            }
            for i in 0..proof.len() {
                let mut bad = proof.clone();
                bad[i][(i + old as usize) % 32] ^= 0x10;
                assert!(verify_consistency(old, new, &old_root, &new_root, &bad).is_err(), "{old} -> {new} [{i}]");
            }
            assert!(verify_consistency(old, new, &old_root, &new_root, &proof[1..]).is_err());
            let mut longer = proof.clone();
            longer.push(new_root);
            assert!(verify_consistency(old, new, &old_root, &new_root, &longer).is_err());
            assert!(verify_consistency(old, new, &roots[old as usize - 1], &new_root, &proof).is_err());
            assert!(verify_consistency(old, new, &old_root, &roots[new as usize - 1], &proof).is_err());
            if new < 130 {
                assert!(verify_consistency(old, new + 1, &old_root, &roots[new as usize + 1], &proof).is_err());
            }
        }
    }
}

/// A reader that panics on any request for a subtree that is not complete within `size`, and
/// otherwise defers to a memory tree: proofs must only ask for complete subtrees of their tree.
struct StrictReader<'a> {
    tree: &'a MemoryTree,
    size: u64,
}

impl HashReader for StrictReader<'_> {
    fn subtree_hash(&self, level: u8, index: u64) -> Result<Hash, TreeError> {
        assert!(
            level < 64 && (index + 1) << level <= self.size,
            "incomplete subtree ({level}, {index}) of size {}",
            self.size
        );
        self.tree.subtree_hash(level, index)
    }
}

#[test]
fn proofs_only_read_complete_subtrees_of_their_tree() {
    let tree = tree_of(70);
    for size in 1..=70 {
        let reader = StrictReader { tree: &tree, size };
        assert_eq!(tree_root(size, &reader).unwrap(), tree.root_at(size).unwrap());
        for index in 0..size {
            inclusion_proof(index, size, &reader).unwrap();
        }
        for old in 0..=size {
            consistency_proof(old, size, &reader).unwrap();
        }
    }
}

#[test]
fn memory_tree_keeps_complete_subtrees() {
    let mut tree = MemoryTree::new();
    for i in 0..37u64 {
        assert_eq!(tree.append_entry(&i.to_be_bytes()), i);
    }
    assert_eq!(tree.size(), 37);
    let leaves: Vec<Hash> = (0..37u64).map(|i| leaf_hash(&i.to_be_bytes())).collect();
    for level in 0..6u8 {
        let width = 1usize << level;
        for index in 0..(37 / width) as u64 {
            let start = index as usize * width;
            assert_eq!(tree.subtree_hash(level, index).unwrap(), merkle_root(&leaves[start..start + width]));
        }
        let past = (37 / width) as u64;
        assert_eq!(tree.subtree_hash(level, past), Err(TreeError::Unavailable { level, index: past }));
    }
    assert_eq!(tree.root(), merkle_root(&leaves));
    assert_eq!(tree.leaf(37), None);
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        #[test]
        fn large_trees_prove_and_verify(size in 1u64..5000, seed in any::<u64>()) {
            let tree = tree_of(size);
            let index = seed % size;
            let old = seed.rotate_left(17) % (size + 1);
            let root = tree.root();
            let proof = inclusion_proof(index, size, &tree).unwrap();
            prop_assert_eq!(verify_inclusion(index, size, &tree.leaf(index).unwrap(), &proof, &root), Ok(()));
            let consistency = consistency_proof(old, size, &tree).unwrap();
            let old_root = tree.root_at(old).unwrap();
            prop_assert_eq!(verify_consistency(old, size, &old_root, &root, &consistency), Ok(()));
        }

        #[test]
        fn verification_never_panics(index in any::<u64>(), size in any::<u64>(), old in any::<u64>(), len in 0usize..70) {
            let proof = vec![[7u8; 32]; len];
            let h = leaf_hash(b"x");
            let _ = verify_inclusion(index, size, &h, &proof, &h);
            let _ = verify_consistency(old, size, &h, &h, &proof);
        }
    }
}

/// A reader that keeps the range hashes it is offered and counts the subtree hashes it serves.
struct KeepingReader<'a> {
    tree: &'a MemoryTree,
    ranges: std::cell::RefCell<std::collections::HashMap<(u64, u64), Hash>>,
    reads: std::cell::Cell<usize>,
}

impl HashReader for KeepingReader<'_> {
    fn subtree_hash(&self, level: u8, index: u64) -> Result<Hash, TreeError> {
        self.reads.set(self.reads.get() + 1);
        self.tree.subtree_hash(level, index)
    }

    fn kept_range(&self, lo: u64, hi: u64) -> Option<Hash> {
        self.ranges.borrow().get(&(lo, hi)).copied()
    }

    fn keep_range(&self, lo: u64, hi: u64, hash: &Hash) {
        assert!(!(hi - lo).is_power_of_two(), "[{lo}, {hi}) is one complete subtree: nothing to keep");
        self.ranges.borrow_mut().insert((lo, hi), *hash);
    }
}

/// The range hashes a reader is offered are the ranges' own roots; proofs built with them kept
/// are the same proofs; and a second proof against the same size folds nothing again.
#[test]
fn kept_range_hashes_are_the_ranges_roots_and_change_no_proof() {
    let tree = tree_of(300);
    let leaves: Vec<Hash> = (0..300).map(|i| tree.leaf(i).unwrap()).collect();
    // One reader over trees of several sizes (the same leaves, grown), as a process keeps the
    // ranges of every size it proved against; each size's right edge, seen from leaf 0, is
    // several complete subtrees wide.
    let reader = KeepingReader { tree: &tree, ranges: Default::default(), reads: std::cell::Cell::new(0) };
    for size in [7u64, 100, 255, 299, 300] {
        for index in 0..size {
            assert_eq!(inclusion_proof(index, size, &reader).unwrap(), inclusion_proof(index, size, &tree).unwrap());
        }
        for old in 0..=size {
            assert_eq!(consistency_proof(old, size, &reader).unwrap(), consistency_proof(old, size, &tree).unwrap());
        }
        assert!(reader.ranges.borrow().keys().any(|&(_, hi)| hi == size), "size {size} has a right edge to fold");
        for (&(lo, hi), hash) in reader.ranges.borrow().iter() {
            assert_eq!(*hash, merkle_root(&leaves[lo as usize..hi as usize]), "[{lo}, {hi})");
        }
        // Leaf 0's right edge is kept: asking again reads one hash per complete sibling and
        // folds nothing.
        reader.reads.set(0);
        let proof = inclusion_proof(0, size, &reader).unwrap();
        assert_eq!(reader.reads.get(), proof.len() - 1, "size {size}: the edge came from the kept ranges");
    }
    // A smaller tree asked for again after larger ones: still its own proofs, its edge kept.
    for index in 0..100 {
        assert_eq!(inclusion_proof(index, 100, &reader).unwrap(), inclusion_proof(index, 100, &tree).unwrap());
    }
    // A kept range is used as given: a wrong one gives a proof that does not verify.
    let (size, index) = (300u64, 5u64);
    let reader = KeepingReader { tree: &tree, ranges: Default::default(), reads: std::cell::Cell::new(0) };
    inclusion_proof(index, size, &reader).unwrap();
    for hash in reader.ranges.borrow_mut().values_mut() {
        hash[0] ^= 1;
    }
    let proof = inclusion_proof(index, size, &reader).unwrap();
    let root = tree.root_at(size).unwrap();
    assert_eq!(verify_inclusion(index, size, &leaves[index as usize], &proof, &root), Err(VerifyError::RootMismatch));
}
