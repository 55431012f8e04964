//! Background work of a running gateway: the write probe behind readiness, the built-in
//! compute executor and claim timeouts,
//! limiter eviction, pruning of expired idempotent answers and quotes, the proposal sweeper, notification fan-outs left unexpanded, ledger gauges and the integrity audit
//! behind `icn_ledger_entries_quarantined`, and (when replicas
//! share PostgreSQL) refreshing the trust graph written by other replicas.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::time::Duration;

use gateway_core::Amount;
use gateway_http::AppState;

/// Distinct currency labels exported for the balance gauge; INTERFACE.md caps the label's
/// cardinality at 100 (further currencies are skipped, which is not an error).
const MAX_CURRENCY_LABELS: usize = 100;

/// Starts the periodic tasks in `tasks`; `serve` stops them when it returns.
pub(crate) fn spawn_background(
    tasks: &mut tokio::task::JoinSet<()>,
    state: &AppState,
    trust_changes: Option<std::sync::Arc<tokio::sync::Notify>>,
    builtin_executor: bool,
) {
    if builtin_executor {
        tasks.spawn(state.compute.clone().run_builtin_executor());
    }
    let compute = state.compute.clone();
    tasks.spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            if let Err(err) = compute.expire_claims().await {
                tracing::warn!("expiring compute claims failed: {err}");
            }
        }
    });

    // Readiness follows writes (INTERFACE.md §10): a one-row commit every second keeps the verdict
    // fresh when nobody else writes; the store records every commit's outcome itself.
    let store = state.store_health.clone();
    tasks.spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            // The outcome is recorded by the store; `/readyz` reads it.
            let _ = store.probe_write().await;
        }
    });

    let limits = state.limits.clone();
    tasks.spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(30));
        loop {
            tick.tick().await;
            let evicted = limits.evict_idle();
            tracing::debug!(evicted, "evicted idle rate-limit keys");
        }
    });

    let misbehavior = state.misbehavior.clone();
    tasks.spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            misbehavior.evict_idle();
            // Also computed at each scrape; this keeps it current for other recorders.
            misbehavior.export_quarantined_now();
        }
    });

    let ledger = state.ledger.clone();
    tasks.spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(60));
        loop {
            tick.tick().await;
            match ledger.prune_expired().await {
                Ok(pruned) => tracing::debug!(pruned, "pruned expired idempotent answers and quotes"),
                Err(err) => tracing::warn!("pruning expired idempotent answers and quotes failed: {err}"),
            }
        }
    });

    let ledger = state.ledger.clone();
    tasks.spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(10));
        // The audit runs at the lowest priority (gateway-store's scans): on saturated cores it
        // may outlast its period. The next one then waits a whole period, not none, so that the
        // WAL, which a running audit's snapshot keeps from starting over, gets its turn.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match ledger.unreconciled_accounts().await {
                Ok(count) => {
                    if count > 0 {
                        tracing::error!(count, "ledger accounts do not reconcile with their transactions");
                    }
                    metrics::gauge!("icn_ledger_entries_quarantined").set(count as f64);
                }
                Err(err) => tracing::warn!("could not audit the ledger: {err}"),
            }
        }
    });

    let governance = state.governance.clone();
    tasks.spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            match governance.sweep().await {
                Ok(0) => {}
                Ok(closed) => tracing::info!(closed, "closed proposals whose voting time ended"),
                Err(err) => tracing::warn!("the proposal sweeper failed: {err}"),
            }
        }
    });

    let notifications = state.notifications.clone();
    tasks.spawn(async move {
        // Fan-outs are expanded right after their commit; this catches any whose expansion was
        // cut short (a crash, a failed write), and those of other replicas.
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            if let Err(err) = notifications.expand_pending().await {
                tracing::warn!("expanding notification fan-outs failed: {err}");
            }
        }
    });

    let notifications = state.notifications.clone();
    tasks.spawn(async move {
        // Read notifications go after 30 days, any after 90 (docs/API.md).
        let mut tick = tokio::time::interval(Duration::from_secs(3_600));
        loop {
            tick.tick().await;
            match notifications.prune_old().await {
                Ok(pruned) => tracing::debug!(pruned, "pruned old notifications"),
                Err(err) => tracing::warn!("pruning old notifications failed: {err}"),
            }
        }
    });

    if let Some(changes) = trust_changes {
        // Replicas sharing PostgreSQL: a trust change committed through any replica arrives as
        // a NOTIFY and is reloaded at once (INTERFACE.md §10: within 1 s); the 5 s tick is the
        // safety net for a notification lost while the listener reconnects.
        let trust = state.trust.clone();
        tasks.spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(5));
            loop {
                tokio::select! {
                    () = changes.notified() => {}
                    _ = tick.tick() => {}
                }
                if let Err(err) = trust.refresh().await {
                    tracing::warn!("could not refresh the trust graph: {err}");
                }
            }
        });
    }
}

/// Starts `icn_ledger_balances_total{currency}`: read once before this returns (so the first
/// scrape of a gateway that has just started already has every currency that exists), then
/// again after commits (`signals`: this replica's, and with PostgreSQL every replica's), at
/// most every [`BALANCE_GAUGE_SPACING`], so the gauge follows a payment within a second; and
/// every 10 s whatever happens, in case a signal was missed.
pub(crate) async fn start_balance_gauge(
    tasks: &mut tokio::task::JoinSet<()>,
    ledger: gateway_domain::ledger::Ledger,
    mut signals: tokio::sync::broadcast::Receiver<gateway_domain::ports::CoopSignal>,
) {
    let mut exported = BTreeSet::new();
    read_balance_sums(&ledger, &mut exported).await;
    tasks.spawn(async move {
        let mut signalled = true;
        loop {
            let next = if signalled {
                tokio::time::timeout(Duration::from_secs(10), signals.recv()).await
            } else {
                // The feed is gone: the timer alone.
                tokio::time::sleep(Duration::from_secs(10)).await;
                Ok(Err(tokio::sync::broadcast::error::RecvError::Closed))
            };
            if matches!(next, Ok(Err(tokio::sync::broadcast::error::RecvError::Closed))) {
                signalled = false;
            }
            // Commits come in bursts: one read for all of a burst's signals.
            tokio::time::sleep(BALANCE_GAUGE_SPACING).await;
            while signals.try_recv().is_ok() {}
            read_balance_sums(&ledger, &mut exported).await;
        }
    });
}

/// The least time between two reads of the balance sums after commits.
const BALANCE_GAUGE_SPACING: Duration = Duration::from_millis(250);

async fn read_balance_sums(ledger: &gateway_domain::ledger::Ledger, exported: &mut BTreeSet<String>) {
    match ledger.balance_sums().await {
        Ok(sums) => export_balance_sums(&sums, exported),
        Err(err) => tracing::warn!("could not read ledger sums: {err}"),
    }
}

fn export_balance_sums(
    sums: &[(gateway_core::CoopId, gateway_core::Currency, Amount)],
    exported: &mut BTreeSet<String>,
) {
    let mut per_currency: BTreeMap<String, i128> = BTreeMap::new();
    for (_, currency, sum) in sums {
        *per_currency.entry(currency.to_string()).or_default() += i128::from(sum.micros());
    }
    for (currency, micros) in per_currency {
        if !exported.contains(&currency) {
            if exported.len() >= MAX_CURRENCY_LABELS {
                continue;
            }
            exported.insert(currency.clone());
        }
        metrics::gauge!("icn_ledger_balances_total", "currency" => currency).set(micros as f64 / 1_000_000.0);
    }
}

/// Keeps the shared velocity windows in Redis whole: Redis keeps nothing on disk, so after it
/// restarts (or on a cluster's first start) the first replica to notice seeds every payer's
/// window from the durable ledger, as a single gateway does at start. Checked every second by
/// every replica (one `SET NX`), so the gap after Redis returns is about a second.
pub(crate) async fn seed_velocity(
    limits: std::sync::Arc<gateway_redis::RedisLimits>,
    ledger: gateway_domain::ledger::Ledger,
    clock: std::sync::Arc<dyn gateway_core::Clock>,
) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tick.tick().await;
        if !matches!(limits.claim_seeding().await, Ok(true)) {
            continue;
        }
        let now = clock.now_unix_secs();
        let seeded = match ledger.payments_since(now.saturating_sub(gateway_limits::VELOCITY_WINDOW.as_secs())).await {
            Ok(payments) => {
                let ages: Vec<(String, u64)> =
                    payments.into_iter().map(|(payer, at)| (payer, now.saturating_sub(at))).collect();
                limits.seed_payments(&ages).await.map_err(|e| e.to_string())
            }
            Err(err) => Err(err.to_string()),
        };
        match seeded {
            Ok(count) => tracing::info!(count, "seeded the shared velocity windows in Redis from the ledger"),
            Err(err) => {
                tracing::warn!("seeding the shared velocity windows failed ({err}); another replica will retry");
                let _ = limits.release_seeding().await;
            }
        }
    }
}
