//! DID challenge-response login and the gateway's tokens.
//!
//! This crate issues and consumes challenges ([`challenge`]), checks Ed25519 signatures over
//! them in both accepted message forms ([`signature`]), decides which scopes a login may receive
//! ([`policy`]), and issues and verifies HS256 JWTs ([`token`]). [`Authenticator`] runs the
//! verify steps in the order the specification fixes.
//!
//! It knows nothing of HTTP: callers pass parsed request fields and get
//! [`gateway_core::Error`]s back. It does not store cooperatives or members; the scope policy
//! asks a [`gateway_core::MembershipLookup`] implemented by the store.

pub mod challenge;
pub mod error;
pub mod keystore;
pub mod nonce;
pub mod policy;
pub mod signature;
pub mod token;

mod authenticator;
mod cache;

pub use authenticator::{Authenticator, IssuedChallenge, LoginError, LoginRequest, LoginResult};
pub use challenge::{Challenge, ChallengeStore, MemoryChallengeStore};
pub use error::AuthError;
pub use nonce::{MAX_NONCES_PER_SIGNER, MemoryNonceStore, NonceStore, Remembered, SignedNonce};
pub use policy::ScopePolicy;
pub use token::{IssuedToken, TokenConfig, TokenService, VerifiedToken};
