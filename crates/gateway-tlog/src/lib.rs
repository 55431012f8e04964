//! Transparency-log primitives of the C2SP family over RFC 6962 / RFC 9162 Merkle trees.
//!
//! - [`hash`]: leaf, node and empty-tree hashes (RFC 6962 section 2.1, SHA-256).
//! - [`tree`]: tree roots, inclusion and consistency proofs built from complete-subtree hashes
//!   (a [`HashReader`]), and their verification (RFC 9162 sections 2.1.3 and 2.1.4);
//!   [`MemoryTree`] keeps a whole tree in memory.
//! - [`tile`]: c2sp.org/tlog-tiles paths, tiles, entry bundles, and a [`HashReader`] over a
//!   store that holds only tiles.
//! - [`note`]: c2sp.org/signed-note, Ed25519 signers and verifiers, `vkey`s.
//! - [`checkpoint`]: c2sp.org/tlog-checkpoint bodies.
//! - [`cosignature`]: c2sp.org/tlog-cosignature, Ed25519 `cosignature/v1`.
//! - [`policy`]: c2sp.org/tlog-policy files: logs, witnesses, nested k-of-n groups, quorum.
//! - [`proof`]: c2sp.org/tlog-proof, offline proofs of inclusion checked against a policy.
//! - [`witness`]: c2sp.org/tlog-witness, the `add-checkpoint` protocol: requests, the checks a
//!   witness makes against its recorded [`WitnessState`] before cosigning, and the answers.
//!
//! The crate is pure: no I/O, no clock, no randomness (keys come from the caller). It knows
//! nothing of the gateway's other crates.
//!
//! A log signs a checkpoint, witnesses cosign it, and a verifier holding only a policy checks a
//! proof of inclusion offline:
//!
//! ```
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use gateway_tlog::{Checkpoint, Cosigner, MemoryTree, Note, Policy, Signer, TlogProof, inclusion_proof};
//!
//! let mut tree = MemoryTree::new();
//! for entry in [&b"first"[..], b"second", b"third"] {
//!     tree.append_entry(entry);
//! }
//!
//! // The log signs a checkpoint; two witnesses cosign it.
//! let log = Signer::from_seed("example.com/log", &[1; 32])?;
//! let witnesses = [Cosigner::from_seed("w1.example", &[2; 32])?, Cosigner::from_seed("w2.example", &[3; 32])?];
//! let checkpoint = Checkpoint::new("example.com/log", tree.size(), tree.root())?;
//! let mut note = Note::new(checkpoint.to_text())?;
//! note.sign(&log)?;
//! for witness in &witnesses {
//!     note.add_signature(witness.cosign(&checkpoint, 1_750_000_000)?)?;
//! }
//!
//! // A proof that "second" is entry 1, as text.
//! let proof = TlogProof::new(1, inclusion_proof(1, tree.size(), &tree)?, note)?;
//! let text = proof.to_text();
//!
//! // A verifier holding only the policy checks it offline.
//! let policy = Policy::parse(
//!     format!(
//!         "log {}\nwitness a {}\nwitness b {}\ngroup both all a b\nquorum both\n",
//!         log.vkey(),
//!         witnesses[0].vkey(),
//!         witnesses[1].vkey()
//!     )
//!     .as_bytes(),
//! )?;
//! let verified = TlogProof::parse(text.as_bytes())?.verify(b"second", &policy)?;
//! assert_eq!(verified.checkpoint.size(), 3);
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

pub mod checkpoint;
pub mod cosignature;
pub mod hash;
pub mod note;
pub mod policy;
pub mod proof;
pub mod tile;
pub mod tree;
pub mod witness;

pub use checkpoint::{Checkpoint, CheckpointError};
pub use cosignature::{CosignatureError, CosignatureVerifier, Cosigner};
pub use hash::{Hash, empty_root, leaf_hash, node_hash};
pub use note::{Note, NoteError, NoteVerifier, Signature, Signer, Verifier, VerifierKey};
pub use policy::{CheckpointVerifyError, Policy, PolicyError, VerifiedCheckpoint};
pub use proof::{TlogProof, TlogProofError};
pub use tile::{Tile, TileError, TileHashReader, TilePath, TileReader};
pub use tree::{
    HashReader, MemoryTree, TreeError, VerifyError, consistency_proof, inclusion_proof, merkle_root, tree_root,
    verify_consistency, verify_inclusion,
};
pub use witness::{
    AddCheckpointRequest, KnownLogs, LogState, StateUpdate, WitnessError, WitnessState, WitnessStateError,
    add_checkpoint, add_checkpoint_request, parse_add_checkpoint_response, parse_conflict_size,
};
