//! C2SP tlog-proof: an offline-verifiable proof that an entry is in a log, witnessed.
//!
//! ```text
//! c2sp.org/tlog-proof@v1
//! [extra <base64 opaque data>]
//! index <leaf index, decimal>
//! <inclusion proof hash, base64>      (zero or more, the leaf's sibling first)
//!
//! <the signed checkpoint note, verbatim>
//! ```
//!
//! Verifying a proof against an entry and a [`Policy`] checks that the entry's leaf hash is
//! included at the index in the checkpoint's tree, that a log of the policy signed the
//! checkpoint, and that the witnesses' cosignatures satisfy the policy's quorum. The `extra` data
//! is not authenticated.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use crate::checkpoint::{Checkpoint, CheckpointError, parse_size};
use crate::hash::{Hash, hash_from_base64, leaf_hash, push_hash_lines};
use crate::note::{Note, NoteError};
use crate::policy::{CheckpointVerifyError, Policy, VerifiedCheckpoint};
use crate::tree::{VerifyError, verify_inclusion};

/// The first line of a proof.
pub const TLOG_PROOF_HEADER: &str = "c2sp.org/tlog-proof@v1";

/// The most hashes an inclusion proof can have (a tree of at most 2^64 − 1 leaves).
pub const MAX_PROOF_HASHES: usize = 64;

/// A malformed proof, or one that does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TlogProofError {
    /// The proof text does not follow tlog-proof.
    #[error("malformed tlog-proof: {0}")]
    Malformed(&'static str),
    /// The checkpoint is not a well-formed signed note.
    #[error("malformed checkpoint note: {0}")]
    Note(#[from] NoteError),
    /// The note's text is not a checkpoint.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// The inclusion proof does not lead from the entry to the checkpoint's root.
    #[error("inclusion proof: {0}")]
    Inclusion(#[from] VerifyError),
    /// The policy does not accept the checkpoint.
    #[error("checkpoint: {0}")]
    Policy(#[from] CheckpointVerifyError),
}

/// A tlog-proof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlogProof {
    extra: Option<Vec<u8>>,
    index: u64,
    inclusion: Vec<Hash>,
    note: Note,
    checkpoint: Checkpoint,
}

/// The next newline-terminated line of `text`, and the rest.
fn next_line(text: &str) -> Result<(&str, &str), TlogProofError> {
    text.split_once('\n').ok_or(TlogProofError::Malformed("truncated"))
}

impl TlogProof {
    /// A proof that the leaf at `index` is in the tree of `signed_checkpoint`, whose note must
    /// carry at least one signature and whose text must be a checkpoint.
    pub fn new(index: u64, inclusion: Vec<Hash>, signed_checkpoint: Note) -> Result<Self, TlogProofError> {
        if inclusion.len() > MAX_PROOF_HASHES {
            return Err(TlogProofError::Malformed("more than 64 proof hashes"));
        }
        if signed_checkpoint.signatures().is_empty() {
            return Err(TlogProofError::Malformed("the checkpoint is not signed"));
        }
        let checkpoint = Checkpoint::parse(signed_checkpoint.text())?;
        Ok(Self { extra: None, index, inclusion, note: signed_checkpoint, checkpoint })
    }

    /// The proof with opaque extra data (written as the `extra` line).
    pub fn with_extra(mut self, extra: Vec<u8>) -> Self {
        self.extra = Some(extra);
        self
    }

    /// Parses a proof: the header line, an optional `extra` line, the `index` line (decimal
    /// without leading zeros), up to 64 base64 hash lines, an empty line, then the signed
    /// checkpoint note, which must parse as a signed note and a checkpoint. Signatures are not
    /// verified here.
    pub fn parse(text: &[u8]) -> Result<Self, TlogProofError> {
        let text = std::str::from_utf8(text).map_err(|_| TlogProofError::Malformed("not valid UTF-8"))?;
        let (header, rest) = next_line(text)?;
        if header != TLOG_PROOF_HEADER {
            return Err(TlogProofError::Malformed("the first line is not c2sp.org/tlog-proof@v1"));
        }
        let (mut line, mut rest) = next_line(rest)?;
        let extra = match line.strip_prefix("extra ") {
            Some(encoded) => {
                let extra =
                    STANDARD.decode(encoded).map_err(|_| TlogProofError::Malformed("extra data is not base64"))?;
                (line, rest) = next_line(rest)?;
                Some(extra)
            }
            None => None,
        };
        let index = line
            .strip_prefix("index ")
            .and_then(parse_size)
            .ok_or(TlogProofError::Malformed("no index line with a canonical decimal index"))?;
        let mut inclusion = Vec::new();
        loop {
            let (line, after) = next_line(rest)?;
            rest = after;
            if line.is_empty() {
                break;
            }
            if inclusion.len() == MAX_PROOF_HASHES {
                return Err(TlogProofError::Malformed("more than 64 proof hashes"));
            }
            inclusion.push(
                hash_from_base64(line).ok_or(TlogProofError::Malformed("a proof hash is not base64 of 32 bytes"))?,
            );
        }
        let note = Note::parse(rest.as_bytes())?;
        let checkpoint = Checkpoint::parse(note.text())?;
        Ok(Self { extra, index, inclusion, note, checkpoint })
    }

    /// The unauthenticated extra data, if any.
    pub fn extra(&self) -> Option<&[u8]> {
        self.extra.as_deref()
    }

    /// The index of the entry in the log.
    pub fn index(&self) -> u64 {
        self.index
    }

    /// The inclusion proof, the leaf's sibling first.
    pub fn inclusion(&self) -> &[Hash] {
        &self.inclusion
    }

    /// The signed checkpoint note.
    pub fn note(&self) -> &Note {
        &self.note
    }

    /// The checkpoint (not yet verified).
    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    /// The proof text.
    pub fn to_text(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::with_capacity(64 + 45 * self.inclusion.len() + self.note.text().len() + 256);
        out.push_str(TLOG_PROOF_HEADER);
        out.push('\n');
        if let Some(extra) = &self.extra {
            out.push_str("extra ");
            STANDARD.encode_string(extra, &mut out);
            out.push('\n');
        }
        let _ = writeln!(out, "index {}", self.index);
        push_hash_lines(&self.inclusion, &mut out);
        out.push('\n');
        let _ = write!(out, "{}", self.note);
        out
    }

    /// Verifies the proof for `entry` under `policy`: see [`verify`].
    pub fn verify(&self, entry: &[u8], policy: &Policy) -> Result<VerifiedCheckpoint, TlogProofError> {
        self.verify_leaf_hash(&leaf_hash(entry), policy)
    }

    /// Verifies the proof for the leaf with hash `leaf` under `policy`.
    pub fn verify_leaf_hash(&self, leaf: &Hash, policy: &Policy) -> Result<VerifiedCheckpoint, TlogProofError> {
        verify_inclusion(self.index, self.checkpoint.size(), leaf, &self.inclusion, self.checkpoint.root())?;
        Ok(policy.verify_checkpoint(&self.note)?)
    }
}

impl fmt::Display for TlogProof {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_text())
    }
}

/// Verifies a proof that `entry` is in a log under `policy`: the entry's leaf hash
/// (`SHA-256(0x00 ‖ entry)`) is included at the proof's index in the checkpoint's tree, the
/// checkpoint is signed by a log of the policy named after its origin, and the witnesses'
/// cosignatures satisfy the policy's quorum. Returns the accepted checkpoint.
pub fn verify(proof: &TlogProof, entry: &[u8], policy: &Policy) -> Result<VerifiedCheckpoint, TlogProofError> {
    proof.verify(entry, policy)
}

#[cfg(test)]
mod tests;
