//! C2SP signed-note: text signed by one or more named keys, and verifier keys (`vkey`s).
//!
//! A signed note is a text ending in a newline, a blank line, then one or more lines
//! `— <key name> <base64(key ID ‖ signature)>` (an em dash U+2014 and a space first). The key ID
//! is the first four bytes of `SHA-256(name ‖ 0x0A ‖ signature type ‖ public key)`. This module
//! implements Ed25519 signatures (type `0x01`); timestamped witness cosignatures (type `0x04`)
//! live in [`crate::cosignature`] and verify through the same [`NoteVerifier`] trait.
//!
//! Opening a note follows the spec (and Go's `golang.org/x/mod/sumdb/note`): signatures whose
//! name and key ID match no known key are ignored, a signature by a known key that fails to
//! verify rejects the whole note, and a note with no verified signature is rejected.

use std::fmt;
use std::str::FromStr;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signature as Ed25519Signature, Signer as _, SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};

/// The signature type byte of plain Ed25519 note signatures.
pub const SIG_TYPE_ED25519: u8 = 0x01;

/// The most signatures a note may carry; the spec requires accepting at least 16.
pub const MAX_SIGNATURES: usize = 100;

/// The prefix of every signature line: an em dash (U+2014) and a space.
pub const SIGNATURE_PREFIX: &str = "\u{2014} ";

/// A malformed note, key or signature, or a note that does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoteError {
    /// The note's bytes are not a signed note.
    #[error("malformed note: {0}")]
    Malformed(&'static str),
    /// More than [`MAX_SIGNATURES`] signature lines.
    #[error("a note carries at most {MAX_SIGNATURES} signatures")]
    TooManySignatures,
    /// A key name that is empty or holds a space, a `+` or a control character.
    #[error("invalid key name {0:?}")]
    InvalidKeyName(String),
    /// A verifier or signer key that is not `<name>+<hex key ID>+<base64 key>`.
    #[error("malformed key: {0}")]
    MalformedKey(&'static str),
    /// A key whose stated key ID is not the one its name and public key give.
    #[error("key ID {stated:08x} does not match the key ({computed:08x})")]
    KeyIdMismatch {
        /// The key ID written in the key.
        stated: u32,
        /// The key ID computed from the name and public key.
        computed: u32,
    },
    /// A key of a signature type this type of verifier or signer does not handle.
    #[error("signature type 0x{0:02x} is not supported here")]
    UnsupportedSignatureType(u8),
    /// Public key bytes that are not an Ed25519 public key.
    #[error("invalid Ed25519 public key")]
    InvalidPublicKey,
    /// Several known keys share the name and key ID of a signature.
    #[error("more than one known key is {name}+{key_id:08x}")]
    AmbiguousKey {
        /// The key name.
        name: String,
        /// The key ID.
        key_id: u32,
    },
    /// A signature by a known key that does not verify.
    #[error("invalid signature by {name}+{key_id:08x}")]
    InvalidSignature {
        /// The key name.
        name: String,
        /// The key ID.
        key_id: u32,
    },
    /// No signature of the note is by a known key.
    #[error("the note has no signature by a known key")]
    NoKnownSignature,
}

/// The key ID of a key: the first four bytes, big-endian, of
/// `SHA-256(name ‖ 0x0A ‖ signature type ‖ public key)`.
pub fn key_id(name: &str, sig_type: u8, public_key: &[u8]) -> u32 {
    let mut hasher = Sha256::new();
    hasher.update(name.as_bytes());
    hasher.update([b'\n', sig_type]);
    hasher.update(public_key);
    let digest = hasher.finalize();
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// Whether `name` can name a key: non-empty, without Unicode spaces, `+` or control characters.
pub fn is_valid_key_name(name: &str) -> bool {
    !name.is_empty() && !name.chars().any(|c| c.is_whitespace() || c == '+' || c < ' ')
}

fn check_key_name(name: &str) -> Result<(), NoteError> {
    if is_valid_key_name(name) { Ok(()) } else { Err(NoteError::InvalidKeyName(name.to_owned())) }
}

/// Checks a note text: it ends in a newline and has no control characters other than newlines.
fn check_text(text: &str) -> Result<(), NoteError> {
    if !text.ends_with('\n') {
        return Err(NoteError::Malformed("the text does not end with a newline"));
    }
    if text.chars().any(|c| c < ' ' && c != '\n') {
        return Err(NoteError::Malformed("control character"));
    }
    Ok(())
}

/// Splits `<name>+<8 hex digits>+<base64>` (the key name cannot hold a `+`; base64 can).
fn split_key(text: &str) -> Result<(&str, u32, Vec<u8>), NoteError> {
    let (name, rest) = text.split_once('+').ok_or(NoteError::MalformedKey("no key ID"))?;
    let (id_hex, key64) = rest.split_once('+').ok_or(NoteError::MalformedKey("no key material"))?;
    check_key_name(name)?;
    if id_hex.len() != 8 || !id_hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(NoteError::MalformedKey("the key ID is not 8 hex digits"));
    }
    let stated = u32::from_str_radix(id_hex, 16).map_err(|_| NoteError::MalformedKey("bad key ID"))?;
    let key = STANDARD.decode(key64).map_err(|_| NoteError::MalformedKey("the key is not base64"))?;
    if key.is_empty() {
        return Err(NoteError::MalformedKey("empty key"));
    }
    Ok((name, stated, key))
}

/// A verifier key (`vkey`): `<name>+<8 hex digit key ID>+<base64(signature type ‖ public key)>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct VerifierKey {
    name: String,
    key_id: u32,
    sig_type: u8,
    public_key: Vec<u8>,
}

impl VerifierKey {
    /// The verifier key of `public_key` with the standard key ID for its name and type.
    pub fn new(name: &str, sig_type: u8, public_key: &[u8]) -> Result<Self, NoteError> {
        check_key_name(name)?;
        Ok(Self {
            name: name.to_owned(),
            key_id: key_id(name, sig_type, public_key),
            sig_type,
            public_key: public_key.to_vec(),
        })
    }

    /// Parses a vkey. The key ID must be the standard one for every signature type but
    /// `0x02` (ECDSA, whose key ID hashes the DER key instead).
    pub fn parse(vkey: &str) -> Result<Self, NoteError> {
        let (name, stated, key) = split_key(vkey)?;
        let (sig_type, public_key) = (key[0], key[1..].to_vec());
        if sig_type != 0x02 {
            let computed = key_id(name, sig_type, &public_key);
            if stated != computed {
                return Err(NoteError::KeyIdMismatch { stated, computed });
            }
        }
        Ok(Self { name: name.to_owned(), key_id: stated, sig_type, public_key })
    }

    /// The key name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key ID.
    pub fn key_id(&self) -> u32 {
        self.key_id
    }

    /// The signature type byte.
    pub fn sig_type(&self) -> u8 {
        self.sig_type
    }

    /// The public key, without the signature type byte.
    pub fn public_key(&self) -> &[u8] {
        &self.public_key
    }
}

impl fmt::Display for VerifierKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut key = Vec::with_capacity(1 + self.public_key.len());
        key.push(self.sig_type);
        key.extend_from_slice(&self.public_key);
        write!(f, "{}+{:08x}+{}", self.name, self.key_id, STANDARD.encode(key))
    }
}

impl FromStr for VerifierKey {
    type Err = NoteError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Something that checks signatures by one key of a note.
pub trait NoteVerifier {
    /// The key name.
    fn name(&self) -> &str;
    /// The key ID.
    fn key_id(&self) -> u32;
    /// Whether `signature` (the bytes after the key ID) is a valid signature of the note text.
    fn verify(&self, text: &[u8], signature: &[u8]) -> bool;
}

/// Checks an Ed25519 signature strictly (RFC 8032 with canonical encodings, no small-order keys).
pub(crate) fn ed25519_verify(key: &VerifyingKey, message: &[u8], signature: &[u8]) -> bool {
    Ed25519Signature::from_slice(signature).is_ok_and(|sig| key.verify_strict(message, &sig).is_ok())
}

/// An Ed25519 public key from 32 bytes.
pub(crate) fn ed25519_public_key(bytes: &[u8]) -> Result<VerifyingKey, NoteError> {
    let bytes: &[u8; 32] = bytes.try_into().map_err(|_| NoteError::InvalidPublicKey)?;
    VerifyingKey::from_bytes(bytes).map_err(|_| NoteError::InvalidPublicKey)
}

/// The verifier of Ed25519 note signatures (type `0x01`) by one named key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verifier {
    name: String,
    key_id: u32,
    key: VerifyingKey,
}

impl Verifier {
    /// The verifier for `key` under `name`.
    pub fn new(name: &str, key: VerifyingKey) -> Result<Self, NoteError> {
        check_key_name(name)?;
        Ok(Self { name: name.to_owned(), key_id: key_id(name, SIG_TYPE_ED25519, key.as_bytes()), key })
    }

    /// The verifier of a vkey of type `0x01`.
    pub fn from_vkey(vkey: &str) -> Result<Self, NoteError> {
        Self::from_verifier_key(&VerifierKey::parse(vkey)?)
    }

    /// The verifier of a parsed verifier key of type `0x01`.
    pub fn from_verifier_key(vkey: &VerifierKey) -> Result<Self, NoteError> {
        if vkey.sig_type != SIG_TYPE_ED25519 {
            return Err(NoteError::UnsupportedSignatureType(vkey.sig_type));
        }
        Self::new(&vkey.name, ed25519_public_key(&vkey.public_key)?)
    }

    /// The Ed25519 public key.
    pub fn public_key(&self) -> &VerifyingKey {
        &self.key
    }

    /// The verifier key text, `<name>+<key ID>+<base64(0x01 ‖ public key)>`.
    pub fn vkey(&self) -> String {
        VerifierKey {
            name: self.name.clone(),
            key_id: self.key_id,
            sig_type: SIG_TYPE_ED25519,
            public_key: self.key.to_bytes().to_vec(),
        }
        .to_string()
    }
}

impl NoteVerifier for Verifier {
    fn name(&self) -> &str {
        &self.name
    }

    fn key_id(&self) -> u32 {
        self.key_id
    }

    fn verify(&self, text: &[u8], signature: &[u8]) -> bool {
        ed25519_verify(&self.key, text, signature)
    }
}

/// An Ed25519 note signer (type `0x01`): a named private key.
#[derive(Clone)]
pub struct Signer {
    name: String,
    key_id: u32,
    key: SigningKey,
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signer")
            .field("name", &self.name)
            .field("key_id", &format_args!("{:08x}", self.key_id))
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// The signer for `key` under `name`.
    pub fn new(name: &str, key: SigningKey) -> Result<Self, NoteError> {
        check_key_name(name)?;
        let key_id = key_id(name, SIG_TYPE_ED25519, key.verifying_key().as_bytes());
        Ok(Self { name: name.to_owned(), key_id, key })
    }

    /// The signer for the Ed25519 private key with this 32-byte seed.
    pub fn from_seed(name: &str, seed: &[u8; 32]) -> Result<Self, NoteError> {
        Self::new(name, SigningKey::from_bytes(seed))
    }

    /// Parses the private key encoding of Go's `golang.org/x/mod/sumdb/note`:
    /// `PRIVATE+KEY+<name>+<key ID>+<base64(0x01 ‖ 32-byte seed)>`.
    pub fn from_skey(skey: &str) -> Result<Self, NoteError> {
        let rest = skey.strip_prefix("PRIVATE+KEY+").ok_or(NoteError::MalformedKey("no PRIVATE+KEY+ prefix"))?;
        let (name, stated, key) = split_key(rest)?;
        if key[0] != SIG_TYPE_ED25519 {
            return Err(NoteError::UnsupportedSignatureType(key[0]));
        }
        let seed: &[u8; 32] = key[1..].try_into().map_err(|_| NoteError::MalformedKey("the seed is not 32 bytes"))?;
        let signer = Self::from_seed(name, seed)?;
        if signer.key_id != stated {
            return Err(NoteError::KeyIdMismatch { stated, computed: signer.key_id });
        }
        Ok(signer)
    }

    /// The private key in Go's `PRIVATE+KEY+…` encoding. It is a secret.
    pub fn skey(&self) -> String {
        let mut key = vec![SIG_TYPE_ED25519];
        key.extend_from_slice(self.key.as_bytes());
        format!("PRIVATE+KEY+{}+{:08x}+{}", self.name, self.key_id, STANDARD.encode(key))
    }

    /// The key name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key ID.
    pub fn key_id(&self) -> u32 {
        self.key_id
    }

    /// The matching verifier.
    pub fn verifier(&self) -> Verifier {
        Verifier { name: self.name.clone(), key_id: self.key_id, key: self.key.verifying_key() }
    }

    /// The matching verifier key text.
    pub fn vkey(&self) -> String {
        self.verifier().vkey()
    }

    /// The signature of a note text (which must end in a newline and hold no control
    /// characters other than newlines).
    pub fn sign(&self, text: &str) -> Result<Signature, NoteError> {
        check_text(text)?;
        let signature = self.key.sign(text.as_bytes()).to_bytes().to_vec();
        Ok(Signature { name: self.name.clone(), key_id: self.key_id, signature })
    }
}

/// One signature line of a note: key name, key ID and the signature bytes after the key ID.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Signature {
    name: String,
    key_id: u32,
    signature: Vec<u8>,
}

impl Signature {
    /// A signature by the key `name` with `key_id`; `signature` must not be empty.
    pub fn new(name: &str, key_id: u32, signature: Vec<u8>) -> Result<Self, NoteError> {
        check_key_name(name)?;
        if signature.is_empty() {
            return Err(NoteError::Malformed("empty signature"));
        }
        Ok(Self { name: name.to_owned(), key_id, signature })
    }

    /// The key name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key ID.
    pub fn key_id(&self) -> u32 {
        self.key_id
    }

    /// The signature bytes, without the key ID.
    pub fn signature(&self) -> &[u8] {
        &self.signature
    }

    /// The signature line, `— <name> <base64(key ID ‖ signature)>` and a newline.
    pub fn line(&self) -> String {
        let mut raw = Vec::with_capacity(4 + self.signature.len());
        raw.extend_from_slice(&self.key_id.to_be_bytes());
        raw.extend_from_slice(&self.signature);
        format!("{SIGNATURE_PREFIX}{} {}\n", self.name, STANDARD.encode(raw))
    }

    /// Parses a signature line without its newline.
    fn parse_line(line: &str) -> Result<Self, NoteError> {
        let rest =
            line.strip_prefix(SIGNATURE_PREFIX).ok_or(NoteError::Malformed("a signature line must start with '— '"))?;
        let (name, encoded) =
            rest.split_once(' ').ok_or(NoteError::Malformed("a signature line needs a name and a signature"))?;
        if !is_valid_key_name(name) {
            return Err(NoteError::Malformed("invalid key name in a signature line"));
        }
        let raw = STANDARD.decode(encoded).map_err(|_| NoteError::Malformed("a signature is not base64"))?;
        if raw.len() < 5 {
            return Err(NoteError::Malformed("a signature is shorter than 5 bytes"));
        }
        let key_id = u32::from_be_bytes([raw[0], raw[1], raw[2], raw[3]]);
        Ok(Self { name: name.to_owned(), key_id, signature: raw[4..].to_vec() })
    }
}

/// A note: a text and its signatures, verified or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    text: String,
    signatures: Vec<Signature>,
}

impl Note {
    /// An unsigned note. The text must end in a newline and hold no control characters other
    /// than newlines.
    pub fn new(text: impl Into<String>) -> Result<Self, NoteError> {
        let text = text.into();
        check_text(&text)?;
        Ok(Self { text, signatures: Vec::new() })
    }

    /// Parses a signed note without verifying anything: valid UTF-8, no control characters but
    /// newlines, the text up to the last blank line, then 1 to [`MAX_SIGNATURES`] well-formed
    /// signature lines, each ending in a newline.
    pub fn parse(msg: &[u8]) -> Result<Self, NoteError> {
        let msg = std::str::from_utf8(msg).map_err(|_| NoteError::Malformed("not valid UTF-8"))?;
        if msg.chars().any(|c| c < ' ' && c != '\n') {
            return Err(NoteError::Malformed("control character"));
        }
        let split = msg.rfind("\n\n").ok_or(NoteError::Malformed("no blank line before the signatures"))?;
        let (text, block) = (&msg[..split + 1], &msg[split + 2..]);
        let Some(block) = block.strip_suffix('\n') else {
            return Err(NoteError::Malformed("the signatures must end with a newline"));
        };
        let mut signatures = Vec::new();
        for line in block.split('\n') {
            if signatures.len() == MAX_SIGNATURES {
                return Err(NoteError::TooManySignatures);
            }
            signatures.push(Signature::parse_line(line)?);
        }
        Ok(Self { text: text.to_owned(), signatures })
    }

    /// The text, including its final newline.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The signatures, in order.
    pub fn signatures(&self) -> &[Signature] {
        &self.signatures
    }

    /// Adds a signature, replacing any by the same key name and key ID.
    pub fn add_signature(&mut self, signature: Signature) -> Result<(), NoteError> {
        self.signatures.retain(|s| s.name != signature.name || s.key_id != signature.key_id);
        if self.signatures.len() == MAX_SIGNATURES {
            return Err(NoteError::TooManySignatures);
        }
        self.signatures.push(signature);
        Ok(())
    }

    /// Signs the note with `signer`, replacing any earlier signature by the same key.
    pub fn sign(&mut self, signer: &Signer) -> Result<(), NoteError> {
        let signature = signer.sign(&self.text)?;
        self.add_signature(signature)
    }

    /// Verifies the note against known keys and returns the indices in `verifiers` of those
    /// whose signature verified (sorted).
    ///
    /// Signatures whose key name and key ID match no verifier are ignored. A signature matching
    /// a verifier must verify, or the note is rejected; repeated signatures by a key already
    /// verified are skipped. The note is rejected if no signature verified, or if several
    /// verifiers share the name and key ID of a signature.
    pub fn verify(&self, verifiers: &[&dyn NoteVerifier]) -> Result<Vec<usize>, NoteError> {
        let mut verified = Vec::new();
        for signature in &self.signatures {
            let mut matching = verifiers
                .iter()
                .enumerate()
                .filter(|(_, v)| v.key_id() == signature.key_id && v.name() == signature.name);
            let Some((index, verifier)) = matching.next() else { continue };
            if matching.next().is_some() {
                return Err(NoteError::AmbiguousKey { name: signature.name.clone(), key_id: signature.key_id });
            }
            if verified.contains(&index) {
                continue;
            }
            if !verifier.verify(self.text.as_bytes(), &signature.signature) {
                return Err(NoteError::InvalidSignature { name: signature.name.clone(), key_id: signature.key_id });
            }
            verified.push(index);
        }
        if verified.is_empty() {
            return Err(NoteError::NoKnownSignature);
        }
        verified.sort_unstable();
        Ok(verified)
    }
}

impl fmt::Display for Note {
    /// The signed note: the text, a blank line, the signature lines. (A note without
    /// signatures gives a text that [`Note::parse`] rejects.)
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)?;
        f.write_str("\n")?;
        for signature in &self.signatures {
            f.write_str(&signature.line())?;
        }
        Ok(())
    }
}

/// A note opened with [`open`]: the parsed note and which verifiers vouched for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenedNote {
    /// The note, with all its signatures (known or not).
    pub note: Note,
    /// The indices in the verifier list of the keys whose signatures verified, sorted.
    pub verified_by: Vec<usize>,
}

/// Signs `text` with each signer and returns the signed note.
pub fn sign(text: &str, signers: &[&Signer]) -> Result<String, NoteError> {
    let mut note = Note::new(text)?;
    for signer in signers {
        note.sign(signer)?;
    }
    if note.signatures.is_empty() {
        return Err(NoteError::Malformed("a signed note needs at least one signature"));
    }
    Ok(note.to_string())
}

/// Parses a signed note and verifies it against known keys (see [`Note::verify`]).
pub fn open(msg: &[u8], verifiers: &[&dyn NoteVerifier]) -> Result<OpenedNote, NoteError> {
    let note = Note::parse(msg)?;
    let verified_by = note.verify(verifiers)?;
    Ok(OpenedNote { note, verified_by })
}

#[cfg(test)]
mod tests;
