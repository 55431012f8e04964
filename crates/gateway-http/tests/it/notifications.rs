//! Notifications over HTTP: a token sees, and marks read, only its subject's notifications of
//! the token's coop.

use axum::http::StatusCode;
use serde_json::json;

use crate::support::{TestApp, did_of};

/// A DID in two coops: with coop A's token it lists, counts and marks read A's notifications
/// only; B's are 404, and read-all leaves them unread.
#[tokio::test]
async fn notifications_are_scoped_to_the_tokens_coop() {
    for app in TestApp::every_store().await {
        let backend = app.backend;
        // Seed 2 joins both coops (one `member_added` each); in B it is also paid.
        let (_, a_members) = app.coop_with_members("coop-a", 1, &[2]).await;
        let (b_admin, b_members) = app.coop_with_members("coop-b", 3, &[2]).await;
        let (token_a, token_b) = (&a_members[0], &b_members[0]);
        let paid = app
            .post_as("/v1/ledger/coop-b/payment", json!({ "from": did_of(3), "to": did_of(2), "amount": 5 }), &b_admin)
            .await;
        assert_eq!(paid.status, StatusCode::CREATED, "{backend:?}: {}", paid.body);

        let in_a = app.get("/v1/notifications", token_a).await;
        assert_eq!(in_a.status, StatusCode::OK, "{backend:?}: {}", in_a.body);
        let items = in_a.body["notifications"].as_array().unwrap();
        assert_eq!(items.len(), 1, "{backend:?}: {}", in_a.body);
        assert_eq!(items[0]["coop_id"], "coop-a");
        assert_eq!(items[0]["kind"], "member_added");
        assert_eq!(in_a.body["unread_count"], 1);
        assert_eq!(in_a.body["pagination"]["total"], 1);

        let in_b = app.get("/notifications?unread_only=true", token_b).await;
        let b_items = in_b.body["notifications"].as_array().unwrap();
        assert_eq!(b_items.len(), 2, "{backend:?}: {}", in_b.body);
        assert!(b_items.iter().all(|n| n["coop_id"] == "coop-b"), "{}", in_b.body);
        assert_eq!(in_b.body["unread_count"], 2);
        let b_id = b_items[0]["id"].as_str().unwrap().to_owned();

        // B's notification through A's token: as if it did not exist, on both families.
        for uri in [format!("/v1/notifications/{b_id}/read"), format!("/notifications/{b_id}/read")] {
            let foreign = app.post_as(&uri, json!({}), token_a).await;
            foreign.assert_error(404, "NOT_FOUND");
            assert_eq!(foreign.body["details"], json!({ "resource": "notification", "id": b_id }), "{backend:?}");
        }
        // Someone else's notification of the same coop is 404 too.
        app.post_as(&format!("/v1/notifications/{b_id}/read"), json!({}), &b_admin)
            .await
            .assert_error(404, "NOT_FOUND");

        let marked = app.post_as("/v1/notifications/read-all", json!({}), token_a).await;
        assert_eq!(marked.status, StatusCode::OK, "{}", marked.body);
        assert_eq!(marked.body, json!({ "marked": 1 }), "{backend:?}: only coop A's");
        assert_eq!(app.get("/v1/notifications", token_a).await.body["unread_count"], 0);
        assert_eq!(app.get("/v1/notifications", token_b).await.body["unread_count"], 2, "{backend:?}: B's untouched");

        let read = app.post_as(&format!("/notifications/{b_id}/read"), json!({}), token_b).await;
        assert_eq!(read.status, StatusCode::OK, "{}", read.body);
        assert_eq!(read.body["read"], true);
        assert_eq!(app.post_as("/notifications/read-all", json!({}), token_b).await.body, json!({ "marked": 1 }));
    }
}

async fn pay_member_2(app: &TestApp, amount: u32) {
    let payer = app.token(1, "c1", &crate::support::ALL_SCOPES).await;
    let body = json!({ "from": did_of(1), "to": did_of(2), "amount": amount });
    let paid = app.post_as("/v1/ledger/c1/payment", body, &payer).await;
    assert_eq!(paid.status, StatusCode::CREATED, "{}", paid.body);
}

/// Member 2's `payment_received` notifications: their amounts (sorted), the items, and a
/// fresh token.
async fn received(app: &TestApp) -> (Vec<String>, serde_json::Value, String) {
    let payee = app.token(2, "c1", &crate::support::MEMBER_SCOPES).await;
    let list = app.get("/v1/notifications?limit=100", &payee).await;
    let mut amounts: Vec<String> = list.body["notifications"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|n| n["kind"] == "payment_received")
        .map(|n| n["data"]["amount"].to_string())
        .collect();
    amounts.sort();
    (amounts, list.body["notifications"].clone(), payee)
}

/// Notifications do not grow without bound: a read one goes 30 days after it was read, any
/// one 90 days after it was made; unread and recent ones stay.
#[tokio::test]
async fn old_notifications_are_pruned() {
    for app in TestApp::every_store().await {
        eprintln!("store: {:?}", app.backend);
        app.coop_with_members("c1", 1, &[2]).await;
        let day = 86_400;
        pay_member_2(&app, 1).await;
        pay_member_2(&app, 2).await;
        // The first is read now.
        let (_, items, payee) = received(&app).await;
        let first = items.as_array().unwrap().iter().find(|n| n["data"]["amount"] == 1).unwrap();
        let uri = format!("/v1/notifications/{}/read", first["id"].as_str().unwrap());
        let read = app.post_as(&uri, json!({}), &payee).await;
        assert_eq!(read.status, StatusCode::OK, "{}", read.body);

        app.clock.advance_secs(31 * day);
        pay_member_2(&app, 3).await;
        assert!(app.state.notifications.prune_old().await.unwrap() >= 1);
        assert_eq!(received(&app).await.0, ["2", "3"], "the read one went after 30 days; the unread one stays");

        app.clock.advance_secs(60 * day);
        app.state.notifications.prune_old().await.unwrap();
        assert_eq!(received(&app).await.0, ["3"], "any one goes after 90 days");
    }
}
