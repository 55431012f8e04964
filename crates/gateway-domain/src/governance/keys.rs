//! Per-coop receipt keys: each coop signs its receipts with its own Ed25519 key, derived inside
//! the process from the keystore's master secret, the coop id and the coop's key generation.
//!
//! # The derivation
//!
//! ```text
//! info  = "icn-gateway/receipt-key/v1"          (26 ASCII bytes)
//!      || u32_be(byte length of the coop id)
//!      || the coop id (UTF-8)
//!      || u32_be(generation)
//! seed  = HKDF-SHA256(salt = none, IKM = master (32 bytes), info, L = 32)    (RFC 5869)
//! key   = the Ed25519 key whose 32-byte secret (RFC 8032 seed) is `seed`
//! ```
//!
//! "No salt" is RFC 5869's default, 32 zero bytes. The coop id is length-prefixed and the
//! generation fixed-width, so no two (coop, generation) pairs share an `info`. Knowing one coop's
//! key (public or secret) tells nothing about another's or about the master: HKDF is a PRF keyed
//! by the master.
//!
//! A coop starts at generation 0; an approved `signing_key_rotation` proposal moves that coop,
//! and only it, to the next generation (stored per coop by the store). The master changes only by
//! the operator's `gatewayd keystore rotate`, which keeps the retired masters. Either rotation
//! retires the coop's previous key in the store's signing-keys list, where it stays with its
//! validity interval, so receipts it signed stay verifiable.

use std::fmt;
use std::sync::Arc;

use ed25519_dalek::SigningKey;
use gateway_core::{CoopId, Did, Ed25519PublicKey, Error};
use hkdf::Hkdf;
use sha2::Sha256;
use zeroize::Zeroizing;

use super::service::ReceiptKeys;
use super::{DecisionSigner, Ed25519DecisionSigner};
use crate::ports::{EventTx, GovTx, SigningKeyRecord};

/// The fixed label that starts the HKDF `info` of every receipt key.
pub const RECEIPT_KEY_LABEL: &[u8] = b"icn-gateway/receipt-key/v1";

/// The machine reason for no receipt when the store already lists a key of a newer master than
/// this process holds (a replica still running with the keystore of before `keystore rotate`).
pub const KEYSTORE_OUTDATED: &str = "keystore_outdated";

/// The HKDF `info` of a coop's key at `generation`: the label, the coop id's length (u32 big
/// endian) and bytes, and the generation (u32 big endian).
pub fn receipt_key_info(coop: &CoopId, generation: u32) -> Vec<u8> {
    let id = coop.as_str().as_bytes();
    let length = u32::try_from(id.len()).expect("coop ids are short");
    let mut info = Vec::with_capacity(RECEIPT_KEY_LABEL.len() + 8 + id.len());
    info.extend_from_slice(RECEIPT_KEY_LABEL);
    info.extend_from_slice(&length.to_be_bytes());
    info.extend_from_slice(id);
    info.extend_from_slice(&generation.to_be_bytes());
    info
}

/// The Ed25519 receipt key of `coop` at `generation` under `master` (see the module docs).
pub fn derive_receipt_key(master: &[u8; 32], coop: &CoopId, generation: u32) -> SigningKey {
    let hkdf = Hkdf::<Sha256>::new(None, master);
    let mut seed = Zeroizing::new([0u8; 32]);
    hkdf.expand(&receipt_key_info(coop, generation), seed.as_mut_slice())
        .expect("32 bytes is far below HKDF-SHA256's limit of 8160");
    SigningKey::from_bytes(&seed)
}

/// A coop's receipt signer: which master and generation it was derived from, and the key.
#[derive(Debug, Clone)]
pub struct ReceiptSigner {
    /// The number of the master secret (0 for a keystore's first).
    pub master: u32,
    /// The coop's key generation.
    pub generation: u32,
    /// Signs with the derived key.
    pub signer: Arc<dyn DecisionSigner>,
}

impl ReceiptSigner {
    /// Derives the signer of `coop` at `generation` from master number `master_id`.
    pub fn derive(master_id: u32, master: &[u8; 32], coop: &CoopId, generation: u32) -> Self {
        let key = derive_receipt_key(master, coop, generation);
        Self { master: master_id, generation, signer: Arc::new(Ed25519DecisionSigner::new(key)) }
    }
}

/// A master secret held in memory, with its number. `Debug` shows the number only, and the
/// secret is zeroed on drop.
pub struct MasterSecret {
    id: u32,
    secret: Zeroizing<[u8; 32]>,
}

impl MasterSecret {
    /// Master number `id` (0 for a keystore's first) with its 32-byte secret.
    pub fn new(id: u32, secret: [u8; 32]) -> Self {
        Self { id, secret: Zeroizing::new(secret) }
    }

    /// Its number.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The signer of `coop` at `generation` under this master.
    pub fn signer(&self, coop: &CoopId, generation: u32) -> ReceiptSigner {
        ReceiptSigner::derive(self.id, &self.secret, coop, generation)
    }
}

impl fmt::Debug for MasterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MasterSecret").field("id", &self.id).finish_non_exhaustive()
    }
}

/// The signing-keys record of a signer, valid from `at`.
fn record_of(coop: &CoopId, signer: &ReceiptSigner, at: u64) -> SigningKeyRecord {
    let public = signer.signer.public_key();
    SigningKeyRecord {
        public_key: hex::encode(public),
        did: Did::key_from_public_key(&Ed25519PublicKey(public)).to_string(),
        valid_from: at,
        valid_until: None,
        coop_id: Some(coop.clone()),
        master: Some(signer.master),
        generation: Some(signer.generation),
    }
}

/// The coop's signer now, inside a transaction: its stored generation (held until the
/// transaction ends) under the process's current master. Makes sure the signing-keys list names
/// that key as the coop's current one, recording it (and retiring the previous one) on first
/// use. `Ok(Err(reason))` when there is no key: the keys are locked or missing, or the store
/// already lists a key of a newer master ([`KEYSTORE_OUTDATED`]: this process must never take
/// the coop back to an older master).
pub(crate) async fn coop_signer<T: GovTx + EventTx + ?Sized>(
    tx: &mut T,
    keys: &dyn ReceiptKeys,
    coop: &CoopId,
    now: u64,
) -> Result<Result<Arc<dyn DecisionSigner>, &'static str>, Error> {
    let generation = tx.receipt_key_generation(coop).await?;
    let signer = match keys.signer(coop, generation) {
        Ok(signer) => signer,
        Err(reason) => return Ok(Err(reason)),
    };
    let record = record_of(coop, &signer, now);
    match tx.current_signing_key(coop).await? {
        Some(current) if current.public_key == record.public_key => {}
        Some(current) if current.master.is_some_and(|m| m > signer.master) => return Ok(Err(KEYSTORE_OUTDATED)),
        // The coop's very first key (generation 0, nothing recorded before): nothing changes
        // hands, and its first checkpoint, signed with it, is what an auditor first trusts.
        None if signer.generation == 0 => tx.activate_signing_key(&record).await?,
        // A rotation (the previous key just retired), or a new keystore master: a change of
        // authority, which the coop's log records with the new verifier key.
        _ => {
            tx.activate_signing_key(&record).await?;
            crate::events::emit(tx, coop, now, crate::events::CoopEvent::SigningKeyRotated(&record)).await?;
        }
    }
    Ok(Ok(signer.signer))
}

#[cfg(test)]
mod tests {
    use ed25519_dalek::{Signature, Verifier};

    use super::*;
    use crate::governance::{Choice, DirectVote, Outcome, Rule, decide, sign_receipt, tally, verify_receipt};

    fn coop(id: &str) -> CoopId {
        CoopId::parse(id).unwrap()
    }

    fn public(master: &[u8; 32], id: &str, generation: u32) -> String {
        hex::encode(derive_receipt_key(master, &coop(id), generation).verifying_key().to_bytes())
    }

    /// The worked vector of `docs/RECEIPTS.md`, "Per-coop keys".
    const DOC_MASTER: [u8; 32] = [
        0x00, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11,
        0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
    ];
    const DOC_COOP: &str = "bakery";
    const DOC_GENERATION: u32 = 1;
    const DOC_TIMESTAMP: u64 = 1_767_225_600;

    #[test]
    fn derivation_is_deterministic() {
        let master = [0x42; 32];
        let a = derive_receipt_key(&master, &coop("c1"), 0);
        let b = derive_receipt_key(&master, &coop("c1"), 0);
        assert_eq!(a.to_bytes(), b.to_bytes());
        assert_eq!(a.verifying_key(), b.verifying_key());
    }

    #[test]
    fn different_coops_get_different_keys() {
        let master = [0x42; 32];
        let keys: std::collections::BTreeSet<String> =
            ["c1", "c2", "c10", "a", "ab"].iter().map(|id| public(&master, id, 0)).collect();
        assert_eq!(keys.len(), 5);
    }

    #[test]
    fn different_generations_and_masters_get_different_keys() {
        let master = [0x42; 32];
        let keys: std::collections::BTreeSet<String> = (0..16).map(|g| public(&master, "c1", g)).collect();
        assert_eq!(keys.len(), 16);
        assert_ne!(public(&master, "c1", 0), public(&[0x43; 32], "c1", 0));
        // The key is never the master itself used as a seed (the gateway-wide key of before).
        let legacy = hex::encode(SigningKey::from_bytes(&master).verifying_key().to_bytes());
        assert!(!keys.contains(&legacy));
    }

    #[test]
    fn info_is_length_prefixed() {
        let info = receipt_key_info(&coop("bakery"), 1);
        assert_eq!(
            hex::encode(&info),
            format!("{}{}{}{}", hex::encode(RECEIPT_KEY_LABEL), "00000006", hex::encode("bakery"), "00000001")
        );
        // A coop id ending in what looks like a generation cannot collide with another pair.
        assert_ne!(receipt_key_info(&coop("a"), 0x0000_0062), receipt_key_info(&coop("ab"), 0));
    }

    #[test]
    fn derivation_matches_rfc_5869_by_hand() {
        // HKDF-SHA256 with one output block: PRK = HMAC(salt = 32 zero bytes, master), then
        // OKM = HMAC(PRK, info || 0x01); computed here with sha2 alone.
        fn hmac(key: &[u8], message: &[u8]) -> [u8; 32] {
            use sha2::Digest;
            let mut block = [0u8; 64];
            block[..key.len()].copy_from_slice(key);
            let inner: Vec<u8> = block.iter().map(|b| b ^ 0x36).chain(message.iter().copied()).collect();
            let inner = Sha256::digest(inner);
            let outer: Vec<u8> = block.iter().map(|b| b ^ 0x5c).chain(inner.iter().copied()).collect();
            Sha256::digest(outer).into()
        }
        let prk = hmac(&[0u8; 32], &DOC_MASTER);
        let mut message = receipt_key_info(&coop(DOC_COOP), DOC_GENERATION);
        message.push(1);
        let seed = hmac(&prk, &message);
        let key = derive_receipt_key(&DOC_MASTER, &coop(DOC_COOP), DOC_GENERATION);
        assert_eq!(key.to_bytes(), seed);
    }

    /// The documented receipt: domain `coop`, proposal `prop-9`, three members voting for.
    fn doc_receipt() -> crate::governance::Receipt {
        let members: Vec<String> = ["alice", "bob", "carol"].iter().map(|n| format!("did:example:{n}")).collect();
        let votes: Vec<DirectVote> =
            members.iter().map(|m| DirectVote { voter: m.clone(), choice: Choice::For }).collect();
        let t = tally(&members, &votes, &[], "coop", "prop-9", DOC_TIMESTAMP);
        let outcome = decide(&Rule::Majority, 50, 3, &t);
        assert_eq!(outcome, Outcome::Approved);
        let signer = ReceiptSigner::derive(0, &DOC_MASTER, &coop(DOC_COOP), DOC_GENERATION);
        sign_receipt(signer.signer.as_ref(), "prop-9", "coop", outcome, &t, DOC_TIMESTAMP)
    }

    #[test]
    fn fixed_test_vector() {
        // Pinned values: docs/RECEIPTS.md shows exactly these.
        let info = receipt_key_info(&coop(DOC_COOP), DOC_GENERATION);
        assert_eq!(
            hex::encode(&info),
            "69636e2d676174657761792f726563656970742d6b65792f76310000000662616b65727900000001"
        );
        let key = derive_receipt_key(&DOC_MASTER, &coop(DOC_COOP), DOC_GENERATION);
        assert_eq!(hex::encode(key.to_bytes()), "e361d07b4cd5723cbba236f06197aeefd26f6ff9a5562b3a0cae838a3e6c71e3");
        assert_eq!(
            hex::encode(key.verifying_key().to_bytes()),
            "7d1d53b6dc581af9bb54a553122ae9b2adc5f41510959606091d1c51d9e25481"
        );
        assert_eq!(
            public(&DOC_MASTER, DOC_COOP, 0),
            "765b1e36d6e583328249d521542359b7a6eea1bcd2bae42b04e57d41252d1599"
        );
        let receipt = doc_receipt();
        assert_eq!(receipt.signer, "did:key:z6Mknsewk5CBduUPsinwZ2RbCMy3nYahBN3htP6gteY49Wg8");
        assert_eq!(receipt.votes_hash, "0x387ae136eec32c8bc227607d3d9c0a4b215c9c09ba1b4d9be4b100db7efc530b");
        assert_eq!(receipt.decision_hash, "0xdb2e189f4b347a8881664fe06757e95e861a9011e076613fdcd07c255ea71aa3");
        assert_eq!(
            receipt.signature,
            concat!(
                "a5f077c029de873be76407e5c4cce00f37fb7ea7269067945f716994798c7503",
                "70cc67a05128858a9c23fce1cf454eb93b1db9629fde55403fdd1fceb64d3604"
            )
        );
        assert_eq!(verify_receipt(&receipt), Ok(()));
        assert_eq!(
            serde_json::to_string(&receipt).unwrap(),
            concat!(
                r#"{"decision_hash":"0xdb2e189f4b347a8881664fe06757e95e861a9011e076613fdcd07c255ea71aa3","#,
                r#""proposal_id":"prop-9","domain_id":"coop","outcome":"Approved","#,
                r#""tally":{"for":3,"against":0,"abstain":0},"#,
                r#""votes_hash":"0x387ae136eec32c8bc227607d3d9c0a4b215c9c09ba1b4d9be4b100db7efc530b","#,
                r#""timestamp":1767225600,"signer":"did:key:z6Mknsewk5CBduUPsinwZ2RbCMy3nYahBN3htP6gteY49Wg8","#,
                r#""public_key":"7d1d53b6dc581af9bb54a553122ae9b2adc5f41510959606091d1c51d9e25481","#,
                r#""signature":"a5f077c029de873be76407e5c4cce00f37fb7ea7269067945f716994798c750370cc67a05128858a9c23fce1cf454eb93b1db9629fde55403fdd1fceb64d3604"}"#,
            )
        );
        // And with ed25519-dalek directly.
        let digest: [u8; 32] = hex::decode(&receipt.decision_hash[2..]).unwrap().try_into().unwrap();
        let signature: [u8; 64] = hex::decode(&receipt.signature).unwrap().try_into().unwrap();
        key.verifying_key().verify(&digest, &Signature::from_bytes(&signature)).unwrap();
    }

    #[test]
    fn the_documented_vector_is_the_computed_one() {
        // docs/RECEIPTS.md, "Worked example: a coop's key", shows these computed values.
        let doc = include_str!("../../../../docs/RECEIPTS.md");
        let key = derive_receipt_key(&DOC_MASTER, &coop(DOC_COOP), DOC_GENERATION);
        let receipt = doc_receipt();
        let t = {
            let members: Vec<String> = ["alice", "bob", "carol"].iter().map(|n| format!("did:example:{n}")).collect();
            let votes: Vec<DirectVote> =
                members.iter().map(|m| DirectVote { voter: m.clone(), choice: Choice::For }).collect();
            tally(&members, &votes, &[], "coop", "prop-9", DOC_TIMESTAMP)
        };
        let canonical = crate::governance::canonical_bytes(
            "prop-9",
            "coop",
            Outcome::Approved,
            &t,
            &receipt.votes_hash,
            DOC_TIMESTAMP,
        );
        for value in [
            hex::encode(receipt_key_info(&coop(DOC_COOP), DOC_GENERATION)),
            hex::encode(key.to_bytes()),
            hex::encode(key.verifying_key().to_bytes()),
            public(&DOC_MASTER, DOC_COOP, 0),
            receipt.signer.clone(),
            serde_jcs::to_string(&t.effective_votes).unwrap(),
            String::from_utf8(canonical).unwrap(),
            serde_json::to_string(&receipt).unwrap(),
            format!("`{DOC_TIMESTAMP}`"),
            format!("the coop `{DOC_COOP}`, the\ngeneration {DOC_GENERATION}"),
        ] {
            assert!(doc.contains(&value), "docs/RECEIPTS.md does not show {value}");
        }
        assert!(doc.contains(&format!("\"{}\"", RECEIPT_KEY_LABEL.escape_ascii())), "the label");
    }

    #[test]
    fn debug_output_shows_no_secret() {
        let held = MasterSecret::new(3, [0xab; 32]);
        let text = format!("{held:?}");
        assert!(text.contains('3') && !text.contains("171") && !text.contains("ab"), "{text}");
        let signer = ReceiptSigner::derive(0, &[0xab; 32], &coop("c1"), 0);
        let text = format!("{signer:?}");
        let seed = hex::encode(derive_receipt_key(&[0xab; 32], &coop("c1"), 0).to_bytes());
        assert!(!text.contains(&seed), "{text}");
    }
}
