//! Request signing (INTERFACE.md §11), tried as a member, a forger and a replayer would: signed
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
        // It keeps the exact signed bytes, which is what binds it to the record.
        let kept = gateway_httpsig::evidence_body(&stored).unwrap().expect("the body is kept");
        assert_eq!(serde_json::from_slice::<Value>(&kept).unwrap(), pay(1, 2, 5), "{:?}", app.backend);
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

/// A signed batch of 50 payments keeps its body once: one `signed_bodies` row, every history
/// item of the batch served the whole body (which verifies), and the `PaymentCreated` events
/// carrying the evidence without it.
#[tokio::test]
async fn a_signed_batch_keeps_its_body_once_and_every_item_serves_it() {
    use gateway_domain::ports::EventReads;
    for app in TestApp::every_store().await {
        let (admin, _) = app.coop_with_members("c1", 1, &[2]).await;
        let payments: Vec<Value> = (0..50).map(|i| pay(1, 2, 1 + i % 3)).collect();
        let batch = json!({ "payments": payments, "atomic": true });
        let signer = Signer::of(1, "nonce-batch-000000000001");
        let uri = "/v1/ledger/c1/payments/batch";
        let response = app.send(signer.request(Method::POST, uri, &admin, Some(&batch))).await;
        assert_eq!(response.status, StatusCode::OK, "{:?}: {}", app.backend, response.body);
        assert_eq!(response.body["succeeded"], 50, "{}", response.body);
        let kept = gateway_store::testing::signed_body_count(&app.store).await.unwrap();
        assert_eq!(kept, 1, "{:?}: the batch's body is kept once", app.backend);

        let history = app.get("/v1/ledger/c1/history?limit=100", &admin).await;
        let items = history.body["transactions"].as_array().unwrap();
        assert_eq!(items.len(), 50, "{:?}: {}", app.backend, history.body);
        for item in items {
            let evidence: gateway_core::RequestSignature =
                serde_json::from_value(item["request_signature"].clone()).unwrap();
            assert_eq!(evidence.path, uri);
            assert_eq!(gateway_httpsig::verify_evidence(&evidence).unwrap().as_str(), did_of(1));
            let body = gateway_httpsig::evidence_body(&evidence).unwrap().expect("the body is served");
            assert_eq!(serde_json::from_slice::<Value>(&body).unwrap(), batch, "{:?}", app.backend);
        }

        let coop = gateway_core::CoopId::parse("c1").unwrap();
        let events = app.store.events_after(&coop, 0, 1000).await.unwrap();
        let created: Vec<Value> =
            events.iter().filter(|e| e.event_type == "PaymentCreated").map(|e| e.data.to_value()).collect();
        assert_eq!(created.len(), 50, "{:?}", app.backend);
        for data in created {
            let evidence = &data["request_signature"];
            assert_eq!(evidence["path"], uri, "{data}");
            assert!(evidence.get("body").is_none(), "{:?}: an event carries no body: {data}", app.backend);
        }
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

/// The setting is judged again by the payment's own unit of work: an unsigned payment that passed
/// the edge's check while the coop did not yet require signatures, and reaches the store after
/// the change that turned the requirement on committed, is refused all the same, with the same
/// answer, and writes nothing (its body is held back until the change has committed, so the
/// order is certain on every store).
#[tokio::test]
async fn an_unsigned_payment_in_flight_when_signatures_become_required_is_refused_on_every_store() {
    for app in TestApp::every_store().await {
        let (_, members) = app.coop_with_members("c1", 1, &[2]).await;
        let (polled, reached) = tokio::sync::oneshot::channel::<()>();
        let (release, held) = tokio::sync::oneshot::channel::<Vec<u8>>();
        let body = futures_util::stream::once(async move {
            let _ = polled.send(());
            Ok::<_, std::io::Error>(axum::body::Bytes::from(held.await.unwrap()))
        });
        let request = Request::builder()
            .method(Method::POST)
            .uri("/v1/ledger/c1/payment")
            .header(header::AUTHORIZATION, format!("Bearer {}", members[0]))
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from_stream(body))
            .unwrap();
        let router = app.router.clone();
        let in_flight = tokio::spawn(async move { crate::support::send(&router, request).await });
        // The edge has let the request through (it reads the body only after its check) ...
        reached.await.unwrap();
        // ... when the coop starts requiring signatures.
        let coop = gateway_core::CoopId::parse("c1").unwrap();
        let on = gateway_domain::coops::SettingsPatch { require_signed_requests: Some(true), ..Default::default() };
        app.state.coops.update_settings(&coop, on).await.unwrap();
        release.send(serde_json::to_vec(&pay(2, 1, 1)).unwrap()).unwrap();
        let answer = in_flight.await.unwrap();
        assert_refused(&answer, "signature_required");
        let history = app.get("/v1/ledger/c1/history", &members[0]).await;
        assert_eq!(history.body["pagination"]["total"], 0, "{:?}: {}", app.backend, history.body);
    }
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

/// The trust graph is one for the whole network: a member of a coop that requires signatures
/// cannot change a trust edge unsigned by logging in to another coop that does not.
#[tokio::test]
async fn a_trust_edge_needs_a_signature_whichever_coop_the_token_is_for() {
    for app in TestApp::every_store().await {
        eprintln!("store: {:?}", app.backend);
        let (admin, _) = app.coop_with_members("c1", 1, &[2]).await;
        let (other_admin, _) = app.coop_with_members("c2", 5, &[2, 6]).await;
        let turned_on = app
            .call(Method::PUT, "/v1/coops/c1/settings", Some(json!({ "require_signed_requests": true })), Some(&admin))
            .await;
        assert_eq!(turned_on.status, StatusCode::OK, "{}", turned_on.body);
        let in_c2 = app.token(2, "c2", &crate::support::MEMBER_SCOPES).await;
        let edge = json!({ "target_did": did_of(6), "score": 0.8 });
        assert_refused(&app.post_as("/v1/trust/edges", edge.clone(), &in_c2).await, "signature_required");
        let short = json!({ "target_did": did_of(6), "score": 0.8 });
        assert_refused(&app.post_as("/trust/edge", short, &in_c2).await, "signature_required");
        let revoke = app.call(Method::DELETE, &format!("/v1/trust/edges/{}", did_of(6)), None, Some(&in_c2)).await;
        assert_refused(&revoke, "signature_required");
        // Signed, the same change is accepted with the same token.
        let signed = Signer::of(2, "nonce-trust-edge-0001");
        let set = app.send(signed.request(Method::POST, "/v1/trust/edges", &in_c2, Some(&edge))).await;
        assert_eq!(set.status.as_u16() / 100, 2, "{}", set.body);
        // Somebody in no coop that requires signatures changes edges unsigned as before.
        let member_of_c2_only = app.token(6, "c2", &crate::support::MEMBER_SCOPES).await;
        let theirs = json!({ "target_did": did_of(2), "score": 0.5 });
        let unsigned = app.post_as("/v1/trust/edges", theirs, &member_of_c2_only).await;
        assert_eq!(unsigned.status.as_u16() / 100, 2, "{}", unsigned.body);
        drop(other_admin);
    }
}

/// INTERFACE.md §11: a nonce is 16 to 64 characters of the base64url alphabet. A hostile client
/// sending a 65-character or a 60,000-character nonce (which the gateway would otherwise hold
/// for the signature's lifetime), or one with a character outside the alphabet, is refused as
/// `signature_invalid`, pays nothing and leaves nothing remembered; 64 characters pass.
#[tokio::test]
async fn an_overlong_or_non_base64url_nonce_is_refused_as_invalid() {
    let app = TestApp::new().await;
    let (admin, _) = app.coop_with_members("c1", 1, &[2]).await;
    let uri = "/v1/ledger/c1/payment";
    let body = pay(1, 2, 5);
    for nonce in ["n".repeat(65), "n".repeat(60_000), "nonce.0123456789ab".to_owned(), "nonce+0123456789/=".to_owned()]
    {
        let signer = Signer::of(1, &nonce);
        let refused = app.send(signer.request(Method::POST, uri, &admin, Some(&body))).await;
        assert_refused(&refused, "signature_invalid");
    }
    assert_eq!(app.get("/v1/ledger/c1/history", &admin).await.body["pagination"]["total"], 0);
    let longest = Signer::of(1, &"N".repeat(64));
    let paid = app.send(longest.request(Method::POST, uri, &admin, Some(&body))).await;
    assert_eq!(paid.status, StatusCode::CREATED, "{}", paid.body);
    assert_refused(&app.send(longest.request(Method::POST, uri, &admin, Some(&body))).await, "nonce_replayed");
}

/// A gateway that restarts has lost its memory of nonces: the same signed payment sent again
/// after the restart (its `created` before the new process began) is refused as
/// `signature_expired`, and is not paid twice; a fresh signature is accepted.
#[tokio::test]
async fn a_signed_payment_replayed_after_a_restart_is_refused() {
    for app in TestApp::every_store().await {
        if app.backend == crate::support::Backend::Memory {
            continue; // nothing survives its restart, the payer included
        }
        let backend = app.backend;
        let (admin, _) = app.coop_with_members("c1", 1, &[2]).await;
        let uri = "/v1/ledger/c1/payment";
        let signer = Signer::of(1, "nonce-restart-0000001");
        let paid = app.send(signer.request(Method::POST, uri, &admin, Some(&pay(1, 2, 5)))).await;
        assert_eq!(paid.status, StatusCode::CREATED, "{backend:?}: {}", paid.body);
        // Restarted within the same second as the signature was made.
        app.clock.advance_millis(400);
        let app = app.restart().await;
        let replayed = app.send(signer.request(Method::POST, uri, &admin, Some(&pay(1, 2, 5)))).await;
        assert_refused(&replayed, "signature_expired");
        assert!(replayed.body["error"].as_str().unwrap().contains("sign the request again"), "{}", replayed.body);
        assert_eq!(app.get("/v1/ledger/c1/history", &admin).await.body["pagination"]["total"], 1, "{backend:?}");
        app.clock.advance_millis(600);
        let fresh = Signer { created: START + 1, ..Signer::of(1, "nonce-restart-0000002") };
        let paid = app.send(fresh.request(Method::POST, uri, &admin, Some(&pay(1, 2, 5)))).await;
        assert_eq!(paid.status, StatusCode::CREATED, "{backend:?}: {}", paid.body);
    }
}

/// A signer may hold at most `MAX_NONCES_PER_SIGNER` unexpired nonces: past it, a signed request
/// is 429 `RATE_LIMIT_EXCEEDED` with `Retry-After` until its oldest nonce expires (none is
/// forgotten to make room), and another signer is not affected.
#[tokio::test]
async fn a_signer_holding_too_many_nonces_is_told_to_wait() {
    let app = TestApp::new().await;
    let (admin, members) = app.coop_with_members("c1", 1, &[2]).await;
    let uri = "/v1/ledger/c1/history?limit=1";
    let bound = gateway_auth::MAX_NONCES_PER_SIGNER;
    for n in 0..bound {
        if n % 500 == 0 {
            app.limiter_clock.advance(std::time::Duration::from_secs(60));
        }
        let signer = Signer { lifetime: 300, ..Signer::of(1, &format!("nonce-bound-{n:08}")) };
        let answer = app.send(signer.request(Method::GET, uri, &admin, None)).await;
        assert_eq!(answer.status, StatusCode::OK, "request {n}: {}", answer.body);
    }
    app.limiter_clock.advance(std::time::Duration::from_secs(60));
    app.clock.advance_secs(10);
    let one_more = Signer { created: START + 10, ..Signer::of(1, "nonce-bound-one-more") };
    let refused = app.send(one_more.request(Method::GET, uri, &admin, None)).await;
    refused.assert_error(429, "RATE_LIMIT_EXCEEDED");
    assert_eq!(refused.body["details"]["limit"], bound as u64, "{}", refused.body);
    assert_eq!(refused.body["details"]["retry_after_secs"], 290, "{}", refused.body);
    assert_eq!(refused.headers["retry-after"], "290");
    let first_again = Signer { lifetime: 300, ..Signer::of(1, "nonce-bound-00000000") };
    assert_refused(&app.send(first_again.request(Method::GET, uri, &admin, None)).await, "nonce_replayed");
    let neighbour = Signer { created: START + 10, ..Signer::of(2, "nonce-bound-neighbour") };
    assert_eq!(app.send(neighbour.request(Method::GET, uri, &members[0], None)).await.status, StatusCode::OK);
    // Once the oldest expired, the signer is served again.
    app.clock.advance_secs(290);
    let later = Signer { created: START + 300, ..Signer::of(1, "nonce-bound-one-more") };
    assert_eq!(app.send(later.request(Method::GET, uri, &admin, None)).await.status, StatusCode::OK);
}
