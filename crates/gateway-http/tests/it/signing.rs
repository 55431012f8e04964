//! Request signing (contract 11), tried as a member, a forger and a replayer would: signed
//! payments and votes keep their evidence (on every store), every failure reason, the replay
//! window, the coop setting, and eight replays of one signed request at once.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use ed25519_dalek::SigningKey;
use gateway_httpsig::{Message, SignOptions};
use serde_json::{Value, json};

use crate::support::{Response, START, TestApp, did_of, key};

const HOST: &str = "gateway.test";

/// A request signed by `seed`'s key as `keyid` (its own DID unless told otherwise), created
/// `created_offset` seconds from the gateway's clock.
struct Signer {
    key: SigningKey,
    keyid: String,
    created: u64,
    lifetime: u64,
    nonce: String,
}

impl Signer {
    fn of(seed: u8, nonce: &str) -> Self {
        Self { key: key(seed).0, keyid: did_of(seed), created: START, lifetime: 60, nonce: nonce.to_owned() }
    }

    fn request(&self, method: Method, uri: &str, token: &str, body: Option<&Value>) -> Request<Body> {
        let bytes = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        let (path, query) = uri.split_once('?').map_or((uri, None), |(p, q)| (p, Some(q)));
        let message = Message { method: method.as_str(), authority: HOST, path, query, headers: &[] };
        let options = SignOptions {
            label: "sig1",
            created: self.created,
            expires: self.created + self.lifetime,
            nonce: &self.nonce,
            keyid: &self.keyid,
        };
        let signed = gateway_httpsig::sign(&message, &bytes, &self.key, &options).unwrap();
        let mut builder = Request::builder()
            .method(method)
            .uri(uri)
            .header(header::HOST, HOST)
            .header(header::AUTHORIZATION, format!("Bearer {token}"))
            .header("signature-input", signed.signature_input)
            .header("signature", signed.signature);
        if let Some(digest) = signed.content_digest {
            builder = builder.header("content-digest", digest).header(header::CONTENT_TYPE, "application/json");
        }
        builder.body(Body::from(bytes)).unwrap()
    }
}

fn pay(from: u8, to: u8, amount: u32) -> Value {
    json!({ "from": did_of(from), "to": did_of(to), "amount": amount })
}

fn assert_refused(response: &Response, reason: &str) {
    response.assert_error(401, "AUTHENTICATION_FAILED");
    assert_eq!(response.body["details"]["reason"], reason, "{}", response.body);
    let accept = response.headers["accept-signature"].to_str().unwrap();
    assert!(accept.contains(r#"tag="icn-gateway""#) && accept.contains(r#"alg="ed25519""#), "{accept}");
}

#[tokio::test]
async fn signed_payments_and_votes_keep_evidence_anyone_can_verify_on_every_store() {
    for app in TestApp::every_store().await {
        let (admin, members) = app.coop_with_members("c1", 1, &[2]).await;
        let signed = Signer::of(1, "nonce-0000000000000001");
        let response =
            app.send(signed.request(Method::POST, "/v1/ledger/c1/payment", &admin, Some(&pay(1, 2, 5)))).await;
        assert_eq!(response.status, StatusCode::CREATED, "{:?}: {}", app.backend, response.body);
        let evidence = &response.body["request_signature"];
        assert_eq!(evidence["method"], "POST");
        assert_eq!(evidence["authority"], HOST);
        assert_eq!(evidence["path"], "/v1/ledger/c1/payment");
        // The history item carries the same evidence, and it verifies offline.
        let history = app.get("/v1/ledger/c1/history", &admin).await;
        assert_eq!(history.body["transactions"][0]["request_signature"], *evidence, "{:?}", app.backend);
        let stored: gateway_core::RequestSignature = serde_json::from_value(evidence.clone()).unwrap();
        assert_eq!(gateway_httpsig::verify_evidence(&stored).unwrap().as_str(), did_of(1));
        // An unsigned payment carries none.
        let plain = app.post_as("/v1/ledger/c1/payment", pay(2, 1, 1), &members[0]).await;
        assert_eq!(plain.status, StatusCode::CREATED);
        assert!(plain.body.get("request_signature").is_none(), "{}", plain.body);

        // A signed vote: the voter's entry in the votes keeps its evidence.
        let proposal = json!({ "domain_id": "coop", "title": "T", "description": "d", "payload": { "type": "text", "content": "c" } });
        let created = app.post_as("/v1/gov/proposals", proposal, &admin).await;
        let id = created.body["proposal_id"].as_str().unwrap().to_owned();
        app.post_as(&format!("/v1/gov/proposals/{id}/open"), json!({}), &admin).await;
        let vote = Signer::of(1, "nonce-0000000000000002");
        let uri = format!("/v1/gov/proposals/{id}/vote");
        let cast = app.send(vote.request(Method::POST, &uri, &admin, Some(&json!({ "choice": "for" })))).await;
        assert_eq!(cast.status, StatusCode::OK, "{}", cast.body);
        app.post_as(&uri, json!({ "choice": "against" }), &members[0]).await;
        let votes = app.get(&format!("/v1/gov/proposals/{id}/votes"), &admin).await;
        let voters = votes.body["voters"].as_array().unwrap();
        let signed_voter = voters.iter().find(|v| v["voter"] == did_of(1)).unwrap();
        let unsigned_voter = voters.iter().find(|v| v["voter"] == did_of(2)).unwrap();
        let evidence: gateway_core::RequestSignature =
            serde_json::from_value(signed_voter["request_signature"].clone()).unwrap();
        assert_eq!(gateway_httpsig::verify_evidence(&evidence).unwrap().as_str(), did_of(1));
        assert!(unsigned_voter.get("request_signature").is_none());
    }
}

#[tokio::test]
async fn every_failure_reason_of_contract_11() {
    let app = TestApp::new().await;
    let (admin, _) = app.coop_with_members("c1", 1, &[2]).await;
    let uri = "/v1/ledger/c1/payment";
    let body = pay(1, 2, 5);

    // Signed by another key than keyid's: invalid.
    let forged = Signer { key: key(3).0, ..Signer::of(1, "nonce-forged-000000001") };
    assert_refused(&app.send(forged.request(Method::POST, uri, &admin, Some(&body))).await, "signature_invalid");
    // keyid another member's DID: not the token's.
    let other = Signer::of(2, "nonce-other-0000000001");
    assert_refused(&app.send(other.request(Method::POST, uri, &admin, Some(&body))).await, "keyid_mismatch");
    // Created 61 s ago, or expired.
    let old = Signer { created: START - 61, lifetime: 300, ..Signer::of(1, "nonce-old-00000000001") };
    assert_refused(&app.send(old.request(Method::POST, uri, &admin, Some(&body))).await, "signature_expired");
    // A body other than the one digested.
    let mut tampered = Signer::of(1, "nonce-tamper-00000001").request(Method::POST, uri, &admin, Some(&body));
    *tampered.body_mut() = Body::from(pay(1, 2, 500).to_string());
    tampered.headers_mut().remove(header::CONTENT_LENGTH);
    assert_refused(&app.send(tampered).await, "digest_mismatch");
    // Signed without the body's digest (signed as if bodiless), sent with a body.
    let bodiless = Signer::of(1, "nonce-bodiless-000001");
    let mut request = bodiless.request(Method::POST, uri, &admin, None);
    request.headers_mut().insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
    *request.body_mut() = Body::from(body.to_string());
    assert_refused(&app.send(request).await, "components_missing");
    // Signed for another host.
    let mut elsewhere = Signer::of(1, "nonce-host-0000000001").request(Method::POST, uri, &admin, Some(&body));
    elsewhere.headers_mut().insert(header::HOST, "evil.example".parse().unwrap());
    assert_refused(&app.send(elsewhere).await, "signature_invalid");
    // A short nonce.
    let short = Signer::of(1, "short");
    assert_refused(&app.send(short.request(Method::POST, uri, &admin, Some(&body))).await, "signature_invalid");
    // The same nonce twice: the second is a replay, and nothing was paid twice.
    let once = Signer::of(1, "nonce-once-0000000001");
    let first = app.send(once.request(Method::POST, uri, &admin, Some(&body))).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
    assert_refused(&app.send(once.request(Method::POST, uri, &admin, Some(&body))).await, "nonce_replayed");
    let history = app.get("/v1/ledger/c1/history", &admin).await;
    assert_eq!(history.body["pagination"]["total"], 1);
    // A signature on a route that is not critical is checked all the same.
    let read = Signer { key: key(3).0, ..Signer::of(1, "nonce-read-0000000001") };
    assert_refused(
        &app.send(read.request(Method::GET, "/v1/ledger/c1/history?limit=5", &admin, None)).await,
        "signature_invalid",
    );
    let read = Signer::of(1, "nonce-read-0000000002");
    let ok = app.send(read.request(Method::GET, "/v1/ledger/c1/history?limit=5", &admin, None)).await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.body);
}

#[tokio::test]
async fn a_nonce_is_refused_until_its_signature_expires_then_the_signature_is() {
    let app = TestApp::new().await;
    let (admin, _) = app.coop_with_members("c1", 1, &[2]).await;
    let uri = "/v1/ledger/c1/payment";
    let signer = Signer::of(1, "nonce-window-00000001");
    assert_eq!(
        app.send(signer.request(Method::POST, uri, &admin, Some(&pay(1, 2, 1)))).await.status,
        StatusCode::CREATED
    );
    app.clock.advance_secs(59);
    assert_refused(&app.send(signer.request(Method::POST, uri, &admin, Some(&pay(1, 2, 1)))).await, "nonce_replayed");
    app.clock.advance_secs(1);
    assert_refused(
        &app.send(signer.request(Method::POST, uri, &admin, Some(&pay(1, 2, 1)))).await,
        "signature_expired",
    );
}

#[tokio::test]
async fn a_coop_that_requires_signatures_refuses_unsigned_critical_operations() {
    let app = TestApp::new().await;
    let (admin, members) = app.coop_with_members("c1", 1, &[2]).await;
    let turned_on = app
        .call(Method::PUT, "/v1/coops/c1/settings", Some(json!({ "require_signed_requests": true })), Some(&admin))
        .await;
    assert_eq!(turned_on.status, StatusCode::OK, "{}", turned_on.body);
    assert_eq!(turned_on.body["settings"]["require_signed_requests"], true, "{}", turned_on.body);
    // Unsigned critical operations: refused.
    let refused = app.post_as("/v1/ledger/c1/payment", pay(2, 1, 1), &members[0]).await;
    assert_refused(&refused, "signature_required");
    let refused = app.post_as("/v1/coops/c1/members", json!({ "did": did_of(3) }), &admin).await;
    assert_refused(&refused, "signature_required");
    let refused = app
        .call(Method::PUT, "/v1/coops/c1/settings", Some(json!({ "require_signed_requests": false })), Some(&admin))
        .await;
    assert_refused(&refused, "signature_required");
    // Reads are not critical.
    assert_eq!(app.get("/v1/ledger/c1/history", &members[0]).await.status, StatusCode::OK);
    // Signed: accepted.
    let signed = Signer::of(2, "nonce-required-000001");
    let paid = app.send(signed.request(Method::POST, "/v1/ledger/c1/payment", &members[0], Some(&pay(2, 1, 1)))).await;
    assert_eq!(paid.status, StatusCode::CREATED, "{}", paid.body);
    let off = Signer::of(1, "nonce-required-000002");
    let body = json!({ "require_signed_requests": false });
    let turned_off = app.send(off.request(Method::PUT, "/v1/coops/c1/settings", &admin, Some(&body))).await;
    assert_eq!(turned_off.status, StatusCode::OK, "{}", turned_off.body);
    assert_eq!(app.post_as("/v1/ledger/c1/payment", pay(2, 1, 1), &members[0]).await.status, StatusCode::CREATED);
}

#[tokio::test]
async fn eight_replays_of_one_signed_request_at_once_pay_once() {
    let app = Arc::new(TestApp::new().await);
    let (admin, _) = app.coop_with_members("c1", 1, &[2]).await;
    let signer = Signer::of(1, "nonce-race-0000000001");
    let barrier = Arc::new(tokio::sync::Barrier::new(8));
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let request = signer.request(Method::POST, "/v1/ledger/c1/payment", &admin, Some(&pay(1, 2, 3)));
            let (app, barrier) = (app.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                app.send(request).await
            })
        })
        .collect();
    let mut statuses = Vec::new();
    for task in tasks {
        statuses.push(task.await.unwrap().status.as_u16());
    }
    statuses.sort_unstable();
    assert_eq!(statuses, [201, 401, 401, 401, 401, 401, 401, 401]);
    assert_eq!(app.get("/v1/ledger/c1/history", &admin).await.body["pagination"]["total"], 1);
}
