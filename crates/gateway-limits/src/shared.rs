//! Limits counted by a backend that several replicas share, and the local cache that keeps
//! clients who are already refused away from it.
//!
//! A [`SharedBackend`] runs the same two algorithms as the local limiters (GCRA per key, a
//! sliding hour of payments per payer) somewhere every replica sees, so a client gets one
//! allowance however many replicas serve it. [`SharedLimits`] puts a [`BlockCache`] in front
//! of it: once the backend has refused a key until some instant, this replica refuses that key
//! by itself until then, and a client hammering a limit costs no round trip.
//!
//! This module does no I/O of its own and decides nothing about what happens when the backend
//! is unavailable: it reports [`BackendUnavailable`] (and counts it in the counter
//! [`crate::MetricNames::rate_limit_backend_errors_total`] names) and the embedding service picks the fallback (the local
//! limiters for request limits, a refusal for logins).

use std::fmt;
use std::future::Future;
use std::num::{NonZeroU32, NonZeroUsize};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, now_nanos};
use crate::keyed::{Admission, DEFAULT_MAX_KEYS, Denial};
use crate::quota::Quota;
use crate::table::{Expiring, Table};
use crate::velocity::VelocityDenied;

/// What a backend operation returns: its answer, or that the backend could not give one.
pub type BackendFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, BackendUnavailable>> + Send + 'a>>;

/// The shared backend did not answer in time or at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the shared limit backend is unavailable: {0}")]
pub struct BackendUnavailable(pub String);

/// Payments admitted by a shared backend, counted until [`SharedBackend::cancel_payments`]
/// takes them back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedPermit {
    /// The backend key of the payer's window.
    pub key: String,
    /// One id per admitted payment, as the backend recorded them.
    pub ids: Vec<String>,
    /// Payments counted in the last hour, these included.
    pub count: u32,
    /// The payer's hourly limit.
    pub limit: u32,
}

/// Rate-limit state kept where every replica sees it.
///
/// Implementations run each call as one atomic step on the backend (one round trip), with the
/// backend's own clock, so replicas whose clocks differ still agree.
pub trait SharedBackend: Send + Sync + fmt::Debug {
    /// One GCRA step for `key` under `quota`, exactly as [`KeyedLimiter::check`] does locally.
    ///
    /// [`KeyedLimiter::check`]: crate::KeyedLimiter::check
    fn check<'a>(&'a self, key: &'a str, quota: Quota) -> BackendFuture<'a, Result<Admission, Denial>>;

    /// Admits and counts `n` payments under `key` when fewer than `limit - n + 1` were made in
    /// the last hour (all or none), as [`VelocityLimiter`](crate::VelocityLimiter) does locally.
    fn admit_payments<'a>(
        &'a self,
        key: &'a str,
        n: NonZeroU32,
        limit: NonZeroU32,
    ) -> BackendFuture<'a, Result<SharedPermit, VelocityDenied>>;

    /// Un-counts the payments of `permit` (their payment did not go through).
    fn cancel_payments<'a>(&'a self, permit: &'a SharedPermit) -> BackendFuture<'a, ()>;

    /// Whether the backend is answering now, for health reports.
    fn is_available(&self) -> bool;
}

/// The instant (clock nanoseconds) until which a key is known to be refused.
#[derive(Debug, Default)]
struct Until(u64);

impl Expiring for Until {
    fn idle_at(&self) -> u64 {
        self.0
    }
}

/// Keys refused by the shared backend, each until the instant the backend said it would admit
/// them again. A key in the cache is refused locally, without a round trip; the backend's
/// answer can only be the same refusal until then, because only admissions move that instant
/// later and a refused key is not admitted. Bounded like the limiters; a key that does not fit
/// simply goes to the backend.
pub struct BlockCache<C> {
    table: Table<str, Until>,
    clock: C,
}

impl<C> fmt::Debug for BlockCache<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlockCache").field("table", &self.table).finish_non_exhaustive()
    }
}

impl<C: Clock> BlockCache<C> {
    /// A cache holding up to `max_keys` refused keys.
    pub fn new(clock: C, max_keys: NonZeroUsize) -> Self {
        Self { table: Table::new(max_keys), clock }
    }

    /// How long `key` stays refused, if it is refused now.
    pub fn refused_for(&self, key: &str) -> Option<Duration> {
        let now = now_nanos(&self.clock);
        let until = self.table.update(key, now, |until| until.0).ok()?;
        (until > now).then(|| Duration::from_nanos(until - now))
    }

    /// Remembers that `key` is refused for `retry_after` from now.
    pub fn refuse(&self, key: &str, retry_after: Duration) {
        let now = now_nanos(&self.clock);
        let until = now.saturating_add(crate::clock::to_nanos(retry_after));
        // A full table keeps no note: the next check asks the backend again.
        let _ = self.table.update(key, now, |entry| entry.0 = entry.0.max(until));
    }

    /// Drops keys whose refusal has run out.
    pub fn evict_idle(&self) -> usize {
        self.table.evict_idle(now_nanos(&self.clock))
    }

    /// How many keys are noted.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether no key is noted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A [`SharedBackend`] behind a [`BlockCache`], counting denials and backend errors by layer.
///
/// Keys are namespaced by layer (`"{layer}:{key}"`) so the layers never share a bucket.
pub struct SharedLimits<C> {
    backend: Arc<dyn SharedBackend>,
    blocked: BlockCache<C>,
}

impl<C> fmt::Debug for SharedLimits<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedLimits").field("backend", &self.backend).field("blocked", &self.blocked).finish()
    }
}

impl<C: Clock> SharedLimits<C> {
    /// Limits counted by `backend`, with a block cache on `clock`.
    pub fn new(backend: Arc<dyn SharedBackend>, clock: C) -> Self {
        Self { backend, blocked: BlockCache::new(clock, DEFAULT_MAX_KEYS) }
    }

    /// One request by `key` under `quota` on `layer` (`ip`, `did`, or another label of the
    /// embedding service's choosing).
    pub async fn check(
        &self,
        layer: &'static str,
        key: &str,
        quota: Quota,
    ) -> Result<Result<Admission, Denial>, BackendUnavailable> {
        let key = format!("{layer}:{key}");
        if let Some(retry_after) = self.blocked.refused_for(&key) {
            crate::record_denial(layer);
            return Ok(Err(Denial { limit: quota.burst().get(), retry_after }));
        }
        let decision = self.backend.check(&key, quota).await.inspect_err(|_| record_backend_error(layer))?;
        if let Err(denial) = &decision {
            self.blocked.refuse(&key, denial.retry_after);
            crate::record_denial(layer);
        }
        Ok(decision)
    }

    /// Admits `n` payments of `payer` under its hourly `limit`, all or none.
    pub async fn admit_payments(
        &self,
        payer: &str,
        n: NonZeroU32,
        limit: NonZeroU32,
    ) -> Result<Result<SharedPermit, VelocityDenied>, BackendUnavailable> {
        let layer = crate::policy::LAYER_VELOCITY;
        let key = format!("{layer}:{payer}");
        if let Some(retry_after) = self.blocked.refused_for(&key) {
            crate::record_denial(layer);
            // The count is the limit: the payer was refused at it and nothing has left since.
            return Ok(Err(VelocityDenied { count: limit.get(), limit: limit.get(), retry_after }));
        }
        let decision =
            self.backend.admit_payments(&key, n, limit).await.inspect_err(|_| record_backend_error(layer))?;
        if let Err(denied) = &decision {
            // Only a payer refused one at a time is refused for sure until then: a batch of n
            // may be refused while a smaller one would still fit.
            if n.get() == 1 {
                self.blocked.refuse(&key, denied.retry_after);
            }
            crate::record_denial(layer);
        }
        Ok(decision)
    }

    /// Gives back the payments of `permit`.
    pub async fn cancel_payments(&self, permit: &SharedPermit) -> Result<(), BackendUnavailable> {
        self.backend.cancel_payments(permit).await.inspect_err(|_| record_backend_error(crate::policy::LAYER_VELOCITY))
    }

    /// Whether the backend is answering now.
    pub fn is_available(&self) -> bool {
        self.backend.is_available()
    }

    /// Drops block notes that have run out.
    pub fn evict_idle(&self) -> usize {
        self.blocked.evict_idle()
    }
}

fn record_backend_error(layer: &'static str) {
    metrics::counter!(crate::metric_names().rate_limit_backend_errors_total, "layer" => layer).increment(1);
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use super::*;
    use crate::KeyedLimiter;
    use crate::clock::ManualClock;
    use crate::velocity::VelocityLimiter;

    /// A backend that is the local limiters on a manual clock, counting its round trips, and
    /// that can be switched off.
    #[derive(Debug)]
    struct LocalBackend {
        keyed: KeyedLimiter<Box<str>, ManualClock>,
        payments: VelocityLimiter<ManualClock>,
        trips: AtomicUsize,
        down: AtomicBool,
        cancelled: Mutex<Vec<SharedPermit>>,
    }

    impl LocalBackend {
        fn new(clock: &ManualClock) -> Self {
            Self {
                keyed: KeyedLimiter::new(clock.clone()),
                payments: VelocityLimiter::new(clock.clone()),
                trips: AtomicUsize::new(0),
                down: AtomicBool::new(false),
                cancelled: Mutex::new(Vec::new()),
            }
        }

        fn trip(&self) -> Result<(), BackendUnavailable> {
            self.trips.fetch_add(1, Ordering::SeqCst);
            if self.down.load(Ordering::SeqCst) { Err(BackendUnavailable("down".into())) } else { Ok(()) }
        }
    }

    impl SharedBackend for LocalBackend {
        fn check<'a>(&'a self, key: &'a str, quota: Quota) -> BackendFuture<'a, Result<Admission, Denial>> {
            Box::pin(async move {
                self.trip()?;
                Ok(self.keyed.check(key, quota))
            })
        }

        fn admit_payments<'a>(
            &'a self,
            key: &'a str,
            n: NonZeroU32,
            limit: NonZeroU32,
        ) -> BackendFuture<'a, Result<SharedPermit, VelocityDenied>> {
            Box::pin(async move {
                self.trip()?;
                // All or none, as a real backend's script does; admitted permits stay counted
                // (cancellation is recorded, not replayed).
                let mut permits = Vec::new();
                for _ in 0..n.get() {
                    match self.payments.check_limit(key, limit) {
                        Ok(permit) => permits.push(permit),
                        Err(denied) => {
                            let count = denied.count - permits.len() as u32;
                            permits.into_iter().for_each(crate::VelocityPermit::cancel);
                            return Ok(Err(VelocityDenied { count, ..denied }));
                        }
                    }
                }
                let count = permits.last().map_or(0, crate::VelocityPermit::count);
                Ok(Ok(SharedPermit { key: key.to_owned(), ids: vec!["p".into()], count, limit: limit.get() }))
            })
        }

        fn cancel_payments<'a>(&'a self, permit: &'a SharedPermit) -> BackendFuture<'a, ()> {
            Box::pin(async move {
                self.trip()?;
                self.cancelled.lock().unwrap().push(permit.clone());
                Ok(())
            })
        }

        fn is_available(&self) -> bool {
            !self.down.load(Ordering::SeqCst)
        }
    }

    fn nz(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    fn shared() -> (ManualClock, Arc<LocalBackend>, SharedLimits<ManualClock>) {
        let clock = ManualClock::new();
        let backend = Arc::new(LocalBackend::new(&clock));
        let limits = SharedLimits::new(backend.clone(), clock.clone());
        (clock, backend, limits)
    }

    #[tokio::test]
    async fn a_refused_key_costs_no_round_trip_until_its_retry_instant() {
        let (clock, backend, limits) = shared();
        let quota = Quota::per_minute(nz(2));
        assert!(limits.check("did", "a", quota).await.unwrap().is_ok());
        assert!(limits.check("did", "a", quota).await.unwrap().is_ok());
        let denial = limits.check("did", "a", quota).await.unwrap().unwrap_err();
        assert_eq!(denial.retry_after, Duration::from_secs(30));
        assert_eq!(backend.trips.load(Ordering::SeqCst), 3);
        clock.advance(Duration::from_secs(10));
        for _ in 0..100 {
            let denial = limits.check("did", "a", quota).await.unwrap().unwrap_err();
            assert_eq!(denial.retry_after, Duration::from_secs(20), "the remaining wait, from the note");
        }
        assert_eq!(backend.trips.load(Ordering::SeqCst), 3, "refused locally, no round trip");
        // Another key, or another layer of the same key, still asks the backend.
        assert!(limits.check("ip", "a", quota).await.unwrap().is_ok());
        assert!(limits.check("did", "b", quota).await.unwrap().is_ok());
        assert_eq!(backend.trips.load(Ordering::SeqCst), 5);
        clock.advance(Duration::from_secs(20));
        assert_eq!(limits.evict_idle(), 1, "the note is dropped once its refusal has run out");
        assert!(limits.check("did", "a", quota).await.unwrap().is_ok(), "admitted again from the retry instant");
        assert_eq!(backend.trips.load(Ordering::SeqCst), 6);
    }

    #[tokio::test]
    async fn an_unavailable_backend_is_reported_not_decided() {
        let (_, backend, limits) = shared();
        backend.down.store(true, Ordering::SeqCst);
        assert!(!limits.is_available());
        let quota = Quota::per_minute(nz(1));
        assert_eq!(limits.check("ip", "a", quota).await, Err(BackendUnavailable("down".into())));
        assert!(limits.admit_payments("p", nz(1), nz(10)).await.is_err());
        backend.down.store(false, Ordering::SeqCst);
        assert!(limits.check("ip", "a", quota).await.unwrap().is_ok(), "nothing was counted while it was down");
    }

    #[tokio::test]
    async fn payments_are_admitted_all_or_none_and_refused_payers_are_noted() {
        let (clock, backend, limits) = shared();
        let permit = limits.admit_payments("p", nz(8), nz(10)).await.unwrap().unwrap();
        assert_eq!(permit.count, 8);
        assert_eq!(permit.key, "velocity:p");
        let refused = limits.admit_payments("p", nz(3), nz(10)).await.unwrap().unwrap_err();
        assert_eq!((refused.count, refused.limit), (8, 10));
        // A batch refusal does not block smaller requests: two more still fit.
        assert_eq!(limits.admit_payments("p", nz(2), nz(10)).await.unwrap().unwrap().count, 10);
        let trips = backend.trips.load(Ordering::SeqCst);
        let refused = limits.admit_payments("p", nz(1), nz(10)).await.unwrap().unwrap_err();
        assert_eq!(refused.count, 10);
        clock.advance(Duration::from_secs(60));
        let noted = limits.admit_payments("p", nz(1), nz(10)).await.unwrap().unwrap_err();
        assert_eq!((noted.count, noted.limit), (10, 10));
        assert_eq!(noted.retry_after, refused.retry_after - Duration::from_secs(60));
        assert_eq!(backend.trips.load(Ordering::SeqCst), trips + 1, "the second refusal came from the note");
        limits.cancel_payments(&permit).await.unwrap();
        assert_eq!(backend.cancelled.lock().unwrap().as_slice(), [permit]);
    }
}
