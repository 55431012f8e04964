//! C2SP tlog-cosignature, Ed25519 `cosignature/v1`: a witness's timestamped signature of a
//! checkpoint.
//!
//! A cosignature is a note signature (type `0x04`) on a checkpoint. Its key ID is
//! `SHA-256(name ‖ 0x0A ‖ 0x04 ‖ public key)[:4]`, its payload is
//! `key ID ‖ 8-byte big-endian timestamp ‖ 64-byte Ed25519 signature`, and the signed message is
//!
//! ```text
//! cosignature/v1
//! time <timestamp>
//! <the checkpoint body, extension lines included>
//! ```
//!
//! Cosigner keys are written as vkeys `<name>+<key ID>+<base64(0x04 ‖ public key)>`.

use std::fmt;

use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};

use crate::checkpoint::Checkpoint;
use crate::note::{
    NoteError, NoteVerifier, Signature, VerifierKey, ed25519_public_key, ed25519_verify, is_valid_key_name, key_id,
};

/// The signature type byte of Ed25519 `cosignature/v1` cosignatures.
pub const SIG_TYPE_COSIGNATURE_V1: u8 = 0x04;

/// The header line of the signed message.
pub const COSIGNATURE_V1_HEADER: &str = "cosignature/v1";

/// The largest timestamp a cosignature may carry (2^63 − 1).
pub const MAX_TIMESTAMP: u64 = i64::MAX as u64;

/// The length of a `cosignature/v1` payload after the key ID: timestamp and signature.
const PAYLOAD_LEN: usize = 8 + 64;

/// A cosignature that cannot be made or does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CosignatureError {
    /// A malformed key or name.
    #[error(transparent)]
    Key(#[from] NoteError),
    /// A timestamp above 2^63 − 1.
    #[error("timestamp {0} is above 2^63 - 1")]
    Timestamp(u64),
    /// A payload that is not 8 bytes of timestamp and 64 bytes of signature.
    #[error("a cosignature/v1 signature is 72 bytes, not {0}")]
    Length(usize),
    /// The signature does not verify.
    #[error("the cosignature does not verify")]
    Invalid,
}

/// The message a `cosignature/v1` signs: the header line, the time line, then the checkpoint
/// body (`checkpoint_text`, including its final newline).
pub fn signed_message(checkpoint_text: &[u8], timestamp: u64) -> Vec<u8> {
    let mut message = Vec::with_capacity(40 + checkpoint_text.len());
    message.extend_from_slice(COSIGNATURE_V1_HEADER.as_bytes());
    message.extend_from_slice(b"\ntime ");
    message.extend_from_slice(timestamp.to_string().as_bytes());
    message.push(b'\n');
    message.extend_from_slice(checkpoint_text);
    message
}

/// The timestamp a cosignature claims, read without verifying it.
pub fn cosignature_timestamp(signature: &Signature) -> Option<u64> {
    let payload: &[u8; PAYLOAD_LEN] = signature.signature().try_into().ok()?;
    Some(u64::from_be_bytes([
        payload[0], payload[1], payload[2], payload[3], payload[4], payload[5], payload[6], payload[7],
    ]))
}

/// A witness's cosigning key.
#[derive(Clone)]
pub struct Cosigner {
    name: String,
    key_id: u32,
    key: SigningKey,
}

impl fmt::Debug for Cosigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cosigner")
            .field("name", &self.name)
            .field("key_id", &format_args!("{:08x}", self.key_id))
            .finish_non_exhaustive()
    }
}

impl Cosigner {
    /// The cosigner `name` with `key`. (One Ed25519 key must not serve two cosigners: the
    /// signed message does not name the cosigner.)
    pub fn new(name: &str, key: SigningKey) -> Result<Self, CosignatureError> {
        if !is_valid_key_name(name) {
            return Err(NoteError::InvalidKeyName(name.to_owned()).into());
        }
        let key_id = key_id(name, SIG_TYPE_COSIGNATURE_V1, key.verifying_key().as_bytes());
        Ok(Self { name: name.to_owned(), key_id, key })
    }

    /// The cosigner for the Ed25519 private key with this 32-byte seed.
    pub fn from_seed(name: &str, seed: &[u8; 32]) -> Result<Self, CosignatureError> {
        Self::new(name, SigningKey::from_bytes(seed))
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
    pub fn verifier(&self) -> CosignatureVerifier {
        CosignatureVerifier { name: self.name.clone(), key_id: self.key_id, key: self.key.verifying_key() }
    }

    /// The matching verifier key text.
    pub fn vkey(&self) -> String {
        self.verifier().vkey()
    }

    /// Cosigns `checkpoint` at `timestamp` (seconds since the Unix epoch): a note signature to
    /// add to the signed checkpoint with [`crate::note::Note::add_signature`].
    pub fn cosign(&self, checkpoint: &Checkpoint, timestamp: u64) -> Result<Signature, CosignatureError> {
        if timestamp > MAX_TIMESTAMP {
            return Err(CosignatureError::Timestamp(timestamp));
        }
        let message = signed_message(checkpoint.to_text().as_bytes(), timestamp);
        let mut payload = Vec::with_capacity(PAYLOAD_LEN);
        payload.extend_from_slice(&timestamp.to_be_bytes());
        payload.extend_from_slice(&self.key.sign(&message).to_bytes());
        Ok(Signature::new(&self.name, self.key_id, payload)?)
    }
}

/// The verifier of one witness's `cosignature/v1` cosignatures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CosignatureVerifier {
    name: String,
    key_id: u32,
    key: VerifyingKey,
}

impl CosignatureVerifier {
    /// The verifier for `key` under `name`.
    pub fn new(name: &str, key: VerifyingKey) -> Result<Self, CosignatureError> {
        if !is_valid_key_name(name) {
            return Err(NoteError::InvalidKeyName(name.to_owned()).into());
        }
        Ok(Self { name: name.to_owned(), key_id: key_id(name, SIG_TYPE_COSIGNATURE_V1, key.as_bytes()), key })
    }

    /// The verifier of a vkey of type `0x04`.
    pub fn from_vkey(vkey: &str) -> Result<Self, CosignatureError> {
        Self::from_verifier_key(&VerifierKey::parse(vkey)?)
    }

    /// The verifier of a parsed verifier key of type `0x04`.
    pub fn from_verifier_key(vkey: &VerifierKey) -> Result<Self, CosignatureError> {
        if vkey.sig_type() != SIG_TYPE_COSIGNATURE_V1 {
            return Err(NoteError::UnsupportedSignatureType(vkey.sig_type()).into());
        }
        Self::new(vkey.name(), ed25519_public_key(vkey.public_key())?)
    }

    /// The key name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key ID.
    pub fn key_id(&self) -> u32 {
        self.key_id
    }

    /// The Ed25519 public key.
    pub fn public_key(&self) -> &VerifyingKey {
        &self.key
    }

    /// The verifier key text, `<name>+<key ID>+<base64(0x04 ‖ public key)>`.
    pub fn vkey(&self) -> String {
        match VerifierKey::new(&self.name, SIG_TYPE_COSIGNATURE_V1, self.key.as_bytes()) {
            Ok(vkey) => vkey.to_string(),
            // The name was checked when the verifier was made.
            Err(_) => String::new(),
        }
    }

    /// Verifies a cosignature payload (`timestamp ‖ signature`, the bytes after the key ID) of
    /// the checkpoint body `text`, and returns the timestamp it vouches for.
    pub fn verify_cosignature(&self, text: &[u8], payload: &[u8]) -> Result<u64, CosignatureError> {
        let payload: &[u8; PAYLOAD_LEN] = payload.try_into().map_err(|_| CosignatureError::Length(payload.len()))?;
        let (time, signature) = payload.split_at(8);
        let mut time_bytes = [0u8; 8];
        time_bytes.copy_from_slice(time);
        let timestamp = u64::from_be_bytes(time_bytes);
        if timestamp > MAX_TIMESTAMP {
            return Err(CosignatureError::Timestamp(timestamp));
        }
        if ed25519_verify(&self.key, &signed_message(text, timestamp), signature) {
            Ok(timestamp)
        } else {
            Err(CosignatureError::Invalid)
        }
    }
}

impl NoteVerifier for CosignatureVerifier {
    fn name(&self) -> &str {
        &self.name
    }

    fn key_id(&self) -> u32 {
        self.key_id
    }

    fn verify(&self, text: &[u8], signature: &[u8]) -> bool {
        self.verify_cosignature(text, signature).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::leaf_hash;
    use crate::note::{Note, Signer, open};

    fn checkpoint() -> Checkpoint {
        Checkpoint::new("example.com/behind-the-sofa", 20852163, leaf_hash(b"root")).unwrap()
    }

    fn signed_checkpoint(log: &Signer) -> Note {
        let mut note = Note::new(checkpoint().to_text()).unwrap();
        note.sign(log).unwrap();
        note
    }

    #[test]
    fn message_layout_follows_the_spec() {
        let text = "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n";
        assert_eq!(
            signed_message(text.as_bytes(), 1679315147),
            b"cosignature/v1\ntime 1679315147\nexample.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
        );
        assert_eq!(signed_message(b"x\n", 0), b"cosignature/v1\ntime 0\nx\n");
    }

    #[test]
    fn key_id_and_vkey_use_type_0x04() {
        let cosigner = Cosigner::from_seed("witness.example.com/w1", &[4; 32]).unwrap();
        let public = cosigner.verifier().public_key().to_bytes();
        assert_eq!(cosigner.key_id(), key_id("witness.example.com/w1", 0x04, &public));
        assert_ne!(cosigner.key_id(), key_id("witness.example.com/w1", 0x01, &public));
        let vkey = VerifierKey::parse(&cosigner.vkey()).unwrap();
        assert_eq!(vkey.sig_type(), 0x04);
        assert_eq!(vkey.public_key(), public);
        assert!(cosigner.vkey().starts_with(&format!("witness.example.com/w1+{:08x}+B", cosigner.key_id())));
        assert_eq!(CosignatureVerifier::from_vkey(&cosigner.vkey()).unwrap(), cosigner.verifier());
        // A type-0x01 key is not a cosigner key, and the other way around.
        let signer = Signer::from_seed("witness.example.com/w1", &[4; 32]).unwrap();
        assert_eq!(CosignatureVerifier::from_vkey(&signer.vkey()), Err(NoteError::UnsupportedSignatureType(1).into()));
        assert_eq!(crate::note::Verifier::from_vkey(&cosigner.vkey()), Err(NoteError::UnsupportedSignatureType(4)));
        assert!(Cosigner::from_seed("bad name", &[4; 32]).is_err());
    }

    #[test]
    fn round_trip_in_a_note() {
        let log = Signer::from_seed("example.com/behind-the-sofa", &[1; 32]).unwrap();
        let witness = Cosigner::from_seed("witness.example.com/w1", &[2; 32]).unwrap();
        let mut note = signed_checkpoint(&log);
        let cosignature = witness.cosign(&checkpoint(), 1679315147).unwrap();
        assert_eq!(cosignature.signature().len(), 72);
        assert_eq!(cosignature_timestamp(&cosignature), Some(1679315147));
        note.add_signature(cosignature.clone()).unwrap();
        let text = note.to_string();
        let line = cosignature.line();
        assert!(line.starts_with("— witness.example.com/w1 ") && text.ends_with(&line));

        let verifier = witness.verifier();
        let opened = open(text.as_bytes(), &[&log.verifier(), &verifier]).unwrap();
        assert_eq!(opened.verified_by, vec![0, 1]);
        assert_eq!(verifier.verify_cosignature(note.text().as_bytes(), cosignature.signature()), Ok(1679315147));
        // The cosignature alone (the log's key unknown) also opens the note.
        assert_eq!(open(text.as_bytes(), &[&verifier]).unwrap().verified_by, vec![0]);
    }

    #[test]
    fn tampering_fails() {
        let witness = Cosigner::from_seed("witness.example.com/w1", &[2; 32]).unwrap();
        let verifier = witness.verifier();
        let text = checkpoint().to_text();
        let payload = witness.cosign(&checkpoint(), 1679315147).unwrap().signature().to_vec();
        assert_eq!(verifier.verify_cosignature(text.as_bytes(), &payload), Ok(1679315147));

        // Another timestamp, one second later.
        let mut later = payload.clone();
        later[7] ^= 0x01;
        assert_eq!(verifier.verify_cosignature(text.as_bytes(), &later), Err(CosignatureError::Invalid));
        // A timestamp above 2^63 - 1.
        let mut huge = payload.clone();
        huge[0] |= 0x80;
        assert!(matches!(verifier.verify_cosignature(text.as_bytes(), &huge), Err(CosignatureError::Timestamp(_))));
        // Another checkpoint.
        let other = Checkpoint::new("example.com/behind-the-sofa", 20852164, leaf_hash(b"root")).unwrap().to_text();
        assert_eq!(verifier.verify_cosignature(other.as_bytes(), &payload), Err(CosignatureError::Invalid));
        // A flipped signature bit, a short payload.
        let mut flipped = payload.clone();
        flipped[40] ^= 0x04;
        assert_eq!(verifier.verify_cosignature(text.as_bytes(), &flipped), Err(CosignatureError::Invalid));
        assert_eq!(verifier.verify_cosignature(text.as_bytes(), &payload[..71]), Err(CosignatureError::Length(71)));
        // A plain Ed25519 signature of the body by the same key is not a cosignature.
        let plain =
            Signer::new("witness.example.com/w1", SigningKey::from_bytes(&[2; 32])).unwrap().sign(&text).unwrap();
        assert!(verifier.verify_cosignature(text.as_bytes(), plain.signature()).is_err());
        // Another witness's key.
        let other_witness = Cosigner::from_seed("witness.example.com/w1", &[3; 32]).unwrap().verifier();
        assert_eq!(other_witness.verify_cosignature(text.as_bytes(), &payload), Err(CosignatureError::Invalid));

        // In a note, a tampered timestamp of a known witness rejects the note.
        let log = Signer::from_seed("example.com/behind-the-sofa", &[1; 32]).unwrap();
        let mut note = signed_checkpoint(&log);
        note.add_signature(Signature::new(witness.name(), witness.key_id(), later).unwrap()).unwrap();
        assert!(matches!(
            open(note.to_string().as_bytes(), &[&log.verifier(), &verifier]),
            Err(NoteError::InvalidSignature { .. })
        ));
        assert_eq!(
            witness.cosign(&checkpoint(), MAX_TIMESTAMP + 1),
            Err(CosignatureError::Timestamp(MAX_TIMESTAMP + 1))
        );
        assert!(witness.cosign(&checkpoint(), MAX_TIMESTAMP).is_ok());
    }
}
