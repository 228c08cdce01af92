//! WebSocket client frames (net::ws::Decoder); oracles: net::fuzzing::ws_decode.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| net::fuzzing::ws_decode(data));
