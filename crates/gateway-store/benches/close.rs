//! The full close of a large proposal through a durable store: 10,000 domain members, 9,000
//! direct votes and 1,000 delegations (some chained), tally + rules + payload + receipt +
//! event + the notification fan-out to 10,000 members, committed with fsync on a SQLite file.
//! Each round opens a fresh proposal, casts the votes (not timed), then times
//! `Governance::close`, and then, separately, the expansion of its fan-out into 10,000
//! notifications (which the gateway does after the close has been acknowledged).
//!
//! Run: `cargo bench -p gateway-store --bench close`. Prints each round and the median.

// A harness-less bench binary: its `main` is not an API.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::Instant;

use futures_util::future::join_all;
use gateway_core::{CoopId, Did, ManualClock, Role};
use gateway_domain::coops::{Coops, NewCoop};
use gateway_domain::governance::{Governance, MemoryReceiptKeys, NewDomain, NewProposal, Outcome};
use gateway_domain::notifications::expand_fanouts;
use gateway_domain::trust::TrustGraph;
use gateway_store::{Store, StoreSpec};
use serde_json::json;

const MEMBERS: u32 = 10_000;
const DELEGATORS: u32 = 1_000;
const ROUNDS: usize = 5;

fn did(n: u32) -> Did {
    Did::parse(&format!("did:key:z6Mkbench{n}")).unwrap()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let spec = StoreSpec::SqliteFile(dir.path().join("close.db").display().to_string());
    let store = Arc::new(Store::open(&spec).await.unwrap());
    let clock = Arc::new(ManualClock::at_secs(1_800_000_000));
    let coops = Coops::new(store.clone(), store.clone(), store.clone(), clock.clone());
    let graph = Arc::new(TrustGraph::new(vec![], 0.9, vec![]));
    let keys = Arc::new(MemoryReceiptKeys::new([7; 32]));
    let gov = Governance::new(store.clone(), store.clone(), graph, keys, clock.clone());
    let coop = CoopId::parse("bench").unwrap();
    let new = NewCoop { id: None, name: "Bench".into(), coop_type: "worker".into(), description: String::new() };
    coops.create(&did(0), &coop, new).await.unwrap();
    let started = Instant::now();
    let members: Vec<Did> = (0..MEMBERS).map(did).collect();
    // Concurrent jobs share commit groups, so setup takes seconds, not an fsync per member.
    for chunk in members[1..].chunks(500) {
        for added in join_all(chunk.iter().map(|d| coops.add_member(&coop, d, Role::Member))).await {
            added.unwrap();
        }
    }
    let domain =
        NewDomain { domain_id: "all".into(), name: "All".into(), members, quorum_percent: Some(10), rule: None };
    gov.create_domain(&coop, &did(0), domain).await.unwrap();
    for n in 0..DELEGATORS {
        let delegator = MEMBERS - 1 - n;
        // Every tenth delegation goes to another delegator, making chains.
        let delegate = if n % 10 == 0 && n > 0 { MEMBERS - n } else { n * 7 % (MEMBERS - DELEGATORS) };
        gov.delegate(&coop, &did(delegator), &did(delegate), "domain:all", None).await.unwrap();
    }
    eprintln!("setup: {MEMBERS} members, {DELEGATORS} delegations in {:.1?}", started.elapsed());

    let mut timings = Vec::new();
    let mut expansions = Vec::new();
    for round in 0..ROUNDS {
        let request = NewProposal {
            domain_id: "all".into(),
            title: format!("round {round}"),
            description: String::new(),
            payload: json!({ "type": "text", "content": "bench" }),
            rule: None,
            voting_duration_secs: Some(3600),
        };
        let proposal = gov.create_proposal(&coop, &did(0), request, true).await.unwrap();
        let voters: Vec<(Did, &str)> =
            (0..MEMBERS - DELEGATORS).map(|n| (did(n), if n % 3 == 0 { "against" } else { "for" })).collect();
        for chunk in voters.chunks(500) {
            for voted in join_all(chunk.iter().map(|(d, choice)| gov.vote(&coop, d, &proposal.id, choice))).await {
                voted.unwrap();
            }
        }
        let started = Instant::now();
        let closed = gov.close(&coop, Some(&did(0)), &proposal.id).await.unwrap();
        let elapsed = started.elapsed();
        assert_eq!(closed.outcome, Some(Outcome::Approved));
        let started = Instant::now();
        // The close spawned the same expansion; whichever runs first does the work.
        expand_fanouts(store.as_ref()).await.unwrap();
        let expanded = started.elapsed();
        eprintln!(
            "round {round}: close in {elapsed:.2?} (tally {:?}), fan-out expanded {expanded:.2?} later",
            closed.tally
        );
        timings.push(elapsed);
        expansions.push(expanded);
    }
    timings.sort();
    expansions.sort();
    println!(
        "close with {} votes and {DELEGATORS} delegations, receipt included: median {:.2?} over {ROUNDS} rounds; \
         expanding its fan-out into {MEMBERS} notifications afterwards: median {:.2?}",
        MEMBERS - DELEGATORS,
        timings[ROUNDS / 2],
        expansions[ROUNDS / 2]
    );
}
