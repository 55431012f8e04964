//! The payment velocity limiter: at most N payments per payer in any sliding hour.
//!
//! Unlike the request limiters this one is exact. Each payer keeps the timestamps of its
//! payments in the last hour (never more than its limit), so no one-hour window, wherever it
//! starts, ever holds more than the limit. Payments are rare next to requests, which is what
//! makes the larger state affordable. Because a payment admitted here can still fail later
//! (for lack of credit, say), an admission is a [`VelocityPermit`] that can be cancelled. This
//! module does not pick the class of a payer; see [`TrustClass::from_score`].

use std::collections::VecDeque;
use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;

use crate::clock::{Clock, SystemClock, now_nanos};
use crate::keyed::{DEFAULT_MAX_KEYS, ceil_secs};
use crate::policy::{LAYER_VELOCITY, TrustClass};
use crate::table::{Expiring, Table};

/// The length of the sliding window.
pub const VELOCITY_WINDOW: Duration = Duration::from_secs(3_600);

const WINDOW_NANOS: u64 = VELOCITY_WINDOW.as_nanos() as u64;

/// A payment was refused because the payer reached its hourly limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("velocity limit exceeded: {count}/{limit} per hour")]
pub struct VelocityDenied {
    /// Payments counted in the last hour. It is zero in the one case where the payer is
    /// refused without being counted: the limiter is full of other active payers.
    pub count: u32,
    /// The payer's hourly limit.
    pub limit: u32,
    /// The time until the oldest counted payment leaves the window.
    pub retry_after: Duration,
}

impl VelocityDenied {
    /// The `Retry-After` value: whole seconds, rounded up, at least one.
    pub fn retry_after_secs(&self) -> u64 {
        ceil_secs(self.retry_after).max(1)
    }
}

/// An admitted payment, counted in its payer's window.
///
/// Dropping the permit keeps the payment counted; [`cancel`](Self::cancel) removes it again
/// when the payment did not go through after all.
#[derive(Debug)]
#[must_use = "dropping a permit keeps the payment counted; cancel it if the payment fails"]
pub struct VelocityPermit<'a> {
    table: &'a Table<Box<str>, Window>,
    did: &'a str,
    at: u64,
    count: u32,
    limit: u32,
}

impl VelocityPermit<'_> {
    /// Payments counted in the last hour, this one included.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The payer's hourly limit.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Un-counts this payment, as if it had never been admitted.
    pub fn cancel(self) {
        let at = self.at;
        self.table.update_existing(self.did, at, |window| {
            if let Some(i) = window.0.iter().rposition(|&t| t == at) {
                window.0.remove(i);
            }
        });
    }
}

/// The admission times of one payer's payments in the last hour, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Window(VecDeque<u64>);

impl Expiring for Window {
    fn idle_at(&self) -> u64 {
        self.0.back().map_or(0, |&last| last.saturating_add(WINDOW_NANOS))
    }
}

/// Counts payments per payer DID over a sliding hour.
///
/// A payer whose window is empty takes no memory: such entries are dropped by
/// [`evict_idle`](Self::evict_idle) and by the insert that needs their room. As with
/// [`KeyedLimiter`](crate::KeyedLimiter), a new payer that finds its shard full of active
/// payers is refused rather than admitted uncounted.
#[derive(Debug)]
pub struct VelocityLimiter<C = SystemClock> {
    table: Table<Box<str>, Window>,
    clock: C,
}

impl<C: Clock> VelocityLimiter<C> {
    /// A limiter tracking up to [`DEFAULT_MAX_KEYS`] payers.
    pub fn new(clock: C) -> Self {
        Self::bounded(clock, DEFAULT_MAX_KEYS)
    }

    /// A limiter tracking up to `max_keys` payers.
    pub fn bounded(clock: C, max_keys: NonZeroUsize) -> Self {
        Self { table: Table::new(max_keys), clock }
    }

    /// Admits and counts one payment by `did` under its class's hourly limit, or refuses it
    /// when the payer already made that many payments in the last hour.
    pub fn check<'a>(&'a self, did: &'a str, class: TrustClass) -> Result<VelocityPermit<'a>, VelocityDenied> {
        self.check_limit(did, class.hourly_limit())
    }

    /// Like [`check`](Self::check), with an explicit hourly limit.
    pub fn check_limit<'a>(&'a self, did: &'a str, limit: NonZeroU32) -> Result<VelocityPermit<'a>, VelocityDenied> {
        let limit = limit.get();
        let now = self.now();
        let decision = self.table.update(did, now, |window| window.admit(now, limit)).unwrap_or_else(|full| {
            Err(VelocityDenied { count: 0, limit, retry_after: Duration::from_nanos(full.retry_after) })
        });
        match decision {
            Ok((at, count)) => Ok(VelocityPermit { table: &self.table, did, at, count, limit }),
            Err(denied) => {
                crate::record_denial(LAYER_VELOCITY);
                Err(denied)
            }
        }
    }

    /// Forgets every payer with no payment in the last hour, returning how many went.
    pub fn evict_idle(&self) -> usize {
        self.table.evict_idle(self.now())
    }

    /// Counts payments `did` made before this limiter existed, each given by how long ago it
    /// was made (the gateway rebuilds every payer's window from the durable ledger at start, so
    /// a restart does not hand out a fresh hour). Ages of an hour or more are ignored. Returns
    /// how many were counted; none when the limiter has no room for the payer.
    pub fn restore(&self, did: &str, ages: impl IntoIterator<Item = Duration>) -> usize {
        let now = self.now();
        let mut times: Vec<u64> = ages
            .into_iter()
            .map(crate::clock::to_nanos)
            .filter(|&age| age < WINDOW_NANOS)
            .map(|age| now - age)
            .collect();
        if times.is_empty() {
            return 0;
        }
        times.sort_unstable();
        let restored = times.len();
        let merged = self.table.update(did, now, |window| {
            let mut all: Vec<u64> = window.0.drain(..).chain(times).collect();
            all.sort_unstable();
            window.0 = all.into();
        });
        if merged.is_ok() { restored } else { 0 }
    }

    /// The limiter's time: its clock shifted by one window, so that payments restored from
    /// before the clock's origin (see [`restore`](Self::restore)) still have a time.
    fn now(&self) -> u64 {
        now_nanos(&self.clock).saturating_add(WINDOW_NANOS)
    }

    /// The number of payers currently tracked.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether no payer is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Window {
    /// Counts a payment at `now` if fewer than `limit` are in the window, returning the
    /// recorded time and the new count.
    fn admit(&mut self, now: u64, limit: u32) -> Result<(u64, u32), VelocityDenied> {
        // Two threads can read the clock in one order and take the lock in the other; never
        // record a time before the latest one keeps the log sorted, and only ever makes a
        // payment count a few nanoseconds longer.
        let now = self.0.back().map_or(now, |&last| last.max(now));
        if let Some(cutoff) = now.checked_sub(WINDOW_NANOS) {
            while self.0.front().is_some_and(|&t| t <= cutoff) {
                self.0.pop_front();
            }
        }
        let count = u32::try_from(self.0.len()).unwrap_or(u32::MAX);
        if count >= limit {
            let oldest = self.0.front().copied().unwrap_or(now);
            return Err(VelocityDenied {
                count,
                limit,
                retry_after: Duration::from_nanos(oldest + WINDOW_NANOS - now),
            });
        }
        self.0.push_back(now);
        Ok((now, count + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn limiter() -> (ManualClock, VelocityLimiter<ManualClock>) {
        let clock = ManualClock::new();
        (clock.clone(), VelocityLimiter::new(clock))
    }

    fn exhaust(limiter: &VelocityLimiter<ManualClock>, did: &str, class: TrustClass) {
        for i in 1..=class.transactions_per_hour() {
            let permit = limiter.check(did, class).unwrap();
            assert_eq!(permit.count(), i);
        }
    }

    #[test]
    fn class_boundaries_set_the_hourly_limit() {
        let (_, limiter) = limiter();
        for (did, score, per_hour) in [
            ("did:key:a", 0.7, 200),
            ("did:key:b", 0.7f64.next_down(), 100),
            ("did:key:c", 0.4, 100),
            ("did:key:d", 0.4f64.next_down(), 50),
            ("did:key:e", 0.1, 50),
            ("did:key:f", 0.1f64.next_down(), 10),
        ] {
            let class = TrustClass::from_score(score);
            exhaust(&limiter, did, class);
            let denied = limiter.check(did, class).unwrap_err();
            assert_eq!((denied.count, denied.limit), (per_hour, per_hour), "{did}");
        }
    }

    #[test]
    fn denial_message_names_count_and_limit() {
        let (clock, limiter) = limiter();
        exhaust(&limiter, "did:key:payer", TrustClass::Isolated);
        clock.advance(Duration::from_secs(60));
        let denied = limiter.check("did:key:payer", TrustClass::Isolated).unwrap_err();
        assert_eq!(denied.to_string(), "velocity limit exceeded: 10/10 per hour");
        assert_eq!(denied.retry_after, Duration::from_secs(3_540));
        assert_eq!(denied.retry_after_secs(), 3_540);
    }

    #[test]
    fn the_window_slides() {
        let (clock, limiter) = limiter();
        let class = TrustClass::Isolated;
        for _ in 0..5 {
            assert!(limiter.check("p", class).is_ok());
        }
        clock.advance(Duration::from_secs(1_800));
        for _ in 0..5 {
            assert!(limiter.check("p", class).is_ok());
        }
        assert!(limiter.check("p", class).is_err());
        // Exactly one hour after the first five, they leave the window.
        clock.advance(Duration::from_secs(1_800));
        for _ in 0..5 {
            assert!(limiter.check("p", class).is_ok());
        }
        let denied = limiter.check("p", class).unwrap_err();
        assert_eq!(denied.count, 10);
        assert_eq!(denied.retry_after, Duration::from_secs(1_800));
    }

    #[test]
    fn a_cancelled_permit_frees_its_slot() {
        let (_, limiter) = limiter();
        let class = TrustClass::Isolated;
        for _ in 0..9 {
            assert!(limiter.check("p", class).is_ok());
        }
        let last = limiter.check("p", class).unwrap();
        assert!(limiter.check("p", class).is_err());
        last.cancel();
        let again = limiter.check("p", class).unwrap();
        assert_eq!(again.count(), 10);
    }

    #[test]
    fn cancelling_the_only_payment_forgets_the_payer() {
        let (_, limiter) = limiter();
        let permit = limiter.check("p", TrustClass::Known).unwrap();
        assert_eq!(limiter.len(), 1);
        permit.cancel();
        assert!(limiter.is_empty());
    }

    #[test]
    fn idle_payers_are_evicted_after_an_hour() {
        let (clock, limiter) = limiter();
        let _permit = limiter.check("p", TrustClass::Known).unwrap();
        clock.advance(Duration::from_secs(3_599));
        assert_eq!(limiter.evict_idle(), 0);
        clock.advance(Duration::from_secs(1));
        assert_eq!(limiter.evict_idle(), 1);
        assert!(limiter.is_empty());
    }

    #[test]
    fn a_full_limiter_refuses_new_payers_only() {
        let clock = ManualClock::new();
        let limiter = VelocityLimiter::bounded(clock.clone(), NonZeroUsize::MIN);
        let _permit = limiter.check("p", TrustClass::Known).unwrap();
        clock.advance(Duration::from_secs(600));
        let denied = limiter.check("q", TrustClass::Known).unwrap_err();
        assert_eq!(denied.count, 0);
        assert_eq!(denied.retry_after, Duration::from_secs(3_000));
        assert!(limiter.check("p", TrustClass::Known).is_ok());
    }

    #[test]
    fn restored_payments_count_until_they_leave_the_window() {
        let (clock, limiter) = limiter();
        let ages = (0..10).map(|i| Duration::from_secs(600 + i)).chain([Duration::from_secs(3_600)]);
        assert_eq!(limiter.restore("p", ages), 10);
        let denied = limiter.check("p", TrustClass::Isolated).unwrap_err();
        assert_eq!(denied.count, 10);
        assert_eq!(denied.retry_after, Duration::from_secs(3_600 - 609));
        clock.advance(Duration::from_secs(3_600 - 609));
        assert_eq!(limiter.check("p", TrustClass::Isolated).unwrap().count(), 10);
    }

    #[test]
    fn retry_after_is_never_zero() {
        let (clock, limiter) = limiter();
        exhaust(&limiter, "p", TrustClass::Isolated);
        clock.advance(VELOCITY_WINDOW - Duration::from_nanos(1));
        let denied = limiter.check("p", TrustClass::Isolated).unwrap_err();
        assert_eq!(denied.retry_after, Duration::from_nanos(1));
        assert_eq!(denied.retry_after_secs(), 1);
        clock.advance(Duration::from_nanos(1));
        assert!(limiter.check("p", TrustClass::Isolated).is_ok());
    }
}
