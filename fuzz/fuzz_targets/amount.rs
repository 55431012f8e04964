//! Fuzz target `amount`: the property `gateway_fuzz::amount` (see crates/gateway-fuzz).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gateway_fuzz::amount(data));
