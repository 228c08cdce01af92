//! The upgrade query checks (v, encoding, compress); oracles: gatewayd::fuzzing::upgrade.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gatewayd::fuzzing::upgrade(data));
