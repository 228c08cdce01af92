//! REST routing and the Authorization header; oracles: gatewayd::fuzzing::rest.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gatewayd::fuzzing::rest(data));
