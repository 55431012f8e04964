//! The edge of every request: misbehaviour and quarantine (INTERFACE.md §10), and request ids kept
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
async fn bad_login_signatures_and_replayed_challenges_count_toward_quarantine() {
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
    app.send(from(build(Method::POST, "/v1/auth/verify", Some(bad.clone()), None), client))
        .await
        .assert_error(401, "AUTHENTICATION_FAILED");
    // Oversized bodies in between count for nothing.
    for _ in 0..10 {
        let mut oversized = from(build(Method::POST, "/v1/auth/challenge", None, None), client);
        oversized.headers_mut().insert("content-length", "5000000".parse().unwrap());
        app.send(oversized).await.assert_error(413, "PAYLOAD_TOO_LARGE");
    }
    let response = app.send(from(build(Method::GET, "/v1/health", None, None), client)).await;
    assert_eq!(response.status, StatusCode::OK, "two counting violations of three: {}", response.body);
    app.send(from(build(Method::POST, "/v1/auth/verify", Some(bad), None), client))
        .await
        .assert_error(401, "AUTHENTICATION_FAILED");
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

/// A hostile page makes its visitors' browsers send cross-site POSTs with oversized bodies, as
/// many as it likes: the office behind one NAT address is never quarantined for it (INTERFACE.md
/// §10.6), though crafted credentials from that address still are.
#[tokio::test]
async fn oversized_cross_site_posts_never_quarantine_the_visitors_address() {
    let app = app().await;
    let office = "198.51.100.50";
    for _ in 0..60 {
        let mut post = from(build(Method::POST, "/v1/auth/challenge", None, None), office);
        post.headers_mut().insert("content-length", "5000000".parse().unwrap());
        post.headers_mut().insert("origin", "https://evil.example".parse().unwrap());
        post.headers_mut().insert("content-type", "text/plain".parse().unwrap());
        app.send(post).await.assert_error(413, "PAYLOAD_TOO_LARGE");
    }
    let response = app.send(from(build(Method::GET, "/v1/health", None, None), office)).await;
    assert_eq!(response.status, StatusCode::OK, "{}", response.body);
    for _ in 0..3 {
        let forged = build(Method::GET, "/v1/coops", None, Some("not.a.token"));
        app.send(from(forged, office)).await.assert_error(401, "AUTHENTICATION_FAILED");
    }
    let response = app.send(from(build(Method::GET, "/v1/health", None, None), office)).await;
    assert_eq!(response.body["details"]["reason"], "quarantined", "{}", response.body);
}

/// A forged token forwarded by the trusted proxy (127.0.0.1) with an `X-Forwarded-For` of
/// `line`.
async fn forge(app: &TestApp, line: &str) {
    let mut request = build(Method::GET, "/v1/coops", None, Some("not.a.token"));
    request.headers_mut().insert("x-forwarded-for", line.parse().unwrap());
    app.send(request).await.assert_error(401, "AUTHENTICATION_FAILED");
}

async fn quarantined(app: &TestApp, client: &str) -> bool {
    let response = app.send(from(build(Method::GET, "/v1/health", None, None), client)).await;
    response.status == StatusCode::FORBIDDEN && response.body["details"]["reason"] == "quarantined"
}

/// A proxy that appends the port (`ip:port`, `[v6]:port`) keys the request by the address it
/// appended, never by what the client wrote to its left: a client cannot dodge its quarantine
/// by naming a new address each time.
#[tokio::test]
async fn a_client_behind_a_port_appending_proxy_cannot_choose_its_address() {
    let app = app().await;
    for n in 1..=3 {
        forge(&app, &format!("192.0.2.{n}, 203.0.113.77:5555")).await;
    }
    assert!(quarantined(&app, "203.0.113.77").await, "keyed by the address the proxy appended");
    assert!(!quarantined(&app, "192.0.2.1").await, "never by the client's own entries");
    for n in 1..=3 {
        forge(&app, &format!("192.0.2.{n}, [2001:db8:1:2::9]:443")).await;
    }
    assert!(quarantined(&app, "2001:db8:1:2::1").await, "keyed by the appended IPv6 address's /64");
}

/// An entry that cannot be parsed ends the walk at the nearest trusted proxy: the request is
/// keyed by the proxy (never quarantined), not by an address to the entry's left.
#[tokio::test]
async fn an_unparsable_entry_keys_the_request_by_the_nearest_trusted_proxy() {
    let app = app().await;
    for _ in 0..3 {
        forge(&app, "203.0.113.88, garbage").await;
        forge(&app, "203.0.113.88, 203.0.113.88:99999").await;
        forge(&app, "203.0.113.88, unknown").await;
    }
    assert!(!quarantined(&app, "203.0.113.88").await, "the entry left of the garbage is not believed");
    let proxy = app.send(build(Method::GET, "/v1/health", None, None)).await;
    assert_eq!(proxy.status, StatusCode::OK, "the proxy, whose request it became, is never quarantined");
}

/// A router with stand-ins for the WebSocket routes (gateway-ws's own are merged the same way
/// by the binary): the edge decides before them.
fn with_stream_routes(app: &TestApp) -> axum::Router {
    let reached = || async { "reached the upgrade handler" };
    let routes = axum::Router::new()
        .route("/ws", axum::routing::get(reached))
        .route("/v1/ws/{coop}", axum::routing::get(reached));
    gateway_http::router_with(app.state.clone(), routes, utoipa::openapi::OpenApi::default())
}

fn upgrade(uri: &str, origin: Option<&str>, upgrade: &str) -> axum::http::Request<axum::body::Body> {
    let mut request = build(Method::GET, uri, None, None);
    let headers = request.headers_mut();
    headers.insert("connection", "Upgrade".parse().unwrap());
    headers.insert("upgrade", upgrade.parse().unwrap());
    headers.insert("sec-websocket-version", "13".parse().unwrap());
    headers.insert("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==".parse().unwrap());
    if let Some(origin) = origin {
        headers.insert("origin", origin.parse().unwrap());
    }
    request
}

/// In production, a WebSocket upgrade whose `Origin` is present and not the allowed one is
/// refused 403 with the error body before any handler (so before any frame); the allowed
/// origin and clients without `Origin` reach the handler; development allows every origin.
#[tokio::test]
async fn a_websocket_upgrade_from_another_origin_is_refused_in_production() {
    let allowed = "https://coop.example";
    let production = TestApp::with(
        false,
        gateway_http::CorsMode::Production { origin: Some(axum::http::HeaderValue::from_static(allowed)) },
    )
    .await;
    let router = with_stream_routes(&production);
    for uri in ["/ws", "/v1/ws/edge"] {
        for (origin, protocol) in [
            ("https://evil.example", "websocket"),
            ("https://evil.example", "WebSocket"),
            ("https://evil.example", "h2c, websocket"),
            ("null", "websocket"),
            ("https://coop.example.evil", "websocket"),
            ("http://coop.example", "websocket"),
        ] {
            let response = crate::support::send(&router, upgrade(uri, Some(origin), protocol)).await;
            response.assert_error(403, "AUTHORIZATION_FAILED");
            assert_eq!(response.body["details"]["reason"], "origin_not_allowed", "{uri} from {origin}");
            assert_eq!(response.headers["x-content-type-options"], "nosniff");
        }
        for origin in [Some(allowed), None] {
            let response = crate::support::send(&router, upgrade(uri, origin, "websocket")).await;
            assert_eq!(response.status, StatusCode::OK, "{uri} from {origin:?}: {}", response.body);
        }
    }
    let closed = TestApp::with(false, gateway_http::CorsMode::Production { origin: None }).await;
    let response = crate::support::send(&with_stream_routes(&closed), upgrade("/ws", Some(allowed), "websocket")).await;
    response.assert_error(403, "AUTHORIZATION_FAILED");
    let development = TestApp::with(false, gateway_http::CorsMode::Development).await;
    let response = crate::support::send(
        &with_stream_routes(&development),
        upgrade("/ws", Some("https://evil.example"), "websocket"),
    )
    .await;
    assert_eq!(response.status, StatusCode::OK, "development allows any origin");
}
