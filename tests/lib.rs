//! End-to-end and workspace-level tests live in `tests/`.
