//! Inputs the fuzz targets (`scripts/fuzz.sh`) found failing in the node's
//! own parsers, with the behaviour now expected. The crash files are kept
//! under `fuzz/regressions/<target>/` and replayed through the targets'
//! oracles (`gatewayd::fuzzing`).

use gatewayd::protocol::identify::{parse, ClientPayload};

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
    let (name, bytes) = regressions("gateway")
        .into_iter()
        .find(|(n, _)| n.ends_with("crash-d4a8b460b6cc679186b20db50b25670e80e26847"))
        .expect("crash file");
    // The first message of the crash input (control byte, then up to 0xFF).
    let first = bytes[1..].split(|&b| b == 0xff).next().unwrap();
    assert_eq!(first, b"{\"op\":1,\"d\":null\0\0\0\0\0\0}", "{name}");
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

/// `gateway`: `{"op":1,"d":2459999999999999990c6b1e9f1a4c2d8e1}` (the
/// second message of the crash input) was decoded as a heartbeat: simd-json
/// stops reading a 19- or 20-digit number at the first non-digit and takes
/// the rest. Client text is now validated strictly first: 4002.
#[test]
fn garbage_after_long_numbers_is_not_json() {
    let (name, bytes) = regressions("gateway")
        .into_iter()
        .find(|(n, _)| n.ends_with("crash-d4a5b5d13d69b7192dc9cbc66267ccacbe527aa5"))
        .expect("crash file");
    let second = bytes[1..].split(|&b| b == 0xff).nth(1).unwrap();
    assert_eq!(
        second, b"{\"op\":1,\"d\":2459999999999999990c6b1e9f1a4c2d8e1}",
        "{name}"
    );
    for text in [
        second,
        b"{\"op\":1,\"d\":12345678901234567890x}",
        b"{\"op\":2,\"d\":{\"token\":\"t\",\"intents\":1234567890123456789z}}",
        b"{\"op\":6,\"d\":{\"token\":\"t\",\"session_id\":\"s\",\"seq\":1234567890123456789_}}",
    ] {
        let close = parse(text, &mut Vec::new()).expect_err("not JSON");
        assert_eq!(close.code, 4002, "{:?}", String::from_utf8_lossy(text));
    }
    assert!(matches!(
        parse(b"{\"op\":1,\"d\":2459999999999999990}", &mut Vec::new()),
        Ok(ClientPayload::Heartbeat {
            seq: Some(2459999999999999990)
        })
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
