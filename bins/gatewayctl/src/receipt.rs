//! Offline verification of decision receipts (docs/RECEIPTS.md, steps 1 to 6).
//!
//! Steps 1–5 (shape, canonical form, decision hash, signer, Ed25519 signature) are
//! `gateway_domain::governance::verify_receipt`, the same code the gateway signs with, so the
//! two can never disagree on the canonical form. Step 6 is here: the receipt's key must be in
//! the gateway's signing-keys list and valid at the receipt's timestamp. The list comes from
//! the gateway or from a file; this module does no I/O itself. Step 7 (recomputing
//! `votes_hash` from published votes) needs data a receipt does not carry and is not done.

use anyhow::{Context as _, bail};
use gateway_client::{SigningKey, SigningKeys};
use gateway_domain::governance::{Receipt, ReceiptError, verify_receipt};
use serde::Serialize;

/// A receipt that verified, with the key that vouches for it.
#[derive(Debug, Serialize)]
pub(crate) struct Verified {
    pub(crate) valid: bool,
    pub(crate) proposal_id: String,
    pub(crate) domain_id: String,
    pub(crate) outcome: String,
    pub(crate) tally: Tally,
    pub(crate) timestamp: u64,
    pub(crate) decision_hash: String,
    pub(crate) signer: String,
    pub(crate) key: SigningKey,
}

/// The counts, as in the receipt.
#[derive(Debug, Serialize)]
pub(crate) struct Tally {
    #[serde(rename = "for")]
    pub(crate) for_: u64,
    pub(crate) against: u64,
    pub(crate) abstain: u64,
}

/// Why a receipt is not valid; distinct from failing to read it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Invalid {
    /// Steps 1–5.
    #[error("the receipt does not verify: {0}")]
    Receipt(#[from] ReceiptError),
    /// Step 6: the key is not in the list.
    #[error("the receipt was signed by {0}, which is not one of the gateway's signing keys")]
    UnknownKey(String),
    /// Step 6: the key is in the list but was not valid then.
    #[error("the receipt is dated {timestamp} but its key was valid only from {from} {until}")]
    KeyNotValidThen {
        /// The receipt's time.
        timestamp: u64,
        /// The key's start.
        from: u64,
        /// The key's end, as text.
        until: String,
    },
}

/// Parses a receipt's JSON text.
pub(crate) fn parse_receipt(text: &str) -> anyhow::Result<Receipt> {
    serde_json::from_str(text).context("not a receipt (expected the JSON the proof route answers)")
}

/// Parses a signing-keys file: the `GET /v1/gov/signing-keys` answer, or a bare list of keys.
pub(crate) fn parse_keys(text: &str) -> anyhow::Result<SigningKeys> {
    if let Ok(keys) = serde_json::from_str::<SigningKeys>(text) {
        return Ok(keys);
    }
    match serde_json::from_str::<Vec<SigningKey>>(text) {
        Ok(keys) => Ok(SigningKeys { keys }),
        Err(_) => bail!("not a signing-keys file (expected what `gatewayctl receipt keys` prints)"),
    }
}

/// Verifies `receipt` against `keys` (steps 1–6).
pub(crate) fn verify(receipt: &Receipt, keys: &SigningKeys) -> Result<Verified, Invalid> {
    verify_receipt(receipt)?;
    let candidates: Vec<&SigningKey> = keys.keys.iter().filter(|k| k.public_key == receipt.public_key).collect();
    let Some(key) = candidates.iter().find(|k| k.valid_at(receipt.timestamp)) else {
        return Err(match candidates.first() {
            None => Invalid::UnknownKey(receipt.signer.clone()),
            Some(key) => Invalid::KeyNotValidThen {
                timestamp: receipt.timestamp,
                from: key.valid_from,
                until: key.valid_until.map(|u| format!("until {u}")).unwrap_or_else(|| "on".into()),
            },
        });
    };
    Ok(Verified {
        valid: true,
        proposal_id: receipt.proposal_id.clone(),
        domain_id: receipt.domain_id.clone(),
        outcome: receipt.outcome.clone(),
        tally: Tally { for_: receipt.tally_for, against: receipt.tally_against, abstain: receipt.tally_abstain },
        timestamp: receipt.timestamp,
        decision_hash: receipt.decision_hash.clone(),
        signer: receipt.signer.clone(),
        key: (*key).clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The worked example of docs/RECEIPTS.md.
    const EXAMPLE: &str = r#"{"decision_hash":"0xbcafc26a2ed6c21d278c4af78414dd37051d2c939a6fb86fab707e22f3f01dac","proposal_id":"prop-7","domain_id":"budget","outcome":"Approved","tally":{"for":4,"against":1,"abstain":0},"votes_hash":"0xa614242c8fbe23152b5a093209c12a77ded94c364bbf5123d41fdb923097a2bb","timestamp":1735689600,"signer":"did:key:z6Mkon3Necd6NkkyfoGoHxid2znGc59LU3K7mubaRcFbLfLX","public_key":"8a88e3dd7409f195fd52db2d3cba5d72ca6709bf1d94121bf3748801b40f6f5c","signature":"be0d6a92d8315bbac3002a2e20ea9ca8cbb87b9d26e0e1736623992169124f7c1fc99dd550446de1e3df2870ebdae76e02cf2ea0553af65b640083c0096bd209"}"#;

    fn keys(valid_from: u64, valid_until: Option<u64>) -> SigningKeys {
        SigningKeys {
            keys: vec![SigningKey {
                public_key: "8a88e3dd7409f195fd52db2d3cba5d72ca6709bf1d94121bf3748801b40f6f5c".into(),
                did: "did:key:z6Mkon3Necd6NkkyfoGoHxid2znGc59LU3K7mubaRcFbLfLX".into(),
                valid_from,
                valid_until,
                current: valid_until.is_none(),
                generation: None,
                master: None,
            }],
        }
    }

    #[test]
    fn the_documented_example_verifies() {
        let verified = verify(&parse_receipt(EXAMPLE).unwrap(), &keys(1_700_000_000, None)).unwrap();
        assert_eq!((verified.outcome.as_str(), verified.tally.for_), ("Approved", 4));
    }

    #[test]
    fn a_changed_field_breaks_the_decision_hash() {
        let tampered = parse_receipt(&EXAMPLE.replace(r#""against":1"#, r#""against":5"#)).unwrap();
        let err = verify(&tampered, &keys(0, None)).unwrap_err();
        assert!(matches!(err, Invalid::Receipt(ReceiptError::DecisionHashMismatch)), "{err}");
    }

    #[test]
    fn the_key_must_be_the_gateways_at_the_receipts_time() {
        let receipt = parse_receipt(EXAMPLE).unwrap();
        assert!(matches!(verify(&receipt, &SigningKeys { keys: vec![] }), Err(Invalid::UnknownKey(_))));
        assert!(matches!(verify(&receipt, &keys(1_800_000_000, None)), Err(Invalid::KeyNotValidThen { .. })));
        assert!(matches!(verify(&receipt, &keys(0, Some(1_735_689_600))), Err(Invalid::KeyNotValidThen { .. })));
        assert!(verify(&receipt, &keys(0, Some(1_735_689_601))).is_ok(), "retired after: still valid");
    }

    #[test]
    fn keys_files_come_in_both_shapes() {
        let listed = serde_json::to_string(&keys(0, None)).unwrap();
        assert_eq!(parse_keys(&listed).unwrap().keys.len(), 1);
        let bare = serde_json::to_string(&keys(0, None).keys).unwrap();
        assert_eq!(parse_keys(&bare).unwrap().keys.len(), 1);
        assert!(parse_keys("{}").is_err());
    }
}
