//! `cargo xtask api-check`: the OpenAPI document checked against the gateway's real answers.
//!
//! Builds and starts a debug `gatewayd` on the in-memory store with a keystore (so the coop's log
//! is signed, as in production), logs in through challenge and
//! verify with a real Ed25519 key (every scope), prepares a coop with a second member, and runs
//! schemathesis against `/api-docs/openapi.json` with that token and the checks
//! `not_a_server_error`, `response_schema_conformance`, `status_code_conformance` and
//! `content_type_conformance`. Any failure fails the command.
//!
//! schemathesis is `$SCHEMATHESIS`, else `target/ci-venv/bin/st` (where `.ci/run` installs the
//! pinned version), else `st` on the PATH. Options: `--max-examples N` (default 30) and
//! `--seed N` (default fixed, so a run is reproducible).

use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};

use serde_json::json;

use crate::client::{Connection, Server, build_debug_gatewayd, expect, identity, login, workspace};

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

fn schemathesis() -> PathBuf {
    if let Some(path) = std::env::var_os("SCHEMATHESIS") {
        return path.into();
    }
    let venv = workspace().join("target/ci-venv/bin/st");
    if venv.exists() { venv } else { "st".into() }
}

fn run(max_examples: &str, seed: &str) -> Result<(), String> {
    // With a keystore, as in production: the coop's log is signed, so the log routes answer
    // with real checkpoints and proofs (without one, a proof that waits gets its documented 503).
    let dir = std::env::temp_dir().join(format!("icn-api-check-{}", std::process::id()));
    let result = with_keystore(&dir).and_then(|(binary, keystore, passphrase)| {
        let flags = [
            "--store",
            "memory",
            "--open-enrollment",
            "true",
            "--trust-default",
            "0.9",
            "--keystore",
            &keystore,
            "--passphrase-file",
            &passphrase,
        ];
        check(Server::start(&binary, &flags, SECRET)?, max_examples, seed)
    });
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// Builds the debug `gatewayd` and makes a keystore in `dir`: the binary, the keystore's path and
/// its passphrase file's.
fn with_keystore(dir: &std::path::Path) -> Result<(PathBuf, String, String), String> {
    let binary = build_debug_gatewayd()?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let (keystore, passphrase) = (dir.join("keystore.json"), dir.join("passphrase"));
    std::fs::write(&passphrase, "api-check keystore passphrase\n").map_err(|e| e.to_string())?;
    let _ = std::fs::remove_file(&keystore);
    let made = Command::new(&binary)
        .args(["keystore", "init", "--keystore"])
        .arg(&keystore)
        .arg("--passphrase-file")
        .arg(&passphrase)
        .env_remove("ICN_PASSPHRASE")
        .output()
        .map_err(|e| format!("gatewayd keystore init: {e}"))?;
    if !made.status.success() {
        return Err(format!("gatewayd keystore init: {}", String::from_utf8_lossy(&made.stderr)));
    }
    Ok((binary, keystore.display().to_string(), passphrase.display().to_string()))
}

fn check(server: Server, max_examples: &str, seed: &str) -> Result<(), String> {
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

/// Logs in as the founder of coop `api` through challenge and verify, creates the coop and adds
/// a member; returns the founder's token.
async fn prepare(addr: &str) -> Result<String, String> {
    let (key, did) = identity(1);
    let mut conn = Connection::open(addr).await?;
    let scopes: Vec<&str> = gateway_core::Scope::ALL.iter().map(|s| s.as_str()).collect();
    let token = login(&mut conn, &key, &did, Some((COOP, scopes.as_slice()))).await?;
    let coop = json!({ "name": "API check", "coop_type": "worker" });
    expect(conn.send("POST", "/v1/coops", Some(&token), Some(&coop)).await?, 201)?;
    let member = json!({ "did": identity(2).1 });
    expect(conn.send("POST", &format!("/v1/coops/{COOP}/members"), Some(&token), Some(&member)).await?, 201)?;
    Ok(token)
}
