//! Integration tests of the event stream: real sockets (tokio-tungstenite), the router served on
//! 127.0.0.1:0, and the real store (SQLite in memory and in a file; PostgreSQL when
//! `GATEWAY_TEST_POSTGRES_URL` is set).

// Test support is shared between test modules with `pub`; nothing here is an API.
#![allow(unreachable_pub, missing_docs)]

mod postgres;
mod stream;
mod support;
