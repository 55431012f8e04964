//! Integration tests of the HTTP layer: the router is driven with `oneshot`, no sockets.

// Test support is shared between test modules with `pub`; nothing here is an API.
#![allow(unreachable_pub, missing_docs)]

mod auth;
mod authority;
mod compute;
mod coops;
mod decisions;
mod edge;
mod errors;
mod export;
mod governance;
mod headers;
mod idempotency;
mod ledger;
mod limits;
mod listener;
mod listener_tls;
mod log;
mod notifications;
mod signing;
mod support;
mod timeouts;
mod trust;
