//! Compute: N executors claim one task at once; one of them gets it.

use std::collections::BTreeMap;
use std::sync::Arc;

use gateway_core::ErrorCode;
use gateway_domain::tasks::{Compute, Submission};
use gateway_domain::trust::TrustGraph;
use rand::Rng;

use super::checkers::*;
use super::{N, Round};
use crate::support::did;

const CONTRACT: &str = r#"{"name": "t", "participants": [], "currency": "hours", "state_vars": {},
  "rules": [{"name": "r", "params": [], "requires": [], "body": [{"Return": 1}]}], "triggers": []}"#;

/// The compute service over the round's store, every test DID trusted enough to submit and claim.
fn compute(r: &Round) -> Compute {
    let anchors = (0..=N as u32).map(did).collect();
    let graph = Arc::new(TrustGraph::new(anchors, 0.0, vec![]));
    let store = r.f.store.clone();
    Compute::new(store.clone(), store, graph, Arc::new(r.f.clock.clone()))
}

pub async fn many_executors_claim_one_task(r: &mut Round) -> Vec<String> {
    let n = r.rng.gen_range(2..=N);
    let coop = r.f.coop(&r.id("task"), 1).await;
    let compute = compute(r);
    let submission = Submission {
        code_type: "ccl".into(),
        code: CONTRACT.into(),
        inputs: BTreeMap::new(),
        fuel_limit: 1000,
        priority: None,
    };
    let task = compute.submit(&coop, &did(0), submission).await.unwrap();
    let h = r.history.clone();
    r.concurrently(n, |p| {
        let (compute, h, coop, id) = (compute.clone(), h.clone(), coop.clone(), task.task_id.clone());
        async move {
            let executor = did(p as u32 + 1);
            let op = compute.claim(&coop, &executor, &id);
            h.run(p, "claim", format!("{id} by {executor}"), op, |t| {
                format!("{:?} executor={:?}", t.status, t.executor)
            })
            .await
        }
    })
    .await;
    let ops = r.history.of("claim");
    let mut v = only_expected_errors(&ops, &[ErrorCode::Conflict]);
    v.extend(exactly_ok("one executor per task", &ops, 1));
    let stored = compute.get(&coop, &task.task_id).await.unwrap();
    let winners: Vec<String> =
        ops.iter().filter(|o| o.ok().is_some()).map(|o| did(o.process as u32 + 1).to_string()).collect();
    if winners.len() == 1 && stored.executor.as_deref() != Some(winners[0].as_str()) {
        v.push(format!(
            "one executor per task: a process was told it claimed the task as {}, but its executor is {:?}",
            winners[0], stored.executor
        ));
    }
    if stored.attempts != 1 {
        v.push(format!("one executor per task: one claim, but the task counts {} attempts", stored.attempts));
    }
    v.extend(gap_free_events(&r.f, &coop).await);
    v
}
