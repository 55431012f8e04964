//! Integration tests of the public API: properties of the limiters under arbitrary schedules,
//! the tower layer, and the denial counter.
//!
//! Everything runs on a `ManualClock`; no test sleeps or depends on wall-clock time.

mod metrics;
mod properties;
mod service;
