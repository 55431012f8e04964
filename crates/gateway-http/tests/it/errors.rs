//! The error body for failures that happen before any handler runs.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::json;

use crate::support::{TestApp, key};

fn raw(method: Method, uri: &str, content_type: Option<&str>, body: impl Into<Body>) -> Request<Body> {
    let mut builder = Request::builder().method(method).uri(uri);
    if let Some(ct) = content_type {
        builder = builder.header(header::CONTENT_TYPE, ct);
    }
    builder.body(body.into()).unwrap()
}

#[tokio::test]
async fn malformed_json_is_a_bad_request() {
    let app = TestApp::new().await;
    let response = app.send(raw(Method::POST, "/v1/auth/challenge", Some("application/json"), "{\"did\": ")).await;
    response.assert_error(400, "BAD_REQUEST");
    assert!(response.body["error"].as_str().unwrap().contains("malformed JSON"));
    let trailing = app.send(raw(Method::POST, "/v1/auth/challenge", Some("application/json"), "{} {}")).await;
    trailing.assert_error(400, "BAD_REQUEST");
}

#[tokio::test]
async fn mistyped_fields_are_named() {
    let app = TestApp::new().await;
    let response = app.post("/v1/auth/challenge", json!({ "did": 42 })).await;
    response.assert_error(400, "BAD_REQUEST");
    assert!(response.body["details"]["fields"]["did"][0].as_str().unwrap().contains("did"));
    let scopes =
        app.post("/v1/auth/verify", json!({ "did": "did:key:z6Mk", "signature": "00", "scopes": "ledger:read" })).await;
    assert!(scopes.body["details"]["fields"]["scopes"].is_array(), "{}", scopes.body);
}

#[tokio::test]
async fn unknown_fields_are_ignored() {
    let app = TestApp::new().await;
    let (_, did) = key(1);
    let response = app.post("/v1/auth/challenge", json!({ "did": did.to_string(), "colour": "blue" })).await;
    assert_eq!(response.status, StatusCode::OK, "{}", response.body);
}

#[tokio::test]
async fn wrong_content_type_is_a_bad_request() {
    let app = TestApp::new().await;
    let (_, did) = key(1);
    let body = json!({ "did": did.to_string() }).to_string();
    for ct in [Some("text/plain"), None, Some("application/x-www-form-urlencoded")] {
        let response = app.send(raw(Method::POST, "/v1/auth/challenge", ct, body.clone())).await;
        response.assert_error(400, "BAD_REQUEST");
        assert!(response.body["error"].as_str().unwrap().contains("Content-Type"));
    }
    let charset =
        app.send(raw(Method::POST, "/v1/auth/challenge", Some("application/json; charset=utf-8"), body)).await;
    assert_eq!(charset.status, StatusCode::OK);
}

#[tokio::test]
async fn unknown_path_is_404_and_wrong_method_405() {
    let app = TestApp::new().await;
    let missing = app.call(Method::GET, "/v1/no/such/route", None, None).await;
    missing.assert_error(404, "NOT_FOUND");
    assert_eq!(missing.body["details"]["resource"], "route");
    // Unknown paths are 404 even without a token: nothing is revealed by a 401.
    app.call(Method::GET, "/identity/nothing", None, None).await.assert_error(404, "NOT_FOUND");
    app.call(Method::DELETE, "/v1/health", None, None).await.assert_error(405, "METHOD_NOT_ALLOWED");
    app.call(Method::GET, "/v1/auth/challenge", None, None).await.assert_error(405, "METHOD_NOT_ALLOWED");
}

/// A declared length of 100 GB is refused from the header alone, before the body and before
/// authentication (a protected route answers 413, not 401), with the error body.
#[tokio::test]
async fn a_declared_oversize_is_413_before_anything_is_read() {
    let app = TestApp::new().await;
    for (uri, length) in [("/v1/ledger/c1/payment", "107374182400"), ("/v1/auth/challenge", "1048577")] {
        let mut request = raw(Method::POST, uri, Some("application/json"), "{}".to_owned());
        request.headers_mut().insert(axum::http::header::CONTENT_LENGTH, length.parse().unwrap());
        let response = app.send(request).await;
        response.assert_error(413, "PAYLOAD_TOO_LARGE");
        assert_eq!(response.body["details"]["limit_bytes"], 1024 * 1024, "{uri}");
        assert!(response.headers.contains_key("x-content-type-options"), "security headers on {uri}");
    }
    // Exactly the limit is still read.
    let mut request = raw(Method::POST, "/v1/auth/challenge", Some("application/json"), "{}".to_owned());
    request.headers_mut().insert(axum::http::header::CONTENT_LENGTH, "1048576".parse().unwrap());
    assert_ne!(app.send(request).await.status, 413);
}

#[tokio::test]
async fn oversized_body_is_413() {
    let app = TestApp::new().await;
    let big = format!("{{\"did\": \"{}\"}}", "a".repeat(1024 * 1024));
    let response = app.send(raw(Method::POST, "/v1/auth/challenge", Some("application/json"), big)).await;
    response.assert_error(413, "PAYLOAD_TOO_LARGE");
    assert_eq!(response.body["details"]["limit_bytes"], 1024 * 1024);
}
