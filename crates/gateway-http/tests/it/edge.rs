//! The edge of every request: misbehaviour and quarantine (contract 10), and request ids kept
//! only from trusted proxies. Clients are told apart by `X-Forwarded-For` from a trusted proxy
//! (the in-process requests come from no socket, which the gateway takes as 127.0.0.1).

use std::time::Duration;

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::support::{TestApp, build, edge_app as app, from_client as from, key};

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
    // A browser can read the refusal (the cross-origin headers are on it too), and the
    // quarantine comes before the preflight: an OPTIONS from that address is refused as well.
    let mut preflight = from(build(Method::OPTIONS, "/v1/coops", None, None), "198.51.100.20");
    preflight.headers_mut().insert("origin", "http://localhost:3000".parse().unwrap());
    let refused = app.send(preflight).await;
    refused.assert_error(403, "AUTHORIZATION_FAILED");
    assert_eq!(refused.headers["access-control-allow-origin"], "*");
    assert!(!refused.headers.contains_key("access-control-allow-methods"), "not a preflight's answer");
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
