//! The balance read taken before routing (`gateway_http::hot`) answers exactly as the router
//! does: every request here is sent to the router and to the served app over the same state,
//! and the two answers must agree in status, headers and body, for every kind of caller and
//! refusal, on every store. Requests the served app must leave to the router are checked to go
//! there.

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use serde_json::json;
use tower::ServiceExt;

use crate::support::{TestApp, build, did_of};

/// An answer, with the request id (new for every request) and the remaining requests of the
/// rate limit (one fewer for the second of a pair) set aside.
#[derive(Debug, PartialEq)]
struct Answer {
    status: StatusCode,
    headers: Vec<(String, String)>,
    body: String,
    remaining: Option<u64>,
}

fn answer(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> Answer {
    let mut kept: Vec<(String, String)> = headers
        .iter()
        .filter(|(name, _)| !matches!(name.as_str(), "x-request-id" | "x-ratelimit-remaining"))
        .map(|(name, value)| (name.to_string(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
        .collect();
    kept.sort();
    let remaining = headers.get("x-ratelimit-remaining").map(|v| v.to_str().unwrap().parse().unwrap());
    Answer { status, headers: kept, body: String::from_utf8_lossy(body).into_owned(), remaining }
}

/// Sends `make()` to the router, then to the served app, and asserts the answers agree;
/// `taken` says whether the served app must serve it without the router.
async fn same_answer(app: &TestApp, name: &str, taken: bool, make: impl Fn() -> Request<Body>) -> Answer {
    assert_eq!(gateway_http::hot::takes(&make()), taken, "{name}: taken before routing");
    let routed = app.router.clone().oneshot(make()).await.unwrap();
    let (parts, body) = routed.into_parts();
    let routed = answer(parts.status, &parts.headers, &body.collect().await.unwrap().to_bytes());
    let served = gateway_http::app(app.state.clone()).oneshot(make()).await.unwrap();
    let (parts, body) = served.into_parts();
    let mut served = answer(parts.status, &parts.headers, &body.collect().await.unwrap().to_bytes());
    if let (Some(first), Some(second)) = (routed.remaining, served.remaining) {
        assert_eq!(second, first.saturating_sub(1), "{name}: the second answer of a pair has one fewer left");
        served.remaining = routed.remaining;
    }
    assert_eq!(served, routed, "{name}");
    routed
}

fn get(uri: &str, token: Option<&str>) -> Request<Body> {
    build(Method::GET, uri, None, token)
}

#[tokio::test]
async fn balance_reads_answer_as_the_router_does() {
    for app in TestApp::every_store().await {
        let (admin, members) = app.coop_with_members("c1", 1, &[2, 3]).await;
        let (alice, bob) = (&members[0], &members[1]);
        let paid = app
            .post_as("/v1/ledger/c1/payment", json!({ "from": did_of(2), "to": did_of(3), "amount": 2.5 }), alice)
            .await;
        assert_eq!(paid.status, StatusCode::CREATED, "{}", paid.body);
        let (_, others) = app.coop_with_members("c2", 4, &[5]).await;
        let identity_only = {
            let (signing, did) = crate::support::key(2);
            let challenge = app.challenge(&did).await;
            let signature = ed25519_dalek::Signer::sign(&signing, challenge["nonce"].as_str().unwrap().as_bytes());
            let verified = app
                .post(
                    "/v1/auth/verify",
                    json!({ "did": did.to_string(), "signature": hex::encode(signature.to_bytes()) }),
                )
                .await;
            assert_eq!(verified.status, StatusCode::OK, "{}", verified.body);
            verified.body["token"].as_str().unwrap().to_owned()
        };
        let no_ledger_scope = app.token(3, "c1", &["coop:read"]).await;
        let forged = {
            let mut parts: Vec<String> = alice.split('.').map(str::to_owned).collect();
            parts[2] = "AAAA".repeat(11);
            parts.join(".")
        };
        let (alice_did, bob_did) = (did_of(2), did_of(3));
        let cases: Vec<(&str, String, Option<&str>)> = vec![
            ("own balance", format!("/v1/ledger/c1/balance/{alice_did}"), Some(alice)),
            ("another member's", format!("/v1/ledger/c1/balance/{bob_did}"), Some(alice)),
            ("by the admin", format!("/v1/ledger/c1/balance/{bob_did}"), Some(&admin)),
            ("a system account", "/v1/ledger/c1/balance/coop:c1:exchange".into(), Some(alice)),
            ("a DID with no account", format!("/v1/ledger/c1/balance/{}", did_of(9)), Some(alice)),
            ("not a DID", "/v1/ledger/c1/balance/nobody".into(), Some(alice)),
            ("a DID of bad syntax", "/v1/ledger/c1/balance/did:key:z6Mk!".into(), Some(alice)),
            ("another coop", format!("/v1/ledger/c2/balance/{alice_did}"), Some(alice)),
            ("a coop of bad syntax", format!("/v1/ledger/C!/balance/{alice_did}"), Some(alice)),
            ("a coop that does not exist", format!("/v1/ledger/c9/balance/{alice_did}"), Some(alice)),
            ("another coop's token", format!("/v1/ledger/c1/balance/{alice_did}"), Some(&others[0])),
            ("without ledger:read", format!("/v1/ledger/c1/balance/{alice_did}"), Some(&no_ledger_scope)),
            ("an identity-only token", format!("/v1/ledger/c1/balance/{alice_did}"), Some(&identity_only)),
            ("a forged token", format!("/v1/ledger/c1/balance/{alice_did}"), Some(&forged)),
            ("no token", format!("/v1/ledger/c1/balance/{alice_did}"), None),
        ];
        for (name, uri, token) in &cases {
            let answer = same_answer(&app, name, true, || get(uri, *token)).await;
            if *name == "own balance" {
                assert_eq!(answer.status, StatusCode::OK);
                assert_eq!(serde_json::from_str::<serde_json::Value>(&answer.body).unwrap()["balance"], json!(-2.5));
            }
        }
        // Left to the router: anything of another shape, or that the router treats specially.
        let own = format!("/v1/ledger/c1/balance/{alice_did}");
        let encoded = format!("/v1/ledger/c1/balance/{}", alice_did.replace(':', "%3A"));
        let with_currency = format!("{own}?currency=hours");
        let with_slash = format!("{own}/");
        let fallbacks: Vec<(&str, Request<Body>)> = vec![
            ("percent-encoded", get(&encoded, Some(alice))),
            ("a query", get(&with_currency, Some(alice))),
            ("a trailing slash", get(&with_slash, Some(alice))),
            ("HEAD", build(Method::HEAD, &own, None, Some(alice))),
            ("POST", build(Method::POST, &own, Some(json!({})), Some(alice))),
        ];
        for (name, request) in fallbacks {
            assert!(!gateway_http::hot::takes(&request), "{name}: left to the router");
        }
        same_answer(&app, "percent-encoded", false, || get(&encoded, Some(alice))).await;
        same_answer(&app, "a query", false, || get(&with_currency, Some(alice))).await;
        let signed = || {
            let mut request = get(&own, Some(alice));
            request.headers_mut().insert("signature-input", "sig1=(\"@method\")".parse().unwrap());
            request.headers_mut().insert("signature", "sig1=:AAAA:".parse().unwrap());
            request
        };
        same_answer(&app, "signed", false, signed).await;

        // A member removed: the token no longer opens the coop, either way.
        let removed = app.call(Method::DELETE, &format!("/v1/coops/c1/members/{bob_did}"), None, Some(&admin)).await;
        assert!(removed.status.is_success(), "{}", removed.body);
        same_answer(&app, "a removed member", true, || get(&format!("/v1/ledger/c1/balance/{bob_did}"), Some(bob)))
            .await;

        // Rate limited: the same 429 with the same headers once the bucket is empty.
        let mut limited = None;
        for _ in 0..2_000 {
            let response = app.get(&own, alice).await;
            if response.status == StatusCode::TOO_MANY_REQUESTS {
                limited = Some(response);
                break;
            }
        }
        assert!(limited.is_some(), "the per-DID bucket empties");
        same_answer(&app, "rate limited", true, || get(&own, Some(alice))).await;
    }
}

/// The served app's answers carry what the edge gives every answer, and its route label is the
/// router's template for the route.
#[tokio::test]
async fn the_balance_read_keeps_the_edge_and_its_route_template() {
    let app = TestApp::new().await;
    let (_, members) = app.coop_with_members("c1", 1, &[2]).await;
    let own = format!("/v1/ledger/c1/balance/{}", did_of(2));
    let served = gateway_http::app(app.state.clone()).oneshot(get(&own, Some(&members[0]))).await.unwrap();
    assert_eq!(served.status(), StatusCode::OK);
    for name in ["x-request-id", "x-content-type-options", "content-security-policy", "x-ratelimit-limit"] {
        assert!(served.headers().contains_key(name), "{name}");
    }
    assert_eq!(served.headers()[header::CACHE_CONTROL], "no-store");
    let doc = gateway_http::openapi();
    assert!(doc.paths.paths.contains_key(gateway_http::hot::BALANCE_ROUTE), "the router's template");
}
