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
    assert_eq!(edges.body["edges"][0]["target_did"], did_of(3));
    assert_eq!(edges.body["edges"][0]["direction"], "outgoing");
    assert_eq!(edges.body["edges"][1]["source_did"], did_of(1));
    assert_eq!(edges.body["edges"][1]["direction"], "incoming");
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

/// With a default above zero, a weak path from an anchor cannot lower a DID's score below it.
#[tokio::test]
async fn an_edge_never_pushes_a_score_below_the_default() {
    for app in TestApp::every_store_with(false, 0.4, vec![key(1).1]).await {
        let (anchor, members) = app.coop_with_members("c1", 1, &[2, 3]).await;
        let score = |body: &serde_json::Value| body["score"].as_f64().unwrap();
        let weak = app.post_as("/v1/trust/edges", json!({ "target_did": did_of(2), "score": 0.2 }), &anchor).await;
        assert_eq!(weak.status, StatusCode::CREATED, "{}", weak.body);
        app.post_as("/v1/trust/edges", json!({ "target_did": did_of(3), "score": 0.9 }), &members[0]).await;
        let two = app.get(&format!("/v1/trust/{}/score", did_of(2)), &anchor).await;
        assert_eq!(two.body, json!({ "did": did_of(2), "score": 0.4, "class": "Partner" }), "{:?}", app.backend);
        assert_eq!(score(&app.get(&format!("/v1/trust/{}/score", did_of(3)), &anchor).await.body), 0.4, "0.2 × 0.9");
        assert_eq!(score(&app.get(&format!("/v1/trust/{}/score", did_of(9)), &anchor).await.body), 0.4, "no path");
        // A strong path still raises a score above the default.
        app.post_as("/v1/trust/edges", json!({ "target_did": did_of(2), "score": 0.9 }), &anchor).await;
        let three = score(&app.get(&format!("/v1/trust/{}/score", did_of(3)), &anchor).await.body);
        assert!((three - 0.81).abs() < 1e-9, "{three}");
    }
}

/// `GET /v1/trust/{did}/edges` is a list answer: outgoing edges first, then incoming, each
/// with its direction, paged by `limit` and `offset`.
#[tokio::test]
async fn edges_are_a_paginated_list_outgoing_first() {
    for app in TestApp::every_store().await {
        let (admin, members) = app.coop_with_members("c1", 1, &[2, 3, 4]).await;
        let set = |token: &str, target: u8, score: f64| {
            let body = json!({ "target_did": did_of(target), "score": score });
            let token = token.to_owned();
            let app = &app;
            async move { assert!(app.post_as("/v1/trust/edges", body, &token).await.status.is_success()) }
        };
        // Seed 2 trusts 3 and 4, and is trusted by 1 and 3.
        set(&members[0], 3, 0.5).await;
        set(&members[0], 4, 0.6).await;
        set(&admin, 2, 0.7).await;
        set(&members[1], 2, 0.8).await;
        let mut outgoing = [(did_of(2), did_of(3), 0.5), (did_of(2), did_of(4), 0.6)];
        outgoing.sort_by(|a, b| a.1.cmp(&b.1));
        let mut incoming = [(did_of(1), did_of(2), 0.7), (did_of(3), did_of(2), 0.8)];
        incoming.sort_by(|a, b| a.0.cmp(&b.0));
        let expected: Vec<serde_json::Value> = outgoing
            .iter()
            .map(|e| (e, "outgoing"))
            .chain(incoming.iter().map(|e| (e, "incoming")))
            .map(|((source, target, score), direction)| {
                json!({ "source_did": source, "target_did": target, "score": score, "updated_at": crate::support::START, "direction": direction })
            })
            .collect();

        let all = app.get(&format!("/v1/trust/{}/edges", did_of(2)), &admin).await;
        assert_eq!(all.status, StatusCode::OK, "{}", all.body);
        assert_eq!(
            all.body,
            json!({ "edges": expected, "pagination": { "limit": 50, "offset": 0, "total": 4, "has_more": false } }),
            "{:?}",
            app.backend
        );
        let page = app.get(&format!("/v1/trust/{}/edges?limit=2&offset=1", did_of(2)), &admin).await;
        assert_eq!(
            page.body,
            json!({ "edges": expected[1..3], "pagination": { "limit": 2, "offset": 1, "total": 4, "has_more": true } })
        );
        let past = app.get(&format!("/v1/trust/{}/edges?offset=10", did_of(2)), &admin).await;
        assert_eq!(past.body["edges"], json!([]));
        assert_eq!(past.body["pagination"]["total"], 4);
    }
}

/// Every list route refuses a `limit` or `offset` that is not a non-negative integer with 400
/// naming the parameter.
#[tokio::test]
async fn list_routes_refuse_invalid_limit_and_offset() {
    for app in TestApp::every_store().await {
        let (admin, _) = app.coop_with_members("c1", 1, &[2]).await;
        let routes = [
            "/v1/coops".to_owned(),
            "/coops".to_owned(),
            "/v1/coops/c1/members".to_owned(),
            "/v1/ledger/c1/history".to_owned(),
            "/v1/notifications".to_owned(),
            "/notifications".to_owned(),
            "/v1/compute/tasks".to_owned(),
            "/compute/tasks".to_owned(),
            "/v1/gov/proposals".to_owned(),
            format!("/v1/trust/{}/edges", did_of(2)),
        ];
        let bad = [
            ("limit", "abc"),
            ("limit", "-1"),
            ("limit", "1.5"),
            ("limit", "0"),
            ("limit", ""),
            ("offset", "x"),
            ("offset", "-5"),
            ("offset", "99999999999999999999999"),
            ("offset", "9223372036854775808"),
        ];
        for route in &routes {
            let ok = app.get(&format!("{route}?limit=1&offset=0"), &admin).await;
            assert_eq!(ok.status, StatusCode::OK, "{route}: {}", ok.body);
            for (name, value) in bad {
                let uri = format!("{route}?{name}={value}");
                let refused = app.get(&uri, &admin).await;
                refused.assert_error(400, "BAD_REQUEST");
                let fields =
                    refused.body["details"]["fields"].as_object().unwrap_or_else(|| panic!("{uri}: {}", refused.body));
                assert_eq!(fields.keys().collect::<Vec<_>>(), [name], "{uri}: {}", refused.body);
                assert!(fields[name][0].as_str().is_some_and(|m| !m.is_empty()), "{uri}");
            }
        }
    }
}
