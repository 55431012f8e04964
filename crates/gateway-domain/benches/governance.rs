//! Benchmark of closing a governance proposal, the pure part: `tally`, `decide` and
//! `sign_receipt` for a domain of 10,000 members where 9,000 vote directly and 1,000 delegate
//! (a fifth of the delegations in chains of up to five, scopes mixed, some with expiries).
//!
//! Storage (loading votes and delegations, saving the receipt) is not measured here; the
//! whole close, storage included, has a 50 ms budget.

// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use ed25519_dalek::SigningKey;
use gateway_domain::governance::{
    Choice, Delegation, DelegationScope, DirectVote, Ed25519DecisionSigner, Rule, decide, sign_receipt, tally,
};

const MEMBERS: usize = 10_000;
const DIRECT: usize = 9_000;
const DOMAIN: &str = "budget";
const PROPOSAL: &str = "prop-1";
const NOW: u64 = 1_735_689_600;

/// A `did:key`-sized identifier (56 characters), distinct per member.
fn did(i: usize) -> String {
    format!("did:key:z6Mk{i:044}")
}

struct Scenario {
    members: Vec<String>,
    votes: Vec<DirectVote>,
    delegations: Vec<Delegation>,
}

fn scenario() -> Scenario {
    let members: Vec<String> = (0..MEMBERS).map(did).collect();
    let votes = (0..DIRECT)
        .map(|i| DirectVote {
            voter: members[i].clone(),
            choice: match i % 10 {
                0..=5 => Choice::For,
                6..=8 => Choice::Against,
                _ => Choice::Abstain,
            },
        })
        .collect();
    let delegations = (0..MEMBERS - DIRECT)
        .map(|k| {
            let delegator = DIRECT + k;
            // In each block of ten delegators, 0..=3 pass to the next delegator (chains of up
            // to five), the others to a direct voter spread over the domain.
            let delegate = if k % 10 < 4 { delegator + 1 } else { (k * 7_919) % DIRECT };
            Delegation {
                id: format!("del-{k:04}"),
                delegator: members[delegator].clone(),
                delegate: members[delegate].clone(),
                scope: match k % 3 {
                    0 => DelegationScope::Blanket,
                    1 => DelegationScope::Domain(DOMAIN.into()),
                    _ => DelegationScope::Proposal(PROPOSAL.into()),
                },
                expires_at: (k % 2 == 0).then_some(NOW + 86_400),
                created_at: NOW - 3_600,
            }
        })
        .collect();
    Scenario { members, votes, delegations }
}

fn close(c: &mut Criterion) {
    let s = scenario();
    let signer = Ed25519DecisionSigner::new(SigningKey::from_bytes(&[0x01; 32]));
    let n = s.members.len() as u64;
    let t = tally(&s.members, &s.votes, &s.delegations, DOMAIN, PROPOSAL, NOW);
    assert_eq!(t.participants, n, "every member's vote must count");
    let outcome = decide(&Rule::Majority, 50, n, &t);

    let mut group = c.benchmark_group("governance");
    group.bench_function("tally_10k_members_1k_delegations", |b| {
        b.iter(|| tally(black_box(&s.members), black_box(&s.votes), black_box(&s.delegations), DOMAIN, PROPOSAL, NOW))
    });
    group.bench_function("decide", |b| b.iter(|| decide(black_box(&Rule::Supermajority(67)), 50, n, black_box(&t))));
    group.bench_function("sign_receipt_9k_effective_votes", |b| {
        b.iter(|| sign_receipt(&signer, PROPOSAL, DOMAIN, outcome, black_box(&t), NOW))
    });
    group.bench_function("close_tally_decide_sign", |b| {
        b.iter(|| {
            let t = tally(black_box(&s.members), black_box(&s.votes), black_box(&s.delegations), DOMAIN, PROPOSAL, NOW);
            let outcome = decide(&Rule::Majority, 50, n, &t);
            sign_receipt(&signer, PROPOSAL, DOMAIN, outcome, &t, NOW)
        })
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1));
    targets = close
}
criterion_main!(benches);
