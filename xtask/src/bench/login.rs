//! The `login` scenario: challenge and verify over HTTP as fast as the gateway answers them, and,
//! in the same run, what the machine's two cores can do of the cryptography alone.
//!
//! Every login comes from its own client address: the gateway runs with
//! `--trusted-proxy 127.0.0.1` and each login sends both its requests with an `X-Forwarded-For`
//! address of 10.0.0.0/8 not used before, so the per-IP bucket of the login routes (burst 20,
//! 2 per second) never refuses one. The logins go over the coop's members in turn, each
//! connection over its own share, so no DID has two logins (or more than one outstanding
//! challenge) at a time. The generator signs every nonce itself, on a two-worker runtime on the
//! same two cores as the server.
//!
//! A login costs one Ed25519 signature (the client) and one verification (the gateway), so
//! sign+verify on two threads in process is the ceiling of this setup: logins/s is reported as
//! a ratio to it.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ed25519_dalek::{Signer, SigningKey};
use serde_json::{Value, json};

use super::{COOP, Figures, Options, PAYERS, Table, Tally, did, member_key, on_two_workers, setup, start_gateway};
use crate::client::Connection;

/// Client addresses handed out so far, one per login (across the harness's scenarios).
static ADDRESSES: AtomicU64 = AtomicU64::new(0);

/// A client address never used before: 10.0.0.0/8 in order (then 11.0.0.0/8, …), so with the
/// IPv4 keying of the per-IP limit each login draws on a fresh bucket.
pub(super) fn next_address() -> String {
    let n = ADDRESSES.fetch_add(1, Ordering::Relaxed);
    format!("{}.{}.{}.{}", 10 + (n >> 24) % 100, (n >> 16) & 255, (n >> 8) & 255, n & 255)
}

/// The members who log in (1 to `PAYERS - 1`; 0 is the admin), keys and DIDs computed once.
pub(super) fn members() -> Arc<Vec<(SigningKey, String)>> {
    Arc::new((1..PAYERS).map(|n| (member_key(n), did(n))).collect())
}

/// One login: a challenge, its nonce signed, a verify for a token in the coop; both requests from
/// a fresh client address. `Ok(false)` for an answer other than 200 (the first one is printed).
async fn login_once(conn: &mut Connection, key: &SigningKey, did: &str, quiet: bool) -> Result<bool, String> {
    let address = next_address();
    let headers = [("x-forwarded-for", address.as_str())];
    let (status, body) =
        conn.send_with("POST", "/v1/auth/challenge", None, Some(&json!({ "did": did })), &headers).await?;
    if status != 200 {
        if !quiet {
            eprintln!("unexpected challenge answer: {status} {}", String::from_utf8_lossy(&body));
        }
        return Ok(false);
    }
    let challenge: Value = serde_json::from_slice(&body).map_err(|e| format!("challenge answer: {e}"))?;
    let nonce = challenge["nonce"].as_str().ok_or("the challenge has no nonce")?;
    let signature = hex::encode(key.sign(nonce.as_bytes()).to_bytes());
    let verify = json!({
        "did": did, "signature": signature, "challenge_id": challenge["challenge_id"],
        "coop_id": COOP, "scopes": ["ledger:read"],
    });
    let (status, body) = conn.send_with("POST", "/v1/auth/verify", None, Some(&verify), &headers).await?;
    if status != 200 {
        if !quiet {
            eprintln!("unexpected verify answer: {status} {}", String::from_utf8_lossy(&body));
        }
        return Ok(false);
    }
    Ok(true)
}

/// One keep-alive connection logging in as members `first`, `first + stride`, … in turn until
/// `stop`; one latency per login (challenge and verify).
pub(super) async fn login_loop(
    addr: String,
    members: Arc<Vec<(SigningKey, String)>>,
    first: usize,
    stride: usize,
    stop: Arc<AtomicBool>,
) -> Result<Tally, String> {
    let mut conn = Connection::open(&addr).await?;
    let mut tally = Tally::default();
    let mut member = first % members.len();
    while !stop.load(Ordering::Relaxed) {
        let (key, did) = &members[member];
        member = (member + stride) % members.len();
        let started = Instant::now();
        let ok = login_once(&mut conn, key, did, tally.errors > 0).await?;
        tally.record(started, ok);
    }
    Ok(tally)
}

/// Ed25519 signatures made and verified per second by two threads for `seconds`, each signing a
/// nonce-like message and verifying it as the gateway does (decoding the key, `verify_strict`).
fn sign_verify_per_second(seconds: u64) -> f64 {
    let deadline = Duration::from_secs(seconds);
    let started = Instant::now();
    let total: u64 = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..2)
            .map(|t| {
                scope.spawn(move || {
                    let key = member_key(1 + t);
                    let public = key.verifying_key().to_bytes();
                    let mut count = 0u64;
                    while started.elapsed() < deadline {
                        let nonce = format!("{:064x}", count.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ t as u64);
                        let signature = key.sign(nonce.as_bytes());
                        let verified = ed25519_dalek::VerifyingKey::from_bytes(&public)
                            .is_ok_and(|k| k.verify_strict(nonce.as_bytes(), &signature).is_ok());
                        assert!(verified, "a fresh signature verifies");
                        count += 1;
                    }
                    count
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("the signing thread panicked")).sum()
    });
    total as f64 / started.elapsed().as_secs_f64()
}

pub(super) fn scenario(options: &Options, dir: &Path, table: &mut Table) -> Result<(), String> {
    let connections = options.connections;
    let figures = on_two_workers(async {
        let server = start_gateway(options, dir, &["--trusted-proxy", "127.0.0.1"])?;
        setup(&server.addr).await?;
        let members = members();
        let stop = Arc::new(AtomicBool::new(false));
        let tasks: Vec<_> = (0..connections)
            .map(|c| tokio::spawn(login_loop(server.addr.clone(), members.clone(), c, connections, stop.clone())))
            .collect();
        let started = Instant::now();
        tokio::time::sleep(Duration::from_secs(options.seconds)).await;
        stop.store(true, Ordering::Relaxed);
        let mut tallies = Vec::new();
        for task in tasks {
            tallies.push(task.await.map_err(|e| e.to_string())??);
        }
        Ok::<_, String>(Figures::of(tallies, started.elapsed().as_secs_f64()))
    })?;
    table.figures(
        &figures,
        &format!("logins (challenge + verify, signed by the generator, {connections} connections; per login)"),
    );
    // The server is gone: the cores are the cryptography's alone.
    let ceiling = sign_verify_per_second(if options.quick { 1 } else { 3 });
    println!(
        "\nEd25519 sign + verify in process, 2 threads: {ceiling:.0}/s; logins/s / that ceiling: {:.3}×\n",
        figures.rps() / ceiling
    );
    Ok(())
}
