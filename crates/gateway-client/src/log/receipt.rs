//! Checking a decision receipt found in the log (docs/RECEIPTS.md, steps 1 to 5): the shape of
//! its fields, the canonical bytes rebuilt from its own fields (RFC 8785 JCS), the decision
//! hash, the signer being the `did:key` of the public key, and the strict Ed25519 signature over
//! the digest.
//!
//! The gateway signs with `gateway_domain::governance`, which the SDK must not depend on; this
//! is a reader's copy of the same rules, held to them by the documented test vector and by a
//! test against receipts the domain signs (`log/tests.rs`). Step 6 (the key was the coop's at
//! the receipt's time) is the audit's, which knows the keys.

use ed25519_dalek::{Signature, VerifyingKey};
use gateway_core::{Did, Ed25519PublicKey};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::governance::Receipt;

/// The largest integer JCS writes exactly (its numbers are IEEE doubles).
const MAX_EXACT_INTEGER: u64 = 1 << 53;

#[derive(Serialize)]
struct Tally {
    abstain: u64,
    against: u64,
    #[serde(rename = "for")]
    for_: u64,
}

/// The object whose JCS form is hashed; `serde_jcs` sorts the keys.
#[derive(Serialize)]
struct CanonicalDecision<'a> {
    domain_id: &'a str,
    outcome: &'a str,
    proposal_id: &'a str,
    tally: Tally,
    timestamp: u64,
    votes_hash: &'a str,
}

/// Exactly `N` bytes of lowercase hex.
fn lower_hex<const N: usize>(field: &str, text: &str) -> Result<[u8; N], String> {
    if text.len() != 2 * N || !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(format!("{field} is not {N} bytes of lowercase hex"));
    }
    let mut out = [0u8; N];
    hex::decode_to_slice(text, &mut out).map_err(|_| format!("{field} is not hex"))?;
    Ok(out)
}

/// Checks a receipt against itself (steps 1–5); returns its public key.
pub(super) fn verify(receipt: &Receipt) -> Result<[u8; 32], String> {
    if !matches!(receipt.outcome.as_str(), "Approved" | "Rejected" | "NoQuorum") {
        return Err(format!("outcome {:?} is not Approved, Rejected or NoQuorum", receipt.outcome));
    }
    let t = &receipt.tally;
    if [t.for_, t.against, t.abstain, receipt.timestamp].iter().any(|n| *n > MAX_EXACT_INTEGER) {
        return Err("a number above 2^53, which JCS cannot write exactly".into());
    }
    let votes_hash = receipt.votes_hash.strip_prefix("0x").ok_or("votes_hash has no 0x prefix")?;
    lower_hex::<32>("votes_hash", votes_hash)?;
    let claimed = receipt.decision_hash.strip_prefix("0x").ok_or("decision_hash has no 0x prefix")?;
    let claimed = lower_hex::<32>("decision_hash", claimed)?;
    let public_key = lower_hex::<32>("public_key", &receipt.public_key)?;
    let signature = lower_hex::<64>("signature", &receipt.signature)?;
    let canonical = serde_jcs::to_vec(&CanonicalDecision {
        domain_id: &receipt.domain_id,
        outcome: &receipt.outcome,
        proposal_id: &receipt.proposal_id,
        tally: Tally { abstain: t.abstain, against: t.against, for_: t.for_ },
        timestamp: receipt.timestamp,
        votes_hash: &receipt.votes_hash,
    })
    .map_err(|e| format!("canonical form: {e}"))?;
    let digest: [u8; 32] = Sha256::digest(&canonical).into();
    if digest != claimed {
        return Err("decision_hash does not match the receipt's contents: the receipt was altered".into());
    }
    if Did::key_from_public_key(&Ed25519PublicKey(public_key)).as_str() != receipt.signer {
        return Err("signer is not the did:key of public_key".into());
    }
    let key = VerifyingKey::from_bytes(&public_key).map_err(|_| "public_key is not an Ed25519 public key")?;
    key.verify_strict(&digest, &Signature::from_bytes(&signature))
        .map_err(|_| "the signature does not verify with public_key".to_owned())?;
    Ok(public_key)
}
