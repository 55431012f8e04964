//! `cargo xtask baseline bare|jwt [--listen ADDR] [--body JSON]`: the reference servers of the
//! load harness's `ceiling` scenario, so that the gateway's balance read can be set against what
//! the same machine, the same HTTP stack and the same load generator give with (almost) nothing
//! to do.
//!
//! Both answer `GET /v1/ledger/{coop}/balance/{did}` with a constant JSON body of the gateway's
//! balance shape (`--body`, or a built-in one of the same shape) from axum on a multi-threaded
//! tokio runtime (one worker per core):
//!
//! - `bare`: no check at all;
//! - `jwt`: an HS256 bearer token checked with `jsonwebtoken` against the secret in
//!   `ICN_GATEWAY_JWT_SECRET` (signature, `exp`, `iss` and `aud` `icn-gateway`) and carrying the
//!   `ledger:read` scope; anything else is answered 401.
//!
//! It prints `listening on http://<host:port>` once bound (port 0 by default, so the harness reads
//! the address from that line) and serves until killed.

use std::process::ExitCode;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::serve::ListenerExt;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

/// The body when none is given: the gateway's shape for a member with nothing paid yet.
const DEFAULT_BODY: &str = r#"{"did":"did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK","currency":"hours","balance":0.0,"balances":{}}"#;

/// What a `jwt` baseline checks a token with.
struct Checker {
    key: DecodingKey,
    validation: Validation,
}

struct Baseline {
    /// The answer, shared (a clone is a reference count).
    body: bytes::Bytes,
    checker: Option<Checker>,
}

pub(crate) fn main(args: &[String]) -> ExitCode {
    let usage = "usage: cargo xtask baseline bare|jwt [--listen ADDR] [--body JSON]";
    let Some(mode) = args.first().map(String::as_str).filter(|m| matches!(*m, "bare" | "jwt")) else {
        eprintln!("{usage}");
        return ExitCode::from(2);
    };
    let (mut listen, mut body) = ("127.0.0.1:0".to_owned(), DEFAULT_BODY.to_owned());
    let mut it = args[1..].iter();
    while let Some(arg) = it.next() {
        match (arg.as_str(), it.next()) {
            ("--listen", Some(addr)) => listen = addr.clone(),
            ("--body", Some(json)) if serde_json::from_str::<Value>(json).is_ok() => body = json.clone(),
            _ => {
                eprintln!("{usage}");
                return ExitCode::from(2);
            }
        }
    }
    let checker = if mode == "jwt" {
        let Some(secret) = std::env::var("ICN_GATEWAY_JWT_SECRET").ok().filter(|s| !s.is_empty()) else {
            eprintln!("xtask baseline jwt: set ICN_GATEWAY_JWT_SECRET to the gateway's secret");
            return ExitCode::from(2);
        };
        let mut validation = Validation::new(Algorithm::HS256);
        validation.set_issuer(&["icn-gateway"]);
        validation.set_audience(&["icn-gateway"]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.leeway = 0;
        Some(Checker { key: DecodingKey::from_secret(secret.as_bytes()), validation })
    } else {
        None
    };
    let baseline = Arc::new(Baseline { body: bytes::Bytes::from(body), checker });
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    match runtime.block_on(serve(&listen, baseline)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask baseline: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(listen: &str, baseline: Arc<Baseline>) -> Result<(), String> {
    let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| format!("binding {listen}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let listener = listener.tap_io(|stream| {
        let _ = stream.set_nodelay(true);
    });
    let app = Router::new().route("/v1/ledger/{coop}/balance/{did}", get(balance)).with_state(baseline);
    println!("listening on http://{addr}");
    axum::serve(listener, app).await.map_err(|e| e.to_string())
}

async fn balance(State(baseline): State<Arc<Baseline>>, headers: HeaderMap) -> Response {
    if let Some(checker) = &baseline.checker
        && !authorized(checker, &headers)
    {
        let body = r#"{"error":"invalid or missing token","code":"AUTHENTICATION_FAILED","details":{}}"#;
        return (StatusCode::UNAUTHORIZED, [(header::CONTENT_TYPE, "application/json")], body).into_response();
    }
    ([(header::CONTENT_TYPE, "application/json")], baseline.body.clone()).into_response()
}

/// A valid HS256 bearer token (signature, expiry, issuer, audience) with the `ledger:read` scope.
fn authorized(checker: &Checker, headers: &HeaderMap) -> bool {
    let Some(token) =
        headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "))
    else {
        return false;
    };
    let Ok(data) = jsonwebtoken::decode::<Value>(token, &checker.key, &checker.validation) else {
        return false;
    };
    data.claims["scopes"].as_array().is_some_and(|scopes| scopes.iter().any(|s| s == "ledger:read"))
}
