//! Signed decision receipts: the canonical form of a decision, its hash, its signature, and
//! verification.
//!
//! A receipt lets anyone holding it check, without trusting the gateway's database, that the
//! gateway's governance key signed this outcome and these counts for this proposal. The exact
//! format and a worked example are in `docs/RECEIPTS.md`. This module does not load or store
//! the signing key (see `gateway_auth::keystore`), does not keep the list of the gateway's
//! past keys (verifying that the receipt's key was the gateway's key at the receipt's time is
//! the caller's second step), and cannot recompute `votes_hash` from a receipt: the effective
//! votes are an input, published separately.

use std::fmt;
use std::io::Write as _;

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use gateway_core::{Did, Ed25519PublicKey};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

use super::{EffectiveVote, Outcome, Tally};

/// A decision receipt. The fields are plain strings, as they travel, so that a receipt received
/// from elsewhere can be held and verified even if it is malformed.
///
/// It serialises to exactly the interface's JSON shape: `{"decision_hash", "proposal_id",
/// "domain_id", "outcome", "tally": {"for", "against", "abstain"}, "votes_hash", "timestamp",
/// "signer", "public_key", "signature"}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Receipt {
    /// `0x` + lowercase hex SHA-256 of the canonical bytes.
    pub decision_hash: String,
    /// The proposal decided.
    pub proposal_id: String,
    /// The governance domain of the proposal.
    pub domain_id: String,
    /// `Approved`, `Rejected` or `NoQuorum`.
    pub outcome: String,
    /// Weighted votes for.
    pub tally_for: u64,
    /// Weighted votes against.
    pub tally_against: u64,
    /// Weighted abstentions.
    pub tally_abstain: u64,
    /// `0x` + lowercase hex SHA-256 of the JCS form of the effective votes.
    pub votes_hash: String,
    /// Unix seconds of the decision.
    pub timestamp: u64,
    /// The `did:key` of `public_key`.
    pub signer: String,
    /// The 32-byte Ed25519 public key, lowercase hex.
    pub public_key: String,
    /// The 64-byte Ed25519 signature over the 32 digest bytes, lowercase hex.
    pub signature: String,
}

/// The counts as they appear in receipts and in the canonical object.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct TallyCounts {
    #[serde(rename = "for")]
    for_: u64,
    against: u64,
    abstain: u64,
}

/// The wire shape of a receipt, generic so that serialising borrows and deserialising owns.
#[derive(Debug, Serialize, Deserialize)]
struct ReceiptJson<S> {
    decision_hash: S,
    proposal_id: S,
    domain_id: S,
    outcome: S,
    tally: TallyCounts,
    votes_hash: S,
    timestamp: u64,
    signer: S,
    public_key: S,
    signature: S,
}

impl Serialize for Receipt {
    fn serialize<Ser: Serializer>(&self, serializer: Ser) -> Result<Ser::Ok, Ser::Error> {
        ReceiptJson {
            decision_hash: self.decision_hash.as_str(),
            proposal_id: &self.proposal_id,
            domain_id: &self.domain_id,
            outcome: &self.outcome,
            tally: TallyCounts { for_: self.tally_for, against: self.tally_against, abstain: self.tally_abstain },
            votes_hash: &self.votes_hash,
            timestamp: self.timestamp,
            signer: &self.signer,
            public_key: &self.public_key,
            signature: &self.signature,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Receipt {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let json = ReceiptJson::<String>::deserialize(deserializer)?;
        Ok(Receipt {
            decision_hash: json.decision_hash,
            proposal_id: json.proposal_id,
            domain_id: json.domain_id,
            outcome: json.outcome,
            tally_for: json.tally.for_,
            tally_against: json.tally.against,
            tally_abstain: json.tally.abstain,
            votes_hash: json.votes_hash,
            timestamp: json.timestamp,
            signer: json.signer,
            public_key: json.public_key,
            signature: json.signature,
        })
    }
}

/// The object whose JCS form is signed. `serde_jcs` sorts the keys, so the field order here
/// does not matter. Integers are written as plain decimal digits up to 2^53, which counts and
/// Unix-second timestamps never approach; beyond that JCS would round them (see
/// [`verify_receipt`], which refuses such receipts).
#[derive(Serialize)]
struct CanonicalDecision<'a> {
    domain_id: &'a str,
    outcome: &'a str,
    proposal_id: &'a str,
    tally: TallyCounts,
    timestamp: u64,
    votes_hash: &'a str,
}

/// Why a receipt does not verify. Each variant says what an auditor should conclude.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReceiptError {
    /// A field does not have the receipt format's shape (hex length, case, outcome spelling,
    /// invalid curve point); the receipt was not produced by a gateway or was damaged.
    #[error("receipt field '{field}' is malformed: {reason}")]
    Malformed {
        /// The receipt field at fault.
        field: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// `decision_hash` is not the hash of the receipt's own contents: a signed field was
    /// changed after signing.
    #[error("decision_hash does not match the receipt's contents: the receipt was altered")]
    DecisionHashMismatch,
    /// `signer` is not the `did:key` of `public_key`.
    #[error("signer is not the did:key of public_key")]
    SignerMismatch,
    /// The signature is not a valid Ed25519 signature of the digest by `public_key`.
    #[error("the signature does not verify with public_key")]
    BadSignature,
}

/// Signs decision digests with the gateway's governance key.
///
/// A trait so that the key can stay wherever it was unlocked (in memory after the keystore, or
/// an external signer later) and so tests can count or fake signatures. Implementations sign
/// exactly the 32 digest bytes given, with pure Ed25519.
pub trait DecisionSigner: Send + Sync + fmt::Debug {
    /// The 32-byte Ed25519 public key matching the signatures.
    fn public_key(&self) -> [u8; 32];

    /// The 64-byte Ed25519 signature of `digest`.
    fn sign_digest(&self, digest: &[u8; 32]) -> [u8; 64] {
        self.sign(digest)
    }

    /// The 64-byte Ed25519 signature of `message` (the coop's log signs its checkpoints'
    /// text with the same key, under the signed-note format).
    fn sign(&self, message: &[u8]) -> [u8; 64];
}

/// A [`DecisionSigner`] holding an Ed25519 secret key in memory.
///
/// The key is private and cannot be read back, so holding a signer does not let code copy the
/// secret elsewhere; `Debug` prints only the public key, so a signer in a logged struct leaks
/// nothing. The secret is zeroed when the signer is dropped (`ed25519-dalek` zeroizes
/// `SigningKey` on drop).
pub struct Ed25519DecisionSigner(SigningKey);

impl Ed25519DecisionSigner {
    /// Wraps an unlocked signing key.
    pub fn new(key: SigningKey) -> Self {
        Self(key)
    }

    /// The public half, for publishing in the gateway's signing-keys list.
    pub fn verifying_key(&self) -> VerifyingKey {
        self.0.verifying_key()
    }
}

impl From<SigningKey> for Ed25519DecisionSigner {
    fn from(key: SigningKey) -> Self {
        Self::new(key)
    }
}

impl fmt::Debug for Ed25519DecisionSigner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ed25519DecisionSigner")
            .field("public_key", &hex::encode(self.public_key()))
            .finish_non_exhaustive()
    }
}

impl DecisionSigner for Ed25519DecisionSigner {
    fn public_key(&self) -> [u8; 32] {
        self.0.verifying_key().to_bytes()
    }

    fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.0.sign(message).to_bytes()
    }
}

/// `0x` + lowercase hex.
fn prefixed_hex(bytes: &[u8]) -> String {
    format!("0x{}", hex::encode(bytes))
}

/// `votes_hash`: `0x` + hex SHA-256 of the JCS form of the effective votes, each
/// `{"choice","voter","weight"}`, sorted by `voter`.
///
/// The slice is hashed in voter order whatever order it comes in ([`super::tally()`] already
/// sorts it), so the hash depends only on the votes, never on how they were collected.
pub fn votes_hash(effective_votes: &[EffectiveVote]) -> String {
    let json = if effective_votes.is_sorted_by(|a, b| a.voter <= b.voter) {
        votes_jcs(effective_votes.iter())
    } else {
        let mut sorted: Vec<&EffectiveVote> = effective_votes.iter().collect();
        sorted.sort_by(|a, b| a.voter.cmp(&b.voter));
        votes_jcs(sorted.into_iter())
    };
    prefixed_hex(&Sha256::digest(json))
}

/// The largest integer RFC 8785 writes exactly: JCS numbers are IEEE doubles, so integers
/// beyond 2^53 would be rounded (and two receipts differing only there would share a hash).
const MAX_EXACT_INTEGER: u64 = 1 << 53;

/// Whether JCS writes this string between quotes unchanged: it escapes only `"`, `\` and the
/// control characters below U+0020.
fn needs_no_escape(text: &str) -> bool {
    text.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\')
}

/// The JCS bytes of a list of effective votes, in the given order.
///
/// `serde_jcs` buffers and re-sorts every object through a map, which costs over a
/// microsecond per vote (about 12 ms for 9,000 votes). Each entry here has the same three keys,
/// already in JCS order, so the common case (voter strings that need no escaping, weights up
/// to 2^53) is written directly; anything else goes through `serde_jcs`, so the output is the
/// library's in every case (a property test checks the two agree).
fn votes_jcs<'a>(votes: impl Iterator<Item = &'a EffectiveVote> + Clone) -> Vec<u8> {
    let simple = votes.clone().all(|v| v.weight <= MAX_EXACT_INTEGER && needs_no_escape(&v.voter));
    if !simple {
        let all: Vec<&EffectiveVote> = votes.collect();
        return serde_jcs::to_vec(&all).expect("strings, a unit enum and integers always serialise");
    }
    let mut out = Vec::with_capacity(votes.size_hint().0 * 80 + 2);
    out.push(b'[');
    for (i, vote) in votes.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"choice\":\"");
        out.extend_from_slice(vote.choice.as_str().as_bytes());
        out.extend_from_slice(b"\",\"voter\":\"");
        out.extend_from_slice(vote.voter.as_bytes());
        out.extend_from_slice(b"\",\"weight\":");
        write!(out, "{}", vote.weight).expect("writing to a Vec cannot fail");
        out.push(b'}');
    }
    out.push(b']');
    out
}

/// The canonical bytes of a decision: the RFC 8785 (JCS) form of
/// `{"domain_id","outcome","proposal_id","tally":{"abstain","against","for"},"timestamp",
/// "votes_hash"}`. Their SHA-256 is the `decision_hash`, and its 32 bytes are what is signed.
pub fn canonical_bytes(
    proposal_id: &str,
    domain_id: &str,
    outcome: Outcome,
    tally: &Tally,
    votes_hash: &str,
    timestamp: u64,
) -> Vec<u8> {
    canonical(
        proposal_id,
        domain_id,
        outcome.as_str(),
        TallyCounts { for_: tally.for_, against: tally.against, abstain: tally.abstain },
        votes_hash,
        timestamp,
    )
}

fn canonical(
    proposal_id: &str,
    domain_id: &str,
    outcome: &str,
    tally: TallyCounts,
    votes_hash: &str,
    timestamp: u64,
) -> Vec<u8> {
    serde_jcs::to_vec(&CanonicalDecision { domain_id, outcome, proposal_id, tally, timestamp, votes_hash })
        .expect("strings and integers always serialise")
}

/// Builds and signs the receipt of a decision. `votes_hash` is computed from
/// `tally.effective_votes`, so the receipt commits to who voted how and with what weight.
pub fn sign_receipt(
    signer: &dyn DecisionSigner,
    proposal_id: &str,
    domain_id: &str,
    outcome: Outcome,
    tally: &Tally,
    timestamp: u64,
) -> Receipt {
    let votes_hash = votes_hash(&tally.effective_votes);
    let bytes = canonical_bytes(proposal_id, domain_id, outcome, tally, &votes_hash, timestamp);
    let digest: [u8; 32] = Sha256::digest(&bytes).into();
    let signature = signer.sign_digest(&digest);
    let public_key = signer.public_key();
    Receipt {
        decision_hash: prefixed_hex(&digest),
        proposal_id: proposal_id.to_owned(),
        domain_id: domain_id.to_owned(),
        outcome: outcome.as_str().to_owned(),
        tally_for: tally.for_,
        tally_against: tally.against,
        tally_abstain: tally.abstain,
        votes_hash,
        timestamp,
        signer: Did::key_from_public_key(&Ed25519PublicKey(public_key)).to_string(),
        public_key: hex::encode(public_key),
        signature: hex::encode(signature),
    }
}

/// Decodes exactly `N` bytes of lowercase hex. Upper case is refused so that each receipt has
/// one spelling and no byte of it can change without verification failing.
fn lower_hex<const N: usize>(field: &'static str, text: &str) -> Result<[u8; N], ReceiptError> {
    let malformed = |reason| ReceiptError::Malformed { field, reason };
    if text.len() != 2 * N {
        return Err(malformed("wrong length"));
    }
    if !text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(malformed("not lowercase hexadecimal"));
    }
    let mut out = [0u8; N];
    hex::decode_to_slice(text, &mut out).map_err(|_| malformed("not hexadecimal"))?;
    Ok(out)
}

/// Checks a receipt against itself: the shape of every field, `decision_hash` recomputed from
/// the receipt's own fields, `signer` being the `did:key` of `public_key`, and the Ed25519
/// signature (strict verification, which refuses weak keys and malleable signatures) over the
/// digest.
///
/// It does not recompute `votes_hash` (the effective votes are not in the receipt) and does not
/// say whether `public_key` was the gateway's key at `timestamp`: check it against the
/// gateway's signing-keys list (see `docs/RECEIPTS.md`).
pub fn verify_receipt(receipt: &Receipt) -> Result<(), ReceiptError> {
    if Outcome::parse(&receipt.outcome).is_none() {
        return Err(ReceiptError::Malformed { field: "outcome", reason: "not Approved, Rejected or NoQuorum" });
    }
    let numbers = [
        ("tally.for", receipt.tally_for),
        ("tally.against", receipt.tally_against),
        ("tally.abstain", receipt.tally_abstain),
        ("timestamp", receipt.timestamp),
    ];
    if let Some((field, _)) = numbers.into_iter().find(|(_, value)| *value > MAX_EXACT_INTEGER) {
        return Err(ReceiptError::Malformed { field, reason: "above 2^53, which JCS cannot represent exactly" });
    }
    let votes_hash = receipt
        .votes_hash
        .strip_prefix("0x")
        .ok_or(ReceiptError::Malformed { field: "votes_hash", reason: "missing 0x prefix" })?;
    lower_hex::<32>("votes_hash", votes_hash)?;
    let claimed_hash = receipt
        .decision_hash
        .strip_prefix("0x")
        .ok_or(ReceiptError::Malformed { field: "decision_hash", reason: "missing 0x prefix" })?;
    let claimed_hash = lower_hex::<32>("decision_hash", claimed_hash)?;
    let public_key = lower_hex::<32>("public_key", &receipt.public_key)?;
    let signature = lower_hex::<64>("signature", &receipt.signature)?;

    let bytes = canonical(
        &receipt.proposal_id,
        &receipt.domain_id,
        &receipt.outcome,
        TallyCounts { for_: receipt.tally_for, against: receipt.tally_against, abstain: receipt.tally_abstain },
        &receipt.votes_hash,
        receipt.timestamp,
    );
    let digest: [u8; 32] = Sha256::digest(&bytes).into();
    if digest != claimed_hash {
        return Err(ReceiptError::DecisionHashMismatch);
    }
    if Did::key_from_public_key(&Ed25519PublicKey(public_key)).as_str() != receipt.signer {
        return Err(ReceiptError::SignerMismatch);
    }
    let key = VerifyingKey::from_bytes(&public_key)
        .map_err(|_| ReceiptError::Malformed { field: "public_key", reason: "not an Ed25519 public key" })?;
    key.verify_strict(&digest, &Signature::from_bytes(&signature)).map_err(|_| ReceiptError::BadSignature)
}

#[cfg(test)]
mod tests {
    use ed25519_dalek::Verifier;
    use proptest::prelude::*;

    use super::*;
    use crate::governance::{Choice, Delegation, DelegationScope, DirectVote, Rule, decide, tally};

    const SEED: [u8; 32] = [0x01; 32];
    const TIMESTAMP: u64 = 1_735_689_600;

    fn signer() -> Ed25519DecisionSigner {
        Ed25519DecisionSigner::new(SigningKey::from_bytes(&SEED))
    }

    /// The worked example of `docs/RECEIPTS.md`: five members, three direct votes, two
    /// delegations.
    fn example_tally() -> Tally {
        let did = |name: &str| format!("did:example:{name}");
        let members: Vec<String> = ["alice", "bob", "carol", "dave", "erin"].into_iter().map(did).collect();
        let votes = [("alice", "for"), ("bob", "against"), ("carol", "yes")]
            .map(|(name, choice)| DirectVote { voter: did(name), choice: Choice::parse(choice).unwrap() });
        let delegation = |id: &str, from: &str, to: &str, scope: DelegationScope| Delegation {
            id: id.into(),
            delegator: did(from),
            delegate: did(to),
            scope,
            expires_at: None,
            created_at: TIMESTAMP - 86_400,
        };
        let delegations = [
            delegation("d1", "dave", "alice", DelegationScope::Blanket),
            delegation("d2", "erin", "carol", DelegationScope::Domain("budget".into())),
        ];
        tally(&members, &votes, &delegations, "budget", "prop-7", TIMESTAMP)
    }

    fn example_receipt() -> Receipt {
        let t = example_tally();
        let outcome = decide(&Rule::Majority, 50, 5, &t);
        sign_receipt(&signer(), "prop-7", "budget", outcome, &t, TIMESTAMP)
    }

    const EXAMPLE_VOTES_JCS: &str = concat!(
        r#"[{"choice":"For","voter":"did:example:alice","weight":2},"#,
        r#"{"choice":"Against","voter":"did:example:bob","weight":1},"#,
        r#"{"choice":"For","voter":"did:example:carol","weight":2}]"#
    );

    #[test]
    fn example_tally_has_the_documented_weights() {
        let t = example_tally();
        assert_eq!((t.for_, t.against, t.abstain, t.participants), (4, 1, 0, 5));
        let weights: Vec<(&str, Choice, u64)> =
            t.effective_votes.iter().map(|v| (v.voter.as_str(), v.choice, v.weight)).collect();
        assert_eq!(
            weights,
            vec![
                ("did:example:alice", Choice::For, 2),
                ("did:example:bob", Choice::Against, 1),
                ("did:example:carol", Choice::For, 2),
            ]
        );
        assert_eq!(decide(&Rule::Majority, 50, 5, &t), Outcome::Approved);
    }

    #[test]
    fn fixed_test_vector() {
        let t = example_tally();
        assert_eq!(serde_jcs::to_string(&t.effective_votes).unwrap(), EXAMPLE_VOTES_JCS);
        let vh = votes_hash(&t.effective_votes);
        assert_eq!(vh, "0xa614242c8fbe23152b5a093209c12a77ded94c364bbf5123d41fdb923097a2bb");
        let bytes = canonical_bytes("prop-7", "budget", Outcome::Approved, &t, &vh, TIMESTAMP);
        let expected = format!(
            concat!(
                r#"{{"domain_id":"budget","outcome":"Approved","proposal_id":"prop-7","#,
                r#""tally":{{"abstain":0,"against":1,"for":4}},"timestamp":1735689600,"#,
                r#""votes_hash":"{}"}}"#
            ),
            vh
        );
        assert_eq!(String::from_utf8(bytes).unwrap(), expected);
        let receipt = example_receipt();
        assert_eq!(receipt.outcome, "Approved");
        assert_eq!(receipt.decision_hash, "0xbcafc26a2ed6c21d278c4af78414dd37051d2c939a6fb86fab707e22f3f01dac");
        assert_eq!(receipt.public_key, "8a88e3dd7409f195fd52db2d3cba5d72ca6709bf1d94121bf3748801b40f6f5c");
        assert_eq!(receipt.signer, "did:key:z6Mkon3Necd6NkkyfoGoHxid2znGc59LU3K7mubaRcFbLfLX");
        assert_eq!(
            receipt.signature,
            concat!(
                "be0d6a92d8315bbac3002a2e20ea9ca8cbb87b9d26e0e1736623992169124f7c",
                "1fc99dd550446de1e3df2870ebdae76e02cf2ea0553af65b640083c0096bd209"
            )
        );
        assert_eq!(verify_receipt(&receipt), Ok(()));
        // The whole receipt, exactly as docs/RECEIPTS.md shows it.
        assert_eq!(
            serde_json::to_string(&receipt).unwrap(),
            concat!(
                r#"{"decision_hash":"0xbcafc26a2ed6c21d278c4af78414dd37051d2c939a6fb86fab707e22f3f01dac","pro"#,
                r#"posal_id":"prop-7","domain_id":"budget","outcome":"Approved","tally":{"for":4,"against":1,"#,
                r#""abstain":0},"votes_hash":"0xa614242c8fbe23152b5a093209c12a77ded94c364bbf5123d41fdb923097a"#,
                r#"2bb","timestamp":1735689600,"signer":"did:key:z6Mkon3Necd6NkkyfoGoHxid2znGc59LU3K7mubaRcFb"#,
                r#"LfLX","public_key":"8a88e3dd7409f195fd52db2d3cba5d72ca6709bf1d94121bf3748801b40f6f5c","sig"#,
                r#"nature":"be0d6a92d8315bbac3002a2e20ea9ca8cbb87b9d26e0e1736623992169124f7c1fc99dd550446de1e"#,
                r#"3df2870ebdae76e02cf2ea0553af65b640083c0096bd209"}"#,
            )
        );
    }

    #[test]
    fn an_independent_recomputation_agrees_with_sign_receipt() {
        let receipt = example_receipt();
        // votes_hash: hand-written JCS of the effective votes, hashed directly.
        let votes_digest = Sha256::digest(EXAMPLE_VOTES_JCS.as_bytes());
        assert_eq!(receipt.votes_hash, format!("0x{}", hex::encode(votes_digest)));
        // The canonical object by hand: sorted keys, no whitespace.
        let canonical = format!(
            "{{\"domain_id\":\"{}\",\"outcome\":\"{}\",\"proposal_id\":\"{}\",\"tally\":{{\"abstain\":{},\"against\":{},\"for\":{}}},\"timestamp\":{},\"votes_hash\":\"{}\"}}",
            "budget", "Approved", "prop-7", 0, 1, 4, TIMESTAMP, receipt.votes_hash
        );
        let digest: [u8; 32] = Sha256::digest(canonical.as_bytes()).into();
        assert_eq!(receipt.decision_hash, format!("0x{}", hex::encode(digest)));
        // The signature, checked with ed25519-dalek directly against the seed's public key.
        let key = SigningKey::from_bytes(&SEED).verifying_key();
        assert_eq!(receipt.public_key, hex::encode(key.to_bytes()));
        let signature: [u8; 64] = hex::decode(&receipt.signature).unwrap().try_into().unwrap();
        let signature = Signature::from_bytes(&signature);
        key.verify_strict(&digest, &signature).unwrap();
        key.verify(&digest, &signature).unwrap();
        // The signer is the did:key of the key.
        let did = Did::key_from_public_key(&Ed25519PublicKey(key.to_bytes()));
        assert_eq!(receipt.signer, did.as_str());
        // The same canonical object through serde_json::json! (whose map is sorted).
        let via_json = serde_json::json!({
            "domain_id": "budget",
            "outcome": "Approved",
            "proposal_id": "prop-7",
            "tally": {"abstain": 0, "against": 1, "for": 4},
            "timestamp": TIMESTAMP,
            "votes_hash": receipt.votes_hash,
        });
        assert_eq!(serde_json::to_string(&via_json).unwrap(), canonical);
    }

    #[test]
    fn receipts_serialise_to_the_contract_shape_and_back() {
        let receipt = example_receipt();
        let json = serde_json::to_value(&receipt).unwrap();
        let keys: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
        let mut expected = vec![
            "decision_hash",
            "proposal_id",
            "domain_id",
            "outcome",
            "tally",
            "votes_hash",
            "timestamp",
            "signer",
            "public_key",
            "signature",
        ];
        expected.sort_unstable();
        assert_eq!(keys, expected);
        assert_eq!(json["tally"], serde_json::json!({"for": 4, "against": 1, "abstain": 0}));
        assert_eq!(json["timestamp"], TIMESTAMP);
        // Field order on the wire follows INTERFACE.md.
        let text = serde_json::to_string(&receipt).unwrap();
        assert!(text.starts_with("{\"decision_hash\":"), "{text}");
        assert!(text.contains("\"tally\":{\"for\":4,\"against\":1,\"abstain\":0}"), "{text}");
        let back: Receipt = serde_json::from_str(&text).unwrap();
        assert_eq!(back, receipt);
    }

    #[test]
    fn tampering_with_any_field_fails_verification() {
        let receipt = example_receipt();
        assert_eq!(verify_receipt(&receipt), Ok(()));
        let other_key = SigningKey::from_bytes(&[0x02; 32]).verifying_key().to_bytes();
        let other_did = Did::key_from_public_key(&Ed25519PublicKey(other_key)).to_string();
        fn flip_last(s: &str) -> String {
            let mut s = s.to_owned();
            let last = s.pop().unwrap();
            s.push(if last == '0' { '1' } else { '0' });
            s
        }
        type Tamper = Box<dyn Fn(&mut Receipt)>;
        let cases: Vec<(&str, Tamper, ReceiptError)> = vec![
            (
                "decision_hash",
                Box::new(|r| r.decision_hash = flip_last(&r.decision_hash)),
                ReceiptError::DecisionHashMismatch,
            ),
            ("proposal_id", Box::new(|r| r.proposal_id.push('x')), ReceiptError::DecisionHashMismatch),
            ("domain_id", Box::new(|r| r.domain_id = "treasury".into()), ReceiptError::DecisionHashMismatch),
            ("outcome", Box::new(|r| r.outcome = "Rejected".into()), ReceiptError::DecisionHashMismatch),
            ("tally_for", Box::new(|r| r.tally_for += 1), ReceiptError::DecisionHashMismatch),
            ("tally_against", Box::new(|r| r.tally_against = 0), ReceiptError::DecisionHashMismatch),
            ("tally_abstain", Box::new(|r| r.tally_abstain = 1), ReceiptError::DecisionHashMismatch),
            ("votes_hash", Box::new(|r| r.votes_hash = flip_last(&r.votes_hash)), ReceiptError::DecisionHashMismatch),
            ("timestamp", Box::new(|r| r.timestamp += 1), ReceiptError::DecisionHashMismatch),
            ("signer", Box::new(move |r| r.signer = other_did.clone()), ReceiptError::SignerMismatch),
            ("public_key", Box::new(move |r| r.public_key = hex::encode(other_key)), ReceiptError::SignerMismatch),
            ("signature", Box::new(|r| r.signature = flip_last(&r.signature)), ReceiptError::BadSignature),
        ];
        for (field, tamper, expected) in cases {
            let mut bad = receipt.clone();
            tamper(&mut bad);
            assert_ne!(bad, receipt, "{field} was not changed");
            assert_eq!(verify_receipt(&bad), Err(expected), "{field}");
        }
        // Replacing the key and the signer consistently still fails on the signature.
        let mut swapped = receipt.clone();
        swapped.public_key = hex::encode(other_key);
        swapped.signer = Did::key_from_public_key(&Ed25519PublicKey(other_key)).to_string();
        assert_eq!(verify_receipt(&swapped), Err(ReceiptError::BadSignature));
    }

    #[test]
    fn malformed_fields_are_reported_by_name() {
        let receipt = example_receipt();
        let field_of = |r: &Receipt| match verify_receipt(r) {
            Err(ReceiptError::Malformed { field, .. }) => field,
            other => panic!("unexpected {other:?}"),
        };
        let mut r = receipt.clone();
        r.outcome = "approved".into();
        assert_eq!(field_of(&r), "outcome");
        let mut r = receipt.clone();
        r.votes_hash = r.votes_hash.trim_start_matches("0x").to_owned();
        assert_eq!(field_of(&r), "votes_hash");
        let mut r = receipt.clone();
        r.decision_hash = r.decision_hash.to_uppercase().replacen("0X", "0x", 1);
        assert_eq!(field_of(&r), "decision_hash");
        let mut r = receipt.clone();
        r.public_key.pop();
        assert_eq!(field_of(&r), "public_key");
        let mut r = receipt.clone();
        r.signature = r.signature.to_uppercase();
        assert_eq!(field_of(&r), "signature");
    }

    #[test]
    fn votes_hash_ignores_input_order() {
        let t = example_tally();
        let mut reversed = t.effective_votes.clone();
        reversed.reverse();
        assert_eq!(votes_hash(&reversed), votes_hash(&t.effective_votes));
        assert_eq!(votes_hash(&[]), format!("0x{}", hex::encode(Sha256::digest(b"[]"))));
    }

    #[test]
    fn integers_beyond_2_pow_53_are_refused() {
        let mut r = example_receipt();
        r.timestamp = (1 << 53) + 1;
        assert_eq!(
            verify_receipt(&r),
            Err(ReceiptError::Malformed {
                field: "timestamp",
                reason: "above 2^53, which JCS cannot represent exactly"
            })
        );
        let mut r = example_receipt();
        r.tally_against = u64::MAX;
        assert!(matches!(verify_receipt(&r), Err(ReceiptError::Malformed { field: "tally.against", .. })));
        let mut r = example_receipt();
        r.timestamp = 1 << 53;
        assert_eq!(verify_receipt(&r), Err(ReceiptError::DecisionHashMismatch), "2^53 itself is exact");
    }

    #[test]
    fn signer_debug_does_not_print_the_secret() {
        let text = format!("{:?}", signer());
        assert!(text.contains(&hex::encode(signer().public_key())), "{text}");
        assert!(!text.contains(&hex::encode(SEED)), "{text}");
        assert!(!text.contains("1, 1, 1"), "{text}");
    }

    fn arb_vote() -> impl Strategy<Value = EffectiveVote> {
        let voter = prop_oneof!["did:key:z[1-9A-Za-z]{4,48}", "\\PC{0,12}", "[\\x00-\\x7f\"\\\\]{0,8}"];
        let weight = prop_oneof![0u64..1_000_000, Just(MAX_EXACT_INTEGER), any::<u64>()];
        let choice = prop_oneof![Just(Choice::For), Just(Choice::Against), Just(Choice::Abstain)];
        (voter, choice, weight).prop_map(|(voter, choice, weight)| EffectiveVote { voter, choice, weight })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn direct_votes_jcs_is_byte_identical_to_serde_jcs(votes in prop::collection::vec(arb_vote(), 0..8)) {
            let ours = votes_jcs(votes.iter());
            let library = serde_jcs::to_vec(&votes).unwrap();
            prop_assert_eq!(String::from_utf8(ours).unwrap(), String::from_utf8(library).unwrap());
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn every_signed_receipt_verifies(
            proposal in "\\PC{0,24}",
            domain in "\\PC{0,24}",
            counts in (any::<u32>(), any::<u32>(), any::<u32>()),
            timestamp in 0u64..(1 << 40),
            outcome in prop_oneof![Just(Outcome::Approved), Just(Outcome::Rejected), Just(Outcome::NoQuorum)],
        ) {
            let t = Tally {
                for_: counts.0.into(),
                against: counts.1.into(),
                abstain: counts.2.into(),
                participants: 0,
                effective_votes: Vec::new(),
            };
            let receipt = sign_receipt(&signer(), &proposal, &domain, outcome, &t, timestamp);
            prop_assert_eq!(verify_receipt(&receipt), Ok(()));
            let text = serde_json::to_string(&receipt).unwrap();
            let back: Receipt = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(verify_receipt(&back), Ok(()));
        }
    }
}
