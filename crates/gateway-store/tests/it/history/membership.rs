//! Coops and members: admins demoting or removing each other, and N creations of one coop id.

use gateway_core::{CoopId, ErrorCode, PageRequest, Role};
use gateway_domain::coops::NewCoop;
use rand::Rng;

use super::checkers::*;
use super::{N, Round};
use crate::support::did;

/// k admins (2–4) each demote or remove the next one at once: at least one admin must remain.
pub async fn admins_demote_each_other(r: &mut Round) -> Vec<String> {
    let k = r.rng.gen_range(2..=4u32);
    let coop = r.f.coop(&r.id("admins"), k + 1).await;
    for a in 1..k {
        r.f.coops.set_role(&coop, &did(a), Role::Admin).await.unwrap();
    }
    let removes: Vec<bool> = (0..k).map(|_| r.rng.gen_bool(0.5)).collect();
    let (f, h) = (r.f.clone(), r.history.clone());
    r.concurrently(k as usize, |p| {
        let (f, h, coop) = (f.clone(), h.clone(), coop.clone());
        let (target, remove) = (did((p as u32 + 1) % k), removes[p]);
        async move {
            if remove {
                let op = async { f.coops.remove_member(&coop, &target).await.map(|()| target.to_string()) };
                h.run(p, "remove", format!("{target}"), op, |d| d.clone()).await
            } else {
                let op = async { f.coops.set_role(&coop, &target, Role::Member).await.map(|m| m.did.to_string()) };
                h.run(p, "demote", format!("{target}"), op, |d| d.clone()).await
            }
        }
    })
    .await;
    let mut v = only_expected_errors(&r.history.ops(), &[ErrorCode::Conflict]);
    v.extend(has_admin(&r.f, &coop).await);
    let (members, _) = r.f.coops.members(&coop, PageRequest { limit: 1000, offset: 0 }).await.unwrap();
    for op in r.history.of("remove") {
        if let Some(gone) = op.ok()
            && members.iter().any(|m| m.did.as_str() == gone)
        {
            v.push(format!("lost write: removal of {gone} acknowledged to p{} but still a member", op.process));
        }
    }
    v.extend(gap_free_events(&r.f, &coop).await);
    v
}

/// N callers create the same coop id at once: one 201, the others CONFLICT (never INTERNAL).
pub async fn many_creations_of_one_coop(r: &mut Round) -> Vec<String> {
    let n = r.rng.gen_range(2..=N);
    let coop = CoopId::parse(&r.id("new")).unwrap();
    let (f, h) = (r.f.clone(), r.history.clone());
    r.concurrently(n, |p| {
        let (f, h, coop) = (f.clone(), h.clone(), coop.clone());
        async move {
            let request =
                NewCoop { id: None, name: format!("by {p}"), coop_type: "worker".into(), description: String::new() };
            let creator = did(p as u32);
            let op = f.coops.create(&creator, &coop, request);
            h.run(p, "create", format!("{coop} by did{p}"), op, |c| c.created_by.to_string()).await
        }
    })
    .await;
    let ops = r.history.of("create");
    let mut v = only_expected_errors(&ops, &[ErrorCode::Conflict]);
    v.extend(exactly_ok("one coop per id", &ops, 1));
    match r.f.coops.get(&coop).await {
        Ok(record) => {
            if let Some(winner) = ops.iter().find(|o| o.ok().is_some())
                && record.created_by != did(winner.process as u32)
            {
                v.push(format!(
                    "creator: coop created by {} but p{} was told it created it",
                    record.created_by, winner.process
                ));
            }
            if record.member_count != 1 {
                v.push(format!("creator: the new coop has {} members, expected 1 (its creator)", record.member_count));
            }
        }
        Err(e) => v.push(format!("lost write: the coop does not exist after the creations: {e}")),
    }
    v.extend(gap_free_events(&r.f, &coop).await);
    v
}
