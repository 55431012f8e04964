//! A signed payment's extra server time (INTERFACE.md §11's profile: parse the fields, check the
//! digest, build the base, verify Ed25519, resolve the DID's key) against a bare Ed25519 verify
//! of a message of the same size, and what a signer's first request adds (its key is then cached).
//! `cargo bench -p gateway-httpsig` prints all three; the target is at most 1.3× (docs/PERFORMANCE.md).

use std::hint::black_box;

use std::time::Duration;

use criterion::Criterion;
use ed25519_dalek::{Signer, SigningKey, Verifier};
use gateway_core::{Did, DidResolver, Ed25519PublicKey};
use gateway_httpsig::{Limits, Message, SignOptions, sign, verify};

fn bench(c: &mut Criterion) {
    let key = SigningKey::from_bytes(&[7; 32]);
    let did = Did::key_from_public_key(&Ed25519PublicKey(key.verifying_key().to_bytes()));
    let body = br#"{"from":"did:key:z6MkiTBz1ymuepAQ4HEHYSF1H8quG5GLVVQR3djdX3mDooWp","to":"did:key:z6MkjchhfUsD6mmvni8mCdXHw216Xrm9bQe2mBH1P5RDjVJG","amount":12.5,"currency":"hours","memo":"bread"}"#;
    let message = Message {
        method: "POST",
        authority: "127.0.0.1:8080",
        path: "/v1/ledger/bakery/payment",
        query: None,
        headers: &[],
    };
    let now = 1_800_000_000;
    let options = SignOptions {
        label: "sig1",
        created: now,
        expires: now + 60,
        nonce: "0123456789abcdef0123",
        keyid: did.as_str(),
    };
    let signed = sign(&message, body, &key, &options).unwrap();
    let digest = signed.content_digest.clone().unwrap();
    let headers = [("content-digest", digest.as_str())];
    let received = Message { headers: &headers, ..message };

    // The bare verify: one Ed25519 check over a message of the signature base's size.
    let base_like = vec![b'x'; 330];
    let bare = key.sign(&base_like);
    let verifying = key.verifying_key();

    let mut group = c.benchmark_group("request_signature");
    group.bench_function("bare_ed25519_verify", |b| {
        b.iter(|| verifying.verify(black_box(&base_like), black_box(&bare)).unwrap())
    });
    group.bench_function("signed_payment_verify", |b| {
        b.iter(|| {
            verify(
                black_box(&received),
                black_box(body),
                black_box(&signed.signature_input),
                black_box(&signed.signature),
                &did,
                now,
                Limits::default(),
            )
            .unwrap()
        })
    });
    // What a signer's first request pays on top (later ones find the key cached): decoding the
    // DID and decompressing its Ed25519 point.
    group.bench_function("signer_key_from_did", |b| {
        b.iter(|| {
            let key = gateway_core::KeyDidResolver.resolve(black_box(&did)).unwrap();
            ed25519_dalek::VerifyingKey::from_bytes(&key.0).unwrap()
        })
    });
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
