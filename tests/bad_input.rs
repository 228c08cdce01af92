//! Black-box tests of hostile and malformed client input against a real
//! `gatewayd` process: every case must end in the documented close code (with
//! a reason), and none may disturb a well-behaved session on the same node.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use net::ws::{OpCode, OwnedMessage};
use serde_json::{json, Value};
use support::http::http_get;
use support::node::Node;
use support::raw::{Incoming, Msg, Ws};
use support::BOT_INTENTS;

const T: Duration = Duration::from_secs(10);
use proto::intents::{GUILD_MEMBERS, GUILD_PRESENCES, MESSAGE_CONTENT};

/// What a scenario needs to know about the node.
#[derive(Clone)]
struct Ctx {
    gateway: SocketAddr,
    token: String,
}

impl Ctx {
    fn of(node: &Node) -> Ctx {
        Ctx {
            gateway: node.gateway,
            token: node.token.clone(),
        }
    }
    fn ws(&self) -> Ws {
        Ws::connect(self.gateway, "/?v=10&encoding=json")
    }
    /// A connection that has received Hello.
    fn hello(&self) -> Ws {
        let mut ws = self.ws();
        ws.expect_hello();
        ws
    }
    /// A connection that has received READY.
    fn ready(&self) -> Ws {
        let mut ws = self.ws();
        ws.login(&self.token, BOT_INTENTS);
        ws
    }
}

/// Expects a server Close with one of `want`, a non-empty reason, then the end of the TCP stream.
fn assert_close(ws: &mut Ws, want: &[u16], what: &str) -> (u16, String) {
    let (m, texts) = ws.read_until_closed(T);
    let (code, reason) = match m {
        Msg::Close(Some(code), reason) => (code, reason),
        other => panic!("{what}: expected a Close frame with code {want:?}, got {other:?} (texts before: {texts:?})"),
    };
    assert!(
        want.contains(&code),
        "{what}: expected close code {want:?}, got {code} reason {reason:?}"
    );
    assert!(
        !reason.trim().is_empty(),
        "{what}: close {code} carries an empty reason"
    );
    assert!(
        ws.wait_eof(Duration::from_secs(5)),
        "{what}: server did not end the TCP stream within 5 s after Close {code}"
    );
    eprintln!("{what}: close {code} {reason:?}");
    (code, reason)
}

/// For WebSocket protocol violations: either a Close 1002 (with a reason) or the connection just ends.
fn assert_protocol_error(ws: &mut Ws, what: &str) {
    let (m, texts) = ws.read_until_closed(T);
    match m {
        Msg::Eof => {}
        Msg::Close(Some(1002), reason) => {
            assert!(
                !reason.trim().is_empty(),
                "{what}: close 1002 carries an empty reason"
            );
            assert!(
                ws.wait_eof(Duration::from_secs(5)),
                "{what}: no TCP EOF after close 1002"
            );
        }
        other => {
            panic!("{what}: expected Close 1002 or EOF, got {other:?} (texts before: {texts:?})")
        }
    }
}

fn heartbeat_ack(ws: &mut Ws, what: &str) {
    ws.heartbeat().unwrap();
    let v = ws.read_until(11, None, T);
    assert_eq!(v["op"], 11, "{what}");
}

// ---------------------------------------------------------------------------
// Scenarios: each asserts the documented behaviour. Tests run them on a fresh
// node; the isolation tests run them all against one node next to a good session.

fn sc_hello_first(c: &Ctx) {
    let mut ws = c.ws();
    // Send nothing: the server speaks first.
    let v = ws.read_json(T);
    assert_eq!(v["op"], 10, "first message must be Hello: {v}");
    let hb = v["d"]["heartbeat_interval"]
        .as_u64()
        .unwrap_or_else(|| panic!("Hello without heartbeat_interval: {v}"));
    assert!(hb > 0, "heartbeat_interval {hb}");
}

fn sc_non_json_before_identify(c: &Ctx) {
    let mut ws = c.hello();
    ws.send_text("this is not json {").unwrap();
    assert_close(&mut ws, &[4002], "non-JSON text before identify");
}

fn sc_non_json_after_ready(c: &Ctx) {
    let mut ws = c.ready();
    ws.send_text("{\"op\": 1, \"d\": nul").unwrap();
    assert_close(&mut ws, &[4002], "truncated JSON after READY");
}

fn sc_binary_garbage(c: &Ctx) {
    let mut ws = c.ready();
    ws.send(
        OpCode::Binary,
        true,
        &[0xde, 0xad, 0xbe, 0xef, 0x00, 0xff, 0x83, 0x68],
    )
    .unwrap();
    assert_close(&mut ws, &[4002], "binary garbage frame");
}

/// JSON in binary frames, as hikari sends every payload (Discord takes
/// them): Identify, a heartbeat and READY's dispatches work as over text,
/// and the answers are text frames, as Discord's are without compression.
fn sc_binary_json_frames(c: &Ctx) {
    let mut ws = c.hello();
    let identify = support::bot::identify_payload(&c.token, BOT_INTENTS, None);
    ws.send(OpCode::Binary, true, identify.to_string().as_bytes())
        .unwrap();
    let ready = ws.read_until(0, Some("READY"), T);
    assert_eq!(ready["s"], 1, "{ready}");
    ws.send(OpCode::Binary, true, br#"{"op":1,"d":1}"#).unwrap();
    // Text frames back (read_until parses text only and fails on binary).
    let ack = ws.read_until(11, None, T);
    assert_eq!(ack["op"], 11);
    // A fragmented binary message: the same as a text one.
    ws.send(OpCode::Binary, false, br#"{"op":1,"#).unwrap();
    ws.send(OpCode::Continuation, true, br#""d":1}"#).unwrap();
    assert_eq!(ws.read_until(11, None, T)["op"], 11);
}

/// A binary frame must hold UTF-8 JSON like a text one: else 4002.
fn sc_binary_not_utf8(c: &Ctx) {
    let mut ws = c.hello();
    ws.send(OpCode::Binary, true, b"{\"op\":1,\"d\":\"\xff\xfe\"}")
        .unwrap();
    assert_close(&mut ws, &[4002], "binary frame with invalid UTF-8");
}

/// The 4096-byte limit holds for binary frames too.
fn sc_binary_oversized(c: &Ctx) {
    let mut ws = c.ready();
    ws.send(OpCode::Binary, true, padded_heartbeat(4097).as_bytes())
        .unwrap();
    assert_close(&mut ws, &[4002], "4097-byte binary payload");
}

/// Intents must be an integer, as Discord requires: a string is 4013.
fn sc_intents_as_a_string(c: &Ctx) {
    let mut ws = c.hello();
    ws.send_json(&json!({"op": 2, "d": {"token": c.token, "intents": "513",
        "properties": {"os": "linux", "browser": "t", "device": "t"}}}))
        .unwrap();
    assert_close(&mut ws, &[4013], "intents as a string");
}

/// A heartbeat padded with JSON whitespace to exactly `len` bytes.
fn padded_heartbeat(len: usize) -> String {
    let base = "{\"op\":1,\"d\":null";
    let mut s = String::from(base);
    s.push_str(&" ".repeat(len - base.len() - 1));
    s.push('}');
    assert_eq!(s.len(), len);
    s
}

fn sc_exactly_4096_is_accepted(c: &Ctx) {
    let mut ws = c.hello();
    ws.send_text(&padded_heartbeat(4096)).unwrap();
    let v = ws.read_until(11, None, T);
    assert_eq!(v["op"], 11);
}

fn sc_oversized_payload(c: &Ctx) {
    let mut ws = c.ready();
    ws.send_text(&padded_heartbeat(4097)).unwrap();
    assert_close(&mut ws, &[4002], "4097-byte payload");
}

fn sc_oversized_large_frame(c: &Ctx) {
    let mut ws = c.ready();
    let big = format!("{{\"op\":1,\"d\":null,\"x\":\"{}\"}}", "a".repeat(100_000));
    let _ = ws.send_text(&big); // the server may close before reading it all
    assert_close(&mut ws, &[4002], "100 KB payload");
}

fn sc_huge_length_header_only(c: &Ctx) {
    let mut ws = c.ready();
    // Announce a 10 MB masked text frame and send only the header and mask:
    // the server must not wait for (or buffer) the payload.
    let mut hdr = vec![0x81u8, 0x80 | 127];
    hdr.extend_from_slice(&(10u64 << 20).to_be_bytes());
    hdr.extend_from_slice(&[1, 2, 3, 4]);
    ws.write_raw(&hdr).unwrap();
    assert_close(&mut ws, &[4002], "frame header announcing 10 MB");
}

fn sc_fragmented_oversized(c: &Ctx) {
    let mut ws = c.ready();
    let part1 = format!("{{\"op\":1,\"d\":null,\"x\":\"{}", "a".repeat(3000));
    let part2 = format!("{}\"}}", "b".repeat(2000));
    ws.send(OpCode::Text, false, part1.as_bytes()).unwrap();
    let _ = ws.send(OpCode::Continuation, true, part2.as_bytes());
    assert_close(
        &mut ws,
        &[4002],
        "fragmented message totalling > 4096 bytes",
    );
}

fn sc_fragmented_many_small(c: &Ctx) {
    let mut ws = c.ready();
    // 50 continuation frames of 100 bytes each: each is small, the total is 5 KB.
    ws.send(OpCode::Text, false, b"{\"op\":1,\"d\":null,\"x\":\"")
        .unwrap();
    for _ in 0..50 {
        if ws.send(OpCode::Continuation, false, &[b'c'; 100]).is_err() {
            break;
        }
    }
    let _ = ws.send(OpCode::Continuation, true, b"\"}");
    assert_close(&mut ws, &[4002], "50 small fragments totalling 5 KB");
}

fn sc_fragmented_valid(c: &Ctx) {
    let mut ws = c.hello();
    ws.send(OpCode::Text, false, b"{\"op\":1,").unwrap();
    ws.send(OpCode::Continuation, false, b"\"d\":").unwrap();
    // A control frame may come between fragments (RFC 6455 5.4).
    ws.send(OpCode::Ping, true, b"between").unwrap();
    ws.send(OpCode::Continuation, true, b"null}").unwrap();
    let v = ws.read_until(11, None, T);
    assert_eq!(v["op"], 11, "fragmented heartbeat must be answered");
}

fn sc_ping_pong(c: &Ctx) {
    let mut ws = c.hello();
    ws.send(OpCode::Ping, true, b"ping-payload").unwrap();
    // read_message answers pings itself but returns nothing for pongs, so read frames.
    let deadline = Instant::now() + T;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match ws.read_frame(left) {
            Incoming::Message(OwnedMessage::Pong(p)) => {
                assert_eq!(p, b"ping-payload", "Pong must echo the Ping payload");
                return;
            }
            Incoming::Message(_) => {}
            Incoming::Timeout => panic!("no Pong for a Ping"),
            other => panic!("{other:?} instead of Pong"),
        }
    }
}

fn sc_unknown_op(c: &Ctx) {
    let mut ws = c.ready();
    ws.send_json(&json!({"op": 42, "d": {}})).unwrap();
    assert_close(&mut ws, &[4001], "unknown op 42");
}

fn sc_presence_before_identify(c: &Ctx) {
    let mut ws = c.hello();
    ws.send_json(
        &json!({"op": 3, "d": {"since": null, "activities": [], "status": "online", "afk": false}}),
    )
    .unwrap();
    assert_close(&mut ws, &[4003], "op 3 before identify");
}

fn sc_request_members_before_identify(c: &Ctx) {
    let mut ws = c.hello();
    ws.send_json(&json!({"op": 8, "d": {"guild_id": "1", "query": "", "limit": 0}}))
        .unwrap();
    assert_close(&mut ws, &[4003], "op 8 before identify");
}

fn sc_identify_twice(c: &Ctx) {
    let mut ws = c.ready();
    ws.identify(&c.token, BOT_INTENTS).unwrap();
    assert_close(&mut ws, &[4005], "second identify");
}

fn sc_bad_token(c: &Ctx) {
    let mut ws = c.hello();
    ws.identify("not-a-real-token", BOT_INTENTS).unwrap();
    assert_close(&mut ws, &[4004], "bad token");
}

fn sc_bad_token_similar(c: &Ctx) {
    // The real token with its last character changed.
    let mut t = c.token.clone();
    let last = t.pop().unwrap();
    t.push(if last == 'A' { 'B' } else { 'A' });
    let mut ws = c.hello();
    ws.identify(&t, BOT_INTENTS).unwrap();
    assert_close(&mut ws, &[4004], "token with one character changed");
}

fn sc_empty_token(c: &Ctx) {
    let mut ws = c.hello();
    ws.identify("", BOT_INTENTS).unwrap();
    assert_close(&mut ws, &[4004], "empty token");
}

fn sc_token_with_bot_prefix(c: &Ctx) {
    let mut ws = c.hello();
    ws.identify(&format!("Bot {}", c.token), BOT_INTENTS)
        .unwrap();
    let v = ws.read_until(0, Some("READY"), T);
    assert!(
        v["d"]["session_id"].is_string(),
        "READY without session_id: {v}"
    );
}

fn sc_undefined_intent_bit_40(c: &Ctx) {
    let mut ws = c.hello();
    ws.identify(&c.token, BOT_INTENTS | (1 << 40)).unwrap();
    assert_close(&mut ws, &[4013], "intent bit 40");
}

fn sc_undefined_intent_bit_17(c: &Ctx) {
    let mut ws = c.hello();
    ws.identify(&c.token, BOT_INTENTS | (1 << 17)).unwrap();
    assert_close(&mut ws, &[4013], "intent bit 17 (undefined)");
}

fn sc_unapproved_privileged_intent(c: &Ctx) {
    let mut ws = c.hello();
    ws.identify(&c.token, BOT_INTENTS | GUILD_PRESENCES)
        .unwrap();
    assert_close(&mut ws, &[4014], "GUILD_PRESENCES (not approved)");
}

fn sc_approved_privileged_intents(c: &Ctx) {
    let mut ws = c.hello();
    ws.identify(&c.token, BOT_INTENTS | GUILD_MEMBERS | MESSAGE_CONTENT)
        .unwrap();
    ws.read_until(0, Some("READY"), T);
}

fn sc_invalid_shard(c: &Ctx, shard: [u64; 2]) {
    let mut ws = c.hello();
    ws.send_json(&support::bot::identify_payload(
        &c.token,
        BOT_INTENTS,
        Some(shard),
    ))
    .unwrap();
    assert_close(&mut ws, &[4010], &format!("shard {shard:?}"));
}

fn sc_rate_limit(c: &Ctx) {
    let mut ws = c.hello();
    for i in 0..120 {
        ws.send_json(&json!({"op": 1, "d": null})).unwrap();
        let v = ws.read_until(11, None, T);
        assert_eq!(v["op"], 11, "heartbeat {} of 120 must be answered", i + 1);
    }
    ws.send_json(&json!({"op": 1, "d": null})).unwrap();
    assert_close(&mut ws, &[4008], "121st command within 60 s");
}

fn sc_unmasked_frame(c: &Ctx) {
    let mut ws = c.ready();
    ws.send_unmasked(OpCode::Text, b"{\"op\":1,\"d\":null}")
        .unwrap();
    assert_protocol_error(&mut ws, "unmasked client frame");
}

fn sc_rsv_bits(c: &Ctx, rsv: u8) {
    let mut ws = c.ready();
    ws.send_first_byte(0x80 | rsv | OpCode::Text.as_u8(), b"{\"op\":1,\"d\":null}")
        .unwrap();
    assert_protocol_error(&mut ws, &format!("RSV bits {rsv:#04x}"));
}

fn sc_reserved_opcode(c: &Ctx) {
    let mut ws = c.ready();
    ws.send_first_byte(0x80 | 0x3, b"x").unwrap();
    assert_protocol_error(&mut ws, "reserved opcode 0x3");
}

fn sc_oversized_ping(c: &Ctx) {
    let mut ws = c.ready();
    ws.send(OpCode::Ping, true, &[b'p'; 200]).unwrap();
    assert_protocol_error(&mut ws, "ping with 200-byte payload");
}

fn sc_continuation_without_start(c: &Ctx) {
    let mut ws = c.ready();
    ws.send(OpCode::Continuation, true, b"{\"op\":1}").unwrap();
    assert_protocol_error(&mut ws, "continuation frame without a start");
}

fn sc_encoding_etf(c: &Ctx) {
    let mut ws = Ws::connect(c.gateway, "/?v=10&encoding=etf");
    let (code, reason) = assert_close(&mut ws, &[4002, 4012], "encoding=etf");
    assert!(
        reason.to_ascii_lowercase().contains("etf"),
        "close {code} reason must mention etf: {reason:?}"
    );
    assert!(
        reason.contains("encoding=json"),
        "close {code} reason must name what is served: {reason:?}"
    );
}

/// Any other encoding: refused naming what is served, not etf.
fn sc_encoding_unknown(c: &Ctx) {
    let mut ws = Ws::connect(c.gateway, "/?v=10&encoding=msgpack");
    let (code, reason) = assert_close(&mut ws, &[4002], "encoding=msgpack");
    assert!(
        reason.contains("encoding=json") && !reason.contains("etf"),
        "close {code} reason must name what is served: {reason:?}"
    );
}

fn sc_version_8(c: &Ctx) {
    let mut ws = Ws::connect(c.gateway, "/?v=8&encoding=json");
    assert_close(&mut ws, &[4012], "v=8");
}

fn sc_silent_tcp(c: &Ctx, timeout_ms: u64) {
    let mut s = TcpStream::connect(c.gateway).unwrap();
    let t0 = Instant::now();
    let closed = read_to_eof(&mut s, Duration::from_millis(timeout_ms * 4 + 3000));
    let el = t0.elapsed();
    assert!(
        closed,
        "silent TCP client still connected after {el:?} (handshake timeout {timeout_ms} ms)"
    );
    assert!(
        el >= Duration::from_millis(timeout_ms * 8 / 10),
        "silent client dropped after {el:?}, before the {timeout_ms} ms handshake timeout"
    );
}

fn sc_half_http_request(c: &Ctx, timeout_ms: u64) {
    let mut s = TcpStream::connect(c.gateway).unwrap();
    s.write_all(b"GET /?v=10&encoding=json HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConn")
        .unwrap();
    let t0 = Instant::now();
    let closed = read_to_eof(&mut s, Duration::from_millis(timeout_ms * 4 + 3000));
    let el = t0.elapsed();
    assert!(
        closed,
        "half-request client still connected after {el:?} (handshake timeout {timeout_ms} ms)"
    );
    assert!(
        el >= Duration::from_millis(timeout_ms * 8 / 10),
        "half-request client dropped after {el:?}, before the {timeout_ms} ms handshake timeout"
    );
}

/// Reads until EOF or reset (true) or the timeout (false). Any bytes (e.g. an HTTP 408) are ignored.
fn read_to_eof(s: &mut TcpStream, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let mut tmp = [0u8; 4096];
    loop {
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        s.set_read_timeout(Some(deadline - now)).unwrap();
        match s.read(&mut tmp) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
}

fn sc_zombie(c: &Ctx) {
    let mut ws = c.ws();
    let hb = ws.expect_hello();
    // Timed from Hello: the server may start the heartbeat clock there.
    let t0 = Instant::now();
    ws.identify(&c.token, BOT_INTENTS).unwrap();
    ws.read_until(0, Some("READY"), T);
    // Never heartbeat (not even when the server asks with op 1).
    let limit = Duration::from_millis(hb * 5 + 2000);
    let (m, texts) = ws.read_until_closed(limit);
    let el = t0.elapsed();
    eprintln!(
        "zombie (interval {hb} ms): {m:?} after {el:?}, {} messages before",
        texts.len()
    );
    let (code, reason) = match m {
        Msg::Close(Some(code), reason) => (code, reason),
        other => panic!("zombie session (heartbeat_interval {hb} ms): expected a Close, got {other:?} after {el:?} (texts {texts:?})"),
    };
    assert!(
        matches!(code, 4000 | 4001 | 4002 | 4003 | 4005 | 4008 | 4009),
        "zombie close must be resumable (4000 range) or 4009, got {code} {reason:?}"
    );
    assert!(
        !reason.trim().is_empty(),
        "zombie close {code} carries an empty reason"
    );
    assert!(
        el >= Duration::from_millis(hb),
        "zombie closed after {el:?}, before one heartbeat interval ({hb} ms)"
    );
    assert!(
        el <= Duration::from_millis(hb * 5),
        "zombie closed only after {el:?} (interval {hb} ms; expected ~1.5 intervals)"
    );
    for t in &texts {
        let v: Value = serde_json::from_str(t).unwrap();
        assert!(
            v["op"] == 1 || v["op"] == 0,
            "unexpected message to a zombie: {v}"
        );
    }
}

/// Upgraded, then silent (optionally after half a frame header): closed like a zombie.
fn sc_silent_after_hello(c: &Ctx, partial_frame: bool) {
    let what = if partial_frame {
        "half a frame header, then silence"
    } else {
        "silence after Hello"
    };
    let mut ws = c.ws();
    let hb = ws.expect_hello();
    let t0 = Instant::now();
    if partial_frame {
        ws.write_raw(&[0x81, 0xfe, 0x00]).unwrap();
    }
    let (m, texts) = ws.read_until_closed(Duration::from_millis(hb * 5 + 2000));
    let el = t0.elapsed();
    let (code, reason) = match m {
        Msg::Close(Some(code), reason) => (code, reason),
        other => panic!("{what} (heartbeat_interval {hb} ms): expected a Close, got {other:?} after {el:?} (texts {texts:?})"),
    };
    assert!(
        matches!(code, 4000 | 4003 | 4009),
        "{what}: close {code} {reason:?}"
    );
    assert!(
        !reason.trim().is_empty(),
        "{what}: close {code} carries an empty reason"
    );
    assert!(
        el >= Duration::from_millis(hb),
        "{what}: closed after {el:?}, before one heartbeat interval ({hb} ms)"
    );
    assert!(
        el <= Duration::from_millis(hb * 5),
        "{what}: closed only after {el:?} (interval {hb} ms)"
    );
}

fn sc_heartbeating_client_survives(c: &Ctx) {
    let mut ws = c.ws();
    let hb = ws.expect_hello();
    ws.identify(&c.token, BOT_INTENTS).unwrap();
    ws.read_until(0, Some("READY"), T);
    // Heartbeat at 0.6 intervals for 4 intervals: must never be closed.
    let period = Duration::from_millis(hb * 6 / 10);
    let end = Instant::now() + Duration::from_millis(hb * 4);
    let mut acks = 0;
    while Instant::now() < end {
        ws.heartbeat().unwrap();
        let next = Instant::now() + period;
        loop {
            let left = next.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match ws.read_message(left) {
                Msg::Timeout => break,
                Msg::Text(t) => {
                    let v: Value = serde_json::from_str(&t).unwrap();
                    if v["op"] == 11 {
                        acks += 1;
                    }
                    if v["op"] == 1 {
                        ws.heartbeat().unwrap();
                    }
                }
                other => panic!("heartbeating session was ended: {other:?} after {acks} ACKs"),
            }
        }
    }
    assert!(acks >= 5, "only {acks} heartbeat ACKs");
}

fn sc_heartbeat_before_and_after_identify(c: &Ctx) {
    let mut ws = c.hello();
    ws.send_json(&json!({"op": 1, "d": null})).unwrap();
    let v = ws.read_json(T);
    assert_eq!(v["op"], 11, "heartbeat before identify must be ACKed: {v}");
    ws.identify(&c.token, BOT_INTENTS).unwrap();
    let r = ws.read_until(0, Some("READY"), T);
    assert_eq!(r["s"], 1, "READY must have s = 1: {r}");
    heartbeat_ack(&mut ws, "heartbeat after READY");
}

fn sc_client_close_1000(c: &Ctx) {
    let mut ws = c.ready();
    ws.send_close(1000, "bye").unwrap();
    let (m, _) = ws.read_until_closed(T);
    match m {
        Msg::Close(code, _) => assert!(
            code == Some(1000) || code.is_none(),
            "close reply should echo 1000, got {code:?}"
        ),
        other => panic!("client Close 1000: expected a Close frame back, got {other:?}"),
    }
    assert!(
        ws.wait_eof(Duration::from_secs(5)),
        "no TCP EOF after the close handshake"
    );
}

fn sc_resume_unknown(c: &Ctx) {
    for sid in [
        "00deadbeefdeadbeefdeadbeefdeadbe",
        "01ffffffffffffffffffffffffffffff",
        "not-a-session-id",
    ] {
        let mut ws = c.hello();
        ws.send_json(&json!({"op": 6, "d": {"token": c.token, "session_id": sid, "seq": 3}}))
            .unwrap();
        let v = ws.read_until(9, None, T);
        assert_eq!(
            v["d"],
            json!(false),
            "resume of unknown session {sid}: op 9 must have d=false: {v}"
        );
    }
}

fn sc_path_variants(c: &Ctx) {
    for path in [
        "/",
        "/?v=10&encoding=json",
        "/resume",
        "/resume/?v=10",
        "/?v=9",
        // An unknown codec is served plain text (zlib-stream and zstd-stream
        // are served compressed: tests/compression.rs).
        "/?v=10&encoding=json&compress=brotli-stream",
    ] {
        let mut ws =
            Ws::try_connect(c.gateway, path, &[]).unwrap_or_else(|e| panic!("path {path}: {e}"));
        let v = match ws.read_message(T) {
            Msg::Text(t) => serde_json::from_str::<Value>(&t)
                .unwrap_or_else(|e| panic!("path {path}: bad JSON {t:?}: {e}")),
            other => panic!("path {path}: expected Hello in a text frame, got {other:?}"),
        };
        assert_eq!(v["op"], 10, "path {path}: {v}");
        ws.identify(&c.token, BOT_INTENTS).unwrap();
        ws.read_until(0, Some("READY"), T);
        heartbeat_ack(&mut ws, path);
        ws.send_close(1000, "").unwrap();
    }
}

fn sc_permessage_deflate_declined(c: &Ctx) {
    let mut ws = Ws::try_connect(
        c.gateway,
        "/?v=10&encoding=json",
        &[(
            "Sec-WebSocket-Extensions",
            "permessage-deflate; client_max_window_bits",
        )],
    )
    .unwrap();
    assert!(
        support::http::header(&ws.response_head, "sec-websocket-extensions").is_none(),
        "permessage-deflate must be declined: {:?}",
        ws.response_head
    );
    ws.expect_hello();
}

/// Odd inputs with no single documented answer: the node must end or answer
/// each connection without harming anything else. Used by the isolation tests.
fn sc_fuzz_misc(c: &Ctx) {
    let payloads: Vec<Vec<u8>> = vec![
        b"{}".to_vec(),
        b"[]".to_vec(),
        b"null".to_vec(),
        b"{\"op\":\"1\"}".to_vec(),
        b"{\"op\":-1}".to_vec(),
        b"{\"op\":1e300}".to_vec(),
        b"{\"op\":2,\"d\":null}".to_vec(),
        b"{\"op\":2,\"d\":{\"token\":123,\"intents\":\"x\"}}".to_vec(),
        b"{\"op\":2,\"d\":{\"token\":\"t\",\"intents\":-1}}".to_vec(),
        b"{\"op\":6,\"d\":{}}".to_vec(),
        format!("{}1{}", "[".repeat(2000), "]".repeat(2000)).into_bytes(),
        vec![0xff, 0xfe, 0x00],
    ];
    for p in payloads {
        let mut ws = c.hello();
        let _ = ws.send(OpCode::Text, true, &p);
        let _ = ws.read_until_closed(Duration::from_secs(3));
    }
    // Raw HTTP oddities.
    for req in [
        &b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
        b"\x16\x03\x01\x00\x05hello",
        b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n",
    ] {
        let mut s = TcpStream::connect(c.gateway).unwrap();
        let _ = s.write_all(req);
        read_to_eof(&mut s, Duration::from_secs(3));
    }
    let mut s = TcpStream::connect(c.gateway).unwrap();
    let mut big = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    big.extend(std::iter::repeat_n(b'a', 200_000));
    let _ = s.write_all(&big);
    read_to_eof(&mut s, Duration::from_secs(3));
}

// ---------------------------------------------------------------------------
// The cases, written once: `cases!` makes one `#[test]` per case, each on its
// own node, and the list `CASES` the isolation tests below run against one
// node next to a good session.

/// A scenario and whether the isolation tests run it too.
struct Case {
    name: &'static str,
    run: fn(&Ctx),
    isolation: bool,
}

const NO_DEMO_TRAFFIC: &[&str] = &["--no-demo-traffic"];
const HANDSHAKE_500: &[&str] = &["--no-demo-traffic", "--handshake-timeout-ms", "500"];
const HEARTBEAT_500: &[&str] = &["--no-demo-traffic", "--heartbeat-interval-ms", "500"];

/// `test_name: scenario[, on FLAGS];` is a `#[test]` on a node started with
/// FLAGS (default `--no-demo-traffic`) that must be healthy after the scenario, and
/// an isolation case. `own_test_only` before it leaves it out of the
/// isolation runs; `isolation_only` makes no `#[test]` of it.
macro_rules! cases {
    (@acc [$($list:tt)*]) => {
        const CASES: &[Case] = &[$($list)*];
    };
    (@acc [$($list:tt)*] isolation_only $name:ident: $sc:expr; $($rest:tt)*) => {
        cases!(@acc [$($list)* Case { name: stringify!($name), run: $sc, isolation: true },] $($rest)*);
    };
    (@acc [$($list:tt)*] own_test_only $name:ident: $sc:expr $(, on $flags:expr)?; $($rest:tt)*) => {
        cases!(@test $name, $sc, cases!(@flags $($flags)?));
        cases!(@acc [$($list)* Case { name: stringify!($name), run: $sc, isolation: false },] $($rest)*);
    };
    (@acc [$($list:tt)*] $name:ident: $sc:expr $(, on $flags:expr)?; $($rest:tt)*) => {
        cases!(@test $name, $sc, cases!(@flags $($flags)?));
        cases!(@acc [$($list)* Case { name: stringify!($name), run: $sc, isolation: true },] $($rest)*);
    };
    (@test $name:ident, $sc:expr, $flags:expr) => {
        #[test]
        fn $name() {
            run_case($flags, $sc);
        }
    };
    (@flags) => { NO_DEMO_TRAFFIC };
    (@flags $flags:expr) => { $flags };
    ($($cases:tt)*) => { cases!(@acc [] $($cases)*); };
}

/// One case on a fresh node, which must be healthy after it.
fn run_case(flags: &[&str], sc: fn(&Ctx)) {
    let node = Node::start(flags);
    sc(&Ctx::of(&node));
    assert_node_healthy(&node);
}

fn assert_node_healthy(node: &Node) {
    let (status, body) = http_get(node.admin, "/healthz").expect("GET /healthz");
    assert_eq!(status, 200, "/healthz after the test: {body}");
    // And a fresh session still works.
    let mut ws = Ws::connect(node.gateway, "/?v=10&encoding=json");
    ws.login(&node.token, BOT_INTENTS);
}

fn sc_default_heartbeat_interval(c: &Ctx) {
    let mut ws = c.ws();
    assert_eq!(ws.expect_hello(), 41250);
}

// Left out of the isolation runs (`own_test_only`): the default heartbeat
// interval (those runs set their own), the variants of a case they run
// (shard 1 of 1, RSV2), accepted identifies and heartbeats, and the
// heartbeating client, which needs a 500 ms interval.
cases! {
    hello_arrives_first: sc_hello_first;
    own_test_only hello_has_default_heartbeat_interval: sc_default_heartbeat_interval;
    non_json_text_before_identify_closes_4002: sc_non_json_before_identify;
    non_json_text_after_ready_closes_4002: sc_non_json_after_ready;
    binary_garbage_closes_4002: sc_binary_garbage;
    json_in_binary_frames_is_accepted: sc_binary_json_frames;
    binary_frame_not_utf8_closes_4002: sc_binary_not_utf8;
    binary_payload_of_4097_bytes_closes_4002: sc_binary_oversized;
    intents_as_a_string_closes_4013: sc_intents_as_a_string;
    payload_of_exactly_4096_bytes_is_accepted: sc_exactly_4096_is_accepted;
    payload_of_4097_bytes_closes_4002: sc_oversized_payload;
    payload_of_100k_closes_4002: sc_oversized_large_frame;
    frame_header_announcing_10mb_closes_4002: sc_huge_length_header_only;
    fragmented_message_over_4096_closes_4002: sc_fragmented_oversized;
    many_small_fragments_over_4096_close_4002: sc_fragmented_many_small;
    fragmented_message_with_interleaved_ping_is_accepted: sc_fragmented_valid;
    ping_gets_pong: sc_ping_pong;
    unknown_op_closes_4001: sc_unknown_op;
    presence_before_identify_closes_4003: sc_presence_before_identify;
    request_members_before_identify_closes_4003: sc_request_members_before_identify;
    identify_twice_closes_4005: sc_identify_twice;
    bad_token_closes_4004: sc_bad_token;
    token_with_one_char_changed_closes_4004: sc_bad_token_similar;
    empty_token_closes_4004: sc_empty_token;
    own_test_only token_with_bot_prefix_is_accepted: sc_token_with_bot_prefix;
    undefined_intent_bit_40_closes_4013: sc_undefined_intent_bit_40;
    undefined_intent_bit_17_closes_4013: sc_undefined_intent_bit_17;
    unapproved_privileged_intent_closes_4014: sc_unapproved_privileged_intent;
    own_test_only approved_privileged_intents_are_accepted: sc_approved_privileged_intents;
    shard_2_of_2_closes_4010: |c: &Ctx| sc_invalid_shard(c, [2, 2]);
    shard_0_of_0_closes_4010: |c: &Ctx| sc_invalid_shard(c, [0, 0]);
    own_test_only shard_1_of_1_closes_4010: |c: &Ctx| sc_invalid_shard(c, [1, 1]);
    command_121_within_a_minute_closes_4008: sc_rate_limit;
    unmasked_frame_is_a_protocol_error: sc_unmasked_frame;
    rsv1_bit_is_a_protocol_error: |c: &Ctx| sc_rsv_bits(c, 0x40);
    own_test_only rsv2_bit_is_a_protocol_error: |c: &Ctx| sc_rsv_bits(c, 0x20);
    rsv3_bit_is_a_protocol_error: |c: &Ctx| sc_rsv_bits(c, 0x10);
    reserved_opcode_is_a_protocol_error: sc_reserved_opcode;
    oversized_ping_is_a_protocol_error: sc_oversized_ping;
    continuation_without_start_is_a_protocol_error: sc_continuation_without_start;
    encoding_etf_is_refused_with_a_reason: sc_encoding_etf;
    unknown_encoding_is_refused_naming_json: sc_encoding_unknown;
    version_8_closes_4012: sc_version_8;
    silent_tcp_client_is_dropped_after_handshake_timeout:
        |c: &Ctx| sc_silent_tcp(c, 500), on HANDSHAKE_500;
    half_http_request_is_dropped_after_handshake_timeout:
        |c: &Ctx| sc_half_http_request(c, 500), on HANDSHAKE_500;
    session_without_heartbeats_is_closed: sc_zombie, on HEARTBEAT_500;
    own_test_only session_with_heartbeats_is_kept:
        sc_heartbeating_client_survives, on HEARTBEAT_500;
    silent_connection_after_hello_is_closed:
        |c: &Ctx| sc_silent_after_hello(c, false), on HEARTBEAT_500;
    half_a_frame_header_then_silence_is_closed:
        |c: &Ctx| sc_silent_after_hello(c, true), on HEARTBEAT_500;
    own_test_only heartbeat_is_acked_before_and_after_identify:
        sc_heartbeat_before_and_after_identify;
    client_close_1000_gets_a_close_back: sc_client_close_1000;
    resume_of_unknown_session_gets_invalid_session_false: sc_resume_unknown;
    all_path_variants_upgrade: sc_path_variants;
    permessage_deflate_is_declined: sc_permessage_deflate_declined;
    // No single documented answer to assert: only next to the good session.
    isolation_only fuzz_misc: sc_fuzz_misc;
}

// ---------------------------------------------------------------------------
// Isolation: a good session next to all of the above.

struct GoodStats {
    ready: bool,
    message_creates: usize,
    acks: usize,
    max_gap: Duration,
    end: Option<String>,
    seq_errors: Vec<String>,
}

/// Runs a well-behaved session until `stop`: heartbeats on time, checks that `s`
/// grows by exactly 1 and records the longest gap between MESSAGE_CREATE events.
fn run_good_session(
    gateway: SocketAddr,
    token: String,
    stop: Arc<AtomicBool>,
    started: Arc<AtomicBool>,
) -> GoodStats {
    let mut st = GoodStats {
        ready: false,
        message_creates: 0,
        acks: 0,
        max_gap: Duration::ZERO,
        end: None,
        seq_errors: vec![],
    };
    let mut ws = Ws::connect(gateway, "/?v=10&encoding=json");
    let hb = Duration::from_millis(ws.expect_hello());
    ws.identify(&token, BOT_INTENTS).unwrap();
    let mut next_hb = Instant::now() + hb / 2;
    let mut last_s: Option<u64> = None;
    let mut last_msg: Option<Instant> = None;
    loop {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        if Instant::now() >= next_hb {
            ws.heartbeat().unwrap();
            next_hb = Instant::now() + hb / 2;
        }
        let wait = next_hb
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(50));
        match ws.read_message(wait) {
            Msg::Timeout => {}
            Msg::Text(t) => {
                let v: Value = serde_json::from_str(&t).unwrap();
                match v["op"].as_u64() {
                    Some(0) => {
                        let s = v["s"].as_u64().unwrap();
                        if let Some(prev) = last_s {
                            if s != prev + 1 {
                                st.seq_errors
                                    .push(format!("s {s} after {prev} (t={})", v["t"]));
                            }
                        }
                        last_s = Some(s);
                        ws.seq = Some(s);
                        if v["t"] == "READY" {
                            st.ready = true;
                            started.store(true, Ordering::SeqCst);
                        }
                        if v["t"] == "MESSAGE_CREATE" {
                            let now = Instant::now();
                            if let Some(prev) = last_msg {
                                st.max_gap = st.max_gap.max(now - prev);
                            }
                            last_msg = Some(now);
                            st.message_creates += 1;
                        }
                    }
                    Some(1) => ws.heartbeat().unwrap(),
                    Some(11) => st.acks += 1,
                    _ => {}
                }
            }
            other => {
                st.end = Some(format!("{other:?}"));
                break;
            }
        }
    }
    if let Some(prev) = last_msg {
        st.max_gap = st.max_gap.max(prev.elapsed());
    }
    st
}

fn spawn_good(node: &Node) -> (Arc<AtomicBool>, thread::JoinHandle<GoodStats>) {
    let stop = Arc::new(AtomicBool::new(false));
    let started = Arc::new(AtomicBool::new(false));
    let (g, t, s, st) = (
        node.gateway,
        node.token.clone(),
        stop.clone(),
        started.clone(),
    );
    let h = thread::spawn(move || run_good_session(g, t, s, st));
    let deadline = Instant::now() + T;
    while !started.load(Ordering::SeqCst) {
        assert!(
            Instant::now() < deadline,
            "good session got no READY in 10 s"
        );
        assert!(!h.is_finished(), "good session ended before READY");
        thread::sleep(Duration::from_millis(10));
    }
    (stop, h)
}

/// The cases the isolation tests run.
fn isolation_cases() -> Vec<&'static Case> {
    CASES.iter().filter(|c| c.isolation).collect()
}

const ISOLATION_FLAGS: &[&str] = &[
    "--demo-interval-ms",
    "100",
    "--heartbeat-interval-ms",
    "1000",
    "--handshake-timeout-ms",
    "500",
];

/// Runs `f`, returning its panic message if it failed (the isolation tests
/// judge the good session, not each scenario, which has its own test).
fn try_scenario(case: &Case, c: &Ctx) -> Option<String> {
    catch_unwind(AssertUnwindSafe(|| (case.run)(c)))
        .err()
        .map(|e| {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            format!("{}: {msg}", case.name)
        })
}

fn check_good(st: &GoodStats, min_events: usize, what: &str) {
    assert!(st.ready, "{what}: good session never got READY");
    assert!(
        st.end.is_none(),
        "{what}: good session was ended: {:?}",
        st.end
    );
    assert!(
        st.seq_errors.is_empty(),
        "{what}: good session saw non-consecutive s: {:?}",
        st.seq_errors
    );
    assert!(
        st.message_creates >= min_events,
        "{what}: good session got only {} MESSAGE_CREATE (want >= {min_events})",
        st.message_creates
    );
    assert!(
        st.max_gap < Duration::from_secs(3),
        "{what}: good session went {:?} without a MESSAGE_CREATE (demo every 100 ms)",
        st.max_gap
    );
    assert!(st.acks >= 1, "{what}: good session got no heartbeat ACK");
}

#[test]
fn good_session_survives_all_hostile_clients_in_turn() {
    let node = Node::start(ISOLATION_FLAGS);
    let c = Ctx::of(&node);
    let (stop, h) = spawn_good(&node);
    let t0 = Instant::now();
    let mut failures = Vec::new();
    for case in isolation_cases() {
        if let Some(e) = try_scenario(case, &c) {
            failures.push(e);
        }
        assert!(
            node_alive(&node),
            "gatewayd is gone after scenario {}",
            case.name
        );
    }
    let el = t0.elapsed();
    stop.store(true, Ordering::SeqCst);
    let st = h.join().expect("good session thread panicked");
    eprintln!(
        "hostile scenarios took {el:?}; {} scenario assertion(s) failed (each has its own test): {failures:#?}",
        failures.len()
    );
    let min = ((el.as_millis() / 100) as usize / 4).max(5);
    check_good(&st, min, "session opened before the hostile clients");

    // A session opened after them works too.
    let (stop, h) = spawn_good(&node);
    thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::SeqCst);
    let st = h.join().unwrap();
    check_good(&st, 3, "session opened after the hostile clients");
    let (status, body) = http_get(node.admin, "/healthz").unwrap();
    assert_eq!(status, 200, "/healthz: {body}");
}

#[test]
fn good_session_keeps_receiving_while_hostile_clients_run_concurrently() {
    let node = Node::start(ISOLATION_FLAGS);
    let c = Ctx::of(&node);
    let (stop_good, h) = spawn_good(&node);
    let stop = Arc::new(AtomicBool::new(false));
    let runs = Arc::new(AtomicUsize::new(0));
    let mut hostile = Vec::new();
    for k in 0..3 {
        let (c, stop, runs) = (c.clone(), stop.clone(), runs.clone());
        hostile.push(thread::spawn(move || {
            let sc = isolation_cases();
            let mut i = k * 7;
            while !stop.load(Ordering::SeqCst) {
                let _ = try_scenario(sc[i % sc.len()], &c);
                runs.fetch_add(1, Ordering::SeqCst);
                i += 1;
            }
        }));
    }
    thread::sleep(Duration::from_secs(6));
    stop.store(true, Ordering::SeqCst);
    for t in hostile {
        t.join().unwrap();
    }
    stop_good.store(true, Ordering::SeqCst);
    let st = h.join().expect("good session thread panicked");
    eprintln!(
        "{} hostile scenario runs; good session: {} MESSAGE_CREATE, {} ACKs, max gap {:?}",
        runs.load(Ordering::SeqCst),
        st.message_creates,
        st.acks,
        st.max_gap
    );
    assert!(
        runs.load(Ordering::SeqCst) >= 6,
        "hostile clients barely ran"
    );
    check_good(&st, 15, "session running next to hostile clients");
    let (status, body) = http_get(node.admin, "/healthz").unwrap();
    assert_eq!(status, 200, "/healthz: {body}");
}

fn node_alive(node: &Node) -> bool {
    http_get(node.admin, "/healthz")
        .map(|(s, _)| s == 200)
        .unwrap_or(false)
}

/// The raw client reads server frames with `net::ws`'s decoder (through
/// `support::raw::zero_masked`): every length encoding, a fragmented
/// message around a control frame, delivered byte by byte, and an error
/// for what no server may send.
#[test]
fn raw_client_decodes_server_frames_with_net_ws() {
    use net::ws;
    use support::raw::{client_frame, ServerFrames};

    let lengths = [0, 125, 126, 65_535, 65_536, 70_000];
    let mut wire = Vec::new();
    let mut want = Vec::new();
    for len in lengths {
        ws::encode_frame(OpCode::Binary, &vec![7u8; len], &mut wire);
        want.push(OwnedMessage::Binary(vec![7u8; len]));
    }
    let mut hdr = [0u8; ws::MAX_SERVER_HEADER];
    let n = ws::encode_header(OpCode::Text, false, 3, &mut hdr);
    wire.extend_from_slice(&hdr[..n]);
    wire.extend_from_slice(b"hel");
    ws::encode_frame(OpCode::Ping, b"p", &mut wire);
    let n = ws::encode_header(OpCode::Continuation, true, 2, &mut hdr);
    wire.extend_from_slice(&hdr[..n]);
    wire.extend_from_slice(b"lo");
    ws::encode_close(4004, "Authentication failed.", &mut wire);
    want.extend([
        OwnedMessage::Ping(b"p".to_vec()),
        OwnedMessage::Text("hello".into()),
        OwnedMessage::Close(Some(4004), "Authentication failed.".into()),
    ]);

    let mut frames = ServerFrames::default();
    let (mut buf, mut got) = (Vec::new(), Vec::new());
    for b in wire {
        buf.push(b);
        while let Some(m) = frames.next(&mut buf).unwrap() {
            got.push(m);
        }
    }
    assert_eq!(got, want);
    assert!(buf.is_empty());

    let bad = |frame: &[u8]| {
        ServerFrames::default()
            .next(&mut frame.to_vec())
            .expect_err(&format!("{frame:02x?} must be refused"))
    };
    assert!(bad(&client_frame(OpCode::Text, true, b"x")).contains("masked"));
    bad(&[0xC1, 1, b'x']); // RSV1
    bad(&[0x83, 1, b'x']); // reserved opcode
    bad(&[0x80, 1, b'x']); // continuation without a message
    bad(&[0x09, 1, b'x']); // fragmented ping
    bad(&[0x81, 1, 0xff]); // text that is not UTF-8
    bad(&[0x88, 1, 0x03]); // close payload of one byte
    let mut ping = vec![0x89, 126, 0, 200];
    ping.extend_from_slice(&[b'p'; 200]);
    bad(&ping); // control frame over 125 bytes
}
