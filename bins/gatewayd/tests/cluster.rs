//! Cluster mode (INTERFACE.md §10): replicas on one PostgreSQL sharing one Redis. Each test runs
//! when `GATEWAY_TEST_POSTGRES_URL` and `GATEWAY_TEST_REDIS_URL` are set (and fails loudly when
//! they are set and unreachable); each works under a Redis prefix and a PostgreSQL schema of its
//! own.
//!
//! Tried as a client behind a round-robin balancer would: requests go to the replicas in turn,
//! and the limits must hold as on one gateway, a login must work whichever replica answers, and
//! the event stream must be one stream.

mod support;

use futures_util::SinkExt;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use support::{InProcess as Gateway, json_request, login, next_frame, serve_in_process, signing_key, try_request};

const REDIS_VAR: &str = "GATEWAY_TEST_REDIS_URL";

/// How many of these tests run their replicas at once. Each test's replicas share one
/// current-thread runtime, and five tests of three replicas each on a 2-core machine leave a
/// Redis answer waiting behind the others' work for longer than the 50 ms budget, which the
/// replica rightly takes for an outage (503): two at a time measure the cluster, not the
/// scheduler.
static TURNS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);

/// `n` replicas on a fresh schema sharing a fresh Redis prefix, with `flags`, and the test's
/// turn (held while the replicas run); `None` (announced) when either variable is unset.
async fn cluster(
    name: &str,
    n: usize,
    flags: &[&str],
) -> Option<(Vec<Gateway>, tokio::sync::SemaphorePermit<'static>)> {
    let Ok(redis) = std::env::var(REDIS_VAR) else {
        eprintln!("SKIPPED {name}: {REDIS_VAR} is not set, so this cluster test did not run");
        return None;
    };
    let turn = TURNS.acquire().await.expect("the semaphore is never closed");
    let store = gateway_store::testing::fresh_postgres_schema(name).await?;
    let prefix = format!("test:{name}:{}:{}:", std::process::id(), gateway_domain::events::new_id());
    let mut all = vec!["--redis", redis.as_str(), "--redis-prefix", prefix.as_str(), "--trusted-proxy", "127.0.0.1"];
    all.extend_from_slice(flags);
    let mut replicas = Vec::new();
    for _ in 0..n {
        replicas.push(serve_in_process(&store, &all).await);
    }
    // Redis must answer: within two seconds of start-up (a replica's first ping on a busy
    // runtime may miss its 50 ms budget, and the next one, 250 ms later, then finds it up).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        let (status, health) = json_request(&replicas[0].api, "GET", "/v1/health", None, None).await;
        if (status, health["redis"].as_str()) == (200, Some("ok")) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{REDIS_VAR}={redis} must answer: {status} {health}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    Some((replicas, turn))
}

/// A request from `client_ip` (forwarded by the trusted proxy 127.0.0.1).
async fn from_ip(api: &str, path: &str, body: Value, client_ip: &str) -> (u16, Value) {
    let headers = [("x-forwarded-for", client_ip)];
    let (status, text) = try_request(api, "POST", path, Some(body), &headers).await.expect("the replica answers");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_count_one_ip_bucket() {
    let Some((replicas, _turn)) = cluster("cluster_ip", 3, &[]).await else { return };
    let did = signing_key(1).1;
    let mut admitted = 0;
    let mut refused = Vec::new();
    for i in 0..36 {
        let (status, body) =
            from_ip(&replicas[i % 3].api, "/v1/auth/challenge", json!({ "did": did }), "198.51.100.7").await;
        match status {
            200 => admitted += 1,
            429 => refused.push(body),
            other => panic!("challenge {i}: {other} {body}"),
        }
    }
    // One burst of 20 for the address across all three (each alone would admit all 36), plus
    // at most what refilled at 2 per second meanwhile.
    assert!((20..=22).contains(&admitted), "{admitted} challenges admitted across three replicas");
    assert_eq!(refused[0]["code"], "RATE_LIMIT_EXCEEDED");
    assert_eq!(refused[0]["details"]["layer"], "ip");
    // Another address has its own bucket.
    let (status, _) = from_ip(&replicas[1].api, "/v1/auth/challenge", json!({ "did": did }), "198.51.100.8").await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_count_one_per_did_minute() {
    // Trust 0: 10 requests a minute for the DID, whichever replica serves them.
    let Some((replicas, _turn)) = cluster("cluster_did", 3, &["--trust-default", "0.0"]).await else { return };
    let (signing, did) = signing_key(7);
    let (_, challenge) =
        json_request(&replicas[0].api, "POST", "/v1/auth/challenge", Some(json!({ "did": did })), None).await;
    let signature = {
        use ed25519_dalek::Signer;
        hex::encode(signing.sign(challenge["nonce"].as_str().unwrap().as_bytes()).to_bytes())
    };
    let verify = json!({ "did": did, "challenge_id": challenge["challenge_id"], "signature": signature });
    let (status, token) = json_request(&replicas[1].api, "POST", "/v1/auth/verify", Some(verify), None).await;
    assert_eq!(status, 200, "{token}");
    let token = token["token"].as_str().unwrap().to_owned();
    let mut statuses = Vec::new();
    for i in 0..15 {
        let (status, body) = json_request(&replicas[i % 3].api, "GET", "/identity/did", None, Some(&token)).await;
        if status == 429 {
            assert_eq!(body["details"]["layer"], "did", "{body}");
        }
        statuses.push(status);
    }
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 10, "{statuses:?}");
    assert_eq!(statuses.iter().filter(|s| **s == 429).count(), 5, "{statuses:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_count_one_velocity_hour() {
    // Trust 0.3: 100 requests a minute, and the class Known: 50 payments an hour.
    let flags = ["--open-enrollment", "true", "--trust-default", "0.3"];
    let Some((replicas, _turn)) = cluster("cluster_velocity", 3, &flags).await else { return };
    let scopes = ["coop:read", "coop:write", "ledger:read", "ledger:write"];
    let founder = login(&replicas[0].api, 1, "vel", &scopes).await;
    let (status, body) = json_request(
        &replicas[0].api,
        "POST",
        "/v1/coops",
        Some(json!({ "name": "V", "coop_type": "worker" })),
        Some(&founder),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = json_request(
        &replicas[0].api,
        "POST",
        "/v1/coops/vel/members",
        Some(json!({ "did": signing_key(2).1 })),
        Some(&founder),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let pay = json!({ "from": signing_key(1).1, "to": signing_key(2).1, "amount": 1 });
    let mut created = 0;
    let mut refusal = Value::Null;
    for i in 0..56 {
        let (status, body) =
            json_request(&replicas[i % 3].api, "POST", "/v1/ledger/vel/payment", Some(pay.clone()), Some(&founder))
                .await;
        match status {
            201 => created += 1,
            429 => refusal = body,
            other => panic!("payment {i}: {other} {body}"),
        }
    }
    assert_eq!(created, 50, "one hour's allowance across three replicas");
    assert_eq!(refusal["details"]["layer"], "velocity", "{refusal}");
    assert_eq!(refusal["details"]["count"], 50, "{refusal}");
    assert!(refusal["error"].as_str().unwrap().ends_with("50/50 per hour"), "{refusal}");
    let (status, history) =
        json_request(&replicas[2].api, "GET", "/v1/ledger/vel/history?limit=100", None, Some(&founder)).await;
    assert_eq!(status, 200);
    assert_eq!(history["pagination"]["total"], 50, "refused payments left nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_challenge_issued_by_one_replica_verifies_on_another_once() {
    let Some((replicas, _turn)) = cluster("cluster_login", 3, &["--open-enrollment", "true"]).await else { return };
    let (signing, did) = signing_key(3);
    let (status, challenge) =
        json_request(&replicas[0].api, "POST", "/v1/auth/challenge", Some(json!({ "did": did })), None).await;
    assert_eq!(status, 200, "{challenge}");
    let signature = {
        use ed25519_dalek::Signer;
        hex::encode(signing.sign(challenge["nonce"].as_str().unwrap().as_bytes()).to_bytes())
    };
    let verify = json!({ "did": did, "signature": signature, "coop_id": "c", "scopes": ["coop:read"] });
    let (status, token) = json_request(&replicas[1].api, "POST", "/v1/auth/verify", Some(verify.clone()), None).await;
    assert_eq!(status, 200, "issued by A, verified by B: {token}");
    let (status, again) = json_request(&replicas[2].api, "POST", "/v1/auth/verify", Some(verify.clone()), None).await;
    assert_eq!((status, again["code"].as_str()), (401, Some("AUTHENTICATION_FAILED")), "once: {again}");
    let (status, again) = json_request(&replicas[0].api, "POST", "/v1/auth/verify", Some(verify), None).await;
    assert_eq!(status, 401, "not even on the replica that issued it: {again}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_one_replica_sees_the_others_events_in_order() {
    let flags = ["--open-enrollment", "true", "--trust-default", "0.9"];
    let Some((replicas, _turn)) = cluster("cluster_ws", 3, &flags).await else { return };
    let scopes = ["coop:read", "coop:write", "ledger:read", "ledger:write"];
    let founder = login(&replicas[0].api, 1, "ws3", &scopes).await;
    let (status, _) = json_request(
        &replicas[0].api,
        "POST",
        "/v1/coops",
        Some(json!({ "name": "W", "coop_type": "worker" })),
        Some(&founder),
    )
    .await;
    assert_eq!(status, 201);
    json_request(
        &replicas[0].api,
        "POST",
        "/v1/coops/ws3/members",
        Some(json!({ "did": signing_key(2).1 })),
        Some(&founder),
    )
    .await;
    let (mut ws, _) =
        tokio_tungstenite::connect_async(format!("ws://{}/v1/ws/ws3", replicas[0].api)).await.expect("upgrade");
    ws.send(Message::text(json!({ "type": "Auth", "token": founder }).to_string())).await.unwrap();
    let ok = next_frame(&mut ws).await;
    assert_eq!(ok["type"], "AuthOk", "{ok}");
    let start = ok["current_seq"].as_u64().unwrap();
    // Payments through B and C, concurrently: the stream on A has each once, in seq order.
    let tasks: Vec<_> = (0..12)
        .map(|n| {
            let api = replicas[1 + n % 2].api.clone();
            let token = founder.clone();
            tokio::spawn(async move {
                let pay = json!({ "from": signing_key(1).1, "to": signing_key(2).1, "amount": 1 + n });
                let (status, body) =
                    json_request(&api, "POST", "/v1/ledger/ws3/payment", Some(pay), Some(&token)).await;
                assert_eq!(status, 201, "{body}");
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let mut amounts = Vec::new();
    for n in 0..12u64 {
        let frame = next_frame(&mut ws).await;
        assert_eq!(frame["type"], "Event", "{frame}");
        assert_eq!(frame["seq"].as_u64(), Some(start + 1 + n), "in order, no gap: {frame}");
        amounts.push(frame["event"]["data"]["amount"].as_u64().unwrap());
    }
    amounts.sort_unstable();
    assert_eq!(amounts, (1..=12).collect::<Vec<_>>(), "every payment once");
}
