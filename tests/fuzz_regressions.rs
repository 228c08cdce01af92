//! Inputs the fuzz targets (`scripts/fuzz.sh`) found failing in the node's
//! own parsers, with the behaviour now expected. The crash files are kept
//! under `fuzz/regressions/<target>/` and replayed through the targets'
//! oracles (`gatewayd::fuzzing`).

use gatewayd::gateway::identify::{parse, ClientPayload};

fn regressions(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = format!("{}/fuzz/regressions/{target}", env!("CARGO_MANIFEST_DIR"));
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .map(|f| f.expect("entry").path())
        .map(|p| (p.display().to_string(), std::fs::read(&p).expect("read")))
        .collect();
    v.sort();
    v
}

/// `gateway`: `{"op":1,"d":null` + six NUL bytes + `}` was decoded as a
/// heartbeat: simd-json takes a NUL after a literal or number for the end
/// of its input. A raw NUL is never JSON: the node now closes with 4002.
#[test]
fn nul_bytes_are_not_json() {
    let crash = regressions("gateway");
    let (name, bytes) = &crash[0];
    assert!(name.ends_with("crash-d4a8b460b6cc679186b20db50b25670e80e26847"));
    // The first message of the crash input (control byte, then up to 0xFF).
    let first = bytes[1..].split(|&b| b == 0xff).next().unwrap();
    assert_eq!(first, b"{\"op\":1,\"d\":null\0\0\0\0\0\0}");
    for text in [
        first,
        b"{\"op\":1,\"d\":null\0}",
        b"{\"op\":1\0,\"d\":null}",
        b"{\"op\":1,\"d\":[1\0]}",
        b"{\"op\":2,\"d\":{\"token\":\"t\",\"intents\":1\0}}",
    ] {
        let close = parse(text, &mut Vec::new()).expect_err("not JSON");
        assert_eq!(close.code, 4002, "{:?}", String::from_utf8_lossy(text));
    }
    // Escaped, a NUL is fine.
    assert!(matches!(
        parse(br#"{"op":1,"d":null,"x":"\u0000"}"#, &mut Vec::new()),
        Ok(ClientPayload::Heartbeat { seq: None })
    ));
}

/// Every crash file replays clean through its target's oracle.
#[test]
fn crash_files_pass_the_oracles() {
    for (target, oracle) in [
        ("gateway", gatewayd::fuzzing::gateway as fn(&[u8])),
        ("redact", gatewayd::fuzzing::spliced_d),
    ] {
        for (name, bytes) in regressions(target) {
            if std::panic::catch_unwind(|| oracle(&bytes)).is_err() {
                panic!("{name} fails the {target} oracle");
            }
        }
    }
}
