//! PostgreSQL's NOTIFY channels are the database's, whatever the schema: a deployment's
//! replicas hear one another, and never another deployment in another schema of the same
//! database (migration `0024_notify_channels_per_schema.sql`). Runs when
//! `GATEWAY_TEST_POSTGRES_URL` is set.

use std::sync::Arc;
use std::time::Duration;

use gateway_core::CoopId;
use gateway_domain::ports::{EventFeed, EventReads, transaction};
use gateway_store::Store;

use crate::support::{Backend, Fixture, did};

/// Appends one event to `coop` through `store`, as a replica's unit of work does.
async fn append(store: &Store, coop: &CoopId) {
    let coop = coop.clone();
    transaction(store, move |tx| {
        Box::pin(async move { tx.append_event(&coop, "Checked", 1_800_000_000, &serde_json::json!({}).into()).await })
    })
    .await
    .unwrap();
}

/// Waits up to `within` for a signal of `coop` numbered above `above` on `feed`.
async fn heard(
    feed: &mut tokio::sync::broadcast::Receiver<gateway_domain::ports::CoopSignal>,
    coop: &CoopId,
    above: u64,
    within: Duration,
) -> bool {
    tokio::time::timeout(within, async {
        loop {
            match feed.recv().await {
                Ok(signal) if signal.coop_id == *coop && signal.seq > above => return,
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => std::future::pending().await,
            }
        }
    })
    .await
    .is_ok()
}

/// Two deployments in two schemas of one database, each with a coop of the same id and two
/// replicas: each replica hears its own deployment's commits and trust changes, and nothing of
/// the other's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployments_in_two_schemas_do_not_hear_each_other() {
    let Some(a) = Fixture::open(Backend::Postgres).await else { return };
    let Some(b) = Fixture::open(Backend::Postgres).await else { return };
    let a2 = Arc::new(Store::open(&a.spec).await.expect("a second replica of deployment A"));
    let b2 = Arc::new(Store::open(&b.spec).await.expect("a second replica of deployment B"));
    let coop = a.coop("twin", 2).await;
    assert_eq!(b.coop("twin", 2).await, coop);
    let (mut a2_feed, mut b_feed) = (a2.subscribe(), b.store.subscribe());

    // B's replica hears B's other replica: its listener is live, so what it does not hear below
    // was not sent to it.
    let b_before = b.store.current_seq(&coop).await.unwrap();
    append(&b2, &coop).await;
    assert!(heard(&mut b_feed, &coop, b_before, Duration::from_secs(5)).await, "B's replicas hear each other");
    let b_counter = b.store.current_seq(&coop).await.unwrap();

    // A commit of A: A's other replica hears it; B, whose coop of that id has fewer events,
    // hears nothing of it.
    let a_before = a.store.current_seq(&coop).await.unwrap();
    append(&a.store, &coop).await;
    append(&a.store, &coop).await;
    assert!(heard(&mut a2_feed, &coop, a_before, Duration::from_secs(5)).await, "A's replicas hear each other");
    assert!(a_before + 2 > b_counter, "A's coop is now ahead of B's");
    assert!(!heard(&mut b_feed, &coop, b_counter, Duration::from_secs(1)).await, "B heard a commit of deployment A");

    // A trust change of A wakes A's other replica's graph reload, not B's.
    let (a2_trust, b_trust) = (a2.trust_changes(), b.store.trust_changes());
    // Each listener's first connection asks for one reload: taken here.
    for notify in [&a2_trust, &b_trust] {
        let _ = tokio::time::timeout(Duration::from_millis(200), notify.notified()).await;
    }
    b.trust.set_edge(&did(0), &did(1), 0.5).await.unwrap();
    let b_trust_heard = tokio::time::timeout(Duration::from_secs(5), b_trust.notified()).await;
    assert!(b_trust_heard.is_ok(), "B's own trust change reaches B's listener");
    a.trust.set_edge(&did(0), &did(1), 0.7).await.unwrap();
    let a2_trust_heard = tokio::time::timeout(Duration::from_secs(5), a2_trust.notified()).await;
    assert!(a2_trust_heard.is_ok(), "A's replicas hear A's trust changes");
    let b_trust_heard = tokio::time::timeout(Duration::from_secs(1), b_trust.notified()).await;
    assert!(b_trust_heard.is_err(), "B reloaded its trust graph on a change of deployment A");
}
