//! Integration tests of the HTTP layer: the router is driven with `oneshot`, no sockets.

// Test support is shared between test modules with `pub`; nothing here is an API.
#![allow(unreachable_pub, missing_docs)]

mod auth;
mod errors;
mod headers;
mod support;
