use gateway_core::{Amount, CoopId};
use gateway_tlog::{Checkpoint, Cosigner, MemoryTree, Note, Signer, TlogProof, inclusion_proof};

use super::audit::Mismatch;
use super::replay::Replay;
use super::*;
use crate::governance::Receipt;

const ORIGIN: &str = "gw.example/coops/c1";

/// A tree of `entries`, a checkpoint of it signed by `log` (and cosigned by `witnesses`).
fn signed_tree(entries: &[&[u8]], log: &Signer, witnesses: &[&Cosigner]) -> (MemoryTree, Note) {
    let mut tree = MemoryTree::new();
    for entry in entries {
        tree.append_entry(entry);
    }
    let checkpoint = Checkpoint::new(ORIGIN, tree.size(), tree.root()).unwrap();
    let mut note = Note::new(checkpoint.to_text()).unwrap();
    note.sign(log).unwrap();
    for witness in witnesses {
        note.add_signature(witness.cosign(&checkpoint, 1_750_000_000).unwrap()).unwrap();
    }
    (tree, note)
}

fn proof_text(tree: &MemoryTree, note: Note, index: u64) -> String {
    TlogProof::new(index, inclusion_proof(index, tree.size(), tree).unwrap(), note).unwrap().to_text()
}

const ENTRIES: [&[u8]; 3] = [
    br#"{"seq":0,"event":{"type":"LogOpened","coop_id":"c1","timestamp":1,"data":{"after_seq":0}}}"#,
    br#"{"seq":1,"event":{"type":"MemberAdded","coop_id":"c1","timestamp":2,"data":{"did":"did:key:a"}}}"#,
    br#"{"seq":2,"event":{"type":"PaymentCreated","coop_id":"c1","timestamp":3,"data":{}}}"#,
];

#[test]
fn a_proof_verifies_against_its_policy_and_names_the_entry() {
    let log = Signer::from_seed(ORIGIN, &[1; 32]).unwrap();
    let (tree, note) = signed_tree(&ENTRIES, &log, &[]);
    let proof = proof_text(&tree, note, 1);
    let policy = format!("log {}\nquorum none\n", log.vkey());
    let verified = verify_proof(proof.as_bytes(), ENTRIES[1], policy.as_bytes()).unwrap();
    assert_eq!((verified.index, verified.size, verified.seq), (1, 3, Some(1)));
    assert_eq!(verified.event_type.as_deref(), Some("MemberAdded"));
    assert_eq!(verified.origin, ORIGIN);
    assert_eq!(verified.log_key, log.vkey());

    // Another entry, a changed entry: not included.
    for wrong in [ENTRIES[2].to_vec(), String::from_utf8_lossy(ENTRIES[1]).replace(":a", ":b").into_bytes()] {
        let err = verify_proof(proof.as_bytes(), &wrong, policy.as_bytes()).unwrap_err();
        assert!(matches!(err, LogError::NotIncluded { index: 1, .. }), "{err}");
        assert!(!err.is_malformed());
    }
    // Another log key under the same name: the policy does not accept the checkpoint.
    let other = Signer::from_seed(ORIGIN, &[2; 32]).unwrap();
    let err = verify_proof(proof.as_bytes(), ENTRIES[1], format!("log {}\nquorum none\n", other.vkey()).as_bytes())
        .unwrap_err();
    assert!(matches!(err, LogError::Rejected(_)), "{err}");
    // Unreadable inputs.
    assert!(verify_proof(b"nonsense", ENTRIES[1], policy.as_bytes()).unwrap_err().is_malformed());
    assert!(verify_proof(proof.as_bytes(), ENTRIES[1], b"log nonsense\n").unwrap_err().is_malformed());
}

#[test]
fn a_policy_with_a_witness_quorum_needs_the_cosignature() {
    let log = Signer::from_seed(ORIGIN, &[1; 32]).unwrap();
    let witness = Cosigner::from_seed("w1.example", &[3; 32]).unwrap();
    let policy = format!("log {}\nwitness w1 {}\nquorum w1\n", log.vkey(), witness.vkey());
    let (tree, note) = signed_tree(&ENTRIES, &log, &[&witness]);
    let verified = verify_proof(proof_text(&tree, note, 2).as_bytes(), ENTRIES[2], policy.as_bytes()).unwrap();
    assert_eq!(verified.witnesses, [WitnessCosignature { name: "w1".into(), timestamp: 1_750_000_000 }]);
    let (tree, note) = signed_tree(&ENTRIES, &log, &[]);
    let err = verify_proof(proof_text(&tree, note, 2).as_bytes(), ENTRIES[2], policy.as_bytes()).unwrap_err();
    assert!(matches!(err, LogError::Rejected(CheckpointVerifyError::QuorumNotMet)), "{err}");
}

#[test]
fn an_audit_state_keeps_a_checkpoint_its_keys_sign() {
    let log = Signer::from_seed(ORIGIN, &[1; 32]).unwrap();
    let retired = Signer::from_seed(ORIGIN, &[9; 32]).unwrap();
    let (tree, note) = signed_tree(&ENTRIES, &log, &[]);
    let keys = format!("{}\n{}\n", retired.vkey(), log.vkey());
    let state = AuditState::new(&note.to_string(), &keys).unwrap();
    assert_eq!((state.size(), state.root(), state.origin()), (3, &tree.root(), ORIGIN));
    assert_eq!(state.keys_text(), keys);
    assert_eq!(state.checkpoint_text(), note.to_string());
    let json = serde_json::to_string(&state).unwrap();
    assert_eq!(serde_json::from_str::<AuditState>(&json).unwrap(), state);

    // Keys that did not sign it, a damaged note, a key that is not a vkey.
    let err = AuditState::new(&note.to_string(), &format!("{}\n", retired.vkey())).unwrap_err();
    assert!(matches!(err, LogError::StateDoesNotVerify(_)), "{err}");
    let damaged = note.to_string().replace("\n3\n", "\n4\n");
    assert!(matches!(AuditState::new(&damaged, &keys), Err(LogError::StateDoesNotVerify(_))));
    assert!(matches!(AuditState::new(&note.to_string(), "not a key\n"), Err(LogError::MalformedKey(_))));
    assert!(serde_json::from_str::<AuditState>(&json.replace(&log.vkey(), &retired.vkey())).is_err());
}

/// The worked example of docs/RECEIPTS.md.
const RECEIPT: &str = r#"{"decision_hash":"0xbcafc26a2ed6c21d278c4af78414dd37051d2c939a6fb86fab707e22f3f01dac","proposal_id":"prop-7","domain_id":"budget","outcome":"Approved","tally":{"for":4,"against":1,"abstain":0},"votes_hash":"0xa614242c8fbe23152b5a093209c12a77ded94c364bbf5123d41fdb923097a2bb","timestamp":1735689600,"signer":"did:key:z6Mkon3Necd6NkkyfoGoHxid2znGc59LU3K7mubaRcFbLfLX","public_key":"8a88e3dd7409f195fd52db2d3cba5d72ca6709bf1d94121bf3748801b40f6f5c","signature":"be0d6a92d8315bbac3002a2e20ea9ca8cbb87b9d26e0e1736623992169124f7c1fc99dd550446de1e3df2870ebdae76e02cf2ea0553af65b640083c0096bd209"}"#;

#[test]
fn the_documented_receipt_verifies_and_every_change_is_caught() {
    let receipt: Receipt = serde_json::from_str(RECEIPT).unwrap();
    let key = receipt::verify(&receipt).unwrap();
    assert_eq!(hex::encode(key), receipt.public_key);
    let changes: [(&str, &str); 6] = [
        (r#""Approved""#, r#""Rejected""#),
        (r#""against":1"#, r#""against":2"#),
        (r#""prop-7""#, r#""prop-8""#),
        ("1735689600", "1735689601"),
        ("be0d6a92", "be0d6a93"),
        ("did:key:z6Mkon3", "did:key:z6Mkon4"),
    ];
    for (from, to) in changes {
        let changed: Receipt = serde_json::from_str(&RECEIPT.replace(from, to)).unwrap();
        assert!(receipt::verify(&changed).is_err(), "{from} → {to} still verifies");
    }
    let upper: Receipt = serde_json::from_str(&RECEIPT.replace("8a88e3dd", "8A88E3DD")).unwrap();
    assert!(receipt::verify(&upper).unwrap_err().contains("lowercase"));
}

/// The reader's copy of the rules agrees with the signer's, on receipts the domain signs.
#[test]
fn receipts_the_domain_signs_verify_here() {
    use gateway_domain::governance::{Choice, Ed25519DecisionSigner, EffectiveVote, Outcome, Tally, sign_receipt};
    let signer = Ed25519DecisionSigner::new(ed25519_dalek::SigningKey::from_bytes(&[7; 32]));
    let tally = Tally {
        for_: 3,
        against: 1,
        abstain: 0,
        participants: 4,
        effective_votes: vec![
            EffectiveVote { voter: "did:key:a".into(), choice: Choice::For, weight: 3 },
            EffectiveVote { voter: "did:key:\"quoted\"\\".into(), choice: Choice::Against, weight: 1 },
        ],
    };
    for (proposal, domain, outcome) in
        [("p1", "coop", Outcome::Approved), ("ünïcødé \"p\"", "d\\2", Outcome::NoQuorum), ("", "", Outcome::Rejected)]
    {
        let signed = sign_receipt(&signer, proposal, domain, outcome, &tally, 1_767_225_600);
        let ours: Receipt = serde_json::from_value(serde_json::to_value(&signed).unwrap()).unwrap();
        receipt::verify(&ours).unwrap_or_else(|e| panic!("{proposal:?}: {e}"));
    }
}

fn entry(seq: u64, event_type: &str, data: &str) -> Vec<u8> {
    format!(r#"{{"seq":{seq},"event":{{"type":"{event_type}","coop_id":"c1","timestamp":7,"data":{data}}}}}"#)
        .into_bytes()
}

fn replay(entries: &[Vec<u8>]) -> Replay {
    let mut replay = Replay::new(&CoopId::parse("c1").unwrap());
    for (index, entry) in entries.iter().enumerate() {
        replay.apply(index as u64, entry);
    }
    replay
}

fn amount(text: &str) -> Amount {
    Amount::parse_decimal(text).unwrap()
}

#[test]
fn the_ledger_replays_payments_and_conversions_exactly() {
    let entries = vec![
        entry(
            4,
            "LogOpened",
            r#"{"after_seq":4,"members":[{"did":"did:key:a","role":"admin","credit_limit":null}],
                "balances":[{"account":"did:key:a","currency":"hours","balance":-0.000001},
                            {"account":"did:key:b","currency":"hours","balance":0.000001}],
                "settings":{},"receipt_key":{"public_key":"ab","generation":0}}"#,
        ),
        entry(
            5,
            "PaymentCreated",
            r#"{"id":"t1","kind":"payment","from":"did:key:a","to":"did:key:b","amount":999999999999.999999,"currency":"hours","memo":null,"timestamp":7}"#,
        ),
        entry(
            6,
            "PaymentCreated",
            r#"{"id":"t2","kind":"conversion","from":"did:key:b","to":"did:key:a","amount":10,"currency":"hours","memo":null,"timestamp":7,
                "to_currency":"eur","rate":1.5,"gross_target_amount":15,"fee_amount":0.15,"net_target_amount":14.85}"#,
        ),
        entry(7, "MemberAdded", r#"{"did":"did:key:c","role":"member","joined_at":7,"credit_limit":null}"#),
        entry(
            8,
            "PaymentCreated",
            r#"{"id":"t3","kind":"payment","from":"coop:c1:treasury","to":"did:key:c","amount":0.5,"currency":"hours","memo":"budget","timestamp":7}"#,
        ),
        entry(
            9,
            "GovernanceProposalClosed",
            r#"{"proposal_id":"p1","domain_id":"coop","title":"t","status":"closed","author":"did:key:a","outcome":"Approved","tally":{"for":1,"against":0,"abstain":0}}"#,
        ),
    ];
    let replay = replay(&entries);
    assert!(replay.mismatches.is_empty(), "{:?}", replay.mismatches);
    assert_eq!(replay.after_seq, Some(4));
    assert_eq!(replay.balance("did:key:a", "hours"), amount("-1000000000000"));
    assert_eq!(replay.balance("did:key:b", "hours"), amount("999999999990"));
    assert_eq!(replay.balance("coop:c1:exchange", "hours"), amount("10"));
    assert_eq!(replay.balance("coop:c1:exchange", "eur"), amount("-14.85"));
    assert_eq!(replay.balance("did:key:a", "eur"), amount("14.85"));
    assert_eq!(replay.balance("coop:c1:treasury", "hours"), amount("-0.5"));
    assert_eq!(replay.balance("did:key:c", "hours"), amount("0.5"));
    assert!(replay.accounts.contains("did:key:c"));
    assert_eq!(replay.opened_key.as_deref(), Some("ab"));
    assert_eq!(replay.closed.len(), 1);
    assert!(replay.closed[0].receipt.is_none());
    assert_eq!(replay.events["PaymentCreated"], 3);
}

#[test]
fn entries_out_of_order_or_inconsistent_are_named() {
    let opened = entry(0, "LogOpened", r#"{"after_seq":0,"balances":[{"account":"a","currency":"x","balance":1}]}"#);
    let entries = vec![
        opened,
        entry(2, "MemberAdded", r#"{"did":"did:key:a"}"#),
        entry(
            3,
            "PaymentCreated",
            r#"{"kind":"conversion","from":"a","to":"b","amount":2,"currency":"x","to_currency":"y","rate":2,"gross_target_amount":5,"fee_amount":0,"net_target_amount":5}"#,
        ),
        entry(4, "PaymentCreated", r#"{"kind":"payment","from":"a","to":"b","amount":"2","currency":"x"}"#),
        entry(5, "LogOpened", r#"{"after_seq":0}"#),
        b"not json".to_vec(),
    ];
    let found: Vec<String> = replay(&entries).mismatches.iter().map(ToString::to_string).collect();
    let expect = [
        "entry 0: the snapshot's balances in x sum to 1, not 0",
        "entry 1: carries event 2, but entry 1 follows event 0 by 1",
        "entry 2: 2 at rate 2 is not a gross of 5",
        "entry 4: a second LogOpened",
    ];
    for text in expect {
        assert!(found.iter().any(|f| f == text), "{text:?} not in {found:#?}");
    }
    assert!(found.iter().any(|f| f.starts_with("entry 3: a PaymentCreated that cannot be replayed")), "{found:#?}");
    assert!(found.iter().any(|f| f.starts_with("entry 5: not a log entry")), "{found:#?}");
    let first = replay(&[entry(0, "PaymentCreated", "{}")]).mismatches;
    assert_eq!(first, [Mismatch::Entry { index: 0, detail: "entry 0 is PaymentCreated, not LogOpened".into() }]);
}

/// A `LogOpened` entry whose `members` field is replaced by its digest, as the gateway writes
/// one too large for an entry, and the data whole.
fn digested_opened() -> (Vec<u8>, String) {
    use sha2::Digest as _;
    let members = r#"[{"did":"did:key:a","role":"admin","credit_limit":null},{"did":"did:key:b","role":"member","credit_limit":null}]"#;
    let balances = r#"[{"account":"did:key:a","currency":"hours","balance":-2},{"account":"did:key:b","currency":"hours","balance":2}]"#;
    let whole = format!(r#"{{"after_seq":4,"members":{members},"balances":{balances}}}"#);
    let digest = format!(
        r#"{{"sha256":"{}","bytes":{}}}"#,
        hex::encode(sha2::Sha256::digest(members.as_bytes())),
        members.len()
    );
    let entry = format!(
        r#"{{"seq":4,"event":{{"type":"LogOpened","coop_id":"c1","timestamp":1,"data":{{"after_seq":4,"members":{digest},"balances":{balances}}}}}}}"#
    );
    (entry.into_bytes(), whole)
}

#[test]
fn a_digested_log_opened_is_replayed_from_the_data_served_apart_once_it_matches() {
    let (entry, whole) = digested_opened();
    let (rebuilt, digested) = super::replay::with_whole_data(&entry, Some(&whole)).unwrap().unwrap();
    assert_eq!(digested, 1);
    let mut replay = Replay::new(&CoopId::parse("c1").unwrap());
    replay.apply(0, &rebuilt);
    assert!(replay.mismatches.is_empty(), "{:?}", replay.mismatches);
    assert!(replay.accounts.contains("did:key:a") && replay.accounts.contains("did:key:b"));
    assert_eq!(replay.balance("did:key:b", "hours"), Amount::from_units(2));

    // Without the data, with another member list, with another balance: refused, naming why.
    let refused = super::replay::with_whole_data(&entry, None).unwrap_err();
    assert!(refused.contains("1 of its fields are digests"), "{refused}");
    let other = whole.replace(r#""role":"member""#, r#""role":"admin""#);
    let refused = super::replay::with_whole_data(&entry, Some(&other)).unwrap_err();
    assert!(refused.contains("\"members\""), "{refused}");
    let other = whole.replace(r#""balance":2"#, r#""balance":3"#);
    let refused = super::replay::with_whole_data(&entry, Some(&other)).unwrap_err();
    assert!(refused.contains("\"balances\""), "{refused}");
    let refused = super::replay::with_whole_data(&entry, Some(r#"{"after_seq":4}"#)).unwrap_err();
    assert!(refused.contains("fields"), "{refused}");
    // An entry with its data whole needs nothing served apart.
    let plain = br#"{"seq":0,"event":{"type":"LogOpened","coop_id":"c1","timestamp":1,"data":{"after_seq":0}}}"#;
    assert_eq!(super::replay::with_whole_data(plain, None), Ok(None));
}
