//! Ingest record bodies and fields; oracles: ingest::fuzzing::record.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ingest::fuzzing::record(data));
