//! Two gateways on one PostgreSQL database (runs when `GATEWAY_TEST_POSTGRES_URL` is set; fails
//! loudly if it is set and unreachable), each a full [`gatewayd::serve`] with its own store
//! connections, limiter and caches, served in this process: a WebSocket client connected to
//! replica A receives, in order and without gaps, the events written through replica B; and
//! concurrent requests split across the two replicas keep the interface's concurrency rules
//! (docs/INTERFACE.md §15).

mod support;

use std::time::Duration;

use futures_util::SinkExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use support::{InProcess as Gateway, json_request, login, next_frame, serve_in_process, signing_key, try_request};

/// Two gateways on a fresh schema of the test database; `None` when the variable is unset.
async fn two_replicas(name: &str) -> Option<(Gateway, Gateway)> {
    let store = gateway_store::testing::fresh_postgres_schema(name).await?;
    let flags = ["--open-enrollment", "true", "--trust-default", "0.9"];
    let a = serve_in_process(&store, &flags).await;
    let b = serve_in_process(&store, &flags).await;
    Some((a, b))
}

/// N payments with one Idempotency-Key and one body, split across the two replicas and released
/// together: one payment is recorded, every 201 carries its id, the others replay it or get 409
/// while it is in flight, never 5xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_idempotency_key_across_two_replicas_creates_one_record() {
    const N: usize = 8;
    let Some((a, b)) = two_replicas("replicas_idem").await else { return };
    let scopes = ["coop:read", "coop:write", "ledger:read", "ledger:write"];
    let token_a = login(&a.api, 1, "idem", &scopes).await;
    let token_b = login(&b.api, 1, "idem", &scopes).await;
    let (status, body) =
        json_request(&a.api, "POST", "/v1/coops", Some(json!({ "name": "I", "coop_type": "worker" })), Some(&token_a))
            .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = json_request(
        &a.api,
        "POST",
        "/v1/coops/idem/members",
        Some(json!({ "did": signing_key(2).1 })),
        Some(&token_a),
    )
    .await;
    assert_eq!(status, 201, "{body}");

    let pay = json!({ "from": signing_key(1).1, "to": signing_key(2).1, "amount": 7 });
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(N));
    let tasks: Vec<_> = (0..N)
        .map(|p| {
            let (api, token) =
                if p % 2 == 0 { (a.api.clone(), token_a.clone()) } else { (b.api.clone(), token_b.clone()) };
            let (barrier, pay) = (barrier.clone(), pay.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let auth = format!("Bearer {token}");
                let headers = [("authorization", auth.as_str()), ("idempotency-key", "one-key")];
                let answer = try_request(&api, "POST", "/v1/ledger/idem/payment", Some(pay), &headers).await;
                (p, answer.expect("the replica answers"))
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    let mut ids = std::collections::BTreeSet::new();
    let mut summary = Vec::new();
    for (p, (status, body)) in &answers {
        let replica = if p % 2 == 0 { "A" } else { "B" };
        assert!(matches!(status, 201 | 409), "p{p} on replica {replica}: {status} {body}");
        let body: Value = serde_json::from_str(body).unwrap_or(Value::Null);
        let id = body["id"].as_str().unwrap_or("-").to_owned();
        summary.push(format!("p{p}@{replica} {status} {id}"));
        if *status == 201 {
            ids.insert(id);
        }
    }
    let (status, history) = json_request(&a.api, "GET", "/v1/ledger/idem/history", None, Some(&token_a)).await;
    assert_eq!(status, 200, "{history}");
    let recorded = history["transactions"].as_array().unwrap().len();
    assert!(
        ids.len() == 1 && recorded == 1,
        "one key, one record: {recorded} transactions recorded, {} distinct ids answered: {}",
        ids.len(),
        summary.join(", ")
    );
    drop((a, b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_replica_a_sees_events_written_through_replica_b() {
    let Some((a, b)) = two_replicas("replicas").await else { return };

    let scopes = ["coop:read", "coop:write", "ledger:read", "ledger:write"];
    let admin_a = login(&a.api, 1, "rep", &scopes).await;
    let (status, body) =
        json_request(&a.api, "POST", "/v1/coops", Some(json!({ "name": "R", "coop_type": "worker" })), Some(&admin_a))
            .await;
    assert_eq!(status, 201, "{body}");
    json_request(&a.api, "POST", "/v1/coops/rep/members", Some(json!({ "did": signing_key(2).1 })), Some(&admin_a))
        .await;

    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/v1/ws/rep", a.api)).await.unwrap();
    ws.send(Message::text(json!({ "type": "Auth", "token": admin_a }).to_string())).await.unwrap();
    let ok = next_frame(&mut ws).await;
    assert_eq!(ok["type"], "AuthOk", "{ok}");
    let start = ok["current_seq"].as_u64().unwrap();

    let admin_b = login(&b.api, 1, "rep", &scopes).await;
    for n in 0..5 {
        let pay = json!({ "from": signing_key(1).1, "to": signing_key(2).1, "amount": 1 + n });
        let (status, body) = json_request(&b.api, "POST", "/v1/ledger/rep/payment", Some(pay), Some(&admin_b)).await;
        assert_eq!(status, 201, "{body}");
    }
    for n in 0..5u64 {
        let frame = next_frame(&mut ws).await;
        assert_eq!(frame["type"], "Event", "{frame}");
        assert_eq!(frame["seq"].as_u64(), Some(start + 1 + n), "in order, no gap: {frame}");
        assert_eq!(frame["event"]["type"], "PaymentCreated");
        assert_eq!(frame["event"]["data"]["amount"], json!(1 + n));
    }
    drop((a, b));
}

/// Sends one request per `(replica, method, path, body, token)` behind a barrier, so both
/// replicas handle them at once; returns `(index, status, body)` for each, in order.
async fn race(calls: Vec<(String, &'static str, String, Value, String)>) -> Vec<(usize, u16, Value)> {
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(calls.len()));
    let tasks: Vec<_> = calls
        .into_iter()
        .enumerate()
        .map(|(i, (api, method, path, body, token))| {
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                let auth = format!("Bearer {token}");
                let answer = try_request(&api, method, &path, Some(body), &[("authorization", auth.as_str())]).await;
                let (status, text) = answer.expect("the replica answers");
                (i, status, serde_json::from_str(&text).unwrap_or(Value::Null))
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    answers
}

/// Creates coop `coop` through replica A with founder seed 1 and members `seeds`; returns the
/// founder's token on each replica.
async fn coop_on(a: &Gateway, b: &Gateway, coop: &str, seeds: &[u8], scopes: &[&str]) -> (String, String) {
    let token_a = login(&a.api, 1, coop, scopes).await;
    let (status, body) =
        json_request(&a.api, "POST", "/v1/coops", Some(json!({ "name": coop, "coop_type": "worker" })), Some(&token_a))
            .await;
    assert_eq!(status, 201, "{body}");
    for seed in seeds {
        let path = format!("/v1/coops/{coop}/members");
        let (status, body) =
            json_request(&a.api, "POST", &path, Some(json!({ "did": signing_key(*seed).1 })), Some(&token_a)).await;
        assert_eq!(status, 201, "{body}");
    }
    (token_a, login(&b.api, 1, coop, scopes).await)
}

/// Four DIDs create one coop id at once, two through each replica: one 201, three 409, no 5xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_coop_id_created_at_once_on_two_replicas_is_created_once() {
    let Some((a, b)) = two_replicas("replicas_create").await else { return };
    let mut calls = Vec::new();
    for seed in 1..=4u8 {
        let api = if seed % 2 == 0 { a.api.clone() } else { b.api.clone() };
        let token = login(&api, seed, "same", &["coop:read", "coop:write"]).await;
        calls.push((api, "POST", "/v1/coops".to_owned(), json!({ "name": "Same", "coop_type": "worker" }), token));
    }
    let answers = race(calls).await;
    let created: Vec<_> = answers.iter().filter(|(_, status, _)| *status == 201).collect();
    assert_eq!(created.len(), 1, "{answers:?}");
    for (i, status, body) in &answers {
        assert!(*status == 201 || (*status == 409 && body["code"] == "CONFLICT"), "call {i}: {status} {body}");
    }
    drop((a, b));
}

/// An approved budget proposal closed 8 times at once through both replicas pays out once: one
/// close answers 200, the rest 409, and the payee holds exactly the amount.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_closes_on_two_replicas_pay_a_budget_once() {
    const N: usize = 8;
    let Some((a, b)) = two_replicas("replicas_close").await else { return };
    let scopes = ["coop:read", "coop:write", "ledger:read", "gov:read", "gov:write"];
    let (founder_a, founder_b) = coop_on(&a, &b, "close", &[2], &scopes).await;
    let member = login(&a.api, 2, "close", &scopes).await;
    let payee = signing_key(2).1;
    let proposal = json!({
        "domain_id": "coop", "title": "Pay", "description": "once",
        "payload": { "type": "budget", "to": payee, "amount": 40 }, "voting_duration_secs": 3600
    });
    let (status, created) = json_request(&a.api, "POST", "/v1/gov/proposals", Some(proposal), Some(&founder_a)).await;
    assert_eq!(status, 201, "{created}");
    let id = created["proposal_id"].as_str().unwrap().to_owned();
    let (status, opened) =
        json_request(&b.api, "POST", &format!("/v1/gov/proposals/{id}/open"), Some(json!({})), Some(&founder_b)).await;
    assert_eq!(status, 200, "{opened}");
    for (api, token) in [(&a.api, &founder_a), (&b.api, &member)] {
        let path = format!("/v1/gov/proposals/{id}/vote");
        let (status, body) = json_request(api, "POST", &path, Some(json!({ "choice": "for" })), Some(token)).await;
        assert_eq!(status, 200, "{body}");
    }
    let calls = (0..N)
        .map(|i| {
            let (api, token) = if i % 2 == 0 { (&a.api, &founder_a) } else { (&b.api, &founder_b) };
            (api.clone(), "POST", format!("/v1/gov/proposals/{id}/close"), json!({}), token.clone())
        })
        .collect();
    let answers = race(calls).await;
    let closed: Vec<_> = answers.iter().filter(|(_, status, _)| *status == 200).collect();
    assert_eq!(closed.len(), 1, "one close wins: {answers:?}");
    assert_eq!(closed[0].2["outcome"], "Approved", "{answers:?}");
    assert_eq!(closed[0].2["effect"], json!({ "applied": true, "error": null }), "{answers:?}");
    for (i, status, body) in &answers {
        assert!(*status == 200 || (*status == 409 && body["code"] == "CONFLICT"), "close {i}: {status} {body}");
    }
    let path = format!("/v1/ledger/close/balance/{payee}");
    let (status, balance) = json_request(&b.api, "GET", &path, None, Some(&founder_b)).await;
    assert_eq!(status, 200, "{balance}");
    assert_eq!(balance["balance"], json!(40), "paid exactly once");
    drop((a, b));
}

/// Two admins demote each other at the same moment through different replicas, round after
/// round: the coop always keeps an admin, and the loser is told 409, never 5xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admins_demoting_each_other_on_two_replicas_leave_an_admin() {
    let Some((a, b)) = two_replicas("replicas_admins").await else { return };
    let scopes = ["coop:read", "coop:write"];
    let (founder_a, _) = coop_on(&a, &b, "adm", &[], &scopes).await;
    let (one, two) = (signing_key(1).1, signing_key(2).1);
    let (status, body) = json_request(
        &a.api,
        "POST",
        "/v1/coops/adm/members",
        Some(json!({ "did": two, "role": "admin" })),
        Some(&founder_a),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let admin_one = login(&a.api, 1, "adm", &scopes).await;
    let admin_two = login(&b.api, 2, "adm", &scopes).await;
    for round in 0..6 {
        let demote = json!({ "role": "member" });
        let answers = race(vec![
            (a.api.clone(), "PUT", format!("/v1/coops/adm/members/{two}/role"), demote.clone(), admin_one.clone()),
            (b.api.clone(), "PUT", format!("/v1/coops/adm/members/{one}/role"), demote, admin_two.clone()),
        ])
        .await;
        // Both are admins on both replicas when the round starts (each replica's membership
        // cache has expired, see below), so both reach the last-admin guard: one wins (200),
        // the other is refused by it (409).
        let mut statuses: Vec<u16> = answers.iter().map(|(_, status, _)| *status).collect();
        statuses.sort_unstable();
        assert_eq!(statuses, [200, 409], "round {round}: {answers:?}");
        let (status, members) = json_request(&a.api, "GET", "/v1/coops/adm/members", None, Some(&admin_one)).await;
        assert_eq!(status, 200, "{members}");
        let admins: Vec<_> =
            members["members"].as_array().unwrap().iter().filter(|m| m["role"] == "admin").cloned().collect();
        assert_eq!(admins.len(), 1, "round {round}: exactly one demotion wins: {answers:?} {members}");
        // The survivor promotes the other back for the next round.
        let (survivor, other, api) =
            if admins[0]["did"] == json!(one) { (&admin_one, &two, &a.api) } else { (&admin_two, &one, &b.api) };
        let path = format!("/v1/coops/adm/members/{other}/role");
        let (status, body) = json_request(api, "PUT", &path, Some(json!({ "role": "admin" })), Some(survivor)).await;
        assert_eq!(status, 200, "{body}");
        // A replica forgets a role it cached within a second (`membership_ttl`); the other
        // replica's cache still holds the demotion until then.
        tokio::time::sleep(Duration::from_millis(1_200)).await;
    }
    drop((a, b));
}

/// Two executors claim each task at the same moment through different replicas: one claim wins,
/// the other is told 409, and the task names the winner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executors_racing_on_two_replicas_claim_each_task_once() {
    let Some(store) = gateway_store::testing::fresh_postgres_schema("replicas_claim").await else { return };
    let flags = ["--open-enrollment", "true", "--trust-default", "0.9", "--builtin-executor", "false"];
    let (a, b) = (serve_in_process(&store, &flags).await, serve_in_process(&store, &flags).await);
    let scopes = ["coop:read", "coop:write", "compute:submit"];
    let (founder_a, _) = coop_on(&a, &b, "claim", &[3, 4], &scopes).await;
    let executor_a = login(&a.api, 3, "claim", &["compute:execute"]).await;
    let executor_b = login(&b.api, 4, "claim", &["compute:execute"]).await;
    let contract: Value = serde_json::from_str(include_str!("../../../tests/fixtures/kitchen.ccl.json")).unwrap();
    for round in 0..6 {
        let task = json!({ "code_type": "ccl", "code": contract.to_string(), "inputs": { "hours": "1" }, "fuel_limit": 1000, "priority": "normal" });
        let (status, submitted) =
            json_request(&a.api, "POST", "/v1/compute/submit", Some(task), Some(&founder_a)).await;
        assert_eq!(status, 201, "{submitted}");
        let id = submitted["task_id"].as_str().unwrap().to_owned();
        let path = format!("/v1/compute/tasks/{id}/claim");
        let answers = race(vec![
            (a.api.clone(), "POST", path.clone(), json!({}), executor_a.clone()),
            (b.api.clone(), "POST", path, json!({}), executor_b.clone()),
        ])
        .await;
        let won: Vec<_> = answers.iter().filter(|(_, status, _)| *status == 200).collect();
        assert_eq!(won.len(), 1, "round {round}: {answers:?}");
        let lost: Vec<_> = answers.iter().filter(|(_, status, _)| *status != 200).collect();
        assert_eq!(lost[0].1, 409, "round {round}: {answers:?}");
        let (status, task) =
            json_request(&a.api, "GET", &format!("/v1/compute/tasks/{id}"), None, Some(&founder_a)).await;
        assert_eq!(status, 200, "{task}");
        assert_eq!(task["executor"], won[0].2["executor"], "round {round}: the task names the winner");
    }
    drop((a, b));
}

/// A trust edge set and then revoked through replica A counts, and then stops counting, on
/// replica B within a second (INTERFACE.md §10: state a replica caches follows writes made through
/// another replica within 1 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trust_change_on_one_replica_counts_on_the_other_within_a_second() {
    let Some(store) = gateway_store::testing::fresh_postgres_schema("replicas_trust").await else { return };
    let anchor = signing_key(1).1;
    let flags = ["--open-enrollment", "true", "--trust-anchor", anchor.as_str()];
    let (a, b) = (serve_in_process(&store, &flags).await, serve_in_process(&store, &flags).await);
    let scopes = ["coop:read", "coop:write", "trust:read", "trust:write"];
    let (token_a, token_b) = coop_on(&a, &b, "trusted", &[2], &scopes).await;
    let member = signing_key(2).1;
    let score_on_b = || async {
        let (status, body) =
            json_request(&b.api, "GET", &format!("/v1/trust/{member}/score"), None, Some(&token_b)).await;
        assert_eq!(status, 200, "{body}");
        body["score"].as_f64().unwrap()
    };
    // Wait until both replicas listen (their first reload happens when LISTEN starts).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(score_on_b().await, 0.0, "no edge yet");

    let edge = json!({ "target_did": member, "score": 0.8 });
    let (status, body) = json_request(&a.api, "POST", "/v1/trust/edges", Some(edge), Some(&token_a)).await;
    assert!(status == 200 || status == 201, "{status} {body}");
    let set_at = std::time::Instant::now();
    while score_on_b().await != 0.8 {
        assert!(set_at.elapsed() < Duration::from_secs(1), "replica B still ignores the edge after 1 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let path = format!("/v1/trust/edges/{member}");
    let (status, body) = json_request(&a.api, "DELETE", &path, None, Some(&token_a)).await;
    assert!((200..300).contains(&status), "{status} {body}");
    let revoked_at = std::time::Instant::now();
    while score_on_b().await != 0.0 {
        assert!(revoked_at.elapsed() < Duration::from_secs(1), "replica B still counts a revoked edge after 1 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Two replicas checkpointing one coop's log at once (INTERFACE.md §12): payments go through both,
/// both replicas' checkpointers run, and every checkpoint either replica publishes verifies with
/// the coop's key and is consistent with every other one: one history, never a fork.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_sign_one_history() {
    let Some(store) = gateway_store::testing::fresh_postgres_schema("replicas_log").await else { return };
    let dir = tempfile::tempdir().unwrap();
    let (keystore, passphrase) = support::keystore_in(dir.path(), "two replicas, one key");
    let a = support::serve_with_keystore(&store, &keystore, &passphrase, &[]).await;
    let b = support::serve_with_keystore(&store, &keystore, &passphrase, &[]).await;
    let scopes = ["coop:read", "coop:write", "ledger:read", "ledger:write"];
    let token_a = login(&a.api, 1, "forkless", &scopes).await;
    let token_b = login(&b.api, 1, "forkless", &scopes).await;
    support::coop_with_member_two(&a.api, &token_a, "forkless").await;

    let mut seen = std::collections::BTreeMap::<u64, String>::new();
    for i in 0..40u32 {
        let (api, token) = if i % 2 == 0 { (&a.api, &token_a) } else { (&b.api, &token_b) };
        let pay = json!({ "from": signing_key(1).1, "to": signing_key(2).1, "amount": 1 });
        let (status, body) = json_request(api, "POST", "/v1/ledger/forkless/payment", Some(pay), Some(token)).await;
        assert_eq!(status, 201, "{body}");
        observe(&a.api, &mut seen).await;
        observe(&b.api, &mut seen).await;
    }
    // Both replicas end on the checkpoint covering every event.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        observe(&a.api, &mut seen).await;
        observe(&b.api, &mut seen).await;
        let (_, history) =
            json_request(&a.api, "GET", "/v1/ledger/forkless/history?limit=1", None, Some(&token_a)).await;
        assert_eq!(history["pagination"]["total"], 40);
        if seen.keys().last().is_some_and(|size| *size >= 43) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no checkpoint covers every payment: {seen:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Every pair of published checkpoints is consistent (the gateway's own proofs, checked here).
    let sizes: Vec<u64> = seen.keys().copied().collect();
    for (i, old) in sizes.iter().enumerate() {
        for new in &sizes[i..] {
            let path = format!("/v1/coops/forkless/log/consistency?from={old}&to={new}");
            let (status, text) = support::request(&b.api, "GET", &path, None, Some(&token_b)).await;
            assert_eq!(status, 200, "{text}");
            let proof: Vec<[u8; 32]> = text.lines().map(|l| gateway_tlog::hash::hash_from_base64(l).unwrap()).collect();
            let root = |size: &u64| gateway_tlog::hash::hash_from_base64(&seen[size]).unwrap();
            gateway_tlog::verify_consistency(*old, *new, &root(old), &root(new), &proof)
                .unwrap_or_else(|e| panic!("{old} → {new}: {e}"));
        }
    }
    assert!(sizes.len() >= 2, "{sizes:?}");
}

/// Records the checkpoint `api` publishes now in `seen` (size → root); panics on a second root
/// for a size.
async fn observe(api: &str, seen: &mut std::collections::BTreeMap<u64, String>) {
    let (status, text) = support::request(api, "GET", "/v1/coops/forkless/log/checkpoint", None, None).await;
    if status == 200 {
        let (_, keys) = support::request(api, "GET", "/v1/coops/forkless/log/key", None, None).await;
        let verifiers: Vec<gateway_tlog::note::Verifier> =
            keys.lines().map(|vkey| gateway_tlog::note::Verifier::from_vkey(vkey).unwrap()).collect();
        let verifiers: Vec<&dyn gateway_tlog::note::NoteVerifier> =
            verifiers.iter().map(|v| v as &dyn gateway_tlog::note::NoteVerifier).collect();
        let note = gateway_tlog::Note::parse(text.as_bytes()).unwrap();
        assert!(!note.verify(&verifiers).unwrap().is_empty(), "signed by the coop's key: {text}");
        let checkpoint = gateway_tlog::Checkpoint::parse(note.text()).unwrap();
        let root = gateway_tlog::hash::hash_to_base64(checkpoint.root());
        let earlier = seen.insert(checkpoint.size(), root.clone());
        assert!(earlier.is_none_or(|r| r == root), "two roots for size {}", checkpoint.size());
    }
}
