//! `cargo xtask api-check`: the OpenAPI document checked against the gateway's real answers.
//!
//! Builds and starts a debug `gatewayd` on the in-memory store, logs in through challenge and
//! verify with a real Ed25519 key (every scope), prepares a coop with a second member, and runs
//! schemathesis against `/api-docs/openapi.json` with that token and the checks
//! `not_a_server_error`, `response_schema_conformance`, `status_code_conformance` and
//! `content_type_conformance`. Any failure fails the command.
//!
//! schemathesis is `$SCHEMATHESIS`, else `target/ci-venv/bin/st` (where `.ci/run` installs the
//! pinned version), else `st` on the PATH. Options: `--max-examples N` (default 30) and
//! `--seed N` (default fixed, so a run is reproducible).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use ed25519_dalek::{Signer, SigningKey};
use gateway_core::{Did, Ed25519PublicKey};
use serde_json::{Value, json};

use crate::client::{Connection, Server};

const SECRET: &str = "api-check-secret-api-check-secret!!";
const COOP: &str = "api";
const CHECKS: &str = "not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance";

pub(crate) fn main(args: &[String]) -> ExitCode {
    let mut max_examples = "30".to_owned();
    let mut seed = "20261123".to_owned();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match (arg.as_str(), rest.next()) {
            ("--max-examples", Some(n)) => max_examples = n.clone(),
            ("--seed", Some(n)) => seed = n.clone(),
            _ => {
                eprintln!("usage: cargo xtask api-check [--max-examples N] [--seed N]");
                return ExitCode::from(2);
            }
        }
    }
    match run(&max_examples, &seed) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask api-check: {err}");
            ExitCode::FAILURE
        }
    }
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn schemathesis() -> PathBuf {
    if let Some(path) = std::env::var_os("SCHEMATHESIS") {
        return path.into();
    }
    let venv = workspace().join("target/ci-venv/bin/st");
    if venv.exists() { venv } else { "st".into() }
}

fn run(max_examples: &str, seed: &str) -> Result<(), String> {
    let status = crate::cargo()
        .args(["build", "--locked", "-p", "gatewayd"])
        .status()
        .map_err(|e| format!("building gatewayd: {e}"))?;
    if !status.success() {
        return Err("building gatewayd failed".into());
    }
    let binary = workspace().join("target/debug/gatewayd");
    let flags = ["--store", "memory", "--open-enrollment", "true", "--trust-default", "0.9"];
    let server = Server::start(&binary, &flags, SECRET)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    let token = runtime.block_on(prepare(&server.addr))?;
    let schema = format!("http://{}/api-docs/openapi.json", server.addr);
    let st = schemathesis();
    println!("xtask api-check: {} against {schema}", st.display());
    let status = Command::new(&st)
        .args(["run", &schema, "--checks", CHECKS, "--max-examples", max_examples, "--seed", seed])
        .args(["--workers", "1", "--no-color", "--suppress-health-check", "all"])
        .args(["-H", &format!("Authorization: Bearer {token}")])
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("running {} (install it with .ci/run, or set SCHEMATHESIS): {e}", st.display()))?;
    if status.success() { Ok(()) } else { Err(format!("schemathesis reported failures ({status})")) }
}

/// The signing key of seed `n` and its `did:key`.
fn identity(n: u8) -> (SigningKey, String) {
    let key = SigningKey::from_bytes(&[n; 32]);
    let did = Did::key_from_public_key(&Ed25519PublicKey(key.verifying_key().to_bytes())).to_string();
    (key, did)
}

/// Logs in as the founder of coop `api` through challenge and verify, creates the coop and adds
/// a member; returns the founder's token.
async fn prepare(addr: &str) -> Result<String, String> {
    let (key, did) = identity(1);
    let mut conn = Connection::open(addr).await?;
    let challenge = expect(conn.send("POST", "/v1/auth/challenge", None, Some(&json!({ "did": did }))).await?, 200)?;
    let nonce = challenge["nonce"].as_str().ok_or("the challenge has no nonce")?;
    let signature = hex::encode(key.sign(nonce.as_bytes()).to_bytes());
    let scopes: Vec<&str> = gateway_core::Scope::ALL.iter().map(|s| s.as_str()).collect();
    let verify = json!({ "did": did, "signature": signature, "coop_id": COOP, "scopes": scopes });
    let login = expect(conn.send("POST", "/v1/auth/verify", None, Some(&verify)).await?, 200)?;
    let token = login["token"].as_str().ok_or("the login answer has no token")?.to_owned();
    let coop = json!({ "name": "API check", "coop_type": "worker" });
    expect(conn.send("POST", "/v1/coops", Some(&token), Some(&coop)).await?, 201)?;
    let member = json!({ "did": identity(2).1 });
    expect(conn.send("POST", &format!("/v1/coops/{COOP}/members"), Some(&token), Some(&member)).await?, 201)?;
    Ok(token)
}

fn expect((status, body): (u16, bytes::Bytes), want: u16) -> Result<Value, String> {
    if status != want {
        return Err(format!("expected {want}, got {status}: {}", String::from_utf8_lossy(&body)));
    }
    serde_json::from_slice(&body).map_err(|e| format!("answer is not JSON: {e}"))
}
