//! Ed25519 verification of a signed challenge nonce.
//!
//! Two message forms are accepted, because two client families exist: the UTF-8 bytes of the
//! nonce's hex string (the specification's SDK flow, tried first) and the 32 bytes obtained by
//! hex-decoding it (the original network's clients). Verification is strict (`verify_strict`):
//! weak keys and malleable signatures are refused.

use ed25519_dalek::{Signature, VerifyingKey};
use gateway_core::{Ed25519PublicKey, Error};

use crate::cache::Bounded;

/// The decoded length of an Ed25519 signature.
pub const SIGNATURE_LEN: usize = 64;

/// Decodes a hex signature, checking the interface's steps "hex-decodes" and "exactly 64 bytes".
pub fn decode_signature_hex(text: &str) -> Result<[u8; SIGNATURE_LEN], Error> {
    let bytes =
        hex::decode(text).map_err(|_| Error::bad_request_field("signature", "signature must be hex-encoded"))?;
    let len = bytes.len();
    bytes.try_into().map_err(|_| {
        Error::bad_request_field(
            "signature",
            format!("invalid signature length: expected {SIGNATURE_LEN} bytes, got {len}"),
        )
    })
}

/// Most decoded keys [`VerifyingKeys`] keeps (about 200 bytes each).
pub const VERIFYING_KEYS_KEPT: usize = 8192;

/// Public keys decoded for verification, by their bytes. Decoding a key decompresses a curve
/// point (a square root in the field), one of the three conversions between a point and its
/// bytes that a verification makes; a member logs in with the same key again and again. Only
/// keys that decode enter it.
pub struct VerifyingKeys(Bounded<[u8; 32], VerifyingKey>);

impl std::fmt::Debug for VerifyingKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifyingKeys").field("kept", &self.len()).finish()
    }
}

impl Default for VerifyingKeys {
    fn default() -> Self {
        Self(Bounded::new(VERIFYING_KEYS_KEPT))
    }
}

impl VerifyingKeys {
    /// `key`, decoded; `None` when its bytes are no point of the curve.
    pub fn get(&self, key: &Ed25519PublicKey) -> Option<VerifyingKey> {
        if let Some(decoded) = self.0.get(&key.0) {
            return Some(decoded);
        }
        let decoded = VerifyingKey::from_bytes(&key.0).ok()?;
        self.0.insert(key.0, decoded);
        Some(decoded)
    }

    /// Keys kept now.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no key is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether `signature` is the key's signature over the nonce, in either accepted form.
pub fn verify_nonce_signature(key: &VerifyingKey, nonce_hex: &str, signature: &[u8; SIGNATURE_LEN]) -> bool {
    let signature = Signature::from_bytes(signature);
    if key.verify_strict(nonce_hex.as_bytes(), &signature).is_ok() {
        return true;
    }
    match hex::decode(nonce_hex) {
        Ok(raw) => key.verify_strict(&raw, &signature).is_ok(),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer, SigningKey};

    fn key() -> SigningKey {
        SigningKey::from_bytes(&[9; 32])
    }

    #[test]
    fn both_forms_verify_and_others_do_not() {
        let sk = key();
        let pk = sk.verifying_key();
        let nonce = hex::encode([0xab; 32]);
        let utf8 = sk.sign(nonce.as_bytes()).to_bytes();
        let raw = sk.sign(&[0xab; 32]).to_bytes();
        assert!(verify_nonce_signature(&pk, &nonce, &utf8));
        assert!(verify_nonce_signature(&pk, &nonce, &raw));
        let other = sk.sign(b"something else").to_bytes();
        assert!(!verify_nonce_signature(&pk, &nonce, &other));
        let stranger = SigningKey::from_bytes(&[1; 32]).verifying_key();
        assert!(!verify_nonce_signature(&stranger, &nonce, &utf8));
    }

    #[test]
    fn a_key_is_decoded_once_and_a_key_off_the_curve_never_kept() {
        let keys = VerifyingKeys::default();
        let pk = Ed25519PublicKey(key().verifying_key().to_bytes());
        assert_eq!(keys.get(&pk), Some(key().verifying_key()));
        assert_eq!(keys.get(&pk), Some(key().verifying_key()));
        assert_eq!(keys.len(), 1);
        // y = 2 has no x on the curve: not a key.
        let mut off = [0u8; 32];
        off[0] = 2;
        assert!(VerifyingKey::from_bytes(&off).is_err());
        assert_eq!(keys.get(&Ed25519PublicKey(off)), None);
        assert_eq!(keys.len(), 1);
    }

    #[test]
    fn decoding_checks_hex_then_length() {
        assert_eq!(decode_signature_hex("zz").unwrap_err().code().as_str(), "BAD_REQUEST");
        let short = decode_signature_hex(&"00".repeat(63)).unwrap_err();
        assert!(short.to_string().contains("expected 64 bytes, got 63"), "{short}");
        let long = decode_signature_hex(&"00".repeat(65)).unwrap_err();
        assert!(long.to_string().contains("got 65"));
        assert!(decode_signature_hex(&"00".repeat(64)).is_ok());
    }
}
