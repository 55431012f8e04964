//! Compute over HTTP: validation, the built-in executor, the executor protocol with a real key,
//! cancellation and claim timeouts on the manual clock.

use axum::http::StatusCode;
use ed25519_dalek::Signer;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::support::{TestApp, did_of, key};

/// The CCL contract the test suites share (`tests/fixtures/kitchen.ccl.json`), as compact JSON.
fn contract() -> String {
    let contract: serde_json::Value =
        serde_json::from_str(include_str!("../../../../tests/fixtures/kitchen.ccl.json")).expect("fixture is JSON");
    contract.to_string()
}

fn task(hours: &str) -> Value {
    json!({ "code_type": "ccl", "code": contract(), "inputs": { "hours": hours }, "fuel_limit": 1000, "priority": "normal" })
}

#[tokio::test]
async fn submissions_are_validated_field_by_field() {
    let app = TestApp::new().await;
    let (_, m) = app.coop_with_members("c1", 1, &[2]).await;
    let mut wrong_type = task("1");
    wrong_type["code_type"] = json!("wasm");
    let r = app.post_as("/v1/compute/submit", wrong_type, &m[0]).await;
    assert!(r.body["details"]["fields"]["code_type"].is_array(), "{}", r.body);
    let mut source = task("1");
    source["code"] = json!("contract Kitchen { rule log(h) { total = total + h } }");
    let r = app.post_as("/compute/tasks", source, &m[0]).await;
    r.assert_error(400, "BAD_REQUEST");
    assert!(r.body["details"]["fields"]["code"].is_array(), "{}", r.body);
    let mut bad_rule = task("1");
    bad_rule["code"] = json!(contract().replace("\"params\":[\"hours\"]", "\"params\":[7]"));
    let r = app.post_as("/v1/compute/submit", bad_rule, &m[0]).await;
    assert!(
        r.body["details"]["fields"].as_object().unwrap().keys().any(|k| k.starts_with("code.rules[0].params")),
        "{}",
        r.body
    );
    let mut fuel = task("1");
    fuel["fuel_limit"] = json!(10_000_001);
    assert!(app.post_as("/v1/compute/submit", fuel, &m[0]).await.body["details"]["fields"]["fuel_limit"].is_array());
    let mut number_input = task("1");
    number_input["inputs"] = json!({ "hours": 5 });
    assert!(
        app.post_as("/v1/compute/submit", number_input, &m[0]).await.body["details"]["fields"]["inputs.hours"]
            .is_array()
    );
}

#[tokio::test]
async fn the_builtin_executor_completes_tasks_and_notifies() {
    let app = TestApp::new().await;
    let (_, m) = app.coop_with_members("c1", 1, &[2]).await;
    let submitted = app.post_as("/v1/compute/submit", task("5"), &m[0]).await;
    assert_eq!(submitted.status, StatusCode::CREATED, "{}", submitted.body);
    assert_eq!(submitted.body["status"], "pending");
    assert_eq!(submitted.body["task_hash"].as_str().unwrap().len(), 64);
    let failing = app.post_as("/compute/tasks", task("0"), &m[0]).await;
    assert!(app.state.compute.run_one_builtin().await.unwrap());
    assert!(app.state.compute.run_one_builtin().await.unwrap());
    assert!(!app.state.compute.run_one_builtin().await.unwrap(), "nothing left");
    let id = submitted.body["task_id"].as_str().unwrap();
    let done = app.get(&format!("/v1/compute/tasks/{id}"), &m[0]).await;
    assert_eq!(done.body["status"], "completed");
    assert_eq!(done.body["executor"], "builtin");
    assert_eq!(done.body["result"]["outcome"], "success");
    assert_eq!(done.body["result"]["output"], json!({ "value": 10, "state": { "total": 10 } }));
    let failed = app.get(&format!("/compute/tasks/{}", failing.body["task_id"].as_str().unwrap()), &m[0]).await;
    assert_eq!(failed.body["status"], "failed");
    assert_eq!(failed.body["result"]["outcome"], "failed");
    let inbox = app.get("/notifications?unread_only=true", &m[0]).await;
    assert_eq!(inbox.body["notifications"][0]["kind"], "task_finished");
    let completed = app.get("/v1/compute/tasks?status=completed", &m[0]).await;
    assert_eq!(completed.body["pagination"]["total"], 1);
}

#[tokio::test]
async fn the_executor_protocol_checks_signatures() {
    let app = TestApp::new().await;
    let (_, m) = app.coop_with_members("c1", 1, &[2, 3]).await;
    let submitted = app.post_as("/v1/compute/submit", task("3"), &m[0]).await;
    let id = submitted.body["task_id"].as_str().unwrap().to_owned();
    let task_hash = submitted.body["task_hash"].as_str().unwrap().to_owned();
    let executor = app.token(3, "c1", &["compute:execute"]).await;
    let claimed = app.post_as(&format!("/v1/compute/tasks/{id}/claim"), json!({}), &executor).await;
    assert_eq!(claimed.body["status"], "claimed", "{}", claimed.body);
    assert_eq!(claimed.body["executor"], did_of(3));
    assert!(claimed.body["code"].is_string());
    let running = app.get("/v1/compute/tasks?status=running", &m[0]).await;
    assert_eq!(running.body["pagination"]["total"], 1, "running matches claimed");
    app.post_as(&format!("/v1/compute/tasks/{id}/claim"), json!({}), &executor).await.assert_error(409, "CONFLICT");

    let output = json!({ "value": 6 });
    let mut message = hex::decode(&task_hash).unwrap();
    message.extend_from_slice(&Sha256::digest(br#"{"value":6}"#));
    let good = hex::encode(key(3).0.sign(&message).to_bytes());
    let forged = hex::encode(key(9).0.sign(&message).to_bytes());
    let bad = app
        .post_as(
            &format!("/v1/compute/tasks/{id}/complete"),
            json!({ "output": output, "fuel_used": 10, "signature": forged }),
            &executor,
        )
        .await;
    bad.assert_error(400, "BAD_REQUEST");
    assert!(bad.body["details"]["fields"]["signature"].is_array());
    let other = app.token(2, "c1", &["compute:execute"]).await;
    let stolen = app
        .post_as(
            &format!("/v1/compute/tasks/{id}/complete"),
            json!({ "output": output, "fuel_used": 10, "signature": good }),
            &other,
        )
        .await;
    stolen.assert_error(403, "AUTHORIZATION_FAILED");
    let done = app
        .post_as(
            &format!("/v1/compute/tasks/{id}/complete"),
            json!({ "output": output, "fuel_used": 10, "signature": good }),
            &executor,
        )
        .await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    assert_eq!(done.body["status"], "completed");
    assert_eq!(
        done.body["result"],
        json!({ "outcome": "success", "output": { "value": 6 }, "error": null, "fuel_used": 10 })
    );
    let submit_only = app.token(2, "c1", &["compute:submit"]).await;
    let submitter_only = app.post_as(&format!("/v1/compute/tasks/{id}/claim"), json!({}), &submit_only).await;
    assert_eq!(submitter_only.body["details"]["required_scopes"], json!(["compute:execute"]));
}

#[tokio::test]
async fn claims_time_out_once_then_fail_and_cancel_is_the_submitters() {
    let app = TestApp::new().await;
    let (_, m) = app.coop_with_members("c1", 1, &[2, 3]).await;
    let executor = app.token(3, "c1", &["compute:execute"]).await;
    let id = app.post_as("/v1/compute/submit", task("1"), &m[0]).await.body["task_id"].as_str().unwrap().to_owned();
    app.post_as(&format!("/v1/compute/tasks/{id}/claim"), json!({}), &executor).await;
    app.clock.advance_secs(59);
    app.state.compute.expire_claims().await.unwrap();
    assert_eq!(app.get(&format!("/v1/compute/tasks/{id}"), &m[0]).await.body["status"], "claimed");
    app.clock.advance_secs(1);
    app.state.compute.expire_claims().await.unwrap();
    assert_eq!(
        app.get(&format!("/v1/compute/tasks/{id}"), &m[0]).await.body["status"],
        "pending",
        "back to pending once"
    );
    app.post_as(&format!("/v1/compute/tasks/{id}/claim"), json!({}), &executor).await;
    app.clock.advance_secs(60);
    app.state.compute.expire_claims().await.unwrap();
    let timed_out = app.get(&format!("/v1/compute/tasks/{id}"), &m[0]).await;
    assert_eq!(timed_out.body["status"], "timed_out");
    assert_eq!(timed_out.body["result"]["outcome"], "timeout");

    let other = app.post_as("/v1/compute/submit", task("1"), &m[0]).await.body["task_id"].as_str().unwrap().to_owned();
    let admin_submitter = app.token(1, "c1", &["compute:submit"]).await;
    app.post_as(&format!("/v1/compute/tasks/{other}/cancel"), json!({}), &admin_submitter)
        .await
        .assert_error(403, "AUTHORIZATION_FAILED");
    let cancelled = app.post_as(&format!("/compute/tasks/{other}/cancel"), json!({}), &m[0]).await;
    assert_eq!(cancelled.body["status"], "cancelled");
    app.post_as(&format!("/v1/compute/tasks/{other}/cancel"), json!({}), &m[0]).await.assert_error(409, "CONFLICT");
}

#[tokio::test]
async fn low_trust_cannot_submit() {
    let app = TestApp::build(true, gateway_http::CorsMode::Development, 0.29, vec![]).await;
    let (_, m) = app.coop_with_members("c1", 1, &[2]).await;
    let r = app.post_as("/v1/compute/submit", task("1"), &m[0]).await;
    r.assert_error(403, "INSUFFICIENT_TRUST");
    assert_eq!(r.body["details"]["required"], 0.3);
}
