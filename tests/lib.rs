//! Workspace-level tests live beside this file: `architecture.rs` checks the crate graph against
//! the invariants of `docs/ARCHITECTURE.md`, and `docs.rs` checks the documents against what they
//! cite and against the code. The library itself is empty.
