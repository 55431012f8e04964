//! Quotas: how many requests a key may make at once and how fast that allowance refills.
//!
//! A quota is a plain `Copy` value so that a limiter can be handed a different one on every
//! check (which is how a DID changes tier at once). It cannot be zero: a zero burst or a zero
//! refill interval has no sensible meaning, so the types rule them out instead of the checks.
//! This module does not decide which quota applies to whom; see [`crate::policy`].

use std::num::{NonZeroU32, NonZeroU64};
use std::time::Duration;

const NANOS_PER_SECOND: u64 = 1_000_000_000;

/// A token bucket: up to `burst` requests at once, refilled by one token every
/// [`replenish_interval`](Quota::replenish_interval).
///
/// Refill intervals are kept in whole nanoseconds, rounded down and never below one, so a
/// quota of `n` per period refills at most a few nanoseconds per period faster than exact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Quota {
    burst: NonZeroU32,
    interval: NonZeroU64,
}

impl Quota {
    /// `burst` requests at once, one more every `replenish_one_per`; `None` when that interval
    /// is zero, because an instantly refilling bucket is no limit at all.
    pub const fn with_period(burst: NonZeroU32, replenish_one_per: Duration) -> Option<Self> {
        let nanos = replenish_one_per.as_nanos();
        let nanos = if nanos > u64::MAX as u128 { u64::MAX } else { nanos as u64 };
        match NonZeroU64::new(nanos) {
            Some(interval) => Some(Self { burst, interval }),
            None => None,
        }
    }

    /// `burst` requests at once, refilled at `per_second` tokens per second.
    pub const fn with_burst_and_rate(burst: NonZeroU32, per_second: NonZeroU32) -> Self {
        Self::spread(burst, per_second, NANOS_PER_SECOND)
    }

    /// `n` requests per second, all of which may come at once.
    pub const fn per_second(n: NonZeroU32) -> Self {
        Self::spread(n, n, NANOS_PER_SECOND)
    }

    /// `n` requests per minute, all of which may come at once.
    pub const fn per_minute(n: NonZeroU32) -> Self {
        Self::spread(n, n, 60 * NANOS_PER_SECOND)
    }

    /// `n` requests per hour, all of which may come at once.
    pub const fn per_hour(n: NonZeroU32) -> Self {
        Self::spread(n, n, 3_600 * NANOS_PER_SECOND)
    }

    /// `burst` at once, `rate` tokens per `period_nanos`.
    const fn spread(burst: NonZeroU32, rate: NonZeroU32, period_nanos: u64) -> Self {
        let nanos = period_nanos / rate.get() as u64;
        let interval = match NonZeroU64::new(nanos) {
            Some(interval) => interval,
            None => NonZeroU64::MIN,
        };
        Self { burst, interval }
    }

    /// How many requests may be made at once from a full bucket.
    pub const fn burst(self) -> NonZeroU32 {
        self.burst
    }

    /// The time it takes to refill one token.
    pub const fn replenish_interval(self) -> Duration {
        Duration::from_nanos(self.interval.get())
    }

    /// The refill interval in nanoseconds.
    pub(crate) const fn interval_nanos(self) -> u64 {
        self.interval.get()
    }

    /// The time an empty bucket takes to refill completely, in nanoseconds.
    pub(crate) const fn window_nanos(self) -> u64 {
        self.interval.get().saturating_mul(self.burst.get() as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn nz(n: u32) -> NonZeroU32 {
        NonZeroU32::new(n).unwrap()
    }

    #[test]
    fn per_minute_spreads_refill_over_the_minute() {
        let q = Quota::per_minute(nz(1000));
        assert_eq!(q.burst().get(), 1000);
        assert_eq!(q.replenish_interval(), Duration::from_millis(60));
        assert_eq!(q.window_nanos(), 60 * NANOS_PER_SECOND);
    }

    #[test]
    fn burst_and_rate_are_independent() {
        let q = Quota::with_burst_and_rate(nz(20), nz(2));
        assert_eq!(q.burst().get(), 20);
        assert_eq!(q.replenish_interval(), Duration::from_millis(500));
        assert_eq!(q.window_nanos(), 10 * NANOS_PER_SECOND);
    }

    #[test]
    fn zero_period_is_rejected() {
        assert_eq!(Quota::with_period(nz(1), Duration::ZERO), None);
        let q = Quota::with_period(nz(3), Duration::from_secs(2)).unwrap();
        assert_eq!(q.window_nanos(), 6 * NANOS_PER_SECOND);
    }

    #[test]
    fn extreme_rates_stay_nonzero() {
        let q = Quota::per_second(nz(u32::MAX));
        assert_eq!(q.interval_nanos(), 1);
        let q = Quota::with_period(nz(u32::MAX), Duration::MAX).unwrap();
        assert_eq!(q.window_nanos(), u64::MAX);
    }
}
