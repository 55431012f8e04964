//! The `ceiling` scenario: the gateway's authenticated balance read set against what answers the
//! same request with less to do, on the same machine, from the same generator, in one run. The
//! gateway runs with its workers set up for a host of its own ([`DEDICATED`]: pinned, a 300 µs
//! slice) and, beside it, with tokio's default workers; the ratios are the first's. Against:
//!
//! - the HAProxy peer of `xtask/peers/haproxy-balance.cfg` (HS256 check, a per-subject counter,
//!   a constant body), when `haproxy` is installed;
//! - `xtask baseline bare`: axum answering a constant body of the gateway's balance shape;
//! - `xtask baseline jwt`: the same plus an HS256 bearer check with `jsonwebtoken`.
//!
//! The five are alternated for `--rounds` rounds of `--seconds` each. The generator is `wrk`
//! (two threads, `--latency`) when it is on `PATH`, with a Lua script that cycles over
//! [`SUBJECTS`] tokens and paths; otherwise the built-in closed loop, which says so.

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use super::{
    COOP, Killed, Kind, Options, PAYERS, PAYMENTS_PER_PAYER_HOUR, SECRET, Summary, Table, did, drive, payment, setup,
    start_gateway, token,
};
use crate::client::{Connection, Server};

/// Distinct token subjects (and paths) the generator cycles over. The gateway allows each 1,000
/// requests a minute at the harness's trust and the peer counts 1,000 a minute per subject: a
/// target measured at R requests/s for S seconds stays under both while R × S / 2,000 < 1,000
/// per minute (at 110,000 requests/s, up to 18 s of load on one system within a minute, its
/// warm-up included; each system's load is a fifth of a round), and any 429 shows as non-2xx.
const SUBJECTS: usize = 2000;

/// How long each system is warmed up before the first round (at most `--seconds`).
const WARM_UP_SECONDS: u64 = 2;

/// Starts the HAProxy peer on a free port; `Ok(None)`, with a note, when `haproxy` is not
/// installed.
fn start_peer(core: Option<&str>) -> Result<Option<(Killed, String)>, String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("finding a free port: {e}"))?
        .port();
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/haproxy-balance.cfg");
    let child = on_core(core, "haproxy")
        .arg("-f")
        .arg(&config)
        .env("JWT_SECRET", SECRET)
        .env("PEER_PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let mut peer = match child {
        Ok(child) => Killed(child),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!("\n(haproxy is not installed: `apt-get install -y haproxy` for the peer comparison)\n");
            return Ok(None);
        }
        Err(e) => return Err(format!("starting haproxy: {e}")),
    };
    let addr = format!("127.0.0.1:{port}");
    super::wait_listening(&mut peer.0, &addr, &format!("haproxy -f {}", config.display()))?;
    Ok(Some((peer, addr)))
}

/// `xtask baseline <mode>` answering `body`, started from this very executable (the release
/// build in a full run, the debug build with `--quick`).
fn start_baseline(mode: &str, body: &str, core: Option<&str>) -> Result<Server, String> {
    let exe = std::env::current_exe().map_err(|e| format!("finding the xtask executable: {e}"))?;
    let mut command = on_core(core, exe);
    command.args(["baseline", mode, "--body", body]).env("ICN_GATEWAY_JWT_SECRET", SECRET);
    Server::spawn(command)
}

/// The Lua script that makes `wrk` cycle over the tokens and paths: every request is formatted
/// once in `init`, and each thread starts at its own offset.
fn wrk_script() -> String {
    let entries = (0..SUBJECTS).map(|r| {
        let path = format!("/v1/ledger/{COOP}/balance/{}", did(r % PAYERS));
        ("GET", path, token(&did(r), &["ledger:read"]), None)
    });
    cycling_script(entries, None)
}

/// The longest payments run from `wrk`: at 15,000 payments/s the payers' hour (128,000) lasts
/// 8.5 s, and `wrk` reports its rate over the whole duration even if the script stopped early.
const WRK_PAYMENTS_SECONDS: u64 = 8;

/// The Lua script that makes `wrk` send the payments the built-in generator sends (payer `p`
/// pays `p + 1` 0.01 hours, under `p`'s token); each of the `threads` threads cycles over all
/// payers and stops before any payer exceeds its hour's payments (a refusal would count as an
/// answer).
fn payments_script(threads: usize) -> String {
    let entries = (0..PAYERS).map(|p| {
        let (token, path, body) = payment(p);
        ("POST", path, token, Some(body.to_string()))
    });
    // Each thread sends a payer at most ⌈budget / PAYERS⌉ payments.
    cycling_script(entries, Some(PAYERS * (PAYMENTS_PER_PAYER_HOUR / threads.max(1) - 1)))
}

/// A `wrk` script over `entries` (method, path, token, JSON body): every request is formatted
/// once in `init`, each thread cycles over all of them from its own offset, and, with a
/// `budget`, stops after that many requests.
pub(super) fn cycling_script(
    entries: impl Iterator<Item = (&'static str, String, String, Option<String>)>,
    budget: Option<usize>,
) -> String {
    let mut script = String::from("local entries = {\n");
    for (method, path, token, body) in entries {
        let body = body.map_or_else(|| "nil".to_owned(), |body| format!("[==[{body}]==]"));
        let _ = writeln!(script, "  {{ \"{method}\", \"{path}\", \"Bearer {token}\", {body} }},");
    }
    let budget = budget.map_or_else(|| "nil".to_owned(), |budget| budget.to_string());
    let _ = writeln!(script, "}}\nlocal budget = {budget}");
    script.push_str(
        r#"local requests = {}
local i = 0
local sent = 0
local threads = 0

function setup(thread)
  thread:set("offset", threads * 997)
  threads = threads + 1
end

function init(args)
  for k, entry in ipairs(entries) do
    local headers = { ["Authorization"] = entry[3] }
    if entry[4] then
      headers["Content-Type"] = "application/json"
    end
    requests[k] = wrk.format(entry[1], entry[2], headers, entry[4])
  end
  i = (offset or 0) % #requests
end

function request()
  sent = sent + 1
  if budget and sent >= budget then
    wrk.thread:stop()
  end
  i = i % #requests + 1
  return requests[i]
end
"#,
    );
    script
}

/// Durable payments from `wrk` on a fresh gateway: the same requests as the built-in
/// generator's, from a generator that takes less of the two cores. Skipped, with a note, when
/// `wrk` is not on `PATH`.
pub(super) async fn payments_from_wrk(options: &Options, dir: &Path, table: &mut Table) -> Result<(), String> {
    if !wrk_available() {
        println!("(wrk is not on PATH: payments from the built-in generator only)");
        return Ok(());
    }
    let server = start_gateway(options, &dir.join("payments-wrk"), &[])?;
    setup(&server.addr).await?;
    let script = dir.join("payments.lua");
    std::fs::write(&script, payments_script(wrk_threads(options)))
        .map_err(|e| format!("writing {}: {e}", script.display()))?;
    let seconds = options.seconds.min(WRK_PAYMENTS_SECONDS);
    let summary = run_wrk(&script, &server.addr, options, seconds)?;
    table.row(&summary, &format!("durable payments, the same requests from wrk ({seconds} s)"));
    Ok(())
}

/// `wrk`'s threads: two (one per core), or one per connection when there are fewer.
fn wrk_threads(options: &Options) -> usize {
    options.connections.min(2)
}

/// Whether `wrk` can be run.
pub(super) fn wrk_available() -> bool {
    Command::new("wrk").arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

/// One `wrk` run against `addr`.
fn run_wrk(script: &Path, addr: &str, options: &Options, seconds: u64) -> Result<Summary, String> {
    // Pinned: one thread on the generator's core.
    let (threads, core) = if options.pinned { (1, Some(GENERATOR_CORE)) } else { (wrk_threads(options), None) };
    run_wrk_on(script, addr, options.connections, seconds, threads, core)
}

/// One `wrk` run of `threads` threads, on `core` when one is given.
pub(super) fn run_wrk_on(
    script: &Path,
    addr: &str,
    connections: usize,
    seconds: u64,
    threads: usize,
    core: Option<&str>,
) -> Result<Summary, String> {
    let output = on_core(core, "wrk")
        .arg(format!("-t{threads}"))
        .arg(format!("-c{connections}"))
        .arg(format!("-d{seconds}s"))
        .args(["--latency", "--timeout", "5s", "-s"])
        .arg(script)
        .arg(format!("http://{addr}/"))
        .output()
        .map_err(|e| format!("running wrk: {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!("wrk failed ({}): {text}{}", output.status, String::from_utf8_lossy(&output.stderr)));
    }
    let summary = parse_wrk(&text).ok_or_else(|| format!("could not read wrk's report:\n{text}"))?;
    if summary.errors > 0 {
        // Which errors: statuses other than 2xx or 3xx, or the socket's (connect, read, write,
        // timeout), as wrk reported them.
        for line in text.lines().map(str::trim) {
            if line.starts_with("Non-2xx") || line.starts_with("Socket errors") {
                println!("(wrk against {addr}: {line})");
            }
        }
    }
    Ok(summary)
}

/// `seconds` of balance reads against `addr`: from wrk with `script`, else from the built-in
/// generator.
async fn load(script: Option<&Path>, addr: &str, options: &Options, seconds: u64) -> Result<Summary, String> {
    match script {
        Some(script) => run_wrk(script, addr, options, seconds),
        None => Ok(drive(addr, Kind::Balance, options.connections, seconds).await?.summary()),
    }
}

/// Requests/s, the 50 % and 99 % latencies and the non-2xx answers and socket errors of a
/// `wrk --latency` report.
fn parse_wrk(text: &str) -> Option<Summary> {
    let mut summary = Summary { rps: f64::NAN, p50: f64::NAN, p99: f64::NAN, p999: None, errors: 0 };
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("Requests/sec:") {
            summary.rps = rest.trim().parse().ok()?;
        } else if let Some(rest) = line.strip_prefix("50%") {
            summary.p50 = wrk_millis(rest.trim())?;
        } else if let Some(rest) = line.strip_prefix("99%") {
            summary.p99 = wrk_millis(rest.trim())?;
        } else if let Some(rest) = line.strip_prefix("Non-2xx or 3xx responses:") {
            summary.errors += rest.trim().parse::<u64>().ok()?;
        } else if let Some(rest) = line.strip_prefix("Socket errors:") {
            // "connect 0, read 0, write 0, timeout 0"
            for part in rest.split(',') {
                summary.errors += part.split_whitespace().nth(1)?.parse::<u64>().ok()?;
            }
        }
    }
    (summary.rps.is_finite() && summary.p50.is_finite() && summary.p99.is_finite()).then_some(summary)
}

/// A `wrk` duration (`139.00us`, `1.20ms`, `2.01s`, `1.00m`) in milliseconds.
fn wrk_millis(text: &str) -> Option<f64> {
    let split = text.find(|c: char| c.is_ascii_alphabetic())?;
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor = match unit {
        "us" => 0.001,
        "ms" => 1.0,
        "s" => 1000.0,
        "m" => 60_000.0,
        "h" => 3_600_000.0,
        _ => return None,
    };
    Some(number * factor)
}

/// The flags of the gateway measured first, against which every other system's ratio is
/// printed: its workers set up for a host of its own (docs/DEPLOYMENT.md), one per core, each on
/// its own core, with a 300 µs scheduler slice. The same gateway with tokio's default workers is
/// measured beside it.
const DEDICATED: [&str; 4] = ["--pin-workers", "true", "--worker-slice-us", "300"];

/// `--rounds` rounds over `targets` (name, address) in turn, each run by `run` and printed as a
/// row labelled with `label`: per round, each target's summary, in `targets` order.
async fn alternated<F, Fut>(
    options: &Options,
    table: &mut Table,
    targets: &[(String, String)],
    label: &str,
    run: F,
) -> Result<Vec<Vec<Summary>>, String>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<Summary, String>>,
{
    let mut rounds = Vec::new();
    for round in 1..=options.rounds {
        let mut this = Vec::new();
        for (name, addr) in targets {
            let summary = run(addr.clone()).await?;
            table.row(&summary, &format!("round {round}: {name} ({label})"));
            this.push(summary);
        }
        rounds.push(this);
    }
    Ok(rounds)
}

/// Prints the first target's mean ratios to each other one (requests/s and p99), named `first`;
/// returns each target's mean requests/s and p99.
fn ratios(targets: &[(String, String)], rounds: &[Vec<Summary>], first: &str) -> Vec<(f64, f64)> {
    let n = rounds.len() as f64;
    println!();
    for (i, (name, _)) in targets.iter().enumerate().skip(1) {
        let rps = rounds.iter().map(|r| r[0].rps / r[i].rps).sum::<f64>() / n;
        let p99 = rounds.iter().map(|r| r[0].p99 / r[i].p99).sum::<f64>() / n;
        println!("{first} / {name}, mean of {n} rounds: requests/s {rps:.2}×, p99 latency {p99:.2}×");
    }
    (0..targets.len())
        .map(|i| {
            let rps = rounds.iter().map(|r| r[i].rps).sum::<f64>() / n;
            let p99 = rounds.iter().map(|r| r[i].p99).sum::<f64>() / n;
            (rps, p99)
        })
        .collect()
}

/// The core `--pinned` gives the generator, and the one it gives every system under test.
pub(super) const GENERATOR_CORE: &str = "0";
pub(super) const SYSTEM_CORE: &str = "1";

/// `program` as a command, run by `taskset -c <core>` when a core is given.
pub(super) fn on_core(core: Option<&str>, program: impl AsRef<std::ffi::OsStr>) -> Command {
    match core {
        Some(core) => {
            let mut command = Command::new("taskset");
            command.arg("-c").arg(core).arg(program);
            command
        }
        None => Command::new(program),
    }
}

/// `--pinned`: `wrk` (one thread) on CPU 0 and each system under test on CPU 1 (`taskset`), so
/// the generator never takes a system's core: the gateway with tokio's default workers (one, on
/// its one core), the HAProxy peer, bare axum and axum + JWT, alternated for `--rounds` rounds
/// at `--connections`. Reports the gateway's requests/s and p99 as ratios to each.
async fn pinned(options: &Options, dir: &Path, table: &mut Table) -> Result<(), String> {
    if !wrk_available() {
        return Err("--pinned needs wrk on PATH (`apt-get install -y wrk`): the built-in generator runs in this process, which is not pinned".into());
    }
    if Command::new("taskset").arg("--version").stdout(Stdio::null()).status().is_err() {
        return Err("--pinned needs taskset (util-linux)".into());
    }
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    if cores < 2 {
        return Err(format!("--pinned needs two cores, this process may use {cores}"));
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let store = format!("sqlite:{}", dir.join("pinned").join("bench.db").display());
    std::fs::create_dir_all(dir.join("pinned")).map_err(|e| e.to_string())?;
    let mut command = on_core(Some(SYSTEM_CORE), options.binary());
    command
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--store", &store])
        .args(["--open-enrollment", "true", "--trust-default", "0.9"])
        .env("ICN_GATEWAY_JWT_SECRET", SECRET)
        .env("RUST_LOG", "warn,gatewayd=info");
    let gateway = Server::spawn(command)?;
    setup(&gateway.addr).await?;
    let mut conn = Connection::open(&gateway.addr).await?;
    let path = format!("/v1/ledger/{COOP}/balance/{}", did(1));
    let (status, body) = conn.send("GET", &path, Some(&token(&did(1), &["ledger:read"])), None).await?;
    if status != 200 {
        return Err(format!("reading a balance: {status} {}", String::from_utf8_lossy(&body)));
    }
    let body = String::from_utf8(body.to_vec()).map_err(|e| e.to_string())?;
    let bare = start_baseline("bare", &body, Some(SYSTEM_CORE))?;
    let jwt = start_baseline("jwt", &body, Some(SYSTEM_CORE))?;
    let peer = start_peer(Some(SYSTEM_CORE))?;
    let mut targets = vec![("gateway balance read".to_owned(), gateway.addr.clone())];
    if let Some((_, addr)) = &peer {
        targets.push(("HAProxy peer".to_owned(), addr.clone()));
    }
    targets.push(("bare axum".to_owned(), bare.addr.clone()));
    targets.push(("axum + JWT".to_owned(), jwt.addr.clone()));
    let script = dir.join("ceiling.lua");
    std::fs::write(&script, wrk_script()).map_err(|e| format!("writing {}: {e}", script.display()))?;
    let warm_up = options.seconds.min(WARM_UP_SECONDS);
    for (_, addr) in &targets {
        run_wrk(&script, addr, options, warm_up)?;
    }
    println!(
        "(pinned: wrk -t1 on CPU {GENERATOR_CORE}, every system on CPU {SYSTEM_CORE}; each served {warm_up} s first, not counted)\n"
    );
    let script = script.as_path();
    let rounds = alternated(options, table, &targets, "pinned", |addr| async move {
        run_wrk(script, &addr, options, options.seconds)
    })
    .await?;
    let means = ratios(&targets, &rounds, "gateway, pinned");
    println!(
        "gateway, pinned, mean of {} rounds: {:.0} requests/s, p99 {:.2} ms\n",
        rounds.len(),
        means[0].0,
        means[0].1
    );
    drop(peer);
    Ok(())
}

pub(super) async fn scenario(options: &Options, dir: &Path, table: &mut Table) -> Result<(), String> {
    if options.pinned {
        return pinned(options, dir, table).await;
    }
    let gateway = start_gateway(options, &dir.join("dedicated"), &DEDICATED)?;
    let default = start_gateway(options, &dir.join("default"), &[])?;
    // Idle: started, nothing asked of it yet.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let idle = crate::client::rss(gateway.pid());
    setup(&gateway.addr).await?;
    setup(&default.addr).await?;
    // The baselines answer what the gateway answers for a member (the same bytes, so the same
    // length), whatever the path.
    let mut conn = Connection::open(&gateway.addr).await?;
    let path = format!("/v1/ledger/{COOP}/balance/{}", did(1));
    let (status, body) = conn.send("GET", &path, Some(&token(&did(1), &["ledger:read"])), None).await?;
    if status != 200 {
        return Err(format!("reading a balance: {status} {}", String::from_utf8_lossy(&body)));
    }
    let body = String::from_utf8(body.to_vec()).map_err(|e| e.to_string())?;
    let bare = start_baseline("bare", &body, None)?;
    let jwt = start_baseline("jwt", &body, None)?;
    let peer = start_peer(None)?;
    let mut targets = vec![
        ("gateway balance read, dedicated workers".to_owned(), gateway.addr.clone()),
        ("gateway balance read, default workers".to_owned(), default.addr.clone()),
    ];
    if let Some((_, addr)) = &peer {
        targets.push(("HAProxy peer".to_owned(), addr.clone()));
    }
    targets.push(("bare axum".to_owned(), bare.addr.clone()));
    targets.push(("axum + JWT".to_owned(), jwt.addr.clone()));

    let script = wrk_available().then(|| dir.join("ceiling.lua"));
    match &script {
        Some(path) => std::fs::write(path, wrk_script()).map_err(|e| format!("writing {}: {e}", path.display()))?,
        None => println!(
            "\n(wrk is not on PATH: the built-in generator drives the reads instead, which costs the \
             cores more per request; `apt-get install -y wrk` for the comparison as documented)\n"
        ),
    }
    let generator = if script.is_some() { "wrk" } else { "built-in" };
    // Each system first serves the same load for a moment, not counted, so that the first
    // round does not also measure a fresh process's first requests (its allocator and caches
    // filling, pages touched for the first time).
    let warm_up = options.seconds.min(WARM_UP_SECONDS);
    for (_, addr) in &targets {
        load(script.as_deref(), addr, options, warm_up).await?;
    }
    println!("(each system served {warm_up} s of the same load first, not counted)\n");
    let script = script.as_deref();
    let rounds = alternated(options, table, &targets, generator, |addr| async move {
        load(script, &addr, options, options.seconds).await
    })
    .await?;
    let means = ratios(&targets, &rounds, "gateway (dedicated)");
    for ((name, _), (rps, p99)) in targets.iter().zip(&means).take(2) {
        println!("{name}, mean of {} rounds: {rps:.0} requests/s, p99 {p99:.2} ms", rounds.len());
    }
    let after = crate::client::rss(gateway.pid());
    println!(
        "gateway (dedicated) resident set: idle {:.1} MB, after the reads {:.1} MB\n",
        idle as f64 / 1e6,
        after as f64 / 1e6
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_payments_script_keeps_every_payer_within_its_hour() {
        for threads in [1, 2] {
            let script = payments_script(threads);
            assert_eq!(script.matches("\"Bearer ").count(), PAYERS, "one request per payer");
            let budget: usize = script
                .lines()
                .find_map(|line| line.strip_prefix("local budget = "))
                .and_then(|n| n.parse().ok())
                .expect("a budget");
            // Each thread cycles over every payer from its own offset and sends at most
            // `budget` requests: at most ⌈budget / PAYERS⌉ to each.
            assert!(threads * budget.div_ceil(PAYERS) <= PAYMENTS_PER_PAYER_HOUR, "{threads} threads, {budget}");
            assert!(budget >= PAYERS * 90 / threads, "{threads} threads stop too early: {budget}");
        }
        let first_body =
            payments_script(2).split("[==[").nth(1).and_then(|rest| rest.split("]==]").next()).map(str::to_owned);
        let body: serde_json::Value = serde_json::from_str(&first_body.expect("a body")).expect("JSON");
        assert_eq!(body["to"], serde_json::json!(did(1)));
    }

    #[test]
    fn reads_a_wrk_report() {
        let report = "Running 1s test @ http://127.0.0.1:1/
  2 threads and 8 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   310.12us  200.01us   5.20ms   90.00%
    Req/Sec    12.50k     1.00k   14.00k    70.00%
  Latency Distribution
     50%  280.00us
     75%  350.00us
     90%  450.00us
     99%    1.20ms
  24875 requests in 1.00s, 5.20MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 4
Requests/sec:  24870.51
Transfer/sec:      5.20MB
";
        let summary = parse_wrk(report).expect("parsed");
        assert!((summary.rps - 24870.51).abs() < 1e-6);
        assert!((summary.p50 - 0.28).abs() < 1e-9);
        assert!((summary.p99 - 1.2).abs() < 1e-9);
        assert_eq!(summary.errors, 7);
        assert!(parse_wrk("Running 1s test\n").is_none());
        assert!(wrk_millis("2.01s").is_some_and(|ms| (ms - 2010.0).abs() < 1e-9));
        assert_eq!(wrk_millis("3.00m"), Some(180_000.0));
    }
}
