//! Shared by the binary's test targets: start `gatewayd` on port 0 and talk HTTP/1.1 to it.

#![allow(dead_code, unreachable_pub)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use ed25519_dalek::{Signer, SigningKey};
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

pub const SECRET: &str = "an-end-to-end-secret-of-32-bytes!!";

pub struct Gateway {
    pub child: Child,
    pub api: String,
    pub metrics: String,
    /// Every line the gateway has logged so far.
    pub logs: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `gatewayd` on a SQLite file in `dir` with extra flags; waits for its addresses.
pub fn start(dir: &Path, extra: &[&str]) -> Gateway {
    start_with_env(dir, extra, &[])
}

/// Starts `gatewayd` serving TLS (the flags name the files); `api` is the bare address.
pub fn start_tls(dir: &Path, tls_flags: &[&str]) -> Gateway {
    start_with_env(dir, tls_flags, &[])
}

/// [`start`] with extra environment variables.
pub fn start_with_env(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Gateway {
    start_on(&format!("sqlite:{}", dir.join("gw.db").display()), extra, env)
}

/// Starts `gatewayd` on any store spec.
pub fn start_on(store: &str, extra: &[&str], env: &[(&str, &str)]) -> Gateway {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gatewayd"))
        .args(["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--store", store])
        .args(extra)
        .envs(env.iter().copied())
        .env("ICN_GATEWAY_JWT_SECRET", SECRET)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let logs: std::sync::Arc<std::sync::Mutex<Vec<String>>> = std::sync::Arc::default();
    let kept = logs.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            kept.lock().unwrap().push(line.clone());
            let _ = tx.send(line);
        }
    });
    let (mut api, mut metrics) = (None, None);
    while api.is_none() || metrics.is_none() {
        let line = rx.recv_timeout(Duration::from_secs(30)).expect("gatewayd did not report its addresses");
        // The address ends at a blank or, in a JSON line, at the message's closing quote.
        let address =
            |rest: &str| rest.split(|c: char| c.is_whitespace() || c == '"').next().unwrap_or_default().to_owned();
        for scheme in ["listening on http://", "listening on https://"] {
            if let Some(rest) = line.split(scheme).nth(1) {
                api = Some(address(rest));
            }
        }
        if let Some(rest) = line.split("metrics on http://").nth(1) {
            metrics = Some(address(rest).trim_end_matches("/metrics").to_owned());
        }
    }
    Gateway { child, api: api.unwrap(), metrics: metrics.unwrap(), logs }
}

/// One request on a fresh connection; `None` when the connection fails (e.g. the server died).
pub async fn try_request(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
    headers: &[(&str, &str)],
) -> Option<(u16, String)> {
    let (status, _, bytes) = exchange(addr, method, path, body, headers).await?;
    Some((status, String::from_utf8_lossy(&bytes).into_owned()))
}

/// [`try_request`] with the answer's headers and its body as sent.
pub async fn exchange(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
    headers: &[(&str, &str)],
) -> Option<(u16, hyper::HeaderMap, Bytes)> {
    let stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.ok()?;
    tokio::spawn(conn);
    let mut builder = Request::builder().method(method).uri(path).header("host", addr);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let body = match body {
        Some(b) => {
            builder = builder.header("content-type", "application/json");
            Full::new(Bytes::from(b.to_string()))
        }
        None => Full::new(Bytes::new()),
    };
    let response = sender.send_request(builder.body(body).unwrap()).await.ok()?;
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.ok()?.to_bytes();
    Some((status, headers, bytes))
}

pub async fn request(addr: &str, method: &str, path: &str, body: Option<Value>, token: Option<&str>) -> (u16, String) {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth.as_deref().map(|a| vec![("authorization", a)]).unwrap_or_default();
    try_request(addr, method, path, body, &headers).await.expect("request failed")
}

pub async fn json_request(
    addr: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
    token: Option<&str>,
) -> (u16, Value) {
    let (status, text) = request(addr, method, path, body, token).await;
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

pub fn signing_key(seed: u8) -> (SigningKey, String) {
    let signing = SigningKey::from_bytes(&[seed; 32]);
    let did =
        gateway_core::Did::key_from_public_key(&gateway_core::Ed25519PublicKey(signing.verifying_key().to_bytes()));
    (signing, did.to_string())
}

/// Logs in with a real key; returns the token.
pub async fn login(addr: &str, seed: u8, coop: &str, scopes: &[&str]) -> String {
    let (signing, did) = signing_key(seed);
    let (_, challenge) = json_request(addr, "POST", "/v1/auth/challenge", Some(json!({ "did": did })), None).await;
    let signature = hex::encode(signing.sign(challenge["nonce"].as_str().unwrap().as_bytes()).to_bytes());
    let (status, token) = json_request(
        addr,
        "POST",
        "/v1/auth/verify",
        Some(json!({ "did": did, "signature": signature, "coop_id": coop, "scopes": scopes })),
        None,
    )
    .await;
    assert_eq!(status, 200, "{token}");
    token["token"].as_str().unwrap().to_owned()
}

/// A gateway served in this process by [`gatewayd::serve`]; stopped (drained) when dropped.
pub struct InProcess {
    pub api: String,
    pub metrics: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for InProcess {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Serves a gateway in-process on `store` with extra flags, on loopback port 0.
pub async fn serve_in_process(store: &str, extra: &[&str]) -> InProcess {
    let mut args = vec!["--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--store", store];
    args.extend_from_slice(&["--jwt-secret", SECRET]);
    args.extend_from_slice(extra);
    let config = gatewayd::GatewayConfig::from_args(args).expect("a valid configuration");
    let listeners = gatewayd::Listeners::bind(&config).await.expect("listeners bind");
    let api = listeners.api.local_addr().unwrap().to_string();
    let metrics = listeners.metrics.local_addr().unwrap().to_string();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.await;
        };
        if let Err(err) = gatewayd::serve(config, listeners, shutdown).await {
            panic!("gatewayd::serve failed: {err:#}");
        }
    });
    InProcess { api, metrics, stop: Some(stop) }
}

/// Serves a gateway in-process on `store` that signs (receipts and the coops' logs) with the
/// keystore at `keystore`, unlocked by the passphrase file: open enrollment, trust 0.9, then
/// `extra`.
pub async fn serve_with_keystore(store: &str, keystore: &Path, passphrase: &Path, extra: &[&str]) -> InProcess {
    let mut flags = vec![
        "--open-enrollment",
        "true",
        "--trust-default",
        "0.9",
        "--keystore",
        keystore.to_str().unwrap(),
        "--passphrase-file",
        passphrase.to_str().unwrap(),
    ];
    flags.extend_from_slice(extra);
    serve_in_process(store, &flags).await
}

/// The next text frame of a WebSocket stream as JSON, skipping pings and pongs; panics on any
/// other frame, a closed stream, or nothing within 10 s.
pub async fn next_frame(
    ws: &mut tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
) -> Value {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(10), ws.next()).await.expect("a frame within 10 s");
        match frame.expect("stream open").expect("frame") {
            Message::Text(text) => return serde_json::from_str(text.as_str()).unwrap(),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("unexpected frame {other:?}"),
        }
    }
}

/// A receipt keystore made in `dir` by `gatewayd keystore init`, unlocked by `passphrase`:
/// the keystore's path and the passphrase file's, for `--keystore` and `--passphrase-file`.
pub fn keystore_in(dir: &Path, passphrase: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let keystore = dir.join("keystore.json");
    let file = dir.join("passphrase");
    std::fs::write(&file, passphrase).unwrap();
    let init = Command::new(env!("CARGO_BIN_EXE_gatewayd"))
        .args(["keystore", "init", "--keystore", keystore.to_str().unwrap()])
        .args(["--passphrase-file", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(init.status.success(), "{}", String::from_utf8_lossy(&init.stderr));
    (keystore, file)
}

/// Creates `coop` through `api` as the subject of `token`, its admin, and adds the DID of seed 2
/// as a member.
pub async fn coop_with_member_two(api: &str, token: &str, coop: &str) {
    let create = json!({ "name": coop, "coop_type": "worker" });
    let (status, body) = json_request(api, "POST", "/v1/coops", Some(create), Some(token)).await;
    assert_eq!(status, 201, "{body}");
    let member = json!({ "did": signing_key(2).1 });
    let (status, body) =
        json_request(api, "POST", &format!("/v1/coops/{coop}/members"), Some(member), Some(token)).await;
    assert_eq!(status, 201, "{body}");
}
