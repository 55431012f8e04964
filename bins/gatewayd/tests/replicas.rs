//! Two `gatewayd` processes on one PostgreSQL database (runs when `GATEWAY_TEST_POSTGRES_URL` is
//! set; fails loudly if it is set and unreachable): a WebSocket client connected to replica A
//! receives, in order and without gaps, the events written through replica B; and concurrent
//! requests split across the two replicas keep the contract's concurrency rules (section 5).

mod support;

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use support::{Gateway, json_request, login, signing_key, start_on, try_request};

async fn next_frame(
    ws: &mut tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>,
) -> Value {
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(10), ws.next()).await.expect("a frame within 10 s");
        match frame.expect("stream open").expect("frame") {
            Message::Text(text) => return serde_json::from_str(text.as_str()).unwrap(),
            Message::Ping(_) | Message::Pong(_) => continue,
            other => panic!("unexpected frame {other:?}"),
        }
    }
}

/// Two gateways on a fresh schema of the test database; `None` when the variable is unset.
async fn two_replicas(name: &str) -> Option<(Gateway, Gateway)> {
    let store = gateway_store::testing::fresh_postgres_schema(name).await?;
    let flags = ["--open-enrollment", "true", "--trust-default", "0.9"];
    let a = start_on(&store, &flags, &[]);
    let b = start_on(&store, &flags, &[]);
    Some((a, b))
}

/// N payments with one Idempotency-Key and one body, split across the two replicas and released
/// together: one payment is recorded, every 201 carries its id, the others replay it or get 409
/// while it is in flight, never 5xx.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_idempotency_key_across_two_replicas_creates_one_record() {
    const N: usize = 8;
    let Some((a, b)) = two_replicas("replicas_idem").await else { return };
    let scopes = ["coop:read", "coop:write", "ledger:read", "ledger:write"];
    let token_a = login(&a.api, 1, "idem", &scopes).await;
    let token_b = login(&b.api, 1, "idem", &scopes).await;
    let (status, body) =
        json_request(&a.api, "POST", "/v1/coops", Some(json!({ "name": "I", "coop_type": "worker" })), Some(&token_a))
            .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = json_request(
        &a.api,
        "POST",
        "/v1/coops/idem/members",
        Some(json!({ "did": signing_key(2).1 })),
        Some(&token_a),
    )
    .await;
    assert_eq!(status, 201, "{body}");

    let pay = json!({ "from": signing_key(1).1, "to": signing_key(2).1, "amount": 7 });
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(N));
    let tasks: Vec<_> = (0..N)
        .map(|p| {
            let (api, token) =
                if p % 2 == 0 { (a.api.clone(), token_a.clone()) } else { (b.api.clone(), token_b.clone()) };
            let (barrier, pay) = (barrier.clone(), pay.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let auth = format!("Bearer {token}");
                let headers = [("authorization", auth.as_str()), ("idempotency-key", "one-key")];
                let answer = try_request(&api, "POST", "/v1/ledger/idem/payment", Some(pay), &headers).await;
                (p, answer.expect("the replica answers"))
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    let mut ids = std::collections::BTreeSet::new();
    let mut summary = Vec::new();
    for (p, (status, body)) in &answers {
        let replica = if p % 2 == 0 { "A" } else { "B" };
        assert!(matches!(status, 201 | 409), "p{p} on replica {replica}: {status} {body}");
        let body: Value = serde_json::from_str(body).unwrap_or(Value::Null);
        let id = body["id"].as_str().unwrap_or("-").to_owned();
        summary.push(format!("p{p}@{replica} {status} {id}"));
        if *status == 201 {
            ids.insert(id);
        }
    }
    let (status, history) = json_request(&a.api, "GET", "/v1/ledger/idem/history", None, Some(&token_a)).await;
    assert_eq!(status, 200, "{history}");
    let recorded = history["transactions"].as_array().unwrap().len();
    assert!(
        ids.len() == 1 && recorded == 1,
        "one key, one record: {recorded} transactions recorded, {} distinct ids answered: {}",
        ids.len(),
        summary.join(", ")
    );
    drop((a, b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_replica_a_sees_events_written_through_replica_b() {
    let Some((a, b)) = two_replicas("replicas").await else { return };

    let scopes = ["coop:read", "coop:write", "ledger:read", "ledger:write"];
    let admin_a = login(&a.api, 1, "rep", &scopes).await;
    let (status, body) =
        json_request(&a.api, "POST", "/v1/coops", Some(json!({ "name": "R", "coop_type": "worker" })), Some(&admin_a))
            .await;
    assert_eq!(status, 201, "{body}");
    json_request(&a.api, "POST", "/v1/coops/rep/members", Some(json!({ "did": signing_key(2).1 })), Some(&admin_a))
        .await;

    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/v1/ws/rep", a.api)).await.unwrap();
    ws.send(Message::text(json!({ "type": "Auth", "token": admin_a }).to_string())).await.unwrap();
    let ok = next_frame(&mut ws).await;
    assert_eq!(ok["type"], "AuthOk", "{ok}");
    let start = ok["current_seq"].as_u64().unwrap();

    let admin_b = login(&b.api, 1, "rep", &scopes).await;
    for n in 0..5 {
        let pay = json!({ "from": signing_key(1).1, "to": signing_key(2).1, "amount": 1 + n });
        let (status, body) = json_request(&b.api, "POST", "/v1/ledger/rep/payment", Some(pay), Some(&admin_b)).await;
        assert_eq!(status, 201, "{body}");
    }
    for n in 0..5u64 {
        let frame = next_frame(&mut ws).await;
        assert_eq!(frame["type"], "Event", "{frame}");
        assert_eq!(frame["seq"].as_u64(), Some(start + 1 + n), "in order, no gap: {frame}");
        assert_eq!(frame["event"]["type"], "PaymentCreated");
        assert_eq!(frame["event"]["data"]["amount"], json!(1 + n));
    }
    drop((a, b));
}
