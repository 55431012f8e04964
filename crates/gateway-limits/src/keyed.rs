//! The keyed GCRA limiter: one `u64` per key, any quota per check.
//!
//! The generic cell rate algorithm keeps, per key, the *theoretical arrival time* (TAT): the
//! instant at which the key's bucket would be full again. A request is admitted when pushing
//! the TAT one refill interval further keeps it within one bucket's worth of time from now.
//! Because the state is a point in time rather than a token count, the quota can be chosen
//! anew on each check and a key is provably idle once its TAT has passed. This module does not
//! pick quotas or extract keys; that is [`crate::policy`] and [`crate::service`].

use std::borrow::Borrow;
use std::hash::Hash;
use std::num::NonZeroUsize;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::clock::{Clock, SystemClock, now_nanos};
use crate::quota::Quota;
use crate::table::{Expiring, Table};

/// How many keys a limiter tracks unless told otherwise: 2^20, so that a million live keys fit
/// even though keys never spread perfectly evenly over the shards (each shard holds 1/64 of
/// the bound). That is about 37 MB whatever the key type; see `docs/PERFORMANCE.md`.
pub const DEFAULT_MAX_KEYS: NonZeroUsize = NonZeroUsize::new(1 << 20).unwrap();

/// A request was admitted; the snapshot is what the `X-RateLimit-*` headers need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// The quota's burst, i.e. the most requests the key may make at once.
    pub limit: u32,
    /// How many more requests the key could make right now.
    pub remaining: u32,
    /// The time until the key's bucket is full again.
    pub reset_after: Duration,
}

impl Admission {
    /// The Unix time (whole seconds, rounded up) at which the bucket is full again, given the
    /// current wall-clock time, for the `X-RateLimit-Reset` header.
    pub fn reset_unix_secs(&self, now: SystemTime) -> u64 {
        let reset = (now + self.reset_after).duration_since(UNIX_EPOCH).unwrap_or_default();
        ceil_secs(reset)
    }
}

/// A request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("rate limit exceeded: limit {limit}, retry after {retry_after:?}")]
pub struct Denial {
    /// The quota's burst, so the client can be told which limit it hit.
    pub limit: u32,
    /// The time after which the same request would be admitted.
    pub retry_after: Duration,
}

impl Denial {
    /// The `Retry-After` value: whole seconds, rounded up so a client that obeys it is never
    /// early, and at least one.
    pub fn retry_after_secs(&self) -> u64 {
        ceil_secs(self.retry_after).max(1)
    }
}

/// Rounds a duration up to whole seconds.
pub(crate) fn ceil_secs(d: Duration) -> u64 {
    d.as_secs() + u64::from(d.subsec_nanos() > 0)
}

/// The theoretical arrival time of a key, in clock nanoseconds; zero (the default) is "long
/// ago", which is exactly how an unknown key behaves.
#[derive(Debug, Default)]
struct Tat(u64);

impl Expiring for Tat {
    fn idle_at(&self) -> u64 {
        self.0
    }
}

/// A rate limiter holding one GCRA state per key.
///
/// Checks on different keys mostly take different locks, and each check holds its lock for a
/// single hash-map operation. Idle keys are dropped by [`evict_idle`](Self::evict_idle) and,
/// when a shard fills up, by the insert that needs the room.
///
/// # When the table is full
///
/// A new key that finds its shard full of keys that are still being limited is **denied**,
/// with a `retry_after` equal to the time until the first of those keys goes idle. Admitting it
/// untracked would let a flood of fresh keys (IPv6 addresses are cheap) escape limiting
/// entirely, and evicting a live key would hand that key a fresh burst; refusing keeps every
/// tracked key's guarantee intact and fails closed. Size `max_keys` so this never happens in
/// normal operation, and watch the denial counter.
#[derive(Debug)]
pub struct KeyedLimiter<K, C = SystemClock> {
    table: Table<K, Tat>,
    clock: C,
    metric_layer: Option<&'static str>,
}

impl<K: Hash + Eq, C: Clock> KeyedLimiter<K, C> {
    /// A limiter tracking up to [`DEFAULT_MAX_KEYS`] keys.
    pub fn new(clock: C) -> Self {
        Self::bounded(clock, DEFAULT_MAX_KEYS)
    }

    /// A limiter tracking up to `max_keys` keys.
    pub fn bounded(clock: C, max_keys: NonZeroUsize) -> Self {
        Self { table: Table::new(max_keys), clock, metric_layer: None }
    }

    /// Counts every denial in the denials counter ([`crate::MetricNames`]) under the label
    /// `layer = layer`, so one gateway limiter per layer shows up as its own series.
    pub fn with_metric_layer(mut self, layer: &'static str) -> Self {
        self.metric_layer = Some(layer);
        self
    }

    /// Admits or denies one request by `key` under `quota`.
    ///
    /// The quota may differ between calls for the same key: the key's state is the instant its
    /// bucket is full again, which keeps its meaning under any quota, so a key whose quota
    /// changes is limited by the new one from this very check. What carries over is the time
    /// until the bucket is full: a key that had used half of a per-minute allowance has used
    /// half of its new per-minute allowance, and refills at the new rate from now on.
    pub fn check<Q>(&self, key: &Q, quota: Quota) -> Result<Admission, Denial>
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        let now = now_nanos(&self.clock);
        let decision = self.table.update(key, now, |tat| gcra(tat, now, quota)).unwrap_or_else(|full| {
            Err(Denial { limit: quota.burst().get(), retry_after: Duration::from_nanos(full.retry_after) })
        });
        if decision.is_err()
            && let Some(layer) = self.metric_layer
        {
            crate::record_denial(layer);
        }
        decision
    }

    /// Forgets every key whose bucket has refilled completely, returning how many went.
    ///
    /// Such a key would be admitted with a full bucket anyway, so forgetting it changes no
    /// decision. Call this from a periodic task to bound memory between bursts of new keys.
    pub fn evict_idle(&self) -> usize {
        self.table.evict_idle(now_nanos(&self.clock))
    }

    /// The number of keys currently tracked.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most keys this limiter will track at once.
    pub fn max_keys(&self) -> usize {
        self.table.max_keys()
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &C {
        &self.clock
    }
}

/// One GCRA step at `now` for a unit-cost request.
fn gcra(tat: &mut Tat, now: u64, quota: Quota) -> Result<Admission, Denial> {
    let interval = quota.interval_nanos();
    let window = quota.window_nanos();
    let limit = quota.burst().get();
    let new_tat = tat.0.max(now).saturating_add(interval);
    let allowed_from = new_tat.saturating_sub(window);
    if now < allowed_from {
        return Err(Denial { limit, retry_after: Duration::from_nanos(allowed_from - now) });
    }
    tat.0 = new_tat;
    let used = new_tat - now;
    let remaining = u32::try_from((window - used) / interval).unwrap_or(limit);
    Ok(Admission { limit, remaining, reset_after: Duration::from_nanos(used) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use std::num::NonZeroU32;

    const fn nz(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    fn limiter(max_keys: usize) -> (ManualClock, KeyedLimiter<u32, ManualClock>) {
        let clock = ManualClock::new();
        let limiter = KeyedLimiter::bounded(clock.clone(), NonZeroUsize::new(max_keys).unwrap());
        (clock, limiter)
    }

    #[test]
    fn admission_snapshot_counts_down_and_reports_reset() {
        let (_, limiter) = limiter(16);
        let quota = Quota::per_minute(nz(3));
        let first = limiter.check(&1, quota).unwrap();
        assert_eq!(first, Admission { limit: 3, remaining: 2, reset_after: Duration::from_secs(20) });
        limiter.check(&1, quota).unwrap();
        let third = limiter.check(&1, quota).unwrap();
        assert_eq!(third.remaining, 0);
        assert_eq!(third.reset_after, Duration::from_secs(60));
        let denial = limiter.check(&1, quota).unwrap_err();
        assert_eq!(denial.limit, 3);
        assert_eq!(denial.retry_after, Duration::from_secs(20));
    }

    #[test]
    fn retry_after_secs_rounds_up_and_is_at_least_one() {
        let denial = |retry_after| Denial { limit: 1, retry_after };
        assert_eq!(denial(Duration::from_millis(500)).retry_after_secs(), 1);
        assert_eq!(denial(Duration::ZERO).retry_after_secs(), 1);
        assert_eq!(denial(Duration::from_secs(2)).retry_after_secs(), 2);
        assert_eq!(denial(Duration::from_millis(2001)).retry_after_secs(), 3);
    }

    #[test]
    fn reset_unix_secs_adds_the_delay_to_wall_time() {
        let admission = Admission { limit: 10, remaining: 9, reset_after: Duration::from_millis(1500) };
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        assert_eq!(admission.reset_unix_secs(now), 1_002);
    }

    #[test]
    fn keys_are_limited_independently() {
        let (_, limiter) = limiter(16);
        let quota = Quota::per_minute(nz(1));
        assert!(limiter.check(&1, quota).is_ok());
        assert!(limiter.check(&1, quota).is_err());
        assert!(limiter.check(&2, quota).is_ok());
    }

    #[test]
    fn denied_checks_do_not_consume() {
        let (clock, limiter) = limiter(16);
        let quota = Quota::per_second(nz(1));
        limiter.check(&1, quota).unwrap();
        for _ in 0..5 {
            limiter.check(&1, quota).unwrap_err();
        }
        clock.advance(Duration::from_secs(1));
        assert!(limiter.check(&1, quota).is_ok());
    }

    #[test]
    fn a_new_quota_applies_from_the_next_check() {
        let (clock, limiter) = limiter(16);
        let low = Quota::per_minute(nz(10));
        let high = Quota::per_minute(nz(1000));
        for _ in 0..10 {
            limiter.check(&1, low).unwrap();
        }
        assert!(limiter.check(&1, low).is_err());
        // One second refills 1/60 of the bucket: under the higher quota that is 16 requests.
        clock.advance(Duration::from_secs(1));
        assert!(limiter.check(&1, low).is_err());
        let admission = limiter.check(&1, high).unwrap();
        assert_eq!(admission.limit, 1000);
        assert_eq!(admission.remaining, 15);
    }

    #[test]
    fn evict_idle_drops_only_refilled_keys() {
        let (clock, limiter) = limiter(16);
        limiter.check(&1, Quota::per_second(nz(1))).unwrap();
        limiter.check(&2, Quota::per_minute(nz(1))).unwrap();
        assert_eq!(limiter.len(), 2);
        clock.advance(Duration::from_secs(1));
        assert_eq!(limiter.evict_idle(), 1);
        assert_eq!(limiter.len(), 1);
        assert!(limiter.check(&2, Quota::per_minute(nz(1))).is_err());
    }

    #[test]
    fn full_table_denies_new_keys_until_one_goes_idle() {
        let (clock, limiter) = limiter(1);
        let quota = Quota::per_second(nz(2));
        limiter.check(&1, quota).unwrap();
        let denial = limiter.check(&2, quota).unwrap_err();
        assert_eq!(denial.retry_after, Duration::from_millis(500));
        // The tracked key keeps its state and its limit.
        limiter.check(&1, quota).unwrap();
        assert!(limiter.check(&1, quota).is_err());
        clock.advance(Duration::from_secs(1));
        assert!(limiter.check(&2, quota).is_ok());
        assert_eq!(limiter.len(), 1);
    }

    #[test]
    fn max_keys_never_exceeds_the_bound() {
        for max in [1, 3, 10, 64, 100, 1_000_000, DEFAULT_MAX_KEYS.get()] {
            let (_, limiter) = limiter(max);
            assert!(limiter.max_keys() <= max, "{max}");
            assert!(limiter.max_keys() * 2 > max, "{max}");
        }
    }

    #[test]
    fn borrowed_keys_look_up_owned_ones() {
        let limiter: KeyedLimiter<Box<str>, _> = KeyedLimiter::new(ManualClock::new());
        let quota = Quota::per_minute(nz(1));
        assert!(limiter.check("did:key:a", quota).is_ok());
        assert!(limiter.check("did:key:a", quota).is_err());
        assert_eq!(limiter.len(), 1);
    }
}
