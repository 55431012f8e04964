//! Load harness of the event stream: memory per idle connection, and fan-out latency and
//! throughput to many subscribers of one coop, over real sockets on 127.0.0.1.
//!
//! The server runs in a child process (this example re-executed with `--role server`), so its
//! resident memory is measured apart from the clients': it opens a store, creates a coop with
//! two members, serves the stream on 127.0.0.1:0, prints its address and a member's token, and
//! answers commands on stdin (`rss`, `stats`, `produce <rate> <seconds>`, `quit`). Produced
//! events are real payments through the domain, each carrying its send time (Unix µs) in the
//! memo, so clients compute delivery latency from the event itself.
//!
//! ```text
//! cargo run --release -p gateway-ws --example ws_load -- \
//!     [--scenario idle|fanout|all] [--connections 10000] [--subscribers 1000] \
//!     [--rate 100] [--seconds 20] [--store memory|sqlite:PATH] [--nodelay on|off] \
//!     [--read-buffer BYTES]
//! ```
//!
//! Needs an open-files limit above the connection count in both processes (`ulimit -n`).
//! This is a measuring tool, not a test: it asserts nothing, it reports.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use axum::serve::ListenerExt;
use futures_util::{SinkExt, StreamExt};
use gateway_auth::{TokenConfig, TokenService};
use gateway_core::{Amount, Clock, CoopId, Did, Error, Role, ScopeSet, SystemClock};
use gateway_domain::coops::{Coops, NewCoop};
use gateway_domain::ledger::{Ledger, PaymentRequest};
use gateway_domain::ports::{EventReads, EventRecord};
use gateway_domain::trust::TrustGraph;
use gateway_store::{Store, StoreSpec};
use gateway_ws::{WsConfig, WsDeps, WsState};
use serde::Deserialize;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = Options::parse(&args);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    if options.role_server {
        runtime.block_on(server(options));
    } else {
        runtime.block_on(orchestrate(options));
    }
}

#[derive(Debug, Clone)]
struct Options {
    role_server: bool,
    scenario: String,
    connections: usize,
    subscribers: usize,
    rate: u64,
    seconds: u64,
    store: String,
    /// Whether the server sets TCP_NODELAY on accepted sockets (axum's `serve` does not).
    nodelay: bool,
    /// The server's per-socket read buffer (`WsConfig::read_buffer_bytes`), when not the default.
    read_buffer: Option<usize>,
}

impl Options {
    fn parse(args: &[String]) -> Self {
        let mut options = Options {
            role_server: false,
            scenario: "all".into(),
            connections: 10_000,
            subscribers: 1_000,
            rate: 100,
            seconds: 20,
            store: "memory".into(),
            nodelay: true,
            read_buffer: None,
        };
        let mut i = 0;
        while i < args.len() {
            let value = args.get(i + 1).cloned().unwrap_or_default();
            match args[i].as_str() {
                "--role" => options.role_server = value == "server",
                "--scenario" => options.scenario = value,
                "--connections" => options.connections = value.parse().expect("--connections N"),
                "--subscribers" => options.subscribers = value.parse().expect("--subscribers N"),
                "--rate" => options.rate = value.parse().expect("--rate N"),
                "--seconds" => options.seconds = value.parse().expect("--seconds N"),
                "--store" => options.store = value,
                "--nodelay" => options.nodelay = value != "off",
                "--read-buffer" => options.read_buffer = Some(value.parse().expect("--read-buffer BYTES")),
                other => panic!("unknown argument {other}"),
            }
            i += 2;
        }
        options
    }
}

fn did(n: u32) -> Did {
    Did::parse(&format!("did:key:z6Mkload{n}")).expect("did")
}

fn now_micros() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

/// Resident set size of this process, in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// User plus system CPU time of this process, in milliseconds.
fn cpu_millis() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks: u64 = fields.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
        + fields.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    ticks * 10
}

// ---------------------------------------------------------------------------------------------
// Server role

/// Counts outbox reads, to show how many store reads fan-out costs.
#[derive(Debug)]
struct CountingReads {
    store: Arc<Store>,
    reads: AtomicU64,
}

#[async_trait]
impl EventReads for CountingReads {
    async fn events_after(&self, coop: &CoopId, after: u64, limit: u32) -> Result<Vec<EventRecord>, Error> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.store.events_after(coop, after, limit).await
    }
    async fn current_seq(&self, coop: &CoopId) -> Result<u64, Error> {
        self.store.current_seq(coop).await
    }
    async fn oldest_seq(&self, coop: &CoopId) -> Result<u64, Error> {
        self.store.oldest_seq(coop).await
    }
    async fn prune_events(&self, keep_last: u64, older_than: u64) -> Result<u64, Error> {
        self.store.prune_events(keep_last, older_than).await
    }
}

async fn server(options: Options) {
    let spec: StoreSpec = options.store.parse().expect("store spec");
    let store = Arc::new(Store::open(&spec).await.expect("open store"));
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let coops = Coops::new(store.clone(), store.clone(), store.clone(), clock.clone());
    let graph = Arc::new(TrustGraph::new(vec![], 0.9, vec![]));
    let ledger = Arc::new(Ledger::new(store.clone(), store.clone(), graph, clock.clone()));
    let coop = CoopId::parse("load").expect("coop id");
    let request = NewCoop { id: None, name: "load".into(), coop_type: "worker".into(), description: String::new() };
    coops.create(&did(0), &coop, request).await.expect("create coop");
    coops.add_member(&coop, &did(1), Role::Member).await.expect("add member");

    let tokens = Arc::new(
        TokenService::new(TokenConfig::with_secret(b"load-harness-secret-of-32-bytes!".to_vec()), clock.clone())
            .expect("token service"),
    );
    let token = tokens.issue(&did(1), Some(&coop), ScopeSet::EMPTY).token;
    let reads = Arc::new(CountingReads { store: store.clone(), reads: AtomicU64::new(0) });
    let deps = WsDeps {
        events: reads.clone(),
        feed: store.clone(),
        tokens,
        membership: store.clone(),
        open_enrollment: false,
        clock,
        misbehavior: None,
    };
    let mut config = WsConfig::default();
    if let Some(bytes) = options.read_buffer {
        config.read_buffer_bytes = bytes;
    }
    let state = WsState::new(deps, config);
    let shutdown = state.shutdown_handle();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let nodelay = options.nodelay;
    let listener = listener.tap_io(move |tcp| {
        if nodelay {
            let _ = tcp.set_nodelay(true);
        }
    });
    tokio::spawn(async move { axum::serve(listener, gateway_ws::router(state)).await.expect("serve") });
    println!("ADDR {addr}");
    println!("TOKEN {token}");
    println!("READY");

    // Commands arrive on stdin, read by a plain thread (the runtime has no stdin support here).
    let (commands, mut lines) = tokio::sync::mpsc::channel::<String>(8);
    std::thread::spawn(move || {
        for line in std::io::stdin().lines().map_while(Result::ok) {
            if commands.blocking_send(line).is_err() {
                break;
            }
        }
    });
    while let Some(line) = lines.recv().await {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["rss"] => println!("RSS {}", rss_kib()),
            ["stats"] => println!(
                "STATS active={} reads={} cpu_ms={}",
                shutdown.active_connections(),
                reads.reads.load(Ordering::Relaxed),
                cpu_millis()
            ),
            ["produce", rate, seconds] => {
                let rate: u64 = rate.parse().expect("rate");
                let seconds: u64 = seconds.parse().expect("seconds");
                let first = store.current_seq(&coop).await.expect("seq") + 1;
                let produced = produce(&ledger, &coop, rate, seconds).await;
                println!("PRODUCED {produced} {first} {}", store.current_seq(&coop).await.expect("seq"));
            }
            ["quit"] => break,
            _ => println!("ERR unknown command {line}"),
        }
        std::io::stdout().flush().ok();
    }
}

/// Pays at `rate` per second for `seconds`, alternating direction; each memo is the send time.
async fn produce(ledger: &Ledger, coop: &CoopId, rate: u64, seconds: u64) -> u64 {
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate.max(1)));
    let total = rate * seconds;
    for n in 0..total {
        tick.tick().await;
        let (from, to) = if n % 2 == 0 { (did(0), did(1)) } else { (did(1), did(0)) };
        let request = PaymentRequest {
            from: from.to_string(),
            to: to.to_string(),
            amount: Amount::from_units(1),
            currency: None,
            memo: Some(now_micros().to_string()),
            request_signature: None,
        };
        ledger.pay(coop, request, None).await.expect("pay");
    }
    total
}

// ---------------------------------------------------------------------------------------------
// Client role: drives the server process

struct ServerProcess {
    child: Child,
    pipes: Arc<Mutex<(ChildStdin, BufReader<ChildStdout>)>>,
    addr: SocketAddr,
    token: String,
}

impl ServerProcess {
    fn start(options: &Options) -> Self {
        let exe = std::env::current_exe().expect("current exe");
        let mut child = Command::new(exe)
            .args([
                "--role",
                "server",
                "--store",
                &options.store,
                "--nodelay",
                if options.nodelay { "on" } else { "off" },
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn the server role");
        let stdin = child.stdin.take().expect("stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let (mut addr, mut token) = (None, None);
        let mut line = String::new();
        while stdout.read_line(&mut line).expect("server output") > 0 {
            if let Some(a) = line.trim().strip_prefix("ADDR ") {
                addr = Some(a.parse().expect("addr"));
            } else if let Some(t) = line.trim().strip_prefix("TOKEN ") {
                token = Some(t.to_owned());
            } else if line.trim() == "READY" {
                break;
            }
            line.clear();
        }
        Self {
            child,
            pipes: Arc::new(Mutex::new((stdin, stdout))),
            addr: addr.expect("ADDR"),
            token: token.expect("TOKEN"),
        }
    }

    /// Sends a command and waits (off the runtime's workers) for its one-line answer.
    async fn ask(&self, command: &str) -> String {
        let (pipes, command) = (self.pipes.clone(), format!("{command}\n"));
        tokio::task::spawn_blocking(move || {
            let mut pipes = pipes.lock().expect("pipes");
            pipes.0.write_all(command.as_bytes()).expect("command");
            pipes.0.flush().expect("flush");
            let mut answer = String::new();
            pipes.1.read_line(&mut answer).expect("answer");
            answer.trim().to_owned()
        })
        .await
        .expect("ask")
    }

    async fn rss(&self) -> u64 {
        self.ask("rss").await.strip_prefix("RSS ").and_then(|v| v.parse().ok()).expect("RSS")
    }

    async fn stats(&self) -> HashMap<String, u64> {
        let line = self.ask("stats").await;
        line.split_whitespace()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.parse().unwrap_or(0)))
            .collect()
    }
}

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Connects and authenticates one socket; returns it with the `current_seq` of its `AuthOk`.
async fn open(addr: SocketAddr, token: &str) -> (Socket, u64) {
    // tungstenite zero-fills its whole read buffer on every read: its 128 KiB default made the
    // clients spend half their CPU in memset, so they get the server's small buffer too.
    let config = WebSocketConfig::default().read_buffer_size(4096);
    let url = format!("ws://{addr}/v1/ws/load");
    let (mut ws, _) = tokio_tungstenite::connect_async_with_config(url, Some(config), true).await.expect("connect");
    let auth = serde_json::json!({"type": "Auth", "token": token}).to_string();
    ws.send(Message::text(auth)).await.expect("send auth");
    loop {
        match ws.next().await {
            Some(Ok(Message::Text(text))) => {
                let frame: serde_json::Value = serde_json::from_str(text.as_str()).expect("json");
                assert_eq!(frame["type"], "AuthOk", "{frame}");
                return (ws, frame["current_seq"].as_u64().expect("current_seq"));
            }
            Some(Ok(_)) => continue,
            other => panic!("no AuthOk: {other:?}"),
        }
    }
}

/// Opens `n` authenticated sockets, at most 200 handshakes in flight.
async fn open_many(addr: SocketAddr, token: &str, n: usize) -> Vec<(Socket, u64)> {
    futures_util::stream::iter(0..n).map(|_| open(addr, token)).buffer_unordered(200).collect().await
}

async fn orchestrate(options: Options) {
    let mut server = ServerProcess::start(&options);
    println!(
        "server process {} on {}, store {}, TCP_NODELAY {}",
        server.child.id(),
        server.addr,
        options.store,
        if options.nodelay { "on" } else { "off" }
    );
    if options.scenario == "idle" || options.scenario == "all" {
        idle(&server, options.connections).await;
    }
    if options.scenario == "fanout" || options.scenario == "all" {
        fanout(&server, options.subscribers, options.rate, options.seconds).await;
    }
    if let Ok(mut pipes) = server.pipes.lock() {
        let _ = pipes.0.write_all(b"quit\n");
        let _ = pipes.0.flush();
    }
    let _ = server.child.wait();
}

async fn wait_for_active(server: &ServerProcess, n: u64) {
    for _ in 0..600 {
        if server.stats().await["active"] == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the server never reached {n} active connections");
}

async fn idle(server: &ServerProcess, n: usize) {
    // One connection first, so that the per-connection figure excludes one-time allocations
    // (the hub's coop fetcher, lazily initialised runtime structures).
    let warm = open(server.addr, &server.token).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = server.rss().await;
    let started = Instant::now();
    let sockets = open_many(server.addr, &server.token, n).await;
    let opened_in = started.elapsed();
    wait_for_active(server, n as u64 + 1).await;
    // Keep reading (so pings are answered) while settling.
    let readers: Vec<_> = sockets
        .into_iter()
        .map(|(mut ws, _)| tokio::spawn(async move { while let Some(Ok(_)) = ws.next().await {} }))
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = server.rss().await;
    let per = (after.saturating_sub(before)) as f64 * 1024.0 / n as f64;
    println!("== idle: {n} authenticated connections opened in {:.1} s", opened_in.as_secs_f64());
    println!("server RSS before {before} KiB, after {after} KiB: {per:.0} bytes per connection");
    for reader in &readers {
        reader.abort();
    }
    drop(warm);
    wait_for_active(server, 0).await;
    println!("server RSS after closing them: {} KiB", server.rss().await);
}

/// What one subscriber saw.
#[derive(Default)]
struct Seen {
    latencies_us: Vec<u32>,
    gaps: u64,
    duplicates: u64,
    last: u64,
}

#[derive(Deserialize)]
struct EventFrame<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    seq: Option<u64>,
    #[serde(borrow)]
    event: Option<EventBody<'a>>,
}

#[derive(Deserialize)]
struct EventBody<'a> {
    #[serde(borrow)]
    data: EventData<'a>,
}

#[derive(Deserialize)]
struct EventData<'a> {
    memo: Option<&'a str>,
}

async fn fanout(server: &ServerProcess, subscribers: usize, rate: u64, seconds: u64) {
    let sockets = open_many(server.addr, &server.token, subscribers).await;
    wait_for_active(server, subscribers as u64).await;
    // Nothing else writes to the coop, so every subscriber expects exactly the produced events.
    let total = rate * seconds;
    let tasks: Vec<_> = sockets
        .into_iter()
        .map(|(mut ws, current)| {
            tokio::spawn(async move {
                let mut seen = Seen { last: current, ..Seen::default() };
                while seen.last < current + total {
                    let message = match tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
                        Ok(Some(Ok(message))) => message,
                        _ => break,
                    };
                    let Message::Text(text) = message else { continue };
                    let received = now_micros();
                    let frame: EventFrame<'_> = serde_json::from_str(text.as_str()).expect("frame");
                    if frame.kind != "Event" {
                        continue;
                    }
                    let seq = frame.seq.expect("seq");
                    if seq <= seen.last {
                        seen.duplicates += 1;
                        continue;
                    }
                    if seq != seen.last + 1 {
                        seen.gaps += 1;
                    }
                    seen.last = seq;
                    if let Some(sent) = frame.event.and_then(|e| e.data.memo).and_then(|m| m.parse::<u64>().ok()) {
                        seen.latencies_us.push(received.saturating_sub(sent).min(u32::MAX as u64) as u32);
                    }
                }
                seen
            })
        })
        .collect();
    let stats_before = server.stats().await;
    let client_cpu_before = cpu_millis();
    let started = Instant::now();
    let answer = server.ask(&format!("produce {rate} {seconds}")).await;
    let produce_secs = started.elapsed().as_secs_f64();
    let stats_after = server.stats().await;
    let parts: Vec<u64> = answer.split_whitespace().skip(1).map(|v| v.parse().expect("number")).collect();
    let (produced, first, last) = (parts[0], parts[1], parts[2]);
    let mut latencies = Vec::new();
    let (mut gaps, mut duplicates, mut incomplete) = (0, 0, 0);
    for task in tasks {
        let seen = task.await.expect("subscriber");
        gaps += seen.gaps;
        duplicates += seen.duplicates;
        if seen.last < last {
            incomplete += 1;
        }
        latencies.extend(seen.latencies_us);
    }
    let drained_secs = started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let pct = |p: f64| latencies.get(((latencies.len() as f64 * p) as usize).min(latencies.len().saturating_sub(1)));
    let ms = |v: Option<&u32>| v.map_or(f64::NAN, |v| f64::from(*v) / 1000.0);
    let deliveries = latencies.len() as u64;
    println!(
        "== fanout: {subscribers} subscribers, {produced} events (seq {first}..={last}) at {rate}/s over {produce_secs:.1} s"
    );
    println!(
        "deliveries {deliveries} (expected {}), {:.0} per second over the production window ({:.1} s until the last subscriber finished)",
        produced * subscribers as u64,
        deliveries as f64 / produce_secs,
        drained_secs
    );
    println!(
        "latency ms: p50 {:.2}, p90 {:.2}, p99 {:.2}, p99.9 {:.2}, max {:.2}",
        ms(pct(0.50)),
        ms(pct(0.90)),
        ms(pct(0.99)),
        ms(pct(0.999)),
        ms(latencies.last())
    );
    println!("gaps {gaps}, duplicates {duplicates}, subscribers that missed the end {incomplete}");
    let client_cpu = cpu_millis().saturating_sub(client_cpu_before) as f64 / 1000.0;
    println!("clients: CPU {client_cpu:.1} s ({:.2} cores over the production window)", client_cpu / produce_secs);
    let cpu = stats_after["cpu_ms"].saturating_sub(stats_before["cpu_ms"]) as f64 / 1000.0;
    println!(
        "server: {} outbox reads for {produced} events, CPU {cpu:.1} s over {produce_secs:.1} s ({:.2} cores), RSS {} KiB",
        stats_after["reads"].saturating_sub(stats_before["reads"]),
        cpu / produce_secs,
        server.rss().await
    );
}
