//! What the `gatewayctl` test binaries share: running the binary isolated from the caller's
//! environment, an in-process gateway to run it against, and members with keys of their own.
//! Each test binary uses a part of it.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;
use std::time::Duration;

use gateway_auth::TokenConfig;
use gateway_core::SystemClock;
use gateway_http::state::AssembleOptions;
use gateway_http::{CorsMode, HttpConfig};
use gateway_store::{Store, StoreSpec};
use serde_json::Value;

/// Runs `gatewayctl` with `args`, isolated from the caller's environment.
pub async fn ctl<S: AsRef<str>>(args: &[S]) -> Output {
    let args: Vec<String> = args.iter().map(|a| a.as_ref().to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_gatewayctl"))
            .args(&args)
            .env_remove("GATEWAYCTL_URL")
            .env_remove("GATEWAYCTL_KEY")
            .env_remove("GATEWAYCTL_COOP")
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs and expects success; returns stdout.
pub async fn ok<S: AsRef<str>>(args: &[S]) -> String {
    let output = ctl(args).await;
    let shown: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    assert!(output.status.success(), "{shown:?} failed:\n{}{}", stdout(&output), stderr(&output));
    stdout(&output)
}

/// Runs with `--json` and expects success; returns the parsed output.
pub async fn json<S: AsRef<str>>(args: &[S]) -> Value {
    let mut all: Vec<&str> = args.iter().map(AsRef::as_ref).collect();
    all.push("--json");
    serde_json::from_str(&ok(&all).await).unwrap()
}

/// The master secret of the test gateways' receipt keys (which also sign the coops' logs).
pub const MASTER: [u8; 32] = [5; 32];

/// A gateway over an in-memory store on 127.0.0.1:0; returns its URL.
pub async fn gateway() -> String {
    gateway_on(&StoreSpec::Memory).await.0
}

/// A gateway over `spec` on 127.0.0.1:0; returns its URL and its state, whose `log` signs a
/// coop's checkpoint on demand (no background checkpointer runs here).
pub async fn gateway_on(spec: &StoreSpec) -> (String, gateway_http::AppState) {
    let store = Arc::new(Store::open(spec).await.unwrap());
    let keys = gateway_domain::governance::MemoryReceiptKeys::new(MASTER);
    let options = AssembleOptions {
        token: TokenConfig::with_secret("cli-test-secret-cli-test-secret-cli"),
        challenge_ttl_secs: 300,
        open_enrollment: false,
        trust_anchors: vec![],
        trust_default: 0.9,
        trusted_proxies: vec![],
        http: HttpConfig { cors: CorsMode::Development, tls: false, version: "test", ..HttpConfig::default() },
        clock: Arc::new(SystemClock),
        limiter_clock: Arc::new(gateway_limits::ManualClock::new()),
        membership_ttl: Duration::ZERO,
        receipt_keys: Arc::new(keys),
        log: gateway_domain::log::LogConfig::default(),
        cluster: None,
        nonces: None,
    };
    let state = gateway_http::state::assemble(store, options).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = gateway_http::router(state.clone());
    tokio::spawn(async move { gateway_http::serve(listener, app, std::future::pending()).await });
    (url, state)
}

/// A member: a key file of its own and its DID.
pub struct Member {
    pub key: PathBuf,
    pub did: String,
}

impl Member {
    /// Generates the member's key under `dir/name`.
    pub async fn new(dir: &Path, name: &str) -> Self {
        let key = dir.join(name).join("key.json");
        let shown = json(&["--key", key.to_str().unwrap(), "key", "generate"]).await;
        Self { did: shown["did"].as_str().unwrap().to_owned(), key }
    }

    pub fn key(&self) -> &str {
        self.key.to_str().unwrap()
    }

    /// `args` as this member in `bakery` at `url`.
    pub fn run(&self, url: &str, args: &[&str]) -> Vec<String> {
        ["--gateway", url, "--key", self.key(), "--coop", "bakery"]
            .iter()
            .chain(args)
            .map(|a| (*a).to_owned())
            .collect()
    }
}
