use std::collections::HashMap;

use super::*;
use crate::hash::leaf_hash;
use crate::tree::{MemoryTree, consistency_proof, inclusion_proof, merkle_root, tree_root};

fn tile(level: u8, index: u64, width: u16) -> Tile {
    Tile::new(level, index, width).unwrap()
}

// The index encoding example of C2SP tlog-tiles ("index 1234067 will be encoded as
// x001/x234/067").
#[test]
fn paths_follow_tlog_tiles() {
    assert_eq!(tile_path(0, 1234067, 256).unwrap(), "tile/0/x001/x234/067");
    assert_eq!(tile_path(2, 5, 256).unwrap(), "tile/2/005");
    assert_eq!(tile_path(1, 0, 17).unwrap(), "tile/1/000.p/17");
    assert_eq!(tile_path(63, 1000, 1).unwrap(), "tile/63/x001/000.p/1");
    assert_eq!(tile_path(0, 999, 255).unwrap(), "tile/0/999.p/255");
    assert_eq!(entries_path(1234067, 256).unwrap(), "tile/entries/x001/x234/067");
    assert_eq!(entries_path(273, 112).unwrap(), "tile/entries/273.p/112");
    assert_eq!(tile_path(5, u64::MAX, 256).unwrap(), "tile/5/x018/x446/x744/x073/x709/x551/615");
    assert_eq!(tile(0, 7, 9).entries_path().as_deref(), Some("tile/entries/007.p/9"));
    assert_eq!(tile(1, 7, 9).entries_path(), None);
    assert_eq!(tile_path(64, 0, 256), Err(TileError::Level(64)));
    assert_eq!(tile_path(0, 0, 0), Err(TileError::Width(0)));
    assert_eq!(entries_path(0, 257), Err(TileError::Width(257)));
}

#[test]
fn parses_canonical_paths() {
    assert_eq!(parse_tile_path("tile/0/x001/x234/067"), Ok(TilePath::Hashes(tile(0, 1234067, 256))));
    assert_eq!(parse_tile_path("tile/3/005.p/2"), Ok(TilePath::Hashes(tile(3, 5, 2))));
    assert_eq!(parse_tile_path("tile/63/000"), Ok(TilePath::Hashes(tile(63, 0, 256))));
    assert_eq!(parse_tile_path("tile/entries/x001/x234/067.p/255"), Ok(TilePath::Entries(tile(0, 1234067, 255))));
    assert_eq!(
        parse_tile_path("tile/1/x018/x446/x744/x073/x709/x551/615"),
        Ok(TilePath::Hashes(tile(1, u64::MAX, 256)))
    );
}

#[test]
fn rejects_malformed_and_non_canonical_paths() {
    for bad in [
        "",
        "tile",
        "tile/",
        "tile/0",
        "tile/0/",
        "tiles/0/000",
        "/tile/0/000",
        "tile/00/000",
        "tile/01/000",
        "tile/64/000",
        "tile/255/000",
        "tile/-1/000",
        "tile/+1/000",
        "tile/x/000",
        "tile/0/5",
        "tile/0/05",
        "tile/0/0005",
        "tile/0/x000/005",
        "tile/0/x001",
        "tile/0/001/002",
        "tile/0/x001/x002",
        "tile/0/x001/x02/003",
        "tile/0/xx01/002",
        "tile/0/000/",
        "tile/0/000.p",
        "tile/0/000.p/",
        "tile/0/000.p/0",
        "tile/0/000.p/05",
        "tile/0/000.p/256",
        "tile/0/000.p/1000",
        "tile/0/000.p/+5",
        "tile/0/000.p/5/",
        "tile/0/000.p/5.p/6",
        "tile/0/x018/x446/x744/x073/x709/x551/616",
        "tile/0/x001/x018/x446/x744/x073/x709/x551/615",
        "tile/entries/000.p/256",
        "tile/entries/x000/001",
        "tile/data/000",
        "tile/0/00a",
        "tile/0/0 1",
        "tile/0/٠٠٠",
    ] {
        assert!(parse_tile_path(bad).is_err(), "{bad:?} parsed");
    }
}

#[test]
fn tiles_of_a_tree_of_70000() {
    // The example of C2SP tlog-tiles: 273 full level-0 tiles, one partial level-0 tile of width
    // 112, one full level-1 tile, one partial level-1 tile of width 17, one partial level-2 tile
    // of width 1.
    let size = 70_000;
    for n in 0..273 {
        assert_eq!(tile_at(size, 0, n), Some(tile(0, n, 256)));
    }
    assert_eq!(tile_at(size, 0, 273), Some(tile(0, 273, 112)));
    assert_eq!(tile_at(size, 0, 274), None);
    assert_eq!(tile_at(size, 1, 0), Some(tile(1, 0, 256)));
    assert_eq!(tile_at(size, 1, 1), Some(tile(1, 1, 17)));
    assert_eq!(tile_at(size, 1, 2), None);
    assert_eq!(tile_at(size, 2, 0), Some(tile(2, 0, 1)));
    assert_eq!(tile_at(size, 3, 0), None);
    assert_eq!(tile_at(size, 63, 0), None);
    assert_eq!(tile_at(size, 64, 0), None);
    assert_eq!(tile_at(size, 0, u64::MAX), None);
    assert_eq!(partial_tiles(size), vec![tile(0, 273, 112), tile(1, 1, 17), tile(2, 0, 1)]);
    // "A tree of size 256 will be represented by a full level 0 tile and a partial level 1 tile
    // of width 1."
    assert_eq!(tile_at(256, 0, 0), Some(tile(0, 0, 256)));
    assert_eq!(tile_at(256, 1, 0), Some(tile(1, 0, 1)));
    assert_eq!(partial_tiles(256), vec![tile(1, 0, 1)]);
    assert_eq!(partial_tiles(0), vec![]);
    assert_eq!(tile_at(u64::MAX, 7, 0), Some(tile(7, 0, 255)));
    assert_eq!(tile_at(u64::MAX, 8, 0), None);
}

fn tree_of(size: u64) -> MemoryTree {
    MemoryTree::from_leaf_hashes((0..size).map(|i| leaf_hash(format!("entry {i}").as_bytes())))
}

#[test]
fn tile_bytes_are_subtree_hashes() {
    let tree = tree_of(70_000);
    let leaves: Vec<Hash> = (0..70_000).map(|i| tree.leaf(i).unwrap()).collect();
    let level0 = read_tile(tile(0, 273, 112), &tree).unwrap();
    assert_eq!(level0.len(), 112 * 32);
    assert_eq!(level0[..32], leaves[273 * 256]);
    assert_eq!(level0[111 * 32..], leaves[69_999]);
    let level1 = read_tile(tile(1, 1, 17), &tree).unwrap();
    assert_eq!(level1.len(), 17 * 32);
    for i in 0..17 {
        let start = (256 + i) * 256;
        assert_eq!(level1[i * 32..(i + 1) * 32], merkle_root(&leaves[start..start + 256]), "hash {i}");
    }
    let level2 = read_tile(tile(2, 0, 1), &tree).unwrap();
    assert_eq!(level2, merkle_root(&leaves[..65_536]).to_vec());
    assert!(matches!(read_tile(tile(0, 273, 113), &tree), Err(TileError::Tree(TreeError::Unavailable { .. }))));
    assert!(read_tile(tile(9, 0, 1), &tree).is_err());
}

/// A tile store holding, for each (level, index), the widest tile of the largest tree it saw.
#[derive(Default)]
struct TileStore {
    tiles: HashMap<(u8, u64), Vec<u8>>,
}

impl TileStore {
    fn of(tree: &MemoryTree) -> Self {
        let mut store = Self::default();
        for level in 0..4u8 {
            let mut n = 0;
            while let Some(t) = tile_at(tree.size(), level, n) {
                store.tiles.insert((level, n), read_tile(t, tree).unwrap());
                n += 1;
            }
        }
        store
    }
}

impl TileReader for TileStore {
    fn read_hashes(&self, tile: Tile, first: usize, out: &mut [Hash]) -> Result<(), TreeError> {
        let data = self.tiles.get(&(tile.level(), tile.index())).ok_or(TreeError::Storage(tile.path()))?;
        let len = usize::from(tile.width()) * HASH_SIZE;
        let data = data.get(..len).ok_or_else(|| TreeError::Storage(format!("{} is short", tile.path())))?;
        copy_hashes(tile, data, first, out)
    }
}

#[test]
fn subtree_hashes_from_tiles_match_the_tree() {
    let tree = tree_of(1000);
    let store = TileStore::of(&tree);
    for size in [1, 2, 255, 256, 257, 511, 512, 513, 700, 1000] {
        let reader = TileHashReader::new(size, &store);
        for level in 0..=10u8 {
            for index in 0..(size >> level) {
                assert_eq!(
                    reader.subtree_hash(level, index),
                    tree.subtree_hash(level, index),
                    "({level}, {index}) at {size}"
                );
            }
            let past = size >> level;
            assert_eq!(reader.subtree_hash(level, past), Err(TreeError::Unavailable { level, index: past }));
        }
        assert_eq!(tree_root(size, &reader).unwrap(), tree.root_at(size).unwrap());
    }
    assert!(TileHashReader::new(5, &store).subtree_hash(64, 0).is_err());
}

/// Proofs built from tiles alone are the proofs built from the full tree: every index of every
/// size up to 300, and every consistency pair up to 300 (old sizes in steps, plus the edges).
#[test]
fn proofs_from_tiles_equal_proofs_from_memory() {
    let tree = tree_of(300);
    let store = TileStore::of(&tree);
    for size in 1..=300u64 {
        let reader = TileHashReader::new(size, &store);
        for index in 0..size {
            assert_eq!(inclusion_proof(index, size, &reader), inclusion_proof(index, size, &tree), "{index} in {size}");
        }
        for old in (0..=size).filter(|old| old % 7 == 0 || *old + 2 >= size || old.is_power_of_two()) {
            assert_eq!(consistency_proof(old, size, &reader), consistency_proof(old, size, &tree), "{old} -> {size}");
        }
    }
}

#[test]
fn proofs_from_tiles_of_a_large_tree() {
    let tree = tree_of(70_000);
    let store = TileStore::of(&tree);
    for size in [65_535, 65_536, 65_537, 69_999, 70_000] {
        let reader = TileHashReader::new(size, &store);
        assert_eq!(tree_root(size, &reader), tree.root_at(size));
        for index in [0, 1, 255, 256, 4095, 65_535, size / 3, size - 2, size - 1] {
            assert_eq!(inclusion_proof(index, size, &reader), inclusion_proof(index, size, &tree));
        }
        for old in [1, 256, 300, 65_536, size - 1] {
            assert_eq!(consistency_proof(old, size, &reader), consistency_proof(old, size, &tree));
        }
    }
}

#[test]
fn short_tiles_are_reported() {
    struct Short;
    impl TileReader for Short {
        fn read_hashes(&self, tile: Tile, first: usize, out: &mut [Hash]) -> Result<(), TreeError> {
            copy_hashes(tile, &[0; 40], first, out)
        }
    }
    let reader = TileHashReader::new(1000, Short);
    assert!(reader.subtree_hash(0, 0).is_ok());
    assert!(matches!(reader.subtree_hash(0, 1), Err(TreeError::Storage(_))));
    assert!(matches!(reader.subtree_hash(3, 0), Err(TreeError::Storage(_))));
}

#[test]
fn entry_bundles() {
    let entries: Vec<Vec<u8>> = vec![vec![], b"a".to_vec(), vec![7; 300], vec![1; MAX_ENTRY_SIZE]];
    let bundle = encode_entry_bundle(&entries).unwrap();
    assert_eq!(&bundle[..5], &[0, 0, 0, 1, b'a']);
    assert_eq!(&bundle[5..7], &300u16.to_be_bytes());
    let parsed = parse_entry_bundle(&bundle).unwrap();
    assert_eq!(parsed, entries.iter().map(Vec::as_slice).collect::<Vec<_>>());
    assert_eq!(encode_entry_bundle([vec![0; MAX_ENTRY_SIZE + 1]]), Err(TileError::EntryTooLarge(65_536)));
    let mut buf = Vec::new();
    assert_eq!(append_bundle_entry(&mut buf, &[0; 70_000]), Err(TileError::EntryTooLarge(70_000)));
    assert!(buf.is_empty());
    assert_eq!(encode_entry_bundle(vec![b"x"; 256]).map(|b| b.len()), Ok(256 * 3));
    assert_eq!(encode_entry_bundle(vec![b"x"; 257]), Err(TileError::TooManyEntries));
    assert_eq!(parse_entry_bundle(&[0, 1, 9].repeat(257)), Err(TileError::TooManyEntries));
    assert_eq!(parse_entry_bundle(&[]), Ok(vec![]));
    for truncated in [&[0u8][..], &[0, 2, 1], &[0, 1, 1, 0]] {
        assert_eq!(parse_entry_bundle(truncated), Err(TileError::TruncatedBundle), "{truncated:?}");
    }
}

mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn paths_round_trip(level in 0u8..=63, index in any::<u64>(), width in 1u16..=256) {
            let t = tile(level, index, width);
            prop_assert_eq!(parse_tile_path(&t.path()), Ok(TilePath::Hashes(t)));
            let entries = entries_path(index, width).unwrap();
            prop_assert_eq!(parse_tile_path(&entries), Ok(TilePath::Entries(tile(0, index, width))));
        }

        #[test]
        fn parser_never_panics(path in "tile/[0-9a-z.p/x]{0,40}") {
            let _ = parse_tile_path(&path);
        }

        #[test]
        fn bundles_round_trip(entries in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..600), 0..40)) {
            let bundle = encode_entry_bundle(&entries).unwrap();
            let parsed = parse_entry_bundle(&bundle).unwrap();
            prop_assert_eq!(parsed, entries.iter().map(Vec::as_slice).collect::<Vec<_>>());
        }
    }
}
