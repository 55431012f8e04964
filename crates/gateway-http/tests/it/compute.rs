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
    let message = v2_message(&task_hash, br#"{"value":6}"#, "success", 10, None);
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

/// The completion message of docs/COMPUTE.md, built here by hand from its description (not
/// with the gateway's function) so that the two cannot drift apart unnoticed.
fn v2_message(task_hash: &str, output_jcs: &[u8], outcome: &str, fuel_used: u64, error: Option<&str>) -> Vec<u8> {
    let output = hex::encode(Sha256::digest(output_jcs));
    let error = error.map_or("none".to_owned(), |e| hex::encode(Sha256::digest(e.as_bytes())));
    format!(
        "icn-compute-completion/v2\ntask_hash={task_hash}\noutput={output}\noutcome={outcome}\nfuel_used={fuel_used}\nerror={error}\n"
    )
    .into_bytes()
}

fn completion(seed: u8, task_hash: &str, output: &Value) -> Value {
    // One key: the compact JSON is its JCS form.
    let message = v2_message(task_hash, &serde_json::to_vec(output).unwrap(), "success", 5, None);
    json!({ "output": output, "fuel_used": 5, "signature": hex::encode(key(seed).0.sign(&message).to_bytes()) })
}

/// A recorder counting `icn_compute_signatures_invalid_total`, installed for this thread only.
#[derive(Default)]
struct InvalidSignatures(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl InvalidSignatures {
    fn count(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl metrics::Recorder for InvalidSignatures {
    fn describe_counter(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn describe_gauge(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn describe_histogram(&self, _: metrics::KeyName, _: Option<metrics::Unit>, _: metrics::SharedString) {}
    fn register_counter(&self, key: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        if key.name() == "icn_compute_signatures_invalid_total" {
            metrics::Counter::from_arc(self.0.clone())
        } else {
            metrics::Counter::noop()
        }
    }
    fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        metrics::Gauge::noop()
    }
    fn register_histogram(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Histogram {
        metrics::Histogram::noop()
    }
}

/// The completion signature covers the outcome, the fuel and the error as well as the output:
/// a signed result relabelled after signing is 400 and counted as an invalid signature; the
/// old message (task hash bytes then the output digest) is no longer accepted. The test runs on
/// one thread with a recorder of its own, so the counts are exactly this test's.
#[test]
fn a_completion_altered_after_signing_is_refused_and_counted() {
    let recorder = InvalidSignatures::default();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    metrics::with_local_recorder(&recorder, || runtime.block_on(altered_completions(&recorder)));
}

async fn altered_completions(recorder: &InvalidSignatures) {
    for app in TestApp::every_store().await {
        let backend = app.backend;
        let (_, m) = app.coop_with_members("c1", 1, &[2, 3]).await;
        let submitted = app.post_as("/v1/compute/submit", task("3"), &m[0]).await;
        let id = submitted.body["task_id"].as_str().unwrap().to_owned();
        let task_hash = submitted.body["task_hash"].as_str().unwrap().to_owned();
        let executor = app.token(3, "c1", &["compute:execute"]).await;
        let claimed = app.post_as(&format!("/v1/compute/tasks/{id}/claim"), json!({}), &executor).await;
        assert_eq!(claimed.status, StatusCode::OK, "{backend:?}: {}", claimed.body);
        let complete = format!("/v1/compute/tasks/{id}/complete");
        let output = json!({ "value": 6 });
        let signed = |message: Vec<u8>| hex::encode(key(3).0.sign(&message).to_bytes());
        // Signed as a failure with an error, after 40 fuel.
        let failure = signed(v2_message(&task_hash, br#"{"value":6}"#, "failed", 40, Some("boom")));
        let mut v1 = hex::decode(&task_hash).unwrap();
        v1.extend_from_slice(&Sha256::digest(br#"{"value":6}"#));
        let altered = [
            json!({ "output": output, "fuel_used": 40, "outcome": "success", "error": "boom", "signature": failure }),
            json!({ "output": output, "fuel_used": 1, "outcome": "failed", "error": "boom", "signature": failure }),
            json!({ "output": output, "fuel_used": 40, "outcome": "failed", "error": "fine", "signature": failure }),
            json!({ "output": output, "fuel_used": 40, "outcome": "failed", "signature": failure }),
            json!({ "output": { "value": 7 }, "fuel_used": 40, "outcome": "failed", "error": "boom", "signature": failure }),
            json!({ "output": output, "fuel_used": 40, "signature": signed(v1) }),
        ];
        for body in altered {
            let before = recorder.count();
            let refused = app.post_as(&complete, body.clone(), &executor).await;
            refused.assert_error(400, "BAD_REQUEST");
            assert!(refused.body["details"]["fields"]["signature"].is_array(), "{backend:?}: {}", refused.body);
            assert_eq!(recorder.count(), before + 1, "{backend:?}: counted once: {body}");
        }
        let honest =
            json!({ "output": output, "fuel_used": 40, "outcome": "failed", "error": "boom", "signature": failure });
        let done = app.post_as(&complete, honest, &executor).await;
        assert_eq!(done.status, StatusCode::OK, "{backend:?}: {}", done.body);
        assert_eq!(done.body["status"], "failed");
        assert_eq!(
            done.body["result"],
            json!({ "outcome": "failed", "output": { "value": 6 }, "error": "boom", "fuel_used": 40 })
        );
    }
}

/// A member with both scopes cannot execute its own task: neither claim it nor complete it,
/// even with a signature that verifies. Another executor can.
#[tokio::test]
async fn an_executor_never_claims_or_completes_its_own_task() {
    for app in TestApp::every_store().await {
        let backend = app.backend;
        let (_, _) = app.coop_with_members("c1", 1, &[2, 3]).await;
        let both = app.token(2, "c1", &["compute:submit", "compute:execute"]).await;
        let submitted = app.post_as("/v1/compute/submit", task("2"), &both).await;
        assert_eq!(submitted.status, StatusCode::CREATED, "{backend:?}: {}", submitted.body);
        let id = submitted.body["task_id"].as_str().unwrap().to_owned();
        let task_hash = submitted.body["task_hash"].as_str().unwrap().to_owned();
        let claim = app.post_as(&format!("/v1/compute/tasks/{id}/claim"), json!({}), &both).await;
        claim.assert_error(403, "AUTHORIZATION_FAILED");
        assert_eq!(claim.body["details"], json!({ "reason": "own_task" }), "{backend:?}");
        let own = completion(2, &task_hash, &json!({ "value": 4 }));
        let complete = app.post_as(&format!("/v1/compute/tasks/{id}/complete"), own.clone(), &both).await;
        complete.assert_error(403, "AUTHORIZATION_FAILED");
        assert_eq!(complete.body["details"], json!({ "reason": "own_task" }), "{backend:?}");
        let task_now = app.get(&format!("/v1/compute/tasks/{id}"), &both).await;
        assert_eq!(task_now.body["status"], "pending", "{backend:?}");
        assert!(task_now.body["executor"].is_null(), "{backend:?}");

        // Another executor claims it; the submitter still cannot complete it.
        let executor = app.token(3, "c1", &["compute:execute"]).await;
        let claimed = app.post_as(&format!("/v1/compute/tasks/{id}/claim"), json!({}), &executor).await;
        assert_eq!(claimed.status, StatusCode::OK, "{backend:?}: {}", claimed.body);
        let stolen = app.post_as(&format!("/v1/compute/tasks/{id}/complete"), own, &both).await;
        assert_eq!(stolen.body["details"], json!({ "reason": "own_task" }), "{backend:?}");
        let done = app
            .post_as(
                &format!("/v1/compute/tasks/{id}/complete"),
                completion(3, &task_hash, &json!({ "value": 4 })),
                &executor,
            )
            .await;
        assert_eq!(done.status, StatusCode::OK, "{backend:?}: {}", done.body);
    }
}

/// An executor needs trust 0.3 to claim; only the executor holding the claim may complete, and
/// anyone else is refused whatever the task's state.
#[tokio::test]
async fn claiming_needs_trust_and_only_the_claimer_completes() {
    for app in TestApp::every_store_with(false, 0.0, vec![key(1).1]).await {
        let backend = app.backend;
        let (anchor, m) = app.coop_with_members("c1", 1, &[2, 3, 4]).await;
        let trust = |target: u8, score: f64| {
            let body = json!({ "target_did": did_of(target), "score": score });
            let (app, anchor) = (&app, anchor.clone());
            async move { assert!(app.post_as("/v1/trust/edges", body, &anchor).await.status.is_success()) }
        };
        trust(2, 0.9).await;
        trust(3, 0.2).await;
        let (submitter, executor, stranger) = (&m[0], &m[1], &m[2]);
        let submitted = app.post_as("/v1/compute/submit", task("2"), submitter).await;
        assert_eq!(submitted.status, StatusCode::CREATED, "{backend:?}: {}", submitted.body);
        let id = submitted.body["task_id"].as_str().unwrap().to_owned();
        let task_hash = submitted.body["task_hash"].as_str().unwrap().to_owned();
        let claim = format!("/v1/compute/tasks/{id}/claim");
        let complete = format!("/v1/compute/tasks/{id}/complete");

        let low = app.post_as(&claim, json!({}), executor).await;
        low.assert_error(403, "INSUFFICIENT_TRUST");
        assert_eq!(low.body["details"], json!({ "required": 0.3, "actual": 0.2 }), "{backend:?}");
        let untrusted = app.post_as(&claim, json!({}), stranger).await;
        untrusted.assert_error(403, "INSUFFICIENT_TRUST");
        assert_eq!(untrusted.body["details"], json!({ "required": 0.3, "actual": 0.0 }));
        assert_eq!(app.get(&format!("/v1/compute/tasks/{id}"), submitter).await.body["status"], "pending");

        trust(3, 0.5).await;
        let claimed = app.post_as(&claim, json!({}), executor).await;
        assert_eq!(claimed.status, StatusCode::OK, "{backend:?}: {}", claimed.body);
        assert_eq!(claimed.body["executor"], did_of(3));

        // Others, each with a signature of their own that verifies: refused before anything (the
        // submitter for its own reason: it may never execute its own task).
        let output = json!({ "value": 4 });
        for (seed, token, reason) in
            [(4, stranger, "not_the_executor"), (1, &anchor, "not_the_executor"), (2, submitter, "own_task")]
        {
            let stolen = app.post_as(&complete, completion(seed, &task_hash, &output), token).await;
            stolen.assert_error(403, "AUTHORIZATION_FAILED");
            assert_eq!(stolen.body["details"], json!({ "reason": reason }), "{backend:?} seed {seed}");
        }
        let done = app.post_as(&complete, completion(3, &task_hash, &output), executor).await;
        assert_eq!(done.status, StatusCode::OK, "{backend:?}: {}", done.body);
        assert_eq!(done.body["status"], "completed");
        assert_eq!(
            done.body["result"],
            json!({ "outcome": "success", "output": output, "error": null, "fuel_used": 5 })
        );
        // Once completed: still 403 for others, 409 for the executor.
        app.post_as(&complete, completion(4, &task_hash, &output), stranger)
            .await
            .assert_error(403, "AUTHORIZATION_FAILED");
        let twice = app.post_as(&complete, completion(3, &task_hash, &output), executor).await;
        twice.assert_error(409, "CONFLICT");
    }
}

/// A cancelled task is listed under `status=cancelled` (both families); a misspelt status is
/// 400 naming the parameter.
#[tokio::test]
async fn cancelled_tasks_are_found_by_the_status_filter() {
    for app in TestApp::every_store().await {
        let backend = app.backend;
        let (_, m) = app.coop_with_members("c1", 1, &[2, 3]).await;
        let kept =
            app.post_as("/v1/compute/submit", task("1"), &m[0]).await.body["task_id"].as_str().unwrap().to_owned();
        let gone = app.post_as("/compute/tasks", task("2"), &m[0]).await.body["task_id"].as_str().unwrap().to_owned();
        let claimed =
            app.post_as("/v1/compute/submit", task("3"), &m[0]).await.body["task_id"].as_str().unwrap().to_owned();
        let cancelled = app.post_as(&format!("/v1/compute/tasks/{gone}/cancel"), json!({}), &m[0]).await;
        assert_eq!(cancelled.status, StatusCode::OK, "{backend:?}: {}", cancelled.body);
        assert_eq!(cancelled.body["status"], "cancelled");
        assert_eq!(
            cancelled.body["result"],
            json!({ "outcome": "cancelled", "output": null, "error": null, "fuel_used": 0 })
        );
        app.post_as(&format!("/v1/compute/tasks/{claimed}/claim"), json!({}), &m[1]).await;

        for uri in ["/v1/compute/tasks?status=cancelled", "/compute/tasks?status=cancelled"] {
            let listed = app.get(uri, &m[0]).await;
            assert_eq!(listed.body["pagination"]["total"], 1, "{backend:?} {uri}: {}", listed.body);
            assert_eq!(listed.body["tasks"][0]["task_id"], gone.as_str());
            assert_eq!(listed.body["tasks"][0]["status"], "cancelled");
        }
        let pending = app.get("/v1/compute/tasks?status=pending", &m[0]).await;
        assert_eq!(pending.body["tasks"][0]["task_id"], kept.as_str(), "{backend:?}: {}", pending.body);
        assert_eq!(pending.body["pagination"]["total"], 1);
        for filter in ["claimed", "running"] {
            let held = app.get(&format!("/v1/compute/tasks?status={filter}"), &m[0]).await;
            assert_eq!(held.body["tasks"][0]["task_id"], claimed.as_str(), "{backend:?} {filter}: {}", held.body);
        }
        assert_eq!(app.get("/v1/compute/tasks", &m[0]).await.body["pagination"]["total"], 3);
        let misspelt = app.get("/v1/compute/tasks?status=canceled", &m[0]).await;
        misspelt.assert_error(400, "BAD_REQUEST");
        assert!(misspelt.body["details"]["fields"]["status"].is_array(), "{}", misspelt.body);
    }
}

/// A token may name a cooperative that does not exist (open enrollment): submitting a task
/// there is 404 and stores nothing.
#[tokio::test]
async fn a_task_for_a_coop_that_does_not_exist_is_refused() {
    let app = TestApp::new().await;
    let token = app.token(1, "ghost", &["compute:submit"]).await;
    for uri in ["/v1/compute/submit", "/compute/tasks"] {
        app.post_as(uri, task("1"), &token).await.assert_error(404, "NOT_FOUND");
    }
    assert!(!app.state.compute.run_one_builtin().await.unwrap(), "no task was stored");
}
