//! A gateway whose PostgreSQL goes away: every request that needs the database is answered 503
//! within about a second (never 500, never the pool's old 5 s wait), `/readyz` says so, and the
//! gateway serves again by itself once the database is back (INTERFACE.md §10).
//!
//! The test starts its own PostgreSQL (the machine's `/usr/lib/postgresql/15/bin`) on a free port
//! in a temporary directory, and stops only that one; the shared server is never touched. It
//! fails loudly when the binaries are missing.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;

use support::{json_request, login, serve_in_process};

const BIN: &str = "/usr/lib/postgresql/15/bin";

/// A private PostgreSQL server; stopped (immediately) when dropped.
struct PrivateServer {
    data: PathBuf,
    port: u16,
    process: Option<Child>,
    _dir: tempfile::TempDir,
}

/// Runs a PostgreSQL binary as the `postgres` user when this process is root (the server
/// refuses to run as root), directly otherwise.
fn pg_command(binary: &str) -> Command {
    let path = format!("{BIN}/{binary}");
    if is_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--", &path]);
        command
    } else {
        Command::new(path)
    }
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}

impl PrivateServer {
    fn init() -> Self {
        assert!(Path::new(BIN).join("initdb").exists(), "PostgreSQL binaries are missing from {BIN}");
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        if is_root() {
            let status = Command::new("chown").args(["-R", "postgres", dir.path().to_str().unwrap()]).status().unwrap();
            assert!(status.success(), "chown of the private server's directory");
        }
        let out = pg_command("initdb")
            .args(["-D", data.to_str().unwrap(), "-A", "trust", "-U", "postgres", "--no-sync"])
            .output()
            .unwrap();
        assert!(out.status.success(), "initdb: {}", String::from_utf8_lossy(&out.stderr));
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut server = Self { data, port, process: None, _dir: dir };
        server.start();
        server
    }

    fn start(&mut self) {
        let child = pg_command("postgres")
            .args(["-D", self.data.to_str().unwrap(), "-p", &self.port.to_string(), "-k", self.data.to_str().unwrap()])
            .args(["-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.process = Some(child);
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(started.elapsed() < Duration::from_secs(30), "the private PostgreSQL did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        // Accepting TCP is not accepting queries yet.
        let ready = || {
            pg_command("pg_isready")
                .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
                .status()
                .is_ok_and(|s| s.success())
        };
        while !ready() {
            assert!(started.elapsed() < Duration::from_secs(30), "the private PostgreSQL did not become ready");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the server at once, as a crash would (`pg_ctl stop -m immediate`); a frozen one is
    /// resumed first, or it could not stop.
    fn stop(&mut self) {
        if self.data.join("postmaster.pid").exists() {
            signal_server(self, "CONT");
        }
        let _ = pg_command("pg_ctl").args(["stop", "-m", "immediate", "-D", self.data.to_str().unwrap()]).output();
        if let Some(mut child) = self.process.take() {
            let _ = child.wait();
        }
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A gateway over the private server (open enrollment), its coop `id` named `name`, and the token
/// of that coop's admin (seed 1).
async fn serve_with_coop(server: &PrivateServer, id: &str, name: &str) -> (support::InProcess, String) {
    let gateway = serve_in_process(&server.url(), &["--open-enrollment", "true", "--trust-default", "0.9"]).await;
    let scopes = ["coop:read", "coop:write", "ledger:read", "ledger:write"];
    let token = login(&gateway.api, 1, id, &scopes).await;
    let create = json!({ "name": name, "coop_type": "worker" });
    let (status, body) = json_request(&gateway.api, "POST", "/v1/coops", Some(create), Some(&token)).await;
    assert_eq!(status, 201, "{body}");
    (gateway, token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_postgresql_is_503_within_a_second_and_serving_resumes_by_itself() {
    let mut server = PrivateServer::init();
    let (gateway, token) = serve_with_coop(&server, "lost", "Lost").await;
    let (status, _) = json_request(&gateway.api, "GET", "/readyz", None, None).await;
    assert_eq!(status, 200);

    server.stop();
    for path in ["/v1/coops/lost", "/v1/ledger/lost/history", "/readyz"] {
        let token = (path != "/readyz").then_some(token.as_str());
        let asked = Instant::now();
        let (status, body) = json_request(&gateway.api, "GET", path, None, token).await;
        let took = asked.elapsed();
        assert_eq!(status, 503, "{path} without its database: {body}");
        assert!(took < Duration::from_millis(1500), "{path} took {took:?} to say so");
        if path != "/readyz" {
            assert_eq!(body["code"], "SERVICE_UNAVAILABLE", "{body}");
        }
    }

    server.start();
    let back = Instant::now();
    loop {
        let (status, body) = json_request(&gateway.api, "GET", "/v1/coops/lost", None, Some(&token)).await;
        if status == 200 {
            assert_eq!(body["id"], "lost", "{body}");
            break;
        }
        assert_eq!(status, 503, "while reconnecting: {body}");
        assert!(back.elapsed() < Duration::from_secs(20), "the gateway did not reconnect by itself");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Ready again once a commit succeeds: the write probe commits every second.
    let reads_back = Instant::now();
    while json_request(&gateway.api, "GET", "/readyz", None, None).await.0 != 200 {
        assert!(reads_back.elapsed() < Duration::from_secs(5), "not ready again within 5 s of the database's return");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs one SQL statement on the private server as its superuser.
fn psql(server: &PrivateServer, sql: &str) {
    let out = pg_command("psql")
        .args(["-h", "127.0.0.1", "-p", &server.port.to_string(), "-U", "postgres", "-d", "postgres"])
        .args(["-v", "ON_ERROR_STOP=1", "-c", sql])
        .output()
        .unwrap();
    assert!(out.status.success(), "{sql}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A database that still answers reads but refuses every write (a read-only standby, a
/// database set read-only): `/readyz` follows the writes, not the reads, and comes back by itself
/// once a commit succeeds; writes in the meantime are 503, never 500.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_refuses_writes_makes_the_replica_unready_until_it_commits_again() {
    let server = PrivateServer::init();
    let (gateway, token) = serve_with_coop(&server, "ro", "Read-only").await;
    assert_eq!(json_request(&gateway.api, "GET", "/readyz", None, None).await.0, 200);

    psql(&server, "ALTER SYSTEM SET default_transaction_read_only = on");
    psql(&server, "SELECT pg_reload_conf()");
    let refused = Instant::now();
    loop {
        let (status, body) = json_request(&gateway.api, "GET", "/readyz", None, None).await;
        if status == 503 {
            assert_eq!(body["code"], "SERVICE_UNAVAILABLE", "{body}");
            break;
        }
        assert!(refused.elapsed() < Duration::from_secs(5), "/readyz still {status} while every write fails");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, body) = json_request(&gateway.api, "GET", "/v1/coops/ro", None, Some(&token)).await;
    assert_eq!(status, 200, "reads are still served: {body}");
    let member = json!({ "did": support::signing_key(2).1 });
    let (status, body) = json_request(&gateway.api, "POST", "/v1/coops/ro/members", Some(member), Some(&token)).await;
    assert_eq!((status, body["code"].as_str()), (503, Some("SERVICE_UNAVAILABLE")), "{body}");

    psql(&server, "ALTER SYSTEM RESET default_transaction_read_only");
    psql(&server, "SELECT pg_reload_conf()");
    let back = Instant::now();
    while json_request(&gateway.api, "GET", "/readyz", None, None).await.0 != 200 {
        assert!(back.elapsed() < Duration::from_secs(5), "not ready again after writes came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Connections the server ended while they sat idle in the gateway's pools (an operator's
/// `pg_terminate_backend`, `idle_session_timeout`, a restart) are checked once idle for a second
/// and replaced before a read or a unit of work uses them: no request gets one
/// (`IDLE_CHECK` in gateway-store; a connection idle for less is used unchecked).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_the_server_ended_while_idle_are_replaced_before_use() {
    let server = PrivateServer::init();
    let (gateway, token) = serve_with_coop(&server, "ended", "Ended").await;
    // Concurrent reads and writes: both pools open several connections, which then sit idle.
    let burst = |seeds: std::ops::Range<u8>| {
        let (api, token) = (gateway.api.clone(), token.clone());
        async move {
            let requests = seeds.map(|seed| {
                let (api, token) = (api.clone(), token.clone());
                async move {
                    let member = json!({ "did": support::signing_key(seed).1 });
                    let write = json_request(&api, "POST", "/v1/coops/ended/members", Some(member), Some(&token)).await;
                    let read = json_request(&api, "GET", "/v1/ledger/ended/history", None, Some(&token)).await;
                    [(seed, "a member added", write), (seed, "the history read", read)]
                }
            });
            futures_util::future::join_all(requests).await.into_iter().flatten().collect::<Vec<_>>()
        }
    };
    for (seed, what, (status, body)) in burst(10..20).await {
        assert!(status == 201 || status == 200, "{what} ({seed}) before: {status} {body}");
    }

    // Every client connection but psql's own: the gateway's pools, its listener.
    psql(
        &server,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for (seed, what, (status, body)) in burst(30..40).await {
        assert!(
            status == 201 || status == 200,
            "{what} ({seed}) after the server ended the idle connections: {status} {body}"
        );
    }
}

/// The private server's postmaster and every backend it forked, stopped (`SIGSTOP`) or resumed
/// (`SIGCONT`): a frozen server keeps its TCP connections open and answers nothing.
fn signal_server(server: &PrivateServer, signal: &str) {
    let Ok(pid_file) = std::fs::read_to_string(server.data.join("postmaster.pid")) else {
        assert_eq!(signal, "CONT", "no postmaster.pid: the server is not running");
        return;
    };
    let postmaster = pid_file.lines().next().expect("the postmaster's pid").trim().to_owned();
    let children = Command::new("pgrep").args(["-P", &postmaster]).output().expect("pgrep");
    let mut pids = vec![postmaster];
    pids.extend(String::from_utf8_lossy(&children.stdout).split_whitespace().map(str::to_owned));
    // `runuser` (when root) stops itself when its child stops, and must be resumed too.
    pids.extend(server.process.as_ref().map(|child| child.id().to_string()));
    let status = Command::new("kill").arg(format!("-{signal}")).args(&pids).status().unwrap();
    assert!(status.success() || signal == "CONT", "kill -{signal} {pids:?}");
}

/// A statement PostgreSQL does not answer (behind a lock, or a server that freezes: a stopped
/// process, a network that drops packets) is answered 503 by its deadline (5 s) instead of
/// waiting for ever; once the write probe has seen the database unreachable, readiness and every
/// request answer 503 at once; and after the server resumes the gateway serves again by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_postgresql_answers_503_by_the_deadline_and_then_at_once() {
    let server = PrivateServer::init();
    let (gateway, token) = serve_with_coop(&server, "frozen", "Frozen").await;

    // A statement that never gets its answer from a working server (it waits behind a lock
    // held for 8 s): its deadline (5 s) answers 503, and nothing is committed.
    let mut holder = pg_command("psql")
        .args(["-h", "127.0.0.1", "-p", &server.port.to_string(), "-U", "postgres", "-d", "postgres"])
        .args(["-c", "BEGIN; LOCK TABLE transactions IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(8); COMMIT;"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let asked = Instant::now();
    let (status, body) = json_request(&gateway.api, "GET", "/v1/ledger/frozen/history", None, Some(&token)).await;
    let took = asked.elapsed();
    assert_eq!((status, body["code"].as_str()), (503, Some("SERVICE_UNAVAILABLE")), "{body}");
    assert!(took >= Duration::from_millis(4500) && took < Duration::from_secs(7), "answered after {took:?}");
    assert!(holder.wait().unwrap().success(), "the lock holder's transaction");
    let (status, body) = json_request(&gateway.api, "GET", "/v1/ledger/frozen/history", None, Some(&token)).await;
    assert_eq!(status, 200, "the lock gone, the same read is served: {body}");

    // A probe held up behind a lock on its row is not an unreachable database: reads that do
    // not need the lock are still served (and not answered 503 at once).
    let mut prober = pg_command("psql")
        .args(["-h", "127.0.0.1", "-p", &server.port.to_string(), "-U", "postgres", "-d", "postgres"])
        .args(["-c", "BEGIN; UPDATE write_probe SET probed_at = 0 WHERE id = 1; SELECT pg_sleep(6); COMMIT;"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let held = Instant::now();
    while held.elapsed() < Duration::from_secs(5) {
        let (status, body) = json_request(&gateway.api, "GET", "/v1/ledger/frozen/history", None, Some(&token)).await;
        assert_eq!(status, 200, "a read while only the probe's row is locked: {body}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(prober.wait().unwrap().success(), "the probe row's locker");

    signal_server(&server, "STOP");
    let frozen = Instant::now();
    let member = json!({ "did": support::signing_key(2).1 });
    let (status, body) =
        json_request(&gateway.api, "POST", "/v1/coops/frozen/members", Some(member), Some(&token)).await;
    let took = frozen.elapsed();
    assert_eq!((status, body["code"].as_str()), (503, Some("SERVICE_UNAVAILABLE")), "{body}");
    assert!(took < Duration::from_secs(7), "a write in flight waited {took:?}");
    // The probe (every second, 2 s to answer) has seen it by now, or will within a few seconds:
    // then requests and readiness no longer wait.
    let mut fast = None;
    while frozen.elapsed() < Duration::from_secs(15) {
        let asked = Instant::now();
        let (status, body) = json_request(&gateway.api, "GET", "/v1/coops/frozen", None, Some(&token)).await;
        assert_eq!((status, body["code"].as_str()), (503, Some("SERVICE_UNAVAILABLE")), "{body}");
        if asked.elapsed() < Duration::from_millis(300) {
            fast = Some(asked.elapsed());
            break;
        }
    }
    fast.expect("requests still wait for a frozen database after 15 s");
    let asked = Instant::now();
    let (status, _) = json_request(&gateway.api, "GET", "/readyz", None, None).await;
    assert_eq!(status, 503);
    assert!(asked.elapsed() < Duration::from_millis(300), "readiness waited {:?}", asked.elapsed());

    signal_server(&server, "CONT");
    let back = Instant::now();
    loop {
        let (status, body) = json_request(&gateway.api, "GET", "/v1/coops/frozen", None, Some(&token)).await;
        if status == 200 {
            break;
        }
        assert_eq!(status, 503, "while resuming: {body}");
        assert!(back.elapsed() < Duration::from_secs(20), "the gateway did not serve again after the freeze");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let member = json!({ "did": support::signing_key(3).1 });
    let (status, body) =
        json_request(&gateway.api, "POST", "/v1/coops/frozen/members", Some(member), Some(&token)).await;
    assert_eq!(status, 201, "writes resume: {body}");
}
