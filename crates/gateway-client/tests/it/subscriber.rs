//! The event subscriber against a fake gateway built with tokio-tungstenite's server side on
//! 127.0.0.1:0. Each test scripts every connection frame by frame, which makes reconnects,
//! backfills, gaps and shutdowns deterministic.

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use gateway_client::{Client, Error, Session, StreamItem, SubscribeOptions, Subscription};
use gateway_core::CoopId;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};

const WAIT: Duration = Duration::from_secs(10);

/// One accepted connection, driven by the test.
struct Conn {
    ws: WebSocketStream<TcpStream>,
    path: String,
}

impl Conn {
    /// The next protocol frame from the client, skipping its keep-alive `Ping`s.
    async fn recv(&mut self) -> Value {
        loop {
            let message = tokio::time::timeout(WAIT, self.ws.next()).await.expect("client frame").unwrap().unwrap();
            if let Message::Text(text) = message {
                let value: Value = serde_json::from_str(text.as_str()).unwrap();
                if value["type"] != "Ping" {
                    return value;
                }
            }
        }
    }

    async fn send(&mut self, frame: Value) {
        self.ws.send(Message::Text(frame.to_string().into())).await.unwrap();
    }

    async fn event(&mut self, seq: u64) {
        self.send(json!({"type": "Event", "seq": seq,
            "event": {"type": "PaymentCreated", "coop_id": "c1", "timestamp": 1_700_000_000u64 + seq, "data": {"n": seq}}}))
            .await;
    }

    /// Expects the client's `Auth` and answers `AuthOk` at `current_seq`.
    async fn authenticate(&mut self, current_seq: u64) {
        assert_eq!(self.recv().await, json!({"type": "Auth", "token": "test-token"}));
        self.send(json!({"type": "AuthOk", "did": "did:key:z6Mktest", "coop_id": "c1", "current_seq": current_seq}))
            .await;
    }
}

/// A fake gateway: accepted connections arrive on `conns`; `refuse` answers upgrades with 404.
struct Fake {
    url: String,
    conns: mpsc::UnboundedReceiver<(Conn, Instant)>,
}

impl Fake {
    async fn start(refuse: bool) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (sender, conns) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let mut path = String::new();
                // The handshake callback's signature is tungstenite's; its error type is theirs.
                #[allow(clippy::result_large_err)]
                let callback = |request: &Request, response: Response| -> Result<Response, ErrorResponse> {
                    path = request.uri().path().to_owned();
                    if refuse {
                        let body = json!({"error": "route /v1/ws/c1 not found", "code": "NOT_FOUND",
                                          "details": {"resource": "route", "id": "/v1/ws/c1"}});
                        let mut refusal = ErrorResponse::new(Some(body.to_string()));
                        *refusal.status_mut() = tokio_tungstenite::tungstenite::http::StatusCode::NOT_FOUND;
                        return Err(refusal);
                    }
                    Ok(response)
                };
                if let Ok(ws) = tokio_tungstenite::accept_hdr_async(stream, callback).await {
                    let _ = sender.send((Conn { ws, path: path.clone() }, Instant::now()));
                }
            }
        });
        Self { url, conns }
    }

    async fn accept(&mut self) -> (Conn, Instant) {
        tokio::time::timeout(WAIT, self.conns.recv()).await.expect("a connection").unwrap()
    }
}

async fn subscribe(fake: &Fake, after_seq: Option<u64>) -> Subscription {
    let client = Client::new(&fake.url).unwrap();
    client
        .set_session(Session {
            token: "test-token".into(),
            expires_at: u64::MAX,
            scopes: vec![],
            coop_id: Some("c1".into()),
            did: "did:key:z6Mktest".into(),
        })
        .await;
    let options = SubscribeOptions {
        after_seq,
        min_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(200),
        ..SubscribeOptions::default()
    };
    client.subscribe(&CoopId::parse("c1").unwrap(), options)
}

async fn next(subscription: &mut Subscription) -> StreamItem {
    tokio::time::timeout(WAIT, subscription.next()).await.expect("an item").expect("the subscriber runs")
}

async fn event_seq(subscription: &mut Subscription) -> u64 {
    match next(subscription).await {
        StreamItem::Event(event) => event.seq,
        other => panic!("expected an event, got {other:?}"),
    }
}

#[tokio::test]
async fn a_reconnect_resumes_with_backfill_without_duplicates_or_loss() {
    let mut fake = Fake::start(false).await;
    let mut events = subscribe(&fake, None).await;

    let (mut first, _) = fake.accept().await;
    assert_eq!(first.path, "/v1/ws/c1");
    first.authenticate(0).await;
    assert!(matches!(next(&mut events).await, StreamItem::Connected { current_seq: 0, resuming_after: None, .. }));
    for seq in 1..=3 {
        first.event(seq).await;
        assert_eq!(event_seq(&mut events).await, seq);
    }
    drop(first); // The connection drops without a close frame.
    assert!(matches!(next(&mut events).await, StreamItem::Disconnected { .. }));

    let (mut second, _) = fake.accept().await;
    second.authenticate(5).await;
    // A live event that overtakes the backfill is held until the backfill has caught up.
    second.event(6).await;
    assert_eq!(second.recv().await, json!({"type": "Backfill", "after_seq": 3}));
    for seq in [3, 4, 5, 6] {
        second.event(seq).await;
    }
    second.send(json!({"type": "BackfillComplete", "count": 4, "current_seq": 6})).await;
    second.event(7).await;

    assert!(matches!(next(&mut events).await, StreamItem::Connected { current_seq: 5, resuming_after: Some(3), .. }));
    assert_eq!(event_seq(&mut events).await, 4);
    assert_eq!(event_seq(&mut events).await, 5);
    assert_eq!(event_seq(&mut events).await, 6);
    assert!(matches!(next(&mut events).await, StreamItem::BackfillComplete { count: 4, current_seq: 6 }));
    assert_eq!(event_seq(&mut events).await, 7);
}

#[tokio::test]
async fn a_start_position_is_backfilled_first() {
    let mut fake = Fake::start(false).await;
    let mut events = subscribe(&fake, Some(1)).await;
    let (mut conn, _) = fake.accept().await;
    conn.authenticate(2).await;
    assert_eq!(conn.recv().await, json!({"type": "Backfill", "after_seq": 1}));
    conn.event(2).await;
    conn.send(json!({"type": "BackfillComplete", "count": 1, "current_seq": 2})).await;
    assert!(matches!(next(&mut events).await, StreamItem::Connected { resuming_after: Some(1), .. }));
    let StreamItem::Event(event) = next(&mut events).await else { panic!() };
    assert_eq!(
        (event.seq, event.event_type.as_str(), event.data.to_value()["n"].as_u64()),
        (2, "PaymentCreated", Some(2))
    );
}

#[tokio::test]
async fn gaps_and_truncated_backfills_are_reported_as_such() {
    let mut fake = Fake::start(false).await;
    let mut events = subscribe(&fake, None).await;
    let (mut first, _) = fake.accept().await;
    first.authenticate(0).await;
    next(&mut events).await;
    first.event(1).await;
    first.event(4).await;
    first.send(json!({"type": "Error", "message": "unexpected frame"})).await;
    assert_eq!(event_seq(&mut events).await, 1);
    assert_eq!(next(&mut events).await, StreamItem::Gap { first_missing: 2, last_missing: 3 });
    assert_eq!(event_seq(&mut events).await, 4);
    assert_eq!(next(&mut events).await, StreamItem::ServerError { message: "unexpected frame".into() });
    first.ws.close(None).await.unwrap();
    let StreamItem::Disconnected { reason, .. } = next(&mut events).await else { panic!() };
    assert!(reason.contains("closed by the gateway"), "{reason}");

    let (mut second, _) = fake.accept().await;
    second.authenticate(50).await;
    assert_eq!(second.recv().await, json!({"type": "Backfill", "after_seq": 4}));
    second.send(json!({"type": "BackfillTruncated", "oldest_seq": 20})).await;
    second.event(51).await;
    assert!(matches!(next(&mut events).await, StreamItem::Connected { .. }));
    assert_eq!(next(&mut events).await, StreamItem::Truncated { oldest_seq: 20 });
    // Live delivery goes on from the gateway's position: no gap is invented for 5..=50.
    assert_eq!(event_seq(&mut events).await, 51);
}

#[tokio::test]
async fn shutdown_is_honoured_with_the_requested_delay() {
    let mut fake = Fake::start(false).await;
    let mut events = subscribe(&fake, None).await;
    let (mut first, _) = fake.accept().await;
    first.authenticate(0).await;
    next(&mut events).await;
    first.send(json!({"type": "Shutdown", "reason": "maintenance", "reconnect_after_ms": 300})).await;
    let sent = Instant::now();
    let _ = first.ws.close(None).await;
    let StreamItem::Disconnected { reason, reconnect_in } = next(&mut events).await else { panic!() };
    assert!(reason.contains("maintenance"), "{reason}");
    assert_eq!(reconnect_in, Duration::from_millis(300));
    let (mut second, accepted) = fake.accept().await;
    assert!(accepted.duration_since(sent) >= Duration::from_millis(300), "reconnected too early");
    second.authenticate(0).await;
    assert!(matches!(next(&mut events).await, StreamItem::Connected { resuming_after: Some(0), .. }));
}

#[tokio::test]
async fn a_revoked_membership_ends_the_subscription_without_reconnecting() {
    let mut fake = Fake::start(false).await;
    let mut events = subscribe(&fake, None).await;
    let (mut conn, _) = fake.accept().await;
    conn.authenticate(0).await;
    next(&mut events).await;
    conn.send(json!({"type": "Shutdown", "reason": "membership_revoked", "reconnect_after_ms": null})).await;
    let StreamItem::Failed(Error::Authorization { reason, .. }) = next(&mut events).await else { panic!() };
    assert_eq!(reason.as_deref(), Some("membership_revoked"));
    assert!(tokio::time::timeout(WAIT, events.next()).await.unwrap().is_none(), "the subscriber stopped");
    assert!(tokio::time::timeout(Duration::from_secs(2), fake.accept()).await.is_err(), "no reconnection");
}

#[tokio::test]
async fn a_refused_authentication_without_credentials_ends_the_subscription() {
    let mut fake = Fake::start(false).await;
    let mut events = subscribe(&fake, None).await;
    let (mut conn, _) = fake.accept().await;
    conn.recv().await;
    conn.send(json!({"type": "AuthError", "message": "token expired"})).await;
    // No key to log in again with: the refusal is final.
    assert_eq!(
        next(&mut events).await,
        StreamItem::Failed(Error::Authentication { message: "token expired".into(), reason: None })
    );
    assert!(tokio::time::timeout(WAIT, events.next()).await.unwrap().is_none(), "the subscriber stopped");
}

#[tokio::test]
async fn a_missing_route_is_reported_not_retried_forever() {
    let fake = Fake::start(true).await;
    let mut events = subscribe(&fake, None).await;
    let StreamItem::Failed(Error::NotFound { resource, .. }) = next(&mut events).await else { panic!() };
    assert_eq!(resource, "route");
}
