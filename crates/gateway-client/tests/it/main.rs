//! Integration tests of the SDK: against the real HTTP router over TCP on 127.0.0.1:0 (an
//! in-memory store, a manual wall clock shared with the client), against small fake servers
//! for retries, and against a fake WebSocket gateway speaking the interface's frames for the
//! subscriber's reconnect, backfill and shutdown rules; and the coop's log (proofs, consistency,
//! audits) against the real router.

// Test support is shared between test modules with `pub`; nothing here is an API.
#![allow(unreachable_pub, missing_docs)]

mod errors;
mod flows;
mod log;
mod login;
mod retries;
mod signing;
mod subscriber;
mod support;
