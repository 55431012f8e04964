//! The request id in the logs, alone in its own test binary: a test subscriber installed for
//! one test (`set_default`) misses spans whose call sites other tests' threads reached first,
//! so this test cannot share a process with the others.

#![allow(unreachable_pub, missing_docs, dead_code)]

#[path = "it/support.rs"]
mod support;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};

use support::{build, edge_app, from_client};

/// The JSON lines a test's log subscriber wrote.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

impl Captured {
    /// The lines written since the last call, parsed.
    fn take(&self) -> Vec<serde_json::Value> {
        let bytes = std::mem::take(&mut *self.0.lock().unwrap());
        String::from_utf8(bytes).unwrap().lines().map(|line| serde_json::from_str(line).unwrap()).collect()
    }
}

/// What a handler logs while a request is served carries the request id of the request's
/// span, and so does the access line, once (in its span, not again in its fields), with the
/// client's address: the id the answer gives, a fresh one or a trusted proxy's. The edge's own
/// quarantine answer is logged inside the span too.
#[tokio::test]
async fn logs_carry_the_answers_request_id() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt().json().with_writer(captured.clone()).finish();
    let _default = tracing::subscriber::set_default(subscriber);
    let app = edge_app().await;
    let logging = axum::Router::new().route(
        "/logs",
        axum::routing::get(|| async {
            tracing::info!("in handler");
            "ok"
        }),
    );
    let router = gateway_http::router_with(app.state.clone(), logging, utoipa::openapi::OpenApi::default());
    let send = |request: Request<Body>| support::send(&router, request);
    let line_of = |lines: &[serde_json::Value], what: &str| {
        lines
            .iter()
            .find(|l| l["fields"]["message"] == what)
            .cloned()
            .unwrap_or_else(|| panic!("no {what:?} line in {lines:?}"))
    };

    for trusted in [None, Some("lb-7f3a")] {
        let mut request = build(Method::GET, "/logs", None, None);
        if let Some(id) = trusted {
            request.headers_mut().insert("x-request-id", id.parse().unwrap());
        }
        let response = send(request).await;
        assert_eq!(response.status, StatusCode::OK);
        let id = response.headers["x-request-id"].to_str().unwrap().to_owned();
        if let Some(sent) = trusted {
            assert_eq!(id, sent);
        }
        let lines = captured.take();
        let handler = line_of(&lines, "in handler");
        assert_eq!(handler["span"]["name"], "request", "{handler}");
        assert_eq!(handler["span"]["request_id"], id.as_str(), "{handler}");
        let access = line_of(&lines, "request");
        assert_eq!(access["target"], "gateway::access", "{access}");
        assert!(access["fields"]["request_id"].is_null(), "once per line: {access}");
        assert_eq!(access["fields"]["route"], "/logs", "{access}");
        assert!(access["fields"]["client"].as_str().is_some_and(|c| !c.is_empty()), "{access}");
        assert_eq!(access["span"]["request_id"], id.as_str(), "{access}");
    }

    let forged = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.AAAA";
    for _ in 0..3 {
        send(from_client(build(Method::GET, "/v1/coops", None, Some(forged)), "198.51.100.70")).await;
    }
    captured.take();
    let refused = send(from_client(build(Method::GET, "/logs", None, None), "198.51.100.70")).await;
    refused.assert_error(403, "AUTHORIZATION_FAILED");
    let id = refused.headers["x-request-id"].to_str().unwrap().to_owned();
    let lines = captured.take();
    assert!(lines.iter().all(|l| l["fields"]["message"] != "in handler"), "a quarantined request reaches no handler");
    let access = line_of(&lines, "request");
    assert_eq!(access["fields"]["status"], 403, "{access}");
    assert_eq!(access["fields"]["client"], "198.51.100.70", "the forwarded client: {access}");
    assert_eq!(access["span"]["request_id"], id.as_str(), "{access}");
}

/// The probes a load balancer sends every few seconds are logged at debug, everything else at
/// info: at the default level the access log shows traffic, not probes.
#[tokio::test]
async fn probes_are_logged_at_debug() {
    let captured = Captured::default();
    let subscriber =
        tracing_subscriber::fmt().json().with_max_level(tracing::Level::DEBUG).with_writer(captured.clone()).finish();
    let _default = tracing::subscriber::set_default(subscriber);
    let app = edge_app().await;
    let router = gateway_http::router(app.state.clone());
    for path in ["/healthz", "/readyz", "/v1/health", "/v1/coops"] {
        support::send(&router, build(Method::GET, path, None, None)).await;
        let lines = captured.take();
        let access = lines
            .iter()
            .find(|l| l["target"] == "gateway::access")
            .unwrap_or_else(|| panic!("{path}: no access line in {lines:?}"));
        let expected = if path == "/v1/coops" { "INFO" } else { "DEBUG" };
        assert_eq!(access["level"], expected, "{path}: {access}");
    }
}
