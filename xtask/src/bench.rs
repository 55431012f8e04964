//! The server load harness: starts a `gatewayd` on a SQLite file, prepares a coop, and drives
//! it from keep-alive HTTP/1.1 connections (a closed loop: each connection sends its next request
//! when the answer arrives), reporting requests per second and latency percentiles.
//!
//! Scenarios (`--scenario NAME`, default `all`, which runs every one):
//!
//! - `payments`: durable payments, each acknowledged after its commit, from the built-in
//!   generator and then, on a fresh gateway, the same requests from `wrk` when it is on `PATH`
//!   (a Lua script; at most 8 s, within the payers' hour);
//! - `balance`: balance reads;
//! - `metrics`: balance reads with metrics on and off, alternated;
//! - `signing`: payments with an RFC 9421 request signature and without, on two fresh gateways
//!   each round, alternated (the generator signs each request with a fresh nonce on the same cores, so the
//!   ratio carries the client's cost too);
//! - `cluster`: balance reads and payments on PostgreSQL: one replica without Redis, one with
//!   Redis, three with Redis, alternated (needs the local PostgreSQL and Redis, or
//!   `GATEWAY_TEST_POSTGRES_URL` and `GATEWAY_TEST_REDIS_URL`);
//! - `postgres`: durable payments on PostgreSQL against `pgbench -b tpcb-like` at scale 1 and at
//!   the number of coops, through HAProxy (when installed): one replica and three with Redis for
//!   one coop, one replica for 64 coops, with the ratios the cluster's goals name (see
//!   `bench/postgres.rs`; needs `pgbench` and `psql`);
//! - `ceiling` (alias `peer`): the authenticated balance read against the gateway, the HAProxy
//!   peer of `xtask/peers/` (when `haproxy` is installed), a bare axum server answering the same
//!   body and axum with an HS256 check (`cargo xtask baseline bare|jwt`, children of this
//!   process), alternated for `--rounds` rounds, with `wrk --latency` as the generator when it is
//!   on `PATH` (a Lua script cycling over 2,000 tokens and paths) and the built-in one otherwise;
//!   it reports the gateway's requests/s and p99 as ratios to each;
//! - `login`: challenge and verify over HTTP, each login from its own client address through
//!   the trusted-proxy header (`--trusted-proxy 127.0.0.1`, `X-Forwarded-For` over 10.0.0.0/8, so
//!   the per-IP limit never applies) and over the coop's 639 members in turn, the generator
//!   signing every nonce on a two-worker runtime on the same cores; it reports logins/s against
//!   the in-process Ed25519 sign+verify throughput of two threads, the ceiling of that setup;
//! - `mixed`: balance reads, durable payments, logins and WebSocket subscribers following the
//!   coop's events at once, with requests/s, p99 and errors per kind and the events delivered;
//! - `log`: the coop's log: payments with its checkpointer running and paused, how soon a
//!   payment is in a signed (and a witness-cosigned) checkpoint at 500 payments/s, proof reads,
//!   and its storage per entry (see `bench/log.rs`).
//! - `export`: the treasurer's export of a coop whose log holds 1,000,000 payments (seeded with
//!   the `sqlite3` shell), as CSV and Beancount: seconds, MB/s and the gateway's RSS growth (see
//!   `bench/export.rs`).
//!
//! Full runs build `gatewayd` and this harness with the release profile and run the harness from
//! that build (re-running itself), so that the generator and the axum baselines are optimised as
//! the gateway is. `--quick` runs every scenario for a second on the debug build: it proves the
//! harness works (CI runs it) and fails on any error or unexpected status; it does not judge
//! speed. Tokens are minted with the gateway's secret, as the peer's instructions do, so logins
//! (which are IP-limited by design) are measured only where a scenario says so. The generator
//! runs on the same two cores as the server, as any loopback benchmark here must; the figures are
//! therefore pessimistic.

mod ceiling;
mod export;
mod log;
mod login;
mod mixed;
mod postgres;

use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
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
/// 5,000 per second, runs of up to 25 seconds; a longer run of the `payments` scenario ends
/// when the budget does (see [`drive_all`]). (The admin adds them, and the per-DID rate
/// limit lets it add 1,000 a minute, which bounds their number.)
const PAYERS: usize = 640;
/// Payments one payer may make in an hour at the harness's trust (the velocity limit).
const PAYMENTS_PER_PAYER_HOUR: usize = 200;
const READERS: usize = 4096;

/// The scenarios `--scenario` accepts.
const SCENARIOS: &[&str] = &[
    "all", "payments", "balance", "metrics", "signing", "cluster", "postgres", "ceiling", "peer", "login", "mixed",
    "log", "export",
];

struct Options {
    seconds: u64,
    connections: usize,
    scenario: String,
    /// Alternations of the paired scenarios.
    rounds: usize,
    quick: bool,
    /// `ceiling` only: the generator on CPU 0 and every system under test on CPU 1 (`taskset`).
    pinned: bool,
    /// `--gatewayd PATH`: the gateway binary to measure instead of this checkout's build (an
    /// earlier commit's, to compare two builds run after run).
    gatewayd: Option<std::path::PathBuf>,
}

impl Options {
    fn binary(&self) -> std::path::PathBuf {
        if let Some(path) = &self.gatewayd {
            return path.clone();
        }
        let profile = if self.quick { "debug" } else { "release" };
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../target").join(profile).join("gatewayd")
    }

    /// Whether `name` is to run.
    fn wants(&self, name: &str) -> bool {
        self.scenario == "all" || self.scenario == name
    }
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut options = Options {
        seconds: 10,
        connections: 64,
        scenario: "all".into(),
        rounds: 3,
        quick: false,
        pinned: false,
        gatewayd: None,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        if arg == "--pinned" {
            options.pinned = true;
            continue;
        }
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
            "--gatewayd" => options.gatewayd = Some(value.into()),
            other => return Err(format!("unknown option {other}")),
        }
    }
    if !SCENARIOS.contains(&options.scenario.as_str()) {
        return Err(format!("unknown scenario {}; one of {}", options.scenario, SCENARIOS.join(", ")));
    }
    if options.seconds == 0 || options.connections == 0 || options.rounds == 0 {
        return Err("--seconds, --connections and --rounds take numbers above 0".into());
    }
    if options.scenario == "peer" {
        options.scenario = "ceiling".into();
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
        build.args(["--release", "-p", "xtask"]);
    }
    let status = build.status();
    if !status.is_ok_and(|s| s.success()) {
        eprintln!("xtask bench: building failed");
        return ExitCode::FAILURE;
    }
    if !options.quick && cfg!(debug_assertions) {
        // A full run measures with an optimised generator and optimised baselines: run the
        // release build of this harness, just built, with the same arguments.
        let release = crate::client::workspace().join("target/release/xtask");
        return match Command::new(&release).arg("bench").args(args).status() {
            Ok(status) if status.success() => ExitCode::SUCCESS,
            Ok(_) => ExitCode::FAILURE,
            Err(e) => {
                eprintln!("xtask bench: running {}: {e}", release.display());
                ExitCode::FAILURE
            }
        };
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

/// Runs `future` on a multi-threaded tokio runtime of two workers, on a thread of its own (the
/// harness's own runtime has one thread, which waits meanwhile): the scenarios whose generator
/// signs need both cores.
fn on_two_workers<F>(future: F) -> F::Output
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("runtime");
                runtime.block_on(future)
            })
            .join()
            .expect("the load thread panicked")
    })
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

/// The headers of INTERFACE.md §11's signature over a payment: `Content-Digest`, `Signature-Input`,
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
    /// The connections' tallies over `seconds`.
    fn of(tallies: Vec<Tally>, seconds: f64) -> Self {
        let mut figures = Figures { requests: 0, errors: 0, seconds, latencies_us: Vec::new() };
        for tally in tallies {
            figures.requests += tally.ok;
            figures.errors += tally.errors;
            figures.latencies_us.extend(tally.latencies_us);
        }
        figures.latencies_us.sort_unstable();
        figures
    }

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

    fn summary(&self) -> Summary {
        Summary {
            rps: self.rps(),
            p50: self.percentile(0.5),
            p99: self.percentile(0.99),
            p999: Some(self.percentile(0.999)),
            errors: self.errors,
        }
    }
}

/// One table row: requests/s, latency percentiles (ms) and the answers that were not the
/// expected ones (plus transport errors, for `wrk`).
struct Summary {
    rps: f64,
    p50: f64,
    p99: f64,
    /// `wrk --latency` reports no p99.9.
    p999: Option<f64>,
    errors: u64,
}

impl Summary {
    fn line(&self, name: &str) -> String {
        let p999 = self.p999.map_or_else(|| "–".to_owned(), |p| format!("{p:.2}"));
        format!("| {name} | {:.0} | {:.2} | {:.2} | {p999} | {} |", self.rps, self.p50, self.p99, self.errors)
    }
}

/// The rows printed so far and the unexpected answers among them: a `--quick` run with any
/// fails.
#[derive(Default)]
struct Table {
    unexpected: u64,
}

impl Table {
    fn row(&mut self, summary: &Summary, name: &str) {
        println!("{}", summary.line(name));
        self.unexpected += summary.errors;
    }

    fn figures(&mut self, figures: &Figures, name: &str) {
        self.row(&figures.summary(), name);
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Payments,
    /// Payments, each with a request signature of its payer.
    SignedPayments,
    Balance,
}

/// One request of a closed loop: token, path, JSON body, and the payer's key and DID when it
/// signs.
type Work = (String, String, Option<Value>, Option<(ed25519_dalek::SigningKey, String)>);

/// Payer `p`'s payment, as every generator sends it: its token, the path, and the body (0.01
/// hours to payer `p + 1`).
fn payment(p: usize) -> (String, String, Value) {
    let body = json!({ "from": did(p), "to": did((p + 1) % PAYERS), "amount": 0.01, "currency": "hours" });
    (token(&did(p), &["ledger:write"]), format!("/v1/ledger/{COOP}/payment"), body)
}

/// The requests connection `c` of `connections` cycles over: its share of the payers or readers.
fn work(kind: Kind, c: usize, connections: usize) -> Vec<Work> {
    match kind {
        Kind::Payments | Kind::SignedPayments => (c % PAYERS..PAYERS)
            .step_by(connections)
            .map(|p| {
                let (token, path, body) = payment(p);
                let signer = matches!(kind, Kind::SignedPayments).then(|| (member_key(p), did(p)));
                (token, path, Some(body), signer)
            })
            .collect(),
        Kind::Balance => (c % READERS..READERS)
            .step_by(connections)
            .map(|r| {
                let path = format!("/v1/ledger/{COOP}/balance/{}", did(r % PAYERS));
                (token(&did(r), &["ledger:read"]), path, None, None)
            })
            .collect(),
    }
}

/// What one connection measured: answers as expected, other answers, and the latency of each.
#[derive(Default)]
struct Tally {
    ok: u64,
    errors: u64,
    latencies_us: Vec<u32>,
}

impl Tally {
    fn record(&mut self, started: Instant, ok: bool) {
        self.latencies_us.push(started.elapsed().as_micros().min(u128::from(u32::MAX)) as u32);
        if ok {
            self.ok += 1;
        } else {
            self.errors += 1;
        }
    }
}

/// One keep-alive connection sending `work` in turn until `stop`, or until `budget` requests
/// have been sent; returns its tally and when it stopped.
async fn request_loop(
    addr: String,
    kind: Kind,
    work: Vec<Work>,
    budget: Option<usize>,
    stop: Arc<AtomicBool>,
) -> Result<(Tally, Instant), String> {
    let mut conn = Connection::open(&addr).await?;
    let mut tally = Tally { latencies_us: Vec::with_capacity(100_000), ..Tally::default() };
    let expected = if matches!(kind, Kind::Balance) { 200 } else { 201 };
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) && budget.is_none_or(|budget| i < budget) {
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
        if status != expected && tally.errors == 0 {
            eprintln!("unexpected answer: {status} {}", String::from_utf8_lossy(&answer));
        }
        tally.record(started, status == expected);
    }
    Ok((tally, Instant::now()))
}

async fn drive(addr: &str, kind: Kind, connections: usize, seconds: u64) -> Result<Figures, String> {
    drive_all(&[addr.to_owned()], kind, connections, seconds).await
}

/// [`drive`] with the connections spread over several replicas in turn, as a round-robin
/// balancer would.
///
/// A payments connection stops by itself once its payers have made their hour's payments
/// ([`PAYMENTS_PER_PAYER_HOUR`] each), so that on a fast machine a long run on a fresh gateway
/// ends when the budget does rather than counting refusals; the rate is then over the time
/// until the last connection stopped.
async fn drive_all(addrs: &[String], kind: Kind, connections: usize, seconds: u64) -> Result<Figures, String> {
    let work = (0..connections).map(|c| work(kind, c, connections)).collect();
    drive_work(addrs, kind, work, seconds).await
}

/// One closed loop per list of `work` (connection `c` to `addrs[c % addrs.len()]`), for
/// `seconds`; a payments loop stops early when its payers have made their hour's payments.
async fn drive_work(addrs: &[String], kind: Kind, work: Vec<Vec<Work>>, seconds: u64) -> Result<Figures, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for (c, work) in work.into_iter().enumerate() {
        let budget =
            matches!(kind, Kind::Payments | Kind::SignedPayments).then(|| work.len() * PAYMENTS_PER_PAYER_HOUR);
        tasks.push(tokio::spawn(request_loop(addrs[c % addrs.len()].clone(), kind, work, budget, stop.clone())));
    }
    let started = Instant::now();
    until_finished(&tasks, started + Duration::from_secs(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut tallies = Vec::new();
    let mut last = started;
    for task in tasks {
        let (tally, ended) = task.await.map_err(|e| e.to_string())??;
        tallies.push(tally);
        last = last.max(ended);
    }
    Ok(Figures::of(tallies, last.duration_since(started).as_secs_f64()))
}

/// Waits until every task has finished or `deadline` has passed, whichever comes first.
async fn until_finished<T>(tasks: &[tokio::task::JoinHandle<T>], deadline: Instant) {
    while Instant::now() < deadline && !tasks.iter().all(tokio::task::JoinHandle::is_finished) {
        tokio::time::sleep(Duration::from_millis(20).min(deadline.saturating_duration_since(Instant::now()))).await;
    }
}

/// One run of `a` then one of `b`, for `--rounds` rounds, each printed as a row named with its
/// round: two systems compared under the same conditions, alternated so that a slow minute of
/// the machine falls on both. Returns each round's pair of figures.
async fn alternate(
    options: &Options,
    table: &mut Table,
    a: (&str, Kind, &str),
    b: (&str, Kind, &str),
) -> Result<Vec<(Figures, Figures)>, String> {
    let mut rounds = Vec::new();
    for round in 1..=options.rounds {
        let first = drive(a.0, a.1, options.connections, options.seconds).await?;
        let second = drive(b.0, b.1, options.connections, options.seconds).await?;
        table.figures(&first, &format!("round {round}: {}", a.2));
        table.figures(&second, &format!("round {round}: {}", b.2));
        rounds.push((first, second));
    }
    Ok(rounds)
}

/// The arithmetic mean of some ratios (0 for none).
fn mean(values: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = values.fold((0.0, 0u32), |(sum, n), v| (sum + v, n + 1));
    if n == 0 { 0.0 } else { sum / f64::from(n) }
}

async fn run(options: Options) -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("gateway-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let mut table = Table::default();
    let result = scenarios(&options, &dir, &mut table).await;
    let _ = std::fs::remove_dir_all(&dir);
    drop_schemas();
    result?;
    match table.unexpected {
        0 => Ok(()),
        n if options.quick => Err(format!("{n} requests failed or got an unexpected answer (see above)")),
        n => {
            println!("\nwarning: {n} requests failed or got an unexpected answer (see above)");
            Ok(())
        }
    }
}

async fn scenarios(options: &Options, dir: &Path, table: &mut Table) -> Result<(), String> {
    let header = "| scenario | requests/s | p50 ms | p99 ms | p99.9 ms | non-2xx |\n|---|---|---|---|---|---|";
    println!("connections: {}, seconds per run: {}\n\n{header}", options.connections, options.seconds);
    let (seconds, connections) = (options.seconds, options.connections);
    if options.wants("payments") {
        let server = start_gateway(options, &dir.join("payments"), &[])?;
        setup(&server.addr).await?;
        let figures = drive(&server.addr, Kind::Payments, connections, seconds).await?;
        table.figures(&figures, "durable payments (SQLite file, fsync per commit group)");
        if figures.seconds + 0.5 < seconds as f64 {
            println!(
                "(the payers' hour of payments, {} in all, was used up after {:.1} s: the rate is over that time)",
                PAYERS * PAYMENTS_PER_PAYER_HOUR,
                figures.seconds
            );
        }
        // The first gateway stops before the second one is measured.
        drop(server);
        ceiling::payments_from_wrk(options, &dir.join("payments"), table).await?;
    }
    if options.wants("balance") {
        let server = start_gateway(options, &dir.join("balance"), &[])?;
        setup(&server.addr).await?;
        let figures = drive(&server.addr, Kind::Balance, connections, seconds).await?;
        table.figures(&figures, "balance reads");
    }
    if options.wants("metrics") {
        let on = start_gateway(options, &dir.join("metrics-on"), &["--metrics", "true"])?;
        let off = start_gateway(options, &dir.join("metrics-off"), &["--metrics", "false"])?;
        setup(&on.addr).await?;
        setup(&off.addr).await?;
        let rounds = alternate(
            options,
            table,
            (&on.addr, Kind::Balance, "balance reads, metrics on"),
            (&off.addr, Kind::Balance, "balance reads, metrics off"),
        )
        .await?;
        let rps = mean(rounds.iter().map(|(with, without)| with.rps() / without.rps()));
        println!("\nmetrics on / off, mean of {} alternations: requests/s {rps:.3}×\n", rounds.len());
    }
    if options.wants("signing") {
        // Two fresh gateways each round: on a fast machine one round can use up the payers'
        // hour of payments, and a later round on the same gateways would count only refusals.
        let mut rounds = Vec::new();
        for round in 1..=options.rounds {
            let signing = start_gateway(options, &dir.join(format!("signed-{round}")), &[])?;
            let plain = start_gateway(options, &dir.join(format!("unsigned-{round}")), &[])?;
            setup(&signing.addr).await?;
            setup(&plain.addr).await?;
            let signed = drive(&signing.addr, Kind::SignedPayments, connections, seconds).await?;
            let unsigned = drive(&plain.addr, Kind::Payments, connections, seconds).await?;
            table.figures(&signed, &format!("round {round}: payments, signed (RFC 9421)"));
            table.figures(&unsigned, &format!("round {round}: payments, unsigned"));
            rounds.push((signed, unsigned));
        }
        let rps = mean(rounds.iter().map(|(signed, unsigned)| signed.rps() / unsigned.rps()));
        let p50 = mean(rounds.iter().map(|(signed, unsigned)| signed.percentile(0.5) / unsigned.percentile(0.5)));
        println!(
            "\nsigned / unsigned payments, mean of {} alternations: requests/s {rps:.3}×, p50 latency {p50:.3}×\n",
            rounds.len()
        );
    }
    if options.wants("cluster") {
        cluster(options, table).await?;
    }
    if options.wants("postgres") {
        postgres::scenario(options, &dir.join("postgres"), table).await?;
    }
    if options.wants("ceiling") {
        ceiling::scenario(options, &dir.join("ceiling"), table).await?;
    }
    if options.wants("login") {
        login::scenario(options, &dir.join("login"), table)?;
    }
    if options.wants("mixed") {
        mixed::scenario(options, &dir.join("mixed"), table)?;
    }
    if options.wants("log") {
        log::scenario(options, &dir.join("log"), table).await?;
    }
    if options.wants("export") {
        export::scenario(options, &dir.join("export"), table).await?;
    }
    Ok(())
}

/// A child process (HAProxy) killed when dropped.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits up to 5 s until `addr` accepts connections; an error naming `what` if `child` exits
/// first or the time runs out.
fn wait_listening(child: &mut std::process::Child, addr: &str, what: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect(addr).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("{what} exited: {status}"));
        }
        if Instant::now() > deadline {
            return Err(format!("{what} did not listen within 5 s"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// The PostgreSQL schemas this run made (the database's URL, the schema), dropped when it ends:
/// pgbench's tables at scale 64 alone are about 1 GB.
static SCHEMAS: std::sync::Mutex<Vec<(String, String)>> = std::sync::Mutex::new(Vec::new());

/// Drops the schemas this run made, once their gateways have stopped.
fn drop_schemas() {
    let made = std::mem::take(&mut *SCHEMAS.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    for (base, schema) in made {
        let dropped = Command::new("psql")
            .args([base.as_str(), "-q", "-c", &format!("DROP SCHEMA IF EXISTS {schema} CASCADE")])
            .env("PGOPTIONS", "-c client_min_messages=warning")
            .stdout(Stdio::null())
            .status();
        if !dropped.is_ok_and(|status| status.success()) {
            eprintln!("could not drop the schema {schema}: drop it by hand");
        }
    }
}

/// A fresh PostgreSQL schema for one configuration of the cluster scenario; its URL. The run
/// drops it when it ends.
fn fresh_schema(base: &str, name: &str) -> Result<String, String> {
    let schema = format!("bench_{name}_{}", std::process::id());
    SCHEMAS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push((base.to_owned(), schema.clone()));
    let status = Command::new("psql")
        .args([
            base,
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-c",
            &format!("DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"),
        ])
        // Not the NOTICE that the schema to drop does not exist.
        .env("PGOPTIONS", "-c client_min_messages=warning")
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
async fn cluster(options: &Options, table: &mut Table) -> Result<(), String> {
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
                table.figures(&figures, &format!("round {round}: {label}, PostgreSQL, {name}"));
                rps[i].push(figures.rps());
            }
        }
        let [without, with, three] = [0, 1, 2].map(|i| mean(rps[i].iter().copied()));
        println!(
            "\n{label}: 1 replica with Redis / without {:.3}×; 3 replicas with Redis / 1 without {:.3}×\n",
            with / without,
            three / without,
        );
    }
    Ok(())
}
