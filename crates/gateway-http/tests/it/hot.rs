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

use std::net::SocketAddr;

use crate::front;
use crate::support::{TestApp, build, did_of};

/// An answer, with the request id (new for every request) and the rate limit's remaining
/// requests (one fewer for each answer after the first) and reset time (each request empties
/// the bucket a little more, so it may be a second later) set aside.
#[derive(Debug, PartialEq)]
struct Answer {
    status: StatusCode,
    headers: Vec<(String, String)>,
    body: String,
    remaining: Option<u64>,
    reset: Option<u64>,
}

fn answer(status: StatusCode, headers: &HeaderMap, body: &[u8]) -> Answer {
    let mut kept: Vec<(String, String)> = headers
        .iter()
        .filter(|(name, _)| !matches!(name.as_str(), "x-request-id" | "x-ratelimit-remaining" | "x-ratelimit-reset"))
        .map(|(name, value)| (name.to_string(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
        .collect();
    kept.sort();
    let number = |name: &str| headers.get(name).map(|v| v.to_str().unwrap().parse().unwrap());
    let (remaining, reset) = (number("x-ratelimit-remaining"), number("x-ratelimit-reset"));
    Answer { status, headers: kept, body: String::from_utf8_lossy(body).into_owned(), remaining, reset }
}

/// Sends `make()` to the router, then to the served app, and asserts the answers agree;
/// `taken` says whether the served app must serve it without the router. A request taken is
/// also sent over a socket to the app served at `addr` as gatewayd serves it, twice: as it is,
/// which the connection answers itself (`serve`'s front), and with `Connection: keep-alive`,
/// which leaves it to hyper; both answers must be the router's (less hyper's `Date`).
async fn same_answer(
    app: &TestApp,
    addr: SocketAddr,
    name: &str,
    taken: bool,
    make: impl Fn() -> Request<Body>,
) -> Answer {
    assert_eq!(gateway_http::hot::takes(&make()), taken, "{name}: taken before routing");
    let routed = app.router.clone().oneshot(make()).await.unwrap();
    let (parts, body) = routed.into_parts();
    let routed = answer(parts.status, &parts.headers, &body.collect().await.unwrap().to_bytes());
    let served = gateway_http::app(app.state.clone()).oneshot(make()).await.unwrap();
    let (parts, body) = served.into_parts();
    let served = answer(parts.status, &parts.headers, &body.collect().await.unwrap().to_bytes());
    let mut answers = vec![("served", served)];
    if taken {
        let request = make();
        let fields: Vec<String> =
            request.headers().iter().map(|(name, value)| format!("{name}: {}", value.to_str().unwrap())).collect();
        let head = front::get_head(&request.uri().to_string(), &fields);
        assert!(gateway_http::serve::front_takes(head.as_bytes()), "{name}: answered by its connection");
        let mut kept_alive = fields.clone();
        kept_alive.push("connection: keep-alive".into());
        let by_hyper = front::get_head(&request.uri().to_string(), &kept_alive);
        assert!(!gateway_http::serve::front_takes(by_hyper.as_bytes()), "{name}: left to hyper");
        for (way, head) in [("answered by its connection", head), ("served by hyper", by_hyper)] {
            let wire = front::exchange(addr, &head).await;
            assert!(wire.header("date").is_some(), "{name}, {way}: hyper's Date");
            let headers: HeaderMap = wire
                .headers
                .iter()
                .filter(|(name, _)| name != "date")
                .map(|(name, value)| (name.parse().unwrap(), value.parse().unwrap()))
                .collect();
            let ids = wire.headers.iter().filter(|(name, _)| name == "x-request-id").count();
            assert_eq!(ids, 1, "{name}, {way}: one request id");
            answers.push((way, answer(wire.status, &headers, &wire.body)));
        }
    }
    // Each answer after the first has one request fewer left in the bucket, and a reset time
    // the same or a second later than the answer before.
    let (mut left, mut reset) = (routed.remaining, routed.reset);
    for (way, mut other) in answers {
        if let (Some(before), Some(now)) = (left, other.remaining) {
            assert_eq!(now, before.saturating_sub(1), "{name}, {way}: one fewer left than the answer before");
            left = other.remaining;
            other.remaining = routed.remaining;
        }
        if let (Some(before), Some(now)) = (reset, other.reset) {
            assert!(now == before || now == before + 1, "{name}, {way}: reset {now} after {before}");
            reset = other.reset;
            other.reset = routed.reset;
        }
        assert_eq!(other, routed, "{name}: {way}");
    }
    routed
}

fn get(uri: &str, token: Option<&str>) -> Request<Body> {
    build(Method::GET, uri, None, token)
}

#[tokio::test]
async fn balance_reads_answer_as_the_router_does() {
    for app in TestApp::every_store().await {
        let addr = front::serve(&app).await;
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
            let answer = same_answer(&app, addr, name, true, || get(uri, *token)).await;
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
        same_answer(&app, addr, "percent-encoded", false, || get(&encoded, Some(alice))).await;
        same_answer(&app, addr, "a query", false, || get(&with_currency, Some(alice))).await;
        let signed = || {
            let mut request = get(&own, Some(alice));
            request.headers_mut().insert("signature-input", "sig1=(\"@method\")".parse().unwrap());
            request.headers_mut().insert("signature", "sig1=:AAAA:".parse().unwrap());
            request
        };
        same_answer(&app, addr, "signed", false, signed).await;

        // A member removed: the token no longer opens the coop, either way.
        let removed = app.call(Method::DELETE, &format!("/v1/coops/c1/members/{bob_did}"), None, Some(&admin)).await;
        assert!(removed.status.is_success(), "{}", removed.body);
        same_answer(&app, addr, "a removed member", true, || {
            get(&format!("/v1/ledger/c1/balance/{bob_did}"), Some(bob))
        })
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
        same_answer(&app, addr, "rate limited", true, || get(&own, Some(alice))).await;
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
