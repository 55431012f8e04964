//! Retention of the event outbox: the periodic task that deletes events older than the window.
//!
//! The rule itself (keep the newest `keep_last` of each coop and everything younger than
//! `max_age`, whichever keeps more) is the store's `prune_events`; this module only supplies the
//! clock and the schedule. Clients that ask for pruned events get `BackfillTruncated` from the
//! connection, not from here.

use std::sync::Arc;

use gateway_core::{Clock, Error};
use gateway_domain::ports::EventReads;
use tokio::time::MissedTickBehavior;

use crate::config::Retention;
use crate::metrics::EVENTS_PRUNED;

/// Prunes once: deletes events beyond the newest `keep_last` of their coop that are also older
/// than `max_age` by `clock`. Returns how many were deleted.
pub async fn prune_once(events: &dyn EventReads, clock: &dyn Clock, retention: &Retention) -> Result<u64, Error> {
    let older_than = clock.now_unix_secs().saturating_sub(retention.max_age.as_secs());
    let deleted = events.prune_events(retention.keep_last, older_than).await?;
    metrics::counter!(EVENTS_PRUNED).increment(deleted);
    Ok(deleted)
}

/// Prunes every `retention.interval`, for ever; the binary spawns it (`tokio::spawn`) and aborts
/// it at shutdown. Failures are logged and retried at the next tick: retention is housekeeping,
/// and a store that cannot prune also cannot serve, which the health checks report.
pub async fn run_pruning(events: Arc<dyn EventReads>, clock: Arc<dyn Clock>, retention: Retention) {
    let mut tick = tokio::time::interval(retention.interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match prune_once(events.as_ref(), clock.as_ref(), &retention).await {
            Ok(0) => {}
            Ok(deleted) => tracing::debug!(deleted, "event stream: pruned events beyond the retention window"),
            Err(err) => tracing::warn!("event stream: pruning failed: {err}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakeStore;
    use gateway_core::{CoopId, ManualClock};
    use gateway_domain::ports::EventReads;
    use std::time::Duration;

    #[tokio::test]
    async fn keeps_whichever_rule_keeps_more() {
        let store = FakeStore::new();
        let coop = CoopId::parse("c1").unwrap();
        let clock = ManualClock::at_secs(1_000_000);
        store.set_time(1_000_000);
        store.append(&coop, 5); // seq 1..=5, at t0
        store.set_time(1_000_000 + 3 * 86_400);
        store.append(&coop, 5); // seq 6..=10, three days later
        let retention =
            Retention { keep_last: 2, max_age: Duration::from_secs(7 * 86_400), interval: Duration::from_secs(60) };

        clock.advance_secs(6 * 86_400);
        assert_eq!(prune_once(store.as_ref(), &clock, &retention).await.unwrap(), 0, "all younger than 7 days");

        clock.advance_secs(2 * 86_400); // the first five are now 8 days old
        assert_eq!(prune_once(store.as_ref(), &clock, &retention).await.unwrap(), 5);
        assert_eq!(store.oldest_seq(&coop).await.unwrap(), 6);

        clock.advance_secs(30 * 86_400); // everything is old: the newest two stay
        assert_eq!(prune_once(store.as_ref(), &clock, &retention).await.unwrap(), 3);
        assert_eq!(store.oldest_seq(&coop).await.unwrap(), 9);
        assert_eq!(store.current_seq(&coop).await.unwrap(), 10);
    }

    #[tokio::test(start_paused = true)]
    async fn the_task_prunes_on_its_interval() {
        let store = FakeStore::new();
        let coop = CoopId::parse("c1").unwrap();
        store.set_time(1_000);
        store.append(&coop, 3);
        let clock = Arc::new(ManualClock::at_secs(1_000 + 10 * 86_400));
        let retention = Retention { keep_last: 1, ..Retention::default() };
        let task = tokio::spawn(run_pruning(store.clone(), clock, retention));
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(store.oldest_seq(&coop).await.unwrap(), 3, "the first tick runs at once");
        store.append(&coop, 2);
        tokio::time::sleep(Duration::from_secs(59)).await;
        assert_eq!(store.oldest_seq(&coop).await.unwrap(), 3, "not before the interval");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(store.oldest_seq(&coop).await.unwrap(), 5);
        task.abort();
    }
}
