//! `cargo xtask swagger-check`: the Swagger UI as a usable door, checked in headless Chromium.
//!
//! Builds and starts a debug `gatewayd` on the in-memory store, logs in through challenge and
//! verify with a real Ed25519 key (an identity-only token), and runs `xtask/swagger/check.mjs`
//! (playwright-core driving the system Chromium) against it. The script checks that every
//! operation of `/api-docs/openapi.json` is rendered, that Authorize with the bearer token makes
//! "Try it out" of `GET /identity/did` answer 200 with the DID, that the description of
//! `POST /v1/auth/verify` says what to sign, and that the page logs no console errors. Any failure
//! fails the command, and leaves a screenshot in `target/swagger-check.png`.
//!
//! Needs node 20 or later with npm, and Chromium at `/usr/bin/chromium` or `$CHROMIUM` (Debian:
//! `apt-get install -y chromium`; `.ci/run` installs it). `npm ci` fills `xtask/swagger/node_modules`
//! from the committed lock file when it is missing; playwright-core downloads no browser.

use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};

use crate::client::{Connection, Server, identity, login, workspace};

const SECRET: &str = "swagger-check-secret-swagger-check!!";

pub(crate) fn main(args: &[String]) -> ExitCode {
    if !args.is_empty() {
        eprintln!("usage: cargo xtask swagger-check");
        return ExitCode::from(2);
    }
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("xtask swagger-check: {err}");
            ExitCode::FAILURE
        }
    }
}

fn chromium() -> PathBuf {
    std::env::var_os("CHROMIUM").map_or_else(|| PathBuf::from("/usr/bin/chromium"), PathBuf::from)
}

fn run() -> Result<(), String> {
    let chromium = chromium();
    if !chromium.exists() {
        return Err(format!(
            "no Chromium at {}: install it with `apt-get install -y chromium` (Debian), or set CHROMIUM",
            chromium.display()
        ));
    }
    let dir = workspace().join("xtask/swagger");
    if !dir.join("node_modules").exists() {
        println!("xtask swagger-check: npm ci in {}", dir.display());
        let status = Command::new("npm")
            .args(["ci", "--silent", "--prefix"])
            .arg(&dir)
            .stdin(Stdio::null())
            .status()
            .map_err(|e| format!("running npm (install node 20 or later with npm): {e}"))?;
        if !status.success() {
            return Err(format!("npm ci --prefix {} failed ({status})", dir.display()));
        }
    }

    let server = Server::start_debug(&["--store", "memory"], SECRET)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    let token = runtime.block_on(identity_token(&server.addr))?;

    let base = format!("http://{}", server.addr);
    let screenshot = workspace().join("target/swagger-check.png");
    println!("xtask swagger-check: {base}/swagger-ui/ in {}", chromium.display());
    let status = Command::new("node")
        .arg(dir.join("check.mjs"))
        .args([&base, &token])
        .env("CHROMIUM", &chromium)
        .env("SWAGGER_CHECK_SCREENSHOT", &screenshot)
        .stdin(Stdio::null())
        .status()
        .map_err(|e| format!("running node (install node 20 or later): {e}"))?;
    if status.success() { Ok(()) } else { Err(format!("the Swagger UI check failed ({status})")) }
}

/// Logs in through challenge and verify without `coop_id` and `scopes`: an identity-only token,
/// enough for `GET /identity/did`.
async fn identity_token(addr: &str) -> Result<String, String> {
    let (key, did) = identity(1);
    let mut conn = Connection::open(addr).await?;
    login(&mut conn, &key, &did, None).await
}
