//! The gateway's domain: ledger, trust, cooperatives, governance, compute and notifications,
//! and the storage ports they need.
//!
//! This crate knows nothing of HTTP, axum, WebSockets or JSON bodies; it speaks in the types of
//! `gateway-core` and its own. Storage is reached only through the capability traits of
//! [`ports`], implemented once per backend.

pub mod compute;
pub mod coops;
pub mod events;
pub mod export;
pub mod governance;
pub mod ledger;
pub mod log;
pub mod notifications;
pub mod ports;
pub mod tasks;
pub mod trust;

pub use ports::StoreHealth;
