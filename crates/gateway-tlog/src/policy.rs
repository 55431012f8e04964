//! C2SP tlog-policy: which logs and witnesses a verifier trusts, and the quorum of
//! cosignatures a checkpoint needs.
//!
//! ```text
//! log <vkey> [<url>]
//! witness <name> <vkey> [<url>]
//! group <name> all|any|<k> <name>...
//! quorum <name>|none
//! ```
//!
//! Items are separated by spaces and tabs; empty lines and lines whose first item starts with
//! `#` are ignored. Groups and the quorum may only name witnesses and groups defined on earlier
//! lines, so groups nest without cycles; each name may be a group member at most once in the
//! whole policy; `none` (no cosignatures needed) may only be the quorum. Names are opaque byte
//! strings. Logs must have Ed25519 keys (type `0x01`) and witnesses Ed25519 `cosignature/v1`
//! keys (type `0x04`); other key types, such as ML-DSA-44 cosigners, are rejected.

use std::collections::{HashMap, HashSet};

use crate::checkpoint::{Checkpoint, CheckpointError};
use crate::cosignature::{CosignatureVerifier, SIG_TYPE_COSIGNATURE_V1, cosignature_timestamp};
use crate::note::{Note, NoteError, NoteVerifier, SIG_TYPE_ED25519, Verifier, VerifierKey};

/// The predefined name of the empty quorum.
pub const NONE: &str = "none";

/// A policy file that does not follow tlog-policy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    /// A byte outside tab, newline, 0x20–0x7E and 0x80–0xFF.
    #[error("byte 0x{byte:02x} at offset {offset} is not allowed in a policy")]
    Byte {
        /// The offset of the byte in the file.
        offset: usize,
        /// The byte.
        byte: u8,
    },
    /// A malformed or inconsistent line.
    #[error("line {line}: {message}")]
    Line {
        /// The 1-based line number.
        line: usize,
        /// What is wrong with it.
        message: String,
    },
    /// No `quorum` line.
    #[error("the policy has no quorum line")]
    NoQuorum,
}

/// A checkpoint that the policy does not accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckpointVerifyError {
    /// The policy lists no log, so no checkpoint can be accepted by it.
    #[error("the policy lists no log")]
    NoLog,
    /// The note text is not a checkpoint.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// No log of the policy has a key named after the checkpoint's origin.
    #[error("no log of the policy has the origin {0:?}")]
    UnknownOrigin(String),
    /// No log of the policy signed the checkpoint.
    #[error("the checkpoint is not signed by a log of the policy")]
    NotSignedByLog,
    /// A signature by a key of the policy does not verify (or keys of the policy collide).
    #[error(transparent)]
    Note(#[from] NoteError),
    /// The verified cosignatures do not satisfy the quorum.
    #[error("the cosignatures do not satisfy the policy's quorum")]
    QuorumNotMet,
}

/// A log of the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Log {
    verifier: Verifier,
    url: Option<Vec<u8>>,
}

impl Log {
    /// The verifier of the log's checkpoint signatures; its key name is the log's origin.
    pub fn verifier(&self) -> &Verifier {
        &self.verifier
    }

    /// The log's URL, if given (opaque bytes).
    pub fn url(&self) -> Option<&[u8]> {
        self.url.as_deref()
    }
}

/// A witness of the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Witness {
    name: Vec<u8>,
    verifier: CosignatureVerifier,
    url: Option<Vec<u8>>,
}

impl Witness {
    /// The witness's name within the policy (opaque bytes).
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// The verifier of the witness's cosignatures.
    pub fn verifier(&self) -> &CosignatureVerifier {
        &self.verifier
    }

    /// The witness's URL, if given (opaque bytes).
    pub fn url(&self) -> Option<&[u8]> {
        self.url.as_deref()
    }
}

/// A member of a group: a witness or an earlier group, by index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Member {
    /// The witness at this index of [`Policy::witnesses`].
    Witness(usize),
    /// The group at this index of [`Policy::groups`] (always an earlier one).
    Group(usize),
}

/// A group: witnessed when at least `threshold` of its members are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    name: Vec<u8>,
    threshold: usize,
    members: Vec<Member>,
}

impl Group {
    /// The group's name within the policy (opaque bytes).
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// How many members must have witnessed (1 ≤ threshold ≤ members).
    pub fn threshold(&self) -> usize {
        self.threshold
    }

    /// The members.
    pub fn members(&self) -> &[Member] {
        &self.members
    }
}

/// The quorum rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Quorum {
    /// No cosignature needed.
    None,
    /// This witness or group must have witnessed.
    Member(Member),
}

/// A parsed tlog-policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    logs: Vec<Log>,
    witnesses: Vec<Witness>,
    groups: Vec<Group>,
    quorum: Quorum,
}

/// One verified cosignature of an accepted checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WitnessCosignature {
    /// The witness, by index in [`Policy::witnesses`].
    pub witness: usize,
    /// The time the witness vouched for, in seconds since the Unix epoch.
    pub timestamp: u64,
}

/// A checkpoint the policy accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedCheckpoint {
    /// The checkpoint.
    pub checkpoint: Checkpoint,
    /// The log that signed it, by index in [`Policy::logs`].
    pub log: usize,
    /// The verified witness cosignatures, in witness order.
    pub cosignatures: Vec<WitnessCosignature>,
}

/// The items of a line: runs of bytes between spaces and tabs.
fn fields(line: &[u8]) -> Vec<&[u8]> {
    line.split(|b| *b == b' ' || *b == b'\t').filter(|f| !f.is_empty()).collect()
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The parser's state between lines.
#[derive(Default)]
struct Parser<'a> {
    logs: Vec<Log>,
    witnesses: Vec<Witness>,
    groups: Vec<Group>,
    quorum: Option<Quorum>,
    names: HashMap<&'a [u8], Member>,
    members: HashSet<&'a [u8]>,
    log_keys: HashSet<Vec<u8>>,
    witness_keys: HashSet<Vec<u8>>,
}

impl<'a> Parser<'a> {
    fn vkey(text: &[u8]) -> Result<VerifierKey, String> {
        let text = std::str::from_utf8(text).map_err(|_| "a vkey must be UTF-8".to_owned())?;
        VerifierKey::parse(text).map_err(|e| format!("invalid vkey: {e}"))
    }

    fn url(item: Option<&&[u8]>) -> Option<Vec<u8>> {
        item.map(|u| u.to_vec())
    }

    fn new_name(&self, name: &'a [u8]) -> Result<&'a [u8], String> {
        if name == NONE.as_bytes() {
            return Err(format!("the name {NONE:?} is reserved"));
        }
        if self.names.contains_key(name) {
            return Err(format!("duplicate name {:?}", lossy(name)));
        }
        Ok(name)
    }

    fn line(&mut self, items: &[&'a [u8]]) -> Result<(), String> {
        match items[0] {
            b"log" => {
                if !(2..=3).contains(&items.len()) {
                    return Err("usage: log <vkey> [<url>]".into());
                }
                let vkey = Self::vkey(items[1])?;
                if vkey.sig_type() != SIG_TYPE_ED25519 {
                    return Err(format!("log key type 0x{:02x} is not supported (Ed25519, 0x01, is)", vkey.sig_type()));
                }
                let verifier = Verifier::from_verifier_key(&vkey).map_err(|e| format!("invalid log key: {e}"))?;
                if !self.log_keys.insert(vkey.public_key().to_vec()) {
                    return Err("duplicate log key".into());
                }
                self.logs.push(Log { verifier, url: Self::url(items.get(2)) });
            }
            b"witness" => {
                if !(3..=4).contains(&items.len()) {
                    return Err("usage: witness <name> <vkey> [<url>]".into());
                }
                let name = self.new_name(items[1])?;
                let vkey = Self::vkey(items[2])?;
                if vkey.sig_type() != SIG_TYPE_COSIGNATURE_V1 {
                    return Err(format!(
                        "witness key type 0x{:02x} is not supported (Ed25519 cosignature/v1, 0x04, is)",
                        vkey.sig_type()
                    ));
                }
                let verifier =
                    CosignatureVerifier::from_verifier_key(&vkey).map_err(|e| format!("invalid witness key: {e}"))?;
                if !self.witness_keys.insert(vkey.public_key().to_vec()) {
                    return Err("duplicate witness key".into());
                }
                self.names.insert(name, Member::Witness(self.witnesses.len()));
                self.witnesses.push(Witness { name: name.to_vec(), verifier, url: Self::url(items.get(3)) });
            }
            b"group" => {
                if items.len() < 4 {
                    return Err("usage: group <name> all|any|<k> <name>...".into());
                }
                let name = self.new_name(items[1])?;
                let n = items.len() - 3;
                let threshold = match items[2] {
                    b"all" => n,
                    b"any" => 1,
                    k if !k.is_empty() && k.iter().all(u8::is_ascii_digit) => {
                        std::str::from_utf8(k).ok().and_then(|k| k.parse::<usize>().ok()).unwrap_or(usize::MAX)
                    }
                    _ => return Err("the threshold must be all, any or a decimal number".into()),
                };
                if threshold < 1 || threshold > n {
                    return Err(format!("the threshold must be between 1 and {n}"));
                }
                let mut members = Vec::with_capacity(n);
                for member in &items[3..] {
                    if *member == NONE.as_bytes() {
                        return Err(format!("{NONE:?} cannot be a group member"));
                    }
                    let resolved =
                        *self.names.get(member).ok_or_else(|| format!("undefined name {:?}", lossy(member)))?;
                    if !self.members.insert(*member) {
                        return Err(format!("{:?} is already a group member", lossy(member)));
                    }
                    members.push(resolved);
                }
                self.names.insert(name, Member::Group(self.groups.len()));
                self.groups.push(Group { name: name.to_vec(), threshold, members });
            }
            b"quorum" => {
                if items.len() != 2 {
                    return Err("usage: quorum <name>".into());
                }
                if self.quorum.is_some() {
                    return Err("a policy has exactly one quorum line".into());
                }
                self.quorum = Some(if items[1] == NONE.as_bytes() {
                    Quorum::None
                } else {
                    Quorum::Member(
                        *self.names.get(items[1]).ok_or_else(|| format!("undefined name {:?}", lossy(items[1])))?,
                    )
                });
            }
            other => return Err(format!("unknown keyword {:?}", lossy(other))),
        }
        Ok(())
    }
}

impl Policy {
    /// Parses a policy file.
    pub fn parse(text: &[u8]) -> Result<Self, PolicyError> {
        if let Some((offset, &byte)) =
            text.iter().enumerate().find(|(_, b)| !matches!(**b, b'\t' | b'\n' | 0x20..=0x7e | 0x80..=0xff))
        {
            return Err(PolicyError::Byte { offset, byte });
        }
        let mut parser = Parser::default();
        for (number, line) in text.split(|b| *b == b'\n').enumerate() {
            let items = fields(line);
            if items.is_empty() || items[0].starts_with(b"#") {
                continue;
            }
            parser.line(&items).map_err(|message| PolicyError::Line { line: number + 1, message })?;
        }
        let quorum = parser.quorum.ok_or(PolicyError::NoQuorum)?;
        Ok(Self { logs: parser.logs, witnesses: parser.witnesses, groups: parser.groups, quorum })
    }

    /// The logs, in order of definition.
    pub fn logs(&self) -> &[Log] {
        &self.logs
    }

    /// The witnesses, in order of definition.
    pub fn witnesses(&self) -> &[Witness] {
        &self.witnesses
    }

    /// The groups, in order of definition (members only refer to earlier groups).
    pub fn groups(&self) -> &[Group] {
        &self.groups
    }

    /// The quorum rule.
    pub fn quorum(&self) -> Quorum {
        self.quorum
    }

    /// Whether the witnesses marked in `witnessed` (indexed like [`Policy::witnesses`]; missing
    /// entries count as not witnessed) satisfy the quorum.
    pub fn quorum_satisfied(&self, witnessed: &[bool]) -> bool {
        let witness = |i: usize| witnessed.get(i).copied().unwrap_or(false);
        // Groups only refer to earlier groups, so one pass in order settles them all.
        let mut groups = Vec::with_capacity(self.groups.len());
        for group in &self.groups {
            let count = group
                .members
                .iter()
                .filter(|m| match m {
                    Member::Witness(i) => witness(*i),
                    Member::Group(j) => groups.get(*j).copied().unwrap_or(false),
                })
                .count();
            groups.push(count >= group.threshold);
        }
        match self.quorum {
            Quorum::None => true,
            Quorum::Member(Member::Witness(i)) => witness(i),
            Quorum::Member(Member::Group(j)) => groups.get(j).copied().unwrap_or(false),
        }
    }

    /// Accepts a signed checkpoint if it is signed by a log of the policy whose key name is the
    /// checkpoint's origin, and cosigned by witnesses that satisfy the quorum.
    ///
    /// As signed-note requires, every signature by a key of the policy (the matching logs and
    /// all witnesses) must verify; signatures by other keys are ignored.
    pub fn verify_checkpoint(&self, note: &Note) -> Result<VerifiedCheckpoint, CheckpointVerifyError> {
        if self.logs.is_empty() {
            return Err(CheckpointVerifyError::NoLog);
        }
        let checkpoint = Checkpoint::parse(note.text())?;
        let mut verifiers: Vec<&dyn NoteVerifier> = Vec::with_capacity(self.logs.len() + self.witnesses.len());
        let mut log_indices = Vec::new();
        for (i, log) in self.logs.iter().enumerate() {
            if log.verifier.name() == checkpoint.origin() {
                verifiers.push(&log.verifier);
                log_indices.push(i);
            }
        }
        if log_indices.is_empty() {
            return Err(CheckpointVerifyError::UnknownOrigin(checkpoint.origin().to_owned()));
        }
        let log_count = verifiers.len();
        verifiers.extend(self.witnesses.iter().map(|w| &w.verifier as &dyn NoteVerifier));
        let verified = match note.verify(&verifiers) {
            Ok(verified) => verified,
            Err(NoteError::NoKnownSignature) => return Err(CheckpointVerifyError::NotSignedByLog),
            Err(e) => return Err(e.into()),
        };
        let log = verified
            .iter()
            .find(|i| **i < log_count)
            .map(|i| log_indices[*i])
            .ok_or(CheckpointVerifyError::NotSignedByLog)?;
        let mut witnessed = vec![false; self.witnesses.len()];
        let mut cosignatures = Vec::new();
        for witness in verified.iter().filter_map(|i| i.checked_sub(log_count)) {
            witnessed[witness] = true;
            let verifier = &self.witnesses[witness].verifier;
            let timestamp = note
                .signatures()
                .iter()
                .find(|s| s.key_id() == verifier.key_id() && s.name() == verifier.name())
                .and_then(cosignature_timestamp)
                .unwrap_or_default();
            cosignatures.push(WitnessCosignature { witness, timestamp });
        }
        if !self.quorum_satisfied(&witnessed) {
            return Err(CheckpointVerifyError::QuorumNotMet);
        }
        Ok(VerifiedCheckpoint { checkpoint, log, cosignatures })
    }
}

#[cfg(test)]
mod tests;
