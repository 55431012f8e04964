//! When to send a failed request again, and after how long.
//!
//! Two independent budgets: rate-limit refusals (429) are retried after the gateway's
//! `Retry-After` (the request had no effect, so any method may be repeated), and transient
//! failures (502/503/504 and transport errors) are retried with bounded exponential backoff —
//! but only for requests that are safe to repeat: reads, `PUT`/`DELETE`, and `POST`s that carry
//! an `Idempotency-Key` (the gateway then answers a repeat with the first answer). A request
//! whose connection could not even be opened never reached the gateway and is always safe.
//! This module only decides; the client sleeps.

use std::time::Duration;

use crate::error::Error;

/// The retry rules of a [`crate::Client`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// How many times a 429 is retried. Off by default: an interactive caller usually prefers
    /// to be told to wait; a batch job turns it on.
    pub rate_limit_retries: u32,
    /// A `Retry-After` longer than this is not waited for; the 429 is returned instead.
    pub max_retry_after: Duration,
    /// How many times a transient failure of a repeatable request is retried.
    pub server_retries: u32,
    /// The first backoff delay; each further retry doubles it.
    pub initial_backoff: Duration,
    /// The backoff never exceeds this.
    pub max_backoff: Duration,
    /// Spread each backoff uniformly over `[delay/2, delay]`, so that many clients failing at
    /// the same moment do not come back at the same moment.
    pub jitter: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            rate_limit_retries: 0,
            max_retry_after: Duration::from_secs(60),
            server_retries: 3,
            initial_backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
            jitter: true,
        }
    }
}

/// Retries made so far for one request, per budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Attempts {
    /// 429s retried.
    pub rate_limited: u32,
    /// Transient failures retried.
    pub transient: u32,
}

impl RetryPolicy {
    /// No retry at all.
    pub fn none() -> Self {
        Self { rate_limit_retries: 0, server_retries: 0, ..Self::default() }
    }

    /// Turns on retrying rate-limit refusals, up to `retries` times per request.
    pub fn with_rate_limit_retries(mut self, retries: u32) -> Self {
        self.rate_limit_retries = retries;
        self
    }

    /// The backoff before transient retry number `retry` (0-based), without jitter:
    /// `initial_backoff × 2^retry`, capped at `max_backoff`.
    pub fn backoff(&self, retry: u32) -> Duration {
        let factor = 2u32.saturating_pow(retry.min(30));
        self.initial_backoff.saturating_mul(factor).min(self.max_backoff)
    }

    /// Whether and after how long to send a request again that failed with `error`.
    /// `repeatable` says whether the request may safely be sent twice (see the module docs).
    /// `attempts` is updated when a retry is granted. `jitter_sample` in `[0, 1)` spreads the
    /// backoff when [`RetryPolicy::jitter`] is on (the client passes a random number; tests a
    /// fixed one).
    pub fn next_delay(
        &self,
        error: &Error,
        repeatable: bool,
        attempts: &mut Attempts,
        jitter_sample: f64,
    ) -> Option<Duration> {
        match error {
            Error::RateLimited { retry_after_secs, .. } => {
                let wait = Duration::from_secs(*retry_after_secs);
                if attempts.rate_limited >= self.rate_limit_retries || wait > self.max_retry_after {
                    return None;
                }
                attempts.rate_limited += 1;
                Some(wait)
            }
            Error::Server { retryable: true, .. } if repeatable => self.transient(attempts, jitter_sample),
            Error::Transport { connect, .. } if repeatable || *connect => self.transient(attempts, jitter_sample),
            _ => None,
        }
    }

    fn transient(&self, attempts: &mut Attempts, jitter_sample: f64) -> Option<Duration> {
        if attempts.transient >= self.server_retries {
            return None;
        }
        let delay = self.backoff(attempts.transient);
        attempts.transient += 1;
        Some(if self.jitter { delay.mul_f64(0.5 + 0.5 * jitter_sample.clamp(0.0, 1.0)) } else { delay })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limited(secs: u64) -> Error {
        Error::RateLimited { message: String::new(), retry_after_secs: secs, layer: None, limit: None, count: None }
    }

    fn unavailable() -> Error {
        Error::Server { status: 503, retryable: true, message: String::new() }
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let policy = RetryPolicy { jitter: false, ..RetryPolicy::default() };
        let delays: Vec<_> = (0..7).map(|n| policy.backoff(n).as_millis()).collect();
        assert_eq!(delays, [200, 400, 800, 1600, 3200, 5000, 5000]);
        assert_eq!(policy.backoff(u32::MAX), Duration::from_secs(5));
    }

    #[test]
    fn transient_failures_are_retried_a_bounded_number_of_times() {
        let policy = RetryPolicy { jitter: false, ..RetryPolicy::default() };
        let mut attempts = Attempts::default();
        let delays: Vec<_> =
            std::iter::from_fn(|| policy.next_delay(&unavailable(), true, &mut attempts, 0.0)).collect();
        assert_eq!(delays, [Duration::from_millis(200), Duration::from_millis(400), Duration::from_millis(800)]);
        assert_eq!(attempts.transient, 3);
    }

    #[test]
    fn non_repeatable_requests_are_not_retried_after_they_may_have_had_an_effect() {
        let policy = RetryPolicy::default();
        let mut attempts = Attempts::default();
        assert_eq!(policy.next_delay(&unavailable(), false, &mut attempts, 0.5), None);
        let reset = Error::Transport { message: "reset".into(), connect: false };
        assert_eq!(policy.next_delay(&reset, false, &mut attempts, 0.5), None);
        // A connection that never opened carried nothing: safe for any request.
        let refused = Error::Transport { message: "refused".into(), connect: true };
        assert!(policy.next_delay(&refused, false, &mut attempts, 0.5).is_some());
    }

    #[test]
    fn permanent_errors_are_never_retried() {
        let policy = RetryPolicy::default().with_rate_limit_retries(5);
        let mut attempts = Attempts::default();
        for error in [
            Error::Server { status: 500, retryable: false, message: String::new() },
            Error::Authentication { message: String::new(), reason: None },
            Error::Validation { code: String::new(), message: String::new(), fields: Default::default() },
        ] {
            assert_eq!(policy.next_delay(&error, true, &mut attempts, 0.0), None, "{error:?}");
        }
    }

    #[test]
    fn rate_limits_honour_retry_after_within_bounds() {
        let mut attempts = Attempts::default();
        assert_eq!(RetryPolicy::default().next_delay(&limited(2), true, &mut attempts, 0.0), None, "off by default");
        let policy = RetryPolicy::default().with_rate_limit_retries(2);
        assert_eq!(policy.next_delay(&limited(2), false, &mut attempts, 0.0), Some(Duration::from_secs(2)));
        assert_eq!(policy.next_delay(&limited(7), false, &mut attempts, 0.0), Some(Duration::from_secs(7)));
        assert_eq!(policy.next_delay(&limited(1), false, &mut attempts, 0.0), None, "budget spent");
        let mut fresh = Attempts::default();
        assert_eq!(policy.next_delay(&limited(3600), true, &mut fresh, 0.0), None, "too long to wait");
    }

    #[test]
    fn jitter_stays_within_half_and_full_delay() {
        let policy = RetryPolicy::default();
        for sample in [0.0, 0.25, 0.999] {
            let mut attempts = Attempts { transient: 2, ..Attempts::default() };
            let delay = policy.next_delay(&unavailable(), true, &mut attempts, sample).unwrap();
            assert!(delay >= Duration::from_millis(400) && delay <= Duration::from_millis(800), "{delay:?}");
        }
    }
}
