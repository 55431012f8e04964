//! The store conformance suite: the same tests against SQLite in memory, a SQLite file, and
//! PostgreSQL (when `GATEWAY_TEST_POSTGRES_URL` is set; each test gets a fresh schema).

// Test support is shared between test modules with `pub`; nothing here is an API.
#![allow(unreachable_pub, missing_docs)]

mod channels;
mod conformance;
mod files;
mod history;
mod nonces;
mod numbering;
mod pools;
mod races;
mod support;
