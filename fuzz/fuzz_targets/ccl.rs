//! Fuzz target `ccl`: the property `gateway_fuzz::ccl` (see crates/gateway-fuzz).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gateway_fuzz::ccl(data));
