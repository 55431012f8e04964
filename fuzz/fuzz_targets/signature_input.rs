//! Fuzz target `signature_input`: the property `gateway_fuzz::signature_input` (see crates/gateway-fuzz).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gateway_fuzz::signature_input(data));
