//! Rate limiting for the cooperative gateway, usable by any Rust service.
//!
//! Three layers, each built from the same parts:
//!
//! - **per IP** ([`ip_quota`], [`ip_limiter`]): a burst of 20 requests refilled at 2 per second;
//! - **per DID** ([`DidTier`], [`did_limiter`]): 10 to 1000 requests per minute by trust score;
//! - **payment velocity** ([`TrustClass`], [`VelocityLimiter`]): 10 to 200 payments per payer
//!   in any sliding hour, exact, with undo.
//!
//! The request limiters are a sharded [`KeyedLimiter`] running GCRA over one `u64` per key, so
//! the quota can change on every check; the velocity limiter keeps a short log of timestamps
//! per payer. Both read time from a [`Clock`], evict idle keys without changing any decision,
//! and are bounded in the number of keys they hold. [`RateLimitLayer`] applies a keyed limiter
//! (or any [`Decide`]r, such as one that counts in a shared backend) to `http` requests as a
//! tower middleware, and every denial increments a counter through the
//! `metrics` facade, under the names [`MetricNames`] gives (the embedding service's own, set once
//! with [`set_metric_names`]).
//!
//! Replicas that must share one allowance plug a [`SharedBackend`] (the gateway's is Redis, in
//! its own crate) into [`SharedLimits`], which keeps refused keys in a local [`BlockCache`] so
//! they cost no round trip, and reports an unavailable backend instead of deciding for it.
//!
//! This crate deliberately performs no I/O, installs no metrics recorder, spawns no tasks
//! (eviction is a method for the embedding service's own timer) and depends on no web
//! framework or other crate of the gateway.

mod clock;
mod keyed;
pub mod misbehavior;
pub mod policy;
mod quota;
mod service;
mod shared;
mod table;
mod trust;
mod velocity;

pub use clock::{Clock, ManualClock, SystemClock};
pub use keyed::{Admission, DEFAULT_MAX_KEYS, Denial, KeyedLimiter};
pub use misbehavior::{ClientAddress, Misbehavior, QuarantinePolicy, Violation};
pub use policy::{
    DidLimiter, DidTier, IpLimiter, TrustClass, did_limiter, ip_key, ip_limiter, ip_quota, public_read_quota,
};
pub use quota::Quota;
pub use service::{Decide, RateLimit, RateLimitFuture, RateLimitLayer};
pub use shared::{BackendFuture, BackendUnavailable, BlockCache, SharedBackend, SharedLimits, SharedPermit};
pub use trust::{StaticTrustScores, TrustScores};
pub use velocity::{VELOCITY_WINDOW, VelocityDenied, VelocityLimiter, VelocityPermit};

/// The names under which this crate records its metrics through the `metrics` facade. A
/// service embedding the crate sets its own once, at start, with [`set_metric_names`]; until
/// then (or without) the crate records under [`MetricNames::DEFAULT`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MetricNames {
    /// Counter of denials, labelled `layer` (`ip`, `did` or `velocity`).
    pub rate_limit_exceeded_total: &'static str,
    /// Counter of limit checks the shared backend could not answer, labelled `layer`.
    pub rate_limit_backend_errors_total: &'static str,
    /// Counter of protocol violations, labelled `violation_type`.
    pub violations_total: &'static str,
    /// Counter of quarantines started.
    pub auto_bans_total: &'static str,
    /// Gauge of client addresses quarantined now.
    pub quarantined_peers: &'static str,
}

impl MetricNames {
    /// The crate's own names.
    pub const DEFAULT: MetricNames = MetricNames {
        rate_limit_exceeded_total: "rate_limit_exceeded_total",
        rate_limit_backend_errors_total: "rate_limit_backend_errors_total",
        violations_total: "misbehavior_violations_total",
        auto_bans_total: "misbehavior_auto_bans_total",
        quarantined_peers: "misbehavior_quarantined_peers",
    };
}

static METRIC_NAMES: std::sync::OnceLock<MetricNames> = std::sync::OnceLock::new();

/// Sets the names this crate's metrics are recorded under, for the life of the process. The
/// first call wins; a later call with other names is refused (`false`), one with the same names
/// accepted.
pub fn set_metric_names(names: MetricNames) -> bool {
    *METRIC_NAMES.get_or_init(|| names) == names
}

/// The names this crate's metrics are recorded under now.
pub fn metric_names() -> MetricNames {
    METRIC_NAMES.get().copied().unwrap_or(MetricNames::DEFAULT)
}

/// Compiles and runs the README's sample as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// Counts one denial by `layer`.
fn record_denial(layer: &'static str) {
    metrics::counter!(metric_names().rate_limit_exceeded_total, "layer" => layer).increment(1);
}
