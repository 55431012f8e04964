//! The shared vocabulary of the gateway: identifiers, scopes, token claims, money and the
//! contract's error kinds.
//!
//! Everything here is plain data with validation. This crate performs no I/O, knows nothing of
//! HTTP, storage or cryptographic verification, and depends on no other crate of the workspace
//! (an invariant checked by `tests/architecture.rs`).

pub mod amount;
pub mod claims;
pub mod coop;
pub mod currency;
pub mod did;
pub mod error;
pub mod membership;
pub mod page;
pub mod scope;
pub mod time;

pub use amount::Amount;
pub use claims::Claims;
pub use coop::CoopId;
pub use currency::Currency;
pub use did::{Did, DidMethod, DidResolver, Ed25519PublicKey, KeyDidResolver};
pub use error::{AuthorizationDetail, Error, ErrorCode, FieldErrors, RateLimitLayer};
pub use membership::{Membership, MembershipLookup, Role};
pub use page::{PageInfo, PageRequest};
pub use scope::{Scope, ScopeSet};
pub use time::{Clock, ManualClock, SystemClock};
