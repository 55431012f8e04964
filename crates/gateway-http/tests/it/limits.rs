//! The three rate-limiting layers over HTTP: headers, 429 bodies, `Retry-After`, on manual
//! clocks.

use std::time::Duration;

use axum::http::{StatusCode, header};
use serde_json::json;

use crate::support::{ALL_SCOPES, TestApp, did_of, key};

#[tokio::test]
async fn authenticated_responses_carry_rate_limit_headers() {
    let app = TestApp::build(true, gateway_http::CorsMode::Development, 0.9, vec![]).await;
    let token = app.token(1, "c1", &ALL_SCOPES).await;
    let first = app.get("/identity/did", &token).await;
    assert_eq!(first.headers["x-ratelimit-limit"], "1000", "trust 0.9 is the top tier");
    assert_eq!(first.headers["x-ratelimit-remaining"], "999");
    let reset: u64 = first.headers["x-ratelimit-reset"].to_str().unwrap().parse().unwrap();
    assert!(reset > crate::support::START && reset <= crate::support::START + 60, "{reset}");
    let second = app.get("/identity/did", &token).await;
    assert_eq!(second.headers["x-ratelimit-remaining"], "998");
}

#[tokio::test]
async fn did_layer_refuses_with_429_and_retry_after() {
    // Trust 0.2: the lowest tier, 10 requests per minute.
    let app = TestApp::build(true, gateway_http::CorsMode::Development, 0.2, vec![]).await;
    let token = app.token(1, "c1", &ALL_SCOPES).await;
    for n in 0..10 {
        let r = app.get("/identity/did", &token).await;
        assert_eq!(r.status, StatusCode::OK, "request {n}");
        assert_eq!(r.headers["x-ratelimit-limit"], "10");
    }
    let refused = app.get("/identity/did", &token).await;
    refused.assert_error(429, "RATE_LIMIT_EXCEEDED");
    assert_eq!(refused.body["details"]["layer"], "did");
    assert_eq!(refused.body["details"]["limit"], 10);
    assert_eq!(refused.headers[header::RETRY_AFTER], "6", "one request per 6 s refills");
    assert_eq!(refused.body["details"]["retry_after_secs"], 6);
    assert_eq!(refused.headers["x-ratelimit-remaining"], "0");
    app.limiter_clock.advance(Duration::from_secs(6));
    assert_eq!(app.get("/identity/did", &token).await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_score_change_moves_the_did_to_its_new_tier_at_once() {
    let anchor = key(1).1;
    let app = TestApp::build(true, gateway_http::CorsMode::Development, 0.0, vec![anchor]).await;
    let anchor_token = app.token(1, "c1", &ALL_SCOPES).await;
    let token = app.token(2, "c1", &ALL_SCOPES).await;
    assert_eq!(app.get("/identity/did", &token).await.headers["x-ratelimit-limit"], "10");
    app.post_as("/v1/trust/edges", json!({ "target_did": did_of(2), "score": 0.6 }), &anchor_token).await;
    assert_eq!(app.get("/identity/did", &token).await.headers["x-ratelimit-limit"], "500");
}

#[tokio::test]
async fn ip_layer_guards_the_login_routes() {
    let app = TestApp::new().await;
    let (_, did) = key(1);
    for n in 0..20 {
        let r = app.post("/v1/auth/challenge", json!({ "did": did.to_string() })).await;
        assert_eq!(r.status, StatusCode::OK, "request {n}");
    }
    let refused = app.post("/v1/auth/verify", json!({ "did": did.to_string(), "signature": "00" })).await;
    refused.assert_error(429, "RATE_LIMIT_EXCEEDED");
    assert_eq!(refused.body["details"]["layer"], "ip");
    assert_eq!(refused.body["error"], "too many requests from this IP");
    assert_eq!(refused.headers[header::RETRY_AFTER], "1");
    app.limiter_clock.advance(Duration::from_millis(500));
    assert_eq!(app.post("/v1/auth/challenge", json!({ "did": did.to_string() })).await.status, StatusCode::OK);
    // Other public routes are not counted.
    assert_eq!(app.call(axum::http::Method::GET, "/v1/health", None, None).await.status, StatusCode::OK);
}

/// Coop stats and DID resolution share one public-read bucket per address (burst 120, 20/s), of
/// their own: using it up leaves the address's logins alone, and the probes are never limited.
#[tokio::test]
async fn ip_layer_guards_the_public_reads_with_a_bucket_of_their_own() {
    use axum::http::Method;
    let app = TestApp::new().await;
    let (_, did) = key(1);
    let resolve = format!("/v1/identity/resolve/{did}");
    for n in 0..120 {
        let uri = if n % 2 == 0 { "/v1/coops/nowhere/stats" } else { resolve.as_str() };
        let r = app.call(Method::GET, uri, None, None).await;
        assert_ne!(r.status, StatusCode::TOO_MANY_REQUESTS, "request {n} of the burst: {}", r.body);
    }
    let refused = app.call(Method::GET, &resolve, None, None).await;
    refused.assert_error(429, "RATE_LIMIT_EXCEEDED");
    assert_eq!(refused.body["details"]["layer"], "ip");
    assert_eq!(refused.headers[header::RETRY_AFTER], "1");
    app.call(Method::GET, "/v1/coops/nowhere/stats", None, None).await.assert_error(429, "RATE_LIMIT_EXCEEDED");
    // The login bucket of the same address is untouched, and the probes are not limited.
    let challenge = app.post("/v1/auth/challenge", json!({ "did": did.to_string() })).await;
    assert_eq!(challenge.status, StatusCode::OK);
    for probe in ["/healthz", "/readyz", "/v1/health"] {
        assert_eq!(app.call(Method::GET, probe, None, None).await.status, StatusCode::OK, "{probe}");
    }
    // Refilled at 20 per second.
    app.limiter_clock.advance(Duration::from_millis(50));
    assert_ne!(app.call(Method::GET, &resolve, None, None).await.status, StatusCode::TOO_MANY_REQUESTS);
}

#[tokio::test]
async fn velocity_counts_successful_payments_per_hour() {
    // Trust 0.05 for everyone: Isolated, 10 transactions per hour (and the lowest DID tier,
    // so the test spreads requests over time to stay within it).
    let app = TestApp::build(true, gateway_http::CorsMode::Development, 0.05, vec![]).await;
    let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3]).await;
    let pay = |amount: f64| json!({ "from": did_of(2), "to": did_of(3), "amount": amount });
    // A payment refused by the domain (here the high-value trust gate) is not counted.
    app.limiter_clock.advance(Duration::from_secs(60));
    app.post_as("/v1/ledger/c1/payment", pay(5000.0), &tokens[0]).await.assert_error(403, "INSUFFICIENT_TRUST");
    for n in 0..10 {
        app.limiter_clock.advance(Duration::from_secs(7));
        let r = app.post_as("/v1/ledger/c1/payment", pay(1.0), &tokens[0]).await;
        assert_eq!(r.status, StatusCode::CREATED, "payment {n}: {}", r.body);
    }
    app.limiter_clock.advance(Duration::from_secs(7));
    let refused = app.post_as("/v1/ledger/c1/payment", pay(1.0), &tokens[0]).await;
    refused.assert_error(429, "RATE_LIMIT_EXCEEDED");
    assert_eq!(refused.body["details"]["layer"], "velocity");
    assert_eq!(refused.body["details"]["count"], 10);
    assert_eq!(refused.body["details"]["limit"], 10);
    assert!(refused.body["error"].as_str().unwrap().ends_with("10/10 per hour"), "{}", refused.body);
    assert!(refused.headers.contains_key(header::RETRY_AFTER));
    // Another payer has its own window.
    let other = app
        .post_as("/v1/ledger/c1/payment", json!({ "from": did_of(3), "to": did_of(2), "amount": 1 }), &tokens[1])
        .await;
    assert_eq!(other.status, StatusCode::CREATED);
    // An hour after the first counted payment, one slot frees.
    app.limiter_clock.advance(Duration::from_secs(3600 - 70 + 1));
    assert_eq!(app.post_as("/v1/ledger/c1/payment", pay(1.0), &tokens[0]).await.status, StatusCode::CREATED);
}
