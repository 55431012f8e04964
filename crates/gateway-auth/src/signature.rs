//! Ed25519 verification of a signed challenge nonce.
//!
//! Two message forms are accepted, because two client families exist: the UTF-8 bytes of the
//! nonce's hex string (the specification's SDK flow, tried first) and the 32 bytes obtained by
//! hex-decoding it (the original network's clients). Verification is strict (`verify_strict`):
//! weak keys and malleable signatures are refused.

use ed25519_dalek::{Signature, VerifyingKey};
use gateway_core::{Ed25519PublicKey, Error};

/// The decoded length of an Ed25519 signature.
pub const SIGNATURE_LEN: usize = 64;

/// Decodes a hex signature, checking the spec's steps "hex-decodes" and "exactly 64 bytes".
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

/// Whether `signature` is the key's signature over the nonce, in either accepted form.
pub fn verify_nonce_signature(key: &Ed25519PublicKey, nonce_hex: &str, signature: &[u8; SIGNATURE_LEN]) -> bool {
    let Ok(key) = VerifyingKey::from_bytes(&key.0) else {
        return false;
    };
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
        let pk = Ed25519PublicKey(sk.verifying_key().to_bytes());
        let nonce = hex::encode([0xab; 32]);
        let utf8 = sk.sign(nonce.as_bytes()).to_bytes();
        let raw = sk.sign(&[0xab; 32]).to_bytes();
        assert!(verify_nonce_signature(&pk, &nonce, &utf8));
        assert!(verify_nonce_signature(&pk, &nonce, &raw));
        let other = sk.sign(b"something else").to_bytes();
        assert!(!verify_nonce_signature(&pk, &nonce, &other));
        let stranger = Ed25519PublicKey(SigningKey::from_bytes(&[1; 32]).verifying_key().to_bytes());
        assert!(!verify_nonce_signature(&stranger, &nonce, &utf8));
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
