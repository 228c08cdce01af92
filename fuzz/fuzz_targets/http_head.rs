//! HTTP request heads (net::http::parse_head, query_param); oracles: net::fuzzing::http_head.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| net::fuzzing::http_head(data));
