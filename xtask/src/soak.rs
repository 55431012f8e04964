//! `cargo xtask soak --minutes N`: a long mixed load against a release `gatewayd` on a SQLite
//! file, to find what only time shows: memory that grows, files that grow, errors that appear,
//! latency that drifts.
//!
//! The load runs at a steady, moderate rate (not saturation, so latency means something): balance
//! reads, every other read route a member uses (history whole and filtered, notifications, the
//! coop's stats and members, proposals, tasks, coops, a trust score, the log's checkpoint; 10 a
//! second each), durable payments, real logins (challenge and verify, signed by the generator, from many
//! addresses through the trusted-proxy header), WebSocket subscribers following the coop's
//! events, and a governance cycle (create, open, vote, close). Every minute it samples the
//! server's resident memory, the database and WAL sizes, the errors and each operation's p99,
//! and at the end it reports the memory growth per minute after warm-up (a least-squares slope),
//! the p99 drift of each operation (each read route on its own) between the first third of the
//! minutes after warm-up and the last, and the error count.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ed25519_dalek::{Signer, SigningKey};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::Mutex;

use crate::client::{Connection, Server, rss};

const SECRET: &str = "soak-secret-soak-secret-soak-secret!!";
const COOP: &str = "soak";
/// Payers: 20 payments a second spread over them stay under the velocity limit (200 an hour).
/// Members 20–30 also read a route each, and 100–199 take turns at governance.
const PAYERS: usize = 512;
/// The minutes at the start not counted in the growth and drift figures.
const WARM_UP: usize = 3;

struct Options {
    minutes: usize,
}

/// Latencies of one operation kind in one minute, and its errors.
#[derive(Default)]
struct Window {
    latencies_us: Vec<u32>,
    errors: u64,
}

impl Window {
    fn p99_ms(&mut self) -> f64 {
        if self.latencies_us.is_empty() {
            return 0.0;
        }
        self.latencies_us.sort_unstable();
        let i = ((self.latencies_us.len() - 1) as f64 * 0.99).round() as usize;
        f64::from(self.latencies_us[i]) / 1000.0
    }
}

/// One minute's figures: RSS, database and WAL bytes, events delivered, errors, and the p99 of
/// each operation kind, milliseconds.
struct Sample {
    rss: u64,
    db: u64,
    wal: u64,
    events: u64,
    errors: u64,
    p99: Vec<f64>,
}

/// Per operation kind (see [`KINDS`]).
struct Recorder {
    windows: Mutex<Vec<Window>>,
    events: AtomicU64,
}

/// The operation kinds: every read route a member uses (a balance, history whole and filtered,
/// notifications, the coop's stats, members, proposals, tasks, the member's coops, a trust
/// score, the log's checkpoint), then the writes. Each has its p99 per minute and its drift.
const KINDS: [&str; 14] = [
    "balance",
    "history",
    "history (one member)",
    "notifications",
    "coop stats",
    "members",
    "proposals",
    "tasks",
    "coops",
    "trust score",
    "log checkpoint",
    "payment",
    "login",
    "governance",
];
/// The indexes of the write kinds in [`KINDS`].
const PAYMENT: usize = 11;
const LOGIN: usize = 12;
const GOVERNANCE: usize = 13;

impl Recorder {
    async fn record(&self, kind: usize, started: Instant, ok: bool) {
        let mut windows = self.windows.lock().await;
        let window = &mut windows[kind];
        window.latencies_us.push(started.elapsed().as_micros().min(u128::from(u32::MAX)) as u32);
        if !ok {
            window.errors += 1;
        }
    }

    async fn take(&self) -> Vec<Window> {
        let fresh = (0..KINDS.len()).map(|_| Window::default()).collect();
        std::mem::replace(&mut *self.windows.lock().await, fresh)
    }
}

pub(crate) fn main(args: &[String]) -> ExitCode {
    let mut options = Options { minutes: 60 };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match (arg.as_str(), it.next()) {
            ("--minutes", Some(n)) if n.parse::<usize>().is_ok_and(|n| n > WARM_UP) => {
                options.minutes = n.parse().expect("checked")
            }
            _ => {
                eprintln!("usage: cargo xtask soak [--minutes N] (N > {WARM_UP})");
                return ExitCode::from(2);
            }
        }
    }
    let status = crate::cargo().args(["build", "--release", "--locked", "-p", "gatewayd"]).status();
    if !status.is_ok_and(|s| s.success()) {
        eprintln!("xtask soak: building gatewayd failed");
        return ExitCode::FAILURE;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
    match runtime.block_on(run(options)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("xtask soak: {e}");
            ExitCode::FAILURE
        }
    }
}

fn key(n: usize) -> SigningKey {
    let mut seed = [0u8; 32];
    seed[..8].copy_from_slice(&(n as u64).to_le_bytes());
    seed[31] = 0x50;
    SigningKey::from_bytes(&seed)
}

fn did(n: usize) -> String {
    gateway_core::Did::key_from_public_key(&gateway_core::Ed25519PublicKey(key(n).verifying_key().to_bytes()))
        .to_string()
}

fn token(did: &str, scopes: &[&str]) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let claims = json!({
        "sub": did, "coop_id": COOP, "scopes": scopes, "iat": now, "exp": now + 4 * 3600,
        "iss": "icn-gateway", "aud": "icn-gateway", "jti": format!("soak-{did}"),
    });
    let header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    jsonwebtoken::encode(&header, &claims, &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes())).expect("token")
}

/// Resident memory of `pid`, bytes.
fn size(path: &Path) -> u64 {
    std::fs::metadata(path).map_or(0, |m| m.len())
}

async fn run(options: Options) -> Result<bool, String> {
    let dir = std::env::temp_dir().join(format!("gateway-soak-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let db = dir.join("soak.db");
    let binary = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/release/gatewayd");
    let store = format!("sqlite:{}", db.display());
    let flags =
        ["--store", &store, "--open-enrollment", "true", "--trust-default", "0.9", "--trusted-proxy", "127.0.0.1"];
    let server = Server::start(&binary, &flags, SECRET)?;
    let addr = server.addr.clone();
    let admin = token(&did(0), &["coop:read", "coop:write", "ledger:read", "ledger:write", "gov:read", "gov:write"]);
    let mut conn = Connection::open(&addr).await?;
    let (status, body) =
        conn.send("POST", "/v1/coops", Some(&admin), Some(&json!({ "name": "Soak", "coop_type": "worker" }))).await?;
    if status != 201 {
        return Err(format!("creating the coop: {status} {}", String::from_utf8_lossy(&body)));
    }
    for n in 1..PAYERS {
        let (status, body) =
            conn.send("POST", "/v1/coops/soak/members", Some(&admin), Some(&json!({ "did": did(n) }))).await?;
        if status != 201 {
            return Err(format!("adding member {n}: {status} {}", String::from_utf8_lossy(&body)));
        }
    }
    println!("soak: {} minutes against {addr} (SQLite {}), warm-up {WARM_UP} minutes", options.minutes, db.display());
    let windows = (0..KINDS.len()).map(|_| Window::default()).collect();
    let recorder = Arc::new(Recorder { windows: Mutex::new(windows), events: AtomicU64::new(0) });
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    // Balance reads: 4 connections × ~250 a second.
    for c in 0..4 {
        tasks.push(tokio::spawn(paced(addr.clone(), recorder.clone(), stop.clone(), 250.0, move |i| {
            let reader = (c * 97 + i) % PAYERS;
            let path = format!("/v1/ledger/{COOP}/balance/{}", did(reader));
            (0, "GET", path, Some(token(&did(reader), &["ledger:read"])), None, 200)
        })));
    }
    // Every other read route: a connection each, 10 a second, each as a member of its own (the
    // per-DID limit is 1,000 requests a minute), paid like everyone: its notifications grow.
    let routes: [(usize, String); 10] = [
        (1, format!("/v1/ledger/{COOP}/history?limit=20")),
        (2, format!("/v1/ledger/{COOP}/history?limit=20&did={}", did(1))),
        (3, "/v1/notifications?limit=20".to_owned()),
        (4, format!("/v1/coops/{COOP}/stats")),
        (5, format!("/v1/coops/{COOP}/members?limit=20")),
        (6, "/v1/gov/proposals?limit=20".to_owned()),
        (7, "/v1/compute/tasks?limit=20".to_owned()),
        (8, "/v1/coops".to_owned()),
        (9, format!("/v1/trust/{}/score", did(1))),
        (10, format!("/v1/coops/{COOP}/log/checkpoint")),
    ];
    for (kind, path) in routes {
        let reader = token(&did(20 + kind), &["coop:read", "ledger:read", "gov:read", "trust:read"]);
        // The log's checkpoint is 404 until the coop's log is signed (no keystore here).
        let expected = if kind == 10 { 404 } else { 200 };
        tasks.push(tokio::spawn(paced(addr.clone(), recorder.clone(), stop.clone(), 10.0, move |_| {
            (kind, "GET", path.clone(), Some(reader.clone()), None, expected)
        })));
    }
    // Payments: 20 a second.
    tasks.push(tokio::spawn(paced(addr.clone(), recorder.clone(), stop.clone(), 20.0, |i| {
        let payer = 1 + i % (PAYERS - 1);
        let body = json!({ "from": did(payer), "to": did(1 + (payer % (PAYERS - 1))), "amount": 0.01 });
        (
            PAYMENT,
            "POST",
            format!("/v1/ledger/{COOP}/payment"),
            Some(token(&did(payer), &["ledger:write"])),
            Some(body),
            201,
        )
    })));
    // Logins: 2 a second, each from its own address.
    tasks.push(tokio::spawn(logins(addr.clone(), recorder.clone(), stop.clone())));
    // Governance: a cycle every 5 seconds.
    tasks.push(tokio::spawn(governance(addr.clone(), recorder.clone(), stop.clone())));
    // WebSocket subscribers.
    for s in 0..16 {
        tasks.push(tokio::spawn(subscriber(
            addr.clone(),
            token(&did(s), &["ledger:read"]),
            recorder.clone(),
            stop.clone(),
        )));
    }

    let pid = server.pid();
    let wal = dir.join("soak.db-wal");
    println!("\n| minute | RSS MB | db MB | WAL MB | events | errors | p99 ms: {} |", KINDS.join(" / "));
    println!("|---|---|---|---|---|---|---|");
    let mut samples = Vec::new();
    let started = Instant::now();
    for minute in 1..=options.minutes {
        tokio::time::sleep_until((started + Duration::from_secs(60 * minute as u64)).into()).await;
        let mut windows = recorder.take().await;
        let p99: Vec<f64> = windows.iter_mut().map(Window::p99_ms).collect();
        let errors: u64 = windows.iter().map(|w| w.errors).sum();
        let sample = Sample {
            rss: rss(pid),
            db: size(&db),
            wal: size(&wal),
            events: recorder.events.swap(0, Ordering::Relaxed),
            errors,
            p99,
        };
        let p99: Vec<String> = sample.p99.iter().map(|ms| format!("{ms:.2}")).collect();
        println!(
            "| {minute} | {:.1} | {:.1} | {:.1} | {} | {} | {} |",
            sample.rss as f64 / 1e6,
            sample.db as f64 / 1e6,
            sample.wal as f64 / 1e6,
            sample.events,
            sample.errors,
            p99.join(" / ")
        );
        samples.push(sample);
    }
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        let _ = task.await;
    }

    // Growth after warm-up: least-squares slope of RSS over the minutes.
    let steady = &samples[WARM_UP..];
    let n = steady.len() as f64;
    let xs: Vec<f64> = (0..steady.len()).map(|i| i as f64).collect();
    let ys: Vec<f64> = steady.iter().map(|s| s.rss as f64 / 1e6).collect();
    let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
    let slope = xs.iter().zip(&ys).map(|(x, y)| (x - mx) * (y - my)).sum::<f64>()
        / xs.iter().map(|x| (x - mx).powi(2)).sum::<f64>().max(f64::MIN_POSITIVE);
    let errors: u64 = samples.iter().map(|s| s.errors).sum();
    let span = (steady.len() / 3).max(1);
    let mean_p99 = |part: &[Sample], kind: usize| part.iter().map(|s| s.p99[kind]).sum::<f64>() / part.len() as f64;
    println!("\nRSS growth after warm-up: {slope:.3} MB/min (target < 1)");
    println!("errors: {errors} (target 0)");
    let mut drift_ok = true;
    println!("\n| operation | p99 first third after warm-up, ms | p99 last third, ms | drift (target < 20 %) |");
    println!("|---|---|---|---|");
    for (kind, name) in KINDS.iter().enumerate() {
        let first = mean_p99(&steady[..span], kind);
        let last = mean_p99(&steady[steady.len() - span..], kind);
        let drift = if first > 0.0 { (last - first) / first } else { 0.0 };
        drift_ok &= drift < 0.2;
        println!("| {name} | {first:.2} | {last:.2} | {:+.1} % |", drift * 100.0);
    }
    println!("database {:.1} MB, WAL {:.1} MB at the end", size(&db) as f64 / 1e6, size(&wal) as f64 / 1e6);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(slope < 1.0 && errors == 0 && drift_ok)
}

/// One connection sending `make(i)` requests at `per_second`, recording each.
async fn paced<F>(addr: String, recorder: Arc<Recorder>, stop: Arc<AtomicBool>, per_second: f64, make: F)
where
    F: Fn(usize) -> (usize, &'static str, String, Option<String>, Option<Value>, u16),
{
    let Ok(mut conn) = Connection::open(&addr).await else { return };
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / per_second));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let (kind, method, path, token, body, expected) = make(i);
        i += 1;
        let started = Instant::now();
        let answer = conn.send(method, &path, token.as_deref(), body.as_ref()).await;
        let ok = matches!(&answer, Ok((status, _)) if *status == expected);
        if let Ok((status, text)) = &answer
            && !ok
        {
            eprintln!("soak: {method} {path}: {status} {}", String::from_utf8_lossy(text));
        }
        recorder.record(kind, started, ok).await;
        if answer.is_err() {
            match Connection::open(&addr).await {
                Ok(fresh) => conn = fresh,
                Err(_) => return,
            }
        }
    }
}

async fn logins(addr: String, recorder: Arc<Recorder>, stop: Arc<AtomicBool>) {
    let Ok(mut conn) = Connection::open(&addr).await else { return };
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    let mut n: u64 = 0;
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        n += 1;
        let member = 1 + (n as usize % (PAYERS - 1));
        let from = format!("10.{}.{}.{}", (n >> 16) & 255, (n >> 8) & 255, n & 255);
        let headers = [("x-forwarded-for", from.as_str())];
        let started = Instant::now();
        let challenge =
            conn.send_with("POST", "/v1/auth/challenge", None, Some(&json!({ "did": did(member) })), &headers).await;
        let nonce = match &challenge {
            Ok((200, body)) => {
                serde_json::from_slice::<Value>(body).ok().and_then(|v| v["nonce"].as_str().map(str::to_owned))
            }
            _ => None,
        };
        let ok = match nonce {
            Some(nonce) => {
                let signature = hex::encode(key(member).sign(nonce.as_bytes()).to_bytes());
                let body =
                    json!({ "did": did(member), "signature": signature, "coop_id": COOP, "scopes": ["ledger:read"] });
                matches!(conn.send_with("POST", "/v1/auth/verify", None, Some(&body), &headers).await, Ok((200, _)))
            }
            None => false,
        };
        recorder.record(LOGIN, started, ok).await;
    }
}

/// A governance cycle every 5 s, each by the next of 100 members in turn (an author may open 20
/// proposals an hour in a coop).
async fn governance(addr: String, recorder: Arc<Recorder>, stop: Arc<AtomicBool>) {
    let Ok(mut conn) = Connection::open(&addr).await else { return };
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    let mut cycle = 0;
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let admin = token(&did(100 + cycle % 100), &["gov:read", "gov:write"]);
        cycle += 1;
        let started = Instant::now();
        let proposal = json!({ "domain_id": "coop", "title": "soak", "description": "d", "payload": { "type": "text", "content": "c" } });
        let ok = async {
            let (status, body) = conn
                .send("POST", "/v1/gov/proposals", Some(&admin), Some(&proposal))
                .await
                .map_err(|e| eprintln!("soak: POST /v1/gov/proposals: {e}"))
                .ok()?;
            if status != 201 {
                eprintln!("soak: POST /v1/gov/proposals: {status} {}", String::from_utf8_lossy(&body));
            }
            let id = (status == 201).then(|| serde_json::from_slice::<Value>(&body).ok())??["proposal_id"]
                .as_str()?
                .to_owned();
            // Open and close take no body (one they do not read ends the connection after the
            // answer: `Connection: close`).
            for (path, body) in [
                (format!("/v1/gov/proposals/{id}/open"), None),
                (format!("/v1/gov/proposals/{id}/vote"), Some(json!({ "choice": "for" }))),
                (format!("/v1/gov/proposals/{id}/close"), None),
            ] {
                let (status, answer) = conn
                    .send("POST", &path, Some(&admin), body.as_ref())
                    .await
                    .map_err(|e| eprintln!("soak: POST {path}: {e}"))
                    .ok()?;
                if status != 200 {
                    eprintln!("soak: POST {path}: {status} {}", String::from_utf8_lossy(&answer));
                    return None;
                }
            }
            Some(())
        }
        .await
        .is_some();
        recorder.record(GOVERNANCE, started, ok).await;
        if !ok {
            // A connection the server closed (or left mid-answer) is not used again.
            match Connection::open(&addr).await {
                Ok(fresh) => conn = fresh,
                Err(_) => return,
            }
        }
    }
}

async fn subscriber(addr: String, token: String, recorder: Arc<Recorder>, stop: Arc<AtomicBool>) {
    use tokio_tungstenite::tungstenite::Message;
    let Ok((mut ws, _)) = tokio_tungstenite::connect_async(format!("ws://{addr}/v1/ws/{COOP}")).await else { return };
    if ws.send(Message::text(json!({ "type": "Auth", "token": token }).to_string())).await.is_err() {
        return;
    }
    while !stop.load(Ordering::Relaxed) {
        match tokio::time::timeout(Duration::from_millis(500), ws.next()).await {
            Ok(Some(Ok(Message::Text(text)))) if text.as_str().contains(r#""type":"Event""#) => {
                recorder.events.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Some(Ok(_))) | Err(_) => {}
            Ok(None | Some(Err(_))) => return,
        }
    }
}
