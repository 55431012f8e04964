//! RFC 6962 / RFC 9162 (section 2.1.1) Merkle tree hashing with SHA-256.
//!
//! Leaves and interior nodes are hashed with distinct one-byte prefixes, so a leaf can never be
//! passed off as a node (second-preimage resistance), and the empty tree hashes to SHA-256 of the
//! empty string.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use sha2::{Digest, Sha256};

/// The size in bytes of every hash in a tree.
pub const HASH_SIZE: usize = 32;

/// A SHA-256 hash: a leaf hash, an interior node hash or a tree root.
pub type Hash = [u8; HASH_SIZE];

/// The hash of a log entry: `SHA-256(0x00 ‖ entry)`.
pub fn leaf_hash(entry: &[u8]) -> Hash {
    let mut hasher = Sha256::new();
    hasher.update([0x00]);
    hasher.update(entry);
    hasher.finalize().into()
}

/// The hash of an interior node: `SHA-256(0x01 ‖ left ‖ right)`.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut buf = [0u8; 1 + 2 * HASH_SIZE];
    buf[0] = 0x01;
    buf[1..1 + HASH_SIZE].copy_from_slice(left);
    buf[1 + HASH_SIZE..].copy_from_slice(right);
    Sha256::digest(buf).into()
}

/// The root of the empty tree: `SHA-256("")`.
pub fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

/// A hash in standard, padded base64 (RFC 4648 section 4), as checkpoints and proofs write it.
pub fn hash_to_base64(hash: &Hash) -> String {
    STANDARD.encode(hash)
}

/// Appends `hashes` to `out` in standard, padded base64, one a line, as proofs, consistency
/// proofs and `add-checkpoint` requests list them: without a string per hash.
pub fn push_hash_lines(hashes: &[Hash], out: &mut String) {
    out.reserve(45 * hashes.len());
    for hash in hashes {
        STANDARD.encode_string(hash, out);
        out.push('\n');
    }
}

/// A hash read from standard, padded base64; `None` unless the text is canonical base64 of
/// exactly 32 bytes.
pub fn hash_from_base64(text: &str) -> Option<Hash> {
    // 32 bytes are always 44 characters; checking first bounds the work on hostile input.
    if text.len() != 44 {
        return None;
    }
    let bytes = STANDARD.decode(text).ok()?;
    bytes.try_into().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(hex: &str) -> Hash {
        hex::decode(hex).unwrap().try_into().unwrap()
    }

    // Vectors from transparency-dev/merkle, rfc6962/rfc6962_test.go (TestRFC6962Hasher).
    #[test]
    fn rfc6962_hasher_vectors() {
        assert_eq!(empty_root(), h("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
        assert_eq!(leaf_hash(b""), h("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"));
        assert_eq!(leaf_hash(b"L123456"), h("395aa064aa4c29f7010acfe3f25db9485bbd4b91897b6ad7ad547639252b4d56"));
        assert_ne!(empty_root(), leaf_hash(b""));
    }

    #[test]
    fn hash_lines_are_each_hashs_base64_after_what_was_there() {
        let hashes = [leaf_hash(b"a"), leaf_hash(b"b"), empty_root()];
        let mut out = String::from("old 3\n");
        push_hash_lines(&hashes, &mut out);
        let expected: String = hashes.iter().map(|h| format!("{}\n", hash_to_base64(h))).collect();
        assert_eq!(out, format!("old 3\n{expected}"));
        let mut none = String::new();
        push_hash_lines(&[], &mut none);
        assert_eq!(none, "");
    }

    #[test]
    fn node_hash_is_prefixed_and_ordered() {
        let (a, b) = (leaf_hash(b"Hello"), leaf_hash(b"World"));
        let mut preimage = Vec::new();
        preimage.extend_from_slice(&a);
        preimage.extend_from_slice(&b);
        assert_ne!(node_hash(&a, &b), leaf_hash(&preimage));
        assert_ne!(node_hash(&a, &b), node_hash(&b, &a));
        let mut manual = Sha256::new();
        manual.update([1u8]);
        manual.update(a);
        manual.update(b);
        assert_eq!(node_hash(&a, &b), Hash::from(manual.finalize()));
    }

    #[test]
    fn base64_round_trip_and_strictness() {
        let hash = leaf_hash(b"x");
        let text = hash_to_base64(&hash);
        assert_eq!(hash_from_base64(&text), Some(hash));
        assert_eq!(hash_from_base64(&text[..43]), None);
        assert_eq!(hash_from_base64(&STANDARD.encode([0u8; 31])), None);
        assert_eq!(hash_from_base64(&STANDARD.encode([0u8; 33])), None);
        // Non-canonical trailing bits are rejected: 32 bytes leave two zero bits in the 43rd character.
        assert_eq!(hash_from_base64(&format!("{}A=", "A".repeat(42))), Some([0u8; 32]));
        assert_eq!(hash_from_base64(&format!("{}B=", "A".repeat(42))), None);
        assert_eq!(hash_from_base64(&format!("{}AA", "A".repeat(42))), None);
    }
}
