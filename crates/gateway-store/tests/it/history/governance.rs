//! Governance: N closes of one approved budget proposal, and delegations racing a removal.

use std::sync::Arc;

use gateway_core::{Amount, CoopId, ErrorCode, PageRequest};
use gateway_domain::governance::ProposalStatus;
use gateway_domain::governance::{Governance, NewProposal, ReceiptKeys, ReceiptSigner};
use gateway_domain::ledger::treasury_account;
use gateway_domain::trust::TrustGraph;
use rand::Rng;
use serde_json::json;

use super::checkers::*;
use super::{N, Round};
use crate::support::did;

/// Members of the coop in these scenarios.
const M: u32 = 3;

/// Receipt keys that are locked, as a gateway without `ICN_PASSPHRASE` has them: closing still
/// works and stores no receipt (so a receipt's unique key cannot mask double payouts).
#[derive(Debug)]
struct LockedKeys;

impl ReceiptKeys for LockedKeys {
    fn signer(&self, _: &CoopId, _: u32) -> Result<ReceiptSigner, &'static str> {
        Err("keystore_locked")
    }

    fn available(&self) -> bool {
        false
    }
}

/// A budget proposal in the coop's `coop` domain, approved by every member, closed by N
/// processes at once (any member may close once everyone voted): one close, one payout. The
/// fixture's governance signs receipts (keystore unlocked).
pub async fn many_closes_of_one_budget(r: &mut Round) -> Vec<String> {
    let governance = r.f.governance.clone();
    many_closes(r, governance).await
}

/// The same without a keystore: nothing but the close itself stops a second payout.
pub async fn many_closes_of_one_budget_locked(r: &mut Round) -> Vec<String> {
    let f = &r.f;
    let graph = Arc::new(TrustGraph::new(vec![], 0.9, vec![]));
    let clock: Arc<dyn gateway_core::Clock> = Arc::new(f.clock.clone());
    let governance = Governance::new(f.store.clone(), f.store.clone(), graph, Arc::new(LockedKeys), clock);
    many_closes(r, governance).await
}

async fn many_closes(r: &mut Round, governance: Governance) -> Vec<String> {
    let n = r.rng.gen_range(2..=N);
    let coop = r.f.coop(&r.id("close"), M).await;
    let units = r.rng.gen_range(1..=100);
    let request = NewProposal {
        domain_id: "coop".into(),
        title: "budget".into(),
        description: String::new(),
        payload: json!({"type": "budget", "to": did(1).to_string(), "amount": units, "currency": "hours"}),
        rule: None,
        voting_duration_secs: Some(3600),
    };
    let proposal = governance.create_proposal(&coop, &did(0), request, true).await.unwrap();
    for m in 0..M {
        governance.vote(&coop, &did(m), &proposal.id, "for").await.unwrap();
    }
    let (h, id) = (r.history.clone(), proposal.id.clone());
    r.concurrently(n, |p| {
        let (governance, h, coop, id) = (governance.clone(), h.clone(), coop.clone(), id.clone());
        async move {
            let caller = did(p as u32 % M);
            let op = governance.close(&coop, Some(&caller), &id);
            h.run(p, "close", format!("{id} by did{}", p as u32 % M), op, |c| {
                format!("{:?} effect={:?}", c.outcome, c.effect)
            })
            .await
        }
    })
    .await;
    let ops = r.history.of("close");
    let mut v = only_expected_errors(&ops, &[ErrorCode::Conflict]);
    v.extend(exactly_ok("one close per proposal", &ops, 1));
    let payouts = transactions(&r.f, &coop, Some(treasury_account(&coop))).await;
    if payouts.len() != 1 {
        v.push(format!("one payout per close: the treasury paid {} times for one proposal", payouts.len()));
    }
    let balance = r.f.ledger.balance(&coop, did(1).as_str(), None).await.unwrap().balance;
    if balance != Amount::from_units(units) {
        v.push(format!("one payout per close: the budget's payee has {balance}, expected {units}"));
    }
    let closed = r.f.governance.proposal(&coop, &proposal.id).await.unwrap();
    if closed.status != ProposalStatus::Closed {
        v.push(format!("lost write: a close was acknowledged but the proposal is {:?}", closed.status));
    }
    v.extend(zero_sum(&r.f, &coop).await);
    v.extend(gap_free_events(&r.f, &coop).await);
    v
}

/// N-1 members delegate (to random members, some to `did(N-1)`) while process 0 removes
/// `did(N-1)` from the coop: no delegation may involve a non-member afterwards, and every
/// acknowledged delegation not involving the removed member stays.
pub async fn concurrent_delegations(r: &mut Round) -> Vec<String> {
    let n = r.rng.gen_range(3..=N) as u32;
    let coop = r.f.coop(&r.id("deleg"), n).await;
    let removed = did(n - 1);
    let targets: Vec<u32> = (0..n)
        .map(|p| {
            let mut t = r.rng.gen_range(1..n);
            if t == p {
                t = n - 1;
            }
            if t == p { 0 } else { t }
        })
        .collect();
    let scopes: Vec<&str> = (0..n).map(|_| if r.rng.gen_bool(0.5) { "blanket" } else { "domain:coop" }).collect();
    let (f, h) = (r.f.clone(), r.history.clone());
    r.concurrently(n as usize - 1, |p| {
        let (f, h, coop, removed) = (f.clone(), h.clone(), coop.clone(), removed.clone());
        let (target, scope) = (targets[p], scopes[p]);
        async move {
            if p == 0 {
                let op = async { f.coops.remove_member(&coop, &removed).await.map(|()| removed.to_string()) };
                h.run(p, "remove", format!("{removed}"), op, |d| d.clone()).await
            } else {
                let op = async {
                    f.governance.delegate(&coop, &did(p as u32), &did(target), scope, None).await.map(|d| d.id)
                };
                h.run(p, "delegate", format!("did{p} -> did{target} {scope}"), op, |id| id.clone()).await
            }
        }
    })
    .await;
    let ops = r.history.of("delegate");
    let mut v = only_expected_errors(&r.history.ops(), &[ErrorCode::BadRequest]);
    let (members, _) = r.f.coops.members(&coop, PageRequest { limit: 1000, offset: 0 }).await.unwrap();
    let is_member = |d: &gateway_core::Did| members.iter().any(|m| &m.did == d);
    let mut all = Vec::new();
    for m in 0..n {
        let (given, _) = r.f.governance.delegations_of(&coop, &did(m)).await.unwrap();
        all.extend(given);
    }
    for d in &all {
        if !is_member(&d.delegator) || !is_member(&d.delegate) {
            v.push(format!(
                "delegations between members only: {} {} -> {} involves a non-member",
                d.id, d.delegator, d.delegate
            ));
        }
    }
    let ids: Vec<String> = all.iter().map(|d| d.id.clone()).collect();
    let kept: Vec<_> = ops.iter().filter(|o| targets[o.process] != n - 1).cloned().collect();
    v.extend(acknowledged_visible("delegation", &kept, &ids));
    v.extend(gap_free_events(&r.f, &coop).await);
    v
}
