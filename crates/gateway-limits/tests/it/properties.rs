//! Property tests: the guarantees each limiter promises, checked over arbitrary schedules.

use std::num::{NonZeroU32, NonZeroUsize};
use std::time::Duration;

use gateway_limits::{Clock, KeyedLimiter, ManualClock, Quota, VELOCITY_WINDOW, VelocityLimiter};
use proptest::prelude::*;

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

fn quota_strategy() -> impl Strategy<Value = Quota> {
    (1u32..=20, 1u64..=2_000)
        .prop_map(|(burst, interval_ms)| Quota::with_period(nz(burst), Duration::from_millis(interval_ms)).unwrap())
}

/// Time steps in milliseconds, mostly small so that keys actually hit their limits.
fn advance_strategy() -> impl Strategy<Value = u64> {
    prop_oneof![4 => Just(0u64), 4 => 0u64..200, 1 => 0u64..20_000]
}

proptest! {
    /// Between any two admissions of a key, at most `burst + elapsed / interval` admissions
    /// happen (both ends included), whatever the schedule of checks.
    #[test]
    fn keyed_never_admits_more_than_burst_plus_refill(
        quota in quota_strategy(),
        steps in prop::collection::vec(advance_strategy(), 1..300),
    ) {
        let clock = ManualClock::new();
        let limiter: KeyedLimiter<u8, _> = KeyedLimiter::new(clock.clone());
        let mut admitted = Vec::new();
        for advance in steps {
            clock.advance(Duration::from_millis(advance));
            if limiter.check(&7, quota).is_ok() {
                admitted.push(clock.now());
            }
        }
        let interval = quota.replenish_interval().as_nanos();
        let burst = u128::from(quota.burst().get());
        for (i, first) in admitted.iter().enumerate() {
            for (j, last) in admitted.iter().enumerate().skip(i) {
                let count = (j - i + 1) as u128;
                let refill = (*last - *first).as_nanos() / interval;
                prop_assert!(count <= burst + refill, "{count} admissions in {:?}", *last - *first);
            }
        }
    }

    /// A denial's `retry_after` is exact: waiting that long is enough, and a nanosecond less
    /// is not.
    #[test]
    fn keyed_retry_after_is_exact(
        quota in quota_strategy(),
        steps in prop::collection::vec(advance_strategy(), 1..100),
    ) {
        let clock = ManualClock::new();
        let limiter: KeyedLimiter<u8, _> = KeyedLimiter::new(clock.clone());
        for advance in steps {
            clock.advance(Duration::from_millis(advance));
            if let Err(denial) = limiter.check(&1, quota) {
                clock.advance(denial.retry_after - Duration::from_nanos(1));
                prop_assert!(limiter.check(&1, quota).is_err());
                clock.advance(Duration::from_nanos(1));
                prop_assert!(limiter.check(&1, quota).is_ok());
            }
        }
    }

    /// Evicting idle keys at arbitrary moments never changes a decision: a limiter that evicts
    /// answers exactly like one that never does, for several keys under changing quotas.
    #[test]
    fn keyed_eviction_is_invisible(
        steps in prop::collection::vec(
            (advance_strategy(), 0u8..4, quota_strategy(), prop::bool::weighted(0.2)),
            1..300,
        ),
    ) {
        let clock = ManualClock::new();
        let evicting: KeyedLimiter<u8, _> =
            KeyedLimiter::bounded(clock.clone(), NonZeroUsize::new(4).unwrap());
        let keeping: KeyedLimiter<u8, _> = KeyedLimiter::new(clock.clone());
        for (advance, key, quota, evict) in steps {
            clock.advance(Duration::from_millis(advance));
            if evict {
                evicting.evict_idle();
            }
            prop_assert_eq!(evicting.check(&key, quota), keeping.check(&key, quota));
        }
    }

    /// The velocity limiter admits a payment exactly when fewer than `limit` admitted (and not
    /// cancelled) payments lie in the last hour, and never more than `limit` in any window.
    #[test]
    fn velocity_is_exact_over_every_window(
        limit in 1u32..=8,
        steps in prop::collection::vec(
            (prop_oneof![2 => 0u64..60, 2 => 0u64..900, 1 => 0u64..4_000], prop::bool::weighted(0.2)),
            1..200,
        ),
    ) {
        let hour = VELOCITY_WINDOW;
        let clock = ManualClock::new();
        let limiter = VelocityLimiter::new(clock.clone());
        let mut admitted: Vec<Duration> = Vec::new();
        for (advance_secs, cancel) in steps {
            clock.advance(Duration::from_secs(advance_secs));
            let now = clock.now();
            let in_window: Vec<Duration> =
                admitted.iter().copied().filter(|&t| t + hour > now).collect();
            match limiter.check_limit("did:key:payer", nz(limit)) {
                Ok(permit) => {
                    prop_assert!((in_window.len() as u32) < limit);
                    prop_assert_eq!(permit.count(), in_window.len() as u32 + 1);
                    if cancel {
                        permit.cancel();
                    } else {
                        admitted.push(now);
                    }
                }
                Err(denied) => {
                    prop_assert_eq!(denied.count, in_window.len() as u32);
                    prop_assert_eq!(denied.limit, limit);
                    prop_assert_eq!(denied.retry_after, in_window[0] + hour - now);
                }
            }
        }
        for (i, start) in admitted.iter().enumerate() {
            let in_hour = admitted[i..].iter().filter(|&&t| t < *start + hour).count();
            prop_assert!(in_hour as u32 <= limit, "{in_hour} payments in the hour from {start:?}");
        }
    }

    /// Evicting idle payers at arbitrary moments never changes a velocity decision.
    #[test]
    fn velocity_eviction_is_invisible(
        steps in prop::collection::vec(
            (0u64..1_200, 0u8..3, prop::bool::weighted(0.2), prop::bool::weighted(0.2)),
            1..200,
        ),
    ) {
        let clock = ManualClock::new();
        let evicting = VelocityLimiter::new(clock.clone());
        let keeping = VelocityLimiter::new(clock.clone());
        let dids = ["did:key:a", "did:key:b", "did:key:c"];
        for (advance_secs, payer, evict, cancel) in steps {
            clock.advance(Duration::from_secs(advance_secs));
            if evict {
                evicting.evict_idle();
            }
            let did = dids[usize::from(payer)];
            let a = evicting.check_limit(did, nz(3));
            let b = keeping.check_limit(did, nz(3));
            match (a, b) {
                (Ok(a), Ok(b)) => {
                    prop_assert_eq!(a.count(), b.count());
                    if cancel {
                        a.cancel();
                        b.cancel();
                    }
                }
                (Err(a), Err(b)) => prop_assert_eq!(a, b),
                (a, b) => prop_assert!(false, "decisions differ: {a:?} vs {b:?}"),
            }
        }
    }
}
