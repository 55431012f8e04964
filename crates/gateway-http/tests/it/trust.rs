//! Trust edges and scores over HTTP, and the trust gates they drive.

use axum::http::{Method, StatusCode};
use serde_json::json;

use crate::support::{ALL_SCOPES, TestApp, did_of, key};

#[tokio::test]
async fn edges_set_replace_revoke_and_scores_follow() {
    let anchor = key(1).1;
    let app = TestApp::build(true, gateway_http::CorsMode::Development, 0.0, vec![anchor.clone()]).await;
    let t1 = app.token(1, "c1", &ALL_SCOPES).await;
    let t2 = app.token(2, "c1", &ALL_SCOPES).await;
    let score = |body: &serde_json::Value| body["score"].as_f64().unwrap();
    assert_eq!(score(&app.get(&format!("/v1/trust/{}/score", did_of(1)), &t1).await.body), 1.0);
    let created = app.post_as("/v1/trust/edges", json!({ "target_did": did_of(2), "score": 0.8 }), &t1).await;
    assert_eq!(created.status, StatusCode::CREATED);
    let replaced = app.post_as("/trust/edge", json!({ "target_did": did_of(2), "score": 0.6 }), &t1).await;
    assert_eq!(replaced.status, StatusCode::OK);
    app.post_as("/trust/edge", json!({ "target_did": did_of(3), "score": 0.5 }), &t2).await;
    let s3 = app.get(&format!("/trust/score/{}", did_of(3)), &t2).await;
    assert!((score(&s3.body) - 0.3).abs() < 1e-9, "0.6 × 0.5: {}", s3.body);
    assert_eq!(s3.body["class"], "Known");
    let edges = app.get(&format!("/v1/trust/{}/edges", did_of(2)), &t1).await;
    assert_eq!(edges.body["incoming"][0]["source_did"], did_of(1));
    assert_eq!(edges.body["outgoing"][0]["target_did"], did_of(3));
    let revoked = app.call(Method::DELETE, &format!("/v1/trust/edges/{}", did_of(2)), None, Some(&t1)).await;
    assert_eq!(revoked.status, StatusCode::NO_CONTENT);
    assert_eq!(score(&app.get(&format!("/v1/trust/{}/score", did_of(3)), &t1).await.body), 0.0);
    app.call(Method::DELETE, &format!("/v1/trust/edges/{}", did_of(2)), None, Some(&t1))
        .await
        .assert_error(404, "NOT_FOUND");
    app.post_as("/trust/edge", json!({ "target_did": did_of(1), "score": 1.5 }), &t2)
        .await
        .assert_error(400, "BAD_REQUEST");
    app.post_as("/trust/edge", json!({ "target_did": did_of(2), "score": 0.5 }), &t2)
        .await
        .assert_error(400, "BAD_REQUEST");
}

#[tokio::test]
async fn high_value_payments_need_trust() {
    let app = TestApp::build(true, gateway_http::CorsMode::Development, 0.2, vec![]).await;
    let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3]).await;
    let small = app
        .post_as(
            "/v1/ledger/c1/payment",
            json!({ "from": did_of(2), "to": did_of(3), "amount": 999.999999 }),
            &tokens[0],
        )
        .await;
    assert_eq!(small.status, StatusCode::CREATED, "{}", small.body);
    let big = app
        .post_as("/v1/ledger/c1/payment", json!({ "from": did_of(3), "to": did_of(2), "amount": 1000 }), &tokens[1])
        .await;
    big.assert_error(403, "INSUFFICIENT_TRUST");
    assert_eq!(big.body["details"], json!({ "required": 0.5, "actual": 0.2 }));
}
