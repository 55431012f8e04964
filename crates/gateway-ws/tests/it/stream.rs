//! The stream over real sockets and a real store (SQLite in memory and in a file): events from
//! domain operations, reconnect and backfill, truncation after pruning, the lag limit,
//! shutdown, the end of a removed member's sockets and of an expired token's, coop isolation
//! and the HTTP-level rejections.

use std::time::Duration;

use gateway_core::{Clock, ManualClock, Role, SystemClock};
use gateway_domain::ports::EventReads;
use gateway_ws::protocol::{ClientFrame, ServerFrame};
use gateway_ws::{Retention, WsConfig};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::{Backend, Client, Received, Server, did};

async fn auth_and_live_events_from_domain_operations(backend: Backend) {
    let server = Server::start(backend).await;
    let coop = server.domain.coop("c1").await;
    let mut client = server.connect("/v1/ws/c1").await;
    client.send(&ClientFrame::Auth { token: server.member_token(&coop) }).await;
    assert_eq!(
        client.frame().await,
        ServerFrame::AuthOk { did: did(1).to_string(), coop_id: "c1".into(), current_seq: 2 }
    );
    server.domain.pay(&coop).await;
    server.domain.coops.add_member(&coop, &did(2), gateway_core::Role::Member).await.unwrap();
    match client.frame().await {
        ServerFrame::Event { seq: 3, event } => {
            assert_eq!((event.event_type.as_str(), event.coop_id.as_str()), ("PaymentCreated", "c1"));
            assert_eq!(event.data["from"], Value::from(did(0).to_string()));
            assert_eq!(event.data["memo"], Value::from("ws test"));
            assert!(event.timestamp > 1_700_000_000);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(client.event().await, (4, "MemberAdded".into()));
}

#[tokio::test]
async fn memory_auth_and_live_events_from_domain_operations() {
    auth_and_live_events_from_domain_operations(Backend::Memory).await;
}

#[tokio::test]
async fn sqlite_file_auth_and_live_events_from_domain_operations() {
    auth_and_live_events_from_domain_operations(Backend::SqliteFile).await;
}

/// Reconnects after missing events, backfills from the last seen seq while new events are
/// committed, and checks the applied sequence has no gap and no duplicate.
async fn reconnect_and_backfill(backend: Backend) {
    let server = Server::start(backend).await;
    let coop = server.domain.coop("c1").await;
    let mut client = server.connect("/v1/ws/c1").await;
    client.auth(server.member_token(&coop)).await;
    for _ in 0..5 {
        server.domain.pay(&coop).await;
    }
    let mut last = 2;
    for _ in 0..5 {
        let (seq, _) = client.event().await;
        assert_eq!(seq, last + 1);
        last = seq;
    }
    drop(client);
    for _ in 0..7 {
        server.domain.pay(&coop).await;
    }
    // The short route, authenticated by the upgrade's query token.
    let path = format!("/ws?access_token={}", server.member_token(&coop));
    let mut client = server.connect(&path).await;
    let current = match client.frame().await {
        ServerFrame::AuthOk { coop_id, current_seq, .. } => {
            assert_eq!(coop_id, "c1");
            current_seq
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(current, 14);
    client.send(&ClientFrame::Backfill { after_seq: last }).await;
    let producer = tokio::spawn(async move {
        for _ in 0..6 {
            server.domain.pay(&coop).await;
        }
        server
    });
    // Live events queued before the backfill was processed may come first; the client skips
    // whatever is not the next one until BackfillComplete, and from then on nothing is skipped.
    let mut applied = Vec::new();
    let mut backfilling = true;
    // Until the last event and the end of the backfill: when the six payments commit before the
    // backfill is read, the backfill itself reaches 20 and `BackfillComplete` follows it.
    while last < 20 || backfilling {
        match client.frame().await {
            ServerFrame::Event { seq, .. } if seq == last + 1 => {
                applied.push(seq);
                last = seq;
            }
            ServerFrame::Event { seq, .. } => assert!(backfilling, "event {seq} after {last} outside the backfill"),
            ServerFrame::BackfillComplete { count, current_seq } => {
                assert!(backfilling);
                assert_eq!(current_seq, last, "complete right after the last backfilled event");
                assert_eq!(count, current_seq - 7);
                backfilling = false;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(applied, (8..=20).collect::<Vec<_>>());
    let server = producer.await.unwrap();
    assert_eq!(server.domain.store.current_seq(&gateway_core::CoopId::parse("c1").unwrap()).await.unwrap(), 20);
}

#[tokio::test]
async fn memory_reconnect_and_backfill_without_gap_or_duplicate() {
    reconnect_and_backfill(Backend::Memory).await;
}

#[tokio::test]
async fn sqlite_file_reconnect_and_backfill_without_gap_or_duplicate() {
    reconnect_and_backfill(Backend::SqliteFile).await;
}

#[tokio::test]
async fn backfill_into_pruned_events_is_truncated() {
    let server = Server::start(Backend::SqliteFile).await;
    let coop = server.domain.coop("c1").await;
    for _ in 0..30 {
        server.domain.pay(&coop).await;
    }
    // The coop's log copies the events first (retention never takes one it has not).
    let log = gateway_domain::log::Log::new(
        server.domain.store.clone(),
        server.domain.store.clone(),
        server.domain.store.clone(),
        std::sync::Arc::new(gateway_domain::governance::MemoryReceiptKeys::unavailable("no_keystore")),
        std::sync::Arc::new(SystemClock),
        gateway_domain::log::LogConfig::default(),
    );
    log.checkpoint(&coop).await.unwrap();
    // Eight days from now every event is old: only the newest ten stay.
    let later = ManualClock::at_secs(gateway_core::Clock::now_unix_secs(&SystemClock) + 8 * 86_400);
    let retention = Retention { keep_last: 10, ..Retention::default() };
    let deleted = gateway_ws::prune_once(server.domain.store.as_ref(), &later, &retention).await.unwrap();
    assert_eq!(deleted, 22);
    let mut client = server.connect("/v1/ws/c1").await;
    assert_eq!(client.auth(server.member_token(&coop)).await, 32);
    client.send(&ClientFrame::Backfill { after_seq: 5 }).await;
    assert_eq!(client.frame().await, ServerFrame::BackfillTruncated { oldest_seq: 23 });
    server.domain.pay(&coop).await;
    assert_eq!(client.event().await.0, 33, "live delivery goes on from the current position");
    client.send(&ClientFrame::Backfill { after_seq: 22 }).await;
    for seq in 23..=33 {
        assert_eq!(client.event().await.0, seq);
    }
    assert_eq!(client.frame().await, ServerFrame::BackfillComplete { count: 11, current_seq: 33 });
}

#[tokio::test]
async fn a_client_that_stops_reading_is_closed_as_lagged_after_an_unbroken_prefix() {
    let config = WsConfig { queue_capacity: 16, ..WsConfig::default() };
    let server = Server::start_with(Backend::Memory, config, Some(4096)).await;
    let coop = server.domain.coop("c1").await;
    let mut client = Client::connect(server.addr, "/v1/ws/c1", Some(4096)).await;
    client.auth(server.member_token(&coop)).await;
    // The client reads nothing while 1500 events are committed: far more than the socket
    // buffers and the 16-event limit hold.
    for _ in 0..1500 {
        server.domain.pay(&coop).await;
    }
    let mut expected = 3;
    let close = loop {
        match client.next().await {
            Received::Frame(ServerFrame::Event { seq, .. }) => {
                assert_eq!(seq, expected, "in order, nothing skipped");
                expected += 1;
            }
            other => break other,
        }
    };
    assert_eq!(close, Received::Close(1013, "lagged".into()));
    assert!(expected < 1503, "closed before everything was delivered ({} events)", expected - 3);
}

#[tokio::test]
async fn shutdown_closes_every_socket_and_refuses_new_ones() {
    let server = Server::start(Backend::Memory).await;
    let coop = server.domain.coop("c1").await;
    let mut authenticated = server.connect("/v1/ws/c1").await;
    authenticated.auth(server.member_token(&coop)).await;
    let mut waiting = server.connect("/ws").await;
    let handle = server.state.shutdown_handle();
    let remaining = handle.shutdown("deploy", Some(2000), Duration::from_secs(5)).await;
    assert_eq!(remaining, 0);
    for client in [&mut authenticated, &mut waiting] {
        assert_eq!(
            client.frame().await,
            ServerFrame::Shutdown { reason: "deploy".into(), reconnect_after_ms: Some(2000) }
        );
        assert_eq!(client.next().await, Received::Close(1001, "shutdown".into()));
    }
    let (status, body) = Client::try_connect(server.addr, "/v1/ws/c1", None).await.err().expect("refused");
    assert_eq!(status, 503);
    let body: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["code"], "SERVICE_UNAVAILABLE");
    assert_eq!(body["details"], serde_json::json!({}));
}

#[tokio::test]
async fn a_client_of_one_coop_never_receives_another_coops_events() {
    let server = Server::start(Backend::Memory).await;
    let a = server.domain.coop("coop-a").await;
    let b = server.domain.coop("coop-b").await;
    let mut client = server.connect("/v1/ws/coop-a").await;
    assert_eq!(client.auth(server.member_token(&a)).await, 2);
    for round in 0..10 {
        server.domain.pay(&b).await;
        if round % 3 == 0 {
            server.domain.pay(&a).await;
        }
    }
    server.domain.pay(&a).await; // seq 7 of coop-a, the last
    for expected in 3..=7 {
        match client.frame().await {
            ServerFrame::Event { seq, event } => assert_eq!((seq, event.coop_id.as_str()), (expected, "coop-a")),
            other => panic!("{other:?}"),
        }
    }
    // Nothing else is pending: a ping's answer comes next.
    client.send(&ClientFrame::Ping).await;
    assert_eq!(client.frame().await, ServerFrame::Pong);
    // A token for coop-b cannot open coop-a's stream, by frame or by query.
    let mut other = server.connect("/v1/ws/coop-a").await;
    other.send(&ClientFrame::Auth { token: server.member_token(&b) }).await;
    assert!(matches!(other.frame().await, ServerFrame::AuthError { .. }));
    assert_eq!(other.next().await, Received::Close(1008, "authentication failed".into()));
    let path = format!("/v1/ws/coop-a?access_token={}", server.member_token(&b));
    let (status, body) = Client::try_connect(server.addr, &path, None).await.err().expect("refused");
    assert_eq!(status, 403);
    assert_eq!(serde_json::from_str::<Value>(&body).unwrap()["details"]["coop_id"], "coop-a");
}

/// A raw HTTP/1.1 request, for rejections a WebSocket client cannot provoke.
async fn raw_get(server: &Server, path: &str, upgrade: bool) -> (u16, String, Value) {
    let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let headers = if upgrade {
        "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    } else {
        "Connection: close\r\n"
    };
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{headers}\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    // Read the head and, by its Content-Length, the body; an upgraded socket stays open.
    let mut response = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut chunk)).await.unwrap().unwrap();
        response.extend_from_slice(&chunk[..read]);
        let text = String::from_utf8_lossy(&response);
        if read == 0 {
            break;
        }
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let length = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase().strip_prefix("content-length: ").map(|v| v.trim().parse::<usize>().unwrap())
                })
                .unwrap_or(0);
            if body.len() >= length {
                break;
            }
        }
    }
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text[9..12].parse().unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    (status, head.to_owned(), if status == 101 { Value::Null } else { serde_json::from_str(body).unwrap() })
}

#[tokio::test]
async fn http_rejections_use_the_contract_error_body() {
    let server = Server::start(Backend::Memory).await;
    let coop = server.domain.coop("c1").await;

    let (status, _, body) = raw_get(&server, "/v1/ws/c1", false).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("BAD_REQUEST")));

    let (status, _, body) = raw_get(&server, "/v1/ws/not%20a%20coop", true).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("BAD_REQUEST")));
    assert!(body["details"]["fields"]["coop_id"].is_array());

    let (status, head, body) = raw_get(&server, "/v1/ws/c1?access_token=garbage", true).await;
    assert_eq!((status, body["code"].as_str()), (401, Some("AUTHENTICATION_FAILED")));
    assert!(head.to_ascii_lowercase().contains("www-authenticate: bearer"));

    let identity_only = server.token(&did(1), None);
    let (status, _, body) = raw_get(&server, &format!("/ws?access_token={identity_only}"), true).await;
    assert_eq!((status, body["code"].as_str()), (401, Some("AUTHENTICATION_FAILED")));

    let outsider = server.token(&did(9), Some(&coop));
    let (status, _, body) = raw_get(&server, &format!("/v1/ws/c1?access_token={outsider}"), true).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("AUTHORIZATION_FAILED")));
    assert_eq!(body["details"]["coop_id"], "c1");

    let member = server.member_token(&coop);
    let (status, _, _) = raw_get(&server, &format!("/v1/ws/c1?access_token={member}"), true).await;
    assert_eq!(status, 101);
}

#[tokio::test]
async fn the_openapi_document_describes_both_routes_and_the_router_merges() {
    let doc = gateway_ws::openapi();
    let json: Value = serde_json::to_value(&doc).unwrap();
    for path in ["/v1/ws/{coop_id}", "/ws"] {
        let responses = &json["paths"][path]["get"]["responses"];
        for status in ["101", "400", "401", "403", "503"] {
            assert!(responses[status].is_object(), "{path} {status}");
        }
        let body = &responses["503"]["content"]["application/json"]["schema"];
        assert_eq!(body["$ref"], "#/components/schemas/ErrorBody", "the error body: {body}");
        assert_eq!(json["paths"][path]["get"]["tags"][0], "events");
    }
    assert!(json["tags"].as_array().unwrap().iter().any(|t| t["name"] == "events"));
    let schema = &json["components"]["schemas"]["ErrorBody"];
    assert_eq!(schema["properties"]["code"]["type"], "string", "the document carries the body it refers to: {schema}");
    // Mergeable into a router that has its own fallback.
    let server = Server::start(Backend::Memory).await;
    let _merged: axum::Router =
        axum::Router::new().fallback(|| async { "fallback" }).merge(gateway_ws::router(server.state.clone()));
}

/// The admin removes a member: both of its sockets (either route) get
/// `Shutdown{membership_revoked}` and close 1008 within a second, and no event from the removal
/// on; another member's socket streams on, and a role change does not interrupt it.
async fn a_removed_members_sockets_are_shut_down(backend: Backend) {
    let server = Server::start(backend).await;
    let coop = server.domain.coop("c1").await;
    server.domain.coops.add_member(&coop, &did(2), Role::Member).await.unwrap(); // seq 3
    let leaving = server.token(&did(2), Some(&coop));
    let mut removed = server.connect("/v1/ws/c1").await;
    assert_eq!(removed.auth(leaving.clone()).await, 3);
    let mut removed_short = server.connect(&format!("/ws?access_token={leaving}")).await;
    assert!(matches!(removed_short.frame().await, ServerFrame::AuthOk { current_seq: 3, .. }));
    let mut staying = server.connect("/v1/ws/c1").await;
    assert_eq!(staying.auth(server.member_token(&coop)).await, 3);
    server.domain.pay(&coop).await; // 4
    for client in [&mut removed, &mut removed_short, &mut staying] {
        assert_eq!(client.event().await, (4, "PaymentCreated".into()));
    }

    let started = std::time::Instant::now();
    server.domain.coops.remove_member(&coop, &did(2)).await.unwrap(); // 5
    server.domain.pay(&coop).await; // 6
    for client in [&mut removed, &mut removed_short] {
        assert_eq!(client.revoked().await, Vec::<u64>::new(), "no event from the removal on");
    }
    assert!(started.elapsed() < Duration::from_secs(1), "shut down after {:?}", started.elapsed());

    match staying.frame().await {
        ServerFrame::Event { seq: 5, event } => {
            assert_eq!(event.event_type, "MemberRemoved");
            assert_eq!(event.data["did"], Value::from(did(2).to_string()));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(staying.event().await, (6, "PaymentCreated".into()));
    // A role change applies from the next event; the stream asks no role, so it goes on.
    server.domain.coops.set_role(&coop, &did(1), Role::Admin).await.unwrap(); // 7
    server.domain.pay(&coop).await; // 8
    assert_eq!(staying.event().await, (7, "RoleUpdated".into()));
    assert_eq!(staying.event().await, (8, "PaymentCreated".into()));
    // The removed DID's token no longer opens the stream.
    let mut again = server.connect("/v1/ws/c1").await;
    again.send(&ClientFrame::Auth { token: leaving }).await;
    assert!(matches!(again.frame().await, ServerFrame::AuthError { .. }));
    assert_eq!(again.next().await, Received::Close(1008, "authentication failed".into()));
}

#[tokio::test]
async fn memory_a_removed_members_sockets_are_shut_down_and_others_keep_streaming() {
    a_removed_members_sockets_are_shut_down(Backend::Memory).await;
}

#[tokio::test]
async fn sqlite_file_a_removed_members_sockets_are_shut_down_and_others_keep_streaming() {
    a_removed_members_sockets_are_shut_down(Backend::SqliteFile).await;
}

#[tokio::test]
async fn a_member_removed_by_an_approved_proposal_is_shut_down() {
    let server = Server::start(Backend::Memory).await;
    let coop = server.domain.coop("c1").await;
    let mut removed = server.connect("/v1/ws/c1").await;
    assert_eq!(removed.auth(server.member_token(&coop)).await, 2);
    let mut admin = server.connect("/v1/ws/c1").await;
    assert_eq!(admin.auth(server.token(&did(0), Some(&coop))).await, 2);
    let started = std::time::Instant::now();
    let removal = server.domain.remove_by_proposal(&coop, &did(1)).await;
    // The governance events before the removal, then the end; not the removal nor the close.
    assert_eq!(removed.revoked().await, (3..removal).collect::<Vec<_>>());
    assert!(started.elapsed() < Duration::from_secs(1), "shut down after {:?}", started.elapsed());
    for seq in 3..removal {
        assert_eq!(admin.event().await.0, seq);
    }
    assert_eq!(admin.event().await, (removal, "MemberRemoved".into()));
    assert_eq!(admin.event().await, (removal + 1, "GovernanceProposalClosed".into()));
}

#[tokio::test]
async fn a_socket_is_shut_down_when_its_token_expires() {
    let server = Server::start(Backend::Memory).await;
    let coop = server.domain.coop("c1").await;
    let issued = server.short_lived_token(&did(1), &coop, 1);
    let mut client = server.connect("/v1/ws/c1").await;
    assert_eq!(client.auth(issued.token).await, 2);
    let started = std::time::Instant::now();
    assert_eq!(
        client.next().await,
        Received::Frame(ServerFrame::Shutdown { reason: "token_expired".into(), reconnect_after_ms: Some(0) })
    );
    assert_eq!(client.next().await, Received::Close(1008, "token expired".into()));
    assert_eq!(client.next().await, Received::Gone);
    // At `exp` by the wall clock, not before, and not long after.
    assert!(SystemClock.now_unix_millis() >= issued.expires_at * 1000);
    assert!(started.elapsed() < Duration::from_secs(2), "closed after {:?}", started.elapsed());
}
