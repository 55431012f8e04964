//! `Idempotency-Key` under concurrency, atomic batches, velocity and refusals, and velocity
//! across restarts, on every store.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use gateway_core::CoopId;
use gateway_domain::ports::EventReads;
use serde_json::{Value, json};

use crate::support::{Backend, Response, TestApp, did_of};

fn pay(from: u8, to: u8, amount: Value) -> Value {
    json!({ "from": did_of(from), "to": did_of(to), "amount": amount, "currency": "hours" })
}

fn keyed(uri: &str, token: &str, key: Option<&str>, body: &Value) -> Request<Body> {
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(uri)
        .header(header::AUTHORIZATION, format!("Bearer {token}"))
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    request.body(Body::from(body.to_string())).unwrap()
}

async fn pay_keyed(app: &TestApp, token: &str, key: &str, body: &Value) -> Response {
    app.send(keyed("/v1/ledger/c1/payment", token, Some(key), body)).await
}

async fn batch(app: &TestApp, token: &str, key: Option<&str>, body: &Value) -> Response {
    app.send(keyed("/v1/ledger/c1/payments/batch", token, key, body)).await
}

async fn balance(app: &TestApp, token: &str, seed: u8) -> Value {
    app.get(&format!("/v1/ledger/c1/balance/{}", did_of(seed)), token).await.body["balance"].clone()
}

async fn history_total(app: &TestApp, token: &str) -> u64 {
    app.get("/v1/ledger/c1/history", token).await.body["pagination"]["total"].as_u64().unwrap()
}

async fn payment_events(app: &TestApp) -> usize {
    let coop = CoopId::parse("c1").unwrap();
    let events = app.store.events_after(&coop, 0, 10_000).await.unwrap();
    events.iter().filter(|e| e.event_type == "PaymentCreated").count()
}

fn replayed(r: &Response) -> bool {
    r.headers.get("idempotent-replayed").is_some_and(|v| v == "true")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_requests_with_one_key_make_one_payment() {
    for app in TestApp::every_store().await {
        let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3]).await;
        let body = pay(2, 3, json!(5));
        // Warm the store's connection pool, so the eight requests really run at once.
        futures_util::future::join_all((0..16).map(|_| app.get("/v1/ledger/c1/history", &tokens[0]))).await;
        let answers = futures_util::future::join_all((0..8).map(|_| pay_keyed(&app, &tokens[0], "once", &body))).await;
        let first: Vec<&Response> = answers.iter().filter(|r| !replayed(r)).collect();
        assert_eq!(first.len(), 1, "{:?}: exactly one request executes", app.backend);
        assert_eq!(first[0].status, StatusCode::CREATED, "{}", first[0].body);
        for answer in &answers {
            if answer.status == StatusCode::CONFLICT && !replayed(answer) {
                continue; // 409 while the first is in flight is allowed
            }
            assert_eq!(answer.status, StatusCode::CREATED, "{:?}", app.backend);
            assert_eq!(answer.body, first[0].body, "{:?}: a replay equals the first answer", app.backend);
        }
        assert_eq!(balance(&app, &tokens[0], 2).await, json!(-5), "{:?}", app.backend);
        assert_eq!(balance(&app, &tokens[0], 3).await, json!(5), "{:?}", app.backend);
        assert_eq!(history_total(&app, &tokens[0]).await, 1, "{:?}", app.backend);
        assert_eq!(payment_events(&app).await, 1, "{:?}", app.backend);
        // And again, once the first has committed.
        let again = pay_keyed(&app, &tokens[0], "once", &body).await;
        assert_eq!((again.status, &again.body), (first[0].status, &first[0].body));
        assert!(replayed(&again));
    }
}

#[tokio::test]
async fn refused_atomic_batch_leaves_no_trace_with_or_without_a_key() {
    for app in TestApp::every_store().await {
        let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3, 4]).await;
        let items = json!({ "atomic": true, "payments": [
            { "from": did_of(2), "to": did_of(3), "amount": 10, "currency": "hours" },
            { "from": did_of(2), "to": did_of(4), "amount": 5, "currency": "hours" },
            { "from": did_of(2), "to": did_of(4), "amount": 2000, "currency": "hours" },
        ]});
        for key in [Some("atomic-1"), None, Some("atomic-2")] {
            let refused = batch(&app, &tokens[0], key, &items).await;
            refused.assert_error(409, "CONFLICT");
            assert!(refused.body["error"].as_str().unwrap().contains("payments[2]"), "{}", refused.body);
            assert!(!replayed(&refused));
            assert_eq!(balance(&app, &tokens[0], 2).await, json!(0), "{:?} {key:?}", app.backend);
            assert_eq!(balance(&app, &tokens[0], 3).await, json!(0), "{:?} {key:?}", app.backend);
            assert_eq!(history_total(&app, &tokens[0]).await, 0, "{:?} {key:?}", app.backend);
            assert_eq!(payment_events(&app).await, 0, "{:?} {key:?}", app.backend);
        }
        // The refusal is the ledger's decision: stored and replayed as it was.
        let first = batch(&app, &tokens[0], Some("atomic-1"), &items).await;
        first.assert_error(409, "CONFLICT");
        assert!(replayed(&first));
        assert_eq!(history_total(&app, &tokens[0]).await, 0);
        // A corrected batch under a new key pays exactly once.
        let fixed = json!({ "atomic": true, "payments": [
            { "from": did_of(2), "to": did_of(3), "amount": 10, "currency": "hours" },
            { "from": did_of(2), "to": did_of(4), "amount": 5, "currency": "hours" },
        ]});
        let paid = batch(&app, &tokens[0], Some("atomic-3"), &fixed).await;
        assert_eq!(paid.status, StatusCode::OK, "{}", paid.body);
        assert_eq!(paid.body["succeeded"], 2);
        assert_eq!(balance(&app, &tokens[0], 2).await, json!(-15), "{:?}", app.backend);
        assert_eq!(history_total(&app, &tokens[0]).await, 2);
        assert_eq!(payment_events(&app).await, 2);
    }
}

#[tokio::test]
async fn replay_is_never_refused_by_velocity() {
    // Trust 0.05: Isolated, 10 payments per hour.
    for app in TestApp::every_store_with(false, 0.05, vec![]).await {
        let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3]).await;
        let mut last = None;
        for n in 0..10 {
            app.limiter_clock.advance(Duration::from_secs(7));
            let r = pay_keyed(&app, &tokens[0], &format!("v{n}"), &pay(2, 3, json!(1))).await;
            assert_eq!(r.status, StatusCode::CREATED, "payment {n}: {}", r.body);
            last = Some(r);
        }
        let last = last.unwrap();
        app.limiter_clock.advance(Duration::from_secs(7));
        let retry = pay_keyed(&app, &tokens[0], "v9", &pay(2, 3, json!(1))).await;
        assert_eq!((retry.status, &retry.body), (last.status, &last.body), "{:?}", app.backend);
        assert!(replayed(&retry));
        // The same key with another body is still a conflict, not a velocity refusal.
        app.limiter_clock.advance(Duration::from_secs(7));
        pay_keyed(&app, &tokens[0], "v9", &pay(2, 3, json!(2))).await.assert_error(409, "CONFLICT");
        // A new payment is refused: the replays did not count, the quota is 10.
        app.limiter_clock.advance(Duration::from_secs(7));
        let refused = pay_keyed(&app, &tokens[0], "v10", &pay(2, 3, json!(1))).await;
        refused.assert_error(429, "RATE_LIMIT_EXCEEDED");
        assert_eq!(refused.body["details"]["count"], 10);
        assert_eq!(history_total(&app, &tokens[0]).await, 10);
        assert_eq!(payment_events(&app).await, 10);
    }
}

#[tokio::test]
async fn refusals_before_the_ledger_decides_store_nothing() {
    for app in TestApp::every_store().await {
        let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3]).await;
        // 400 from the domain (payer = payee), then the corrected request under the same key.
        let own = pay_keyed(&app, &tokens[0], "k", &pay(2, 2, json!(5))).await;
        own.assert_error(400, "BAD_REQUEST");
        let again = pay_keyed(&app, &tokens[0], "k", &pay(2, 2, json!(5))).await;
        again.assert_error(400, "BAD_REQUEST");
        assert!(!replayed(&again), "a 400 is not stored");
        // 400 for a payee who is not a member, and 400 from parsing.
        pay_keyed(&app, &tokens[0], "k", &pay(2, 9, json!(5))).await.assert_error(400, "BAD_REQUEST");
        pay_keyed(&app, &tokens[0], "k", &pay(2, 3, json!(0))).await.assert_error(400, "BAD_REQUEST");
        // 403: another payer's account.
        pay_keyed(&app, &tokens[0], "k", &pay(3, 2, json!(5))).await.assert_error(403, "AUTHORIZATION_FAILED");
        let fixed = pay_keyed(&app, &tokens[0], "k", &pay(2, 3, json!(5))).await;
        assert_eq!(fixed.status, StatusCode::CREATED, "{:?}: the key is free again: {}", app.backend, fixed.body);
        assert!(!replayed(&fixed));
        assert_eq!(balance(&app, &tokens[0], 2).await, json!(-5));
        // A 409 refusal is the ledger's decision: stored, replayed, and the key stays taken.
        let poor = pay_keyed(&app, &tokens[0], "k2", &pay(2, 3, json!(5000))).await;
        poor.assert_error(409, "INSUFFICIENT_CREDIT");
        let replay = pay_keyed(&app, &tokens[0], "k2", &pay(2, 3, json!(5000))).await;
        assert_eq!((replay.status, &replay.body), (poor.status, &poor.body));
        assert!(replayed(&replay));
        pay_keyed(&app, &tokens[0], "k2", &pay(2, 3, json!(1))).await.assert_error(409, "CONFLICT");
        assert_eq!(history_total(&app, &tokens[0]).await, 1);
        assert_eq!(payment_events(&app).await, 1);
    }
}

#[tokio::test]
async fn velocity_counts_survive_a_restart() {
    // Trust 0.05: Isolated, 10 payments per hour. Durable stores only.
    for app in TestApp::every_store_with(false, 0.05, vec![]).await {
        if app.backend == Backend::Memory {
            continue;
        }
        let backend = app.backend;
        let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3]).await;
        for n in 0..10 {
            app.limiter_clock.advance(Duration::from_secs(7));
            let r = app.post_as("/v1/ledger/c1/payment", pay(2, 3, json!(1)), &tokens[0]).await;
            assert_eq!(r.status, StatusCode::CREATED, "payment {n}: {}", r.body);
        }
        app.clock.advance_secs(600);
        let app = app.restart().await;
        let refused = app.post_as("/v1/ledger/c1/payment", pay(2, 3, json!(1)), &tokens[0]).await;
        refused.assert_error(429, "RATE_LIMIT_EXCEEDED");
        assert_eq!(refused.body["details"]["layer"], "velocity", "{backend:?}");
        assert_eq!(refused.body["details"]["count"], 10, "{backend:?}");
        // Another payer is not affected.
        let other = app.post_as("/v1/ledger/c1/payment", pay(3, 2, json!(1)), &tokens[1]).await;
        assert_eq!(other.status, StatusCode::CREATED, "{}", other.body);
        // The restored payments leave the window an hour after they were made.
        app.limiter_clock.advance(Duration::from_secs(3000 - 1));
        app.post_as("/v1/ledger/c1/payment", pay(2, 3, json!(1)), &tokens[0])
            .await
            .assert_error(429, "RATE_LIMIT_EXCEEDED");
        app.limiter_clock.advance(Duration::from_secs(1));
        app.clock.advance_secs(3000);
        let later = app.post_as("/v1/ledger/c1/payment", pay(2, 3, json!(1)), &tokens[0]).await;
        assert_eq!(later.status, StatusCode::CREATED, "{backend:?}: {}", later.body);
    }
}

/// A key's decided answer is stored as the ledger's result and replayed as itself, a success and
/// a refusal alike; an answer an earlier gateway stored as HTTP (status 100–599) is replayed
/// verbatim until it expires. Neither replay moves money.
#[tokio::test]
async fn stored_results_and_earlier_http_answers_replay_as_they_were() {
    use gateway_core::Clock;
    use gateway_domain::ports::{IdempotencyRecord, transaction};
    use sha2::{Digest, Sha256};

    for app in TestApp::every_store().await {
        let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3]).await;
        // A refusal the ledger decides (beyond the credit floor) is stored under its key.
        let too_much = pay(2, 3, json!(1_000_000));
        let first = pay_keyed(&app, &tokens[0], "refused", &too_much).await;
        first.assert_error(409, "INSUFFICIENT_CREDIT");
        assert!(!replayed(&first));
        let again = pay_keyed(&app, &tokens[0], "refused", &too_much).await;
        assert!(replayed(&again));
        assert_eq!((again.status, &again.body), (first.status, &first.body));

        // An answer stored as HTTP by an earlier gateway: replayed byte for byte.
        let body = pay(2, 3, json!(7));
        let (path, text) = ("/v1/ledger/c1/payment", body.to_string());
        let mut hash = Sha256::new();
        hash.update(format!("POST {path}\n{text}").as_bytes());
        let record = IdempotencyRecord {
            key: format!("c1\u{1f}{}\u{1f}legacy", did_of(2)),
            request_hash: hex::encode(hash.finalize()),
            status: 201,
            body: r#"{"id":"from-an-earlier-gateway","amount":7}"#.to_owned(),
            created_at: app.clock.now_unix_secs(),
            event_seq: None,
        };
        transaction(app.store.as_ref(), move |tx| Box::pin(async move { tx.idempotency_put(&record).await }))
            .await
            .unwrap();
        let legacy = pay_keyed(&app, &tokens[0], "legacy", &body).await;
        assert_eq!(legacy.status, 201);
        assert!(replayed(&legacy), "{:?}: {}", app.backend, legacy.body);
        assert_eq!(legacy.body, json!({"id": "from-an-earlier-gateway", "amount": 7}));
        assert_eq!(history_total(&app, &tokens[0]).await, 0, "no replay moves money");
        assert_eq!(balance(&app, &tokens[0], 2).await, json!(0));
    }
}

/// The same request sent again with its JSON members in another order and other whitespace is
/// the same request: its stored answer is replayed. Another amount is another request: 409.
#[tokio::test]
async fn a_key_replays_the_same_json_in_any_order_or_spacing() {
    for app in TestApp::every_store().await {
        let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3]).await;
        let raw = |text: String| {
            Request::builder()
                .method(Method::POST)
                .uri("/v1/ledger/c1/payment")
                .header(header::AUTHORIZATION, format!("Bearer {}", tokens[0]))
                .header(header::CONTENT_TYPE, "application/json")
                .header("idempotency-key", "reordered")
                .body(Body::from(text))
                .unwrap()
        };
        let (from, to) = (did_of(2), did_of(3));
        let first = app.send(raw(format!(r#"{{"from":"{from}","to":"{to}","amount":2.5,"currency":"hours"}}"#))).await;
        assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
        let again = app
            .send(raw(format!(
                "{{\n  \"currency\": \"hours\",\n  \"amount\": 2.5,\n  \"to\": \"{to}\",\n  \"from\": \"{from}\"\n}}"
            )))
            .await;
        assert_eq!((again.status, &again.body), (first.status, &first.body), "{:?}", app.backend);
        assert!(replayed(&again));
        let other = app.send(raw(format!(r#"{{"currency":"hours","amount":2.6,"to":"{to}","from":"{from}"}}"#))).await;
        other.assert_error(409, "CONFLICT");
        assert_eq!(history_total(&app, &tokens[0]).await, 1);
    }
}

/// A payment or batch sent again under its key after the answer was lost gets the first answer
/// with the same `ICN-Event-Seq`, so the client can still ask for its proof (INTERFACE.md §12); a
/// stored refusal appended nothing and carries none, first time or replayed.
#[tokio::test]
async fn a_replay_carries_the_first_answers_event_seq() {
    fn seq(r: &Response) -> Option<u64> {
        r.headers.get("icn-event-seq").map(|v| v.to_str().unwrap().parse().unwrap())
    }
    for app in TestApp::every_store().await {
        let (_, tokens) = app.coop_with_members("c1", 1, &[2, 3]).await;
        let body = pay(2, 3, json!(1.5));
        let first = pay_keyed(&app, &tokens[0], "lost", &body).await;
        assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
        let first_seq = seq(&first).expect("the payment appended an event");
        // Another payment moves the coop's head past it: the replay names the first, not the last.
        let later = pay_keyed(&app, &tokens[0], "other", &pay(2, 3, json!(1))).await;
        assert!(seq(&later) > Some(first_seq));
        let again = pay_keyed(&app, &tokens[0], "lost", &body).await;
        assert!(replayed(&again), "{:?}", app.backend);
        assert_eq!(seq(&again), Some(first_seq), "{:?}", app.backend);

        let items = json!({ "payments": [pay(2, 3, json!(1)), pay(2, 3, json!(2))] });
        let first = batch(&app, &tokens[0], Some("batch"), &items).await;
        assert_eq!(first.status, StatusCode::OK, "{}", first.body);
        let again = batch(&app, &tokens[0], Some("batch"), &items).await;
        assert!(replayed(&again));
        assert_eq!(seq(&again), seq(&first), "{:?}", app.backend);
        assert!(seq(&first) > seq(&later), "the batch's last event");

        let too_much = pay(2, 3, json!(1_000_000));
        let refused = pay_keyed(&app, &tokens[0], "refused", &too_much).await;
        refused.assert_error(409, "INSUFFICIENT_CREDIT");
        let again = pay_keyed(&app, &tokens[0], "refused", &too_much).await;
        assert!(replayed(&again));
        assert_eq!((seq(&refused), seq(&again)), (None, None));
    }
}
