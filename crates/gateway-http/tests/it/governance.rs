//! Governance over HTTP: domains, the three proposal shapes, votes, delegation, close rules,
//! effects, receipts verified by an independent code path, key rotation and the sweeper.

use std::sync::Arc;

use axum::http::{Method, StatusCode};
use ed25519_dalek::{Signature, VerifyingKey};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::support::{TestApp, did_of};

async fn setup(app: &TestApp) -> (String, Vec<String>) {
    let (admin, members) = app.coop_with_members("c1", 1, &[2, 3, 4]).await;
    let domain =
        json!({ "domain_id": "budget", "name": "Budget", "members": [did_of(1), did_of(2), did_of(3), did_of(4)] });
    let created = app.post_as("/v1/gov/domains", domain, &admin).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    (admin, members)
}

/// Opens a proposal: a text one in the `budget` domain, one that acts on the coop in `coop`.
async fn proposal(app: &TestApp, token: &str, payload: Value) -> String {
    let effects = ["membership", "settings", "budget", "signing_key_rotation"];
    let domain = if payload["type"].as_str().is_some_and(|t| effects.contains(&t)) { "coop" } else { "budget" };
    let body = json!({ "domain_id": domain, "title": "T", "description": "D", "payload": payload, "voting_duration_secs": 3600 });
    let created = app.post_as("/v1/gov/proposals", body, token).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    assert_eq!(created.body["status"], "draft");
    let id = created.body["proposal_id"].as_str().unwrap().to_owned();
    let opened = app.post_as(&format!("/v1/gov/proposals/{id}/open"), json!({}), token).await;
    assert_eq!(opened.body["status"], "open", "{}", opened.body);
    id
}

/// Recomputes the receipt's canonical form, hash and signature without the gateway's code.
fn verify_independently(receipt: &Value, votes: &[(String, &str, u64)]) {
    let mut sorted = votes.to_vec();
    sorted.sort();
    let list: Vec<String> =
        sorted.iter().map(|(v, c, w)| format!(r#"{{"choice":"{c}","voter":"{v}","weight":{w}}}"#)).collect();
    let votes_hash = format!("0x{}", hex::encode(Sha256::digest(format!("[{}]", list.join(",")))));
    assert_eq!(receipt["votes_hash"], votes_hash);
    let t = &receipt["tally"];
    let canonical = format!(
        r#"{{"domain_id":"{}","outcome":"{}","proposal_id":"{}","tally":{{"abstain":{},"against":{},"for":{}}},"timestamp":{},"votes_hash":"{}"}}"#,
        receipt["domain_id"].as_str().unwrap(),
        receipt["outcome"].as_str().unwrap(),
        receipt["proposal_id"].as_str().unwrap(),
        t["abstain"],
        t["against"],
        t["for"],
        receipt["timestamp"],
        votes_hash
    );
    let digest = Sha256::digest(canonical.as_bytes());
    assert_eq!(receipt["decision_hash"], format!("0x{}", hex::encode(digest)));
    let key: [u8; 32] = hex::decode(receipt["public_key"].as_str().unwrap()).unwrap().try_into().unwrap();
    let signature: [u8; 64] = hex::decode(receipt["signature"].as_str().unwrap()).unwrap().try_into().unwrap();
    VerifyingKey::from_bytes(&key).unwrap().verify_strict(&digest, &Signature::from_bytes(&signature)).unwrap();
    let did = gateway_core::Did::key_from_public_key(&gateway_core::Ed25519PublicKey(key));
    assert_eq!(receipt["signer"], did.to_string());
}

#[tokio::test]
async fn vote_close_and_verify_the_receipt() {
    let app = TestApp::new().await;
    let (admin, m) = setup(&app).await;
    let id = proposal(&app, &admin, json!({ "type": "text", "content": "hello" })).await;
    let v = |token: &str, choice: &str| {
        let (app, id, token, choice) = (&app, id.clone(), token.to_owned(), choice.to_owned());
        async move { app.post_as(&format!("/v1/gov/proposals/{id}/vote"), json!({ "choice": choice }), &token).await }
    };
    let first = v(&m[0], "Approve").await;
    assert_eq!(first.body, json!({ "proposal_id": id, "voter": did_of(2), "choice": "For", "replaced": false }));
    assert_eq!(v(&m[0], "NO").await.body["replaced"], true, "a later vote replaces");
    assert_eq!(v(&m[0], "yes").await.body["choice"], "For");
    v(&m[1], "for").await;
    v(&m[2], "against").await;
    v(&m[2], "maybe").await.assert_error(400, "BAD_REQUEST");
    let tally = app.get(&format!("/v1/gov/proposals/{id}/votes"), &admin).await;
    assert_eq!((tally.body["votes_for"].as_u64(), tally.body["votes_against"].as_u64()), (Some(2), Some(1)));
    app.get(&format!("/v1/gov/proposals/{id}/proof"), &admin).await.assert_error(404, "RECEIPT_UNAVAILABLE");
    // A member may not close early while a vote is missing; the author may.
    app.post_as(&format!("/v1/gov/proposals/{id}/close"), json!({}), &m[0]).await.assert_error(409, "CONFLICT");
    let closed = app.post_as(&format!("/v1/gov/proposals/{id}/close"), json!({}), &admin).await;
    assert_eq!(closed.status, StatusCode::OK, "{}", closed.body);
    assert_eq!(closed.body["outcome"], "Approved");
    assert_eq!(closed.body["accepted"], true);
    assert_eq!(closed.body["tally"], json!({ "for": 2, "against": 1, "abstain": 0 }));
    v(&m[1], "against").await.assert_error(409, "CONFLICT");
    let receipt = app.get(&format!("/v1/gov/proposals/{id}/proof"), &admin).await;
    assert_eq!(receipt.status, StatusCode::OK, "{}", receipt.body);
    assert_eq!(receipt.body["tally"], closed.body["tally"], "the record and the receipt agree");
    verify_independently(&receipt.body, &[(did_of(2), "For", 1), (did_of(3), "For", 1), (did_of(4), "Against", 1)]);
    let keys = app.get("/v1/gov/signing-keys", &m[0]).await;
    assert_eq!(keys.body["keys"][0]["public_key"], receipt.body["public_key"]);
    let stats = app.call(Method::GET, "/v1/coops/c1/stats", None, None).await;
    assert_eq!((stats.body["proposal_count"].as_u64(), stats.body["open_proposal_count"].as_u64()), (Some(1), Some(0)));
}

#[tokio::test]
async fn delegation_weights_votes_and_can_be_revoked() {
    let app = TestApp::new().await;
    let (admin, m) = setup(&app).await;
    let id = proposal(&app, &admin, json!({ "Text": { "content": "the spec's variant form" } })).await;
    let d = app.post_as("/v1/gov/delegations", json!({ "delegate": did_of(2), "scope": "domain:budget" }), &m[1]).await;
    assert_eq!(d.status, StatusCode::CREATED, "{}", d.body);
    let chain = app.post_as("/v1/gov/delegations", json!({ "delegate": did_of(3), "scope": "blanket" }), &m[2]).await;
    assert_eq!(chain.status, StatusCode::CREATED);
    app.post_as(&format!("/v1/gov/proposals/{id}/vote"), json!({ "choice": "against" }), &m[0]).await;
    let tally = app.get(&format!("/v1/gov/proposals/{id}/votes"), &admin).await;
    assert_eq!(tally.body["votes_against"], 3, "4 → 3 → 2 carries three votes: {}", tally.body);
    assert_eq!(tally.body["voters"][0]["weight"], 3);
    let listed = app.get("/v1/gov/delegations", &m[0]).await;
    assert_eq!(listed.body["received"].as_array().unwrap().len(), 1);
    let did_id = d.body["id"].as_str().unwrap();
    app.call(Method::DELETE, &format!("/v1/gov/delegations/{did_id}"), None, Some(&m[0]))
        .await
        .assert_error(404, "NOT_FOUND");
    assert_eq!(
        app.call(Method::DELETE, &format!("/v1/gov/delegations/{did_id}"), None, Some(&m[1])).await.status,
        StatusCode::NO_CONTENT
    );
    assert_eq!(app.get(&format!("/v1/gov/proposals/{id}/votes"), &admin).await.body["votes_against"], 1);
    app.post_as("/v1/gov/delegations", json!({ "delegate": did_of(2), "scope": "team:x" }), &m[1])
        .await
        .assert_error(400, "BAD_REQUEST");
}

#[tokio::test]
async fn approved_budget_pays_from_the_treasury_and_membership_is_added() {
    let app = TestApp::new().await;
    let (admin, m) = setup(&app).await;
    let budget = proposal(&app, &admin, json!({ "type": "budget", "to": did_of(3), "amount": 250.5 })).await;
    let join = proposal(&app, &admin, json!({ "type": "membership", "action": "add", "did": did_of(9) })).await;
    for id in [&budget, &join] {
        for token in m.iter().chain([&admin]) {
            app.post_as(&format!("/v1/gov/proposals/{id}/vote"), json!({ "choice": "for" }), token).await;
        }
        // Every member's vote is cast: any member may close now.
        let closed = app.post_as(&format!("/v1/gov/proposals/{id}/close"), json!({}), &m[0]).await;
        assert_eq!(closed.body["outcome"], "Approved", "{}", closed.body);
    }
    let payee = app.get(&format!("/v1/ledger/c1/balance/{}", did_of(3)), &admin).await;
    assert_eq!(payee.body["balance"], json!(250.5));
    let treasury = app.get("/v1/ledger/c1/balance/coop:c1:treasury", &admin).await;
    assert_eq!(treasury.body["balance"], json!(-250.5));
    let members = app.get("/v1/coops/c1/members", &admin).await;
    assert!(members.body["members"].as_array().unwrap().iter().any(|x| x["did"] == did_of(9)));
}

#[tokio::test]
async fn no_quorum_rejected_and_rules() {
    let app = TestApp::new().await;
    let (admin, m) = setup(&app).await;
    let quiet = proposal(&app, &admin, json!({ "type": "text", "content": "x" })).await;
    app.post_as(&format!("/v1/gov/proposals/{quiet}/vote"), json!({ "choice": "for" }), &m[0]).await;
    let closed = app.post_as(&format!("/v1/gov/proposals/{quiet}/close"), json!({}), &admin).await;
    assert_eq!(closed.body["outcome"], "NoQuorum", "1 of 4 is below 50%");
    let body = json!({ "domain": "budget", "title": "S", "description": "short family", "rule_ccl": "unanimous", "voting_duration_secs": 60 });
    let short = app.post_as("/governance/proposals", body, &admin).await;
    assert_eq!(short.body["status"], "open", "the short family creates and opens");
    let sid = short.body["proposal_id"].as_str().unwrap().to_owned();
    for (token, choice) in [(&admin, "for"), (&m[0], "for"), (&m[1], "against")] {
        app.post_as(&format!("/governance/proposals/{sid}/vote"), json!({ "choice": choice }), token).await;
    }
    let active = app.get("/governance/proposals?status=active", &admin).await;
    assert_eq!(active.body["proposals"].as_array().unwrap().len(), 1);
    // The sweeper closes it once voting time has passed.
    app.clock.advance_secs(61);
    assert_eq!(app.state.governance.sweep().await.unwrap(), 1);
    let swept = app.get(&format!("/v1/gov/proposals/{sid}"), &admin).await;
    assert_eq!(swept.body["outcome"], "Rejected", "unanimous fails with one against");
    let filtered = app.get("/v1/gov/proposals?state=closed&domain=budget", &admin).await;
    assert_eq!(filtered.body["pagination"]["total"], 2);
}

#[tokio::test]
async fn key_rotation_keeps_old_receipts_verifiable() {
    let app = TestApp::new().await;
    let (admin, m) = setup(&app).await;
    let everyone: Vec<&String> = m.iter().chain([&admin]).collect();
    let first = proposal(&app, &admin, json!({ "type": "text", "content": "before" })).await;
    let rotate = proposal(&app, &admin, json!({ "type": "signing_key_rotation" })).await;
    for id in [&first, &rotate] {
        for token in &everyone {
            app.post_as(&format!("/v1/gov/proposals/{id}/vote"), json!({ "choice": "for" }), token).await;
        }
        app.clock.advance_secs(1);
        app.post_as(&format!("/v1/gov/proposals/{id}/close"), json!({}), &admin).await;
    }
    let later = proposal(&app, &admin, json!({ "type": "text", "content": "after" })).await;
    app.post_as(&format!("/v1/gov/proposals/{later}/close"), json!({}), &admin).await;
    let keys = app.get("/v1/gov/signing-keys", &admin).await.body["keys"].as_array().unwrap().clone();
    assert_eq!(keys.len(), 2);
    assert!(keys[0]["valid_until"].is_u64(), "the old key is retired");
    assert!(keys[1]["valid_until"].is_null());
    let old = app.get(&format!("/v1/gov/proposals/{first}/proof"), &admin).await.body;
    let new = app.get(&format!("/v1/gov/proposals/{later}/proof"), &admin).await.body;
    assert_eq!(old["public_key"], keys[0]["public_key"]);
    assert_eq!(new["public_key"], keys[1]["public_key"]);
    let votes: Vec<(String, &str, u64)> = [1u8, 2, 3, 4].iter().map(|s| (did_of(*s), "For", 1)).collect();
    verify_independently(&old, &votes);
    verify_independently(&new, &[]);
}

/// Closes an approved proposal of `payload` in domain `budget` of the app's coop `coop`.
async fn approve(app: &TestApp, admin: &str, members: &[String], payload: Value) -> String {
    let id = proposal(app, admin, payload).await;
    for token in members.iter().map(String::as_str).chain([admin]) {
        app.post_as(&format!("/v1/gov/proposals/{id}/vote"), json!({ "choice": "for" }), token).await;
    }
    app.clock.advance_secs(1);
    let closed = app.post_as(&format!("/v1/gov/proposals/{id}/close"), json!({}), admin).await;
    assert_eq!(closed.body["outcome"], "Approved", "{}", closed.body);
    app.clock.advance_secs(1);
    id
}

#[tokio::test]
async fn signing_keys_are_listed_per_coop_to_a_token_of_the_coop() {
    let app = TestApp::new().await;
    let (admin1, m1) = setup(&app).await;
    let (admin2, m2) = app.coop_with_members("c2", 11, &[12, 13]).await;
    let domain = json!({ "domain_id": "budget", "name": "Budget", "members": [did_of(11), did_of(12), did_of(13)] });
    assert_eq!(app.post_as("/v1/gov/domains", domain, &admin2).await.status, StatusCode::CREATED);
    let list = |token: String| {
        let app = &app;
        async move {
            let listed = app.get("/v1/gov/signing-keys", &token).await;
            assert_eq!(listed.status, StatusCode::OK, "{}", listed.body);
            listed.body["keys"].as_array().unwrap().clone()
        }
    };
    // Listed before anything is signed: the key each coop signs with now.
    let c1 = list(m1[0].clone()).await;
    let c2 = list(m2[0].clone()).await;
    assert_eq!((c1.len(), c2.len()), (1, 1));
    for key in [&c1[0], &c2[0]] {
        assert_eq!(
            (key["current"].as_bool(), key["generation"].as_u64(), key["master"].as_u64()),
            (Some(true), Some(0), Some(0))
        );
        assert!(
            key["valid_until"].is_null()
                && key["valid_from"].is_u64()
                && key["did"].as_str().unwrap().starts_with("did:key:z6Mk")
        );
    }
    assert_ne!(c1[0]["public_key"], c2[0]["public_key"], "each coop has its own key");
    let text = json!({ "type": "text", "content": "x" });
    let old = approve(&app, &admin1, &m1, text.clone()).await;
    let old = app.get(&format!("/v1/gov/proposals/{old}/proof"), &admin1).await.body;
    assert_eq!(old["public_key"], c1[0]["public_key"]);

    // Coop c1 rotates its key; c2's stays.
    approve(&app, &admin1, &m1, json!({ "type": "signing_key_rotation" })).await;
    let c1_after = list(admin1.clone()).await;
    assert_eq!(c1_after.len(), 2, "{c1_after:?}");
    assert_eq!(c1_after[0]["public_key"], c1[0]["public_key"]);
    assert_eq!(c1_after[0]["current"], false);
    assert!(c1_after[0]["valid_until"].as_u64().unwrap() > old["timestamp"].as_u64().unwrap());
    assert_eq!((c1_after[1]["current"].as_bool(), c1_after[1]["generation"].as_u64()), (Some(true), Some(1)));
    assert_eq!(list(admin2.clone()).await, c2, "c2's keys did not change");
    let new = approve(&app, &admin1, &m1, text).await;
    let new = app.get(&format!("/v1/gov/proposals/{new}/proof"), &admin1).await.body;
    assert_eq!(new["public_key"], c1_after[1]["public_key"]);
    // The old receipt still verifies, with the retired key c1 lists.
    let votes: Vec<(String, &str, u64)> = [1u8, 2, 3, 4].iter().map(|s| (did_of(*s), "For", 1)).collect();
    verify_independently(&old, &votes);
    assert!(!c2.iter().any(|k| k["public_key"] == old["public_key"]), "c1's keys are not c2's");

    // A token is needed, of any scope; a token without a coop is refused.
    let response = app.call(Method::GET, "/v1/gov/signing-keys", None, None).await;
    response.assert_error(401, "AUTHENTICATION_FAILED");
    let reader = app.token(2, "c1", &["ledger:read"]).await;
    assert_eq!(list(reader).await.len(), 2, "any scope will do");
    let (signing, did) = crate::support::key(40);
    let nonce = app.challenge(&did).await["nonce"].as_str().unwrap().to_owned();
    let signature = hex::encode(ed25519_dalek::Signer::sign(&signing, nonce.as_bytes()).to_bytes());
    let verify = json!({ "did": did.to_string(), "signature": signature });
    let coopless = app.post("/v1/auth/verify", verify).await;
    assert_eq!(coopless.status, StatusCode::OK, "{}", coopless.body);
    let token = coopless.body["token"].as_str().unwrap();
    app.get("/v1/gov/signing-keys", token).await.assert_error(403, "AUTHORIZATION_FAILED");
}

#[tokio::test]
async fn without_a_key_receipts_are_unavailable_with_the_reason() {
    let keys = Arc::new(gateway_domain::governance::MemoryReceiptKeys::unavailable("keystore_locked"));
    let app = TestApp::build_with_keys(true, gateway_http::CorsMode::Development, 0.9, vec![], keys).await;
    let (admin, _) = setup(&app).await;
    let id = proposal(&app, &admin, json!({ "type": "text", "content": "x" })).await;
    let closed = app.post_as(&format!("/v1/gov/proposals/{id}/close"), json!({}), &admin).await;
    assert_eq!(closed.status, StatusCode::OK, "closing works without a key");
    let proof = app.get(&format!("/v1/gov/proposals/{id}/proof"), &admin).await;
    proof.assert_error(404, "RECEIPT_UNAVAILABLE");
    assert_eq!(proof.body["details"]["reason"], "keystore_locked");
}

#[tokio::test]
async fn permissions_trust_and_validation() {
    let app = TestApp::build(true, gateway_http::CorsMode::Development, 0.3, vec![]).await;
    let (admin, _) = app.coop_with_members("c1", 1, &[2]).await;
    let domain = json!({ "domain_id": "d", "name": "D", "members": [did_of(1), did_of(5)] });
    app.post_as("/v1/gov/domains", domain, &admin).await.assert_error(400, "BAD_REQUEST");
    let ok =
        app.post_as("/v1/gov/domains", json!({ "domain_id": "d", "name": "D", "members": [did_of(1)] }), &admin).await;
    assert_eq!(ok.status, StatusCode::CREATED);
    app.post_as("/v1/gov/domains", json!({ "domain_id": "d", "name": "D", "members": [] }), &admin)
        .await
        .assert_error(409, "CONFLICT");
    let low =
        app.post_as("/v1/gov/proposals", json!({ "domain_id": "coop", "title": "T", "kind": "budget" }), &admin).await;
    low.assert_error(403, "INSUFFICIENT_TRUST");
    assert_eq!(low.body["details"]["required"], 0.4);
    let reader = app.token(2, "c1", &["gov:read"]).await;
    let refused = app.post_as("/v1/gov/proposals", json!({ "domain_id": "d", "title": "T" }), &reader).await;
    assert_eq!(refused.body["details"]["required_scopes"], json!(["gov:write"]));
}
