//! Security headers, CORS modes, request ids and the published API description.

use axum::body::Body;
use axum::http::{HeaderValue, Method, Request, StatusCode, header};

use crate::support::TestApp;

#[tokio::test]
async fn security_headers_are_on_every_response() {
    let app = TestApp::new().await;
    for (method, uri) in [(Method::GET, "/v1/health"), (Method::GET, "/nowhere"), (Method::GET, "/identity/did")] {
        let response = app.call(method, uri, None, None).await;
        let h = &response.headers;
        assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{uri}");
        assert_eq!(h[header::X_FRAME_OPTIONS], "DENY");
        assert_eq!(h[header::CONTENT_SECURITY_POLICY], "default-src 'self'");
        assert_eq!(h[header::REFERRER_POLICY], "no-referrer");
        assert!(h.contains_key("x-request-id"));
        assert!(!h.contains_key(header::STRICT_TRANSPORT_SECURITY), "no HSTS without TLS");
    }
}

/// The requests of every kind of answer the router gives: a route's 200, the fallback's 404
/// and 405, authentication's 401, a CORS preflight, the declared-oversize 413, the Swagger UI
/// page and the OpenAPI document. (The quarantine 403 is `edge.rs`'s.)
fn every_kind_of_answer() -> Vec<(&'static str, Request<Body>, StatusCode)> {
    let get = |uri: &str| Request::get(uri).body(Body::empty()).unwrap();
    let oversize = Request::post("/v1/auth/challenge")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_LENGTH, "5000000")
        .body(Body::empty())
        .unwrap();
    vec![
        ("route", get("/v1/health"), StatusCode::OK),
        ("fallback", get("/nowhere"), StatusCode::NOT_FOUND),
        ("method", Request::delete("/v1/health").body(Body::empty()).unwrap(), StatusCode::METHOD_NOT_ALLOWED),
        ("no token", get("/v1/coops"), StatusCode::UNAUTHORIZED),
        ("preflight", preflight("http://localhost:3000"), StatusCode::OK),
        ("oversize", oversize, StatusCode::PAYLOAD_TOO_LARGE),
        ("swagger", get("/swagger-ui/"), StatusCode::OK),
        ("openapi", get("/api-docs/openapi.json"), StatusCode::OK),
    ]
}

/// Every kind of answer has the security headers and a fresh request id; HSTS exactly when the
/// gateway serves TLS; the relaxed Content-Security-Policy on the Swagger UI page only.
#[tokio::test]
async fn every_answer_kind_has_security_headers_and_a_request_id() {
    for tls in [false, true] {
        let app = TestApp::customised(|options| options.http.tls = tls).await;
        let mut ids = std::collections::HashSet::new();
        for (kind, request, status) in every_kind_of_answer() {
            let response = app.send(request).await;
            assert_eq!(response.status, status, "{kind}");
            let h = &response.headers;
            assert_eq!(h[header::X_CONTENT_TYPE_OPTIONS], "nosniff", "{kind}");
            assert_eq!(h[header::X_FRAME_OPTIONS], "DENY", "{kind}");
            assert_eq!(h[header::REFERRER_POLICY], "no-referrer", "{kind}");
            let csp = h[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
            if kind == "swagger" {
                assert!(csp.contains("'unsafe-inline'"), "{kind}: {csp}");
            } else {
                assert_eq!(csp, "default-src 'self'", "{kind}");
            }
            assert_eq!(h.contains_key(header::STRICT_TRANSPORT_SECURITY), tls, "{kind}: HSTS with TLS only");
            let id = h["x-request-id"].to_str().unwrap().to_owned();
            assert_eq!(id.len(), 36, "{kind}: a fresh UUID, {id}");
            assert!(ids.insert(id), "{kind}: an id of its own");
        }
    }
}

/// Every answer carries a request id (one a trusted proxy sent is kept: see `edge.rs`).
#[tokio::test]
async fn every_answer_carries_a_request_id() {
    let app = TestApp::new().await;
    let first = app.send(Request::get("/healthz").body(Body::empty()).unwrap()).await;
    let second = app.send(Request::get("/no/such/route").body(Body::empty()).unwrap()).await;
    let (a, b) = (&first.headers["x-request-id"], &second.headers["x-request-id"]);
    assert!(!a.is_empty() && a != b, "{a:?} {b:?}");
}

fn preflight(origin: &str) -> Request<Body> {
    Request::builder()
        .method(Method::OPTIONS)
        .uri("/v1/auth/challenge")
        .header(header::ORIGIN, origin)
        .header(header::ACCESS_CONTROL_REQUEST_METHOD, "POST")
        .header(header::ACCESS_CONTROL_REQUEST_HEADERS, "content-type")
        .body(Body::empty())
        .unwrap()
}

#[tokio::test]
async fn cors_production_allows_only_the_configured_origin() {
    let origin = HeaderValue::from_static("https://coop.example");
    let app = TestApp::with(false, gateway_http::CorsMode::Production { origin: Some(origin) }).await;
    let allowed = app.send(preflight("https://coop.example")).await;
    assert_eq!(allowed.headers[header::ACCESS_CONTROL_ALLOW_ORIGIN], "https://coop.example");
    assert_eq!(allowed.headers[header::ACCESS_CONTROL_MAX_AGE], "3600");
    let methods = allowed.headers[header::ACCESS_CONTROL_ALLOW_METHODS].to_str().unwrap().to_owned();
    for m in ["GET", "POST", "PUT", "DELETE"] {
        assert!(methods.contains(m), "{methods}");
    }
    let other = app.send(preflight("https://evil.example")).await;
    assert!(!other.headers.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN));
}

/// A browser can read every answer from the allowed origin, refusals included, and none from
/// another: the policy's headers are on every kind of answer, with one `Vary` on each. In both
/// modes every answer but a preflight names the headers a page may read.
#[tokio::test]
async fn cors_headers_are_on_every_answer_kind() {
    let origin = HeaderValue::from_static("https://coop.example");
    let app = TestApp::with(false, gateway_http::CorsMode::Production { origin: Some(origin) }).await;
    let development = TestApp::new().await;
    let cases = [
        (&app, "https://coop.example", Some("https://coop.example")),
        (&app, "https://evil.example", None),
        (&development, "http://localhost:5173", Some("*")),
    ];
    for (gateway, from, allowed) in cases {
        for (kind, mut request, status) in every_kind_of_answer() {
            request.headers_mut().insert(header::ORIGIN, HeaderValue::from_static(from));
            let response = gateway.send(request).await;
            assert_eq!(response.status, status, "{kind}");
            let h = &response.headers;
            let allow_origin = h.get(header::ACCESS_CONTROL_ALLOW_ORIGIN).map(|v| v.to_str().unwrap());
            assert_eq!(allow_origin, allowed, "{kind} from {from}");
            let vary: Vec<_> = h.get_all(header::VARY).iter().collect();
            assert_eq!(vary, ["origin, access-control-request-method, access-control-request-headers"], "{kind}");
            let development = allowed == Some("*");
            let preflight = kind == "preflight";
            assert_eq!(h.contains_key(header::ACCESS_CONTROL_MAX_AGE), preflight && !development, "{kind}");
            let exposed = h.get(header::ACCESS_CONTROL_EXPOSE_HEADERS).map(|v| v.to_str().unwrap());
            assert_eq!(exposed, (!preflight).then_some(gateway_http::cors::EXPOSE_HEADERS), "{kind} from {from}");
        }
    }
    // Any OPTIONS request is a preflight, whatever its path or declared length.
    let mut odd = preflight("https://coop.example");
    *odd.uri_mut() = "/nowhere".parse().unwrap();
    odd.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from_static("5000000"));
    let answer = app.send(odd).await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.headers[header::ACCESS_CONTROL_ALLOW_METHODS], "GET,POST,PUT,DELETE");
    assert_eq!(answer.headers[header::ACCESS_CONTROL_ALLOW_HEADERS], gateway_http::cors::ALLOW_HEADERS);
}

/// The names in a comma-separated header value, lower-cased.
fn names(value: Option<&HeaderValue>) -> Vec<String> {
    value.map(|v| v.to_str().unwrap().split(',').map(|n| n.trim().to_ascii_lowercase()).collect()).unwrap_or_default()
}

/// What a browser page of an allowed origin needs, in either mode (INTERFACE.md §10): its preflight
/// admits every request header the API reads (by name: a wildcard does not cover
/// `Authorization`), and the answers let it read the rate-limit headers, `Retry-After`, the
/// request id and the event sequence.
#[tokio::test]
async fn both_modes_admit_the_api_request_headers_and_expose_its_answer_headers() {
    let origin = "https://coop.example";
    let production =
        TestApp::with(false, gateway_http::CorsMode::Production { origin: Some(HeaderValue::from_static(origin)) })
            .await;
    let development = TestApp::with(false, gateway_http::CorsMode::Development).await;
    let asked = [
        "authorization",
        "content-type",
        "idempotency-key",
        "signature",
        "signature-input",
        "content-digest",
        "x-request-id",
    ];
    let readable = [
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
        "retry-after",
        "x-request-id",
        "icn-event-seq",
    ];
    for (mode, app) in [("production", &production), ("development", &development)] {
        let mut request = preflight(origin);
        *request.uri_mut() = "/v1/ledger/c/payment".parse().unwrap();
        request
            .headers_mut()
            .insert(header::ACCESS_CONTROL_REQUEST_HEADERS, HeaderValue::from_str(&asked.join(", ")).unwrap());
        let answer = app.send(request).await;
        assert_eq!(answer.status, StatusCode::OK, "{mode}");
        assert!(answer.headers.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN), "{mode}");
        let admitted = names(answer.headers.get(header::ACCESS_CONTROL_ALLOW_HEADERS));
        for name in asked {
            assert!(admitted.iter().any(|a| a == name), "{mode}: the preflight does not name {name}: {admitted:?}");
        }
        // An actual cross-origin request, authenticated, so that the rate-limit headers are on it.
        let token = app.token(7, "cors", &["coop:read"]).await;
        let mut actual = crate::support::build(Method::GET, "/v1/coops", None, Some(&token));
        actual.headers_mut().insert(header::ORIGIN, HeaderValue::from_static(origin));
        let answer = app.send(actual).await;
        assert_eq!(answer.status, StatusCode::OK, "{mode}: {}", answer.body);
        assert!(answer.headers.contains_key("x-ratelimit-remaining"), "{mode}");
        assert!(answer.headers.contains_key(header::ACCESS_CONTROL_ALLOW_ORIGIN), "{mode}");
        let exposed = names(answer.headers.get(header::ACCESS_CONTROL_EXPOSE_HEADERS));
        assert!(!exposed.iter().any(|e| e == "*"), "{mode}: named, not a wildcard: {exposed:?}");
        for name in readable {
            assert!(exposed.iter().any(|e| e == name), "{mode}: {name} is not exposed: {exposed:?}");
        }
    }
}

#[tokio::test]
async fn cors_development_is_permissive() {
    let app = TestApp::new().await;
    let response = app.send(preflight("http://localhost:3000")).await;
    assert_eq!(response.headers[header::ACCESS_CONTROL_ALLOW_ORIGIN], "*");
}

#[tokio::test]
async fn openapi_and_swagger_ui_are_served() {
    let app = TestApp::new().await;
    let doc = app.call(Method::GET, "/api-docs/openapi.json", None, None).await;
    assert_eq!(doc.status, StatusCode::OK);
    assert!(doc.body["openapi"].as_str().unwrap().starts_with("3.1"));
    for path in [
        "/v1/health",
        "/v1/auth/challenge",
        "/v1/auth/verify",
        "/identity/did",
        "/identity/public-key",
        "/v1/identity/resolve/{did}",
    ] {
        assert!(doc.body["paths"][path].is_object(), "{path} missing from the OpenAPI document");
    }
    assert!(doc.body["components"]["securitySchemes"]["bearer"].is_object());
    let ui = app.send(Request::get("/swagger-ui/").body(Body::empty()).unwrap()).await;
    assert_eq!(ui.status, StatusCode::OK);
    let csp = ui.headers[header::CONTENT_SECURITY_POLICY].to_str().unwrap();
    assert!(csp.contains("'unsafe-inline'"), "{csp}");
}

#[tokio::test]
async fn health_reports_store_and_version() {
    let app = TestApp::new().await;
    let health = app.call(Method::GET, "/v1/health", None, None).await;
    assert_eq!(health.body["status"], "ok");
    assert_eq!(health.body["store"], "memory");
    assert_eq!(health.body["version"], "test");
    assert!(health.body["uptime_secs"].is_u64());
    assert_eq!(app.call(Method::GET, "/readyz", None, None).await.body["status"], "ready");
    assert_eq!(app.call(Method::GET, "/healthz", None, None).await.body["status"], "ok");
}

/// The served document's rules (schemathesis checks it against real answers in CI): every tag
/// and every response has a description, every error status carries the error body's schema,
/// and every route with a token documents 401, 403 and 429.
#[tokio::test]
async fn the_document_describes_every_answer() {
    let app = TestApp::new().await;
    let doc = app.call(Method::GET, "/api-docs/openapi.json", None, None).await.body;
    let described: Vec<&str> = doc["tags"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["description"].as_str().is_some_and(|d| !d.is_empty()))
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    let mut operations = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, operation) in item.as_object().unwrap() {
            operations += 1;
            let name = format!("{} {path}", method.to_uppercase());
            for tag in operation["tags"].as_array().unwrap() {
                assert!(described.contains(&tag.as_str().unwrap()), "{name}: tag {tag} has no description");
            }
            let responses = operation["responses"].as_object().unwrap();
            for (status, response) in responses {
                assert!(
                    response["description"].as_str().is_some_and(|d| !d.is_empty()),
                    "{name} {status}: no description"
                );
                if status.starts_with('4') || status.starts_with('5') {
                    let schema = &response["content"]["application/json"]["schema"];
                    let named = schema["$ref"].as_str().is_some_and(|r| r.ends_with("/ErrorBody"));
                    let inline = schema["required"].as_array().is_some_and(|r| r.iter().any(|f| f == "code"));
                    assert!(named || inline, "{name} {status}: not the error body: {schema}");
                }
            }
            if operation["security"].as_array().is_some_and(|s| !s.is_empty()) {
                for status in ["401", "403", "429"] {
                    assert!(responses.contains_key(status), "{name} does not document {status}");
                }
            }
        }
    }
    assert!(operations > 70, "{operations} operations");
}

/// The short family is one handler per operation: each short path is documented as an alias of
/// the `/v1` operation that serves it (same answers, its own operation id, none of the path
/// parameters it does not have), and the interface's every short route is one of them.
#[tokio::test]
async fn the_short_family_is_documented_as_aliases() {
    let app = TestApp::new().await;
    let doc = app.call(Method::GET, "/api-docs/openapi.json", None, None).await.body;
    for alias in gateway_http::SHORT_FAMILY {
        let short = &doc["paths"][alias.path][alias.method];
        let v1 = &doc["paths"][alias.of][alias.method];
        let name = format!("{} {}", alias.method, alias.path);
        assert!(v1.is_object(), "{name}: {} is not documented", alias.of);
        let description = short["description"].as_str().unwrap_or_default();
        assert!(
            description.starts_with(&format!("Alias of `{} {}`", alias.method.to_uppercase(), alias.of)),
            "{name}: {description}"
        );
        assert_eq!(
            short["responses"].as_object().map(|r| r.keys().collect::<Vec<_>>()),
            v1["responses"].as_object().map(|r| r.keys().collect::<Vec<_>>()),
            "{name}"
        );
        assert_eq!(short["requestBody"], v1["requestBody"], "{name}");
        assert_ne!(short["operationId"], v1["operationId"], "{name}");
        for parameter in short["parameters"].as_array().into_iter().flatten() {
            if parameter["in"] == "path" {
                let placeholder = format!("{{{}}}", parameter["name"].as_str().unwrap());
                assert!(alias.path.contains(&placeholder), "{name} documents {placeholder}");
            }
        }
    }
    let spec_short_routes = [
        ("post", "/ledger/transaction"),
        ("get", "/ledger/balance"),
        ("get", "/ledger/history"),
        ("get", "/coops"),
        ("post", "/coops"),
        ("get", "/coops/{id}"),
        ("get", "/coops/{id}/members"),
        ("post", "/coops/{id}/members"),
        ("get", "/trust/score/{did}"),
        ("post", "/trust/edge"),
        ("get", "/governance/proposals"),
        ("post", "/governance/proposals"),
        ("post", "/governance/proposals/{id}/vote"),
        ("get", "/compute/tasks"),
        ("post", "/compute/tasks"),
        ("get", "/compute/tasks/{id}"),
        ("get", "/notifications"),
        ("post", "/notifications/{id}/read"),
    ];
    for (method, path) in spec_short_routes {
        assert!(
            gateway_http::SHORT_FAMILY.iter().any(|a| a.method == method && a.path == path),
            "{method} {path} is not an alias"
        );
    }
}

/// Both families reach the same handler and so the same checks: a token of another coop is
/// refused on the `/v1` path and the short path answers for the token's own coop.
#[tokio::test]
async fn an_alias_answers_as_its_v1_operation() {
    let app = TestApp::new().await;
    let token = app.token(31, "c1", &["ledger:read", "coop:read", "coop:write"]).await;
    let other = app.token(32, "c2", &["ledger:read"]).await;
    let created = app
        .call(
            Method::POST,
            "/coops",
            Some(serde_json::json!({"id": "c1", "name": "One", "coop_type": "worker"})),
            Some(&token),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let short = app.call(Method::GET, "/ledger/history", None, Some(&token)).await;
    let v1 = app.call(Method::GET, "/v1/ledger/c1/history", None, Some(&token)).await;
    assert_eq!((short.status, &short.body), (v1.status, &v1.body));
    let foreign = app.call(Method::GET, "/v1/ledger/c1/history", None, Some(&other)).await;
    foreign.assert_error(403, "AUTHORIZATION_FAILED");
    assert_eq!(foreign.body["details"]["coop_id"], "c1");
    let own = app.call(Method::GET, "/coops/c1", None, Some(&token)).await;
    assert_eq!(own.status, StatusCode::OK, "{}", own.body);
    app.call(Method::GET, "/coops/c2", None, Some(&token)).await.assert_error(403, "AUTHORIZATION_FAILED");
}
