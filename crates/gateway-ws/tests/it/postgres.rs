//! Two replicas on one PostgreSQL schema: a client of replica A receives, in order and without
//! gaps, the events written through replica B (LISTEN/NOTIFY wakes A's hub; A reads the outbox by
//! sequence number), and a member removed through replica B loses its sockets on replica A.
//! Runs only when `GATEWAY_TEST_POSTGRES_URL` is set.

use std::sync::Arc;
use std::time::Duration;

use gateway_store::{Store, StoreSpec};
use gateway_ws::WsConfig;
use gateway_ws::protocol::{ClientFrame, ServerFrame};

use crate::support::{Domain, Server, did, postgres_url};

/// Two replicas on one fresh PostgreSQL schema: A serves the stream, B writes through the
/// domain services. `None` (said by `postgres_url`) when the variable is unset.
async fn two_replicas() -> Option<(Server, Domain)> {
    let url = postgres_url().await?;
    let store_a = Arc::new(Store::open(&StoreSpec::Postgres(url.clone())).await.unwrap());
    let store_b = Arc::new(Store::open(&StoreSpec::Postgres(url)).await.unwrap());
    Some((Server::serve(store_a, WsConfig::default(), None).await, Domain::over(store_b).await))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_of_one_replica_receives_the_other_replicas_events_in_order() {
    let Some((replica_a, replica_b)) = two_replicas().await else { return };

    let coop = replica_b.coop("pg-coop").await;
    let mut client = replica_a.connect("/v1/ws/pg-coop").await;
    assert_eq!(client.auth(replica_a.member_token(&coop)).await, 2);
    // Concurrent writers on replica B, so commits interleave.
    let replica_b = Arc::new(replica_b);
    let writers: Vec<_> = (0..4)
        .map(|_| {
            let (replica_b, coop) = (replica_b.clone(), coop.clone());
            tokio::spawn(async move {
                for _ in 0..25 {
                    replica_b.pay(&coop).await;
                }
            })
        })
        .collect();
    for expected in 3..=102 {
        match client.frame().await {
            ServerFrame::Event { seq, event } => {
                assert_eq!(seq, expected);
                assert_eq!((event.event_type.as_str(), event.coop_id.as_str()), ("PaymentCreated", "pg-coop"));
            }
            other => panic!("{other:?}"),
        }
    }
    for writer in writers {
        writer.await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_removed_on_one_replica_loses_its_sockets_on_the_other() {
    let Some((replica_a, replica_b)) = two_replicas().await else { return };

    let coop = replica_b.coop("pg-coop").await;
    let mut removed = replica_a.connect("/v1/ws/pg-coop").await;
    assert_eq!(removed.auth(replica_a.member_token(&coop)).await, 2);
    let mut staying = replica_a.connect("/v1/ws/pg-coop").await;
    assert_eq!(staying.auth(replica_a.token(&did(0), Some(&coop))).await, 2);
    replica_b.pay(&coop).await; // 3
    assert_eq!(removed.event().await.0, 3);
    assert_eq!(staying.event().await.0, 3);

    let started = std::time::Instant::now();
    replica_b.coops.remove_member(&coop, &did(1)).await.unwrap(); // 4
    replica_b.coops.add_member(&coop, &did(2), gateway_core::Role::Member).await.unwrap(); // 5
    assert_eq!(removed.revoked().await, Vec::<u64>::new(), "no event from the removal on");
    assert!(started.elapsed() < Duration::from_secs(1), "shut down after {:?}", started.elapsed());
    assert_eq!(staying.event().await, (4, "MemberRemoved".into()));
    assert_eq!(staying.event().await, (5, "MemberAdded".into()));
    // Still open, and nothing else pending.
    staying.send(&ClientFrame::Ping).await;
    assert_eq!(staying.frame().await, ServerFrame::Pong);
}
