//! Fuzz target `did`: the property `gateway_fuzz::did` (see crates/gateway-fuzz).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gateway_fuzz::did(data));
