//! The gateway's cluster state in Redis: what several replicas behind one load balancer must
//! share so that a client sees one gateway.
//!
//! - [`RedisLimits`]: the three rate-limit layers (IP bucket, per-DID minute, velocity hour) as
//!   one atomic server-side Lua script per check, behind `gateway-limits`' [`SharedBackend`];
//! - [`RedisChallengeStore`]: login challenges, consumed by an atomic get-and-delete, behind
//!   `gateway-auth`'s [`ChallengeStore`];
//! - [`RedisNonceStore`]: request-signature nonces, remembered by digest with `SET NX` and
//!   bounded per signer, with a marker that detects a Redis that lost its data, behind
//!   `gateway-auth`'s [`NonceStore`].
//!
//! All of them share one [`Redis`] handle: the `redis` crate's tokio connection manager (one
//! multiplexed connection that reconnects by itself), a time budget per operation (50 ms by
//! default), and the backend's health as every replica reports it. Every key lives under the
//! configured prefix and carries a TTL, so Redis never grows without bound; the one exception
//! is the nonces' epoch marker, a single small key that must outlive every nonce.
//!
//! This crate decides nothing about what happens when Redis is unreachable: each operation
//! answers within its budget, either with Redis's answer or with "unavailable", and the caller
//! falls back (request limits), refuses (logins: 503) or chooses by configuration (velocity).
//!
//! [`SharedBackend`]: gateway_limits::SharedBackend
//! [`ChallengeStore`]: gateway_auth::ChallengeStore
//! [`NonceStore`]: gateway_auth::NonceStore

mod challenges;
mod connection;
mod limits;
mod nonces;

pub use challenges::RedisChallengeStore;
pub use connection::{DEFAULT_BUDGET, DEFAULT_PREFIX, Redis, RedisConfig, Unavailable};
pub use limits::RedisLimits;
pub use nonces::RedisNonceStore;
