//! A member's Ed25519 identity: its DIDs, the signatures the protocol needs (login nonces,
//! compute completions), and the key file format shared with `gatewayctl`.
//!
//! The secret never leaves the [`Identity`] except through [`Identity::to_key_file`], which the
//! caller writes with restrictive permissions. This module reads and writes no files itself
//! (so the SDK makes no decision about paths or permissions) and does not talk to the gateway.

use std::fmt;

use ed25519_dalek::{Signer, SigningKey};
use gateway_core::{Did, Ed25519PublicKey};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

/// Which DID spelling an identity logs in with. Both name the same key; `did:key` is the W3C
/// method, `did:icn` the original cooperative network's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DidForm {
    /// `did:key:z6Mk…`.
    #[default]
    Key,
    /// `did:icn:z…`.
    Icn,
}

/// An Ed25519 key pair and the DID it logs in as.
#[derive(Clone)]
pub struct Identity {
    key: SigningKey,
    did: Did,
}

impl fmt::Debug for Identity {
    /// Only the DID: an identity in a logged struct must not leak its secret.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity").field("did", &self.did).finish_non_exhaustive()
    }
}

impl Identity {
    /// A fresh key from the operating system's random source.
    pub fn generate() -> Self {
        Self::from_signing_key(SigningKey::generate(&mut rand::rngs::OsRng))
    }

    /// The identity of a 32-byte Ed25519 seed (deterministic; for tests and restored keys).
    pub fn from_seed(seed: [u8; 32]) -> Self {
        Self::from_signing_key(SigningKey::from_bytes(&seed))
    }

    /// The identity of an existing signing key, logging in as its `did:key`.
    pub fn from_signing_key(key: SigningKey) -> Self {
        let did = Did::key_from_public_key(&Ed25519PublicKey(key.verifying_key().to_bytes()));
        Self { key, did }
    }

    /// The same key, logging in with the other DID spelling.
    pub fn with_did_form(mut self, form: DidForm) -> Self {
        self.did = match form {
            DidForm::Key => self.did_key(),
            DidForm::Icn => self.did_icn(),
        };
        self
    }

    /// The DID this identity logs in as.
    pub fn did(&self) -> &Did {
        &self.did
    }

    /// The `did:key` of the key.
    pub fn did_key(&self) -> Did {
        Did::key_from_public_key(&self.public_key())
    }

    /// The `did:icn` of the key.
    pub fn did_icn(&self) -> Did {
        Did::icn_from_public_key(&self.public_key())
    }

    /// The public key.
    pub fn public_key(&self) -> Ed25519PublicKey {
        Ed25519PublicKey(self.key.verifying_key().to_bytes())
    }

    /// The underlying key, for protocols this SDK does not cover.
    pub fn signing_key(&self) -> &SigningKey {
        &self.key
    }

    /// The 64-byte Ed25519 signature of `message`.
    pub fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.key.sign(message).to_bytes()
    }

    /// The login signature in the interface's form: hex of the signature over the nonce's UTF-8
    /// bytes.
    pub fn sign_nonce(&self, nonce: &str) -> String {
        hex::encode(self.sign(nonce.as_bytes()))
    }

    /// The login signature in the original network's form: over the 32 bytes the hex nonce
    /// decodes to. The gateway accepts both; this one exists for interoperability tests.
    pub fn sign_nonce_decoded(&self, nonce: &str) -> Result<String> {
        let bytes = hex::decode(nonce).map_err(|_| Error::Usage("the nonce is not hex".into()))?;
        Ok(hex::encode(self.sign(&bytes)))
    }

    /// The executor's signature of a compute result: hex Ed25519 over [`completion_message`]
    /// (`icn-compute-completion/v2`, see `docs/COMPUTE.md`), which covers the output, the
    /// outcome (`None` is `success`), the fuel used and the error text.
    pub fn sign_completion(
        &self,
        task_hash: &str,
        output: &Value,
        outcome: Option<&str>,
        fuel_used: u64,
        error: Option<&str>,
    ) -> Result<String> {
        Ok(hex::encode(self.sign(&completion_message(task_hash, output, outcome, fuel_used, error)?)))
    }

    /// The key file of this identity (holds the secret: write it readable by its owner only).
    pub fn to_key_file(&self) -> KeyFile {
        KeyFile {
            version: KeyFile::VERSION,
            key_type: KeyFile::KEY_TYPE.to_owned(),
            secret_key: hex::encode(self.key.to_bytes()),
            public_key: self.public_key().to_hex(),
            did: self.did_key().to_string(),
            did_icn: self.did_icn().to_string(),
        }
    }

    /// The identity of a key file. The public key and DIDs in the file must match the secret,
    /// so a damaged or hand-edited file is refused instead of logging in as someone else.
    pub fn from_key_file(file: &KeyFile) -> Result<Self> {
        let bad = |why: &str| Error::Usage(format!("invalid key file: {why}"));
        if file.version != KeyFile::VERSION {
            return Err(bad(&format!("unsupported version {}", file.version)));
        }
        if file.key_type != KeyFile::KEY_TYPE {
            return Err(bad(&format!("unsupported key type '{}'", file.key_type)));
        }
        let seed: [u8; 32] = hex::decode(&file.secret_key)
            .ok()
            .and_then(|bytes| bytes.try_into().ok())
            .ok_or_else(|| bad("secret_key must be 64 hex digits"))?;
        let identity = Self::from_seed(seed);
        if identity.public_key().to_hex() != file.public_key.to_ascii_lowercase() {
            return Err(bad("public_key does not match secret_key"));
        }
        if identity.did_key().as_str() != file.did || identity.did_icn().as_str() != file.did_icn {
            return Err(bad("the DIDs do not match the key"));
        }
        Ok(identity)
    }
}

/// The JSON key file shared by the SDK and `gatewayctl`:
/// `{"version": 1, "type": "ed25519", "secret_key": <32-byte seed hex>, "public_key": <hex>,
/// "did": "did:key:…", "did_icn": "did:icn:…"}`. The public parts are there so a person can
/// read who the key is without tools.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyFile {
    /// Format version, 1.
    pub version: u32,
    /// Always `ed25519`.
    #[serde(rename = "type")]
    pub key_type: String,
    /// The 32-byte Ed25519 seed, lowercase hex.
    pub secret_key: String,
    /// The 32-byte public key, lowercase hex.
    pub public_key: String,
    /// The key's `did:key`.
    pub did: String,
    /// The key's `did:icn`.
    pub did_icn: String,
}

impl KeyFile {
    /// The format version this SDK writes and reads.
    pub const VERSION: u32 = 1;
    /// The only key type.
    pub const KEY_TYPE: &'static str = "ed25519";
}

impl fmt::Debug for KeyFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyFile").field("did", &self.did).finish_non_exhaustive()
    }
}

/// The message an executor signs for a compute result, `icn-compute-completion/v2`: six
/// `\n`-terminated lines naming the version, then `task_hash=` (64 lowercase hex),
/// `output=` (lowercase hex SHA-256 of the output's RFC 8785 JCS form), `outcome=`
/// (`success`, `failed` or `out_of_fuel`; `None` is `success`), `fuel_used=` (decimal) and
/// `error=` (`none`, or the lowercase hex SHA-256 of the error text). The gateway checks the
/// same bytes (`docs/COMPUTE.md`, "Completion signature").
pub fn completion_message(
    task_hash: &str,
    output: &Value,
    outcome: Option<&str>,
    fuel_used: u64,
    error: Option<&str>,
) -> Result<Vec<u8>> {
    if task_hash.len() != 64 || hex::decode(task_hash).is_err() {
        return Err(Error::Usage("task_hash must be 64 hex digits".into()));
    }
    let outcome = outcome.unwrap_or("success").to_ascii_lowercase();
    if !matches!(outcome.as_str(), "success" | "failed" | "out_of_fuel") {
        return Err(Error::Usage("outcome is success, failed or out_of_fuel".into()));
    }
    let canonical = serde_jcs::to_vec(output).map_err(|e| Error::Usage(format!("output is not serialisable: {e}")))?;
    let output = hex::encode(Sha256::digest(canonical));
    let error = error.map_or_else(|| "none".to_owned(), |e| hex::encode(Sha256::digest(e.as_bytes())));
    let task_hash = task_hash.to_ascii_lowercase();
    Ok(format!(
        "icn-compute-completion/v2\ntask_hash={task_hash}\noutput={output}\noutcome={outcome}\nfuel_used={fuel_used}\nerror={error}\n"
    )
    .into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::Verifier;
    use serde_json::json;

    #[test]
    fn dids_of_a_fixed_seed() {
        // The seed of docs/RECEIPTS.md's worked example, whose did:key is published there.
        let identity = Identity::from_seed([0x01; 32]);
        assert_eq!(identity.did().as_str(), "did:key:z6Mkon3Necd6NkkyfoGoHxid2znGc59LU3K7mubaRcFbLfLX");
        assert_eq!(identity.public_key().to_hex(), "8a88e3dd7409f195fd52db2d3cba5d72ca6709bf1d94121bf3748801b40f6f5c");
        assert!(identity.did_icn().as_str().starts_with("did:icn:z"));
        assert_eq!(identity.clone().with_did_form(DidForm::Icn).did(), &identity.did_icn());
    }

    #[test]
    fn nonce_signatures_verify_in_both_forms() {
        let identity = Identity::from_seed([7; 32]);
        let nonce = "aa".repeat(32);
        let key = identity.signing_key().verifying_key();
        let utf8 = ed25519_dalek::Signature::from_slice(&hex::decode(identity.sign_nonce(&nonce)).unwrap()).unwrap();
        assert!(key.verify(nonce.as_bytes(), &utf8).is_ok());
        let decoded =
            ed25519_dalek::Signature::from_slice(&hex::decode(identity.sign_nonce_decoded(&nonce).unwrap()).unwrap())
                .unwrap();
        assert!(key.verify(&[0xaa; 32], &decoded).is_ok());
        assert!(identity.sign_nonce_decoded("not hex").is_err());
    }

    #[test]
    fn completion_message_binds_output_outcome_fuel_and_error() {
        let task_hash = "ab".repeat(32);
        let output_digest = hex::encode(Sha256::digest(br#"{"state":{"total":10},"value":10}"#));
        // Key order must not matter: JCS sorts keys.
        let a = completion_message(&task_hash, &json!({"value": 10, "state": {"total": 10}}), None, 7, None).unwrap();
        let b = completion_message(&task_hash, &json!({"state": {"total": 10}, "value": 10}), None, 7, None).unwrap();
        assert_eq!(a, b);
        let expected = format!(
            "icn-compute-completion/v2\ntask_hash={task_hash}\noutput={output_digest}\noutcome=success\nfuel_used=7\nerror=none\n"
        );
        assert_eq!(String::from_utf8(a.clone()).unwrap(), expected);
        let output = json!({"value": 10, "state": {"total": 10}});
        for other in [
            completion_message(&task_hash, &output, Some("failed"), 7, None).unwrap(),
            completion_message(&task_hash, &output, None, 8, None).unwrap(),
            completion_message(&task_hash, &output, None, 7, Some("")).unwrap(),
            completion_message(&task_hash, &json!({"value": 11}), None, 7, None).unwrap(),
        ] {
            assert_ne!(other, a);
        }
        assert!(completion_message("abc", &json!(1), None, 0, None).is_err());
        assert!(completion_message(&task_hash, &json!(1), Some("timeout"), 0, None).is_err());

        let identity = Identity::from_seed([9; 32]);
        let signed = identity.sign_completion(&task_hash, &json!({"value": 10}), Some("failed"), 3, Some("e")).unwrap();
        let message = completion_message(&task_hash, &json!({"value": 10}), Some("failed"), 3, Some("e")).unwrap();
        let signature = ed25519_dalek::Signature::from_slice(&hex::decode(signed).unwrap()).unwrap();
        assert!(identity.signing_key().verifying_key().verify_strict(&message, &signature).is_ok());
    }

    #[test]
    fn key_files_round_trip_and_refuse_mismatches() {
        let identity = Identity::generate();
        let file = identity.to_key_file();
        let text = serde_json::to_string(&file).unwrap();
        assert!(text.contains(r#""type":"ed25519""#));
        let back = Identity::from_key_file(&serde_json::from_str(&text).unwrap()).unwrap();
        assert_eq!(back.did(), identity.did());

        let mut wrong = file.clone();
        wrong.did = Identity::from_seed([3; 32]).did().to_string();
        assert!(Identity::from_key_file(&wrong).is_err());
        let mut short = file.clone();
        short.secret_key.truncate(10);
        assert!(Identity::from_key_file(&short).is_err());
        let mut future = file;
        future.version = 2;
        assert!(Identity::from_key_file(&future).is_err());
        assert!(!format!("{:?}", identity.to_key_file()).contains(&identity.to_key_file().secret_key));
    }
}
