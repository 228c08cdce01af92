//! A Kafka message value (kafka_ingest::read_value); oracles: gatewayd::fuzzing::kafka_value.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| gatewayd::fuzzing::kafka_value(data));
