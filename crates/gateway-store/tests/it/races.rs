//! Read-then-write decisions under concurrency, on every backend: N units of work released
//! together (a barrier) race for the same row, for several rounds, through the domain services.
//! On PostgreSQL these hold only because of the row locks (or unique indexes) documented in
//! `docs/ARCHITECTURE.md`; SQLite serialises every write through its single writer.

use std::sync::Arc;

use gateway_core::{Amount, CoopId, Did, Error, PageRequest, Role};
use gateway_domain::coops::NewCoop;
use gateway_domain::ledger::{PaymentRequest, Replay, treasury_account};
use gateway_domain::ports::{HistoryQuery, TaskRecord, TaskStatus, transaction};
use gateway_domain::tasks::Compute;
use gateway_domain::trust::TrustGraph;
use tokio::sync::Barrier;

use crate::support::{Backend, Fixture, did};

/// Racers per round.
const N: u32 = 8;
/// Rounds per test.
const ROUNDS: u32 = 4;

/// Runs `N` copies of `op` (given its index), released together, and returns their results in
/// index order.
async fn race<T, F, Fut>(op: F) -> Vec<Result<T, Error>>
where
    T: Send + 'static,
    F: Fn(u32) -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>> + Send + 'static,
{
    let barrier = Arc::new(Barrier::new(N as usize));
    let handles: Vec<_> = (0..N)
        .map(|i| {
            let (barrier, work) = (barrier.clone(), op(i));
            tokio::spawn(async move {
                barrier.wait().await;
                work.await
            })
        })
        .collect();
    let mut results = Vec::new();
    for handle in handles {
        results.push(handle.await.expect("racer panicked"));
    }
    results
}

/// How many succeeded, and how many were refused with 409 `CONFLICT`; any other error fails.
fn tally<T>(results: &[Result<T, Error>], what: &str) -> (usize, usize) {
    let (mut ok, mut conflicts) = (0, 0);
    for result in results {
        match result {
            Ok(_) => ok += 1,
            Err(Error::Conflict { .. }) => conflicts += 1,
            Err(other) => panic!("{what}: unexpected {other:?}"),
        }
    }
    (ok, conflicts)
}

/// A coop whose `n` members `did(0)` … `did(n-1)` all hold `role` (`did(0)` is always admin).
async fn coop_with(f: &Fixture, id: &str, n: u32, role: Role) -> CoopId {
    let coop = CoopId::parse(id).unwrap();
    let request = NewCoop { id: None, name: id.into(), coop_type: "worker".into(), description: String::new() };
    f.coops.create(&did(0), &coop, request).await.unwrap();
    for i in 1..n {
        f.coops.add_member(&coop, &did(i), role).await.unwrap();
    }
    coop
}

/// Eight concurrent closes of one approved budget proposal: one closes it and pays out, the
/// others get 409, whoever wins.
async fn concurrent_closes_pay_out_once(backend: Backend) {
    let Some(f) = Fixture::open(backend).await else { return };
    let f = Arc::new(f);
    let coop = coop_with(&f, "c1", 3, Role::Member).await;
    let treasury = treasury_account(&coop);
    // Without a key no receipt is stored, so nothing but the proposal's own state can stop a
    // second payout: odd rounds close with this service.
    let keyless = Arc::new(gateway_domain::governance::Governance::new(
        f.store.clone(),
        f.store.clone(),
        Arc::new(TrustGraph::new(vec![], 0.9, vec![])),
        Arc::new(gateway_domain::governance::MemoryReceiptKeys::unavailable("no keystore in this test")),
        Arc::new(f.clock.clone()),
    ));
    for round in 1..=ROUNDS {
        let request = gateway_domain::governance::NewProposal {
            domain_id: "coop".into(),
            title: format!("budget {round}"),
            description: String::new(),
            payload: serde_json::json!({ "type": "budget", "to": did(1).as_str(), "amount": 10 }),
            rule: None,
            voting_duration_secs: Some(60),
        };
        let proposal = f.governance.create_proposal(&coop, &did(0), request, true).await.unwrap();
        for n in 0..3 {
            f.governance.vote(&coop, &did(n), &proposal.id, "for").await.unwrap();
        }
        let results = race(|_| {
            let (f, keyless, coop, id) = (f.clone(), keyless.clone(), coop.clone(), proposal.id.clone());
            async move {
                let governance = if !round.is_multiple_of(2) { keyless.as_ref() } else { &f.governance };
                governance.close(&coop, Some(&did(0)), &id).await
            }
        })
        .await;
        assert_eq!(tally(&results, "close"), (1, N as usize - 1), "round {round}: one close, the rest 409");
        let closed = results.into_iter().find_map(Result::ok).unwrap();
        assert!(closed.effect.as_ref().is_some_and(|e| e.applied), "round {round}: {:?}", closed.effect);
        let paid = f.ledger.balance(&coop, &treasury, None).await.unwrap().balance;
        assert_eq!(paid, Amount::from_units(-10 * i64::from(round)), "round {round}: one payout per close");
        let query = HistoryQuery {
            coop: coop.clone(),
            account: Some(treasury.clone()),
            currency: None,
            page: PageRequest::default(),
        };
        let (_, payouts) = f.ledger.history(query).await.unwrap();
        assert_eq!(payouts, u64::from(round), "round {round}: one treasury transaction per close");
        f.clock.advance_secs(1);
    }
}

/// Eight admins each removed or demoted at once (by each other): exactly one change is refused
/// with 409 and exactly one admin remains.
async fn concurrent_admin_removals_keep_the_last_admin(backend: Backend) {
    let Some(f) = Fixture::open(backend).await else { return };
    let f = Arc::new(f);
    for round in 0..ROUNDS {
        let coop = coop_with(&f, &format!("c{round}"), N, Role::Admin).await;
        // Round 0: everyone removed; round 1: everyone demoted; then half and half.
        let remove = move |i: u32| match round {
            0 => true,
            1 => false,
            _ => i.is_multiple_of(2),
        };
        let results = race(|i| {
            let (f, coop) = (f.clone(), coop.clone());
            async move {
                if remove(i) {
                    f.coops.remove_member(&coop, &did(i)).await
                } else {
                    f.coops.set_role(&coop, &did(i), Role::Member).await.map(drop)
                }
            }
        })
        .await;
        assert_eq!(tally(&results, "membership change"), (N as usize - 1, 1), "round {round}: exactly one 409");
        let (members, _) = f.coops.members(&coop, PageRequest { limit: 100, offset: 0 }).await.unwrap();
        let admins: Vec<&Did> = members.iter().filter(|m| m.role == Role::Admin).map(|m| &m.did).collect();
        assert_eq!(admins.len(), 1, "round {round}: one admin remains: {members:?}");
        let refused = results.iter().position(Result::is_err).unwrap() as u32;
        assert_eq!(admins[0], &did(refused), "round {round}: the refused change's admin is the one left");
    }
}

/// A pending task of the coop, stored directly.
fn pending_task(coop: &CoopId, id: &str) -> TaskRecord {
    TaskRecord {
        task_id: id.into(),
        coop_id: coop.clone(),
        task_hash: format!("{id:0>64}"),
        status: TaskStatus::Pending,
        submitter: did(0),
        executor: None,
        code_type: "ccl".into(),
        code: String::new(),
        inputs: serde_json::json!({}),
        fuel_limit: 1000,
        priority: "normal".into(),
        submitted_at: 1_800_000_000,
        claimed_at: None,
        deadline: None,
        attempts: 0,
        finished_at: None,
        result: None,
    }
}

/// Eight executors claim one pending task at once: exactly one claim succeeds, the others get
/// 409, and the task is held by the winner.
async fn concurrent_claims_claim_once(backend: Backend) {
    let Some(f) = Fixture::open(backend).await else { return };
    let coop = coop_with(&f, "c1", 2, Role::Member).await;
    let graph = Arc::new(TrustGraph::new(vec![], 0.9, vec![]));
    let shared: Arc<dyn gateway_core::Clock> = Arc::new(f.clock.clone());
    let compute = Arc::new(Compute::new(f.store.clone(), f.store.clone(), graph, shared));
    for round in 0..ROUNDS {
        let task = pending_task(&coop, &format!("task{round}"));
        transaction(f.store.as_ref(), move |tx| Box::pin(async move { tx.insert_task(&task).await })).await.unwrap();
        let id = format!("task{round}");
        let results = race(|i| {
            let (compute, coop, id) = (compute.clone(), coop.clone(), id.clone());
            async move { compute.claim(&coop, &did(100 + i), &id).await }
        })
        .await;
        assert_eq!(tally(&results, "claim"), (1, N as usize - 1), "round {round}: one claim, the rest 409");
        let winner = results.iter().position(Result::is_ok).unwrap() as u32;
        let stored = compute.get(&coop, &id).await.unwrap();
        assert_eq!(stored.status, TaskStatus::Claimed);
        assert_eq!(stored.attempts, 1, "round {round}: claimed once");
        assert_eq!(stored.executor.as_deref(), Some(did(100 + winner).as_str()), "round {round}");
    }
}

/// Eight creations of one coop id at once: one 201, seven 409, never a 500.
async fn concurrent_creations_create_one_coop(backend: Backend) {
    let Some(f) = Fixture::open(backend).await else { return };
    let f = Arc::new(f);
    for round in 0..ROUNDS {
        let coop = CoopId::parse(&format!("race{round}")).unwrap();
        let results = race(|i| {
            let (f, coop) = (f.clone(), coop.clone());
            async move {
                let request = NewCoop {
                    id: None,
                    name: format!("by {i}"),
                    coop_type: "worker".into(),
                    description: String::new(),
                };
                f.coops.create(&did(i), &coop, request).await
            }
        })
        .await;
        assert_eq!(tally(&results, "create"), (1, N as usize - 1), "round {round}: one created, the rest 409");
        let created = results.iter().find_map(|r| r.as_ref().ok()).unwrap();
        let stored = f.coops.get(&coop).await.unwrap();
        assert_eq!(stored.created_by, created.created_by, "round {round}");
        let (members, total) = f.coops.members(&coop, PageRequest::default()).await.unwrap();
        assert_eq!(total, 1, "round {round}: only the winner's admin: {members:?}");
    }
}

/// Eight payments of 300 from one payer at once (credit limit -1000): exactly three pass the
/// floor, the others get `INSUFFICIENT_CREDIT`, and the payer ends at -900.
async fn concurrent_payments_respect_the_floor(backend: Backend) {
    let Some(f) = Fixture::open(backend).await else { return };
    let f = Arc::new(f);
    for round in 0..ROUNDS {
        let coop = coop_with(&f, &format!("c{round}"), N + 2, Role::Member).await;
        let results = race(|i| {
            let (f, coop) = (f.clone(), coop.clone());
            async move {
                let request = PaymentRequest {
                    from: did(1).to_string(),
                    to: did(2 + i).to_string(),
                    amount: Amount::from_units(300),
                    currency: None,
                    memo: None,
                    request_signature: None,
                };
                f.ledger.pay(&coop, request, None).await
            }
        })
        .await;
        let (mut ok, mut refused) = (0, 0);
        for result in &results {
            match result {
                Ok(_) => ok += 1,
                Err(Error::InsufficientCredit { .. }) => refused += 1,
                Err(other) => panic!("round {round}: unexpected {other:?}"),
            }
        }
        assert_eq!((ok, refused), (3, N - 3), "round {round}");
        let balance = f.ledger.balance(&coop, did(1).as_str(), None).await.unwrap().balance;
        assert_eq!(balance, Amount::from_units(-900), "round {round}");
    }
}

/// Eight batches from eight payers, each paying the same five payees, half of them in the
/// opposite order: every batch commits (locked item by item, crossing batches deadlocked on
/// PostgreSQL and one failed with a 500), and every payee receives every payment.
async fn crossing_batches_all_commit(backend: Backend) {
    let Some(f) = Fixture::open(backend).await else { return };
    let f = Arc::new(f);
    for round in 0..ROUNDS {
        let coop = coop_with(&f, &format!("b{round}"), N + 6, Role::Member).await;
        let results = race(|i| {
            let (f, coop) = (f.clone(), coop.clone());
            async move {
                let mut payees: Vec<u32> = (N + 1..N + 6).collect();
                if i % 2 == 1 {
                    payees.reverse();
                }
                let items = payees
                    .into_iter()
                    .map(|p| PaymentRequest {
                        from: did(1 + i).to_string(),
                        to: did(p).to_string(),
                        amount: Amount::from_units(1),
                        currency: None,
                        memo: None,
                        request_signature: None,
                    })
                    .collect();
                f.ledger.batch(&coop, items, true, None).await
            }
        })
        .await;
        for (i, result) in results.iter().enumerate() {
            let Ok(Replay::Fresh(items)) = result else { panic!("round {round}, batch {i}: {result:?}") };
            assert!(items.iter().all(|item| item.error.is_none()), "round {round}, batch {i}");
        }
        for p in N + 1..N + 6 {
            let balance = f.ledger.balance(&coop, did(p).as_str(), None).await.unwrap().balance;
            assert_eq!(balance, Amount::from_units(i64::from(N)), "round {round}, payee {p}");
        }
    }
}

macro_rules! races {
    ($($test:ident),* $(,)?) => {
        mod memory {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $test() { super::$test(crate::support::Backend::Memory).await })*
        }
        mod sqlite_file {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $test() { super::$test(crate::support::Backend::SqliteFile).await })*
        }
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)] async fn $test() { super::$test(crate::support::Backend::Postgres).await })*
        }
    };
}

races!(
    concurrent_closes_pay_out_once,
    concurrent_admin_removals_keep_the_last_admin,
    concurrent_claims_claim_once,
    concurrent_creations_create_one_coop,
    concurrent_payments_respect_the_floor,
    crossing_batches_all_commit,
);
