//! Cluster mode under faults (INTERFACE.md §10):
//!
//! - Redis stopped and started under a serving gateway: logins answer 503, request limits fall
//!   back to the replica's own, payments answer 503 (or count locally when configured so), health
//!   says so, and everything recovers by itself when Redis is back. The test starts a private
//!   `redis-server` on a free port and stops only that one; the shared Redis is never touched.
//! - A replica killed (SIGKILL) in the middle of a stream of payments: no acknowledged payment is
//!   lost, a WebSocket client of the dead replica resumes on another with `Backfill`, without a
//!   gap, and a client of the surviving replica receives every event live and in order, those
//!   the dead replica committed but did not announce included. Runs when `GATEWAY_TEST_POSTGRES_URL` and `GATEWAY_TEST_REDIS_URL` are set.

mod support;

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use support::{json_request, login, serve_in_process, signing_key, start_on, try_request};

/// A private Redis on a port of its own, stopped when dropped.
struct PrivateRedis {
    port: u16,
    child: Option<Child>,
}

impl PrivateRedis {
    fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut redis = Self { port, child: None };
        redis.resume();
        redis
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Starts the server (again) on the same port, waiting until it accepts connections.
    fn resume(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (Debian package redis-server) for this test");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(Instant::now() < deadline, "the private redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.kill();
    }
}

async fn health(api: &str) -> Value {
    json_request(api, "GET", "/v1/health", None, None).await.1
}

/// Polls `check` every 50 ms until it holds, for at most `within`.
async fn eventually<F, Fut>(within: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !check().await {
        assert!(Instant::now() < deadline, "{what} within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn metric(metrics: &str, family: &str) -> f64 {
    let (_, text) = try_request(metrics, "GET", "/metrics", None, &[]).await.expect("metrics answer");
    text.lines()
        .filter(|line| line.starts_with(family))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_and_started_under_a_serving_gateway() {
    let mut redis = PrivateRedis::start();
    let url = redis.url();
    // Trust 0.3: 100 requests a minute, 50 payments an hour.
    let flags = ["--redis", url.as_str(), "--open-enrollment", "true", "--trust-default", "0.3"];
    let mut deny_flags = flags.to_vec();
    deny_flags.extend_from_slice(&["--redis-prefix", "deny:"]);
    let deny = serve_in_process("memory", &deny_flags).await;
    let mut local_flags = flags.to_vec();
    local_flags.extend_from_slice(&["--redis-velocity-fallback", "local", "--redis-prefix", "local:"]);
    let local = serve_in_process("memory", &local_flags).await;
    let scopes = ["coop:read", "coop:write", "ledger:read", "ledger:write"];
    let mut tokens = Vec::new();
    for gateway in [&deny, &local] {
        let token = login(&gateway.api, 1, "outage", &scopes).await;
        support::coop_with_member_two(&gateway.api, &token, "outage").await;
        tokens.push(token);
    }
    let pay = json!({ "from": signing_key(1).1, "to": signing_key(2).1, "amount": 1 });
    // The payer uses its whole hour before the outage.
    for n in 0..50 {
        let (status, body) =
            json_request(&deny.api, "POST", "/v1/ledger/outage/payment", Some(pay.clone()), Some(&tokens[0])).await;
        assert_eq!(status, 201, "payment {n}: {body}");
    }
    let (status, body) =
        json_request(&deny.api, "POST", "/v1/ledger/outage/payment", Some(pay.clone()), Some(&tokens[0])).await;
    assert_eq!((status, body["details"]["layer"].as_str()), (429, Some("velocity")), "{body}");
    assert_eq!(health(&deny.api).await["redis"], "ok");
    let other = login(&deny.api, 2, "outage", &scopes).await;
    let back = json!({ "from": signing_key(2).1, "to": signing_key(1).1, "amount": 1 });
    let errors_before = metric(&deny.metrics, "icn_gateway_rate_limit_backend_errors_total").await;

    redis.kill();

    // Logins: 503 at once (a challenge cannot be made single-use without Redis).
    let started = Instant::now();
    let (status, body) =
        json_request(&deny.api, "POST", "/v1/auth/challenge", Some(json!({ "did": signing_key(3).1 })), None).await;
    assert_eq!((status, body["code"].as_str()), (503, Some("SERVICE_UNAVAILABLE")), "{body}");
    assert!(started.elapsed() < Duration::from_millis(500), "answered within the budget: {:?}", started.elapsed());
    // Reads: served, limited by the replica's own limiter.
    let (status, balance) = json_request(
        &deny.api,
        "GET",
        &format!("/v1/ledger/outage/balance/{}", signing_key(1).1),
        None,
        Some(&tokens[0]),
    )
    .await;
    assert_eq!(status, 200, "{balance}");
    // Payments: 503 by default, counted locally when configured so. (The payer at its limit is
    // still refused 429: this replica noted the refusal and needs no Redis to repeat it.)
    let (status, body) =
        json_request(&deny.api, "POST", "/v1/ledger/outage/payment", Some(pay.clone()), Some(&tokens[0])).await;
    assert_eq!((status, body["details"]["layer"].as_str()), (429, Some("velocity")), "{body}");
    let (status, body) =
        json_request(&deny.api, "POST", "/v1/ledger/outage/payment", Some(back.clone()), Some(&other)).await;
    assert_eq!((status, body["code"].as_str()), (503, Some("SERVICE_UNAVAILABLE")), "{body}");
    let (status, body) =
        json_request(&local.api, "POST", "/v1/ledger/outage/payment", Some(pay.clone()), Some(&tokens[1])).await;
    assert_eq!(status, 201, "--redis-velocity-fallback local: {body}");
    // Health and metrics say so.
    let during = health(&deny.api).await;
    assert_eq!((during["redis"].as_str(), during["status"].as_str()), (Some("unreachable"), Some("degraded")));
    assert!(metric(&deny.metrics, "icn_gateway_rate_limit_backend_errors_total").await > errors_before);
    let (status, _) = json_request(&deny.api, "GET", "/readyz", None, None).await;
    assert_eq!(status, 200, "Redis does not make a replica unready");

    redis.resume();

    // Everything recovers by itself, without a restart.
    eventually(Duration::from_secs(5), "health reports Redis again", || async {
        health(&deny.api).await["redis"] == "ok"
    })
    .await;
    let token = login(&deny.api, 1, "outage", &scopes).await;
    // The restarted Redis knew nothing; the gateway seeds the payers' hours from its ledger, so
    // the payer is still at its limit (not handed a fresh hour).
    let window = format!("deny:limit:velocity:{}", signing_key(1).1);
    eventually(Duration::from_secs(5), "the payer's window is seeded in the restarted Redis", || {
        let (port, window) = (redis.port, window.clone());
        async move {
            let out = Command::new("redis-cli").args(["-p", &port.to_string(), "ZCARD", &window]).output();
            out.is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "50")
        }
    })
    .await;
    let (status, body) = json_request(&deny.api, "POST", "/v1/ledger/outage/payment", Some(pay), Some(&token)).await;
    assert_eq!((status, body["details"]["layer"].as_str()), (429, Some("velocity")), "{body}");
    assert_eq!(body["details"]["count"], 50, "{body}");
    // Another payer pays as usual.
    let (status, body) = json_request(&deny.api, "POST", "/v1/ledger/outage/payment", Some(back), Some(&other)).await;
    assert_eq!(status, 201, "{body}");
}

/// One payer's stream of payments, each with its own Idempotency-Key, retried on the other
/// replica when the first does not answer; returns the ids of acknowledged payments.
async fn pay_until(apis: Arc<Mutex<Vec<String>>>, token: String, payer: u8, stop: Arc<AtomicBool>) -> Vec<String> {
    let mut acknowledged = Vec::new();
    let mut n = 0u32;
    loop {
        let key = format!("payer{payer}-{n}");
        let body = json!({ "from": signing_key(payer).1, "to": signing_key(9).1, "amount": 1 });
        let auth = format!("Bearer {token}");
        loop {
            let api = apis.lock().unwrap()[0].clone();
            let headers = [("authorization", auth.as_str()), ("idempotency-key", key.as_str())];
            match try_request(&api, "POST", "/v1/ledger/kill/payment", Some(body.clone()), &headers).await {
                Some((201, text)) => {
                    let record: Value = serde_json::from_str(&text).unwrap();
                    acknowledged.push(record["id"].as_str().unwrap().to_owned());
                    break;
                }
                Some((status, text)) if status >= 500 || status == 409 => {
                    // The replica is going down, or the key is in flight there: retry.
                    let _ = text;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Some((status, text)) => panic!("payment {key}: {status} {text}"),
                None => {
                    // No answer: the replica died; the client moves to the next one.
                    let mut list = apis.lock().unwrap();
                    if list.len() > 1 && list[0] == api {
                        list.remove(0);
                    }
                }
            }
        }
        n += 1;
        if stop.load(Ordering::SeqCst) {
            return acknowledged;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_killed_mid_load_loses_no_payment_and_its_clients_resume_elsewhere() {
    let Ok(redis) = std::env::var("GATEWAY_TEST_REDIS_URL") else {
        eprintln!("SKIPPED: GATEWAY_TEST_REDIS_URL is not set, so the replica-kill test did not run");
        return;
    };
    let Some(store) = gateway_store::testing::fresh_postgres_schema("cluster_kill").await else { return };
    let prefix = format!("test:kill:{}:{}:", std::process::id(), gateway_domain::events::new_id());
    let flags = ["--redis", redis.as_str(), "--redis-prefix", prefix.as_str(), "--open-enrollment", "true"];
    let flags: Vec<&str> = flags.into_iter().chain(["--trust-default", "0.9"]).collect();
    let mut doomed = start_on(&store, &flags, &[]);
    let survivor = start_on(&store, &flags, &[]);
    let scopes = ["coop:read", "coop:write", "ledger:read", "ledger:write"];
    let founder = login(&survivor.api, 1, "kill", &scopes).await;
    let (status, _) = json_request(
        &survivor.api,
        "POST",
        "/v1/coops",
        Some(json!({ "name": "K", "coop_type": "worker" })),
        Some(&founder),
    )
    .await;
    assert_eq!(status, 201);
    for seed in 2..=9u8 {
        let (status, body) = json_request(
            &survivor.api,
            "POST",
            "/v1/coops/kill/members",
            Some(json!({ "did": signing_key(seed).1 })),
            Some(&founder),
        )
        .await;
        assert_eq!(status, 201, "{body}");
    }

    // A WebSocket client of the doomed replica.
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/v1/ws/kill", doomed.api)).await.unwrap();
    ws.send(Message::text(json!({ "type": "Auth", "token": founder }).to_string())).await.unwrap();
    let mut seen = BTreeSet::new();
    let first = next_text(&mut ws).await.expect("AuthOk");
    assert_eq!(first["type"], "AuthOk");
    let start_seq = first["current_seq"].as_u64().unwrap();

    // A WebSocket client of the survivor, connected throughout. The doomed replica's commits
    // reach it through that replica's announcements; any it committed but did not announce before
    // it died reach it through the next announcement or the hub's re-read: a lost announcement
    // costs a wake-up, never an event. It receives every event live, in order, once.
    let (mut live, _) = tokio_tungstenite::connect_async(format!("ws://{}/v1/ws/kill", survivor.api)).await.unwrap();
    live.send(Message::text(json!({ "type": "Auth", "token": founder }).to_string())).await.unwrap();
    let ok = next_text(&mut live).await.expect("AuthOk");
    assert_eq!(ok["type"], "AuthOk", "{ok}");
    let live_start = ok["current_seq"].as_u64().unwrap();
    let live_seqs = Arc::new(Mutex::new(Vec::new()));
    let live_reader = {
        let seqs = live_seqs.clone();
        tokio::spawn(async move {
            while let Some(frame) = next_text(&mut live).await {
                if frame["type"] == "Event" {
                    seqs.lock().unwrap().push(frame["seq"].as_u64().unwrap());
                }
            }
        })
    };

    // Four payers pay through the doomed replica (the survivor is their fallback).
    let stop = Arc::new(AtomicBool::new(false));
    let mut payers = Vec::new();
    for payer in 2..=5u8 {
        let token = login(&survivor.api, payer, "kill", &scopes).await;
        let apis = Arc::new(Mutex::new(vec![doomed.api.clone(), survivor.api.clone()]));
        payers.push(tokio::spawn(pay_until(apis, token, payer, stop.clone())));
    }
    // Read events until a few dozen payments went through, then kill the replica mid-stream.
    while seen.len() < 40 {
        let frame = next_text(&mut ws).await.expect("events before the kill");
        if frame["type"] == "Event" {
            seen.insert(frame["seq"].as_u64().unwrap());
        }
    }
    doomed.child.kill().unwrap();
    doomed.child.wait().unwrap();
    // The socket ends without a Shutdown frame (the process is gone).
    while let Some(frame) = next_text(&mut ws).await {
        if frame["type"] == "Event" {
            seen.insert(frame["seq"].as_u64().unwrap());
        }
    }
    let last_seen = *seen.iter().next_back().unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::SeqCst);
    let mut acknowledged = Vec::new();
    for payer in payers {
        acknowledged.extend(payer.await.unwrap());
    }

    // The client resumes on the survivor with Backfill and misses nothing.
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/v1/ws/kill", survivor.api)).await.unwrap();
    ws.send(Message::text(json!({ "type": "Auth", "token": founder }).to_string())).await.unwrap();
    let ok = next_text(&mut ws).await.unwrap();
    assert_eq!(ok["type"], "AuthOk", "{ok}");
    let current = ok["current_seq"].as_u64().unwrap();
    ws.send(Message::text(json!({ "type": "Backfill", "after_seq": last_seen }).to_string())).await.unwrap();
    loop {
        let frame = next_text(&mut ws).await.expect("backfill");
        match frame["type"].as_str() {
            Some("Event") => {
                seen.insert(frame["seq"].as_u64().unwrap());
            }
            Some("BackfillComplete") => break,
            _ => panic!("unexpected frame {frame}"),
        }
    }
    let expected: BTreeSet<u64> = (start_seq + 1..=current).collect();
    assert_eq!(seen, expected, "every event from AuthOk to the survivor's current_seq, once, no gap");

    // The survivor's live client got the same events as they came, in order (within the hub's
    // 5 s re-read of a coop whose last announcement was lost).
    let deadline = Instant::now() + Duration::from_secs(15);
    while live_seqs.lock().unwrap().last().copied() < Some(current) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    live_reader.abort();
    let live_seqs = live_seqs.lock().unwrap().clone();
    assert_eq!(live_seqs, (live_start + 1..=current).collect::<Vec<_>>(), "live, in order, once, no gap");

    // No acknowledged payment was lost; retries with their keys created no duplicates.
    let (status, history) =
        json_request(&survivor.api, "GET", "/v1/ledger/kill/history?limit=100", None, Some(&founder)).await;
    assert_eq!(status, 200);
    let total = history["pagination"]["total"].as_u64().unwrap();
    let mut recorded = BTreeSet::new();
    let mut offset = 0;
    while offset < total {
        let path = format!("/v1/ledger/kill/history?limit=100&offset={offset}");
        let (_, page) = json_request(&survivor.api, "GET", &path, None, Some(&founder)).await;
        for tx in page["transactions"].as_array().unwrap() {
            recorded.insert(tx["id"].as_str().unwrap().to_owned());
        }
        offset += 100;
    }
    assert!(acknowledged.len() >= 40, "{} acknowledged", acknowledged.len());
    for id in &acknowledged {
        assert!(recorded.contains(id), "acknowledged payment {id} is missing after the kill");
    }
    assert_eq!(recorded.len() as u64, total);
    assert_eq!(total as usize, acknowledged.len(), "one record per acknowledged key, no duplicates");
}

/// The next text frame as JSON, or `None` when the stream ends.
async fn next_text(
    ws: &mut tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
) -> Option<Value> {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(10), ws.next()).await.expect("a frame within 10 s")?;
        match frame {
            Ok(Message::Text(text)) => return Some(serde_json::from_str(text.as_str()).unwrap()),
            Ok(Message::Ping(_) | Message::Pong(_)) => continue,
            Ok(Message::Close(_)) | Err(_) => return None,
            Ok(other) => panic!("unexpected frame {other:?}"),
        }
    }
}
