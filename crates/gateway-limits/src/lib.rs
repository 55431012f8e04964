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
//! to `http` requests as a tower middleware, and every denial increments
//! [`RATE_LIMIT_EXCEEDED_TOTAL`] through the `metrics` facade.
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
pub use service::{RateLimit, RateLimitLayer};
pub use shared::{
    BackendFuture, BackendUnavailable, BlockCache, RATE_LIMIT_BACKEND_ERRORS_TOTAL, SharedBackend, SharedLimits,
    SharedPermit,
};
pub use trust::{StaticTrustScores, TrustScores};
pub use velocity::{VELOCITY_WINDOW, VelocityDenied, VelocityLimiter, VelocityPermit};

/// The counter incremented on every denial, labelled `layer` (`ip`, `did` or `velocity`).
pub const RATE_LIMIT_EXCEEDED_TOTAL: &str = "icn_gateway_rate_limit_exceeded_total";

/// Compiles and runs the README's sample as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

/// Counts one denial by `layer`.
fn record_denial(layer: &'static str) {
    metrics::counter!(RATE_LIMIT_EXCEEDED_TOTAL, "layer" => layer).increment(1);
}
