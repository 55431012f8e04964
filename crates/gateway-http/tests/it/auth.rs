//! Login and token enforcement, step by step in the specification's order.

use axum::Router;
use axum::http::{Method, StatusCode, header};
use axum::middleware::from_fn_with_state;
use axum::routing::get;
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::Signer;
use gateway_http::ApiResult;
use gateway_http::caller::CoopCaller;
use gateway_http::caller::scopes::LedgerRead;
use serde_json::{Value, json};

use crate::support::{SECRET, START, TestApp, build, key, send};

fn signature_over(seed: u8, message: &[u8]) -> String {
    hex::encode(key(seed).0.sign(message).to_bytes())
}

#[tokio::test]
async fn challenge_validates_the_did() {
    let app = TestApp::new().await;
    let (_, did) = key(1);
    let body = app.challenge(&did).await;
    assert_eq!(body["expires_in"], 300);
    let nonce = body["nonce"].as_str().unwrap();
    assert_eq!(nonce.len(), 64);
    assert!(hex::decode(nonce).is_ok());
    assert!(body["challenge_id"].as_str().is_some());

    let bad = app.post("/v1/auth/challenge", json!({ "did": "not-a-did" })).await;
    bad.assert_error(400, "BAD_REQUEST");
    assert!(bad.body["error"].as_str().unwrap().contains("invalid DID"));
    assert!(bad.body["details"]["fields"]["did"].is_array());
    let web = app.post("/v1/auth/challenge", json!({ "did": "did:web:example.org" })).await;
    web.assert_error(400, "UNSUPPORTED_DID_METHOD");
    assert_eq!(web.body["details"]["method"], "web");
    app.post("/v1/auth/challenge", json!({})).await.assert_error(400, "BAD_REQUEST");
}

#[tokio::test]
async fn both_signed_message_forms_are_accepted() {
    let app = TestApp::new().await;
    let (signing, did) = key(2);
    for raw_form in [false, true] {
        let nonce = app.challenge(&did).await["nonce"].as_str().unwrap().to_owned();
        let message = if raw_form { hex::decode(&nonce).unwrap() } else { nonce.into_bytes() };
        let signature = hex::encode(signing.sign(&message).to_bytes());
        let response = app
            .post(
                "/v1/auth/verify",
                json!({ "did": did.to_string(), "signature": signature, "coop_id": "coop1", "scopes": ["ledger:read"] }),
            )
            .await;
        assert_eq!(response.status, StatusCode::OK, "{}", response.body);
        assert_eq!(response.body["token_type"], "Bearer");
        assert_eq!(response.body["expires_in"], 3600);
        assert_eq!(response.body["expires_at"], START + 3600);
        assert_eq!(response.body["scopes"], json!(["ledger:read"]));
    }
}

/// Every failing step answers 400 and earlier steps win: a request wrong in several places is
/// refused for the first of them in the specification's order.
#[tokio::test]
async fn verify_steps_fail_in_the_specified_order() {
    let app = TestApp::new().await;
    let (_, did) = key(3);
    app.challenge(&did).await;
    let good_sig = "00".repeat(64);
    let cases: Vec<(Value, &str)> = vec![
        (json!({ "did": "bad", "signature": "zz", "coop_id": "bad id", "scopes": ["nope"] }), "did"),
        (json!({ "did": did.to_string(), "signature": "zz", "coop_id": "bad id", "scopes": ["nope"] }), "scopes"),
        (
            json!({ "did": did.to_string(), "signature": "zz", "coop_id": "bad id", "scopes": ["ledger:read"] }),
            "coop_id",
        ),
        (json!({ "did": did.to_string(), "signature": "zz", "coop_id": "c1", "scopes": ["ledger:read"] }), "signature"),
        (json!({ "did": did.to_string(), "signature": "00".repeat(63), "coop_id": "c1", "scopes": [] }), "signature"),
        (json!({ "did": did.to_string(), "signature": "00".repeat(65), "coop_id": "c1", "scopes": [] }), "signature"),
    ];
    for (body, field) in cases {
        let response = app.post("/v1/auth/verify", body.clone()).await;
        response.assert_error(400, "BAD_REQUEST");
        assert!(response.body["details"]["fields"][field].is_array(), "{field}: {}", response.body);
    }
    let short = app
        .post(
            "/v1/auth/verify",
            json!({ "did": did.to_string(), "signature": "00".repeat(63), "coop_id": "c1", "scopes": [] }),
        )
        .await;
    assert!(short.body["error"].as_str().unwrap().contains("length"), "{}", short.body);
    // The challenge survived the 400s: none of them reached the signature check. A wrong
    // signature then consumes it.
    let wrong = app
        .post(
            "/v1/auth/verify",
            json!({ "did": did.to_string(), "signature": good_sig, "coop_id": "c1", "scopes": [] }),
        )
        .await;
    wrong.assert_error(401, "AUTHENTICATION_FAILED");
    assert_eq!(wrong.headers[header::WWW_AUTHENTICATE], "Bearer");
}

#[tokio::test]
async fn nonce_is_single_use_and_a_named_challenge_is_consumed_by_a_failed_attempt() {
    let app = TestApp::new().await;
    let (signing, did) = key(4);
    let challenge = app.challenge(&did).await;
    let nonce = challenge["nonce"].as_str().unwrap();
    let signature = hex::encode(signing.sign(nonce.as_bytes()).to_bytes());
    let body = json!({ "did": did.to_string(), "signature": signature, "coop_id": "c1", "scopes": [] });
    assert_eq!(app.post("/v1/auth/verify", body.clone()).await.status, StatusCode::OK);
    app.post("/v1/auth/verify", body).await.assert_error(401, "AUTHENTICATION_FAILED");

    // A failed attempt that names the challenge consumes it: the right signature afterwards is
    // refused.
    let challenge = app.challenge(&did).await;
    let nonce = challenge["nonce"].as_str().unwrap();
    let attempt = |signature: String| json!({ "did": did.to_string(), "signature": signature, "challenge_id": challenge["challenge_id"], "coop_id": "c1", "scopes": [] });
    let wrong = signature_over(99, nonce.as_bytes());
    app.post("/v1/auth/verify", attempt(wrong)).await.assert_error(401, "AUTHENTICATION_FAILED");
    let right = hex::encode(signing.sign(nonce.as_bytes()).to_bytes());
    app.post("/v1/auth/verify", attempt(right)).await.assert_error(401, "AUTHENTICATION_FAILED");
}

/// A stranger who knows a DID cannot burn its challenges: a verify without `challenge_id`
/// whose signature verifies against no outstanding challenge consumes nothing.
#[tokio::test]
async fn a_strangers_bad_signatures_do_not_burn_the_owners_challenge() {
    for app in TestApp::every_store_with(true, 0.9, vec![]).await {
        let (signing, did) = key(20);
        let nonce = app.challenge(&did).await["nonce"].as_str().unwrap().to_owned();
        let attempt = |signature: String| json!({ "did": did.to_string(), "signature": signature, "coop_id": "c1", "scopes": ["ledger:read"] });
        // The stranger signs the nonce with another key, signs something else, or sends noise.
        for forged in [signature_over(98, nonce.as_bytes()), signature_over(98, b"guess"), "ab".repeat(64)] {
            let refused = app.post("/v1/auth/verify", attempt(forged)).await;
            refused.assert_error(401, "AUTHENTICATION_FAILED");
            assert_eq!(refused.body["details"], json!({}), "{:?}", app.backend);
        }
        let owner = app.post("/v1/auth/verify", attempt(hex::encode(signing.sign(nonce.as_bytes()).to_bytes()))).await;
        assert_eq!(owner.status, StatusCode::OK, "{:?}: {}", app.backend, owner.body);
        // Consumed by the owner's success: once only.
        let again = app.post("/v1/auth/verify", attempt(hex::encode(signing.sign(nonce.as_bytes()).to_bytes()))).await;
        again.assert_error(401, "AUTHENTICATION_FAILED");

        // With several outstanding, only the one signed is consumed.
        let first = app.challenge(&did).await["nonce"].as_str().unwrap().to_owned();
        let second = app.challenge(&did).await["nonce"].as_str().unwrap().to_owned();
        for nonce in [&second, &first] {
            let signed =
                app.post("/v1/auth/verify", attempt(hex::encode(signing.sign(nonce.as_bytes()).to_bytes()))).await;
            assert_eq!(signed.status, StatusCode::OK, "{:?}: {}", app.backend, signed.body);
        }
    }
}

/// Login answers are never cached: challenge and verify, successes and refusals.
#[tokio::test]
async fn login_answers_carry_no_store() {
    let app = TestApp::new().await;
    let (signing, did) = key(21);
    let challenge = app.post("/v1/auth/challenge", json!({ "did": did.to_string() })).await;
    assert_eq!(challenge.status, StatusCode::OK);
    let nonce = challenge.body["nonce"].as_str().unwrap().to_owned();
    let signature = hex::encode(signing.sign(nonce.as_bytes()).to_bytes());
    let answers = [
        ("challenge 200", challenge),
        ("challenge 400", app.post("/v1/auth/challenge", json!({ "did": "nope" })).await),
        ("challenge 400 bad JSON", app.post("/v1/auth/challenge", json!("x")).await),
        (
            "verify 200",
            app.post(
                "/v1/auth/verify",
                json!({ "did": did.to_string(), "signature": signature, "coop_id": "c1", "scopes": [] }),
            )
            .await,
        ),
        (
            "verify 401",
            app.post(
                "/v1/auth/verify",
                json!({ "did": did.to_string(), "signature": signature, "coop_id": "c1", "scopes": [] }),
            )
            .await,
        ),
        ("verify 400", app.post("/v1/auth/verify", json!({ "did": did.to_string(), "signature": "zz" })).await),
    ];
    for (name, answer) in answers {
        assert_eq!(answer.headers.get(header::CACHE_CONTROL).map(|v| v.to_str().unwrap()), Some("no-store"), "{name}");
    }
}

#[tokio::test]
async fn expired_nonce_is_refused() {
    let app = TestApp::new().await;
    let (signing, did) = key(5);
    let nonce = app.challenge(&did).await["nonce"].as_str().unwrap().to_owned();
    app.clock.advance_secs(300);
    let signature = hex::encode(signing.sign(nonce.as_bytes()).to_bytes());
    app.post(
        "/v1/auth/verify",
        json!({ "did": did.to_string(), "signature": signature, "coop_id": "c1", "scopes": [] }),
    )
    .await
    .assert_error(401, "AUTHENTICATION_FAILED");
}

#[tokio::test]
async fn challenge_id_picks_the_challenge_and_identity_only_tokens_work() {
    let app = TestApp::new().await;
    let (signing, did) = key(6);
    let first = app.challenge(&did).await;
    let _second = app.challenge(&did).await;
    let nonce = first["nonce"].as_str().unwrap();
    let signature = hex::encode(signing.sign(nonce.as_bytes()).to_bytes());
    // The interface's alternative body: did, challenge_id, signature.
    let response = app
        .post(
            "/v1/auth/verify",
            json!({ "did": did.to_string(), "challenge_id": first["challenge_id"], "signature": signature }),
        )
        .await;
    assert_eq!(response.status, StatusCode::OK, "{}", response.body);
    assert_eq!(response.body["scopes"], json!([]));
    let token = response.body["token"].as_str().unwrap();
    let own = app.call(Method::GET, "/identity/did", None, Some(token)).await;
    assert_eq!(own.body["did"], did.to_string());
    let key_body = app.call(Method::GET, "/identity/public-key", None, Some(token)).await.body;
    assert_eq!(key_body["public_key"], hex::encode(signing.verifying_key().to_bytes()));
    assert!(key_body["public_key_multibase"].as_str().unwrap().starts_with("z6Mk"));
}

#[tokio::test]
async fn dids_resolve_to_documents() {
    let app = TestApp::new().await;
    let (signing, did) = key(7);
    let doc = app.call(Method::GET, &format!("/v1/identity/resolve/{did}"), None, None).await;
    assert_eq!(doc.status, StatusCode::OK);
    assert_eq!(doc.body["id"], did.to_string());
    let method = &doc.body["verificationMethod"][0];
    assert_eq!(method["type"], "Ed25519VerificationKey2020");
    assert_eq!(method["controller"], did.to_string());
    assert_eq!(doc.body["authentication"][0], method["id"]);
    let icn =
        gateway_core::Did::icn_from_public_key(&gateway_core::Ed25519PublicKey(signing.verifying_key().to_bytes()));
    let icn_doc = app.call(Method::GET, &format!("/v1/identity/resolve/{icn}"), None, None).await;
    assert_eq!(icn_doc.body["verificationMethod"][0]["publicKeyMultibase"], method["publicKeyMultibase"]);
    app.call(Method::GET, "/v1/identity/resolve/did:web:x.org", None, None)
        .await
        .assert_error(400, "UNSUPPORTED_DID_METHOD");
}

fn forge(token: &str, edit: impl FnOnce(&mut Value), header: Option<Value>) -> String {
    let parts: Vec<&str> = token.split('.').collect();
    let mut claims: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
    edit(&mut claims);
    let header = match header {
        Some(h) => URL_SAFE_NO_PAD.encode(h.to_string()),
        None => parts[0].to_owned(),
    };
    format!("{header}.{}.{}", URL_SAFE_NO_PAD.encode(claims.to_string()), parts[2])
}

/// The Authorization header is read with `HeaderValue::to_str`: visible ASCII and tabs.
/// Any other byte a header value may hold (obs-text, 0x80 to 0xff), anywhere in it, is a 401
/// saying the header is malformed; a tab around the token is white space.
#[tokio::test]
async fn an_authorization_header_with_invisible_bytes_is_malformed() {
    let app = TestApp::new().await;
    let token = app.token(9, "c1", &["ledger:read"]).await;
    let with_header = |value: Vec<u8>| {
        let mut request = build(Method::GET, "/identity/did", None, None);
        request
            .headers_mut()
            .insert(header::AUTHORIZATION, axum::http::HeaderValue::from_bytes(&value).expect("a header value"));
        request
    };
    for bad in [0x80u8, 0xa0, 0xff] {
        for at in [0, token.len() / 2, token.len()] {
            let mut text = token.clone().into_bytes();
            text.insert(at, bad);
            let value = [b"Bearer ".as_slice(), &text].concat();
            let response = app.send(with_header(value)).await;
            response.assert_error(401, "AUTHENTICATION_FAILED");
            assert_eq!(response.body["error"], "malformed Authorization header", "byte {bad:#x} at {at}");
        }
    }
    let tabbed = app.send(with_header(format!("Bearer {token}\t").into_bytes())).await;
    assert_eq!(tabbed.status, StatusCode::OK, "{}", tabbed.body);
}

#[tokio::test]
async fn bad_tokens_are_401_with_www_authenticate() {
    let app = TestApp::new().await;
    let token = app.token(8, "c1", &["ledger:read"]).await;
    let ok = app.call(Method::GET, "/identity/did", None, Some(&token)).await;
    assert_eq!(ok.status, StatusCode::OK);

    let tampered = forge(&token, |c| c["scopes"] = json!(["ledger:read", "ledger:write"]), None);
    let alg_none = {
        let forged = forge(&token, |_| {}, Some(json!({ "alg": "none", "typ": "JWT" })));
        let mut parts: Vec<&str> = forged.split('.').collect();
        parts[2] = "";
        parts.join(".")
    };
    let claims: Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(token.split('.').nth(1).unwrap()).unwrap()).unwrap();
    let mut wrong_aud = claims.clone();
    wrong_aud["aud"] = json!("another-service");
    let wrong_aud = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &wrong_aud,
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap();
    let hs512 = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS512),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .unwrap();
    for (name, bad) in [
        ("tampered", tampered),
        ("alg none", alg_none),
        ("wrong aud", wrong_aud),
        ("HS512", hs512),
        ("garbage", "x.y.z".to_owned()),
    ] {
        let response = app.call(Method::GET, "/identity/did", None, Some(&bad)).await;
        response.assert_error(401, "AUTHENTICATION_FAILED");
        assert_eq!(response.headers[header::WWW_AUTHENTICATE], "Bearer", "{name}");
    }
    let missing = app.call(Method::GET, "/identity/did", None, None).await;
    missing.assert_error(401, "AUTHENTICATION_FAILED");
    assert_eq!(missing.headers[header::WWW_AUTHENTICATE], "Bearer");

    // Expiry with the 30 s leeway, on the manual clock.
    app.clock.advance_secs(3600 + 29);
    assert_eq!(app.call(Method::GET, "/identity/did", None, Some(&token)).await.status, StatusCode::OK);
    app.clock.advance_secs(1);
    let expired = app.call(Method::GET, "/identity/did", None, Some(&token)).await;
    expired.assert_error(401, "AUTHENTICATION_FAILED");
    assert_eq!(expired.headers[header::WWW_AUTHENTICATE], "Bearer");
}

async fn coop_balance(caller: CoopCaller<LedgerRead>) -> ApiResult<axum::Json<Value>> {
    Ok(axum::Json(json!({ "did": caller.did.as_str(), "coop": caller.coop.as_str() })))
}

/// Scope and cooperative enforcement, through the same extractors and middleware the real
/// coop-scoped routes use.
#[tokio::test]
async fn scope_then_coop_are_enforced() {
    let app = TestApp::new().await;
    let router = Router::new()
        .route("/probe/{coop}", get(coop_balance))
        .route_layer(from_fn_with_state(app.state.clone(), gateway_http::middleware::authenticate));
    let reader = app.token(9, "c1", &["ledger:read"]).await;
    let writer = app.token(10, "c1", &["ledger:write"]).await;

    let ok = send(&router, build(Method::GET, "/probe/c1", None, Some(&reader))).await;
    assert_eq!(ok.status, StatusCode::OK);
    assert_eq!(ok.body["coop"], "c1", "{}", ok.body);
    assert_eq!(ok.headers[header::CACHE_CONTROL], "no-store");
    let missing_scope = send(&router, build(Method::GET, "/probe/c1", None, Some(&writer))).await;
    missing_scope.assert_error(403, "AUTHORIZATION_FAILED");
    assert_eq!(missing_scope.body["details"]["required_scopes"], json!(["ledger:read"]));
    // Scope is checked before the cooperative: the writer is refused for the scope even on a
    // foreign coop.
    let both = send(&router, build(Method::GET, "/probe/c2", None, Some(&writer))).await;
    assert!(both.body["details"]["required_scopes"].is_array(), "{}", both.body);
    let foreign = send(&router, build(Method::GET, "/probe/c2", None, Some(&reader))).await;
    foreign.assert_error(403, "AUTHORIZATION_FAILED");
    assert_eq!(foreign.body["details"]["coop_id"], "c2");
    // A malformed coop id is 400 naming the field, before the cooperative is compared.
    let malformed = send(&router, build(Method::GET, "/probe/c%20", None, Some(&reader))).await;
    malformed.assert_error(400, "BAD_REQUEST");
    assert!(malformed.body["details"]["fields"]["coop_id"].is_array(), "{}", malformed.body);
}

#[tokio::test]
async fn scope_policy_applies_without_open_enrollment() {
    let app = TestApp::with(false, gateway_http::CorsMode::Production { origin: None }).await;
    let (signing, did) = key(11);
    // The coop does not exist: only coop:read/coop:write may be requested.
    let body = app.login(&signing, &did, "newcoop", &["coop:read", "coop:write"]).await;
    assert_eq!(body["scopes"], json!(["coop:read", "coop:write"]));
    let nonce = app.challenge(&did).await["nonce"].as_str().unwrap().to_owned();
    let signature = hex::encode(signing.sign(nonce.as_bytes()).to_bytes());
    let refused = app
        .post(
            "/v1/auth/verify",
            json!({ "did": did.to_string(), "signature": signature, "coop_id": "newcoop", "scopes": ["coop:write", "ledger:write"] }),
        )
        .await;
    refused.assert_error(403, "AUTHORIZATION_FAILED");
    assert_eq!(refused.body["details"]["refused_scopes"], json!(["ledger:write"]));
}

/// An identity-only token (the interface's `{did, challenge_id, signature}` login) opens the
/// identity routes and nothing else: every other protected route of the OpenAPI document
/// answers 403 `identity_only`, notifications included.
#[tokio::test]
async fn identity_only_tokens_reach_the_identity_routes_only() {
    for app in TestApp::every_store().await {
        let (signing, did) = key(22);
        let challenge = app.challenge(&did).await;
        let signature = hex::encode(signing.sign(challenge["nonce"].as_str().unwrap().as_bytes()).to_bytes());
        let login = app
            .post(
                "/v1/auth/verify",
                json!({ "did": did.to_string(), "challenge_id": challenge["challenge_id"], "signature": signature }),
            )
            .await;
        assert_eq!(login.status, StatusCode::OK, "{}", login.body);
        let token = login.body["token"].as_str().unwrap().to_owned();

        let doc = app.call(Method::GET, "/api-docs/openapi.json", None, None).await.body;
        let mut identity_routes = 0;
        let mut refused = Vec::new();
        let mut public = Vec::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                if operation.get("security").is_none() {
                    public.push(format!("{} {path}", method.to_uppercase()));
                    continue;
                }
                // Every path parameter gets a value of the right shape.
                let uri = path
                    .split('/')
                    .map(|part| match part {
                        "{did}" => did.to_string(),
                        p if p.starts_with('{') => "x1".to_owned(),
                        p => p.to_owned(),
                    })
                    .collect::<Vec<_>>()
                    .join("/");
                let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
                let body = matches!(method, Method::POST | Method::PUT).then(|| json!({}));
                let answer = app.call(method.clone(), &uri, body, Some(&token)).await;
                if path.starts_with("/identity/") || path.starts_with("/v1/identity/") {
                    assert_eq!(answer.status, StatusCode::OK, "{method} {uri}: {}", answer.body);
                    identity_routes += 1;
                    continue;
                }
                answer.assert_error(403, "AUTHORIZATION_FAILED");
                assert_eq!(answer.body["details"], json!({ "reason": "identity_only" }), "{method} {uri}");
                assert_eq!(answer.headers[header::CACHE_CONTROL], "no-store", "{method} {uri}");
                refused.push(format!("{method} {path}"));
            }
        }
        assert_eq!(identity_routes, 2, "/identity/did and /identity/public-key");
        // A protected route missing from the walk would be one documented without `security`.
        let known_public = [
            "GET /healthz",
            "GET /readyz",
            "GET /v1/coops/{id}/stats",
            "GET /v1/coops/{id}/log/checkpoint",
            "GET /v1/coops/{id}/log/key",
            "GET /v1/coops/{id}/log/tile/{path}",
            "GET /v1/gov/signing-keys",
            "GET /v1/health",
            "GET /v1/identity/resolve/{did}",
            "POST /v1/auth/challenge",
            "POST /v1/auth/verify",
        ];
        for route in &public {
            assert!(known_public.contains(&route.as_str()), "{route} has no `security` but is not a public route");
        }
        for expected in [
            "GET /v1/notifications",
            "GET /notifications",
            "POST /v1/notifications/{id}/read",
            "POST /notifications/read-all",
            "POST /v1/coops",
            "GET /v1/compute/tasks",
            "POST /v1/ledger/{coop}/payment",
        ] {
            assert!(refused.iter().any(|r| r == expected), "{expected} was not walked: {refused:?}");
        }
        assert!(refused.len() > 50, "{} protected routes walked", refused.len());
    }
}

/// Somebody asking for challenges in a member's name cannot push the member's pending
/// challenge out: at 32 outstanding, the 33rd is 429 with `Retry-After`, and the member's
/// first challenge still logs in.
#[tokio::test]
async fn a_did_at_its_challenge_cap_is_refused_and_loses_none() {
    let app = TestApp::new().await;
    let (signing, did) = key(21);
    let first = app.challenge(&did).await;
    for _ in 1..32 {
        app.limiter_clock.advance(std::time::Duration::from_secs(1));
        app.challenge(&did).await;
    }
    app.limiter_clock.advance(std::time::Duration::from_secs(1));
    let refused = app.post("/v1/auth/challenge", json!({ "did": did.to_string() })).await;
    refused.assert_error(429, "RATE_LIMIT_EXCEEDED");
    assert_eq!(refused.body["details"]["layer"], "did", "{}", refused.body);
    assert!(refused.headers.contains_key("retry-after"), "{:?}", refused.headers);
    // The first challenge is still there.
    let nonce = first["nonce"].as_str().unwrap();
    let body = json!({
        "did": did.to_string(),
        "challenge_id": first["challenge_id"],
        "signature": hex::encode(signing.sign(nonce.as_bytes()).to_bytes()),
        "coop_id": "c1",
        "scopes": ["coop:read"],
    });
    let verified = app.post("/v1/auth/verify", body).await;
    assert_eq!(verified.status, StatusCode::OK, "{}", verified.body);
}
