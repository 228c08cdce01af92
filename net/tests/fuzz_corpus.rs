//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/`) through the
//! same oracle functions the libFuzzer targets call (`net::fuzzing`), so
//! every `cargo test` exercises it. Long fuzzing runs: `scripts/fuzz.sh`.

use std::path::{Path, PathBuf};

fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
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
