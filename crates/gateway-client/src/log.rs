//! The coop's log (INTERFACE.md §12) from a member's or an auditor's side: fetching the signed
//! checkpoint, the verifier keys, hash tiles, entry bundles, inclusion and consistency proofs;
//! checking a proof offline against a C2SP tlog-policy ([`verify_proof`]); and auditing a coop
//! end to end ([`Client::audit`], in `log/audit.rs`).
//!
//! The transparency-log primitives (Merkle trees, tiles, signed notes, checkpoints,
//! cosignatures, policies, tlog-proof) are `gateway-tlog`'s, re-exported as
//! [`crate::tlog`]; this module only fetches what they check and says what a result means.
//! Nothing here trusts the gateway: every answer is checked against a signature, a hash or a
//! proof before it is believed, and a member's token is needed only for the parts that hold
//! memos (entries) and for the convenience routes (proofs).

mod audit;
mod receipt;
mod replay;

#[cfg(test)]
mod tests;

pub use audit::{AuditOptions, AuditReport, Mismatch, PreviousCheckpoint};

use gateway_core::CoopId;
use gateway_tlog::NoteError;
use gateway_tlog::hash::{Hash, hash_from_base64, hash_to_base64};
use gateway_tlog::note::{NoteVerifier, SIG_TYPE_ED25519};
use gateway_tlog::tile::{FULL_WIDTH, entries_path, parse_entry_bundle, tile_at, tile_path};
use gateway_tlog::{
    Checkpoint, CheckpointVerifyError, Note, Policy, PolicyError, TlogProof, TlogProofError, Verifier, VerifierKey,
    VerifyError, leaf_hash, verify_inclusion,
};
use reqwest::Method;
use serde::{Deserialize, Serialize};

use crate::client::{Call, Client};
use crate::error::{Error, Result};

/// Why a proof, a policy, a checkpoint or a saved audit state does not check out offline.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// The proof text is not a `c2sp.org/tlog-proof@v1`.
    #[error("the proof is not a c2sp.org/tlog-proof@v1: {0}")]
    MalformedProof(TlogProofError),
    /// The policy text is not a C2SP tlog-policy.
    #[error("the policy is not a c2sp.org/tlog-policy: {0}")]
    MalformedPolicy(PolicyError),
    /// A checkpoint that is not a signed note holding a C2SP checkpoint.
    #[error("not a signed checkpoint: {0}")]
    MalformedCheckpoint(String),
    /// A verifier key that is not an Ed25519 signed-note `vkey`.
    #[error("not a log verifier key: {0}")]
    MalformedKey(String),
    /// The entry is not the one at the proof's index in the checkpoint's tree: the entry was
    /// changed, or it is another entry.
    #[error("the entry is not entry {index} of the checkpoint's tree: {source}")]
    NotIncluded {
        /// The index the proof is for.
        index: u64,
        /// What did not match.
        source: VerifyError,
    },
    /// The policy does not accept the checkpoint: another log key, a bad signature, or too few
    /// witness cosignatures.
    #[error("the policy does not accept the checkpoint: {0}")]
    Rejected(CheckpointVerifyError),
    /// A saved audit state whose checkpoint is not signed by its own keys (a damaged file).
    #[error("the saved checkpoint is not signed by the saved keys: {0}")]
    StateDoesNotVerify(String),
}

impl LogError {
    /// Whether the input could not be read at all (a malformed proof, policy, checkpoint or
    /// key), as opposed to input that was read and does not verify.
    pub fn is_malformed(&self) -> bool {
        matches!(
            self,
            LogError::MalformedProof(_)
                | LogError::MalformedPolicy(_)
                | LogError::MalformedCheckpoint(_)
                | LogError::MalformedKey(_)
        )
    }
}

/// A signed checkpoint as the gateway publishes it: the note's exact text, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedCheckpoint {
    text: String,
    note: Note,
    checkpoint: Checkpoint,
}

impl SignedCheckpoint {
    /// Parses a signed note holding a checkpoint. Nothing is verified here.
    pub fn parse(text: &str) -> Result<Self, LogError> {
        let note = Note::parse(text.as_bytes()).map_err(|e| LogError::MalformedCheckpoint(e.to_string()))?;
        let checkpoint = Checkpoint::parse(note.text()).map_err(|e| LogError::MalformedCheckpoint(e.to_string()))?;
        Ok(Self { text: text.to_owned(), note, checkpoint })
    }

    /// The signed note, exactly as served.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The note (text and signatures).
    pub fn note(&self) -> &Note {
        &self.note
    }

    /// The checkpoint the note carries.
    pub fn checkpoint(&self) -> &Checkpoint {
        &self.checkpoint
    }

    /// The log's origin, `<prefix>/coops/<coop>`.
    pub fn origin(&self) -> &str {
        self.checkpoint.origin()
    }

    /// The tree size.
    pub fn size(&self) -> u64 {
        self.checkpoint.size()
    }

    /// The tree root.
    pub fn root(&self) -> &Hash {
        self.checkpoint.root()
    }

    /// Which of `keys` signed the note (the index of the first), checking every signature by
    /// one of them: keys named otherwise than the origin are left out, a signature by a listed
    /// key that does not verify refuses the note.
    pub fn signed_by(&self, keys: &[VerifierKey]) -> Result<usize, NoteError> {
        let named: Vec<(usize, Verifier)> = keys
            .iter()
            .enumerate()
            .filter(|(_, k)| k.name() == self.origin())
            .filter_map(|(i, k)| Verifier::from_verifier_key(k).ok().map(|v| (i, v)))
            .collect();
        let verifiers: Vec<&dyn NoteVerifier> = named.iter().map(|(_, v)| v as &dyn NoteVerifier).collect();
        let verified = self.note.verify(&verifiers)?;
        Ok(named[verified[0]].0)
    }
}

/// Parses the verifier keys route's text: one Ed25519 signed-note `vkey` a line.
pub fn parse_log_keys(text: &str) -> Result<Vec<VerifierKey>, LogError> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(|line| {
            let key = VerifierKey::parse(line).map_err(|e| LogError::MalformedKey(format!("{line}: {e}")))?;
            if key.sig_type() != SIG_TYPE_ED25519 {
                return Err(LogError::MalformedKey(format!("{line}: not an Ed25519 key")));
            }
            Verifier::from_verifier_key(&key).map_err(|e| LogError::MalformedKey(format!("{line}: {e}")))?;
            Ok(key)
        })
        .collect()
}

/// An entry of the log with the proof that it is there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    /// The event's sequence number (`LogOpened`: the event it follows).
    pub seq: u64,
    /// Its index in the log (0 is `LogOpened`).
    pub index: u64,
    /// The entry's exact bytes (UTF-8 JSON `{"seq","event"}`), which the leaf hash covers.
    pub bytes: Vec<u8>,
    /// The `c2sp.org/tlog-proof@v1` of the entry, as the gateway served it.
    pub proof: String,
}

/// The first fields of an entry: its `seq` and its event's `type`.
#[derive(Deserialize)]
struct EntryHead {
    seq: u64,
    event: EventHead,
}

#[derive(Deserialize)]
struct EventHead {
    #[serde(rename = "type")]
    event_type: String,
}

fn entry_head(bytes: &[u8]) -> Option<EntryHead> {
    serde_json::from_slice(bytes).ok()
}

/// What a proof that verified says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifiedProof {
    /// Always true: a proof that does not verify is an error.
    pub valid: bool,
    /// The log's origin.
    pub origin: String,
    /// The size of the checkpoint's tree.
    pub size: u64,
    /// The checkpoint's root, base64.
    pub root: String,
    /// The entry's index in the log.
    pub index: u64,
    /// The policy's log key that signed the checkpoint.
    pub log_key: String,
    /// The policy's witnesses whose cosignatures verified.
    pub witnesses: Vec<WitnessCosignature>,
    /// The entry's `seq` (its event's sequence number), if the entry is a log entry of this
    /// gateway's shape.
    pub seq: Option<u64>,
    /// The entry's event type, likewise.
    pub event_type: Option<String>,
}

/// A witness cosignature of a verified checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WitnessCosignature {
    /// The witness's name in the policy.
    pub name: String,
    /// The time it vouched for, Unix seconds.
    pub timestamp: u64,
}

/// Parses a C2SP tlog-policy.
pub fn parse_policy(text: &[u8]) -> Result<Policy, LogError> {
    Policy::parse(text).map_err(LogError::MalformedPolicy)
}

/// Checks offline that `entry` (its exact bytes) is in a log, as `proof` (a
/// `c2sp.org/tlog-proof@v1`, as `GET /v1/coops/{coop}/log/proof` serves it) says, under `policy`
/// (a C2SP tlog-policy naming the log's key, the witnesses and the quorum): the entry's leaf
/// hash is included at the proof's index in the checkpoint's tree, a log key of the policy named
/// after the checkpoint's origin signed the checkpoint, and the witnesses' cosignatures satisfy
/// the quorum. No network, no clock.
pub fn verify_proof(proof: &[u8], entry: &[u8], policy: &[u8]) -> Result<VerifiedProof, LogError> {
    let policy = parse_policy(policy)?;
    let proof = TlogProof::parse(proof).map_err(LogError::MalformedProof)?;
    verify_parsed(&proof, entry, &policy)
}

/// [`verify_proof`] with the proof and the policy already parsed.
pub fn verify_parsed(proof: &TlogProof, entry: &[u8], policy: &Policy) -> Result<VerifiedProof, LogError> {
    let checkpoint = proof.checkpoint();
    verify_inclusion(proof.index(), checkpoint.size(), &leaf_hash(entry), proof.inclusion(), checkpoint.root())
        .map_err(|source| LogError::NotIncluded { index: proof.index(), source })?;
    let verified = policy.verify_checkpoint(proof.note()).map_err(LogError::Rejected)?;
    let head = entry_head(entry);
    Ok(VerifiedProof {
        valid: true,
        origin: checkpoint.origin().to_owned(),
        size: checkpoint.size(),
        root: hash_to_base64(checkpoint.root()),
        index: proof.index(),
        log_key: policy.logs()[verified.log].verifier().vkey(),
        witnesses: verified
            .cosignatures
            .iter()
            .map(|c| WitnessCosignature {
                name: String::from_utf8_lossy(policy.witnesses()[c.witness].name()).into_owned(),
                timestamp: c.timestamp,
            })
            .collect(),
        seq: head.as_ref().map(|h| h.seq),
        event_type: head.map(|h| h.event.event_type),
    })
}

/// What an audit keeps between runs: the last checkpoint it verified (the signed note, exactly
/// as served) and the log's verifier keys it saw then (`vkey`s). The next audit requires the
/// log to extend that checkpoint and those keys to stay published.
///
/// It serialises as `{"checkpoint": "<signed note>", "keys": ["<vkey>", …]}`; `gatewayctl`
/// keeps the two parts as files of their own (`<coop>.checkpoint`, `<coop>.keys`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "StateParts")]
pub struct AuditState {
    checkpoint: String,
    keys: Vec<String>,
    #[serde(skip)]
    parsed: SignedCheckpoint,
}

#[derive(Deserialize)]
struct StateParts {
    checkpoint: String,
    keys: Vec<String>,
}

impl TryFrom<StateParts> for AuditState {
    type Error = LogError;

    fn try_from(parts: StateParts) -> Result<Self, LogError> {
        AuditState::new(&parts.checkpoint, &parts.keys.join("\n"))
    }
}

impl AuditState {
    /// A state from a signed checkpoint and the verifier keys (one `vkey` a line, as the keys
    /// route serves them). The checkpoint must be signed by one of the keys.
    pub fn new(checkpoint: &str, keys: &str) -> Result<Self, LogError> {
        let parsed = SignedCheckpoint::parse(checkpoint)?;
        let keys = parse_log_keys(keys)?;
        parsed.signed_by(&keys).map_err(|e| LogError::StateDoesNotVerify(e.to_string()))?;
        Ok(Self { checkpoint: checkpoint.to_owned(), keys: keys.iter().map(ToString::to_string).collect(), parsed })
    }

    /// The verified checkpoint.
    pub fn checkpoint(&self) -> &SignedCheckpoint {
        &self.parsed
    }

    /// The signed checkpoint note, exactly as the gateway served it.
    pub fn checkpoint_text(&self) -> &str {
        &self.checkpoint
    }

    /// The verifier keys seen, as `vkey` texts.
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// The verifier keys, one `vkey` a line (the keys route's format).
    pub fn keys_text(&self) -> String {
        self.keys.iter().map(|k| format!("{k}\n")).collect()
    }

    /// The log's origin.
    pub fn origin(&self) -> &str {
        self.parsed.origin()
    }

    /// The tree size of the saved checkpoint.
    pub fn size(&self) -> u64 {
        self.parsed.size()
    }

    /// The root of the saved checkpoint.
    pub fn root(&self) -> &Hash {
        self.parsed.root()
    }
}

/// Path segments of a log route: `/v1/coops/{coop}/log/<rest split at '/'>`.
fn segments<'a>(coop: &'a CoopId, rest: &'a str) -> Vec<&'a str> {
    let mut segments = vec!["v1", "coops", coop.as_str(), "log"];
    segments.extend(rest.split('/'));
    segments
}

fn unexpected(status: reqwest::StatusCode, message: impl Into<String>) -> Error {
    Error::UnexpectedResponse { status: status.as_u16(), message: message.into() }
}

fn text_of(answer: crate::client::Answer) -> Result<String> {
    let status = answer.status;
    String::from_utf8(answer.body).map_err(|_| unexpected(status, "the answer is not UTF-8 text"))
}

impl Client {
    /// `GET /v1/coops/{coop}/log/checkpoint` (public): the latest signed checkpoint. Not
    /// verified here (see [`SignedCheckpoint::signed_by`], [`Client::audit`]).
    pub async fn log_checkpoint(&self, coop: &CoopId) -> Result<SignedCheckpoint> {
        let answer = self.send(Call::new(Method::GET, &segments(coop, "checkpoint")).public()).await?;
        let status = answer.status;
        SignedCheckpoint::parse(&text_of(answer)?).map_err(|e| unexpected(status, e.to_string()))
    }

    /// `GET /v1/coops/{coop}/log/key` (public): the log's verifier keys, current and retired.
    pub async fn log_keys(&self, coop: &CoopId) -> Result<Vec<VerifierKey>> {
        let answer = self.send(Call::new(Method::GET, &segments(coop, "key")).public()).await?;
        let status = answer.status;
        parse_log_keys(&text_of(answer)?).map_err(|e| unexpected(status, e.to_string()))
    }

    /// `GET /v1/coops/{coop}/log/tile/<level>/<index>[.p/<width>]` (public): a hash tile, its
    /// `width` hashes of 32 bytes (256 for a full tile).
    pub async fn log_tile(&self, coop: &CoopId, level: u8, index: u64, width: u16) -> Result<Vec<u8>> {
        let path = tile_path(level, index, width).map_err(|e| Error::Usage(format!("tile: {e}")))?;
        let answer = self.send(Call::new(Method::GET, &segments(coop, &path)).public()).await?;
        if answer.body.len() != usize::from(width) * 32 {
            return Err(unexpected(answer.status, format!("{path} holds {} bytes", answer.body.len())));
        }
        Ok(answer.body)
    }

    /// `GET /v1/coops/{coop}/log/tile/entries/<index>[.p/<width>]` (members of the coop):
    /// the entries `index·256 ..` of an entry bundle, each its exact bytes.
    pub async fn log_entry_bundle(&self, coop: &CoopId, index: u64, width: u16) -> Result<Vec<Vec<u8>>> {
        let path = entries_path(index, width).map_err(|e| Error::Usage(format!("entry bundle: {e}")))?;
        let answer = self.send(Call::new(Method::GET, &segments(coop, &path))).await?;
        let entries =
            parse_entry_bundle(&answer.body).map_err(|e| unexpected(answer.status, format!("{path}: {e}")))?;
        if entries.len() != usize::from(width) {
            return Err(unexpected(answer.status, format!("{path} holds {} entries", entries.len())));
        }
        Ok(entries.into_iter().map(<[u8]>::to_vec).collect())
    }

    /// The entries `from..to` of the log's tree of `size` entries (members of the coop), read
    /// bundle by bundle.
    pub async fn log_entries(&self, coop: &CoopId, from: u64, to: u64, size: u64) -> Result<Vec<Vec<u8>>> {
        if from > to || to > size {
            return Err(Error::Usage(format!("entries {from}..{to} are not within a tree of {size}")));
        }
        let mut out = Vec::with_capacity(usize::try_from(to - from).unwrap_or(0));
        let width = u64::from(FULL_WIDTH);
        let mut bundle = from / width;
        while bundle * width < to {
            let tile = tile_at(size, 0, bundle).ok_or_else(|| Error::Usage(format!("no bundle {bundle} at {size}")))?;
            let entries = self.log_entry_bundle(coop, bundle, tile.width()).await?;
            let first = bundle * width;
            for (i, entry) in entries.into_iter().enumerate() {
                let index = first + i as u64;
                if (from..to).contains(&index) {
                    out.push(entry);
                }
            }
            bundle += 1;
        }
        Ok(out)
    }

    /// `GET /v1/coops/{coop}/log/opened` (members): `LogOpened`'s data whole, as served. When
    /// entry 0 holds digests of its largest fields (a coop with hundreds of members when its log
    /// began), these are the fields they digest; [`Client::audit`] checks them against the
    /// digests before it replays from them.
    pub async fn log_opened_data(&self, coop: &CoopId) -> Result<String> {
        let answer = self.send(Call::new(Method::GET, &segments(coop, "opened"))).await?;
        text_of(answer)
    }

    /// `GET /v1/coops/{coop}/log/proof?seq=N[&wait=true]` (members): the `c2sp.org/tlog-proof@v1`
    /// of the entry of event `seq`, exactly as served (checked to parse). With `wait`, the
    /// gateway waits up to 5 s for a checkpoint that covers it and meets its witness quorum.
    pub async fn log_proof(&self, coop: &CoopId, seq: u64, wait: bool) -> Result<String> {
        let call = Call::new(Method::GET, &segments(coop, "proof"))
            .query("seq", Some(seq))
            .query("wait", wait.then_some(true));
        let answer = self.send(call).await?;
        let status = answer.status;
        let text = text_of(answer)?;
        TlogProof::parse(text.as_bytes()).map_err(|e| unexpected(status, format!("the proof: {e}")))?;
        Ok(text)
    }

    /// `GET /v1/coops/{coop}/log/consistency?from=A&to=B` (members): the RFC 9162 consistency
    /// proof between two tree sizes (`0 < A ≤ B ≤` the signed size). Check it with
    /// [`gateway_tlog::verify_consistency`].
    pub async fn log_consistency(&self, coop: &CoopId, from: u64, to: u64) -> Result<Vec<Hash>> {
        let call =
            Call::new(Method::GET, &segments(coop, "consistency")).query("from", Some(from)).query("to", Some(to));
        let answer = self.send(call).await?;
        let status = answer.status;
        text_of(answer)?
            .lines()
            .filter(|line| !line.is_empty())
            .map(|line| hash_from_base64(line).ok_or_else(|| unexpected(status, "a proof hash is not base64")))
            .collect()
    }

    /// The entry of event `seq` with its proof (members): the proof (see [`Client::log_proof`])
    /// says where the entry is; the entry is read from its bundle and checked to be the one the
    /// proof proves and to carry `seq`. The checkpoint's signature is not checked here: that is
    /// [`verify_proof`]'s job, against a policy.
    pub async fn log_entry(&self, coop: &CoopId, seq: u64, wait: bool) -> Result<LogEntry> {
        let proof_text = self.log_proof(coop, seq, wait).await?;
        let proof = TlogProof::parse(proof_text.as_bytes()).map_err(|e| Error::Usage(e.to_string()))?;
        let (index, size) = (proof.index(), proof.checkpoint().size());
        let mut entries = self.log_entries(coop, index, index + 1, size).await?;
        let bytes = entries.pop().ok_or_else(|| Error::Usage(format!("no entry {index}")))?;
        let status = reqwest::StatusCode::OK;
        verify_inclusion(index, size, &leaf_hash(&bytes), proof.inclusion(), proof.checkpoint().root())
            .map_err(|e| unexpected(status, format!("entry {index} is not the one its proof proves: {e}")))?;
        match entry_head(&bytes) {
            Some(head) if head.seq == seq => Ok(LogEntry { seq, index, bytes, proof: proof_text }),
            Some(head) => Err(unexpected(status, format!("entry {index} is event {}, not {seq}", head.seq))),
            None => Err(unexpected(status, format!("entry {index} is not a log entry"))),
        }
    }
}
