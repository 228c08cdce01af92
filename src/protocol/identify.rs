//! Parsing client payloads (op, Identify, Resume) with simd-json.
//!
//! Clients are untrusted: every field is optional until checked, odd shapes
//! (a `presence` that is not an object, numbers as strings) are tolerated where
//! real libraries send them, and nothing here panics.

use simd_json::prelude::*;
use simd_json::BorrowedValue as Value;

use proto::Op;

use super::close::{Close, CloseCode};
use super::intents;

/// What a client asked for, once decoded.
#[derive(Debug)]
pub enum ClientPayload {
    Heartbeat {
        seq: Option<u64>,
    },
    Identify(Identify),
    PresenceUpdate,
    VoiceStateUpdate,
    Resume(Resume),
    RequestGuildMembers {
        guild_ids: Vec<u64>,
        nonce: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Identify {
    pub token: String,
    pub intents: u64,
    pub shard: (u32, u32),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Resume {
    pub token: String,
    pub session_id: String,
    pub seq: u64,
}

const DECODE: Close = Close::new(
    CloseCode::DecodeError,
    "decode error: payload is not valid gateway JSON",
);

/// Decode one text message. `scratch` is reused between calls so steady
/// parsing does not allocate for the copy.
pub fn parse(text: &[u8], scratch: &mut Vec<u8>) -> Result<ClientPayload, Close> {
    // Strict JSON first (allocation-free, linear): simd-json (0.17) lets
    // some invalid text through, e.g. a NUL after a literal
    // (`{"op":1,"d":null\0}`, simd-lite/simd-json#357) or letters after a
    // 19- or 20-digit number (`{"op":1,"d":12345678901234567890x}`), which
    // would be heartbeats.
    if ingest::validate_json_object(text).is_err() {
        return Err(DECODE);
    }
    scratch.clear();
    scratch.extend_from_slice(text);
    let v = simd_json::to_borrowed_value(scratch).map_err(|_| DECODE)?;
    let op = v.get("op").and_then(as_u64).ok_or(Close::new(
        CloseCode::DecodeError,
        "decode error: missing op",
    ))?;
    let d = v.get("d");
    let unknown = Close::new(CloseCode::UnknownOpcode, "unknown opcode");
    match Op::from_u64(op).ok_or(unknown)? {
        Op::Heartbeat => Ok(ClientPayload::Heartbeat {
            seq: d.and_then(as_u64),
        }),
        Op::Identify => identify(d.ok_or(Close::new(
            CloseCode::DecodeError,
            "decode error: identify without d",
        ))?)
        .map(ClientPayload::Identify),
        Op::PresenceUpdate => Ok(ClientPayload::PresenceUpdate),
        Op::VoiceStateUpdate => Ok(ClientPayload::VoiceStateUpdate),
        Op::Resume => resume(d.ok_or(Close::new(
            CloseCode::DecodeError,
            "decode error: resume without d",
        ))?)
        .map(ClientPayload::Resume),
        Op::RequestGuildMembers => Ok(request_members(d)),
        // What only the server sends is an unknown opcode from a bot.
        Op::Dispatch | Op::Reconnect | Op::InvalidSession | Op::Hello | Op::HeartbeatAck => {
            Err(unknown)
        }
    }
}

/// Numbers may arrive as JSON numbers or as decimal strings (snowflakes).
fn as_u64(v: &Value) -> Option<u64> {
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
}

fn strip_bot(token: &str) -> &str {
    token.strip_prefix("Bot ").unwrap_or(token).trim()
}

fn identify(d: &Value) -> Result<Identify, Close> {
    let token = d.get("token").and_then(|t| t.as_str()).ok_or(Close::new(
        CloseCode::DecodeError,
        "decode error: identify needs a token string",
    ))?;
    let intents = match d.get("intents") {
        None => {
            return Err(Close::new(
                CloseCode::InvalidIntents,
                "invalid intents: intents are required in v10",
            ))
        }
        // An integer, as Discord requires (4013 for `"513"`); only
        // snowflakes and seqs are tolerated as decimal strings.
        Some(i) => i.as_u64().ok_or(Close::new(
            CloseCode::InvalidIntents,
            "invalid intents: intents must be an integer bitfield",
        ))?,
    };
    if intents & !intents::KNOWN != 0 {
        return Err(Close::new(
            CloseCode::InvalidIntents,
            "invalid intents: undefined intent bits",
        ));
    }
    let shard = match d.get("shard") {
        None => (0, 1),
        Some(s) if s.is_null() => (0, 1),
        Some(s) => {
            let arr = s.as_array().ok_or(Close::new(
                CloseCode::InvalidShard,
                "invalid shard: expected [id, count]",
            ))?;
            let (Some(id), Some(count), 2) = (
                arr.first().and_then(as_u64),
                arr.get(1).and_then(as_u64),
                arr.len(),
            ) else {
                return Err(Close::new(
                    CloseCode::InvalidShard,
                    "invalid shard: expected [id, count]",
                ));
            };
            let (Ok(id), Ok(count)) = (u32::try_from(id), u32::try_from(count)) else {
                return Err(Close::new(
                    CloseCode::InvalidShard,
                    "invalid shard: out of range",
                ));
            };
            (id, count)
        }
    };
    if shards::validate_shard(shard.0, shard.1).is_err() {
        return Err(Close::new(
            CloseCode::InvalidShard,
            "invalid shard: id must be below count, count at least 1",
        ));
    }
    // `properties`, `presence`, `large_threshold`, `compress` are accepted in
    // any shape: libraries differ, and none of them changes what we send.
    Ok(Identify {
        token: strip_bot(token).to_string(),
        intents,
        shard,
    })
}

fn resume(d: &Value) -> Result<Resume, Close> {
    let bad = Close::new(
        CloseCode::DecodeError,
        "decode error: resume needs token, session_id and seq",
    );
    let token = d.get("token").and_then(|t| t.as_str()).ok_or(bad)?;
    let session_id = d.get("session_id").and_then(|t| t.as_str()).ok_or(bad)?;
    // A null seq (nothing received yet) resumes from the start.
    let seq = match d.get("seq") {
        Some(s) if s.is_null() => 0,
        Some(s) => as_u64(s).ok_or(bad)?,
        None => return Err(bad),
    };
    Ok(Resume {
        token: strip_bot(token).to_string(),
        session_id: session_id.to_string(),
        seq,
    })
}

/// The token of an Identify that `parse` refused while reading it (4010,
/// 4013), so whose it was can be looked up; None if it has none (or one
/// longer than any token). Only on that rare path: it parses again.
pub fn token_of(text: &[u8], scratch: &mut Vec<u8>) -> Option<String> {
    scratch.clear();
    scratch.extend_from_slice(text);
    let v = simd_json::to_borrowed_value(scratch).ok()?;
    let token = v.get("d")?.get("token")?.as_str()?;
    (token.len() <= 200).then(|| strip_bot(token).to_string())
}

fn request_members(d: Option<&Value>) -> ClientPayload {
    let mut guild_ids = Vec::new();
    let mut nonce = None;
    if let Some(d) = d {
        match d.get("guild_id") {
            Some(g) if g.is_array() => {
                guild_ids.extend(
                    g.as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(as_u64)
                        .take(100),
                );
            }
            Some(g) => guild_ids.extend(as_u64(g)),
            None => {}
        }
        nonce = d
            .get("nonce")
            .and_then(|n| n.as_str())
            .map(|s| s.chars().take(32).collect());
    }
    ClientPayload::RequestGuildMembers { guild_ids, nonce }
}

/// What a session keeps of its token: a Resume must present the same one.
pub fn token_digest(token: &str) -> [u8; 32] {
    use sha2::{Digest, Sha256};
    Sha256::digest(token.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<ClientPayload, Close> {
        parse(s.as_bytes(), &mut Vec::new())
    }

    #[test]
    fn identify_strips_bot_prefix_and_defaults_shard() {
        let r = p(
            r#"{"op":2,"d":{"token":"Bot abc.def","intents":513,"properties":{"os":"linux"},"presence":"weird"}}"#,
        );
        match r.unwrap() {
            ClientPayload::Identify(i) => {
                assert_eq!(i.token, "abc.def");
                assert_eq!(i.intents, 513);
                assert_eq!(i.shard, (0, 1));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn identify_errors_have_codes() {
        let code = |s: &str| p(s).unwrap_err().code;
        assert_eq!(code(r#"{"op":2,"d":{"token":"t"}}"#), 4013);
        assert_eq!(
            code(r#"{"op":2,"d":{"token":"t","intents":1099511627776}}"#),
            4013
        );
        assert_eq!(
            code(r#"{"op":2,"d":{"token":"t","intents":1,"shard":[2,2]}}"#),
            4010
        );
        assert_eq!(
            code(r#"{"op":2,"d":{"token":"t","intents":1,"shard":[0,0]}}"#),
            4010
        );
        assert_eq!(
            code(r#"{"op":2,"d":{"token":"t","intents":1,"shard":"x"}}"#),
            4010
        );
        assert_eq!(code(r#"{"op":2,"d":{"intents":1}}"#), 4002);
        assert_eq!(code(r#"{"op":42,"d":null}"#), 4001);
        assert_eq!(code(r#"not json"#), 4002);
        assert_eq!(code(r#"{"d":1}"#), 4002);
        assert_eq!(code(r#"[1,2]"#), 4002);
    }

    #[test]
    fn shard_numbers_as_strings_but_intents_an_integer() {
        match p(r#"{"op":2,"d":{"token":"t","intents":512,"shard":[1,"3"]}}"#).unwrap() {
            ClientPayload::Identify(i) => assert_eq!((i.intents, i.shard), (512, (1, 3))),
            other => panic!("{other:?}"),
        }
        // Intents as a string, a float or negative: 4013, as Discord.
        for bad in [r#""512""#, "512.0", "-1", "null", "[512]"] {
            let text = format!(r#"{{"op":2,"d":{{"token":"t","intents":{bad}}}}}"#);
            let close = p(&text).unwrap_err();
            assert_eq!(close.code, 4013, "{text}");
        }
    }

    #[test]
    fn heartbeat_and_resume() {
        assert!(matches!(
            p(r#"{"op":1,"d":null}"#).unwrap(),
            ClientPayload::Heartbeat { seq: None }
        ));
        assert!(matches!(
            p(r#"{"op":1,"d":7}"#).unwrap(),
            ClientPayload::Heartbeat { seq: Some(7) }
        ));
        match p(r#"{"op":6,"d":{"token":"Bot x","session_id":"abc","seq":5}}"#).unwrap() {
            ClientPayload::Resume(r) => assert_eq!(
                r,
                Resume {
                    token: "x".into(),
                    session_id: "abc".into(),
                    seq: 5
                }
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(p(r#"{"op":6,"d":{"token":"x"}}"#).unwrap_err().code, 4002);
    }

    proptest::proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let _ = parse(&bytes, &mut Vec::new());
        }

        #[test]
        fn never_panics_on_json_like(s in r#"\{"op":[0-9]{1,3},"d":(null|[0-9]+|"[a-z ]*"|\{("[a-z_]+":("[A-Za-z .]*"|[0-9]+|\[[0-9,]*\]|null),?){0,5}\})\}"#) {
            let _ = parse(s.as_bytes(), &mut Vec::new());
        }
    }
}
