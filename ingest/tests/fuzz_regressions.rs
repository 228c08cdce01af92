//! Inputs the fuzz targets (`scripts/fuzz.sh`) found failing, with the
//! behaviour now expected. The crash files are kept under
//! `fuzz/regressions/<target>/` and replayed through the targets' oracles.

use ingest::{redact_message_content, validate_json_object, RedactError};

/// `redact`: a `d` with a lone low surrogate escape (`\ude00` after the
/// ordinary `\ud66d`) was accepted by the validator and spliced into
/// dispatch frames that serde_json (twilight's parser) refuses whole ("lone
/// leading surrogate in hex escape"). Escaped surrogates must now pair.
#[test]
fn lone_surrogate_escapes_are_refused() {
    let crash = br#" { "a" : [ 1.5e-3 , null , "\"L\\/\b\f\n\r\t\ud66d\ude00" ] } "#;
    assert_eq!(
        std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../fuzz/regressions/redact/crash-0973adba0f5956d3ed6ba744d3b2dc235faee004"
        ))
        .unwrap(),
        crash
    );
    assert!(matches!(
        validate_json_object(crash),
        Err(RedactError::Syntax { .. })
    ));
    assert!(redact_message_content(crash, &mut Vec::new()).is_err());
    for bad in [
        r#"{"a":"\udc00"}"#,       // lone low
        r#"{"a":"\ud800"}"#,       // lone high at the end
        r#"{"a":"\ud800x"}"#,      // high, then not an escape
        r#"{"a":"\ud800\n"}"#,     // high, then another escape
        r#"{"a":"\ud800\u0041"}"#, // high, then not a low
        r#"{"a":"\ud800\ud800"}"#, // two highs
        r#"{"\udfff":1}"#,         // in a key
        r#"{"content":"\uDBFF"}"#, // upper case, redacted key
    ] {
        assert!(validate_json_object(bad.as_bytes()).is_err(), "{bad}");
        assert!(
            serde_json::from_str::<serde_json::Value>(bad).is_err(),
            "{bad}"
        );
    }
    for good in [
        r#"{"a":"\ud83d\ude00"}"#,
        r#"{"a":"\uD83D\uDE00x\u00e9\uffff\u0000"}"#,
        r#"{"a":"\udbff\udfff"}"#,
    ] {
        assert_eq!(validate_json_object(good.as_bytes()), Ok(()), "{good}");
        assert!(
            serde_json::from_str::<serde_json::Value>(good).is_ok(),
            "{good}"
        );
    }
}

/// `redact`: `3333333333333E3333333333333330030000000` (far beyond a
/// double) was accepted by the validator; serde_json refuses the frame
/// ("number out of range"). Numbers must now be finite as doubles.
#[test]
fn numbers_beyond_a_double_are_refused() {
    let crash = br#"{"messageapsn_shots":3333333333333E3333333333333330030000000}"#;
    assert_eq!(
        std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../fuzz/regressions/redact/crash-62a846200b54954713e15711fd823916435c947d"
        ))
        .unwrap(),
        crash
    );
    assert!(matches!(
        validate_json_object(crash),
        Err(RedactError::Syntax { at: 21 })
    ));
    assert!(redact_message_content(crash, &mut Vec::new()).is_err());
    let nines = format!(r#"{{"a":{}}}"#, "9".repeat(310));
    for bad in [
        r#"{"a":1e309}"#,
        r#"{"a":-1.8E+308}"#,
        r#"{"a":[0.5e310]}"#,
        &nines,
    ] {
        assert!(validate_json_object(bad.as_bytes()).is_err(), "{bad}");
        assert!(
            serde_json::from_str::<serde_json::Value>(bad).is_err(),
            "{bad}"
        );
    }
    let small = format!(r#"{{"a":0.{}1}}"#, "0".repeat(400));
    let big_int = format!(r#"{{"a":{}}}"#, "9".repeat(299));
    for good in [
        r#"{"a":1e308}"#,
        r#"{"a":-1.7976931348623157E+308}"#,
        r#"{"a":1e-400}"#,
        r#"{"a":0e999}"#,
        &small,
        &big_int,
    ] {
        assert_eq!(validate_json_object(good.as_bytes()), Ok(()), "{good}");
        assert!(
            serde_json::from_str::<serde_json::Value>(good).is_ok(),
            "{good}"
        );
    }
}

/// Every crash file replays clean through its target's ingest oracle.
#[test]
fn crash_files_pass_the_oracles() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz/regressions/redact");
    for f in std::fs::read_dir(dir).unwrap() {
        ingest::fuzzing::redact(&std::fs::read(f.unwrap().path()).unwrap());
    }
}
