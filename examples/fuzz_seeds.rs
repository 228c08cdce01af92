//! Writes the seed inputs of the fuzz corpus (`fuzz/corpus/<target>/seed-*`):
//! real upgrade and REST requests, the Identify/Resume/Heartbeat/... JSON
//! that discord.py and twilight send, masked client frames, ingest records
//! built with `ingest::encode_parts`, and message `d`s.
//!
//! `cargo run --example fuzz_seeds -- fuzz/corpus` (then minimise with
//! `scripts/fuzz.sh --merge`). Seeds are rewritten, other files left alone.

use std::path::{Path, PathBuf};

use ingest::{encode_parts, FLAG_GUILD_STATE, FLAG_HAS_CONTENT};
use net::ws::{encode_client_frame, OpCode};

const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
const TOKEN: &str = "MTk4NjIyNDgzNDcxOTI1MjQ4.Cl2FMQ.ZnCjm1XVW7vRze4b7Cq4se7kKWs";

/// The request discord.py (aiohttp) sends to connect.
fn discord_py_upgrade(query: &str) -> String {
    format!(
        "GET /?{query} HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {KEY}\r\nUser-Agent: Python/3.11 aiohttp/3.9.5\r\n\
         Accept: */*\r\nAccept-Encoding: gzip, deflate\r\n\r\n"
    )
}

/// The request twilight (tokio-tungstenite) sends to connect.
fn twilight_upgrade(query: &str) -> String {
    format!(
        "GET /?{query} HTTP/1.1\r\nHost: localhost:8080\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {KEY}\r\n\
         Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n"
    )
}

fn rest_request(method: &str, path: &str, auth: Option<&str>, extra: &str) -> String {
    let auth = auth
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n{auth}\
         User-Agent: DiscordBot (https://github.com/Rapptz/discord.py 2.4.0) Python/3.11 aiohttp/3.9.5\r\n{extra}\r\n"
    )
}

fn identify_discord_py() -> String {
    format!(
        r#"{{"op":2,"d":{{"token":"{TOKEN}","properties":{{"os":"linux","browser":"discord.py","device":"discord.py"}},"compress":true,"large_threshold":250,"intents":3276799,"shard":[0,1],"presence":{{"status":"online","since":0,"activities":[],"afk":false}}}}}}"#
    )
}

fn identify_twilight() -> String {
    format!(
        r#"{{"d":{{"compress":false,"intents":33281,"large_threshold":50,"properties":{{"browser":"twilight.rs","device":"twilight.rs","os":"linux"}},"shard":[1,4],"token":"Bot {TOKEN}"}},"op":2}}"#
    )
}

fn client_messages() -> Vec<String> {
    vec![
        identify_discord_py(),
        identify_twilight(),
        r#"{"op":2,"d":{"token":"t","intents":"513","shard":["0","2"]}}"#.into(),
        r#"{"op":2,"d":{"token":"t","intents":513,"shard":null,"presence":"weird"}}"#.into(),
        r#"{"op":1,"d":null}"#.into(),
        r#"{"op":1,"d":251}"#.into(),
        r#"{"op":1,"d":"18446744073709551615"}"#.into(),
        format!(r#"{{"op":6,"d":{{"token":"{TOKEN}","session_id":"5d0c6b7e9f1a4c2d8e3b","seq":1337}}}}"#),
        r#"{"op":6,"d":{"token":"Bot x","session_id":"abc","seq":null}}"#.into(),
        r#"{"op":3,"d":{"since":null,"activities":[{"name":"with fuzzers","type":0}],"status":"online","afk":false}}"#.into(),
        r#"{"op":4,"d":{"guild_id":"41771983423143937","channel_id":null,"self_mute":false,"self_deaf":false}}"#.into(),
        r#"{"op":8,"d":{"guild_id":"41771983423143937","query":"","limit":0,"presences":false,"nonce":"a1b2c3"}}"#.into(),
        r#"{"op":8,"d":{"guild_id":["1","2",3],"user_ids":["80351110224678912"],"nonce":"x"}}"#.into(),
        r#"{"op":42,"d":null}"#.into(),
        r#"{"d":{"token":"t"},"op":2.0,"s":null,"t":null}"#.into(),
    ]
}

/// A MESSAGE_CREATE `d` shaped like Discord's.
fn message_d(content: &str) -> String {
    format!(
        r#"{{"type":0,"tts":false,"timestamp":"2026-11-30T11:02:03.000000+00:00","pinned":false,"nonce":"1311","mentions":[],"mention_roles":[],"mention_everyone":false,"member":{{"roles":[],"joined_at":"2025-06-01T00:00:00.000000+00:00","deaf":false}},"id":"1180000000000001234","flags":0,"embeds":[{{"title":"t","description":"{content}"}}],"edited_timestamp":null,"content":"{content}","components":[],"channel_id":"1180000000000000201","author":{{"username":"user1","id":"1180000000000000001","global_name":"User \u00e9","discriminator":"0","avatar":null}},"attachments":[],"guild_id":"1180000000000000200"}}"#
    )
}

fn ds() -> Vec<String> {
    vec![
        message_d("hello world"),
        format!(
            r#"{{"content":"reply","referenced_message":{},"poll":{{"question":{{"text":"q"}},"answers":[]}},"id":"2"}}"#,
            message_d("original")
        ),
        r#"{"message_snapshots":[{"message":{"content":"fwd","embeds":[{"a":1}],"attachments":[{"id":"9"}]}}, 3],"cont\u0065nt":"esc","id":"3"}"#.into(),
        r#"{"id":"55","type":0,"name":"secret","position":2,"permission_overwrites":[{"id":"7","type":0,"allow":"0","deny":"1024"}]}"#.into(),
        r#" { "a" : [ 1.5e-3 , -0 , true , false , null , "\"\\\/\b\f\n\r\t\ud83d\ude00" ] } "#.into(),
    ]
}

/// Ingest frames: a message, a server change, and records the node skips.
fn ingest_frames() -> Vec<Vec<u8>> {
    let mut frames = Vec::new();
    let mut f =
        |et: &str, ch: u64, intent: u64, perm: u64, flags: u32, mentions: &[u64], d: &str| {
            let mut out = Vec::new();
            encode_parts(
                et,
                1180000000000000200,
                ch,
                intent,
                perm,
                1_796_027_930_123_000_000,
                flags,
                mentions,
                d.as_bytes(),
                &mut out,
            );
            frames.push(out);
        };
    f(
        "MESSAGE_CREATE",
        1180000000000000201,
        1 << 9,
        1 << 16,
        FLAG_HAS_CONTENT,
        &[1180000000000000001, 99],
        &message_d("hi"),
    );
    f(
        "CHANNEL_UPDATE",
        1180000000000000201,
        1,
        0,
        FLAG_GUILD_STATE,
        &[],
        &ds()[3],
    );
    f(
        "GUILD_ROLE_UPDATE",
        0,
        1,
        0,
        FLAG_GUILD_STATE,
        &[],
        r#"{"guild_id":"7","role":{"id":"8","name":"x","permissions":"8"}}"#,
    );
    f(
        "TYPING_START",
        1180000000000000201,
        1 << 11,
        0,
        0,
        &[],
        r#"{"user_id":"1","timestamp":1}"#,
    );
    f(
        "GUILD_UPDATE",
        0,
        1,
        0,
        FLAG_GUILD_STATE,
        &[],
        r#"{"id":"1180000000000000200","name":"renamed"}"#,
    );
    f("MESSAGE_CREATE", 1, 0, 0, 0, &[], "[]"); // bad_d
    f("message_create", 1, 0, 0, 0, &[], "{}"); // bad_event_type
    f("X", 1, 0, 0, 1 << 7, &[], "{}"); // reserved_flags
    frames
}

fn masked(frames: &[(OpCode, bool, &[u8])], mask: [u8; 4]) -> Vec<u8> {
    let mut out = Vec::new();
    for (op, fin, p) in frames {
        encode_client_frame(*op, *fin, mask, p, &mut out);
    }
    out
}

struct Seeds {
    root: PathBuf,
    written: usize,
}

impl Seeds {
    fn put(&mut self, target: &str, name: &str, bytes: &[u8]) {
        let dir = self.root.join(target);
        std::fs::create_dir_all(&dir).expect("corpus dir");
        std::fs::write(dir.join(format!("seed-{name}")), bytes).expect("write seed");
        self.written += 1;
    }
}

fn main() {
    let root = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "fuzz/corpus".into());
    let mut s = Seeds {
        root: Path::new(&root).to_path_buf(),
        written: 0,
    };
    let mask = [0x37, 0xfa, 0x21, 0x3d];

    // ws_decode: control byte (chunking), then client frames.
    let id = identify_discord_py();
    let long = "x".repeat(300);
    let streams: Vec<(&str, Vec<u8>)> = vec![
        (
            "identify",
            masked(&[(OpCode::Text, true, id.as_bytes())], mask),
        ),
        (
            "fragmented",
            masked(
                &[
                    (OpCode::Text, false, b"{\"op\":1,"),
                    (OpCode::Ping, true, b"p"),
                    (OpCode::Continuation, true, b"\"d\":null}"),
                ],
                mask,
            ),
        ),
        (
            "control",
            masked(
                &[
                    (OpCode::Ping, true, b"ping"),
                    (OpCode::Pong, true, b""),
                    (OpCode::Close, true, b"\x03\xe8bye"),
                ],
                mask,
            ),
        ),
        (
            "ext16",
            masked(&[(OpCode::Binary, true, long.as_bytes())], [1, 2, 3, 4]),
        ),
        (
            "utf8-split",
            masked(
                &[
                    (OpCode::Text, false, "h\u{e9}".as_bytes().split_at(2).0),
                    (
                        OpCode::Continuation,
                        true,
                        "h\u{e9}".as_bytes().split_at(2).1,
                    ),
                ],
                mask,
            ),
        ),
        ("close-empty", masked(&[(OpCode::Close, true, b"")], [0; 4])),
    ];
    for (i, (name, st)) in streams.iter().enumerate() {
        let mut v = vec![(i as u8) * 37 + 3];
        v.extend_from_slice(st);
        s.put("ws_decode", name, &v);
    }
    // A 64-bit length header (refused: over the limit).
    let mut big = vec![7u8, 0x82, 0xff, 0, 0, 0, 0, 0, 1, 0, 0];
    big.extend_from_slice(&mask);
    s.put("ws_decode", "ext64", &big);

    // http_head, upgrade, rest: real requests.
    let heads = [
        ("discord-py", discord_py_upgrade("encoding=json&v=10&compress=zlib-stream")),
        ("twilight", twilight_upgrade("v=10&encoding=json")),
        ("zstd", twilight_upgrade("v=10&encoding=json&compress=zstd-stream")),
        ("v6-etf", discord_py_upgrade("v=6&encoding=etf")),
        ("no-key", "GET /?v=10 HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Version: 8\r\n\r\n".into()),
        ("http10", "GET / HTTP/1.0\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n".into()),
    ];
    for (name, h) in &heads {
        s.put("http_head", name, h.as_bytes());
        s.put("upgrade", name, h.as_bytes());
    }
    for q in [
        "v=10&encoding=json",
        "v=9",
        "encoding=etf&v=10",
        "v&encoding",
        "compress=zlib-stream&v=10&v=11",
    ] {
        s.put(
            "upgrade",
            &format!("query-{}", q.replace(['&', '='], "_")),
            q.as_bytes(),
        );
    }
    let bot = format!("Bot {TOKEN}");
    let rests = [
        ("gateway", rest_request("GET", "/api/v10/gateway", None, "")),
        (
            "gateway-bot",
            rest_request("GET", "/api/v10/gateway/bot", Some(&bot), ""),
        ),
        (
            "users-me",
            rest_request(
                "GET",
                "/api/v9/users/@me/",
                Some(TOKEN),
                "Connection: close\r\n",
            ),
        ),
        (
            "applications",
            rest_request("HEAD", "/api/oauth2/applications/@me", Some(&bot), ""),
        ),
        (
            "post",
            rest_request(
                "POST",
                "/api/v10/channels/1/messages",
                Some(&bot),
                "Content-Type: application/json\r\nContent-Length: 17\r\n",
            ),
        ),
    ];
    for (name, h) in &rests {
        s.put("http_head", &format!("rest-{name}"), h.as_bytes());
        s.put("rest", name, h.as_bytes());
    }
    s.put(
        "rest",
        "raw",
        format!("GET\n/api/v10/gateway/bot/\n  {bot}  ").as_bytes(),
    );

    // gateway: control byte, then messages separated by 0xFF.
    let msgs = client_messages();
    for (i, m) in msgs.iter().enumerate() {
        let mut v = vec![(i as u8 * 13) | 4];
        v.extend_from_slice(m.as_bytes());
        s.put("gateway", &format!("msg-{i:02}"), &v);
    }
    let session = |ctl: u8, ms: &[&str]| {
        let mut v = vec![ctl];
        for (i, m) in ms.iter().enumerate() {
            if i > 0 {
                v.push(0xff);
            }
            v.extend_from_slice(m.as_bytes());
        }
        v
    };
    s.put(
        "gateway",
        "session-ready",
        &session(
            0x17,
            &[&msgs[4], &msgs[0], &msgs[5], &msgs[9], &msgs[11], &msgs[10]],
        ),
    );
    s.put(
        "gateway",
        "session-refused",
        &session(0x23, &[&msgs[1], &msgs[7], &msgs[1]]),
    );
    s.put(
        "gateway",
        "resume",
        &session(0x04, &[&msgs[7], &msgs[5], &msgs[12]]),
    );

    // Ingest.
    let frames = ingest_frames();
    let mut stream = vec![0x11u8];
    for f in &frames {
        stream.extend_from_slice(f);
    }
    s.put("ingest_stream", "all", &stream);
    let mut small = vec![0x85u8];
    small.extend_from_slice(&frames[0]);
    small.extend_from_slice(&frames[3]);
    s.put("ingest_stream", "small-max", &small);
    let mut misaligned = vec![0x2au8];
    misaligned.extend_from_slice(&frames[3][..frames[3].len() - 3]);
    s.put("ingest_stream", "truncated", &misaligned);
    for (i, f) in frames.iter().enumerate() {
        s.put(
            "ingest_record",
            &format!("body-{i}"),
            &f[ingest::HEADER_LEN..],
        );
        s.put("kafka_value", &format!("one-{i}"), f);
    }
    let mut fields = vec![14u8];
    fields.extend_from_slice(&[12, 4, 18, 18, 0, 6, 4, 26, 2, 17, 0, 19, 4, 0]); // MESSAGE_CREATE
    fields.extend_from_slice(&[0u8; 40]);
    fields.extend_from_slice(&[1, 0, 1]);
    fields.extend_from_slice(&99u64.to_le_bytes());
    fields.extend_from_slice(message_d("x").as_bytes());
    s.put("ingest_record", "fields", &fields);
    s.put("kafka_value", "several", &stream[1..]);
    let mut bad_then_good = b"\x08\x00\x00\x00\x01\x00\x00\x00garbage!".to_vec();
    bad_then_good.extend_from_slice(&frames[0]);
    s.put("kafka_value", "garbage-then-record", &bad_then_good);

    for (i, d) in ds().iter().enumerate() {
        s.put("redact", &format!("d-{i}"), d.as_bytes());
    }
    eprintln!("wrote {} seeds under {}", s.written, s.root.display());
}
