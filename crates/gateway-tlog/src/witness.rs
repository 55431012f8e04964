//! C2SP tlog-witness: the `add-checkpoint` protocol by which a log obtains a witness's
//! cosignature on a new checkpoint, for both sides, without I/O.
//!
//! The client (usually the log) `POST`s to `<submission prefix>/add-checkpoint` a body of
//!
//! ```text
//! old <size of the checkpoint the witness last cosigned for this log, or 0>
//! <consistency proof from that size to the new one: one base64 hash a line, at most 63>
//!
//! <the signed checkpoint note>
//! ```
//!
//! every line ending in a newline. The witness answers `200` with one or more note signature
//! lines (`— <witness name> <base64>`), its `cosignature/v1` cosignatures of the checkpoint, or
//! an error status ([`WitnessError::status`]): `400` for a malformed request or an old size
//! above the checkpoint's, `403` when no signature of the note verifies against the log's
//! known keys, `404` for an unknown origin, `409` (with `Content-Type: text/x.tlog.size` and
//! the latest cosigned size as the body) when the old size is not the latest size the witness
//! cosigned, or when the sizes are equal but the roots differ, and `422` when the consistency
//! proof does not verify.
//!
//! The witness side is [`AddCheckpointRequest::parse`] then [`add_checkpoint`], which checks
//! the request against a [`WitnessState`] (each log's latest cosigned size and root) and the
//! [`KnownLogs`] and returns the new state of the log and the cosignature. The caller must run
//! the check and the persistence of the new state atomically (one request of a log at a time,
//! the state durable before the cosignature is returned), or two racing requests could roll the
//! recorded size back. The client side is [`add_checkpoint_request`],
//! [`parse_add_checkpoint_response`] and [`parse_conflict_size`].

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::checkpoint::{Checkpoint, parse_size};
use crate::cosignature::{CosignatureError, Cosigner};
use crate::hash::{Hash, empty_root, hash_from_base64, hash_to_base64, push_hash_lines};
use crate::note::{Note, NoteError, NoteVerifier, Signature, Verifier};
use crate::tree::{VerifyError, verify_consistency};

/// The most consistency proof lines a request may carry (a proof between two trees of at most
/// 2^64 − 1 leaves needs no more).
pub const MAX_PROOF_LINES: usize = 63;

/// The path of the call, below the witness's submission prefix.
pub const ADD_CHECKPOINT_PATH: &str = "/add-checkpoint";

/// The `Content-Type` of a `409 Conflict` answer, whose body is the latest cosigned size.
pub const CONFLICT_CONTENT_TYPE: &str = "text/x.tlog.size";

/// Why a witness refuses an `add-checkpoint` request; [`WitnessError::status`] is the HTTP status
/// the spec gives it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WitnessError {
    /// The request body is not an `add-checkpoint` request (400).
    #[error("malformed add-checkpoint request: {0}")]
    Malformed(String),
    /// The old size is larger than the checkpoint's size (400).
    #[error("the old size {old} is larger than the checkpoint size {size}")]
    OldSizeTooLarge {
        /// The old size of the request.
        old: u64,
        /// The size of the submitted checkpoint.
        size: u64,
    },
    /// No signature of the checkpoint verifies against a key the witness trusts for its origin
    /// (403). A signature by a trusted key that does not verify rejects the note too.
    #[error("the checkpoint is not signed by a known key of its log: {0}")]
    Forbidden(NoteError),
    /// The witness does not know the checkpoint's origin (404).
    #[error("unknown log {0:?}")]
    UnknownLog(String),
    /// The old size is not the size of the latest checkpoint the witness cosigned for this log
    /// (0 when it never cosigned one) (409, the body is `latest`).
    #[error("the old size {old} is not the latest cosigned size {latest}")]
    Conflict {
        /// The old size of the request.
        old: u64,
        /// The size of the latest checkpoint the witness cosigned for the log.
        latest: u64,
    },
    /// The checkpoint has the size of the latest cosigned checkpoint but another root: the log
    /// forked (409, the body is `latest`).
    #[error("the checkpoint has the latest cosigned size {latest} but another root hash")]
    RootMismatch {
        /// The size of the latest cosigned checkpoint, and of the submitted one.
        latest: u64,
    },
    /// The consistency proof from the old size to the checkpoint does not verify (422).
    #[error("the consistency proof does not verify: {0}")]
    BadProof(VerifyError),
    /// The witness could not cosign (a timestamp out of range: its clock is wrong) (500).
    #[error("cannot cosign: {0}")]
    Cosign(CosignatureError),
}

impl WitnessError {
    /// The HTTP status code of the answer: 400, 403, 404, 409, 422, or 500 for
    /// [`WitnessError::Cosign`].
    pub fn status(&self) -> u16 {
        match self {
            Self::Malformed(_) | Self::OldSizeTooLarge { .. } => 400,
            Self::Forbidden(_) => 403,
            Self::UnknownLog(_) => 404,
            Self::Conflict { .. } | Self::RootMismatch { .. } => 409,
            Self::BadProof(_) => 422,
            Self::Cosign(_) => 500,
        }
    }

    /// For a `409 Conflict`, the latest size the witness cosigned for the log: the answer's
    /// body is this size in decimal and a newline, with `Content-Type: text/x.tlog.size`.
    pub fn conflict_size(&self) -> Option<u64> {
        match self {
            Self::Conflict { latest, .. } | Self::RootMismatch { latest } => Some(*latest),
            _ => None,
        }
    }

    /// The answer's body: the conflict size line for a 409 (see [`Self::conflict_size`]), the
    /// error message and a newline otherwise.
    pub fn body(&self) -> String {
        match self.conflict_size() {
            Some(size) => format!("{size}\n"),
            None => format!("{self}\n"),
        }
    }

    fn malformed(what: impl Into<String>) -> Self {
        Self::Malformed(what.into())
    }
}

/// A parsed `add-checkpoint` request: old size, consistency proof and the signed checkpoint
/// (not yet verified).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddCheckpointRequest {
    old_size: u64,
    proof: Vec<Hash>,
    note: Note,
    checkpoint: Checkpoint,
}

impl AddCheckpointRequest {
    /// A request for a signed checkpoint note (whose text must be a checkpoint).
    pub fn new(old_size: u64, proof: Vec<Hash>, note: Note) -> Result<Self, WitnessError> {
        if proof.len() > MAX_PROOF_LINES {
            return Err(WitnessError::malformed(format!("more than {MAX_PROOF_LINES} consistency proof lines")));
        }
        if note.signatures().is_empty() {
            return Err(WitnessError::malformed("the checkpoint carries no signature"));
        }
        let checkpoint =
            Checkpoint::parse(note.text()).map_err(|e| WitnessError::malformed(format!("the note text: {e}")))?;
        // Checkpoint parsing is strict, so this holds; the cosignature signs `to_text`.
        if checkpoint.to_text() != note.text() {
            return Err(WitnessError::malformed("the checkpoint is not in canonical form"));
        }
        Ok(Self { old_size, proof, note, checkpoint })
    }

    /// Parses a request body: `old <size>` (decimal, no leading zeros), up to
    /// [`MAX_PROOF_LINES`] lines of one base64 hash each, an empty line, then a signed note whose
    /// text is a checkpoint. Every line ends in a newline. It verifies nothing.
    pub fn parse(body: &[u8]) -> Result<Self, WitnessError> {
        let mut rest = body;
        let mut next_line = || -> Result<&[u8], WitnessError> {
            let end = rest
                .iter()
                .position(|&b| b == b'\n')
                .ok_or_else(|| WitnessError::malformed("the request ends before the empty line"))?;
            let line = &rest[..end];
            rest = &rest[end + 1..];
            Ok(line)
        };
        let old = next_line()?;
        let old =
            old.strip_prefix(b"old ").ok_or_else(|| WitnessError::malformed("the first line is not `old <size>`"))?;
        let old_size = std::str::from_utf8(old)
            .ok()
            .and_then(parse_size)
            .ok_or_else(|| WitnessError::malformed("the old size is not a canonical decimal"))?;
        let mut proof = Vec::new();
        loop {
            let line = next_line()?;
            if line.is_empty() {
                break;
            }
            if proof.len() == MAX_PROOF_LINES {
                return Err(WitnessError::malformed(format!("more than {MAX_PROOF_LINES} consistency proof lines")));
            }
            let hash = std::str::from_utf8(line)
                .ok()
                .and_then(hash_from_base64)
                .ok_or_else(|| WitnessError::malformed("a consistency proof line is not a base64 hash"))?;
            proof.push(hash);
        }
        let note = Note::parse(rest).map_err(|e| WitnessError::malformed(format!("the checkpoint note: {e}")))?;
        Self::new(old_size, proof, note)
    }

    /// The size of the checkpoint the client believes the witness cosigned last.
    pub fn old_size(&self) -> u64 {
        self.old_size
    }

    /// The consistency proof from the old size to the checkpoint's size.
    pub fn proof(&self) -> &[Hash] {
        &self.proof
    }

    /// The signed checkpoint note, with all its signatures.
    pub fn note(&self) -> &Note {
        &self.note
    }

    /// The checkpoint (the note's text).
    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    /// The request body.
    pub fn to_text(&self) -> String {
        add_checkpoint_request(self.old_size, &self.proof, &self.note.to_string())
    }
}

/// The body of an `add-checkpoint` request: `old <old_size>`, one line per proof hash, an empty
/// line, then `signed_note` (a signed checkpoint note, as [`Note`]'s `Display` writes it).
pub fn add_checkpoint_request(old_size: u64, consistency_proof: &[Hash], signed_note: &str) -> String {
    let mut body = String::with_capacity(16 + 45 * consistency_proof.len() + 1 + signed_note.len());
    body.push_str("old ");
    body.push_str(&old_size.to_string());
    body.push('\n');
    push_hash_lines(consistency_proof, &mut body);
    body.push('\n');
    body.push_str(signed_note);
    body
}

/// Parses a witness's `200` answer: one or more note signature lines, each ending in a newline.
/// Nothing is verified: keep the signatures by witness keys the client trusts and check them
/// (e.g. with [`crate::CosignatureVerifier::verify_cosignature`] on the checkpoint text), or add
/// them to the note and [`Note::verify`] it; ignore the others.
pub fn parse_add_checkpoint_response(body: &[u8]) -> Result<Vec<Signature>, NoteError> {
    // The signature block of a note whose text is a single placeholder line: `Note::parse`
    // then checks the lines exactly as it checks any note's signatures.
    const PLACEHOLDER: &str = "add-checkpoint response\n";
    if body.is_empty() {
        return Err(NoteError::Malformed("an add-checkpoint response holds at least one signature line"));
    }
    let mut note = Vec::with_capacity(PLACEHOLDER.len() + 1 + body.len());
    note.extend_from_slice(PLACEHOLDER.as_bytes());
    note.push(b'\n');
    note.extend_from_slice(body);
    let note = Note::parse(&note)?;
    if note.text() != PLACEHOLDER {
        return Err(NoteError::Malformed("an add-checkpoint response holds only signature lines"));
    }
    Ok(note.signatures().to_vec())
}

/// Parses the body of a `409 Conflict` answer (`Content-Type: text/x.tlog.size`): the latest
/// size the witness cosigned, in decimal, and a newline.
pub fn parse_conflict_size(body: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(body.strip_suffix(b"\n")?).ok()?;
    parse_size(text)
}

/// What a witness records of one log: the latest checkpoint it cosigned, by size and root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LogState {
    /// The tree size of the latest cosigned checkpoint.
    pub size: u64,
    /// Its root hash.
    pub root: Hash,
}

impl LogState {
    /// The state of a log the witness never cosigned: size 0, the empty tree's root.
    pub fn empty() -> Self {
        Self { size: 0, root: empty_root() }
    }
}

/// A change of a witness's state: the new latest cosigned checkpoint of one log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateUpdate {
    /// The log's origin.
    pub origin: String,
    /// Its latest cosigned checkpoint, after the update.
    pub log: LogState,
}

/// The header line of [`WitnessState::to_text`].
const STATE_HEADER: &str = "tlog-witness state v1";

/// A witness's state: for each log (by origin) the latest checkpoint it cosigned.
///
/// As text ([`WitnessState::to_text`], [`WitnessState::parse`]): the line
/// `tlog-witness state v1`, then one line per log, sorted by origin,
/// `<size> <base64 root> <origin>` (the origin last, as it may hold spaces).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WitnessState {
    logs: BTreeMap<String, LogState>,
}

impl WitnessState {
    /// The state of a witness that never cosigned anything.
    pub fn new() -> Self {
        Self::default()
    }

    /// What the witness records of `origin`, if it ever cosigned a checkpoint of it.
    pub fn get(&self, origin: &str) -> Option<&LogState> {
        self.logs.get(origin)
    }

    /// The latest cosigned checkpoint of `origin`: [`LogState::empty`] if there is none.
    pub fn latest(&self, origin: &str) -> LogState {
        self.logs.get(origin).copied().unwrap_or_else(LogState::empty)
    }

    /// Records `update`, replacing what was recorded of its log.
    pub fn apply(&mut self, update: &StateUpdate) {
        self.logs.insert(update.origin.clone(), update.log);
    }

    /// This state with `update` applied.
    pub fn with(&self, update: &StateUpdate) -> Self {
        let mut next = self.clone();
        next.apply(update);
        next
    }

    /// The logs and their latest cosigned checkpoints, by origin.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &LogState)> {
        self.logs.iter().map(|(origin, log)| (origin.as_str(), log))
    }

    /// How many logs the witness cosigned a checkpoint of.
    pub fn len(&self) -> usize {
        self.logs.len()
    }

    /// Whether the witness never cosigned anything.
    pub fn is_empty(&self) -> bool {
        self.logs.is_empty()
    }

    /// The state as text (see the type's documentation).
    pub fn to_text(&self) -> String {
        let mut text = String::with_capacity(STATE_HEADER.len() + 1 + self.logs.len() * 80);
        text.push_str(STATE_HEADER);
        text.push('\n');
        for (origin, log) in &self.logs {
            text.push_str(&format!("{} {} {origin}\n", log.size, hash_to_base64(&log.root)));
        }
        text
    }

    /// Parses [`WitnessState::to_text`]'s format; every line ends in a newline, and an origin
    /// appears once.
    pub fn parse(text: &str) -> Result<Self, WitnessStateError> {
        let body = text.strip_suffix('\n').ok_or(WitnessStateError { line: 0, what: "no final newline" })?;
        let mut lines = body.split('\n');
        if lines.next() != Some(STATE_HEADER) {
            return Err(WitnessStateError { line: 1, what: "the first line is not `tlog-witness state v1`" });
        }
        let mut logs = BTreeMap::new();
        for (index, line) in lines.enumerate() {
            let error = |what| WitnessStateError { line: index + 2, what };
            let mut fields = line.splitn(3, ' ');
            let size = fields.next().and_then(parse_size).ok_or_else(|| error("not a canonical decimal size"))?;
            let root = fields.next().and_then(hash_from_base64).ok_or_else(|| error("not a base64 root hash"))?;
            let origin = fields.next().filter(|o| !o.is_empty()).ok_or_else(|| error("no origin"))?;
            if origin.chars().any(|c| c < ' ') {
                return Err(error("control character in the origin"));
            }
            if size == 0 && root != empty_root() {
                return Err(error("size 0 with a root other than the empty tree's"));
            }
            if logs.insert(origin.to_owned(), LogState { size, root }).is_some() {
                return Err(error("an origin listed twice"));
            }
        }
        Ok(Self { logs })
    }
}

/// A [`WitnessState`] text that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed witness state, line {line}: {what}")]
pub struct WitnessStateError {
    /// The line number (1-based; 0 for the text as a whole).
    pub line: usize,
    /// What is wrong with it.
    pub what: &'static str,
}

/// A key that verifies a log's checkpoint signatures, shareable across threads.
pub type LogVerifier = Arc<dyn NoteVerifier + Send + Sync>;

/// The logs a witness cosigns for: each origin with the keys it trusts to sign its checkpoints
/// (several during a key rotation).
#[derive(Clone, Default)]
pub struct KnownLogs {
    logs: BTreeMap<String, Vec<LogVerifier>>,
}

impl fmt::Debug for KnownLogs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut map = f.debug_map();
        for (origin, verifiers) in &self.logs {
            let keys: Vec<String> = verifiers.iter().map(|v| format!("{}+{:08x}", v.name(), v.key_id())).collect();
            map.entry(origin, &keys);
        }
        map.finish()
    }
}

impl KnownLogs {
    /// No logs.
    pub fn new() -> Self {
        Self::default()
    }

    /// Trusts `verifier` for the checkpoints of `origin`. A key already trusted for the origin
    /// (same name and key ID) is not added twice.
    pub fn add(&mut self, origin: impl Into<String>, verifier: impl NoteVerifier + Send + Sync + 'static) {
        let verifiers = self.logs.entry(origin.into()).or_default();
        if !verifiers.iter().any(|v| v.name() == verifier.name() && v.key_id() == verifier.key_id()) {
            verifiers.push(Arc::new(verifier));
        }
    }

    /// Trusts the Ed25519 vkey `vkey` (`<name>+<key ID>+<base64>`) for the checkpoints of
    /// `origin`.
    pub fn add_vkey(&mut self, origin: impl Into<String>, vkey: &str) -> Result<(), NoteError> {
        self.add(origin, Verifier::from_vkey(vkey)?);
        Ok(())
    }

    /// The keys trusted for `origin`; `None` for an unknown origin.
    pub fn verifiers(&self, origin: &str) -> Option<&[LogVerifier]> {
        self.logs.get(origin).map(Vec::as_slice)
    }

    /// Whether `origin` is known.
    pub fn contains(&self, origin: &str) -> bool {
        self.logs.contains_key(origin)
    }

    /// The known origins, sorted.
    pub fn origins(&self) -> impl Iterator<Item = &str> {
        self.logs.keys().map(String::as_str)
    }

    /// How many logs are known.
    pub fn len(&self) -> usize {
        self.logs.len()
    }

    /// Whether no log is known.
    pub fn is_empty(&self) -> bool {
        self.logs.is_empty()
    }
}

/// Checks an `add-checkpoint` request as a witness must, and cosigns its checkpoint at `now`
/// (seconds since the Unix epoch). Returns the log's new state, which the caller must persist
/// before returning the cosignature, and the cosignature (whose [`Signature::line`] is the
/// answer's body).
///
/// The checks, in order: the origin is known (else 404); a signature by a trusted key of the log
/// verifies, and none by a trusted key fails (else 403); the old size is not above the
/// checkpoint's size (else 400); the old size is the latest size cosigned for the log, 0 if none
/// (else 409 with that size); then, if the sizes are equal, the proof is empty (else 422) and
/// the root is the recorded one (else 409); otherwise the consistency proof from the recorded
/// checkpoint (from the empty tree for old size 0, so the proof must then be empty) to the new
/// one verifies (else 422).
pub fn add_checkpoint(
    state: &WitnessState,
    logs: &KnownLogs,
    cosigner: &Cosigner,
    request: &AddCheckpointRequest,
    now: u64,
) -> Result<(StateUpdate, Signature), WitnessError> {
    let checkpoint = request.checkpoint();
    let origin = checkpoint.origin();
    let verifiers = logs.verifiers(origin).ok_or_else(|| WitnessError::UnknownLog(origin.to_owned()))?;
    let verifiers: Vec<&dyn NoteVerifier> = verifiers.iter().map(|v| &**v as &dyn NoteVerifier).collect();
    request.note().verify(&verifiers).map_err(WitnessError::Forbidden)?;

    let (old, size, root) = (request.old_size(), checkpoint.size(), *checkpoint.root());
    if old > size {
        return Err(WitnessError::OldSizeTooLarge { old, size });
    }
    let latest = state.latest(origin);
    if old != latest.size {
        return Err(WitnessError::Conflict { old, latest: latest.size });
    }
    if old == size {
        if !request.proof().is_empty() {
            return Err(WitnessError::BadProof(VerifyError::ProofLength {
                expected: 0,
                actual: request.proof().len(),
            }));
        }
        if root != latest.root {
            // For size 0 the recorded root is the empty tree's: a checkpoint of the empty tree
            // with another root is a fork of the empty tree.
            return Err(WitnessError::RootMismatch { latest: latest.size });
        }
    } else {
        verify_consistency(old, size, &latest.root, &root, request.proof()).map_err(WitnessError::BadProof)?;
    }

    let cosignature = cosigner.cosign(checkpoint, now).map_err(WitnessError::Cosign)?;
    Ok((StateUpdate { origin: origin.to_owned(), log: LogState { size, root } }, cosignature))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cosignature::CosignatureVerifier;
    use crate::note::Signer;
    use crate::tree::{MemoryTree, consistency_proof};

    const ORIGIN: &str = "example.com/coop-log";
    const NOW: u64 = 1_750_000_000;

    struct Fixture {
        tree: MemoryTree,
        log: Signer,
        logs: KnownLogs,
        witness: Cosigner,
    }

    impl Fixture {
        fn new() -> Self {
            let mut tree = MemoryTree::new();
            for i in 0..20u32 {
                tree.append_entry(&i.to_be_bytes());
            }
            let log = Signer::from_seed(ORIGIN, &[1; 32]).unwrap();
            let mut logs = KnownLogs::new();
            logs.add_vkey(ORIGIN, &log.vkey()).unwrap();
            Self { tree, log, logs, witness: Cosigner::from_seed("witness.example/w1", &[9; 32]).unwrap() }
        }

        fn checkpoint(&self, size: u64) -> Checkpoint {
            Checkpoint::new(ORIGIN, size, self.tree.root_at(size).unwrap()).unwrap()
        }

        fn signed(&self, checkpoint: &Checkpoint, signer: &Signer) -> Note {
            let mut note = Note::new(checkpoint.to_text()).unwrap();
            note.sign(signer).unwrap();
            note
        }

        /// The request body for old → new with a correct proof, signed by the log.
        fn body(&self, old: u64, new: u64) -> String {
            let proof = if old == 0 { Vec::new() } else { consistency_proof(old, new, &self.tree).unwrap() };
            add_checkpoint_request(old, &proof, &self.signed(&self.checkpoint(new), &self.log).to_string())
        }

        fn submit(&self, state: &WitnessState, body: &str) -> Result<(StateUpdate, Signature), WitnessError> {
            let request = AddCheckpointRequest::parse(body.as_bytes())?;
            add_checkpoint(state, &self.logs, &self.witness, &request, NOW)
        }

        /// A state where the witness cosigned `size`.
        fn state_at(&self, size: u64) -> WitnessState {
            let (update, _) = self.submit(&WitnessState::new(), &self.body(0, size)).unwrap();
            WitnessState::new().with(&update)
        }
    }

    #[test]
    fn a_good_checkpoint_is_cosigned_and_the_cosignature_verifies() {
        let f = Fixture::new();
        let state = f.state_at(7);
        assert_eq!(state.latest(ORIGIN), LogState { size: 7, root: f.tree.root_at(7).unwrap() });

        let (update, cosignature) = f.submit(&state, &f.body(7, 15)).unwrap();
        assert_eq!(
            update,
            StateUpdate { origin: ORIGIN.into(), log: LogState { size: 15, root: f.tree.root_at(15).unwrap() } }
        );
        let verifier = CosignatureVerifier::from_vkey(&f.witness.vkey()).unwrap();
        let text = f.checkpoint(15).to_text();
        assert_eq!(verifier.verify_cosignature(text.as_bytes(), cosignature.signature()), Ok(NOW));

        // The client side: parse the answer, add it to the note, verify with both keys.
        let answer = cosignature.line();
        let parsed = parse_add_checkpoint_response(answer.as_bytes()).unwrap();
        assert_eq!(parsed, vec![cosignature]);
        let mut note = f.signed(&f.checkpoint(15), &f.log);
        for signature in parsed {
            note.add_signature(signature).unwrap();
        }
        assert_eq!(note.verify(&[&f.log.verifier(), &verifier]).unwrap(), vec![0, 1]);

        // The same checkpoint again (old = new, same root): cosigned again.
        let state = state.with(&update);
        let (again, _) = f.submit(&state, &f.body(15, 15)).unwrap();
        assert_eq!(again, update);
        // From nothing to a size at once, then to the full tree.
        let fresh = f.state_at(1);
        assert!(f.submit(&fresh, &f.body(1, 20)).is_ok());
    }

    #[test]
    fn a_forged_checkpoint_is_403() {
        let f = Fixture::new();
        let state = f.state_at(7);
        let forger = Signer::from_seed(ORIGIN, &[2; 32]).unwrap();
        let proof = consistency_proof(7, 15, &f.tree).unwrap();
        let forged = f.signed(&f.checkpoint(15), &forger).to_string();
        let err = f.submit(&state, &add_checkpoint_request(7, &proof, &forged)).unwrap_err();
        assert!(matches!(err, WitnessError::Forbidden(NoteError::NoKnownSignature)), "{err:?}");
        assert_eq!(err.status(), 403);
        assert_eq!(err.conflict_size(), None);

        // A signature by the log's key that does not verify (the text changed after signing).
        let mut tampered = f.signed(&f.checkpoint(14), &f.log).to_string();
        tampered = tampered.replacen("\n14\n", "\n15\n", 1);
        let err = f.submit(&state, &add_checkpoint_request(7, &proof, &tampered)).unwrap_err();
        assert!(matches!(err, WitnessError::Forbidden(NoteError::InvalidSignature { .. })), "{err:?}");
        assert_eq!(err.status(), 403);

        // A forged signature next to an unknown key's signature is ignored; the log's own
        // signature next to a stranger's is fine.
        let mut both = f.signed(&f.checkpoint(15), &f.log);
        both.sign(&Signer::from_seed("someone.else", &[3; 32]).unwrap()).unwrap();
        assert!(f.submit(&state, &add_checkpoint_request(7, &proof, &both.to_string())).is_ok());
    }

    #[test]
    fn an_unknown_origin_is_404() {
        let f = Fixture::new();
        let other = Signer::from_seed("example.com/other-log", &[5; 32]).unwrap();
        let checkpoint = Checkpoint::new("example.com/other-log", 3, f.tree.root_at(3).unwrap()).unwrap();
        let body = add_checkpoint_request(0, &[], &f.signed(&checkpoint, &other).to_string());
        let err = f.submit(&WitnessState::new(), &body).unwrap_err();
        assert_eq!(err, WitnessError::UnknownLog("example.com/other-log".into()));
        assert_eq!(err.status(), 404);
    }

    #[test]
    fn a_stale_old_size_is_409_with_the_latest_size() {
        let f = Fixture::new();
        let state = f.state_at(7);
        // The client thinks the witness last saw 5 (or nothing).
        for old in [5, 0] {
            let err = f.submit(&state, &f.body(old, 15)).unwrap_err();
            assert_eq!(err, WitnessError::Conflict { old, latest: 7 });
            assert_eq!(err.status(), 409);
            assert_eq!(err.conflict_size(), Some(7));
            assert_eq!(err.body(), "7\n");
            assert_eq!(parse_conflict_size(err.body().as_bytes()), Some(7));
        }
        // A witness that never cosigned this log answers 0.
        let err = f.submit(&WitnessState::new(), &f.body(7, 15)).unwrap_err();
        assert_eq!(err.conflict_size(), Some(0));
    }

    #[test]
    fn a_rollback_is_refused() {
        let f = Fixture::new();
        let state = f.state_at(15);
        // A smaller checkpoint, from an old size the client still believes in: 409.
        let err = f.submit(&state, &f.body(5, 10)).unwrap_err();
        assert_eq!(err, WitnessError::Conflict { old: 5, latest: 15 });
        assert_eq!(err.status(), 409);
        // A smaller checkpoint, from the recorded size: old above the new size, 400.
        let body = add_checkpoint_request(15, &[], &f.signed(&f.checkpoint(10), &f.log).to_string());
        let err = f.submit(&state, &body).unwrap_err();
        assert_eq!(err, WitnessError::OldSizeTooLarge { old: 15, size: 10 });
        assert_eq!(err.status(), 400);
    }

    #[test]
    fn the_same_size_with_another_root_is_409() {
        let f = Fixture::new();
        let state = f.state_at(7);
        let fork = Checkpoint::new(ORIGIN, 7, f.tree.root_at(6).unwrap()).unwrap();
        let body = add_checkpoint_request(7, &[], &f.signed(&fork, &f.log).to_string());
        let err = f.submit(&state, &body).unwrap_err();
        assert_eq!(err, WitnessError::RootMismatch { latest: 7 });
        assert_eq!((err.status(), err.conflict_size()), (409, Some(7)));
        // The same size with a (useless) proof: the proof does not verify.
        let proof = consistency_proof(6, 7, &f.tree).unwrap();
        let body = add_checkpoint_request(7, &proof, &f.signed(&f.checkpoint(7), &f.log).to_string());
        assert_eq!(f.submit(&state, &body).unwrap_err().status(), 422);
        // An empty tree with a root that is not the empty tree's.
        let fork = Checkpoint::new(ORIGIN, 0, f.tree.root_at(1).unwrap()).unwrap();
        let body = add_checkpoint_request(0, &[], &f.signed(&fork, &f.log).to_string());
        assert_eq!(f.submit(&WitnessState::new(), &body).unwrap_err(), WitnessError::RootMismatch { latest: 0 });
        // The empty tree itself is fine.
        let empty = Checkpoint::new(ORIGIN, 0, empty_root()).unwrap();
        let body = add_checkpoint_request(0, &[], &f.signed(&empty, &f.log).to_string());
        assert!(f.submit(&WitnessState::new(), &body).is_ok());
    }

    #[test]
    fn a_bad_consistency_proof_is_422() {
        let f = Fixture::new();
        let state = f.state_at(7);
        let note = f.signed(&f.checkpoint(15), &f.log).to_string();
        let good = consistency_proof(7, 15, &f.tree).unwrap();
        let mut flipped = good.clone();
        flipped[1][0] ^= 1;
        let short = good[..good.len() - 1].to_vec();
        let other_sizes = consistency_proof(6, 15, &f.tree).unwrap();
        for proof in [flipped, short, other_sizes, Vec::new()] {
            let err = f.submit(&state, &add_checkpoint_request(7, &proof, &note)).unwrap_err();
            assert!(matches!(err, WitnessError::BadProof(_)), "{err:?}");
            assert_eq!(err.status(), 422);
        }
        // A checkpoint that is not an extension of the recorded one (another history).
        let mut forked = MemoryTree::new();
        for i in 0..15u32 {
            forked.append_entry(&(i + 100).to_be_bytes());
        }
        let fork = Checkpoint::new(ORIGIN, 15, forked.root()).unwrap();
        let body = add_checkpoint_request(
            7,
            &consistency_proof(7, 15, &forked).unwrap(),
            &f.signed(&fork, &f.log).to_string(),
        );
        assert_eq!(f.submit(&state, &body).unwrap_err().status(), 422);
        // Old size 0 takes no proof.
        let body = add_checkpoint_request(0, &[f.tree.root_at(1).unwrap()], &note);
        assert_eq!(f.submit(&WitnessState::new(), &body).unwrap_err().status(), 422);
    }

    #[test]
    fn malformed_requests_are_400() {
        let f = Fixture::new();
        let note = f.signed(&f.checkpoint(15), &f.log).to_string();
        let hash = hash_to_base64(&f.tree.root_at(3).unwrap());
        let too_long = add_checkpoint_request(7, &vec![[0u8; 32]; 64], &note);
        for bad in [
            String::new(),
            "old 7\n".into(),
            format!("old 7\n{note}"),
            format!("old 07\n\n{note}"),
            format!("old -7\n\n{note}"),
            format!("old  7\n\n{note}"),
            format!("old 7 \n\n{note}"),
            format!("Old 7\n\n{note}"),
            format!("old 18446744073709551616\n\n{note}"),
            format!("\nold 7\n\n{note}"),
            format!("old 7\n{}\n\n{note}", &hash[..43]),
            format!("old 7\n{hash} \n\n{note}"),
            format!("old 7\r\n\n{note}"),
            format!("old 7\n\n{}", note.trim_end()),
            format!("old 7\n\n{}", f.checkpoint(15).to_text()),
            format!("old 7\n\nnot a checkpoint\n\n{}", f.log.sign("not a checkpoint\n").unwrap().line()),
            too_long,
        ] {
            let err = f.submit(&f.state_at(7), &bad).unwrap_err();
            assert!(matches!(err, WitnessError::Malformed(_)), "{bad:?}: {err:?}");
            assert_eq!(err.status(), 400);
        }
        // 63 proof lines parse.
        let request = AddCheckpointRequest::parse(add_checkpoint_request(7, &vec![[0u8; 32]; 63], &note).as_bytes());
        assert_eq!(request.unwrap().proof().len(), 63);
        assert!(matches!(AddCheckpointRequest::parse(b"old 1\n\xff\n\n"), Err(WitnessError::Malformed(_))));
    }

    #[test]
    fn requests_round_trip_and_match_the_spec_layout() {
        let f = Fixture::new();
        let proof = consistency_proof(7, 15, &f.tree).unwrap();
        let note = f.signed(&f.checkpoint(15), &f.log);
        let body = add_checkpoint_request(7, &proof, &note.to_string());
        let mut expected = String::from("old 7\n");
        for hash in &proof {
            expected.push_str(&hash_to_base64(hash));
            expected.push('\n');
        }
        expected.push('\n');
        expected.push_str(&format!(
            "{ORIGIN}\n15\n{}\n\n{}",
            hash_to_base64(&f.tree.root_at(15).unwrap()),
            f.log.sign(note.text()).unwrap().line()
        ));
        assert_eq!(body, expected);
        let request = AddCheckpointRequest::parse(body.as_bytes()).unwrap();
        assert_eq!((request.old_size(), request.proof(), request.note()), (7, &proof[..], &note));
        assert_eq!(request.checkpoint(), &f.checkpoint(15));
        assert_eq!(request.to_text(), body);
    }

    #[test]
    fn the_spec_example_request_parses() {
        let body = "old 20852014\nPlRNCrwHpqhGrupue0L7gxbjbMiKA9temvuZZDDpkaw=\njrJZDmY8Y7SyJE0MWLpLozkIVMSMZcD5kvuKxPC3swk=\n5+pKlUdi2LeF/BcMHBn+Ku6yhPGNCswZZD1X/6QgPd8=\n/6WVhPs2CwSsb5rYBH5cjHV/wSmA79abXAwhXw3Kj/0=\n\nexample.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n\n\u{2014} example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n\u{2014} example.com/behind-the-sofa opLqBQsREYCgu6xQkYQwJr9fo45a62DN9EdmHXnZdXNqlcVGlCum2Wks+49/V6267UEjw6QUXTS5Rovnzv++qbSzm9Q=\n";
        let request = AddCheckpointRequest::parse(body.as_bytes()).unwrap();
        assert_eq!(request.old_size(), 20852014);
        assert_eq!(request.proof().len(), 4);
        assert_eq!(request.checkpoint().origin(), "example.com/behind-the-sofa");
        assert_eq!(request.checkpoint().size(), 20852163);
        assert_eq!(request.note().signatures().len(), 2);
        assert_eq!(request.to_text(), body);
    }

    #[test]
    fn responses_parse_like_the_spec_example() {
        let body = "\u{2014} witness.example/w1 CMp+6LWBU0anHGH5aNDTJkH/gj79sG+T6+iP2ThYN5krrDJbR1HDnucjL39QsZTSvVjyQLrdk3DXDqI5G2HgLatVs0pWh6Up69HVOw==\n\u{2014} witness.example/w1 I7rEps0pvK2UqkS2gSpVUDhrhVtQV9lgF6pRrWAvjJHjyWpW7VcE3SiOlVlbQNt64vWhO+DlkL0+UfzuOBMh9ChdMkP1vi/lCAsmlw==\n\u{2014} witness.example/w2 AWui8Sk55XjYLOijihBjhqEH6nS1ndDymE0a+6idX7pLcnoB+dhnz0854aLZgrrKbYKA7nC3HNJhm/kWl7oJlqU3rXXvpysAdyP3wQ==\n";
        let signatures = parse_add_checkpoint_response(body.as_bytes()).unwrap();
        assert_eq!(
            signatures.iter().map(Signature::name).collect::<Vec<_>>(),
            ["witness.example/w1", "witness.example/w1", "witness.example/w2"]
        );
        assert!(signatures.iter().all(|s| s.signature().len() == 72));
        assert_eq!(signatures.iter().map(Signature::line).collect::<String>(), body);
        for bad in [
            "",
            "\n",
            "\u{2014} w AAAAAAAA",
            "text\n\n\u{2014} w AAAAAAAA\n",
            "\u{2014} w AAAAAAAA\n\n",
            "— w not-base64\n",
        ] {
            assert!(parse_add_checkpoint_response(bad.as_bytes()).is_err(), "{bad:?}");
        }
        assert_eq!(parse_conflict_size(b"20852014\n"), Some(20852014));
        for bad in [&b""[..], b"\n", b"12", b"012\n", b"12\n\n", b" 12\n"] {
            assert_eq!(parse_conflict_size(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn state_round_trips_as_text() {
        let f = Fixture::new();
        let mut state = WitnessState::new();
        assert_eq!(state.to_text(), "tlog-witness state v1\n");
        assert_eq!(WitnessState::parse(&state.to_text()).unwrap(), state);
        state.apply(&StateUpdate {
            origin: "b.example/log with spaces".into(),
            log: LogState { size: 3, root: f.tree.root_at(3).unwrap() },
        });
        state.apply(&StateUpdate { origin: "a.example/log".into(), log: LogState::empty() });
        let text = state.to_text();
        assert_eq!(
            text,
            format!(
                "tlog-witness state v1\n0 {} a.example/log\n3 {} b.example/log with spaces\n",
                hash_to_base64(&empty_root()),
                hash_to_base64(&f.tree.root_at(3).unwrap())
            )
        );
        assert_eq!(WitnessState::parse(&text).unwrap(), state);
        assert_eq!(state.len(), 2);
        assert_eq!(state.latest("unknown"), LogState::empty());
        let root = hash_to_base64(&f.tree.root_at(3).unwrap());
        for bad in [
            String::new(),
            "tlog-witness state v2\n".into(),
            "tlog-witness state v1".into(),
            format!("tlog-witness state v1\n3 {root}\n"),
            format!("tlog-witness state v1\n3 {root} \n"),
            format!("tlog-witness state v1\n03 {root} a\n"),
            format!("tlog-witness state v1\n3 {} a\n", &root[..43]),
            format!("tlog-witness state v1\n3 {root} a\n4 {root} a\n"),
            format!("tlog-witness state v1\n0 {root} a\n"),
            format!("tlog-witness state v1\n3 {root} a\tb\n"),
            "tlog-witness state v1\n\n".into(),
        ] {
            assert!(WitnessState::parse(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn known_logs_deduplicate_keys() {
        let f = Fixture::new();
        let mut logs = f.logs.clone();
        logs.add_vkey(ORIGIN, &f.log.vkey()).unwrap();
        logs.add(ORIGIN, f.log.verifier());
        assert_eq!(logs.verifiers(ORIGIN).unwrap().len(), 1);
        logs.add(ORIGIN, Signer::from_seed(ORIGIN, &[7; 32]).unwrap().verifier());
        assert_eq!(logs.verifiers(ORIGIN).unwrap().len(), 2);
        assert!(logs.add_vkey(ORIGIN, &f.witness.vkey()).is_err(), "a cosigner key is not a log key");
        assert!(logs.contains(ORIGIN) && !logs.contains("x"));
        assert_eq!(logs.origins().collect::<Vec<_>>(), [ORIGIN]);
        assert!(format!("{logs:?}").contains(ORIGIN));
        // A rotated log: a checkpoint signed by the new key alone is accepted.
        let new_key = Signer::from_seed(ORIGIN, &[7; 32]).unwrap();
        let note = f.signed(&f.checkpoint(4), &new_key);
        let request =
            AddCheckpointRequest::parse(add_checkpoint_request(0, &[], &note.to_string()).as_bytes()).unwrap();
        assert!(add_checkpoint(&WitnessState::new(), &logs, &f.witness, &request, NOW).is_ok());
    }

    #[test]
    fn a_clock_beyond_2_63_cannot_cosign() {
        let f = Fixture::new();
        let request = AddCheckpointRequest::parse(f.body(0, 3).as_bytes()).unwrap();
        let err = add_checkpoint(&WitnessState::new(), &f.logs, &f.witness, &request, u64::MAX).unwrap_err();
        assert_eq!(err.status(), 500);
    }
}
