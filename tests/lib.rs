//! Workspace-level tests live beside this file: `architecture.rs` checks the crate graph against
//! the invariants of `docs/ARCHITECTURE.md`. The library itself is empty.
