//! The gateway's profile of RFC 9421 (HTTP Message Signatures) with RFC 9530 `Content-Digest`,
//! INTERFACE.md §11: an Ed25519 signature by the member's DID key over the request's method,
//! authority, path, query and body digest, with a creation time, an expiry, a nonce and the tag
//! `icn-gateway`.
//!
//! This crate is pure: it builds signature bases, signs, verifies and checks digests over a
//! [`Message`] (the parts of a request that can be covered), and knows nothing of HTTP servers or
//! clients, clocks or nonce stores. The gateway's HTTP layer verifies with it, the SDK and
//! `gatewayctl` sign with it, and `gatewayctl verify-request` checks stored evidence offline.
//! Structured Fields are parsed and serialised by the `sfv` crate; the `@signature-params` line
//! of a received signature is the signer's own serialisation of its inner list, parameters in
//! the signer's order, as RFC 9421 requires.

mod base;
mod digest;
mod profile;

pub use base::{Message, signature_base};
pub use digest::{check_content_digest, content_digest};
pub use profile::{
    ACCEPT_SIGNATURE, Failure, Limits, SignOptions, Signed, Verified, evidence_body, is_nonce_char, sign, verify,
    verify_evidence,
};

/// The tag of this profile's signatures: exactly one signature with it is read.
pub const TAG: &str = "icn-gateway";

/// The algorithm name of this profile.
pub const ALG: &str = "ed25519";
