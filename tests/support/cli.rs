//! `gatewayd` as an operator runs it from a shell: a one-shot command,
//! `gatewayd run --check`, and a node that must refuse to start.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// `gatewayd ARGS` to the end, with warnings only in its log.
pub fn gatewayd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gatewayd"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap()
}

/// `gatewayd run --check` with a fresh data dir, port 0 everywhere, and
/// `extra`: its exit status and what it printed. Asserts it created nothing.
pub fn check(extra: &[&str]) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut args = vec![
        "run",
        "--check",
        "--data-dir",
        data.to_str().unwrap(),
        "--gateway-addr",
        "127.0.0.1:0",
        "--admin-addr",
        "127.0.0.1:0",
        "--ingest-addr",
        "127.0.0.1:0",
    ];
    args.extend_from_slice(extra);
    let out = gatewayd(&args);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!data.exists(), "--check created the data dir:\n{text}");
    (out.status.code().unwrap(), text)
}

/// The line of `--check`'s output for the check `name` (its second word).
pub fn line<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines()
        .find(|l| l.split_whitespace().nth(1) == Some(name))
        .unwrap_or_else(|| panic!("no {name} line in:\n{text}"))
}

/// A node started with `extra` that must exit by itself within 60 s
/// (refusing to start): its exit code and stderr.
pub fn refused(extra: &[&str]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let mut child = super::node::run_command(dir.path())
        .args(extra)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "the node did not refuse to start {extra:?}:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
