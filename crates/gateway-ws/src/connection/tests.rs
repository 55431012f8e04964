//! Unit tests of the connection loop over channel sockets, a fake outbox and a paused Tokio
//! clock: authentication, deadlines, backfill, ordering, the lag limit, shutdown and metrics.

use std::time::Duration;

use axum::body::Bytes;
use futures_channel::mpsc::TryRecvError;
use futures_util::{SinkExt, StreamExt};
use gateway_core::CoopId;
use proptest::prelude::*;
use serde_json::json;
use tokio::time::Instant;

use crate::WsConfig;
use crate::auth::authenticate;
use crate::protocol::{ClientFrame, EventPayload, Frame, ServerFrame};
use crate::testing::{Client, Rig, Seen, did};

fn coop(id: &str) -> CoopId {
    CoopId::parse(id).unwrap()
}

fn small_batches() -> WsConfig {
    WsConfig { read_batch: 4, cache_events: 8, ..WsConfig::default() }
}

/// Reads the rest of a refused connection: the frame, the close, then nothing.
async fn expect_refusal(client: &mut Client, code: u16) -> ServerFrame {
    let frame = client.server_frame().await;
    match client.next().await {
        Seen::Close(got, _) => assert_eq!(got, code),
        other => panic!("expected a close frame, got {other:?}"),
    }
    assert_eq!(client.next().await, Seen::Gone);
    frame
}

#[tokio::test(start_paused = true)]
async fn auth_ok_reports_identity_and_current_seq_then_live_events_follow() {
    let rig = Rig::new(WsConfig::default());
    rig.store.append(&rig.coop, 3);
    let mut client = rig.connect(Some(rig.coop.clone()));
    client.send(ClientFrame::Auth { token: rig.member_token() }).await;
    assert_eq!(
        client.server_frame().await,
        ServerFrame::AuthOk { did: rig.member.to_string(), coop_id: "c1".into(), current_seq: 3 }
    );
    rig.store.append(&rig.coop, 2);
    assert_eq!(
        client.server_frame().await,
        ServerFrame::Event {
            seq: 4,
            event: EventPayload {
                event_type: "PaymentCreated".into(),
                coop_id: "c1".into(),
                timestamp: 1_700_000_000,
                data: json!({"n": 4}),
            },
        }
    );
    assert_eq!(client.event().await, 5);
}

#[tokio::test(start_paused = true)]
async fn the_short_route_follows_the_tokens_coop() {
    let rig = Rig::new(WsConfig::default());
    rig.store.append(&rig.coop, 1);
    let mut client = rig.connect(None);
    client.send(ClientFrame::Auth { token: rig.member_token() }).await;
    match client.server_frame().await {
        ServerFrame::AuthOk { coop_id, current_seq, .. } => assert_eq!((coop_id.as_str(), current_seq), ("c1", 1)),
        other => panic!("{other:?}"),
    }
    rig.store.append(&rig.coop, 1);
    assert_eq!(client.event().await, 2);
}

#[tokio::test(start_paused = true)]
async fn refused_tokens_get_auth_error_and_close_1008() {
    let rig = Rig::new(WsConfig::default());
    rig.store.add_coop(&coop("c2"));
    let outsider = did(2);
    let cases = [
        (Some(rig.coop.clone()), "not-a-jwt".to_owned(), "invalid token"),
        (Some(rig.coop.clone()), rig.token(&rig.member, Some(&coop("c2"))), "is for cooperative 'c2', not 'c1'"),
        (Some(rig.coop.clone()), rig.token(&outsider, Some(&rig.coop)), "not a member"),
        (Some(coop("c9")), rig.token(&rig.member, Some(&coop("c9"))), "no such cooperative"),
        (Some(rig.coop.clone()), rig.token(&rig.member, None), "carries no cooperative"),
        (None, rig.token(&rig.member, None), "carries no cooperative"),
        (None, rig.token(&outsider, Some(&rig.coop)), "not a member"),
    ];
    for (path, token, expected) in cases {
        let mut client = rig.connect(path);
        client.send(ClientFrame::Auth { token }).await;
        match expect_refusal(&mut client, 1008).await {
            ServerFrame::AuthError { message } => assert!(message.contains(expected), "{message} ∌ {expected}"),
            other => panic!("expected AuthError, got {other:?}"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn open_enrollment_accepts_any_valid_token_for_the_coop() {
    let rig = Rig::build(WsConfig::default(), true, 3600);
    let mut client = rig.connect(Some(rig.coop.clone()));
    assert_eq!(client.auth(rig.token(&did(7), Some(&rig.coop))).await, 0);
    let mut client = rig.connect(Some(coop("c9")));
    assert_eq!(client.auth(rig.token(&did(7), Some(&coop("c9")))).await, 0);
    // The coop must still match the path.
    let mut client = rig.connect(Some(rig.coop.clone()));
    client.send(ClientFrame::Auth { token: rig.token(&did(7), Some(&coop("c9"))) }).await;
    assert!(matches!(expect_refusal(&mut client, 1008).await, ServerFrame::AuthError { .. }));
}

#[tokio::test(start_paused = true)]
async fn an_upgrade_token_authenticates_at_once() {
    let rig = Rig::new(WsConfig::default());
    rig.store.append(&rig.coop, 2);
    let session = authenticate(&rig.state.shared, &rig.member_token(), Some(&rig.coop)).await.unwrap();
    let mut client = rig.connect_with(Some(rig.coop.clone()), Some(session), 64);
    assert!(matches!(client.server_frame().await, ServerFrame::AuthOk { current_seq: 2, .. }));
    client.send(ClientFrame::Auth { token: rig.member_token() }).await;
    assert_eq!(client.server_frame().await, ServerFrame::Error { message: "already authenticated".into() });
}

#[tokio::test(start_paused = true)]
async fn authentication_must_arrive_within_ten_seconds() {
    let rig = Rig::new(WsConfig::default());
    let started = Instant::now();
    let mut client = rig.connect(Some(rig.coop.clone()));
    // A ping before authenticating is answered, and does not extend the deadline.
    client.send(ClientFrame::Ping).await;
    assert_eq!(client.server_frame().await, ServerFrame::Pong);
    tokio::time::sleep(Duration::from_millis(9_900)).await;
    assert_eq!(client.from_server.try_recv(), Err(TryRecvError::Empty), "nothing before the deadline");
    let frame = expect_refusal(&mut client, 1008).await;
    assert_eq!(frame, ServerFrame::AuthError { message: "authentication timeout".into() });
    assert_eq!(started.elapsed(), Duration::from_secs(10));
}

#[tokio::test(start_paused = true)]
async fn the_server_pings_every_thirty_seconds() {
    let rig = Rig::new(WsConfig::default());
    let started = Instant::now();
    let mut client = rig.connect(Some(rig.coop.clone()));
    client.auth(rig.member_token()).await;
    for n in 1..=4u64 {
        assert_eq!(client.next().await, Seen::Ping);
        assert_eq!(started.elapsed(), Duration::from_secs(30 * n));
        client.send_raw(Frame::Pong(Bytes::new())).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_client_silent_for_sixty_seconds_is_dropped() {
    let rig = Rig::new(WsConfig::default());
    let started = Instant::now();
    let mut client = rig.connect(Some(rig.coop.clone()));
    client.auth(rig.member_token()).await;
    assert_eq!(client.next().await, Seen::Ping);
    // No pong: at 60 s the connection is closed.
    assert_eq!(client.next().await, Seen::Close(1001, "idle timeout".into()));
    assert_eq!(started.elapsed(), Duration::from_secs(60));
    assert_eq!(client.next().await, Seen::Gone);
}

#[tokio::test(start_paused = true)]
async fn any_frame_counts_as_a_sign_of_life() {
    let rig = Rig::new(WsConfig::default());
    let mut client = rig.connect(Some(rig.coop.clone()));
    client.auth(rig.member_token()).await;
    // The client never answers pings, but sends a JSON ping every 50 s: it stays.
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_secs(50)).await;
        client.send(ClientFrame::Ping).await;
        loop {
            match client.next().await {
                Seen::Ping => continue,
                Seen::Server(ServerFrame::Pong) => break,
                other => panic!("{other:?}"),
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn an_expiring_token_closes_the_socket() {
    let rig = Rig::build(WsConfig::default(), false, 100);
    let started = Instant::now();
    let mut client = rig.connect(Some(rig.coop.clone()));
    client.auth(rig.member_token()).await;
    loop {
        match client.next().await {
            Seen::Ping => client.send_raw(Frame::Pong(Bytes::new())).await,
            Seen::Server(frame) => {
                assert_eq!(
                    frame,
                    ServerFrame::Shutdown { reason: "token_expired".into(), reconnect_after_ms: Some(0) }
                );
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(started.elapsed(), Duration::from_secs(100));
    assert_eq!(client.next().await, Seen::Close(1008, "token expired".into()));
    assert_eq!(client.next().await, Seen::Gone);
}

fn membership_revoked() -> Seen {
    Seen::Server(ServerFrame::Shutdown { reason: "membership_revoked".into(), reconnect_after_ms: None })
}

/// Reads the end of a revoked socket: `Shutdown{membership_revoked}`, close 1008, nothing more.
async fn expect_revoked(client: &mut Client) {
    assert_eq!(client.next().await, membership_revoked());
    assert_eq!(client.next().await, Seen::Close(1008, "membership revoked".into()));
    assert_eq!(client.next().await, Seen::Gone);
}

#[tokio::test(start_paused = true)]
async fn a_removed_members_sockets_are_shut_down_and_other_members_keep_streaming() {
    let rig = Rig::new(WsConfig::default());
    let other = did(2);
    rig.store.add_member(&rig.coop, &other);
    rig.store.append(&rig.coop, 2);
    // Two sockets of the removed DID (both routes) and one of another member.
    let mut removed = rig.connect(Some(rig.coop.clone()));
    assert_eq!(removed.auth(rig.member_token()).await, 2);
    let mut removed_short = rig.connect(None);
    assert_eq!(removed_short.auth(rig.member_token()).await, 2);
    let mut staying = rig.connect(Some(rig.coop.clone()));
    assert_eq!(staying.auth(rig.token(&other, Some(&rig.coop))).await, 2);
    rig.store.append(&rig.coop, 1);
    for client in [&mut removed, &mut removed_short, &mut staying] {
        assert_eq!(client.event().await, 3);
    }
    let started = Instant::now();
    assert_eq!(rig.store.remove_member(&rig.coop, &rig.member, false), 4);
    rig.store.append(&rig.coop, 1);
    for client in [&mut removed, &mut removed_short] {
        expect_revoked(client).await;
    }
    assert!(started.elapsed() < crate::connection::REVOKE_FLUSH, "at once, not at the flush deadline");
    match staying.server_frame().await {
        ServerFrame::Event { seq: 4, event } => {
            assert_eq!(event.event_type, "MemberRemoved");
            assert_eq!(event.data, json!({ "did": rig.member.as_str() }));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(staying.event().await, 5);
    rig.store.append(&rig.coop, 1);
    assert_eq!(staying.event().await, 6);
    assert_eq!(rig.state.shutdown_handle().active_connections(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_removed_member_far_behind_its_head_is_shut_down_within_a_second() {
    let rig = Rig::new(WsConfig { queue_capacity: 16, ..WsConfig::default() });
    // A socket that holds one frame, and a client that does not read: 16 events queue up, as
    // many as the lag limit allows.
    let mut client = rig.connect_with(Some(rig.coop.clone()), None, 1);
    client.auth(rig.member_token()).await;
    rig.store.append(&rig.coop, 16);
    tokio::time::sleep(Duration::from_millis(1)).await;
    let started = Instant::now();
    // The removal and later events put the head beyond the lag limit: the removal, seen ahead
    // of the cursor, decides how the socket ends (not `lagged`).
    assert_eq!(rig.store.remove_member(&rig.coop, &rig.member, false), 17);
    rig.store.append(&rig.coop, 5);
    tokio::time::sleep(Duration::from_millis(600)).await;
    // What the socket already held, in order; the rest of the 16 was dropped at the flush
    // deadline, so the Shutdown frame comes right after.
    let mut seen = Vec::new();
    let end = loop {
        match client.next().await {
            Seen::Server(ServerFrame::Event { seq, .. }) => seen.push(seq),
            other => break other,
        }
    };
    assert_eq!(end, membership_revoked());
    assert_eq!(seen, (1..=seen.len() as u64).collect::<Vec<_>>(), "a prefix");
    assert!(seen.len() < 8, "the queued events were dropped, {} were sent", seen.len());
    assert_eq!(client.next().await, Seen::Close(1008, "membership revoked".into()));
    assert_eq!(client.next().await, Seen::Gone);
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn a_reading_member_gets_every_event_before_its_removal_and_none_after() {
    // A small cache and a burst: the removal is read from the store, in order.
    let rig = Rig::new(WsConfig { read_batch: 4, cache_events: 4, ..WsConfig::default() });
    let mut client = rig.connect(Some(rig.coop.clone()));
    client.auth(rig.member_token()).await;
    rig.store.append_silently(&rig.coop, 10);
    rig.store.remove_member(&rig.coop, &rig.member, true);
    rig.store.append(&rig.coop, 20);
    for seq in 1..=10 {
        assert_eq!(client.event().await, seq);
    }
    expect_revoked(&mut client).await;
}

#[tokio::test(start_paused = true)]
async fn an_old_removal_in_a_backfill_does_not_end_the_socket() {
    let rig = Rig::new(WsConfig::default());
    rig.store.append(&rig.coop, 2);
    // Removed (seq 3) and added again, before this socket authenticated.
    rig.store.remove_member(&rig.coop, &rig.member, false);
    rig.store.add_member(&rig.coop, &rig.member);
    rig.store.append(&rig.coop, 1);
    let mut client = rig.connect(Some(rig.coop.clone()));
    assert_eq!(client.auth(rig.member_token()).await, 4);
    client.send(ClientFrame::Backfill { after_seq: 0 }).await;
    for seq in 1..=4 {
        assert_eq!(client.event().await, seq);
    }
    assert_eq!(client.server_frame().await, ServerFrame::BackfillComplete { count: 4, current_seq: 4 });
    rig.store.append(&rig.coop, 1);
    assert_eq!(client.event().await, 5);
}

#[tokio::test(start_paused = true)]
async fn a_removal_between_the_membership_check_and_auth_ok_refuses_the_socket() {
    let rig = Rig::new(WsConfig::default());
    // The upgrade's token is checked, then the member is removed before the socket starts.
    let session = authenticate(&rig.state.shared, &rig.member_token(), Some(&rig.coop)).await.unwrap();
    assert_eq!(session.membership_checked_at, Some(0));
    rig.store.remove_member(&rig.coop, &rig.member, false);
    let mut client = rig.connect_with(Some(rig.coop.clone()), Some(session), 64);
    let frame = expect_refusal(&mut client, 1008).await;
    assert_eq!(frame, ServerFrame::AuthError { message: "not a member of cooperative 'c1'".into() });
}

#[tokio::test(start_paused = true)]
async fn in_open_enrollment_a_removal_ends_no_socket() {
    let rig = Rig::build(WsConfig::default(), true, 3600);
    let mut client = rig.connect(Some(rig.coop.clone()));
    client.auth(rig.member_token()).await;
    rig.store.remove_member(&rig.coop, &rig.member, false);
    rig.store.append(&rig.coop, 1);
    assert_eq!(client.event().await, 1);
    assert_eq!(client.event().await, 2);
}

#[tokio::test(start_paused = true)]
async fn backfill_sends_stored_events_then_complete_then_live() {
    let rig = Rig::new(small_batches());
    rig.store.append(&rig.coop, 10);
    let mut client = rig.connect(Some(rig.coop.clone()));
    assert_eq!(client.auth(rig.member_token()).await, 10);
    client.send(ClientFrame::Backfill { after_seq: 3 }).await;
    for seq in 4..=10 {
        assert_eq!(client.event().await, seq);
    }
    assert_eq!(client.server_frame().await, ServerFrame::BackfillComplete { count: 7, current_seq: 10 });
    rig.store.append(&rig.coop, 1);
    assert_eq!(client.event().await, 11);
    // Nothing to send, and a position beyond the current one, both complete at once.
    client.send(ClientFrame::Backfill { after_seq: 11 }).await;
    assert_eq!(client.server_frame().await, ServerFrame::BackfillComplete { count: 0, current_seq: 11 });
    client.send(ClientFrame::Backfill { after_seq: 500 }).await;
    assert_eq!(client.server_frame().await, ServerFrame::BackfillComplete { count: 0, current_seq: 11 });
}

#[tokio::test(start_paused = true)]
async fn backfill_before_authentication_is_an_error() {
    let rig = Rig::new(WsConfig::default());
    let mut client = rig.connect(Some(rig.coop.clone()));
    client.send(ClientFrame::Backfill { after_seq: 0 }).await;
    assert!(matches!(client.server_frame().await, ServerFrame::Error { .. }));
    assert_eq!(client.auth(rig.member_token()).await, 0);
}

#[tokio::test(start_paused = true)]
async fn backfill_into_pruned_events_is_truncated() {
    let rig = Rig::new(small_batches());
    rig.store.append(&rig.coop, 10);
    rig.store.prune_below(&rig.coop, 6);
    let mut client = rig.connect(Some(rig.coop.clone()));
    assert_eq!(client.auth(rig.member_token()).await, 10);
    client.send(ClientFrame::Backfill { after_seq: 2 }).await;
    assert_eq!(client.server_frame().await, ServerFrame::BackfillTruncated { oldest_seq: 6 });
    rig.store.append(&rig.coop, 1);
    assert_eq!(client.event().await, 11, "live delivery goes on from the current position");
    // From the oldest retained event on, a backfill works.
    client.send(ClientFrame::Backfill { after_seq: 5 }).await;
    for seq in 6..=11 {
        assert_eq!(client.event().await, seq);
    }
    assert_eq!(client.server_frame().await, ServerFrame::BackfillComplete { count: 6, current_seq: 11 });
}

#[tokio::test(start_paused = true)]
async fn live_events_during_a_backfill_follow_it_without_gap_or_duplicate() {
    let rig = Rig::new(small_batches());
    rig.store.append(&rig.coop, 20);
    rig.store.set_read_delay(Duration::from_millis(10));
    let mut client = rig.connect(Some(rig.coop.clone()));
    assert_eq!(client.auth(rig.member_token()).await, 20);
    client.send(ClientFrame::Backfill { after_seq: 0 }).await;
    let producer = tokio::spawn({
        let (store, coop) = (rig.store.clone(), rig.coop.clone());
        async move {
            for _ in 0..30 {
                tokio::time::sleep(Duration::from_millis(3)).await;
                store.append(&coop, 1);
            }
        }
    });
    let mut seen = Vec::new();
    let mut complete_at = None;
    while seen.len() < 50 {
        match client.server_frame().await {
            ServerFrame::Event { seq, .. } => seen.push(seq),
            ServerFrame::BackfillComplete { count, current_seq } => {
                assert_eq!(count, current_seq);
                assert_eq!(seen.len() as u64, current_seq, "complete follows exactly the backfilled events");
                complete_at = Some(current_seq);
            }
            other => panic!("{other:?}"),
        }
    }
    producer.await.unwrap();
    assert_eq!(seen, (1..=50).collect::<Vec<_>>());
    let target = complete_at.expect("BackfillComplete");
    assert!(target >= 20, "the target is at least the position at the request");
    assert!(rig.store.reads_after() > 5, "the backfill really ran while events were committed");
}

#[tokio::test(start_paused = true)]
async fn a_second_backfill_while_one_runs_is_refused() {
    // A small queue and a socket that holds one frame keep the first backfill running.
    let rig = Rig::new(WsConfig { queue_capacity: 4, ..small_batches() });
    rig.store.append(&rig.coop, 12);
    let mut client = rig.connect_with(Some(rig.coop.clone()), None, 1);
    client.auth(rig.member_token()).await;
    client.send(ClientFrame::Backfill { after_seq: 0 }).await;
    client.send(ClientFrame::Backfill { after_seq: 5 }).await;
    let mut events = Vec::new();
    let mut errors = 0;
    loop {
        match client.server_frame().await {
            ServerFrame::Event { seq, .. } => events.push(seq),
            ServerFrame::Error { message } => {
                assert!(message.contains("already in progress"), "{message}");
                errors += 1;
            }
            ServerFrame::BackfillComplete { count: 12, current_seq: 12 } => break,
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((events, errors), ((1..=12).collect::<Vec<_>>(), 1));
    client.send(ClientFrame::Ping).await;
    assert_eq!(client.server_frame().await, ServerFrame::Pong, "nothing else was sent");
}

#[tokio::test(start_paused = true)]
async fn a_consumer_that_does_not_read_is_closed_as_lagged() {
    let rig = Rig::new(WsConfig { queue_capacity: 8, ..WsConfig::default() });
    let mut client = rig.connect_with(Some(rig.coop.clone()), None, 1);
    client.auth(rig.member_token()).await;
    for _ in 0..20 {
        rig.store.append(&rig.coop, 1);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // What the socket took before the limit, in order, then the close.
    let mut seen = Vec::new();
    let close = loop {
        match client.next().await {
            Seen::Server(ServerFrame::Event { seq, .. }) => seen.push(seq),
            other => break other,
        }
    };
    assert_eq!(close, Seen::Close(1013, "lagged".into()));
    assert_eq!(seen, (1..=seen.len() as u64).collect::<Vec<_>>(), "a prefix, never a hole");
    assert!(seen.len() < 9, "closed once more than 8 events were pending, took {}", seen.len());
    assert_eq!(client.next().await, Seen::Gone);
}

#[tokio::test(start_paused = true)]
async fn a_reader_just_within_the_limit_is_kept() {
    let rig = Rig::new(WsConfig { queue_capacity: 8, ..WsConfig::default() });
    let mut client = rig.connect_with(Some(rig.coop.clone()), None, 1);
    client.auth(rig.member_token()).await;
    for round in 0..5u64 {
        // Bursts of 8 (the limit) that the client reads before the next burst.
        rig.store.append(&rig.coop, 8);
        for seq in 1..=8 {
            assert_eq!(client.event().await, round * 8 + seq);
        }
    }
}

#[tokio::test(start_paused = true)]
async fn shutdown_sends_its_frame_and_closes_and_later_sockets_get_it_at_once() {
    let rig = Rig::new(WsConfig::default());
    let mut client = rig.connect(Some(rig.coop.clone()));
    client.auth(rig.member_token()).await;
    let handle = rig.state.shutdown_handle();
    let drain = tokio::spawn({
        let handle = handle.clone();
        async move { handle.shutdown("maintenance", Some(1500), Duration::from_secs(5)).await }
    });
    assert_eq!(
        client.server_frame().await,
        ServerFrame::Shutdown { reason: "maintenance".into(), reconnect_after_ms: Some(1500) }
    );
    assert_eq!(client.next().await, Seen::Close(1001, "shutdown".into()));
    assert_eq!(client.next().await, Seen::Gone);
    assert_eq!(drain.await.unwrap(), 0);

    let mut late = rig.connect(Some(rig.coop.clone()));
    assert!(matches!(late.server_frame().await, ServerFrame::Shutdown { reconnect_after_ms: Some(1500), .. }));
    assert_eq!(late.next().await, Seen::Close(1001, "shutdown".into()));
}

#[tokio::test(start_paused = true)]
async fn shutdown_gives_up_on_a_socket_that_does_not_read_at_the_deadline() {
    let rig = Rig::new(WsConfig::default());
    let client = rig.connect_with(Some(rig.coop.clone()), None, 1);
    let mut client = client;
    client.auth(rig.member_token()).await;
    rig.store.append(&rig.coop, 50);
    tokio::time::sleep(Duration::from_millis(5)).await;
    let started = Instant::now();
    rig.state.shutdown_handle().shutdown("stop", None, Duration::from_secs(2)).await;
    assert!(started.elapsed() <= Duration::from_secs(2));
    tokio::time::timeout(Duration::from_millis(10), &mut client.task).await.expect("ended at the deadline").unwrap();
    assert_eq!(rig.state.shutdown_handle().active_connections(), 0);
}

#[tokio::test(start_paused = true)]
async fn pings_are_answered_and_bad_frames_leave_the_socket_open() {
    let rig = Rig::new(WsConfig::default());
    let mut client = rig.connect(Some(rig.coop.clone()));
    client.auth(rig.member_token()).await;
    client.send(ClientFrame::Ping).await;
    assert_eq!(client.server_frame().await, ServerFrame::Pong);
    for raw in [r#"{nope"#, r#"{"type":"Subscribe"}"#, r#"{"type":"Backfill","after_seq":"x"}"#] {
        client.send_raw(Frame::Text(raw.into())).await;
        match client.server_frame().await {
            ServerFrame::Error { message } => assert!(message.starts_with("malformed frame"), "{message}"),
            other => panic!("{other:?}"),
        }
    }
    rig.store.append(&rig.coop, 1);
    assert_eq!(client.event().await, 1);
    client.send(ClientFrame::Ping).await;
    assert_eq!(client.server_frame().await, ServerFrame::Pong);
}

/// A binary frame, and whatever the socket layer refuses, end the connection with the close
/// code RFC 6455 gives it (INTERFACE.md §9), after anything already queued.
#[tokio::test(start_paused = true)]
async fn binary_frames_and_protocol_violations_close_with_their_code() {
    let rig = Rig::new(WsConfig::default());
    let mut client = rig.connect(Some(rig.coop.clone()));
    client.auth(rig.member_token()).await;
    client.send_raw(Frame::Binary(Bytes::from_static(b"\x00"))).await;
    assert_eq!(client.next().await, Seen::Close(1003, "binary frames are not supported".into()));
    for (code, reason) in [(1002, "protocol error"), (1007, "invalid UTF-8"), (1009, "message too big")] {
        let mut client = rig.connect(Some(rig.coop.clone()));
        client.auth(rig.member_token()).await;
        client.send_raw(Frame::Violation { code, reason }).await;
        assert_eq!(client.next().await, Seen::Close(code, reason.into()));
    }
}

#[tokio::test(start_paused = true)]
async fn a_client_close_ends_the_connection_and_its_subscription() {
    let rig = Rig::new(WsConfig::default());
    let mut client = rig.connect(Some(rig.coop.clone()));
    client.auth(rig.member_token()).await;
    assert_eq!(rig.state.shared.hub.active_coops(), 1);
    client.send_raw(Frame::close(1000, "bye")).await;
    (&mut client.task).await.unwrap();
    assert_eq!(rig.state.shared.hub.active_coops(), 0);
    assert_eq!(rig.state.shutdown_handle().active_connections(), 0);
}

#[tokio::test(start_paused = true)]
async fn old_events_come_from_the_store_and_recent_ones_from_the_cache() {
    let rig = Rig::new(WsConfig { read_batch: 4, cache_events: 4, ..WsConfig::default() });
    rig.store.append(&rig.coop, 30);
    let mut clients = Vec::new();
    for _ in 0..10 {
        let mut client = rig.connect(Some(rig.coop.clone()));
        client.auth(rig.member_token()).await;
        clients.push(client);
    }
    let before = rig.store.reads_after();
    rig.store.append(&rig.coop, 3);
    for client in &mut clients {
        for seq in 31..=33 {
            assert_eq!(client.event().await, seq);
        }
    }
    assert_eq!(rig.store.reads_after() - before, 1, "ten subscribers, one read");
    // A backfill older than the cache reads the store, in batches.
    clients[0].send(ClientFrame::Backfill { after_seq: 0 }).await;
    for seq in 1..=33 {
        assert_eq!(clients[0].event().await, seq);
    }
    assert_eq!(clients[0].server_frame().await, ServerFrame::BackfillComplete { count: 33, current_seq: 33 });
    assert!(rig.store.reads_after() - before >= 8);
}

#[test]
fn metrics_count_connections_deliveries_and_lagged_disconnects() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
        runtime.block_on(async {
            let rig = Rig::new(WsConfig { queue_capacity: 4, ..WsConfig::default() });
            let mut reader = rig.connect(Some(rig.coop.clone()));
            reader.auth(rig.member_token()).await;
            let mut stuck = rig.connect_with(Some(rig.coop.clone()), None, 1);
            stuck.auth(rig.member_token()).await;
            for _ in 0..10 {
                rig.store.append(&rig.coop, 1);
                tokio::time::sleep(Duration::from_millis(1)).await;
                reader.event().await;
            }
            while stuck.next().await != Seen::Gone {}
            drop(reader);
            tokio::time::sleep(Duration::from_millis(1)).await;
        });
    });
    let values: std::collections::HashMap<String, DebugValue> = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| (key.key().name().to_owned(), value))
        .collect();
    assert_eq!(values["icn_gateway_ws_connections_total"], DebugValue::Counter(2));
    assert_eq!(values["icn_gateway_ws_lagged_disconnects_total"], DebugValue::Counter(1));
    let DebugValue::Counter(delivered) = values["icn_gateway_ws_events_delivered_total"] else { panic!() };
    assert!((10..=13).contains(&delivered), "10 to the reader, a few to the stuck one: {delivered}");
    assert_eq!(values["icn_gateway_ws_connections_active"], DebugValue::Gauge(0.0.into()));
    assert!(
        !values.contains_key("icn_network_connections_active"),
        "that family is the gateway's backend connections, not its sockets"
    );
}

// ---------------------------------------------------------------------------------------------
// Property: whatever the interleaving of commits, reads, backfills and reconnects, a client that
// applies the protocol's rules ends with exactly the store's sequence.

#[derive(Debug, Clone)]
enum Op {
    /// Commit this many events in one transaction.
    Append(u64),
    /// Let the server run, then read at most this many available frames.
    Read(usize),
    /// Ask for a backfill from the last applied event.
    Backfill,
    /// Drop the socket, connect again, authenticate and backfill from the last applied event
    /// (also what the client does after a lagged close).
    Reconnect,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1..6u64).prop_map(Op::Append),
        4 => (0..12usize).prop_map(Op::Read),
        1 => Just(Op::Backfill),
        1 => Just(Op::Reconnect),
    ]
}

/// The client side of the protocol: apply an event when it is the next one; while a backfill
/// is outstanding, events already applied (re-sent) and events ahead (live events queued before
/// the backfill was processed) are expected and skipped; outside a backfill either one is a
/// protocol violation.
#[derive(Debug, Default)]
struct Model {
    applied: Vec<u64>,
    backfill_after: Option<u64>,
}

impl Model {
    fn last(&self) -> u64 {
        self.applied.last().copied().unwrap_or(0)
    }

    fn on_frame(&mut self, frame: ServerFrame) -> Result<(), String> {
        match frame {
            ServerFrame::Event { seq, event } => {
                if event.data != json!({ "n": seq }) {
                    return Err(format!("event {seq} carries {}", event.data));
                }
                let last = self.last();
                if seq == last + 1 {
                    self.applied.push(seq);
                } else if self.backfill_after.is_none() {
                    return Err(format!("event {seq} after {last} outside a backfill"));
                }
            }
            ServerFrame::BackfillComplete { count, current_seq } => {
                let after = self.backfill_after.take().ok_or("BackfillComplete without a request")?;
                if count != current_seq - after {
                    return Err(format!("count {count} for ({after}, {current_seq}]"));
                }
                if self.last() != current_seq {
                    return Err(format!("backfill to {current_seq} left the client at {}", self.last()));
                }
            }
            other => return Err(format!("unexpected {other:?}")),
        }
        Ok(())
    }
}

/// One socket of the model client: connects, authenticates and (after the first time) asks for
/// a backfill from the last applied event, as a reconnecting client does.
async fn connect_model(rig: &Rig, model: &mut Model, first: bool, buffer: usize) -> Client {
    let mut client = rig.connect_with(Some(rig.coop.clone()), None, buffer);
    client.auth(rig.member_token()).await;
    if !first {
        model.backfill_after = Some(model.last());
        client.send(ClientFrame::Backfill { after_seq: model.last() }).await;
    }
    client
}

/// What a model client makes of one frame: `Ok(false)` when the server closed the socket.
fn model_frame(model: &mut Model, frame: Option<Frame>) -> Result<bool, String> {
    match frame {
        Some(Frame::Text(text)) => model.on_frame(serde_json::from_str(text.as_str()).unwrap()).map(|()| true),
        Some(Frame::Close { code: 1013, .. }) | None => {
            // Lagged (or gone): reconnect and backfill, as INTERFACE.md tells clients to.
            model.backfill_after = None;
            Ok(false)
        }
        Some(other) => Err(format!("unexpected {other:?}")),
    }
}

async fn run_model(ops: Vec<Op>, queue_capacity: usize, buffer: usize, read_delay_ms: u64) -> Result<(), String> {
    let rig = Rig::new(WsConfig { read_batch: 3, cache_events: 5, queue_capacity, ..WsConfig::default() });
    rig.store.set_read_delay(Duration::from_millis(read_delay_ms));
    let mut model = Model::default();
    let mut client = connect_model(&rig, &mut model, true, buffer).await;
    let mut open = true;
    for op in ops {
        if !open {
            client = connect_model(&rig, &mut model, false, buffer).await;
            open = true;
        }
        match op {
            Op::Append(n) => {
                rig.store.append(&rig.coop, n);
            }
            Op::Read(n) => {
                tokio::time::sleep(Duration::from_millis(1)).await;
                for _ in 0..n {
                    let frame = match client.from_server.try_recv() {
                        Ok(frame) => Some(frame),
                        Err(TryRecvError::Empty) => break,
                        Err(TryRecvError::Closed) => None,
                    };
                    if !model_frame(&mut model, frame)? {
                        open = false;
                        break;
                    }
                }
            }
            Op::Backfill => {
                if model.backfill_after.is_none() {
                    let request = serde_json::to_string(&ClientFrame::Backfill { after_seq: model.last() }).unwrap();
                    if client.to_server.send(Ok(Frame::Text(request.into()))).await.is_ok() {
                        model.backfill_after = Some(model.last());
                    } else {
                        open = false; // closed as lagged; the close frame is still unread
                    }
                }
            }
            Op::Reconnect => open = false,
        }
    }
    let total = rig.store.append(&rig.coop, 1);
    let drained = tokio::time::timeout(Duration::from_secs(60), async {
        while model.last() < total || model.backfill_after.is_some() {
            if !open {
                client = connect_model(&rig, &mut model, false, buffer).await;
                open = true;
            }
            open = model_frame(&mut model, client.from_server.next().await)?;
        }
        Ok::<_, String>(())
    });
    drained.await.map_err(|_| format!("stuck at {} of {total}", model.last()))??;
    if model.applied != (1..=total).collect::<Vec<_>>() {
        return Err(format!("applied {:?}", model.applied));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn a_client_ends_with_exactly_the_stores_sequence(
        ops in proptest::collection::vec(op(), 1..40),
        queue_capacity in 2..40usize,
        buffer in 1..8usize,
        read_delay_ms in 0..3u64,
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap();
        let outcome = runtime.block_on(run_model(ops, queue_capacity, buffer, read_delay_ms));
        prop_assert!(outcome.is_ok(), "{}", outcome.unwrap_err());
    }
}
