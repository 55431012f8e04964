//! Cooperatives, members, settings, the scope policy over real membership, and leak attempts.

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::support::{ALL_SCOPES, MEMBER_SCOPES, TestApp, did_of, key};

#[tokio::test]
async fn create_get_list_and_duplicate() {
    let app = TestApp::new().await;
    let admin = app.token(1, "coop-a", &ALL_SCOPES).await;
    let created =
        app.post_as("/coops", json!({ "name": "A", "coop_type": "worker", "description": "d" }), &admin).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    assert_eq!(created.body["id"], "coop-a");
    assert_eq!(created.body["created_by"], did_of(1));
    assert_eq!(created.body["member_count"], 1);
    assert_eq!(created.body["settings"]["default_currency"], "hours");
    assert_eq!(created.body["settings"]["credit_limit"], json!(-1000));
    let again = app.post_as("/v1/coops", json!({ "name": "A", "coop_type": "worker" }), &admin).await;
    again.assert_error(409, "CONFLICT");
    let other_id =
        app.post_as("/v1/coops", json!({ "id": "coop-b", "name": "B", "coop_type": "worker" }), &admin).await;
    other_id.assert_error(403, "AUTHORIZATION_FAILED");
    let bad_id = app.post_as("/v1/coops", json!({ "id": "bad id!", "name": "B", "coop_type": "worker" }), &admin).await;
    bad_id.assert_error(400, "BAD_REQUEST");
    assert_eq!(app.get("/coops/coop-a", &admin).await.body["name"], "A");
    let listed = app.get("/v1/coops", &admin).await;
    assert_eq!(listed.body["coops"][0]["id"], "coop-a");
    assert_eq!(listed.body["pagination"]["total"], 1);
    let stats = app.call(Method::GET, "/v1/coops/coop-a/stats", None, None).await;
    assert_eq!(stats.status, StatusCode::OK, "public, no token");
    assert_eq!(stats.body["member_count"], 1);
    app.call(Method::GET, "/v1/coops/nope/stats", None, None).await.assert_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn members_roles_and_the_last_admin() {
    let app = TestApp::new().await;
    let (admin, _) = app.coop_with_members("c1", 1, &[2]).await;
    let dup = app.post_as("/v1/coops/c1/members", json!({ "did": did_of(2) }), &admin).await;
    dup.assert_error(409, "CONFLICT");
    let bad_role = app.post_as("/coops/c1/members", json!({ "did": did_of(3), "role": "owner" }), &admin).await;
    bad_role.assert_error(400, "BAD_REQUEST");
    let members = app.get("/coops/c1/members", &admin).await;
    let list = members.body["members"].as_array().unwrap();
    assert_eq!(list.len(), 2);
    let admin_record = list.iter().find(|m| m["did"] == did_of(1)).unwrap();
    assert_eq!(admin_record["role"], "admin");

    let demote = app
        .call(
            Method::PUT,
            &format!("/v1/coops/c1/members/{}/role", did_of(1)),
            Some(json!({ "role": "member" })),
            Some(&admin),
        )
        .await;
    demote.assert_error(409, "CONFLICT");
    let remove_admin =
        app.call(Method::DELETE, &format!("/v1/coops/c1/members/{}", did_of(1)), None, Some(&admin)).await;
    remove_admin.assert_error(409, "CONFLICT");
    let promote = app
        .call(
            Method::PUT,
            &format!("/v1/coops/c1/members/{}/role", did_of(2)),
            Some(json!({ "role": "admin" })),
            Some(&admin),
        )
        .await;
    assert_eq!(promote.body["role"], "admin");
    let now_ok = app
        .call(
            Method::PUT,
            &format!("/v1/coops/c1/members/{}/role", did_of(1)),
            Some(json!({ "role": "member" })),
            Some(&admin),
        )
        .await;
    assert_eq!(now_ok.status, StatusCode::OK, "{}", now_ok.body);
    let gone = app.call(Method::DELETE, &format!("/v1/coops/c1/members/{}", did_of(9)), None, Some(&admin)).await;
    gone.assert_error(404, "NOT_FOUND");
}

#[tokio::test]
async fn per_member_credit_limit_override() {
    let app = TestApp::new().await;
    let (admin, tokens) = app.coop_with_members("c1", 1, &[2, 3]).await;
    let set = app
        .call(
            Method::PUT,
            &format!("/v1/coops/c1/members/{}/credit-limit", did_of(2)),
            Some(json!({ "credit_limit": -10 })),
            Some(&admin),
        )
        .await;
    assert_eq!(set.body["credit_limit"], json!(-10), "{}", set.body);
    let over = app
        .post_as("/v1/ledger/c1/payment", json!({ "from": did_of(2), "to": did_of(3), "amount": 10.5 }), &tokens[0])
        .await;
    over.assert_error(409, "INSUFFICIENT_CREDIT");
    assert_eq!(over.body["details"]["credit_limit"], json!(-10));
    let positive = app
        .call(
            Method::PUT,
            &format!("/v1/coops/c1/members/{}/credit-limit", did_of(2)),
            Some(json!({ "credit_limit": 5 })),
            Some(&admin),
        )
        .await;
    positive.assert_error(400, "BAD_REQUEST");
}

#[tokio::test]
async fn settings_change_and_validation() {
    let app = TestApp::new().await;
    let (admin, tokens) = app.coop_with_members("c1", 1, &[2]).await;
    let changed = app
        .call(
            Method::PUT,
            "/v1/coops/c1/settings",
            Some(json!({ "default_currency": "eur", "quorum_percent": 60 })),
            Some(&admin),
        )
        .await;
    assert_eq!(changed.body["settings"]["default_currency"], "eur");
    assert_eq!(changed.body["settings"]["quorum_percent"], 60);
    let bad =
        app.call(Method::PUT, "/v1/coops/c1/settings", Some(json!({ "quorum_percent": 101 })), Some(&admin)).await;
    bad.assert_error(400, "BAD_REQUEST");
    let member =
        app.call(Method::PUT, "/v1/coops/c1/settings", Some(json!({ "quorum_percent": 10 })), Some(&tokens[0])).await;
    member.assert_error(403, "AUTHORIZATION_FAILED");
    assert_eq!(member.body["details"]["required_scopes"], json!(["coop:write"]));
}

/// The interface's four cases of token issuance, without open enrollment.
#[tokio::test]
async fn scope_policy_follows_membership() {
    let app = TestApp::with(false, gateway_http::CorsMode::Production { origin: None }).await;
    let (s1, d1) = key(1);
    // Bootstrap: the coop does not exist; only coop scopes.
    let boot = app.login(&s1, &d1, "c1", &["coop:read", "coop:write"]).await;
    let token = boot["token"].as_str().unwrap().to_owned();
    let created = app.post_as("/v1/coops", json!({ "name": "C1", "coop_type": "worker" }), &token).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    // Now an admin: every scope.
    let admin = app.login(&s1, &d1, "c1", &ALL_SCOPES).await;
    assert_eq!(admin["scopes"].as_array().unwrap().len(), 12);
    let admin = admin["token"].as_str().unwrap().to_owned();
    // A non-member of an existing coop: 403.
    let (s2, d2) = key(2);
    let nonce = app.challenge(&d2).await["nonce"].as_str().unwrap().to_owned();
    let sig = hex::encode(ed25519_dalek::Signer::sign(&s2, nonce.as_bytes()).to_bytes());
    let refused = app
        .post(
            "/v1/auth/verify",
            json!({ "did": d2.to_string(), "signature": sig, "coop_id": "c1", "scopes": ["coop:read"] }),
        )
        .await;
    refused.assert_error(403, "AUTHORIZATION_FAILED");
    assert_eq!(refused.body["details"]["refused_scopes"], json!(["coop:read"]));
    // A member gets its role's scopes only.
    app.post_as("/v1/coops/c1/members", json!({ "did": d2.to_string() }), &admin).await;
    let member = app.login(&s2, &d2, "c1", &MEMBER_SCOPES).await;
    assert_eq!(member["scopes"].as_array().unwrap().len(), 10);
    let member_token = member["token"].as_str().unwrap().to_owned();
    let nonce = app.challenge(&d2).await["nonce"].as_str().unwrap().to_owned();
    let sig = hex::encode(ed25519_dalek::Signer::sign(&s2, nonce.as_bytes()).to_bytes());
    let too_much = app
        .post(
            "/v1/auth/verify",
            json!({ "did": d2.to_string(), "signature": sig, "coop_id": "c1", "scopes": ["coop:write"] }),
        )
        .await;
    assert_eq!(too_much.body["details"]["refused_scopes"], json!(["coop:write"]));
    // A removed member's earlier token stops working for the coop's protected routes.
    assert_eq!(app.get("/coops/c1", &member_token).await.status, StatusCode::OK);
    app.call(Method::DELETE, &format!("/v1/coops/c1/members/{d2}"), None, Some(&admin)).await;
    app.get("/coops/c1", &member_token).await.assert_error(403, "AUTHORIZATION_FAILED");
}

/// A demoted admin's old token loses the scopes the new role does not allow.
#[tokio::test]
async fn demotion_narrows_an_existing_token() {
    let app = TestApp::with(false, gateway_http::CorsMode::Production { origin: None }).await;
    let (s1, d1) = key(1);
    let boot = app.login(&s1, &d1, "c1", &["coop:read", "coop:write"]).await;
    app.post_as("/v1/coops", json!({ "name": "C1", "coop_type": "worker" }), boot["token"].as_str().unwrap()).await;
    let admin1 = app.login(&s1, &d1, "c1", &ALL_SCOPES).await["token"].as_str().unwrap().to_owned();
    let (s2, d2) = key(2);
    app.post_as("/v1/coops/c1/members", json!({ "did": d2.to_string(), "role": "admin" }), &admin1).await;
    let admin2 = app.login(&s2, &d2, "c1", &ALL_SCOPES).await["token"].as_str().unwrap().to_owned();
    app.call(Method::PUT, &format!("/v1/coops/c1/members/{d1}/role"), Some(json!({ "role": "member" })), Some(&admin2))
        .await;
    let refused =
        app.call(Method::PUT, "/v1/coops/c1/settings", Some(json!({ "quorum_percent": 10 })), Some(&admin1)).await;
    refused.assert_error(403, "AUTHORIZATION_FAILED");
}

/// Every coop-scoped route refuses a token of another coop, in both families.
#[tokio::test]
async fn no_route_leaks_another_coops_data() {
    let app = TestApp::new().await;
    let (admin_a, _) = app.coop_with_members("coop-a", 1, &[2]).await;
    // The intruder is coop B's admin: it holds every scope, so only the coop check stands
    // between it and coop A.
    let (admin_b, tokens_b) = app.coop_with_members("coop-b", 3, &[4]).await;
    let intruder = &admin_b;
    let did_a = did_of(2);
    let attempts = [
        (Method::GET, "/v1/coops/coop-a".to_owned(), None),
        (Method::GET, "/coops/coop-a".to_owned(), None),
        (Method::GET, "/v1/coops/coop-a/members".to_owned(), None),
        (Method::GET, "/coops/coop-a/members".to_owned(), None),
        (Method::POST, "/v1/coops/coop-a/members".to_owned(), Some(json!({ "did": did_of(4) }))),
        (Method::POST, "/coops/coop-a/members".to_owned(), Some(json!({ "did": did_of(4) }))),
        (Method::GET, format!("/v1/ledger/coop-a/balance/{did_a}"), None),
        (Method::GET, "/v1/ledger/coop-a/history".to_owned(), None),
        (
            Method::POST,
            "/v1/ledger/coop-a/payment".to_owned(),
            Some(json!({ "from": did_of(4), "to": did_a, "amount": 1 })),
        ),
        (
            Method::POST,
            "/v1/ledger/coop-a/payments/batch".to_owned(),
            Some(json!([{ "from": did_of(4), "to": did_a, "amount": 1 }])),
        ),
    ];
    for (method, uri, body) in attempts {
        let r = app.call(method.clone(), &uri, body, Some(intruder)).await;
        r.assert_error(403, "AUTHORIZATION_FAILED");
        assert_eq!(r.body["details"]["coop_id"], "coop-a", "{method} {uri}");
    }
    // Short-family routes answer for the token's own coop only.
    let own = app.get("/ledger/history", intruder).await;
    assert_eq!(own.body["pagination"]["total"], 0);
    let coops = app.get("/coops", intruder).await;
    assert!(coops.body["coops"].as_array().unwrap().iter().all(|c| c["id"] == "coop-b"));
    // Notifications are the recipient's only.
    let theirs = app.get("/v1/notifications", &admin_a).await;
    assert!(
        theirs.body["notifications"].as_array().unwrap().is_empty(),
        "the creator was not notified of its own coop"
    );
    let member_b = &tokens_b[0];
    let inbox = app.get("/notifications", member_b).await;
    let id = inbox.body["notifications"][0]["id"].as_str().unwrap().to_owned();
    app.call(Method::POST, &format!("/v1/notifications/{id}/read"), None, Some(&admin_a))
        .await
        .assert_error(404, "NOT_FOUND");
    let mine = app.call(Method::POST, &format!("/notifications/{id}/read"), None, Some(member_b)).await;
    assert_eq!(mine.body["read"], true);
    assert_eq!(app.call(Method::POST, "/v1/notifications/read-all", None, Some(member_b)).await.body["marked"], 0);
}

/// Creating a coop that exists is 409 for whoever asks: also a non-member whose token for that
/// id was issued while it did not exist yet (the existence check comes before membership).
#[tokio::test]
async fn creating_an_existing_coop_is_409_even_for_a_non_member() {
    for app in TestApp::every_store().await {
        let backend = app.backend;
        // Both log in for "late" while it does not exist: each may create it.
        let early = app.token(5, "late", &["coop:read", "coop:write"]).await;
        let founder = app.token(6, "late", &["coop:read", "coop:write"]).await;
        let created = app.post_as("/v1/coops", json!({ "name": "Late", "coop_type": "worker" }), &founder).await;
        assert_eq!(created.status, StatusCode::CREATED, "{backend:?}: {}", created.body);
        for (uri, body) in [
            ("/v1/coops", json!({ "name": "Mine", "coop_type": "worker" })),
            ("/coops", json!({ "name": "Mine", "coop_type": "worker" })),
            ("/v1/coops", json!({ "id": "late", "name": "Mine", "coop_type": "worker" })),
        ] {
            let taken = app.post_as(uri, body, &early).await;
            taken.assert_error(409, "CONFLICT");
            assert_eq!(
                taken.body["details"],
                json!({ "reason": "cooperative 'late' already exists" }),
                "{backend:?} {uri}"
            );
        }
        // The exemption is for creating only: everything else stays closed to the non-member.
        let read = app.get("/v1/coops/late", &early).await;
        read.assert_error(403, "AUTHORIZATION_FAILED");
        let members = app.get("/v1/coops/late/members", &early).await;
        members.assert_error(403, "AUTHORIZATION_FAILED");
        let listed = app.get("/v1/coops", &early).await;
        listed.assert_error(403, "AUTHORIZATION_FAILED");
        // Another id than the token's is still 403, before existence.
        let other =
            app.post_as("/v1/coops", json!({ "id": "elsewhere", "name": "E", "coop_type": "worker" }), &early).await;
        other.assert_error(403, "AUTHORIZATION_FAILED");
        assert_eq!(other.body["details"], json!({ "coop_id": "elsewhere" }));
        assert_eq!(app.get("/v1/coops/late", &founder).await.body["created_by"], did_of(6));
    }
}
