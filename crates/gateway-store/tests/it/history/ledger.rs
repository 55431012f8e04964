//! Payments: one payer near its credit floor, and one Idempotency-Key used by N payments at once.

use gateway_core::{Amount, CoopId, ErrorCode};
use gateway_domain::ledger::{Idempotency, PaymentRequest, Replay, Stored};
use rand::Rng;

use super::checkers::*;
use super::{N, Round};
use crate::support::did;

fn payment(from: u32, to: u32, amount: Amount) -> PaymentRequest {
    PaymentRequest {
        from: did(from).to_string(),
        to: did(to).to_string(),
        amount,
        currency: None,
        memo: None,
        request_signature: None,
    }
}

/// n payments from `did(0)` (balance 0, floor -1000) of 150–400 units each, to distinct payees:
/// together they exceed the floor, so some must be refused and the rest must fit.
pub async fn payments_near_the_floor(r: &mut Round) -> Vec<String> {
    let n = r.rng.gen_range(2..=N);
    let coop = r.f.coop(&r.id("pay"), n as u32 + 1).await;
    let amounts: Vec<Amount> = (0..n).map(|_| Amount::from_units(r.rng.gen_range(150..=400))).collect();
    let (f, h) = (r.f.clone(), r.history.clone());
    r.concurrently(n, |p| {
        let (f, h, coop, amount) = (f.clone(), h.clone(), coop.clone(), amounts[p]);
        async move {
            let args = format!("did0 -> did{} {amount}", p + 1);
            h.run(p, "pay", args, f.ledger.pay(&coop, payment(0, p as u32 + 1, amount), None), |t| match t {
                Replay::Fresh(t) => t.id.clone(),
                other => format!("{other:?}"),
            })
            .await
        }
    })
    .await;
    let ops = r.history.of("pay");
    let mut v = only_expected_errors(&ops, &[ErrorCode::InsufficientCredit]);
    let members: Vec<_> = (0..=n as u32).map(did).collect();
    v.extend(zero_sum(&r.f, &coop).await);
    v.extend(above_floor(&r.f, &coop, &members, Amount::from_units(-1000)).await);
    let txs = transactions(&r.f, &coop, None).await;
    let ids: Vec<String> = txs.iter().map(|t| t.id.clone()).collect();
    v.extend(acknowledged_visible("payment", &ops, &ids));
    let acked: i64 = ops.iter().filter(|o| o.ok().is_some()).map(|o| amounts[o.process].micros()).sum();
    let balance = r.f.ledger.balance(&coop, did(0).as_str(), None).await.unwrap().balance;
    if balance.micros() != -acked {
        v.push(format!(
            "lost write: payer balance {balance} is not minus the acknowledged payments ({})",
            Amount::from_micros(acked)
        ));
    }
    let acked_count = ops.iter().filter(|o| o.ok().is_some()).count();
    if txs.len() != acked_count {
        v.push(format!(
            "one record per payment: {} transactions stored for {acked_count} acknowledged payments",
            txs.len()
        ));
    }
    v.extend(gap_free_events(&r.f, &coop).await);
    v
}

/// N payments with one Idempotency-Key and one body: one record, every answer the same.
pub async fn one_key_many_payments(r: &mut Round) -> Vec<String> {
    let n = r.rng.gen_range(2..=N);
    let coop: CoopId = r.f.coop(&r.id("idem"), 2).await;
    let amount = Amount::from_units(r.rng.gen_range(1..=50));
    let key = r.id("key");
    let (f, h) = (r.f.clone(), r.history.clone());
    r.concurrently(n, |p| {
        let (f, h, coop, key) = (f.clone(), h.clone(), coop.clone(), key.clone());
        async move {
            let idempotency = Idempotency { key: key.clone(), request_hash: "same-body".into() };
            let op = f.ledger.pay(&coop, payment(0, 1, amount), Some(idempotency));
            h.run(p, "pay_idempotent", format!("key={key} did0 -> did1 {amount}"), op, |s| match s {
                Replay::Fresh(t) => format!("ok {}", t.id),
                Replay::Replayed(Stored::Decided(Ok(t))) => format!("ok {} (replayed)", t.id),
                Replay::Replayed(other) => format!("{other:?} (replayed)"),
            })
            .await
        }
    })
    .await;
    let ops = r.history.of("pay_idempotent");
    let mut v = only_expected_errors(&ops, &[ErrorCode::Conflict]);
    let fresh: Vec<&super::recorder::Op> =
        ops.iter().filter(|o| o.ok().is_some_and(|s| !s.ends_with("(replayed)"))).collect();
    if fresh.len() != 1 {
        v.push(format!(
            "one record per idempotency key: {} of {n} requests with key {key} were answered as new (not replayed), expected 1",
            fresh.len()
        ));
    }
    // Real-time order: a request invoked after the first answer completed must replay it (409 is
    // only for requests racing the one in flight).
    if let Some(first) = fresh.first() {
        for late in ops.iter().filter(|o| o.invoked > first.completed && o.code().is_some()) {
            v.push(format!(
                "replay after the answer: p{} started after p{} had its answer, yet got {:?} instead of the replay",
                late.process, first.process, late.outcome
            ));
        }
    }
    let txs = transactions(&r.f, &coop, None).await;
    if txs.len() != 1 {
        v.push(format!("one record per idempotency key: {} transactions created for one key, expected 1", txs.len()));
    }
    let bodies: std::collections::BTreeSet<String> =
        ops.iter().filter_map(|o| o.ok()).map(|s| s.trim_end_matches(" (replayed)").to_owned()).collect();
    if bodies.len() > 1 {
        v.push(format!("same answer per idempotency key: different answers: {bodies:?}"));
    }
    let balance = r.f.ledger.balance(&coop, did(0).as_str(), None).await.unwrap().balance;
    if balance.micros() != -amount.micros() {
        v.push(format!("one record per idempotency key: payer balance {balance}, expected -{amount} (one payment)"));
    }
    v.extend(zero_sum(&r.f, &coop).await);
    v.extend(gap_free_events(&r.f, &coop).await);
    v
}

/// N atomic batches at once, each of 1–4 random payments among five members (floor -1000,
/// amounts of 100–700 units, so some batches must be refused): every batch is applied whole or
/// not at all, each member's balance is exactly what the acknowledged batches moved, the coop
/// stays zero-sum and nobody ends below the floor.
pub async fn random_atomic_batches(r: &mut Round) -> Vec<String> {
    const MEMBERS: u32 = 5;
    let n = r.rng.gen_range(2..=N);
    let coop = r.f.coop(&r.id("batches"), MEMBERS).await;
    let batches: Vec<Vec<(u32, u32, Amount)>> = (0..n)
        .map(|_| {
            (0..r.rng.gen_range(1..=4))
                .map(|_| {
                    let from = r.rng.gen_range(0..MEMBERS);
                    let to = (from + r.rng.gen_range(1..MEMBERS)) % MEMBERS;
                    (from, to, Amount::from_units(r.rng.gen_range(100..=700)))
                })
                .collect()
        })
        .collect();
    let (f, h) = (r.f.clone(), r.history.clone());
    r.concurrently(n, |p| {
        let (f, h, coop, items) = (f.clone(), h.clone(), coop.clone(), batches[p].clone());
        async move {
            let args = items.iter().map(|(a, b, m)| format!("did{a} -> did{b} {m}")).collect::<Vec<_>>().join(", ");
            let requests = items.iter().map(|&(from, to, amount)| payment(from, to, amount)).collect();
            h.run(p, "batch", args, f.ledger.batch(&coop, requests, true, None), |replay| match replay {
                Replay::Fresh(results) => results
                    .iter()
                    .map(|item| item.record.as_ref().map_or_else(|| "item refused".to_owned(), |t| t.id.clone()))
                    .collect::<Vec<_>>()
                    .join(","),
                other => format!("{other:?}"),
            })
            .await
        }
    })
    .await;
    let ops = r.history.of("batch");
    let mut v = only_expected_errors(&ops, &[ErrorCode::Conflict]);
    let members: Vec<_> = (0..MEMBERS).map(did).collect();
    v.extend(zero_sum(&r.f, &coop).await);
    v.extend(above_floor(&r.f, &coop, &members, Amount::from_units(-1000)).await);
    let mut expected = vec![0i64; MEMBERS as usize];
    let mut acked_items = 0;
    for op in ops.iter().filter(|o| o.ok().is_some()) {
        if op.ok().is_some_and(|ids| ids.contains("item refused")) {
            v.push(format!("partial atomic batch: process {} acknowledged with a refused item", op.process));
        }
        for &(from, to, amount) in &batches[op.process] {
            expected[from as usize] -= amount.micros();
            expected[to as usize] += amount.micros();
            acked_items += 1;
        }
    }
    for (m, want) in expected.iter().enumerate() {
        let balance = r.f.ledger.balance(&coop, did(m as u32).as_str(), None).await.unwrap().balance;
        if balance.micros() != *want {
            v.push(format!(
                "batch not whole: did{m} holds {balance}, the acknowledged batches moved {}",
                Amount::from_micros(*want)
            ));
        }
    }
    let stored = transactions(&r.f, &coop, None).await.len();
    if stored != acked_items {
        v.push(format!("one record per payment: {stored} stored for {acked_items} payments in acknowledged batches"));
    }
    v.extend(gap_free_events(&r.f, &coop).await);
    v
}
