//! `Log::proof` through a durable store: an inclusion proof of an entry of a coop's log of
//! 20,002 entries on a SQLite file, against its signed checkpoint. What `GET
//! /v1/coops/{id}/log/proof` costs beyond HTTP and the token and membership checks: the log
//! head (read from the store and its checkpoint note parsed every 100 ms, kept between), the
//! tiles and kept subtree hashes from the process's cache, and the proof's text
//! (docs/PERFORMANCE.md, "`log`"). Each iteration proves another entry, as the load harness's
//! requests do.
//!
//! Run: `cargo bench -p gateway-store --bench proof`.

// A harness-less bench binary: its `main` is not an API.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use criterion::Criterion;
use futures_util::future::join_all;
use gateway_core::{CoopId, Did, ManualClock, Role};
use gateway_domain::coops::{Coops, NewCoop};
use gateway_domain::governance::MemoryReceiptKeys;
use gateway_domain::log::{Log, LogConfig, Round};
use gateway_store::{Store, StoreSpec};

/// Members added after the coop's creation: with `CoopCreated` and `LogOpened`, the log's
/// entries.
const MEMBERS: u64 = 20_000;

fn did(n: u64) -> Did {
    Did::parse(&format!("did:key:z6Mkbench{n}")).unwrap()
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (log, coop, size) = runtime.block_on(async {
        let spec = StoreSpec::SqliteFile(dir.path().join("proof.db").display().to_string());
        let store = Arc::new(Store::open(&spec).await.unwrap());
        let clock = Arc::new(ManualClock::at_secs(1_800_000_000));
        let coops = Coops::new(store.clone(), store.clone(), store.clone(), clock.clone());
        let coop = CoopId::parse("bench").unwrap();
        let new = NewCoop { id: None, name: "Bench".into(), coop_type: "worker".into(), description: String::new() };
        coops.create(&did(0), &coop, new).await.unwrap();
        let members: Vec<Did> = (1..=MEMBERS).map(did).collect();
        // Concurrent jobs share commit groups: seconds, not an fsync per member.
        for chunk in members.chunks(500) {
            for added in join_all(chunk.iter().map(|d| coops.add_member(&coop, d, Role::Member))).await {
                added.unwrap();
            }
        }
        let keys = Arc::new(MemoryReceiptKeys::new([7; 32]));
        let log = Log::new(store.clone(), store.clone(), store, keys, clock, LogConfig::default());
        let mut size = 0;
        loop {
            match log.checkpoint(&coop).await.unwrap() {
                Round::Signed { size: signed } => size = signed,
                Round::Unsigned { .. } => {}
                Round::Idle => break,
            }
        }
        assert!(size > MEMBERS, "the log signed {size} entries");
        (log, coop, size)
    });
    // Entry 0 is `LogOpened`, entry n event n (the coop's events are numbered from 1).
    let events = size - 1;
    let mut n = 0u64;
    c.bench_function(&format!("log_proof_of_one_of_{size}_entries"), |b| {
        b.iter(|| {
            n += 1;
            let seq = 1 + n * 7919 % events;
            let proof = runtime.block_on(log.proof(&coop, seq, false)).unwrap();
            assert!(proof.starts_with("c2sp.org/tlog-proof@v1\n"));
            proof
        });
    });
}

fn main() {
    let mut criterion = Criterion::default()
        .measurement_time(Duration::from_secs(5))
        .warm_up_time(Duration::from_secs(1))
        .configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
}
