//! The `export` scenario: the treasurer's export (INTERFACE.md §13) of a coop whose log holds
//! 1,000,000 payments (`--quick`: 20,000), on SQLite, as CSV and as Beancount. The target is the
//! issue's: 1,000,000 transactions in at most 10 s, with the gateway's resident memory growing by
//! at most 20 MB.
//!
//! Making a million payments through the API would take most of an hour (and the velocity
//! limit), so the log is seeded: a gateway creates the coop and its members (their entries are
//! logged as usual) and stops; the `sqlite3` shell then appends `PaymentCreated` entries to the
//! coop's log in its database, in the entries' exact shape, and moves the log's head (size and
//! signed size) and the coop's event counter past them; a new gateway on that database serves
//! the export. The ledger's own tables are not touched: the export reads only the log. The
//! gateway's `VmRSS` (`/proc/<pid>/status`) is sampled every 10 ms from before the request to its
//! last byte; the growth is the peak less the value before.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;

use super::{COOP, Options, PAYERS, Table, did, setup, start_gateway, token};

/// Transactions of a full run.
const FULL: u64 = 1_000_000;
/// Transactions of a `--quick` run.
const QUICK: u64 = 20_000;
/// The bounds at 1,000,000 transactions.
const TARGET_SECONDS: f64 = 10.0;
const TARGET_GROWTH_MB: f64 = 20.0;

pub(super) async fn scenario(options: &Options, dir: &Path, table: &mut Table) -> Result<(), String> {
    let count = if options.quick { QUICK } else { FULL };
    let db = dir.join("bench.db");
    {
        let server = start_gateway(options, dir, &[])?;
        setup(&server.addr).await?;
        logged(&db)?;
    }
    let started = Instant::now();
    seed(&db, count)?;
    println!(
        "\nexport: {count} PaymentCreated entries appended to the coop's log with sqlite3 in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let server = start_gateway(options, dir, &[])?;
    let admin = token(&did(0), &["ledger:read"]);
    for format in ["csv", "beancount"] {
        let run = export(&server.addr, &admin, format, server.pid()).await?;
        let transactions = match format {
            "csv" => run.lines.saturating_sub(1),
            _ => run
                .tail
                .split("End of the export: ")
                .nth(1)
                .and_then(|rest| rest.split(' ').next())
                .and_then(|n| n.parse().ok())
                .unwrap_or(0),
        };
        if run.status != 200 || transactions != count {
            println!(
                "export {format}: answer {} with {transactions} transactions, not 200 with {count}: {}",
                run.status, run.tail
            );
            table.unexpected += 1;
            continue;
        }
        let growth_mb = (run.peak_kb.saturating_sub(run.before_kb)) as f64 / 1024.0;
        let mb = run.bytes as f64 / 1e6;
        let verdict = if count < FULL {
            "(quick run: the targets are for 1,000,000)".to_owned()
        } else if run.seconds <= TARGET_SECONDS && growth_mb <= TARGET_GROWTH_MB {
            format!("within the targets (≤ {TARGET_SECONDS} s, ≤ {TARGET_GROWTH_MB} MB)")
        } else {
            format!("OUTSIDE the targets (≤ {TARGET_SECONDS} s, ≤ {TARGET_GROWTH_MB} MB)")
        };
        println!(
            "export {format} (SQLite): {transactions} transactions, {mb:.1} MB in {:.2} s ({:.0} transactions/s, {:.1} MB/s); \
             gateway RSS {:.1} MB before, peak {:.1} MB, growth {growth_mb:.1} MB {verdict}",
            run.seconds,
            transactions as f64 / run.seconds,
            mb / run.seconds,
            run.before_kb as f64 / 1024.0,
            run.peak_kb as f64 / 1024.0,
        );
    }
    println!();
    Ok(())
}

/// Runs `sql` with the `sqlite3` shell on `db`; its output.
fn sqlite(db: &Path, sql: &str) -> Result<String, String> {
    let output = Command::new("sqlite3")
        .arg(db)
        .arg(sql)
        .output()
        .map_err(|e| format!("the export scenario needs the sqlite3 shell (apt-get install sqlite3): {e}"))?;
    if !output.status.success() {
        return Err(format!("sqlite3: {}", String::from_utf8_lossy(&output.stderr)));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
}

/// Waits until the coop's log holds every event of the coop (the checkpointer follows the
/// commits within a second).
fn logged(db: &Path) -> Result<(), String> {
    let query = format!(
        "SELECT (SELECT seq FROM event_counters WHERE coop_id = '{COOP}') - \
         (SELECT after_seq + size - 1 FROM coop_logs WHERE coop_id = '{COOP}');"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if sqlite(db, &query)? == "0" {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err("the coop's log did not catch up with its events within 60 s".into());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Appends `count` payments between the coop's members to its log, dated over the last
/// `count / 1000` seconds.
fn seed(db: &Path, count: u64) -> Result<(), String> {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_err(|e| e.to_string())?.as_secs();
    let first = now - count / 1000 - 10;
    let mut payers = String::new();
    for n in 0..PAYERS {
        let _ = write!(payers, "{}({n},'{}')", if n > 0 { "," } else { "" }, did(n));
    }
    let sql = format!(
        "BEGIN;
         CREATE TEMP TABLE payers(k INTEGER PRIMARY KEY, did TEXT NOT NULL);
         INSERT INTO payers VALUES {payers};
         CREATE TEMP TABLE head AS SELECT after_seq, size FROM coop_logs WHERE coop_id = '{COOP}';
         WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < {count})
         INSERT INTO log_entries (coop_id, idx, entry)
         SELECT '{COOP}', h.size + n.i,
                '{{\"seq\":' || (h.after_seq + h.size + n.i) ||
                ',\"event\":{{\"type\":\"PaymentCreated\",\"coop_id\":\"{COOP}\",\"timestamp\":' || ({first} + n.i / 1000) ||
                ',\"data\":{{\"id\":\"seeded-' || printf('%08d', n.i) || '\",\"kind\":\"payment\",\"from\":\"' || a.did ||
                '\",\"to\":\"' || b.did || '\",\"amount\":0.01,\"currency\":\"hours\",\"memo\":\"seeded payment ' || n.i ||
                '\",\"timestamp\":' || ({first} + n.i / 1000) || '}}}}}}'
         FROM n CROSS JOIN head h JOIN payers a ON a.k = n.i % {PAYERS} JOIN payers b ON b.k = (n.i + 1) % {PAYERS};
         UPDATE coop_logs SET size = size + {count}, signed_size = size + {count} WHERE coop_id = '{COOP}';
         UPDATE event_counters SET seq = (SELECT after_seq + size - 1 FROM coop_logs WHERE coop_id = '{COOP}')
          WHERE coop_id = '{COOP}';
         COMMIT;
         SELECT size FROM coop_logs WHERE coop_id = '{COOP}';"
    );
    let size = sqlite(db, &sql)?;
    println!("export: the coop's log now holds {size} entries");
    Ok(())
}

/// What one export measured.
struct Run {
    status: u16,
    seconds: f64,
    bytes: u64,
    lines: u64,
    /// The last bytes of the body, as text.
    tail: String,
    before_kb: u64,
    peak_kb: u64,
}

/// The gateway's resident memory, kB.
fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| status.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// `GET …/export?format=<format>`, read to its end as it streams, while a thread samples the
/// gateway's resident memory.
async fn export(addr: &str, token: &str, format: &str, pid: u32) -> Result<Run, String> {
    let stream = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let request = hyper::Request::get(format!("/v1/ledger/{COOP}/export?format={format}"))
        .header("host", addr)
        .header("authorization", format!("Bearer {token}"))
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let before_kb = rss_kb(pid);
    let peak = Arc::new(AtomicU64::new(before_kb));
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, stop) = (peak.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kb(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let started = Instant::now();
    let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let mut body = response.into_body();
    let (mut bytes, mut lines) = (0u64, 0u64);
    let mut tail: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| format!("the export's body: {e}"))?;
        if let Some(data) = frame.data_ref() {
            bytes += data.len() as u64;
            lines += data.iter().filter(|b| **b == b'\n').count() as u64;
            tail.extend_from_slice(data);
            if tail.len() > 4096 {
                tail.drain(..tail.len() - 512);
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    let tail = String::from_utf8_lossy(&tail[tail.len().saturating_sub(512)..]).into_owned();
    Ok(Run { status, seconds, bytes, lines, tail, before_kb, peak_kb: peak.load(Ordering::Relaxed) })
}
