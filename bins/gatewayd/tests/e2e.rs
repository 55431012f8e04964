//! End-to-end: the real `gatewayd` binary over TCP on port 0, with a SQLite file store, a real
//! Ed25519 key, the metrics listener, and a clean stop on SIGTERM.

mod support;

use std::process::Command;
use std::time::Duration;

use ed25519_dalek::Signer;
use serde_json::json;

use support::{json_request, request, start};

#[tokio::test]
async fn login_with_a_real_key_then_stop_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut gateway = start(dir.path(), &[]);
    let (status, health) = json_request(&gateway.api, "GET", "/v1/health", None, None).await;
    assert_eq!(status, 200);
    assert_eq!(health["store"], "sqlite");

    let (signing, did) = support::signing_key(42);
    let (_, challenge) =
        json_request(&gateway.api, "POST", "/v1/auth/challenge", Some(json!({ "did": did.to_string() })), None).await;
    let signature = hex::encode(signing.sign(challenge["nonce"].as_str().unwrap().as_bytes()).to_bytes());
    // A cooperative that does not exist yet: the bootstrap scopes are granted.
    let (status, token) = json_request(
        &gateway.api,
        "POST",
        "/v1/auth/verify",
        Some(json!({ "did": did.to_string(), "signature": signature, "coop_id": "e2e", "scopes": ["coop:read", "coop:write"] })),
        None,
    )
    .await;
    assert_eq!(status, 200, "{token}");
    let token = token["token"].as_str().unwrap();
    let (status, own) = json_request(&gateway.api, "GET", "/identity/did", None, Some(token)).await;
    assert_eq!(status, 200);
    assert_eq!(own["did"], did.to_string());

    let (status, metrics) = request(&gateway.metrics, "GET", "/metrics", None, None).await;
    assert_eq!(status, 200);
    assert!(metrics.contains("icn_gateway_auth_challenges_total"), "{metrics}");
    assert!(metrics.contains("icn_gateway_auth_verifications_total{result=\"success\"}"), "{metrics}");

    let pid = gateway.child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(status) = gateway.child.try_wait().unwrap() {
            assert!(status.success(), "gatewayd exited with {status}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "gatewayd did not stop after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[test]
fn an_empty_secret_stops_start_up_with_a_clear_message() {
    let output = Command::new(env!("CARGO_BIN_EXE_gatewayd"))
        .args(["--store", "memory", "--listen", "127.0.0.1:0"])
        .env("ICN_GATEWAY_JWT_SECRET", "")
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("JWT secret is empty"), "{stderr}");
}

/// `gatewayd config check` prints the configuration without the database password, and a
/// store that cannot be opened is reported without it too.
#[test]
fn config_check_and_start_up_errors_hide_the_database_password() {
    let url = "postgres://gateway:pa55-w0rd-secret@127.0.0.1:1/gw?connect_timeout=1";
    let check = Command::new(env!("CARGO_BIN_EXE_gatewayd"))
        .args(["--store", url, "config", "check"])
        .env("ICN_GATEWAY_JWT_SECRET", "x".repeat(32))
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&check.stdout), String::from_utf8_lossy(&check.stderr));
    assert!(check.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("store = postgres://gateway:***@127.0.0.1:1/gw?connect_timeout=1"), "{stdout}");
    assert!(!stdout.contains("pa55-w0rd") && !stderr.contains("pa55-w0rd"), "{stdout}{stderr}");
    assert!(!stdout.contains(&"x".repeat(32)), "{stdout}");

    let serve = Command::new(env!("CARGO_BIN_EXE_gatewayd"))
        .args(["--store", url, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"])
        .env("ICN_GATEWAY_JWT_SECRET", "x".repeat(32))
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&serve.stdout), String::from_utf8_lossy(&serve.stderr));
    assert!(!serve.status.success(), "nothing listens on port 1: {stdout}{stderr}");
    assert!(stderr.contains("opening the store postgres://gateway:***@127.0.0.1:1/gw"), "{stderr}");
    assert!(!stdout.contains("pa55-w0rd") && !stderr.contains("pa55-w0rd"), "{stdout}{stderr}");
}
