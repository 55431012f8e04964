//! Monotonic time sources for the limiters.
//!
//! The limiters only ever compare instants, so a clock here reports the time elapsed since an
//! origin of its own choosing rather than a calendar time. This module deliberately offers no
//! wall-clock time: converting a reset delay into a Unix timestamp for a response header is the
//! caller's business (see [`Admission::reset_unix_secs`](crate::Admission::reset_unix_secs)).

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A monotonic time source.
///
/// Limiters take the clock as a type parameter so that tests can drive time by hand with
/// [`ManualClock`] while production code pays nothing for the indirection.
pub trait Clock: Debug + Send + Sync {
    /// The time elapsed since this clock's origin. It must never go backwards.
    fn now(&self) -> Duration;
}

/// A shared clock is a clock, so limiters can hold `Arc<dyn Clock>` when the concrete clock is
/// chosen at run time (the system clock in production, a manual one in tests).
impl<T: Clock + ?Sized> Clock for Arc<T> {
    fn now(&self) -> Duration {
        (**self).now()
    }
}

/// The processor's monotonic clock, measured from the moment the value was created.
///
/// It reads the time-stamp counter through `quanta` (which falls back to the operating
/// system's monotonic clock where the counter is unreliable), because reading
/// `std::time::Instant` goes through `clock_gettime`, which costs a large share of a check's
/// budget (measured in `docs/PERFORMANCE.md`). This is also the clock `governor` uses.
/// Readings taken on different cores can disagree by a few nanoseconds; the limiters treat an
/// instant slightly in the past conservatively.
#[derive(Debug, Clone)]
pub struct SystemClock {
    clock: quanta::Clock,
    origin: quanta::Instant,
}

impl SystemClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        let clock = quanta::Clock::new();
        let origin = clock.now();
        Self { clock, origin }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        self.clock.now().duration_since(self.origin)
    }
}

/// A clock that only moves when told to, for deterministic tests.
///
/// Clones share the same time, so a test keeps one handle and gives another to the limiter.
#[derive(Debug, Clone, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    /// A clock standing at its origin.
    pub fn new() -> Self {
        Self::default()
    }

    /// Moves the clock (and every clone of it) forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.nanos.fetch_add(to_nanos(by), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::SeqCst))
    }
}

/// Converts a duration to whole nanoseconds, saturating: `u64` nanoseconds last 584 years, so
/// saturation only ever affects durations that mean "never" anyway.
pub(crate) fn to_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Reads a clock in the limiters' internal unit.
pub(crate) fn now_nanos(clock: &impl Clock) -> u64 {
    to_nanos(clock.now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_clones_share_time() {
        let clock = ManualClock::new();
        let other = clock.clone();
        assert_eq!(other.now(), Duration::ZERO);
        clock.advance(Duration::from_millis(1500));
        assert_eq!(other.now(), Duration::from_millis(1500));
    }

    #[test]
    fn system_clock_is_monotonic() {
        let clock = SystemClock::new();
        let a = clock.now();
        let b = clock.now();
        assert!(b >= a);
    }

    #[test]
    fn to_nanos_saturates() {
        assert_eq!(to_nanos(Duration::MAX), u64::MAX);
        assert_eq!(to_nanos(Duration::from_micros(3)), 3_000);
    }
}
