//! Fuzz target `jwt`: the property `gateway_fuzz::jwt` (see crates/gateway-fuzz).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gateway_fuzz::jwt(data));
