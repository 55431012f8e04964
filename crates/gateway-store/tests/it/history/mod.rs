//! A Jepsen-style concurrency harness over the domain services and the real store.
//!
//! Each scenario runs many rounds. In a round, N processes wait behind a `tokio::sync::Barrier`
//! and then issue conflicting operations through the domain services (after a small delay drawn
//! from the round's seeded RNG). Every operation is recorded in a [`History`]: its invocation
//! (process, kind, arguments, logical time) and its completion (ok value or typed error code).
//! Checkers then look at the history and at the final state, and a round that breaks a rule of
//! docs/INTERFACE.md §15 ("Concurrency and durability") fails with the round's seed and the history.
//!
//! Two modes (see [`Mode`]):
//! - `Threads`: a multi-thread runtime, `tokio::spawn`ed processes, seeded random delays. Real
//!   interleavings on every store, reproducible only in distribution.
//! - `Seeded`: a current-thread runtime where the processes' futures are polled in an order drawn
//!   from the seed, with seeded `yield_now` points before each operation; on the in-memory store a
//!   failing interleaving replays from its seed.
//!
//! Replay: `HARNESS_SEED=<seed>` runs only the round with that seed (the failure message prints
//! it); `HARNESS_ROUNDS=<n>` changes the number of rounds (default 20).

pub mod checkers;
pub mod recorder;
pub mod sched;

mod compute;
mod governance;
mod ledger;
mod membership;

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use gateway_core::Error;
use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::support::{Backend, Fixture};
pub use recorder::History;
pub use sched::Mode;

/// Processes per round (some rounds use fewer, drawn from the seed).
pub const N: usize = 8;
/// Default seed of round 0; round `r` uses `BASE_SEED + r`.
pub const BASE_SEED: u64 = 0x5eed_0000;

/// One round's context: fixture, history, RNG, mode, and a unique prefix for the ids it creates.
pub struct Round {
    pub f: Arc<Fixture>,
    pub history: Arc<History>,
    pub rng: StdRng,
    pub mode: Mode,
    pub seed: u64,
    pub index: u32,
}

impl Round {
    /// An id unique to this round (coop ids, idempotency keys).
    pub fn id(&self, what: &str) -> String {
        format!("{what}-r{}-{:x}", self.index, self.seed)
    }

    /// Runs `n` processes together: each waits at a barrier, then (after a seeded delay or seeded
    /// yields, depending on the mode) runs `op(process)`. Returns the results in process order.
    pub async fn concurrently<T, Fut>(&mut self, n: usize, op: impl Fn(usize) -> Fut) -> Vec<Result<T, Error>>
    where
        T: Send + 'static,
        Fut: Future<Output = Result<T, Error>> + Send + 'static,
    {
        let jobs: Vec<sched::Job<T>> =
            (0..n).map(|p| Box::pin(op(p)) as Pin<Box<dyn Future<Output = _> + Send>>).collect();
        sched::run_jobs(self.mode, &mut self.rng, jobs).await
    }
}

/// The rounds to run: every round with its seed, or the one seed in `HARNESS_SEED`.
fn seeds() -> Vec<(u32, u64)> {
    if let Ok(seed) = std::env::var("HARNESS_SEED") {
        let seed = seed.trim();
        let seed = seed
            .strip_prefix("0x")
            .map_or_else(|| seed.parse(), |hex| u64::from_str_radix(hex, 16))
            .expect("HARNESS_SEED is a number (decimal or 0x-hex)");
        return vec![(seed.wrapping_sub(BASE_SEED) as u32, seed)];
    }
    let rounds: u32 = std::env::var("HARNESS_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(20);
    (0..rounds).map(|r| (r, BASE_SEED + u64::from(r))).collect()
}

/// A scenario: sets up its own objects in the round's fixture, runs one round, and returns the
/// checkers' violations (empty when the round is fine).
pub type Scenario = for<'a> fn(&'a mut Round) -> Pin<Box<dyn Future<Output = Vec<String>> + Send + 'a>>;

/// Runs a scenario's rounds against one backend; panics with every failing round's seed,
/// violations and history.
pub async fn run(name: &str, backend: Backend, mode: Mode, scenario: Scenario) {
    let Some(f) = Fixture::open(backend).await else { return };
    let f = Arc::new(f);
    let mut failures = Vec::new();
    let mut by_checker: BTreeMap<String, u32> = BTreeMap::new();
    let seeds = seeds();
    for &(index, seed) in &seeds {
        let mut round = Round {
            f: f.clone(),
            history: Arc::new(History::default()),
            rng: StdRng::seed_from_u64(seed),
            mode,
            seed,
            index,
        };
        let violations = scenario(&mut round).await;
        let kinds: BTreeSet<String> = violations.iter().map(|v| checker_of(v)).collect();
        for kind in kinds {
            *by_checker.entry(kind).or_default() += 1;
        }
        if !violations.is_empty() {
            failures.push(format!(
                "round {index} (HARNESS_SEED={seed:#x}):\n  - {}\n  history:\n{}",
                violations.join("\n  - "),
                round.history.render()
            ));
        }
    }
    if !failures.is_empty() {
        let shown: Vec<&String> = failures.iter().take(3).collect();
        let summary: Vec<String> = by_checker.iter().map(|(k, n)| format!("{k}: {n} rounds")).collect();
        panic!(
            "{name} on {backend:?} ({mode:?}): {} of {} rounds broke the guarantees of INTERFACE.md §15 [{}]\n{}",
            failures.len(),
            seeds.len(),
            summary.join("; "),
            shown.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n")
        );
    }
}

/// The seeded scheduler replays: one seed, run twice on fresh in-memory stores, gives the same
/// history for every scenario: the same invocations in the same order, so the same transactions
/// queue for the store in the same order, with the same outcome for each process. (When each
/// reply arrives is the store writer thread's timing, not the scheduler's.) Different seeds do
/// give different interleavings.
#[tokio::test(flavor = "current_thread")]
async fn a_seed_replays_its_interleaving() {
    let scenarios: [(&str, Scenario); 9] = [
        ("payments", |r| Box::pin(ledger::payments_near_the_floor(r))),
        ("idempotency", |r| Box::pin(ledger::one_key_many_payments(r))),
        ("batches", |r| Box::pin(ledger::random_atomic_batches(r))),
        ("closes", |r| Box::pin(governance::many_closes_of_one_budget(r))),
        ("closes without keystore", |r| Box::pin(governance::many_closes_of_one_budget_locked(r))),
        ("delegations", |r| Box::pin(governance::concurrent_delegations(r))),
        ("demotions", |r| Box::pin(membership::admins_demote_each_other(r))),
        ("creations", |r| Box::pin(membership::many_creations_of_one_coop(r))),
        ("claims", |r| Box::pin(compute::many_executors_claim_one_task(r))),
    ];
    let mut interleavings = BTreeSet::new();
    for (name, scenario) in scenarios {
        for seed in [BASE_SEED, BASE_SEED + 7] {
            let mut shapes = Vec::new();
            for _ in 0..2 {
                let f = Arc::new(Fixture::open(Backend::Memory).await.unwrap());
                let history = Arc::new(History::default());
                let mut round = Round {
                    f,
                    history: history.clone(),
                    rng: StdRng::seed_from_u64(seed),
                    mode: Mode::Seeded,
                    seed,
                    index: 0,
                };
                scenario(&mut round).await;
                shapes.push(history.shape());
            }
            assert!(!shapes[0].1.is_empty(), "{name}: the round recorded nothing");
            assert_eq!(shapes[0], shapes[1], "{name}: seed {seed:#x} did not replay");
            interleavings.insert(shapes.swap_remove(0));
        }
    }
    // A scheduler that ignored its seed would replay trivially; 16 runs must not all agree.
    assert!(interleavings.len() > 1, "every seed gave the same interleaving");
}

/// The checker a violation comes from: its text up to the first ':' (ids masked).
fn checker_of(violation: &str) -> String {
    let head = violation.split(':').next().unwrap_or(violation);
    head.split_whitespace()
        .filter(|w| !(w.len() >= 16 && w.chars().all(|c| c.is_ascii_hexdigit())))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The scenarios, each run on the three stores with real threads, and on the in-memory store
/// with the seeded scheduler.
macro_rules! scenarios {
    ($($name:ident => $scenario:path),* $(,)?) => {
        mod memory {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                super::run(stringify!($name), crate::support::Backend::Memory, super::Mode::Threads, |r| Box::pin($scenario(r))).await
            })*
        }
        mod sqlite_file {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                super::run(stringify!($name), crate::support::Backend::SqliteFile, super::Mode::Threads, |r| Box::pin($scenario(r))).await
            })*
        }
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                super::run(stringify!($name), crate::support::Backend::Postgres, super::Mode::Threads, |r| Box::pin($scenario(r))).await
            })*
        }
        mod seeded_memory {
            $(#[tokio::test(flavor = "current_thread")]
            async fn $name() {
                super::run(stringify!($name), crate::support::Backend::Memory, super::Mode::Seeded, |r| Box::pin($scenario(r))).await
            })*
        }
    };
}

scenarios! {
    payments_near_the_credit_floor => super::ledger::payments_near_the_floor,
    one_idempotency_key_many_payments => super::ledger::one_key_many_payments,
    random_atomic_batches => super::ledger::random_atomic_batches,
    many_closes_of_one_budget_proposal => super::governance::many_closes_of_one_budget,
    many_closes_of_one_budget_proposal_without_keystore => super::governance::many_closes_of_one_budget_locked,
    concurrent_delegations => super::governance::concurrent_delegations,
    admins_demote_each_other => super::membership::admins_demote_each_other,
    many_creations_of_one_coop => super::membership::many_creations_of_one_coop,
    many_executors_claim_one_task => super::compute::many_executors_claim_one_task,
}
