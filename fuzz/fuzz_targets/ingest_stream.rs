//! An ingest producer's byte stream (ingest::FrameReader); oracles: ingest::fuzzing::stream.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ingest::fuzzing::stream(data));
