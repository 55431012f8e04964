//! The edge of every request: misbehaviour and quarantine (contract 10), and request ids kept
//! only from trusted proxies. Clients are told apart by `X-Forwarded-For` from a trusted proxy
//! (the in-process requests come from no socket, which the gateway takes as 127.0.0.1).

use std::num::NonZeroU32;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use gateway_limits::QuarantinePolicy;
use serde_json::json;

use crate::support::{TestApp, build, key};

/// A gateway behind the trusted proxy 127.0.0.1 that quarantines an address after 3 violations
/// within a minute, for 10 minutes.
async fn app() -> TestApp {
    TestApp::customised(|options| {
        options.trusted_proxies = vec![gateway_http::limits::parse_proxy("127.0.0.1").unwrap()];
        options.http.quarantine = QuarantinePolicy {
            threshold: NonZeroU32::new(3).unwrap(),
            window: Duration::from_secs(60),
            quarantine: Duration::from_secs(600),
        };
    })
    .await
}

fn from(mut request: Request<Body>, client: &str) -> Request<Body> {
    request.headers_mut().insert("x-forwarded-for", client.parse().unwrap());
    request
}

#[tokio::test]
async fn repeated_violations_quarantine_the_address_and_nobody_else() {
    let app = app().await;
    let forged = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.AAAA";
    for _ in 0..3 {
        let response = app.send(from(build(Method::GET, "/v1/coops", None, Some(forged)), "198.51.100.20")).await;
        response.assert_error(401, "AUTHENTICATION_FAILED");
    }
    // Every request of that address is now 403 quarantined, a health probe included.
    for uri in ["/v1/health", "/v1/coops"] {
        let response = app.send(from(build(Method::GET, uri, None, None), "198.51.100.20")).await;
        response.assert_error(403, "AUTHORIZATION_FAILED");
        assert_eq!(response.body["details"]["reason"], "quarantined", "{}", response.body);
        assert_eq!(response.headers["retry-after"], "600");
        // The edge's own answer has what every answer has.
        assert_eq!(response.headers["x-content-type-options"], "nosniff");
        assert_eq!(response.headers["content-security-policy"], "default-src 'self'");
        assert_eq!(response.headers["x-request-id"].len(), 36);
    }
    // Another address, and the trusted proxy itself, are served.
    let other = app.send(from(build(Method::GET, "/v1/health", None, None), "198.51.100.21")).await;
    assert_eq!(other.status, StatusCode::OK);
    let proxy = app.send(build(Method::GET, "/v1/health", None, None)).await;
    assert_eq!(proxy.status, StatusCode::OK);
    // The quarantine ends on its own.
    app.limiter_clock.advance(Duration::from_secs(600));
    let back = app.send(from(build(Method::GET, "/v1/health", None, None), "198.51.100.20")).await;
    assert_eq!(back.status, StatusCode::OK);
}

#[tokio::test]
async fn the_trusted_proxy_is_never_quarantined() {
    let app = app().await;
    let forged = "not.a.token";
    for _ in 0..10 {
        let response = app.send(build(Method::GET, "/v1/coops", None, Some(forged))).await;
        response.assert_error(401, "AUTHENTICATION_FAILED");
    }
    let response = app.send(build(Method::GET, "/v1/health", None, None)).await;
    assert_eq!(response.status, StatusCode::OK, "{}", response.body);
}

#[tokio::test]
async fn bad_login_signatures_replayed_challenges_and_oversized_bodies_are_violations() {
    let app = app().await;
    let (_, did) = key(9);
    let client = "198.51.100.30";
    let challenge = app
        .send(from(build(Method::POST, "/v1/auth/challenge", Some(json!({ "did": did.to_string() })), None), client))
        .await;
    assert_eq!(challenge.status, StatusCode::OK);
    let bad =
        json!({ "did": did.to_string(), "signature": "11".repeat(64), "challenge_id": challenge.body["challenge_id"] });
    app.send(from(build(Method::POST, "/v1/auth/verify", Some(bad.clone()), None), client))
        .await
        .assert_error(401, "AUTHENTICATION_FAILED");
    // The named challenge is consumed: the same verify again is a replay.
    app.send(from(build(Method::POST, "/v1/auth/verify", Some(bad), None), client))
        .await
        .assert_error(401, "AUTHENTICATION_FAILED");
    let mut oversized = from(build(Method::POST, "/v1/auth/challenge", None, None), client);
    oversized.headers_mut().insert("content-length", "5000000".parse().unwrap());
    app.send(oversized).await.assert_error(413, "PAYLOAD_TOO_LARGE");
    let response = app.send(from(build(Method::GET, "/v1/health", None, None), client)).await;
    response.assert_error(403, "AUTHORIZATION_FAILED");
    assert_eq!(response.body["details"]["reason"], "quarantined");
}

#[tokio::test]
async fn an_expired_token_is_not_misbehaviour() {
    let app = app().await;
    let token = app.token(4, "edge", &["coop:read", "coop:write"]).await;
    app.clock.advance_secs(7200);
    for _ in 0..5 {
        let response = app.send(from(build(Method::GET, "/v1/coops", None, Some(&token)), "198.51.100.40")).await;
        response.assert_error(401, "AUTHENTICATION_FAILED");
    }
    let response = app.send(from(build(Method::GET, "/v1/health", None, None), "198.51.100.40")).await;
    assert_eq!(response.status, StatusCode::OK, "{}", response.body);
}

#[tokio::test]
async fn a_request_id_is_kept_only_from_a_trusted_proxy() {
    let trusting = app().await;
    let mut request = build(Method::GET, "/v1/health", None, None);
    request.headers_mut().insert("x-request-id", "lb-7f3a".parse().unwrap());
    let response = trusting.send(request).await;
    assert_eq!(response.headers["x-request-id"], "lb-7f3a", "from the trusted proxy: kept");

    let untrusting = TestApp::new().await;
    let mut request = build(Method::GET, "/v1/health", None, None);
    request.headers_mut().insert("x-request-id", "chosen-by-client".parse().unwrap());
    let response = untrusting.send(request).await;
    let id = response.headers["x-request-id"].to_str().unwrap();
    assert_ne!(id, "chosen-by-client", "a client cannot choose its request id");
    assert_eq!(id.len(), 36, "a fresh UUID: {id}");
}

/// Even from the trusted proxy, only a short token of `[A-Za-z0-9-_.:]` is kept: an empty id,
/// one with other characters, or one over 128 bytes is replaced by a fresh UUID.
#[tokio::test]
async fn a_trusted_proxys_request_id_must_be_a_short_token() {
    let trusting = app().await;
    let longest = "x".repeat(128);
    let too_long = "x".repeat(129);
    for (sent, kept) in [
        ("lb-7f3a:node_2.eu", true),
        (longest.as_str(), true),
        (too_long.as_str(), false),
        ("", false),
        ("a b", false),
        ("a\tb", false),
        ("a\"b", false),
        ("a/b", false),
    ] {
        let mut request = build(Method::GET, "/v1/health", None, None);
        request.headers_mut().insert("x-request-id", sent.parse().unwrap());
        let response = trusting.send(request).await;
        let id = response.headers["x-request-id"].to_str().unwrap();
        if kept {
            assert_eq!(id, sent, "a short token from the trusted proxy is kept");
        } else {
            assert_ne!(id, sent, "{sent:?} is replaced");
            assert_eq!(id.len(), 36, "{sent:?} is replaced by a fresh UUID, not {id}");
        }
    }
}

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
/// span, and the access line carries it in its fields: both the id the answer gives, a fresh
/// one or a trusted proxy's. The edge's own quarantine answer is logged inside the span too.
#[tokio::test]
async fn logs_carry_the_answers_request_id() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt().json().with_writer(captured.clone()).finish();
    let _default = tracing::subscriber::set_default(subscriber);
    let app = app().await;
    let logging = axum::Router::new().route(
        "/logs",
        axum::routing::get(|| async {
            tracing::info!("in handler");
            "ok"
        }),
    );
    let router = gateway_http::router_with(app.state.clone(), logging, utoipa::openapi::OpenApi::default());
    let send = |request: Request<Body>| crate::support::send(&router, request);
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
        assert_eq!(access["fields"]["request_id"], id.as_str(), "{access}");
        assert_eq!(access["fields"]["route"], "/logs", "{access}");
        assert_eq!(access["span"]["request_id"], id.as_str(), "{access}");
    }

    let forged = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.AAAA";
    for _ in 0..3 {
        send(from(build(Method::GET, "/v1/coops", None, Some(forged)), "198.51.100.70")).await;
    }
    captured.take();
    let refused = send(from(build(Method::GET, "/logs", None, None), "198.51.100.70")).await;
    refused.assert_error(403, "AUTHORIZATION_FAILED");
    let id = refused.headers["x-request-id"].to_str().unwrap().to_owned();
    let lines = captured.take();
    assert!(lines.iter().all(|l| l["fields"]["message"] != "in handler"), "a quarantined request reaches no handler");
    let access = line_of(&lines, "request");
    assert_eq!(access["fields"]["status"], 403, "{access}");
    assert_eq!(access["fields"]["request_id"], id.as_str(), "{access}");
    assert_eq!(access["span"]["request_id"], id.as_str(), "{access}");
}
