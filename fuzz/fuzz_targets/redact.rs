//! A record's `d`: validation and MESSAGE_CONTENT redaction; oracles:
//! ingest::fuzzing::redact, and gatewayd::fuzzing::spliced_d (the frame
//! bots parse).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    ingest::fuzzing::redact(data);
    gatewayd::fuzzing::spliced_d(data);
});
