//! Fuzz target `request_bodies`: the property `gateway_fuzz::request_bodies` (see crates/gateway-fuzz).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gateway_fuzz::request_bodies(data));
