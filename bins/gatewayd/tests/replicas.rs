//! Two `gatewayd` processes on one PostgreSQL database (runs when `GATEWAY_TEST_POSTGRES_URL` is
//! set; fails loudly if it is set and unreachable): a WebSocket client connected to replica A
//! receives, in order and without gaps, the events written through replica B.

mod support;

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use support::{json_request, login, signing_key, start_on};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_replica_a_sees_events_written_through_replica_b() {
    let Some(store) = gateway_store::testing::fresh_postgres_schema("replicas").await else { return };
    let flags = ["--open-enrollment", "true", "--trust-default", "0.9"];
    let a = start_on(&store, &flags, &[]);
    let b = start_on(&store, &flags, &[]);

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
