//! Readiness follows writes (INTERFACE.md §10): a gateway on a SQLite file whose disk fills up answers
//! writes 503 and `/readyz` 503 while reads go on, and is ready again by itself once a commit
//! succeeds.
//!
//! The disk is a private 24 MiB tmpfs mounted for this test (it needs root or CAP_SYS_ADMIN,
//! which CI's machine has; without them the test fails and says why) and unmounted afterwards.

mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

use support::{json_request, login, serve_in_process, signing_key};

/// A small tmpfs, unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs", dir.path().to_str().unwrap()])
            .output()
            .expect("mount(8) runs");
        assert!(
            out.status.success(),
            "this test mounts a small tmpfs to fill it, which needs root or CAP_SYS_ADMIN: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Self { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").args(["-l", self.dir.path().to_str().unwrap()]).status();
    }
}

/// Fills the disk with one file until it is full; returns the file.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&path).unwrap();
    // Down to the last byte: a disk with a few kilobytes left still takes a small commit (the
    // readiness probe's), and the gateway is rightly ready again.
    for size in [64 * 1024, 4096, 512, 1] {
        let block = vec![0u8; size];
        while file.write_all(&block).is_ok() {}
    }
    let _ = file.flush();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_makes_the_gateway_unready_until_a_commit_succeeds() {
    let disk = SmallDisk::mount("24m");
    let store = format!("sqlite:{}", disk.path().join("gw.db").display());
    let gateway = serve_in_process(&store, &["--open-enrollment", "true", "--trust-default", "0.9"]).await;
    let scopes = ["coop:read", "coop:write", "ledger:read", "ledger:write"];
    let token = login(&gateway.api, 1, "full", &scopes).await;
    let create = json!({ "name": "Full", "coop_type": "worker" });
    assert_eq!(json_request(&gateway.api, "POST", "/v1/coops", Some(create), Some(&token)).await.0, 201);
    let member = json!({ "did": signing_key(2).1 });
    assert_eq!(json_request(&gateway.api, "POST", "/v1/coops/full/members", Some(member), Some(&token)).await.0, 201);
    assert_eq!(json_request(&gateway.api, "GET", "/readyz", None, None).await.0, 200);

    let filler = fill(disk.path());
    // Payments with long memos until the disk refuses one: 503, never 500, never 201 forever.
    let memo = "m".repeat(1000);
    let mut refused = None;
    for n in 0..5_000 {
        let pay = json!({ "from": signing_key(1).1, "to": signing_key(2).1, "amount": 1, "memo": memo });
        let (status, body) =
            json_request(&gateway.api, "POST", "/v1/ledger/full/payment", Some(pay), Some(&token)).await;
        match status {
            201 => {}
            503 => {
                assert_eq!(body["code"], "SERVICE_UNAVAILABLE", "{body}");
                refused = Some(n);
                break;
            }
            other => panic!("payment {n} on a full disk: {other} {body}"),
        }
    }
    assert!(refused.is_some(), "the full disk never refused a payment");
    // What the refused payment left unwritten is free again: fill it too.
    fill(disk.path());
    // Unready, and health degraded, after a commit fails. A probe's one-page commit can still
    // succeed on the full disk (SQLite reuses the WAL's frames once a checkpoint has reset it),
    // and then the gateway is rightly ready again until the next commit fails: so a payment that
    // needs new space is tried again (503, never 500), and readiness and health are read right
    // after it, until they agree on the outage, for at most 10 s.
    let full = Instant::now();
    let (ready, health) = loop {
        let pay = json!({ "from": signing_key(1).1, "to": signing_key(2).1, "amount": 1, "memo": memo });
        let (status, body) =
            json_request(&gateway.api, "POST", "/v1/ledger/full/payment", Some(pay), Some(&token)).await;
        assert!(matches!(status, 201 | 503), "a payment on the full disk: {status} {body}");
        let ready = json_request(&gateway.api, "GET", "/readyz", None, None).await;
        let (_, health) = json_request(&gateway.api, "GET", "/v1/health", None, None).await;
        if (ready.0 == 503 && health["status"] == "degraded") || full.elapsed() > Duration::from_secs(10) {
            break (ready, health);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!((ready.0, ready.1["code"].as_str()), (503, Some("SERVICE_UNAVAILABLE")), "not ready: {}", ready.1);
    assert_eq!(health["status"], "degraded", "{health}");
    let (status, _) = json_request(&gateway.api, "GET", "/v1/coops/full", None, Some(&token)).await;
    assert_eq!(status, 200, "reads go on");

    std::fs::remove_file(filler).unwrap();
    let freed = Instant::now();
    while json_request(&gateway.api, "GET", "/readyz", None, None).await.0 != 200 {
        assert!(freed.elapsed() < Duration::from_secs(5), "not ready again within 5 s of the disk being freed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let pay = json!({ "from": signing_key(1).1, "to": signing_key(2).1, "amount": 1 });
    assert_eq!(json_request(&gateway.api, "POST", "/v1/ledger/full/payment", Some(pay), Some(&token)).await.0, 201);
}
