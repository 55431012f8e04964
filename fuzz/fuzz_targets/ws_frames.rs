//! Fuzz target `ws_frames`: the property `gateway_fuzz::ws_frames` (see crates/gateway-fuzz).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gateway_fuzz::ws_frames(data));
