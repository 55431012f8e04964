//! The coop's log through a whole gateway (INTERFACE.md §12): the checkpointer signs a checkpoint
//! covering a payment by itself, sends it to a witness (`gatewayd witness`, served in this
//! process), and a member's proof that waited for the witness quorum verifies offline against a
//! policy naming the log's key and the witness; `gatewayd log fsck` finds the log sound.

mod support;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use gateway_tlog::policy::Policy;
use gateway_tlog::proof::TlogProof;
use serde_json::json;

use support::{login, request, signing_key};

const PASS: &str = "correct horse battery staple";

async fn get(addr: &str, path: &str, token: &str) -> (u16, bytes::Bytes) {
    let auth = format!("Bearer {token}");
    let (status, _, body) = support::exchange(addr, "GET", path, None, &[("authorization", auth.as_str())])
        .await
        .expect("the gateway answers");
    (status, body)
}

/// A gateway on `store` that signs its coops' logs (a keystore in `dir`, open enrollment), with
/// `extra` flags (its log origin, its witnesses).
async fn serve_signing(dir: &std::path::Path, store: &str, extra: &[&str]) -> support::InProcess {
    // A restart on the same directory keeps its keystore.
    let (keystore, passphrase) = if dir.join("keystore.json").exists() {
        (dir.join("keystore.json"), dir.join("passphrase"))
    } else {
        support::keystore_in(dir, PASS)
    };
    support::serve_with_keystore(store, &keystore, &passphrase, extra).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_witnessed_checkpoint_proves_a_payment_offline() {
    let dir = tempfile::tempdir().unwrap();

    // The witness's key and address first: the gateway is configured with them.
    let cosigner = gatewayd::witness::cosigner(&dir.path().join("witness.key"), "witness.test/w1").unwrap();
    let witness_vkey = cosigner.vkey();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let store = format!("sqlite:{}", dir.path().join("gw.db").display());
    let witness_flag = format!("witness.test/w1={witness_vkey}@http://{port}");
    let gateway = serve_signing(
        dir.path(),
        &store,
        &["--log-origin", "gw.test", "--witness", &witness_flag, "--witness-quorum", "1"],
    )
    .await;
    let token = login(&gateway.api, 1, "bakery", &["coop:read", "coop:write", "ledger:read", "ledger:write"]).await;
    support::coop_with_member_two(&gateway.api, &token, "bakery").await;

    // The first checkpoint is signed within a second of the coop's first events, without anyone
    // asking; then the log's key is published, as any member or auditor reads it.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while request(&gateway.api, "GET", "/v1/coops/bakery/log/checkpoint", None, None).await.0 != 200 {
        assert!(std::time::Instant::now() < deadline, "no checkpoint within 5 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, keys) = request(&gateway.api, "GET", "/v1/coops/bakery/log/key", None, None).await;
    assert_eq!(status, 200, "{keys}");
    let log_vkey = keys.lines().last().unwrap().to_owned();
    assert!(log_vkey.starts_with("gw.test/coops/bakery+"), "{log_vkey}");

    // Now the witness runs, knowing the log's key.
    let mut logs = gateway_tlog::witness::KnownLogs::new();
    logs.add_vkey("gw.test/coops/bakery", &log_vkey).unwrap();
    let witness = Arc::new(gatewayd::witness::Witness::open(cosigner, logs, dir.path().join("witness.state")).unwrap());
    let listener = tokio::net::TcpListener::bind(port).await.unwrap();
    tokio::spawn(async move { axum::serve(listener, gatewayd::witness::router(witness)).await });

    // The payment's answer names its event; the checkpointer covers it within the second, the
    // witness cosigns, and the proof that waited for the quorum carries the cosignature.
    let pay = json!({ "from": signing_key(1).1, "to": signing_key(2).1, "amount": 3.5, "memo": "flour" });
    let auth = format!("Bearer {token}");
    let (status, headers, paid) = support::exchange(
        &gateway.api,
        "POST",
        "/v1/ledger/bakery/payment",
        Some(pay),
        &[("authorization", auth.as_str())],
    )
    .await
    .unwrap();
    assert_eq!(status, 201, "{paid:?}");
    let seq: u64 = headers["icn-event-seq"].to_str().unwrap().parse().unwrap();
    let started = std::time::Instant::now();
    let (status, proof_text) =
        get(&gateway.api, &format!("/v1/coops/bakery/log/proof?seq={seq}&wait=true"), &token).await;
    assert_eq!(status, 200, "{proof_text:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    let proof = TlogProof::parse(&proof_text).unwrap();

    // The entry, from the bundle that holds it.
    let bundle_path = format!("/v1/coops/bakery/log/tile/entries/000.p/{}", proof.checkpoint().size());
    let (status, bundle) = get(&gateway.api, &bundle_path, &token).await;
    assert_eq!(status, 200);
    let entries = gateway_tlog::tile::parse_entry_bundle(&bundle).unwrap();
    let entry = entries[proof.index() as usize];
    let policy = Policy::parse(format!("log {log_vkey}\nwitness w1 {witness_vkey}\nquorum w1\n").as_bytes()).unwrap();
    let verified = proof.verify(entry, &policy).unwrap();
    assert_eq!(verified.cosignatures.len(), 1);
    // A policy that wants another witness's cosignature refuses it.
    let other = gatewayd::witness::cosigner(&dir.path().join("other.key"), "witness.test/w2").unwrap();
    let strict = Policy::parse(format!("log {log_vkey}\nwitness w2 {}\nquorum w2\n", other.vkey()).as_bytes()).unwrap();
    assert!(proof.verify(entry, &strict).is_err());
    drop(gateway);

    // `gatewayd log fsck` on the same store: sound. It serves nothing and signs nothing: no JWT
    // secret, and a passphrase file it could not read (say, root's) does not stop it.
    let fsck = Command::new(env!("CARGO_BIN_EXE_gatewayd"))
        .args(["--store", &store, "log", "fsck"])
        .env_remove("ICN_GATEWAY_JWT_SECRET")
        .env("ICN_GATEWAY_PASSPHRASE_FILE", dir.path().join("no-such-passphrase"))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&fsck.stdout);
    assert!(fsck.status.success(), "{said}{}", String::from_utf8_lossy(&fsck.stderr));
    assert!(said.contains("bakery: ok"), "{said}");
}

/// A witness that holds another history of the log: it says (409) it cosigned a larger tree than
/// this log has signed, or (422) that the log's consistency proof from the size it cosigned does
/// not verify. Either is evidence of a fork or a rollback: the gateway counts an integrity
/// failure of the coop's log (`icn_log_integrity_failures_total`, which the `ICNLogIntegrity`
/// alert watches) instead of retrying it away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_witness_holding_another_history_is_an_integrity_failure() {
    for (status, body) in [(409u16, "1000000\n"), (422, "the consistency proof does not verify\n")] {
        let dir = tempfile::tempdir().unwrap();
        let cosigner = gatewayd::witness::cosigner(&dir.path().join("witness.key"), "witness.test/w1").unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap();
        let answer = axum::Router::new().route(
            "/add-checkpoint",
            axum::routing::post(move || async move {
                let status = axum::http::StatusCode::from_u16(status).unwrap();
                (status, [(axum::http::header::CONTENT_TYPE, "text/x.tlog.size")], body)
            }),
        );
        tokio::spawn(async move { axum::serve(listener, answer).await });
        let store = format!("sqlite:{}", dir.path().join("gw.db").display());
        let witness_flag = format!("witness.test/w1={}@http://{port}", cosigner.vkey());
        let gateway = serve_signing(dir.path(), &store, &["--witness", &witness_flag]).await;
        // A coop of its own per answer: the metrics of in-process gateways are the process's.
        let coop = format!("forked{status}");
        let token = login(&gateway.api, 1, &coop, &["coop:read", "coop:write"]).await;
        support::coop_with_member_two(&gateway.api, &token, &coop).await;
        let series = format!("icn_log_integrity_failures_total{{coop=\"{coop}\"}}");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let (_, text) = request(&gateway.metrics, "GET", "/metrics", None, None).await;
            let failures = text
                .lines()
                .find_map(|line| line.strip_prefix(series.as_str())?.trim().parse::<f64>().ok())
                .unwrap_or(0.0);
            if failures >= 1.0 {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "a {status} from the witness is not an integrity failure");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// A witness's key, its future address, and the `--witness` flag naming them.
fn witness_to_be(dir: &std::path::Path) -> (gateway_tlog::cosignature::Cosigner, std::net::SocketAddr, String) {
    let cosigner = gatewayd::witness::cosigner(&dir.join("witness.key"), "witness.test/w1").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let flag = format!("witness.test/w1={}@http://{port}", cosigner.vkey());
    (cosigner, port, flag)
}

/// Creates coop `quiet`, waits for its first checkpoint (signed while no witness listens) and a
/// little more, and returns it: still without a cosignature.
async fn a_quiet_coops_checkpoint(api: &str) -> String {
    let token = login(api, 1, "quiet", &["coop:read", "coop:write"]).await;
    support::coop_with_member_two(api, &token, "quiet").await;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while request(api, "GET", "/v1/coops/quiet/log/checkpoint", None, None).await.0 != 200 {
        assert!(std::time::Instant::now() < deadline, "no checkpoint within 5 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (_, signed) = request(api, "GET", "/v1/coops/quiet/log/checkpoint", None, None).await;
    assert!(!signed.contains("— witness.test/w1 "), "{signed}");
    signed
}

/// Serves the witness at `port`, knowing coop `quiet`'s log by the key `vkey_line`.
async fn start_witness(
    dir: &std::path::Path,
    cosigner: gateway_tlog::cosignature::Cosigner,
    port: std::net::SocketAddr,
    vkey_line: &str,
) {
    let mut logs = gateway_tlog::witness::KnownLogs::new();
    logs.add_vkey("gw.test/coops/quiet", vkey_line).unwrap();
    let witness = Arc::new(gatewayd::witness::Witness::open(cosigner, logs, dir.join("witness.state")).unwrap());
    let listener = tokio::net::TcpListener::bind(port).await.unwrap();
    tokio::spawn(async move { axum::serve(listener, gatewayd::witness::router(witness)).await });
}

/// Waits up to `within` for coop `quiet`'s checkpoint `signed` to be published with the
/// witness's cosignature.
async fn cosigned_within(api: &str, signed: &str, within: Duration) {
    let deadline = std::time::Instant::now() + within;
    loop {
        let (_, note) = request(api, "GET", "/v1/coops/quiet/log/checkpoint", None, None).await;
        if note.contains("— witness.test/w1 ") {
            assert!(note.starts_with(signed.trim_end()), "the same checkpoint, cosigned: {note}");
            return;
        }
        assert!(std::time::Instant::now() < deadline, "the missed checkpoint was not sent again: {note}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A witness that was down when a quiet coop's checkpoint was signed gets it again once it is
/// back (every few seconds, `WITNESS_RETRY`), without waiting for the coop's next event: the
/// published checkpoint gains its cosignature.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_a_witness_missed_is_sent_again_once_it_is_back() {
    let dir = tempfile::tempdir().unwrap();
    let (cosigner, port, witness_flag) = witness_to_be(dir.path());
    let store = format!("sqlite:{}", dir.path().join("gw.db").display());
    let gateway = serve_signing(dir.path(), &store, &["--log-origin", "gw.test", "--witness", &witness_flag]).await;
    let signed = a_quiet_coops_checkpoint(&gateway.api).await;
    let (status, keys) = request(&gateway.api, "GET", "/v1/coops/quiet/log/key", None, None).await;
    assert_eq!(status, 200, "{keys}");
    start_witness(dir.path(), cosigner, port, keys.lines().last().unwrap()).await;
    cosigned_within(&gateway.api, &signed, Duration::from_secs(15)).await;
}

/// A checkpoint a witness missed is not forgotten by a restart: the gateway that starts finds the
/// published checkpoint without the witness's cosignature and sends it, though the coop has had
/// no event since.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_sends_the_checkpoint_a_witness_missed() {
    let dir = tempfile::tempdir().unwrap();
    let (cosigner, port, witness_flag) = witness_to_be(dir.path());
    let store = format!("sqlite:{}", dir.path().join("gw.db").display());
    let flags = ["--log-origin", "gw.test", "--witness", witness_flag.as_str()];
    let gateway = serve_signing(dir.path(), &store, &flags).await;
    let signed = a_quiet_coops_checkpoint(&gateway.api).await;
    let (status, keys) = request(&gateway.api, "GET", "/v1/coops/quiet/log/key", None, None).await;
    assert_eq!(status, 200, "{keys}");
    drop(gateway);

    start_witness(dir.path(), cosigner, port, keys.lines().last().unwrap()).await;
    let gateway = serve_signing(dir.path(), &store, &flags).await;
    cosigned_within(&gateway.api, &signed, Duration::from_secs(10)).await;
}

/// A log keeps the origin its first checkpoint was signed under: restarted with another
/// `--log-origin`, the gateway signs the coop's next checkpoints and publishes its keys under the
/// old origin, so members' saved checkpoints and policies still hold; a new coop's log gets the
/// new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_keeps_its_origin_when_the_configured_one_changes() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("gw.db").display());
    let checkpoint_of = |api: String, coop: &'static str, at_least: u64| async move {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let (status, note) = request(&api, "GET", &format!("/v1/coops/{coop}/log/checkpoint"), None, None).await;
            let size = note.lines().nth(1).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
            if status == 200 && size >= at_least {
                return (note.lines().next().unwrap().to_owned(), size);
            }
            assert!(std::time::Instant::now() < deadline, "no checkpoint of {coop} of size {at_least} within 5 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let gateway = serve_signing(dir.path(), &store, &["--log-origin", "gw.old"]).await;
    let token = login(&gateway.api, 1, "kept", &["coop:read", "coop:write", "ledger:read", "ledger:write"]).await;
    support::coop_with_member_two(&gateway.api, &token, "kept").await;
    let (origin, size) = checkpoint_of(gateway.api.clone(), "kept", 1).await;
    assert_eq!(origin, "gw.old/coops/kept");
    drop(gateway);

    let gateway = serve_signing(dir.path(), &store, &["--log-origin", "gw.new"]).await;
    let token = login(&gateway.api, 1, "kept", &["coop:read", "coop:write", "ledger:read", "ledger:write"]).await;
    let pay = json!({ "from": signing_key(1).1, "to": signing_key(2).1, "amount": 1, "memo": "after the move" });
    let (status, body) = request(&gateway.api, "POST", "/v1/ledger/kept/payment", Some(pay), Some(&token)).await;
    assert_eq!(status, 201, "{body}");
    let (origin, grown) = checkpoint_of(gateway.api.clone(), "kept", size + 1).await;
    assert_eq!(origin, "gw.old/coops/kept", "the next checkpoint keeps the log's origin");
    assert!(grown > size);
    let (_, keys) = request(&gateway.api, "GET", "/v1/coops/kept/log/key", None, None).await;
    assert!(keys.lines().all(|k| k.starts_with("gw.old/coops/kept+")), "{keys}");
    // A coop created now gets the configured origin.
    let token = login(&gateway.api, 3, "fresh", &["coop:read", "coop:write"]).await;
    let (status, body) = request(
        &gateway.api,
        "POST",
        "/v1/coops",
        Some(json!({ "id": "fresh", "name": "Fresh", "coop_type": "worker" })),
        Some(&token),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(checkpoint_of(gateway.api.clone(), "fresh", 1).await.0, "gw.new/coops/fresh");
}
