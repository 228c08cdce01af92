//! Property tests of the JSON validator and the MESSAGE_CONTENT redaction
//! against serde_json.

use ingest::{redact_message_content, validate_json_object};
use proptest::prelude::*;
use serde_json::{Map, Value};

const REDACTED: [&str; 5] = ["content", "embeds", "attachments", "components", "poll"];

fn arb_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        ".{0,12}".prop_map(Value::String),
        "[\"\\\\\u{0}-\u{1f}\u{7f}é€😀]{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(arb_key(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn arb_key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(&REDACTED[..]).prop_map(str::to_owned),
        3 => prop::sample::select(&["id", "author", "tts", "contents", "Content", "embed", "pol", "type", "nonce"][..])
            .prop_map(str::to_owned),
        2 => ".{0,10}",
    ]
}

fn arb_object() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map(arb_key(), arb_value(), 0..12).prop_map(|m| m.into_iter().collect())
}

fn check_redaction(text: &[u8]) -> Result<(), TestCaseError> {
    // The reference is the input as serde_json reads it back (its float
    // parsing is not exact, so compare like with like).
    let input: Map<String, Value> = serde_json::from_slice(text).unwrap();
    let mut out = b"prefix".to_vec();
    redact_message_content(text, &mut out)
        .map_err(|e| TestCaseError::fail(format!("redact failed: {e}")))?;
    prop_assert_eq!(&out[..6], b"prefix");
    let got: Value = serde_json::from_slice(&out[6..])
        .map_err(|e| TestCaseError::fail(format!("output does not parse: {e}")))?;
    let got = got.as_object().expect("object");
    for (k, v) in &input {
        match k.as_str() {
            "content" => prop_assert_eq!(&got[k], &Value::String(String::new())),
            "embeds" | "attachments" | "components" => {
                prop_assert_eq!(&got[k], &Value::Array(vec![]))
            }
            "poll" => prop_assert!(!got.contains_key("poll")),
            _ => prop_assert_eq!(got.get(k), Some(v), "key {:?}", k),
        }
    }
    let want_len = input.len() - usize::from(input.contains_key("poll"));
    prop_assert_eq!(got.len(), want_len);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

    /// serde_json's compact and pretty output of random objects: the redacted
    /// output parses, the redacted fields are empty (poll gone), every other
    /// top-level field is unchanged, and the validator accepts the input.
    #[test]
    fn redaction_matches_serde_json(obj in arb_object()) {
        let compact = serde_json::to_vec(&obj).unwrap();
        let pretty = serde_json::to_vec_pretty(&obj).unwrap();
        for text in [&compact, &pretty] {
            prop_assert!(validate_json_object(text).is_ok(), "{}", String::from_utf8_lossy(text));
            check_redaction(text)?;
        }
        // Nothing to redact: byte-identical output.
        if !obj.keys().any(|k| REDACTED.contains(&k.as_str())) {
            let mut out = Vec::new();
            redact_message_content(&pretty, &mut out).unwrap();
            prop_assert_eq!(out, pretty);
        }
    }

    /// Redacting twice changes nothing more.
    #[test]
    fn redaction_is_idempotent(obj in arb_object()) {
        let text = serde_json::to_vec(&obj).unwrap();
        let mut once = Vec::new();
        redact_message_content(&text, &mut once).unwrap();
        let mut twice = Vec::new();
        redact_message_content(&once, &mut twice).unwrap();
        prop_assert_eq!(once, twice);
    }

    /// Differential test of the validator against serde_json on mutated
    /// JSON: same verdict on "is a JSON object".
    #[test]
    fn validator_agrees_with_serde_json(obj in arb_object(),
                                        edits in prop::collection::vec((any::<prop::sample::Index>(), 0u8..3,
                                            prop::sample::select(&b"{}[]\",:\\ 0-1.eE+tfnul\"x\n\x01"[..])), 0..4)) {
        let mut text = serde_json::to_vec(&obj).unwrap();
        for (at, op, c) in edits {
            let i = if text.is_empty() { 0 } else { at.index(text.len()) };
            match op {
                0 if !text.is_empty() => { text.remove(i); }
                1 => text.insert(i, c),
                _ if !text.is_empty() => text[i] = c,
                _ => {}
            }
        }
        let parsed = serde_json::from_slice::<Value>(&text);
        // Numbers beyond f64 (an edit turned `12` into `1e999`) and lone
        // surrogate escapes (an edit cut a `\uD83D\uDE00` pair) are valid
        // JSON text that serde_json refuses to represent.
        prop_assume!(!matches!(&parsed, Err(e) if e.to_string().contains("out of range")
            || e.to_string().contains("surrogate")));
        let serde_ok = matches!(parsed, Ok(Value::Object(_)));
        let ours = validate_json_object(&text);
        prop_assert_eq!(ours.is_ok(), serde_ok, "{:?}: ours {:?}", String::from_utf8_lossy(&text), ours);
        // Redaction accepts exactly what the validator accepts.
        let mut out = Vec::new();
        prop_assert_eq!(redact_message_content(&text, &mut out).is_ok(), ours.is_ok());
        if ours.is_err() {
            prop_assert!(out.is_empty());
        }
    }

    /// Arbitrary bytes never panic either function.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = validate_json_object(&bytes);
        let mut out = Vec::new();
        let _ = redact_message_content(&bytes, &mut out);
    }
}
