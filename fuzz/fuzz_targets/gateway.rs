//! Client messages on a gateway connection, through the worker's path; oracles: gatewayd::fuzzing::gateway.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gatewayd::fuzzing::gateway(data));
