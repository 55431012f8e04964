//! Checkers: each returns the violations it found (empty when the rule holds), so a round reports
//! every broken rule at once.

use gateway_core::{Amount, CoopId, Did, ErrorCode, PageRequest, Role};
use gateway_domain::ports::{EventReads, HistoryQuery, TransactionRecord};

use super::recorder::Op;
use crate::support::Fixture;

/// Every operation ended ok or with one of `allowed` codes; never INTERNAL_ERROR or anything else.
pub fn only_expected_errors(ops: &[Op], allowed: &[ErrorCode]) -> Vec<String> {
    ops.iter()
        .filter_map(|op| {
            let code = op.code()?;
            (!allowed.contains(&code)).then(|| {
                format!(
                    "unexpected error {} -> {}: p{} {} {:?}; allowed {:?}",
                    op.kind,
                    code.as_str(),
                    op.process,
                    op.args,
                    op.outcome,
                    allowed
                )
            })
        })
        .collect()
}

/// Exactly `expected` operations of `ops` succeeded.
pub fn exactly_ok(what: &str, ops: &[Op], expected: usize) -> Vec<String> {
    let ok: Vec<String> = ops.iter().filter(|o| o.ok().is_some()).map(|o| format!("p{}", o.process)).collect();
    if ok.len() == expected {
        vec![]
    } else {
        vec![format!("{what}: {} of {} succeeded ({}), expected {expected}", ok.len(), ops.len(), ok.join(", "))]
    }
}

/// Sum of balances is 0 per currency in `coop`.
pub async fn zero_sum(f: &Fixture, coop: &CoopId) -> Vec<String> {
    f.ledger
        .balance_sums()
        .await
        .unwrap()
        .into_iter()
        .filter(|(c, _, sum)| c == coop && *sum != Amount::ZERO)
        .map(|(c, currency, sum)| format!("zero-sum broken: {c}/{currency} sums to {sum}"))
        .collect()
}

/// No member's balance is below `floor`.
pub async fn above_floor(f: &Fixture, coop: &CoopId, members: &[Did], floor: Amount) -> Vec<String> {
    let mut out = Vec::new();
    for did in members {
        let balance = f.ledger.balance(coop, did.as_str(), None).await.unwrap().balance;
        if balance < floor {
            out.push(format!("credit floor broken: {did} has {balance} < {floor}"));
        }
    }
    out
}

/// Every transaction of the coop (all pages), newest first.
pub async fn transactions(f: &Fixture, coop: &CoopId, account: Option<String>) -> Vec<TransactionRecord> {
    let mut all = Vec::new();
    loop {
        let page = PageRequest { limit: 100, offset: all.len() as u64 };
        let query = HistoryQuery { coop: coop.clone(), account: account.clone(), currency: None, page };
        let (items, total) = f.ledger.history(query).await.unwrap();
        let done = items.is_empty();
        all.extend(items);
        if done || all.len() as u64 >= total {
            return all;
        }
    }
}

/// The coop's events are numbered 1..=n without gaps or repeats, and n is its current seq.
pub async fn gap_free_events(f: &Fixture, coop: &CoopId) -> Vec<String> {
    let events = f.store.events_after(coop, 0, 100_000).await.unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    let current = f.store.current_seq(coop).await.unwrap();
    let expected: Vec<u64> = (1..=seqs.len() as u64).collect();
    let mut out = Vec::new();
    if seqs != expected {
        let bad: Vec<String> = seqs
            .iter()
            .enumerate()
            .filter(|(i, s)| **s != *i as u64 + 1)
            .take(5)
            .map(|(i, s)| format!("#{} has seq {s}", i + 1))
            .collect();
        out.push(format!("gap-free events: {coop} not numbered 1..={}: {}", seqs.len(), bad.join(", ")));
    }
    if current != seqs.len() as u64 {
        out.push(format!("gap-free events: current_seq of {coop} is {current} but {} events are stored", seqs.len()));
    }
    out
}

/// At least one member of the coop is an admin.
pub async fn has_admin(f: &Fixture, coop: &CoopId) -> Vec<String> {
    let (members, _) = f.coops.members(coop, PageRequest { limit: 1000, offset: 0 }).await.unwrap();
    if members.iter().any(|m| m.role == Role::Admin) {
        vec![]
    } else {
        let roles: Vec<String> = members.iter().map(|m| format!("{}={:?}", m.did, m.role)).collect();
        vec![format!("at least one admin: none left in {coop} ({})", roles.join(", "))]
    }
}

/// Every acknowledged write (ok op, its value an id) is among `visible`: no lost write.
pub fn acknowledged_visible(what: &str, ops: &[Op], visible: &[String]) -> Vec<String> {
    ops.iter()
        .filter_map(|op| op.ok().map(|id| (op, id)))
        .filter(|(_, id)| !visible.iter().any(|v| v == id))
        .map(|(op, id)| format!("lost write: {what} {id} acknowledged to p{} is not in the final state", op.process))
        .collect()
}
