//! What a member's offline check of a proof costs (contract 12's target: at most 1 ms for a
//! proof with three cosignatures): parsing a `c2sp.org/tlog-proof@v1` of entry 123,456 of a
//! 1,000,000-entry log and verifying it against a tlog-policy of the log and three witnesses
//! (the leaf hash, the inclusion proof's 20 hashes, the log's Ed25519 signature and three
//! cosignatures), beside one bare Ed25519 verification for scale.
//!
//! `cargo bench -p gateway-tlog --bench verify`

use std::time::Duration;

use criterion::Criterion;
use ed25519_dalek::{Signer as _, SigningKey, Verifier as _};
use gateway_tlog::proof::TlogProof;
use gateway_tlog::{Checkpoint, Cosigner, Note, Policy, Signer, inclusion_proof, leaf_hash};

const ORIGIN: &str = "gw.example.coop/coops/bakery";

fn entry(i: u64) -> Vec<u8> {
    format!(r#"{{"seq":{i},"event":{{"type":"PaymentCreated","coop_id":"bakery","timestamp":1767225600,"data":{{"id":"t{i}"}}}}}}"#)
        .into_bytes()
}

fn proof_and_policy() -> (String, Vec<u8>, Policy) {
    // A log of a million entries, built from its leaves.
    let size = 1_000_000u64;
    let tree = gateway_tlog::MemoryTree::from_leaf_hashes((0..size).map(|i| leaf_hash(&entry(i))));
    let log = Signer::from_seed(ORIGIN, &[1; 32]).unwrap();
    let witnesses: Vec<Cosigner> =
        (1..=3u8).map(|i| Cosigner::from_seed(&format!("witness{i}.example"), &[i + 1; 32]).unwrap()).collect();
    let checkpoint = Checkpoint::new(ORIGIN, size, tree.root()).unwrap();
    let mut note = Note::new(checkpoint.to_text()).unwrap();
    note.sign(&log).unwrap();
    for witness in &witnesses {
        note.add_signature(witness.cosign(&checkpoint, 1_767_225_600).unwrap()).unwrap();
    }
    let index = 123_456;
    let proof = TlogProof::new(index, inclusion_proof(index, size, &tree).unwrap(), note).unwrap();
    let policy = format!(
        "log {}\nwitness w1 {}\nwitness w2 {}\nwitness w3 {}\ngroup all-three all w1 w2 w3\nquorum all-three\n",
        log.vkey(),
        witnesses[0].vkey(),
        witnesses[1].vkey(),
        witnesses[2].vkey()
    );
    (proof.to_text(), entry(index), Policy::parse(policy.as_bytes()).unwrap())
}

fn bench(c: &mut Criterion) {
    let (text, entry, policy) = proof_and_policy();
    let mut group = c.benchmark_group("tlog_proof");
    group.bench_function("parse_and_verify_three_cosignatures", |b| {
        b.iter(|| {
            let proof = TlogProof::parse(text.as_bytes()).unwrap();
            let verified = proof.verify(&entry, &policy).unwrap();
            assert_eq!(verified.cosignatures.len(), 3);
        });
    });
    let key = SigningKey::from_bytes(&[9; 32]);
    let signature = key.sign(b"checkpoint");
    let public = key.verifying_key();
    group.bench_function("one_ed25519_verify", |b| b.iter(|| public.verify(b"checkpoint", &signature).unwrap()));
    group.finish();
}

fn main() {
    let mut criterion = Criterion::default()
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
        .configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
}
