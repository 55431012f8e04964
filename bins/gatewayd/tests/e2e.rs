//! End-to-end: the real `gatewayd` binary over TCP on port 0, with a SQLite file store, a real
//! Ed25519 key, the metrics listener, and a clean stop on SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use ed25519_dalek::{Signer, SigningKey};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

struct Gateway {
    child: Child,
    api: String,
    metrics: String,
    _dir: tempfile::TempDir,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(extra: &[&str]) -> Gateway {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("gw.db").display());
    let mut child = Command::new(env!("CARGO_BIN_EXE_gatewayd"))
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--store", &store])
        .args(extra)
        .env("ICN_GATEWAY_JWT_SECRET", "an-end-to-end-secret-of-32-bytes!!")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let (mut api, mut metrics) = (None, None);
    while api.is_none() || metrics.is_none() {
        let line = rx.recv_timeout(Duration::from_secs(30)).expect("gatewayd did not report its addresses");
        if let Some(rest) = line.split("listening on http://").nth(1) {
            api = Some(rest.trim().to_owned());
        }
        if let Some(rest) = line.split("metrics on http://").nth(1) {
            metrics = Some(rest.trim().trim_end_matches("/metrics").to_owned());
        }
    }
    Gateway { child, api: api.unwrap(), metrics: metrics.unwrap(), _dir: dir }
}

async fn request(addr: &str, method: &str, path: &str, body: Option<Value>, token: Option<&str>) -> (u16, String) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.unwrap();
    tokio::spawn(conn);
    let mut builder = Request::builder().method(method).uri(path).header("host", addr);
    if let Some(token) = token {
        builder = builder.header("authorization", format!("Bearer {token}"));
    }
    let body = match body {
        Some(b) => {
            builder = builder.header("content-type", "application/json");
            Full::new(Bytes::from(b.to_string()))
        }
        None => Full::new(Bytes::new()),
    };
    let response = sender.send_request(builder.body(body).unwrap()).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

async fn json_request(addr: &str, method: &str, path: &str, body: Option<Value>, token: Option<&str>) -> (u16, Value) {
    let (status, text) = request(addr, method, path, body, token).await;
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[tokio::test]
async fn login_with_a_real_key_then_stop_cleanly() {
    let mut gateway = start(&[]);
    let (status, health) = json_request(&gateway.api, "GET", "/v1/health", None, None).await;
    assert_eq!(status, 200);
    assert_eq!(health["store"], "sqlite");

    let signing = SigningKey::from_bytes(&[42; 32]);
    let did =
        gateway_core::Did::key_from_public_key(&gateway_core::Ed25519PublicKey(signing.verifying_key().to_bytes()));
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
