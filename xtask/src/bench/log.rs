//! The `log` scenario: what the coop's log (INTERFACE.md §12) costs and how fast it answers.
//!
//! - durable payments with the checkpointer running and paused (`ICN_GATEWAY_LOG_CHECKPOINTER=false`,
//!   which only this scenario sets), a fresh pair of gateways each round, alternated;
//! - how long after its commit a payment is covered by a signed checkpoint, at 500 payments/s
//!   (paced, 16 connections), and by a checkpoint a local witness (`gatewayd witness`, a child
//!   process) has cosigned;
//! - `log/proof` reads at `--connections` connections;
//! - the log's storage per entry beyond the entries themselves, from SQLite's `dbstat` (through
//!   the `sqlite3` command-line shell, when it is on `PATH`).

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{COOP, Kind, Options, PAYERS, SECRET, Table, Work, did, drive, mean, payment, request_loop, setup, token};
use crate::client::{Connection, Server};

const PASSPHRASE: &str = "bench passphrase for the coop log scenario";
/// The paced rate of the latency runs.
const PACED_RATE: u32 = 500;
const PACED_CONNECTIONS: usize = 16;

pub(super) async fn scenario(options: &Options, dir: &Path, table: &mut Table) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let keystore = dir.join("keystore.json");
    let passphrase = dir.join("passphrase");
    std::fs::write(&passphrase, PASSPHRASE).map_err(|e| e.to_string())?;
    let init = Command::new(options.binary())
        .args(["keystore", "init", "--keystore"])
        .arg(&keystore)
        .arg("--passphrase-file")
        .arg(&passphrase)
        .output()
        .map_err(|e| format!("gatewayd keystore init: {e}"))?;
    if !init.status.success() {
        return Err(format!("gatewayd keystore init: {}", String::from_utf8_lossy(&init.stderr)));
    }
    let keys = [
        "--keystore".to_owned(),
        keystore.display().to_string(),
        "--passphrase-file".to_owned(),
        passphrase.display().to_string(),
    ];

    // Payments with the checkpointer running and paused.
    let mut rounds = Vec::new();
    let mut storage_db = None;
    for round in 1..=options.rounds {
        let on_dir = dir.join(format!("on-{round}"));
        let running = start(options, &on_dir, &keys, &[], false)?;
        let paused = start(options, &dir.join(format!("off-{round}")), &keys, &[], true)?;
        setup(&running.addr).await?;
        setup(&paused.addr).await?;
        let with = drive(&running.addr, Kind::Payments, options.connections, options.seconds).await?;
        let without = drive(&paused.addr, Kind::Payments, options.connections, options.seconds).await?;
        table.figures(&with, &format!("round {round}: durable payments, log checkpointed"));
        table.figures(&without, &format!("round {round}: durable payments, checkpointer paused"));
        rounds.push((with, without));
        // Let the log catch up before the gateway stops, for the storage figure.
        tokio::time::sleep(Duration::from_secs(2)).await;
        drop(running);
        storage_db = Some(on_dir.join("bench.db"));
    }
    let ratio = mean(rounds.iter().map(|(with, without)| with.rps() / without.rps()));
    let rate = mean(rounds.iter().map(|(with, _)| with.rps()));
    println!(
        "\npayments with the log / paused, mean of {} alternations: requests/s {ratio:.3}× ({rate:.0}/s with the log)\n",
        rounds.len()
    );
    if let Some(db) = storage_db {
        storage(&db);
    }

    // Checkpoint latency at the paced rate, then with a local witness.
    let latency_dir = dir.join("latency");
    let gateway = start(options, &latency_dir, &keys, &[], false)?;
    setup(&gateway.addr).await?;
    let (signed, _) = paced(&gateway.addr, options, None).await?;
    report("signed checkpoint covers a payment", &signed);

    // Proof reads, on the same gateway's log.
    let proofs = drive_proofs(&gateway.addr, options).await?;
    table.figures(&proofs, "log/proof reads (inclusion proof + signed checkpoint)");
    pinned_proofs(options, dir, &keys, table).await?;
    let origin = "localhost/coops/bench";
    let mut conn = Connection::open(&gateway.addr).await?;
    let (_, body) = conn.send("GET", &format!("/v1/coops/{COOP}/log/key"), None, None).await?;
    let log_vkey = String::from_utf8_lossy(&body).lines().last().unwrap_or_default().to_owned();
    drop(conn);
    drop(gateway);

    let witness_key = dir.join("witness.key");
    let mut command = Command::new(options.binary());
    command
        .args(["witness", "--listen", "127.0.0.1:0", "--name", "bench.witness/w1", "--key"])
        .arg(&witness_key)
        .arg("--state")
        .arg(dir.join("witness.state"))
        .arg("--log")
        .arg(format!("{origin}={log_vkey}"))
        .env("RUST_LOG", "warn");
    let witness = Server::spawn(command)?;
    let vkey = Command::new(options.binary())
        .args(["witness", "vkey", "--name", "bench.witness/w1", "--key"])
        .arg(&witness_key)
        .output()
        .map_err(|e| e.to_string())?;
    let witness_vkey = String::from_utf8_lossy(&vkey.stdout).trim().to_owned();
    let witness_flag = format!("bench.witness/w1={witness_vkey}@http://{}", witness.addr);
    let gateway = start(options, &latency_dir, &keys, &["--witness", &witness_flag, "--witness-quorum", "1"], false)?;
    let (signed, cosigned) = paced(&gateway.addr, options, Some("bench.witness/w1")).await?;
    report("signed checkpoint covers a payment (witness configured)", &signed);
    report("cosigned checkpoint covers a payment (one local witness)", &cosigned);
    Ok(())
}

/// A gateway of this scenario on a SQLite file in `dir`, with the keystore, `extra` flags and,
/// when `paused`, no checkpointer.
fn start(options: &Options, dir: &Path, keys: &[String], extra: &[&str], paused: bool) -> Result<Server, String> {
    start_on(options, dir, keys, extra, paused, None)
}

/// [`start`], the gateway on `core` when one is given (`taskset`).
fn start_on(
    options: &Options,
    dir: &Path,
    keys: &[String],
    extra: &[&str],
    paused: bool,
    core: Option<&str>,
) -> Result<Server, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let mut command = super::ceiling::on_core(core, options.binary());
    command
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
        .arg("--store")
        .arg(format!("sqlite:{}", dir.join("bench.db").display()))
        .args(["--open-enrollment", "true", "--trust-default", "0.9"])
        // The checkpoint watcher reads a public route every 5 ms: through the trusted-proxy
        // header from addresses in turn, so that the per-address limit of public reads (20 a
        // second) does not slow the measurement it makes.
        .args(["--trusted-proxy", "127.0.0.1"])
        .args(keys)
        .args(extra)
        .env("ICN_GATEWAY_JWT_SECRET", SECRET)
        .env("RUST_LOG", "warn,gatewayd=info");
    if paused {
        command.env("ICN_GATEWAY_LOG_CHECKPOINTER", "false");
    }
    Server::spawn(command)
}

/// Milliseconds from each payment's answer to the first checkpoint seen covering it: signed,
/// and cosigned by `witness` when one is named.
type Latencies = Vec<f64>;

/// Payments at [`PACED_RATE`] per second for `--seconds` (at most 10), while another connection
/// reads the checkpoint every 5 ms; then the latencies.
async fn paced(addr: &str, options: &Options, witness: Option<&str>) -> Result<(Latencies, Latencies), String> {
    let seconds = options.seconds.min(10);
    let stop = Arc::new(AtomicBool::new(false));
    // The checkpoints seen: (size, when, cosigned).
    let watcher = {
        let (addr, stop, witness) = (addr.to_owned(), stop.clone(), witness.map(str::to_owned));
        tokio::spawn(async move {
            let mut seen: Vec<(u64, Instant, bool)> = Vec::new();
            let mut conn = Connection::open(&addr).await?;
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let client = format!("10.9.{}.{}", (n >> 8) & 0xff, n & 0xff);
                let path = format!("/v1/coops/{COOP}/log/checkpoint");
                let (status, body) = conn.send_with("GET", &path, None, None, &[("x-forwarded-for", &client)]).await?;
                if status == 200 {
                    let text = String::from_utf8_lossy(&body);
                    let size: u64 = text.lines().nth(1).and_then(|l| l.parse().ok()).unwrap_or(0);
                    let cosigned = witness.as_deref().is_some_and(|w| text.contains(&format!("\u{2014} {w} ")));
                    if seen.last().is_none_or(|(s, _, c)| *s != size || *c != cosigned) {
                        seen.push((size, Instant::now(), cosigned));
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Ok::<_, String>(seen)
        })
    };
    let mut senders = Vec::new();
    let per_connection = f64::from(PACED_RATE) / PACED_CONNECTIONS as f64;
    for c in 0..PACED_CONNECTIONS {
        let addr = addr.to_owned();
        senders.push(tokio::spawn(async move {
            let mut conn = Connection::open(&addr).await?;
            let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / per_connection));
            let deadline = Instant::now() + Duration::from_secs(seconds);
            let mut committed = Vec::new();
            let mut p = c;
            while Instant::now() < deadline {
                tick.tick().await;
                let (token, path, body) = payment(p % PAYERS);
                p += PACED_CONNECTIONS;
                let (status, headers, _) = conn.exchange("POST", &path, Some(&token), Some(&body), &[]).await?;
                if status == 201 {
                    let seq: u64 = headers
                        .get("icn-event-seq")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse().ok())
                        .ok_or("a payment's answer without ICN-Event-Seq")?;
                    committed.push((seq, Instant::now()));
                }
            }
            Ok::<_, String>(committed)
        }));
    }
    let mut committed = Vec::new();
    for sender in senders {
        committed.extend(sender.await.map_err(|e| e.to_string())??);
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::Relaxed);
    let seen = watcher.await.map_err(|e| e.to_string())??;
    // The coop was created on this gateway: entry 0 is LogOpened after event 0, so event `seq`
    // is entry `seq`, covered by a checkpoint of size > seq.
    let latency = |cosigned: bool| -> Latencies {
        committed
            .iter()
            .map(|(seq, at)| {
                seen.iter()
                    .find(|(size, when, c)| *size > *seq && (!cosigned || *c) && *when >= *at)
                    .map_or(f64::INFINITY, |(_, when, _)| when.duration_since(*at).as_secs_f64() * 1e3)
            })
            .collect()
    };
    Ok((latency(false), if witness.is_some() { latency(true) } else { Vec::new() }))
}

fn report(what: &str, latencies: &Latencies) {
    let mut sorted = latencies.clone();
    sorted.sort_by(f64::total_cmp);
    let at = |p: f64| sorted.get(((sorted.len() as f64 * p) as usize).min(sorted.len().saturating_sub(1))).copied();
    let covered = sorted.iter().filter(|l| l.is_finite()).count();
    println!(
        "{what}: {} payments at {PACED_RATE}/s, {covered} covered; after p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        sorted.len(),
        at(0.5).unwrap_or(f64::NAN),
        at(0.99).unwrap_or(f64::NAN),
        sorted.last().copied().unwrap_or(f64::NAN),
    );
}

/// `log/proof` reads from `wrk -t1` on CPU 0 against a gateway alone on CPU 1 (`taskset`), as
/// `ceiling --pinned` places them: the gateway's own figure, not the share of two cores it gets
/// beside the built-in generator. Its log holds the payments of a few seconds first. Each request
/// is one of 2,000 (another member, another event), for at most 5 s after 1 s of warm-up (640
/// members' per-DID allowance, 1,000 a minute each, then covers over 100,000 proofs/s). Skipped,
/// with a note, without `wrk`, `taskset` or two cores.
async fn pinned_proofs(options: &Options, dir: &Path, keys: &[String], table: &mut Table) -> Result<(), String> {
    use super::ceiling::{GENERATOR_CORE, SYSTEM_CORE, cycling_script, run_wrk_on, wrk_available};
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let taskset = Command::new("taskset").arg("--version").stdout(std::process::Stdio::null()).status().is_ok();
    if !wrk_available() || !taskset || cores < 2 {
        println!("(no pinned proof figure: it needs wrk, taskset and two cores)");
        return Ok(());
    }
    let gateway = start_on(options, &dir.join("proofs-pinned"), keys, &[], false, Some(SYSTEM_CORE))?;
    setup(&gateway.addr).await?;
    drive(&gateway.addr, Kind::Payments, options.connections, options.seconds.min(5)).await?;
    let size = settled_size(&gateway.addr).await?;
    let entries = (0..2_000u64).map(|n| {
        let seq = 1 + n * 7919 % (size - 1);
        let path = format!("/v1/coops/{COOP}/log/proof?seq={seq}");
        ("GET", path, token(&did((n % PAYERS as u64) as usize), &["ledger:read"]), None)
    });
    let script = dir.join("proofs.lua");
    std::fs::write(&script, cycling_script(entries, None)).map_err(|e| format!("writing {}: {e}", script.display()))?;
    run_wrk_on(&script, &gateway.addr, options.connections, 1, 1, Some(GENERATOR_CORE))?;
    let seconds = options.seconds.min(5);
    let summary = run_wrk_on(&script, &gateway.addr, options.connections, seconds, 1, Some(GENERATOR_CORE))?;
    table.row(
        &summary,
        &format!("log/proof reads, pinned (wrk -t1 on CPU {GENERATOR_CORE}, the gateway on CPU {SYSTEM_CORE}; {size} entries)"),
    );
    Ok(())
}

/// The size of the coop's signed log once it stops growing (two reads 500 ms apart agree).
async fn settled_size(addr: &str) -> Result<u64, String> {
    let mut conn = Connection::open(addr).await?;
    let path = format!("/v1/coops/{COOP}/log/checkpoint");
    let mut last = 0;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (_, body) = conn.send_with("GET", &path, None, None, &[("x-forwarded-for", "10.8.0.2")]).await?;
        let size: u64 = String::from_utf8_lossy(&body).lines().nth(1).and_then(|l| l.parse().ok()).unwrap_or(0);
        if size >= 2 && size == last {
            return Ok(size);
        }
        last = size;
    }
    Err(format!("the log did not settle within 20 s (size {last})"))
}

/// Proof reads by members, over the events of the coop so far.
async fn drive_proofs(addr: &str, options: &Options) -> Result<super::Figures, String> {
    let mut conn = Connection::open(addr).await?;
    let path = format!("/v1/coops/{COOP}/log/checkpoint");
    let (_, body) = conn.send_with("GET", &path, None, None, &[("x-forwarded-for", "10.8.0.1")]).await?;
    let size: u64 = String::from_utf8_lossy(&body).lines().nth(1).and_then(|l| l.parse().ok()).unwrap_or(0);
    if size < 2 {
        return Err(format!("the log has no signed checkpoint to prove against (size {size})"));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for c in 0..options.connections {
        // Each request as another member (the per-DID limit is 1,000 a minute), each for another
        // event.
        let work: Vec<Work> = (0..PAYERS as u64)
            .map(|i| {
                let n = c as u64 * PAYERS as u64 + i;
                let seq = 1 + n * 7919 % (size - 1);
                let path = format!("/v1/coops/{COOP}/log/proof?seq={seq}");
                (token(&did((n % PAYERS as u64) as usize), &["ledger:read"]), path, None::<Value>, None)
            })
            .collect();
        tasks.push(tokio::spawn(request_loop(addr.to_owned(), Kind::Balance, work, None, stop.clone())));
    }
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(options.seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut tallies = Vec::new();
    for task in tasks {
        tallies.push(task.await.map_err(|e| e.to_string())??.0);
    }
    Ok(super::Figures::of(tallies, started.elapsed().as_secs_f64()))
}

/// The log's bytes per entry beyond the entries' own text, from `dbstat`. Full bundles hold 256
/// entries, each after its 2-byte length.
fn storage(db: &Path) {
    let tables = "('log_entries', 'log_bundles', 'log_tiles', 'coop_logs')";
    let query = format!(
        "SELECT (SELECT SUM(pgsize) FROM dbstat WHERE name IN {tables}), \
         (SELECT IFNULL(SUM(LENGTH(CAST(entry AS BLOB))), 0) FROM log_entries) \
           + (SELECT IFNULL(SUM(LENGTH(bundle)), 0) - 512 * COUNT(*) FROM log_bundles), \
         (SELECT COUNT(*) FROM log_entries) + 256 * (SELECT COUNT(*) FROM log_bundles), \
         (SELECT SUM(unused) FROM dbstat WHERE name IN {tables}), \
         (SELECT SUM(LENGTH(hashes)) FROM log_tiles), \
         512 * (SELECT COUNT(*) FROM log_bundles);"
    );
    let output = Command::new("sqlite3").arg(db).arg(query).output();
    match output {
        Ok(output) if output.status.success() => {
            let text = String::from_utf8_lossy(&output.stdout);
            let fields: Vec<f64> = text.trim().split('|').filter_map(|f| f.parse().ok()).collect();
            if let [pages, entries, count, unused, hashes, lengths] = fields[..]
                && count > 0.0
            {
                println!(
                    "log storage: {count:.0} entries, {:.1} bytes each on disk, of which {:.1} beyond the entry's text \
                     ({:.1} of hashes, {:.1} of free space in pages, {:.1} of bundles' entry lengths, {:.1} of row \
                     keys and B-tree structure)\n",
                    pages / count,
                    (pages - entries) / count,
                    hashes / count,
                    unused / count,
                    lengths / count,
                    (pages - entries - unused - hashes - lengths) / count
                );
            } else {
                println!("(log storage: sqlite3 answered {text})");
            }
        }
        _ => println!("(sqlite3 with dbstat is not available: no storage figure)"),
    }
}
