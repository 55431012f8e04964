//! The server load harness: starts a release `gatewayd` on a SQLite file, prepares a coop, and
//! drives it from keep-alive HTTP/1.1 connections (a closed loop: each connection sends its next
//! request when the answer arrives), reporting requests per second and latency percentiles.
//!
//! Scenarios: `payments` (durable payments, each acknowledged after its commit), `balance`
//! (balance reads), `peer` (the balance read against the gateway and against the HAProxy peer of
//! `shared/peers/`, alternated three times, when `haproxy` is installed), `metrics` (balance
//! reads with metrics on and off, alternated), `signing` (payments with an RFC 9421 request
//! signature and without, on two gateways, alternated: the generator signs each request with a
//! fresh nonce on the same cores, so the ratio carries the client's cost too), and `cluster`
//! (balance reads and payments on
//! PostgreSQL: one replica without Redis, one with Redis, three with Redis, alternated; needs the
//! local PostgreSQL and Redis, or `GATEWAY_TEST_POSTGRES_URL` and `GATEWAY_TEST_REDIS_URL`).
//! `--quick` runs every scenario for a second on the debug build: it proves the harness works
//! (CI runs it), it does not judge speed. Tokens are
//! minted with the gateway's secret, as the peer's instructions do, so logins (which are
//! IP-limited by design) are not what is measured. The generator runs on the same two cores as
//! the server, as any loopback benchmark here must; the figures are therefore pessimistic.

use std::path::Path;
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gateway_core::{Did, Ed25519PublicKey};
use serde_json::{Value, json};

use crate::client::{Connection, Server};

const SECRET: &str = "bench-secret-bench-secret-bench-secret";
const COOP: &str = "bench";
/// Members who pay. Each may make 200 payments an hour (the velocity limit at the default
/// trust), so a payments run of N seconds at R payments per second needs N × R ≤ 128,000: at
/// 5,000 per second, runs of up to 25 seconds. (The admin adds them, and the per-DID rate
/// limit lets it add 1,000 a minute, which bounds their number.)
const PAYERS: usize = 640;
const READERS: usize = 4096;

struct Options {
    seconds: u64,
    connections: usize,
    scenario: String,
    /// Alternations of the paired scenarios.
    rounds: usize,
    quick: bool,
}

impl Options {
    fn binary(&self) -> std::path::PathBuf {
        let profile = if self.quick { "debug" } else { "release" };
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../target").join(profile).join("gatewayd")
    }
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut options = Options { seconds: 10, connections: 64, scenario: "all".into(), rounds: 3, quick: false };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--quick" {
            options.quick = true;
            options.seconds = 1;
            options.connections = 8;
            options.rounds = 1;
            continue;
        }
        let value = it.next().ok_or_else(|| format!("{arg} needs a value"))?;
        match arg.as_str() {
            "--seconds" => options.seconds = value.parse().map_err(|_| "--seconds takes a number")?,
            "--connections" => options.connections = value.parse().map_err(|_| "--connections takes a number")?,
            "--scenario" => options.scenario = value.clone(),
            "--rounds" => options.rounds = value.parse().map_err(|_| "--rounds takes a number")?,
            other => return Err(format!("unknown option {other}")),
        }
    }
    Ok(options)
}

pub(crate) fn main(args: &[String]) -> ExitCode {
    let options = match parse(args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("xtask bench: {e}");
            return ExitCode::from(2);
        }
    };
    let mut build = crate::cargo();
    build.args(["build", "--locked", "-p", "gatewayd"]);
    if !options.quick {
        build.arg("--release");
    }
    let status = build.status();
    if !status.is_ok_and(|s| s.success()) {
        eprintln!("xtask bench: building gatewayd failed");
        return ExitCode::FAILURE;
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    match runtime.block_on(run(options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The signing key of member `n` (a fixed seed, so every run has the same members).
fn member_key(n: usize) -> ed25519_dalek::SigningKey {
    let mut seed = [0u8; 32];
    seed[..8].copy_from_slice(&(n as u64).to_le_bytes());
    seed[31] = 0x5a;
    ed25519_dalek::SigningKey::from_bytes(&seed)
}

fn did(n: usize) -> String {
    Did::key_from_public_key(&Ed25519PublicKey(member_key(n).verifying_key().to_bytes())).to_string()
}

/// Request-signature nonces, unique for the life of the harness (the gateway remembers them).
static NONCES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The headers of contract 11's signature over a payment: `Content-Digest`, `Signature-Input`,
/// `Signature`, for exactly the body bytes sent.
fn signature_headers(
    key: &ed25519_dalek::SigningKey,
    keyid: &str,
    authority: &str,
    path: &str,
    body: &[u8],
) -> Result<Vec<(&'static str, String)>, String> {
    let created = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let nonce = format!("bench{:016x}{}", NONCES.fetch_add(1, Ordering::Relaxed), std::process::id());
    let message = gateway_httpsig::Message { method: "POST", authority, path, query: None, headers: &[] };
    let options = gateway_httpsig::SignOptions { label: "sig1", created, expires: created + 60, nonce: &nonce, keyid };
    let signed = gateway_httpsig::sign(&message, body, key, &options).map_err(|e| e.to_string())?;
    let mut headers = vec![("signature-input", signed.signature_input), ("signature", signed.signature)];
    if let Some(digest) = signed.content_digest {
        headers.push(("content-digest", digest));
    }
    Ok(headers)
}

fn token(did: &str, scopes: &[&str]) -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let claims = json!({
        "sub": did, "coop_id": COOP, "scopes": scopes, "iat": now, "exp": now + 3600,
        "iss": "icn-gateway", "aud": "icn-gateway", "jti": format!("bench-{did}"),
    });
    let header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256);
    jsonwebtoken::encode(&header, &claims, &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes())).expect("token")
}

/// A `gatewayd` on a SQLite file in `dir` (kept for the run), with `extra` flags.
fn start_gateway(options: &Options, dir: &Path, extra: &[&str]) -> Result<Server, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let store = format!("sqlite:{}", dir.join("bench.db").display());
    start_on(options, &store, extra)
}

/// A `gatewayd` on `store`, with `extra` flags.
fn start_on(options: &Options, store: &str, extra: &[&str]) -> Result<Server, String> {
    let mut flags = vec!["--store", store, "--open-enrollment", "true", "--trust-default", "0.9"];
    flags.extend_from_slice(extra);
    Server::start(&options.binary(), &flags, SECRET)
}

async fn setup(addr: &str) -> Result<(), String> {
    let admin_did = did(0);
    let admin = token(&admin_did, &["coop:read", "coop:write", "ledger:read", "ledger:write"]);
    let mut conn = Connection::open(addr).await?;
    let (status, body) =
        conn.send("POST", "/v1/coops", Some(&admin), Some(&json!({ "name": "Bench", "coop_type": "worker" }))).await?;
    if status != 201 {
        return Err(format!("creating the coop: {status} {}", String::from_utf8_lossy(&body)));
    }
    for n in 1..PAYERS {
        let (status, body) =
            conn.send("POST", "/v1/coops/bench/members", Some(&admin), Some(&json!({ "did": did(n) }))).await?;
        if status != 201 {
            return Err(format!("adding member {n}: {status} {}", String::from_utf8_lossy(&body)));
        }
    }
    Ok(())
}

/// What one scenario run measured.
struct Figures {
    requests: u64,
    errors: u64,
    seconds: f64,
    latencies_us: Vec<u32>,
}

impl Figures {
    fn rps(&self) -> f64 {
        self.requests as f64 / self.seconds
    }

    fn percentile(&self, p: f64) -> f64 {
        if self.latencies_us.is_empty() {
            return 0.0;
        }
        let index = ((self.latencies_us.len() as f64 - 1.0) * p).round() as usize;
        f64::from(self.latencies_us[index]) / 1000.0
    }

    fn line(&self, name: &str) -> String {
        format!(
            "| {name} | {:.0} | {:.2} | {:.2} | {:.2} | {} |",
            self.rps(),
            self.percentile(0.5),
            self.percentile(0.99),
            self.percentile(0.999),
            self.errors
        )
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Payments,
    /// Payments, each with a request signature of its payer.
    SignedPayments,
    Balance,
}

async fn drive(addr: &str, kind: Kind, connections: usize, seconds: u64) -> Result<Figures, String> {
    drive_all(&[addr.to_owned()], kind, connections, seconds).await
}

/// [`drive`] with the connections spread over several replicas in turn, as a round-robin
/// balancer would.
async fn drive_all(addrs: &[String], kind: Kind, connections: usize, seconds: u64) -> Result<Figures, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for c in 0..connections {
        let (addr, stop) = (addrs[c % addrs.len()].clone(), stop.clone());
        // Per request: token, path, body, and the payer's key and DID when it signs.
        type Work = (String, String, Option<Value>, Option<(ed25519_dalek::SigningKey, String)>);
        let work: Vec<Work> = match kind {
            Kind::Payments | Kind::SignedPayments => (c..PAYERS)
                .step_by(connections)
                .map(|p| {
                    let body =
                        json!({ "from": did(p), "to": did((p + 1) % PAYERS), "amount": 0.01, "currency": "hours" });
                    let signer = matches!(kind, Kind::SignedPayments).then(|| (member_key(p), did(p)));
                    (token(&did(p), &["ledger:write"]), "/v1/ledger/bench/payment".to_owned(), Some(body), signer)
                })
                .collect(),
            Kind::Balance => (c..READERS)
                .step_by(connections)
                .map(|r| {
                    let path = format!("/v1/ledger/{COOP}/balance/{}", did(r % PAYERS));
                    (token(&did(r), &["ledger:read"]), path, None, None)
                })
                .collect(),
        };
        tasks.push(tokio::spawn(async move {
            let mut conn = Connection::open(&addr).await?;
            let (mut ok, mut errors, mut latencies) = (0u64, 0u64, Vec::with_capacity(100_000));
            let expected = if matches!(kind, Kind::Balance) { 200 } else { 201 };
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let (token, path, body, signer) = &work[i % work.len()];
                i += 1;
                let started = Instant::now();
                let method = if body.is_some() { "POST" } else { "GET" };
                let (status, answer) = match signer {
                    None => conn.send(method, path, Some(token), body.as_ref()).await?,
                    Some((key, keyid)) => {
                        // Connection::send_with sends `body.to_string()`: sign exactly those bytes.
                        let bytes = body.as_ref().map(Value::to_string).unwrap_or_default();
                        let signed = signature_headers(key, keyid, &addr, path, bytes.as_bytes())?;
                        let headers: Vec<(&str, &str)> = signed.iter().map(|(n, v)| (*n, v.as_str())).collect();
                        conn.send_with(method, path, Some(token), body.as_ref(), &headers).await?
                    }
                };
                latencies.push(started.elapsed().as_micros().min(u128::from(u32::MAX)) as u32);
                if status == expected {
                    ok += 1
                } else {
                    if errors == 0 {
                        eprintln!("unexpected answer: {status} {}", String::from_utf8_lossy(&answer));
                    }
                    errors += 1
                }
            }
            Ok::<_, String>((ok, errors, latencies))
        }));
    }
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut figures = Figures { requests: 0, errors: 0, seconds: 0.0, latencies_us: Vec::new() };
    for task in tasks {
        let (ok, errors, latencies) = task.await.map_err(|e| e.to_string())??;
        figures.requests += ok;
        figures.errors += errors;
        figures.latencies_us.extend(latencies);
    }
    figures.seconds = started.elapsed().as_secs_f64();
    figures.latencies_us.sort_unstable();
    Ok(figures)
}

fn start_peer(port: u16) -> Option<Child> {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/peers/haproxy-balance.cfg");
    Command::new("haproxy")
        .arg("-f")
        .arg(config)
        .env("JWT_SECRET", SECRET)
        .env("PEER_PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .ok()
}

async fn run(options: Options) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("gateway-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let header = "| scenario | requests/s | p50 ms | p99 ms | p99.9 ms | non-2xx |\n|---|---|---|---|---|---|";
    println!("connections: {}, seconds per run: {}\n\n{header}", options.connections, options.seconds);
    let all = options.scenario == "all";
    let (seconds, connections) = (options.seconds, options.connections);
    if all || options.scenario == "payments" {
        let server = start_gateway(&options, &dir.join("payments"), &[])?;
        setup(&server.addr).await?;
        let figures = drive(&server.addr, Kind::Payments, connections, seconds).await?;
        println!("{}", figures.line("durable payments (SQLite file, fsync per commit group)"));
    }
    if all || options.scenario == "balance" {
        let server = start_gateway(&options, &dir.join("balance"), &[])?;
        setup(&server.addr).await?;
        let figures = drive(&server.addr, Kind::Balance, connections, seconds).await?;
        println!("{}", figures.line("balance reads"));
    }
    if all || options.scenario == "metrics" {
        let on = start_gateway(&options, &dir.join("metrics-on"), &["--metrics", "true"])?;
        let off = start_gateway(&options, &dir.join("metrics-off"), &["--metrics", "false"])?;
        setup(&on.addr).await?;
        setup(&off.addr).await?;
        let mut ratios = Vec::new();
        for round in 1..=options.rounds {
            let with = drive(&on.addr, Kind::Balance, connections, seconds).await?;
            let without = drive(&off.addr, Kind::Balance, connections, seconds).await?;
            println!("{}", with.line(&format!("round {round}: balance reads, metrics on")));
            println!("{}", without.line(&format!("round {round}: balance reads, metrics off")));
            ratios.push(with.rps() / without.rps());
        }
        let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
        println!("\nmetrics on / off, mean of {} alternations: requests/s {mean:.3}×\n", ratios.len());
    }
    if all || options.scenario == "signing" {
        let plain = start_gateway(&options, &dir.join("unsigned"), &[])?;
        let signing = start_gateway(&options, &dir.join("signed"), &[])?;
        setup(&plain.addr).await?;
        setup(&signing.addr).await?;
        let mut ratios = Vec::new();
        for round in 1..=options.rounds {
            let signed = drive(&signing.addr, Kind::SignedPayments, connections, seconds).await?;
            let unsigned = drive(&plain.addr, Kind::Payments, connections, seconds).await?;
            println!("{}", signed.line(&format!("round {round}: payments, signed (RFC 9421)")));
            println!("{}", unsigned.line(&format!("round {round}: payments, unsigned")));
            ratios.push((signed.rps() / unsigned.rps(), signed.percentile(0.5) / unsigned.percentile(0.5)));
        }
        let n = ratios.len() as f64;
        let rps = ratios.iter().map(|r| r.0).sum::<f64>() / n;
        let p50 = ratios.iter().map(|r| r.1).sum::<f64>() / n;
        println!(
            "\nsigned / unsigned payments, mean of {n} alternations: requests/s {rps:.3}×, p50 latency {p50:.3}×\n"
        );
    }
    if all || options.scenario == "cluster" {
        cluster(&options).await?;
    }
    if options.scenario == "peer" || (all && !options.quick) {
        let server = start_gateway(&options, &dir.join("peer"), &[])?;
        setup(&server.addr).await?;
        let port = 18081;
        match start_peer(port) {
            None => println!("\n(haproxy is not installed: `apt-get install -y haproxy` for the peer comparison)"),
            Some(mut peer) => {
                tokio::time::sleep(Duration::from_millis(500)).await;
                let peer_addr = format!("127.0.0.1:{port}");
                let mut ratios = Vec::new();
                for round in 1..=options.rounds {
                    let ours = drive(&server.addr, Kind::Balance, connections, seconds).await?;
                    let theirs = drive(&peer_addr, Kind::Balance, connections, seconds).await?;
                    println!("{}", ours.line(&format!("round {round}: gateway balance read")));
                    println!("{}", theirs.line(&format!("round {round}: HAProxy peer")));
                    ratios.push((ours.rps() / theirs.rps(), ours.percentile(0.99) / theirs.percentile(0.99)));
                }
                let _ = peer.kill();
                let _ = peer.wait();
                let n = ratios.len() as f64;
                let rps = ratios.iter().map(|r| r.0).sum::<f64>() / n;
                let p99 = ratios.iter().map(|r| r.1).sum::<f64>() / n;
                println!("\ngateway / peer, mean of {n} alternations: requests/s {rps:.2}×, p99 latency {p99:.2}×");
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// A fresh PostgreSQL schema for one configuration of the cluster scenario; its URL.
fn fresh_schema(base: &str, name: &str) -> Result<String, String> {
    let schema = format!("bench_{name}_{}", std::process::id());
    let status = Command::new("psql")
        .args([
            base,
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            &format!("DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"),
        ])
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("psql: {e}"))?;
    if !status.success() {
        return Err(format!("creating schema {schema} with psql failed"));
    }
    let separator = if base.contains('?') { '&' } else { '?' };
    Ok(format!("{base}{separator}options=-c%20search_path%3D{schema}"))
}

/// One configuration of the cluster scenario: `replicas` gateways on one fresh schema, sharing
/// Redis under a fresh prefix when `redis` is given; the coop is set up through the first.
async fn replicas(options: &Options, name: &str, replicas: usize, redis: Option<&str>) -> Result<Vec<Server>, String> {
    let postgres = std::env::var("GATEWAY_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
    let store = fresh_schema(&postgres, name)?;
    let prefix = format!("bench:{name}:{}:", std::process::id());
    let mut extra = Vec::new();
    if let Some(redis) = redis {
        extra.extend_from_slice(&["--redis", redis, "--redis-prefix", prefix.as_str()]);
    }
    let mut servers = Vec::new();
    for _ in 0..replicas {
        servers.push(start_on(options, &store, &extra)?);
    }
    setup(&servers[0].addr).await?;
    Ok(servers)
}

/// Balance reads and payments on PostgreSQL: one replica without Redis, one with, three with.
async fn cluster(options: &Options) -> Result<(), String> {
    let redis = std::env::var("GATEWAY_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let (seconds, connections) = (options.seconds, options.connections);
    let configurations: Vec<(&str, Vec<Server>)> = vec![
        ("1 replica, no Redis", replicas(options, "one", 1, None).await?),
        ("1 replica, Redis", replicas(options, "oneredis", 1, Some(&redis)).await?),
        ("3 replicas, Redis", replicas(options, "three", 3, Some(&redis)).await?),
    ];
    for (kind, label) in [(Kind::Balance, "balance reads"), (Kind::Payments, "payments")] {
        let mut rps = vec![Vec::new(); configurations.len()];
        for round in 1..=options.rounds {
            for (i, (name, servers)) in configurations.iter().enumerate() {
                let addrs: Vec<String> = servers.iter().map(|s| s.addr.clone()).collect();
                let figures = drive_all(&addrs, kind, connections, seconds).await?;
                println!("{}", figures.line(&format!("round {round}: {label}, PostgreSQL, {name}")));
                rps[i].push(figures.rps());
            }
        }
        let mean = |v: &Vec<f64>| v.iter().sum::<f64>() / v.len() as f64;
        println!(
            "\n{label}: 1 replica with Redis / without {:.3}×; 3 replicas with Redis / 1 without {:.3}×\n",
            mean(&rps[1]) / mean(&rps[0]),
            mean(&rps[2]) / mean(&rps[0]),
        );
    }
    Ok(())
}
