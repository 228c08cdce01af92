//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/`) of every
//! target through the same oracle functions the libFuzzer targets call
//! (`net::fuzzing`, `ingest::fuzzing`, `gatewayd::fuzzing`), so every
//! `cargo test` exercises it. Long fuzzing runs: `scripts/fuzz.sh`.

use std::path::{Path, PathBuf};

fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{}: empty corpus", dir.display());
    files
}

fn replay(target: &str, oracle: fn(&[u8])) {
    let mut failed = Vec::new();
    let files = corpus(target);
    for f in &files {
        let bytes = std::fs::read(f).expect("read corpus file");
        if std::panic::catch_unwind(|| oracle(&bytes)).is_err() {
            failed.push(f.display().to_string());
        }
    }
    assert!(
        failed.is_empty(),
        "{target}: {} of {} inputs fail: {failed:?}",
        failed.len(),
        files.len()
    );
}

#[test]
fn ws_decode_corpus() {
    replay("ws_decode", net::fuzzing::ws_decode);
}

#[test]
fn http_head_corpus() {
    replay("http_head", net::fuzzing::http_head);
}

#[test]
fn ingest_stream_corpus() {
    replay("ingest_stream", ingest::fuzzing::stream);
}

#[test]
fn ingest_record_corpus() {
    replay("ingest_record", ingest::fuzzing::record);
}

#[test]
fn redact_corpus() {
    replay("redact", ingest::fuzzing::redact);
}

#[test]
fn gateway_corpus() {
    replay("gateway", gatewayd::fuzzing::gateway);
}

#[test]
fn upgrade_corpus() {
    replay("upgrade", gatewayd::fuzzing::upgrade);
}

#[test]
fn rest_corpus() {
    replay("rest", gatewayd::fuzzing::rest);
}

#[test]
fn kafka_value_corpus() {
    replay("kafka_value", gatewayd::fuzzing::kafka_value);
}

#[test]
fn redact_spliced_corpus() {
    replay("redact", gatewayd::fuzzing::spliced_d);
}
