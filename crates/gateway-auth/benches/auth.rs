//! Benchmarks of the login path and of token validation on the request path.
//!
//! `verify/bare_ed25519` is the baseline: one `ed25519-dalek` strict verification with a
//! pre-decoded key. `verify/login` is the gateway's whole verify step for the specification's
//! message form: DID parsing and key resolution, signature decoding, challenge lookup and
//! removal, Ed25519 verification, and JWT issue. The issue's target is login ≤ 1.3 × bare.

// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::Arc;

use async_trait::async_trait;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use ed25519_dalek::{Signer, SigningKey};
use gateway_auth::challenge::{Challenge, ChallengeStore, MemoryChallengeStore};
use gateway_auth::{Authenticator, LoginRequest, ScopePolicy, TokenConfig, TokenService};
use gateway_core::{
    Clock, CoopId, Did, Ed25519PublicKey, Error, KeyDidResolver, Membership, MembershipLookup, Role, ScopeSet,
    SystemClock,
};

#[derive(Debug)]
struct AlwaysMember;

#[async_trait]
impl MembershipLookup for AlwaysMember {
    async fn membership(&self, _: &CoopId, _: &Did) -> Result<Membership, Error> {
        Ok(Membership::Member(Role::Member))
    }
}

fn bench_token_validation(c: &mut Criterion) {
    let tokens = TokenService::new(TokenConfig::with_secret("b".repeat(32)), Arc::new(SystemClock)).unwrap();
    let signing = SigningKey::from_bytes(&[3; 32]);
    let did = Did::key_from_public_key(&Ed25519PublicKey(signing.verifying_key().to_bytes()));
    let coop = CoopId::parse("bench-coop").unwrap();
    let token = tokens.issue(&did, Some(&coop), ScopeSet::all()).token;
    c.bench_function("token/validate", |b| b.iter(|| tokens.verify(black_box(&token)).unwrap()));
    c.bench_function("token/issue", |b| b.iter(|| tokens.issue(black_box(&did), Some(&coop), ScopeSet::all())));
}

fn bench_verify(c: &mut Criterion) {
    let signing = SigningKey::from_bytes(&[5; 32]);
    let verifying = signing.verifying_key();
    let did = Did::key_from_public_key(&Ed25519PublicKey(verifying.to_bytes()));
    let nonce = hex::encode([0x5a; 32]);
    let signature = signing.sign(nonce.as_bytes());
    let signature_hex = hex::encode(signature.to_bytes());

    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let challenges = Arc::new(MemoryChallengeStore::default());
    let tokens = Arc::new(TokenService::new(TokenConfig::with_secret("b".repeat(32)), clock.clone()).unwrap());
    let auth = Authenticator::new(
        Arc::new(KeyDidResolver),
        challenges.clone(),
        tokens,
        ScopePolicy::new(Arc::new(AlwaysMember), false),
        clock.clone(),
        300,
    );
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let mut group = c.benchmark_group("verify");
    group.bench_function("bare_ed25519", |b| {
        b.iter(|| verifying.verify_strict(black_box(nonce.as_bytes()), black_box(&signature)).unwrap())
    });
    let mut next_id = 0u64;
    group.bench_function("login", |b| {
        b.iter_batched(
            || {
                next_id += 1;
                let challenge = Challenge {
                    id: format!("{next_id:032x}"),
                    did: did.to_string(),
                    nonce: nonce.clone(),
                    expires_at_millis: clock.now_unix_millis() + 300_000,
                };
                runtime.block_on(challenges.insert(challenge.clone(), 0)).unwrap();
                LoginRequest {
                    did: did.to_string(),
                    signature: signature_hex.clone(),
                    coop_id: Some("bench-coop".into()),
                    scopes: Some(vec!["ledger:read".into(), "ledger:write".into()]),
                    challenge_id: Some(challenge.id),
                }
            },
            |request| runtime.block_on(auth.login(request)).unwrap(),
            // One challenge per iteration: batching would exceed the per-DID cap of outstanding
            // challenges, which evicts the oldest.
            BatchSize::PerIteration,
        )
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(std::time::Duration::from_secs(3)).warm_up_time(std::time::Duration::from_secs(1));
    targets = bench_token_validation, bench_verify
}
criterion_main!(benches);
