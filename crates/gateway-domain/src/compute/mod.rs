//! Compute: the work a cooperative hands to executors, and the executor built into the gateway.
//!
//! Today this holds [`ccl`], the deterministic, fuel-metered interpreter that lets a lone gateway
//! complete CCL tasks itself. It deliberately knows nothing of tasks, their states, claims,
//! signatures, storage or HTTP: those belong to the task service that calls it.

pub mod ccl;
