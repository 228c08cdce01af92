//! Fuzz oracles for the node's own parsers of a stranger's bytes: what a
//! client sends on a gateway connection (after the upgrade), the upgrade's
//! query, the REST routing, a Kafka message value and the `d` the node
//! splices into dispatch frames. Each function takes one fuzz input, runs
//! the node's code the way the node runs it and panics when an oracle
//! fails. Called by the libFuzzer targets in `fuzz/fuzz_targets/` and, on
//! the committed corpus, by `tests/fuzz_corpus.rs`. Not an API.
//!
//! The WebSocket frame and HTTP head oracles are `net::fuzzing`'s; the
//! ingest framing, record and redaction oracles are `ingest::fuzzing`'s.

use ingest::{DecodeError, FrameReader, Record};
use net::http::{parse_head, query_param};
use net::ws::{self, Decoder, Message, OpCode, MAX_CLOSE_REASON};
use serde_json::{json, Value};

use crate::ingest::kafka::{read_value, ValueItem};
use crate::protocol::close::{Close, CloseCode};
use crate::protocol::compress::Kind;
use crate::protocol::identify::{self, ClientPayload};
use crate::protocol::intents;
use crate::protocol::rest;
use crate::protocol::session::{Action, Limits, Phase, Session};
use crate::protocol::upgrade::{upgrade_refusal, ws_error_close};

/// The node's default `limits.inbound_message_bytes`.
pub const MAX_MESSAGE: usize = 4096;
/// Messages taken from one `gateway` input (above the 120-command limit).
const MAX_MESSAGES: usize = 160;

/// Every close a client can be sent: the gateway's documented codes, or
/// the WebSocket-level 1002 the worker sends for a protocol error.
fn check_close(c: &Close) {
    assert!(
        CloseCode::from_u16(c.code).is_some() || c.code == 1002,
        "close code {} is not in the documented set",
        c.code
    );
    assert!(c.reason.len() <= MAX_CLOSE_REASON, "close reason truncated");
}

/// Masked client frames carrying `msgs` as text messages; bit 0 of `ctl`
/// fragments each in two, bit 1 puts a Ping between the fragments.
fn client_stream(ctl: u8, msgs: &[&[u8]]) -> Vec<u8> {
    let mut wire = Vec::new();
    for (i, m) in msgs.iter().enumerate() {
        let mask = [i as u8, ctl, 0x3c, 0xc3];
        if ctl & 1 != 0 && m.len() >= 2 {
            let (a, b) = m.split_at(m.len() / 2);
            ws::encode_client_frame(OpCode::Text, false, mask, a, &mut wire);
            if ctl & 2 != 0 {
                ws::encode_client_frame(OpCode::Ping, true, mask, b"hb", &mut wire);
            }
            ws::encode_client_frame(OpCode::Continuation, true, mask, b, &mut wire);
        } else {
            ws::encode_client_frame(OpCode::Text, true, mask, m, &mut wire);
        }
    }
    wire
}

/// `gateway` target. Input: one control byte, then client messages
/// separated by 0xFF bytes (never part of UTF-8). The messages are framed as
/// a client would (masked; fragmented and with a Ping between fragments
/// when the control byte says so) and run through the worker's path
/// (src/worker.rs, `ConnState::WebSocket`): `net::ws::Decoder`, then
/// `identify::parse`, then `Session::on_payload`, with Identify/Resume
/// answered (READY, or refused, as the control byte says) so later opcodes
/// meet a ready session. Oracles: no panic; each text message arrives
/// byte-exact; a message is refused for invalid UTF-8 or size exactly when
/// it has them; every close code is in the documented set; the phase rules
/// hold (Identify/Resume only before authentication, ops 3/4/8 only after,
/// 4008 past 120 commands a minute); decoded Identify/Resume/Heartbeat
/// fields obey their invariants and survive a serde_json encode -> parse
/// round trip; simd-json and serde_json agree on what is JSON; the server
/// frames written back are JSON; delivery in arbitrary chunks gives exactly
/// the one-shot transcript.
pub fn gateway(data: &[u8]) {
    let Some((&ctl, rest)) = data.split_first() else {
        return;
    };
    let msgs: Vec<&[u8]> = rest.split(|&b| b == 0xFF).take(MAX_MESSAGES).collect();
    let wire = client_stream(ctl, &msgs);
    let whole = gateway_run(ctl, &wire, &msgs, || usize::MAX);
    let chunked = gateway_run(
        ctl,
        &wire,
        &msgs,
        net::fuzzing::chunker(ctl, 1 + usize::from(ctl >> 2)),
    );
    assert_eq!(whole, chunked, "chunked delivery gave another transcript");
}

/// Runs the worker's WebSocket path over `wire`; returns the transcript.
fn gateway_run(
    ctl: u8,
    wire: &[u8],
    msgs: &[&[u8]],
    mut next_chunk: impl FnMut() -> usize,
) -> Vec<String> {
    let step_ms = u64::from(ctl >> 4) * 700;
    let mut now = 0u64;
    let mut out = Vec::new();
    let mut session = Session::new(Limits::default(), now, &mut out);
    let mut decoder = Decoder::new(MAX_MESSAGE);
    let mut scratch = Vec::new();
    let mut inbuf: Vec<u8> = Vec::new();
    let mut log = Vec::new();
    let mut next_msg = 0usize;
    let mut pos = 0;
    'feed: while pos < wire.len() {
        let end = wire.len().min(pos.saturating_add(next_chunk().max(1)));
        inbuf.extend_from_slice(&wire[pos..end]);
        pos = end;
        loop {
            let (n, closed) = match decoder.decode(&mut inbuf) {
                Ok(None) => break,
                Err(e) => {
                    let m = msgs[next_msg];
                    match e {
                        ws::WsError::InvalidUtf8 => assert!(std::str::from_utf8(m).is_err()),
                        ws::WsError::MessageTooBig => assert!(m.len() > MAX_MESSAGE),
                        ws::WsError::Protocol(p) => panic!("well-formed frames refused: {p}"),
                    }
                    let close = ws_error_close(e);
                    check_close(&close);
                    log.push(format!("ws close {}", close.code));
                    break 'feed;
                }
                Ok(Some((n, None))) => (n, false),
                Ok(Some((n, Some(msg)))) => match msg {
                    Message::Text(t) => {
                        let m = msgs[next_msg];
                        assert_eq!(
                            t.as_bytes(),
                            m,
                            "text message {next_msg} changed in transit"
                        );
                        assert!(m.len() <= MAX_MESSAGE);
                        next_msg += 1;
                        now += step_ms;
                        let closed = on_text(
                            ctl,
                            t.as_bytes(),
                            &mut session,
                            &mut scratch,
                            now,
                            &mut out,
                            &mut log,
                        );
                        (n, closed)
                    }
                    Message::Ping(p) => {
                        assert_eq!(p, b"hb");
                        ws::encode_frame(OpCode::Pong, p, &mut out);
                        (n, false)
                    }
                    other => panic!("the client sent no {other:?}"),
                },
            };
            inbuf.drain(..n.min(inbuf.len()));
            if closed {
                break 'feed;
            }
        }
    }
    if log.last().is_none_or(|l| !l.contains("close")) {
        assert_eq!(next_msg, msgs.len(), "messages lost");
    }
    check_server_frames(&out);
    log
}

/// The worker's handling of one text message; true when it closes.
fn on_text(
    ctl: u8,
    text: &[u8],
    session: &mut Session,
    scratch: &mut Vec<u8>,
    now: u64,
    out: &mut Vec<u8>,
    log: &mut Vec<String>,
) -> bool {
    let parsed = identify::parse(text, scratch);
    json_agrees(text, &parsed);
    let p = match parsed {
        Err(close) => {
            check_close(&close);
            log.push(format!("parse close {}", close.code));
            return true;
        }
        Ok(p) => p,
    };
    check_payload(&p);
    let before = session.phase();
    let kind = format!("{p:?}");
    match session.on_payload(p, now, out) {
        Err(close) => {
            check_close(&close);
            assert!(
                matches!(close.code, 4003 | 4005 | 4008),
                "session close {} for {kind}",
                close.code
            );
            if close.code == 4003 {
                assert_ne!(before, Phase::Ready);
            }
            if close.code == 4005 {
                assert_ne!(before, Phase::AwaitingIdentify);
            }
            log.push(format!("session close {} after {kind}", close.code));
            true
        }
        Ok(action) => {
            match &action {
                Action::Identify(_) | Action::Resume(_) => {
                    assert_eq!(before, Phase::AwaitingIdentify);
                    assert_eq!(session.phase(), Phase::Authenticating);
                    // The registry answers: READY, or a refusal.
                    if ctl & 4 != 0 {
                        session.authenticated();
                    } else {
                        session.authentication_failed();
                    }
                }
                Action::Ack(_) | Action::MembersChunk { .. } => assert_eq!(before, Phase::Ready),
                Action::None => {}
            }
            log.push(format!("{action:?}"));
            false
        }
    }
}

/// simd-json (the node) and serde_json (a reference) agree on what is
/// JSON: text the node decoded is JSON to serde_json, and JSON objects with
/// an op the node did not refuse as undecodable. Except numbers simd-json
/// cannot represent where serde_json rounds: integers beyond 64 bits (a
/// run of 19+ digits, floats to serde_json) and exponents (`333E-616800`,
/// 0.0 to serde_json): the node closes with 4002 on those, which is fine.
fn json_agrees(text: &[u8], parsed: &Result<ClientPayload, Close>) {
    let hard_numbers = text
        .split(|c| !c.is_ascii_digit())
        .any(|run| run.len() > 18)
        || text
            .windows(2)
            .any(|w| w[0].is_ascii_digit() && matches!(w[1], b'e' | b'E'));
    let reference = serde_json::from_slice::<Value>(text);
    match parsed {
        Ok(_) => assert!(
            reference.is_ok(),
            "the node decoded what serde_json refuses: {:?}",
            reference.err()
        ),
        Err(c) if c.code == CloseCode::DecodeError as u16 && c.reason.contains("not valid") => {
            if let (Ok(v), false) = (&reference, hard_numbers) {
                assert!(
                    v.get("op").is_none(),
                    "the node refused JSON that serde_json reads: {v}"
                );
            }
        }
        Err(_) => {}
    }
}

/// Invariants of a decoded payload, and a serde_json round trip.
fn check_payload(p: &ClientPayload) {
    let reparse = |v: Value| {
        let text = serde_json::to_vec(&v).expect("json");
        identify::parse(&text, &mut Vec::new())
    };
    match p {
        ClientPayload::Identify(i) => {
            assert_eq!(i.intents & !intents::KNOWN, 0);
            assert!(shards::validate_shard(i.shard.0, i.shard.1).is_ok());
            assert_eq!(i.token.trim(), i.token, "token not trimmed");
            if !i.token.starts_with("Bot ") {
                let again = reparse(json!({"op": 2, "d": {
                    "token": i.token, "intents": i.intents, "shard": [i.shard.0, i.shard.1],
                    "properties": {"os": "linux", "browser": "fuzz", "device": "fuzz"}}}));
                match again {
                    Ok(ClientPayload::Identify(j)) => assert_eq!(&j, i, "identify round trip"),
                    other => panic!("identify round trip: {other:?}"),
                }
            }
        }
        ClientPayload::Resume(r) => {
            assert_eq!(r.token.trim(), r.token, "token not trimmed");
            if !r.token.starts_with("Bot ") {
                let again = reparse(json!({"op": 6, "d": {
                    "token": r.token, "session_id": r.session_id, "seq": r.seq}}));
                match again {
                    Ok(ClientPayload::Resume(s)) => assert_eq!(&s, r, "resume round trip"),
                    other => panic!("resume round trip: {other:?}"),
                }
            }
        }
        ClientPayload::Heartbeat { seq } => match reparse(json!({"op": 1, "d": seq})) {
            Ok(ClientPayload::Heartbeat { seq: s }) => assert_eq!(&s, seq, "heartbeat round trip"),
            other => panic!("heartbeat round trip: {other:?}"),
        },
        ClientPayload::RequestGuildMembers { guild_ids, nonce } => {
            assert!(guild_ids.len() <= 100);
            assert!(nonce.as_ref().is_none_or(|n| n.chars().count() <= 32));
        }
        ClientPayload::PresenceUpdate | ClientPayload::VoiceStateUpdate => {}
    }
}

/// What the session wrote back (Hello, heartbeat ACKs, Pongs) is a run of
/// unmasked final frames, text ones holding JSON.
fn check_server_frames(mut out: &[u8]) {
    while !out.is_empty() {
        assert!(out.len() >= 2);
        let (b0, len) = (out[0], usize::from(out[1]));
        assert!(len < 126, "server control payloads are small");
        assert!(b0 == 0x81 || b0 == 0x8A, "frame byte {b0:#x}");
        let payload = &out[2..2 + len];
        if b0 == 0x81 {
            serde_json::from_slice::<Value>(payload).expect("server JSON");
        }
        out = &out[2 + len..];
    }
}

/// `upgrade` target. Input: an upgrade request (or, when it does not parse
/// as one, a bare query string). Runs the checks the worker applies to the
/// query of a WebSocket upgrade (`protocol::upgrade::upgrade_refusal`: `v`,
/// `encoding`; `compress::Kind::from_query`: `compress`). Oracles: no
/// panic; a refusal is 4012 or 4002 (documented, reason within a Close
/// frame); only the first occurrence of a parameter counts (appending
/// parameters changes nothing; a leading `v=10&encoding=json` makes any
/// query acceptable); `compress` is honoured exactly for its two names.
pub fn upgrade(data: &[u8]) {
    let query = match parse_head(data) {
        Ok(Some((_, head))) => head.query,
        _ => String::from_utf8_lossy(data).into_owned(),
    };
    let refusal = upgrade_refusal(&query);
    if let Some(c) = &refusal {
        check_close(c);
        assert!(matches!(c.code, 4012 | 4002), "refusal {}", c.code);
    }
    assert_eq!(
        upgrade_refusal(&format!("{query}&x=1")),
        refusal,
        "appending changed it"
    );
    assert_eq!(
        upgrade_refusal(&format!("{query}&v=8")).is_some(),
        refusal.is_some() || query_param(&query, "v").is_none()
    );
    assert_eq!(
        upgrade_refusal(&format!("v=10&encoding=json&{query}")),
        None
    );
    assert_eq!(
        upgrade_refusal(&format!("v=11&{query}")).map(|c| c.code),
        Some(CloseCode::InvalidApiVersion as u16)
    );
    let compress = query_param(&query, "compress");
    match Kind::from_query(compress) {
        Some(k) => assert_eq!(Some(k.name()), compress),
        None => assert!(!matches!(compress, Some("zlib-stream" | "zstd-stream"))),
    }
}

/// `rest` target. Input: a REST request (head and body), or, when the
/// head does not parse, method, path, Authorization value, Content-Type
/// and a body separated by newlines. Runs the REST edge's pure steps:
/// `api::route::route`, `rest::bearer`, and the body parser and validators
/// of `api::body` (JSON, multipart, message, bulk delete, DM).
/// Oracles: no panic; HEAD routes like GET; a path either has no route for
/// any method (404) or for none of them is it 404; trailing slashes and an
/// `/api/vN` prefix do not change the route; every routed action has a
/// bucket and a metrics name; a token is non-empty, trimmed, a slice of the
/// header, and survives `Bot <token>` again; a body error is a 400 (or
/// 413) whose JSON has an integer `code`.
pub fn rest(data: &[u8]) {
    match parse_head(data) {
        Ok(Some((n, head))) => {
            if rest::is_api(&head.path) {
                check_route(&head.method, &head.path);
            }
            check_bearer(head.authorization.as_deref());
            check_body(head.content_type.as_deref(), &data[n..]);
        }
        _ => {
            let text = String::from_utf8_lossy(data);
            let mut parts = text.splitn(5, '\n');
            let method = parts.next().unwrap_or("");
            let path = parts.next().unwrap_or("");
            check_route(method, path);
            check_bearer(parts.next());
            let ct = parts.next();
            check_body(ct, parts.next().unwrap_or("").as_bytes());
        }
    }
}

fn check_route(method: &str, path: &str) {
    use crate::api::route::{route, RouteError};
    let r = route(method, path);
    let get = route("GET", path);
    assert_eq!(route("HEAD", path), get, "HEAD routes unlike GET");
    assert_eq!(
        r == Err(RouteError::NotFound),
        get == Err(RouteError::NotFound),
        "404 depends on the path alone: {method} {path}"
    );
    if let Ok(ref a) = r {
        assert!(crate::api::route::ROUTE_NAMES[a.index()] == a.name());
        use crate::api::route::ApiRoute::*;
        // No token to count against: `/gateway`; an interaction token's
        // routes are exempt (REST.md). Every other route is limited.
        let unlimited = matches!(
            a,
            Gateway | InteractionCallback { .. } | WebhookExecute { .. } | WebhookMessage { .. }
        );
        assert_eq!(
            a.bucket().is_some(),
            !unlimited,
            "every route with a bot token is limited"
        );
    }
    assert_eq!(
        route(method, &format!("{path}/")),
        r,
        "a trailing slash changed the route"
    );
    if let Some(tail) = path.strip_prefix("/api/") {
        if !tail.starts_with('v') {
            assert_eq!(
                route(method, &format!("/api/v10/{tail}")),
                r,
                "/api/v10 prefix"
            );
        }
    }
}

fn check_body(content_type: Option<&str>, body: &[u8]) {
    use crate::api::body;
    let check_err = |e: &body::ApiError| {
        assert!(e.status == 400 || e.status == 413, "{e:?}");
        assert!(e.body["code"].is_u64(), "an integer code: {}", e.body);
    };
    match body::parse(content_type, body) {
        Err(e) => check_err(&e),
        Ok(m) => {
            for create in [true, false] {
                match body::message(&m, create) {
                    Err(e) => check_err(&e),
                    Ok(d) => {
                        if let Some(c) = &d.content {
                            assert!(c.chars().count() <= body::MAX_CONTENT_CHARS);
                        }
                        assert!(d
                            .embeds
                            .as_ref()
                            .is_none_or(|e| e.len() <= body::MAX_EMBEDS));
                    }
                }
            }
            match body::bulk_delete(&m) {
                Err(e) => check_err(&e),
                Ok(ids) => assert!((1..=body::MAX_BULK_DELETE).contains(&ids.len())),
            }
            if let Err(e) = body::create_dm(&m) {
                check_err(&e);
            }
            if let Err(e) = body::ban(&m) {
                check_err(&e);
            }
        }
    }
}

fn check_bearer(header: Option<&str>) {
    if let Some(t) = rest::bearer(header) {
        let h = header.expect("a token from a header");
        assert!(!t.is_empty());
        assert_eq!(t.trim(), t, "token not trimmed");
        assert!(h.contains(t));
        assert_eq!(rest::bearer(Some(&format!("Bot {t}"))), Some(t));
        assert_eq!(rest::bearer(Some(&format!("  Bot {t}  "))), Some(t));
    }
}

/// One item of a Kafka value's transcript.
type KafkaItem = Result<Record, DecodeError>;

fn kafka_read(reader: &mut FrameReader, value: &[u8]) -> Vec<KafkaItem> {
    let mut items = Vec::new();
    let mut pending: Option<Record> = None;
    read_value(reader, value, |item| match item {
        ValueItem::Record(rec) => {
            assert!(pending.is_none(), "a record without its body");
            let owned = rec.to_record();
            assert_eq!(owned.check(), Ok(()));
            if rec.is_guild_state() {
                // What the consumer then does with a server change.
                let _ = crate::ingest::state::parse(rec.event_type(), rec.server_id(), rec.d());
            }
            spliced_d(rec.d());
            pending = Some(owned);
        }
        ValueItem::Body(body) => {
            let owned = pending.take().expect("a body after its record");
            assert_eq!(
                body.len() % ingest::BODY_ALIGN,
                0,
                "body copied into a batch misaligned"
            );
            assert!(body.len() <= value.len() - ingest::HEADER_LEN);
            // The bytes a worker later reads as this record.
            let mut frame = Vec::with_capacity(body.len() + ingest::HEADER_LEN);
            frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
            frame.extend_from_slice(&ingest::VERSION.to_le_bytes());
            frame.extend_from_slice(&[0, 0]);
            frame.extend_from_slice(body);
            let mut r = FrameReader::new();
            r.push(&frame);
            let again = r
                .next()
                .expect("a frame")
                .expect("the body validates again");
            assert_eq!(again.to_record(), owned, "the body is another record");
            items.push(Ok(owned));
        }
        ValueItem::Rejected(e) => {
            assert!(pending.is_none());
            items.push(Err(e));
        }
    });
    assert!(pending.is_none());
    let fatal = items
        .iter()
        .position(|x| matches!(x, Err(e) if e.is_fatal()));
    if let Some(i) = fatal {
        assert_eq!(i + 1, items.len(), "items after a fatal error");
    }
    items
}

/// `kafka_value` target. Input: one Kafka message value. Runs
/// `kafka_ingest::read_value`, what the consumer does with every value.
/// Oracles: no panic; the transcript is the ingest stream reader's over the
/// same bytes (plus `malformed` for an empty value or one ending inside a
/// frame); the consumer's reader, reused across values, gives the same
/// transcript as a fresh one, whatever the value before it did (fatal,
/// truncated); every accepted body validates again to the same record;
/// GUILD_STATE records go through `state::parse`; `d` passes
/// [`spliced_d`].
pub fn kafka_value(value: &[u8]) {
    let fresh = kafka_read(&mut FrameReader::new(), value);

    // The same bytes as a stream.
    let mut r = FrameReader::new();
    r.push(value);
    let mut stream: Vec<KafkaItem> = Vec::new();
    while let Some(x) = r.next() {
        let fatal = matches!(x, Err(e) if e.is_fatal());
        stream.push(x.map(|rec| rec.to_record()));
        if fatal {
            break;
        }
    }
    if value.is_empty() || (r.fatal().is_none() && r.buffered() > 0) {
        stream.push(Err(DecodeError::Malformed));
    }
    assert_eq!(fresh, stream, "the value reads unlike the stream");

    let mut reused = FrameReader::new();
    for before in [
        &[0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0][..],
        &value[..value.len() / 2],
        value,
    ] {
        kafka_read(&mut reused, before);
        assert_eq!(
            kafka_read(&mut reused, value),
            fresh,
            "a reused reader remembered"
        );
    }
}

/// `d` as the node uses it: accepted by the validator, it is spliced
/// verbatim into the dispatch frame bots parse (the header from
/// `sendpath::dispatch_header`, then `d`, then `}`), and, for recipients
/// without MESSAGE_CONTENT, redacted first. Oracles: a validated `d` makes a frame serde_json reads (a real
/// bot library's parser), with `d` an object equal to the input; a
/// redacted `d` has exactly the documented fields blanked or removed, at
/// the top, in `referenced_message` and in each `message_snapshots`
/// element's `message`, and nothing else changed.
pub fn spliced_d(d: &[u8]) {
    if ingest::validate_json_object(d).is_err() {
        return;
    }
    let orig = dispatch(d)
        .unwrap_or_else(|e| panic!("a validated d makes a frame serde_json refuses: {e}"));
    assert!(orig.is_object());
    let alone: Value = serde_json::from_slice(d).expect("d alone is JSON");
    assert_eq!(orig, alone, "d reads differently inside the frame");
    let mut red = Vec::new();
    if ingest::redact_message_content(d, &mut red).is_ok() {
        let got = dispatch(&red).expect("a redacted d makes a frame serde_json refuses");
        expect_redacted(&orig, &got);
    }
}

/// Parses the dispatch frame built around `d` (as the send path builds it)
/// and returns its `d`.
fn dispatch(d: &[u8]) -> Result<Value, serde_json::Error> {
    let mut frame = vec![0u8; 128];
    let h = crate::delivery::sendpath::dispatch_header(&mut frame, "MESSAGE_CREATE", 42, d.len());
    frame.truncate(h);
    frame.extend_from_slice(d);
    frame.push(b'}');
    let at = match frame[1] & 0x7f {
        126 => 4,
        127 => 10,
        _ => 2,
    };
    let mut v: Value = serde_json::from_slice(&frame[at..])?;
    assert_eq!(v["op"], 0);
    assert_eq!(v["s"], 42);
    Ok(v["d"].take())
}

fn expect_redacted(orig: &Value, got: &Value) {
    let (Some(o), Some(g)) = (orig.as_object(), got.as_object()) else {
        panic!("not objects");
    };
    for (k, v) in o {
        match k.as_str() {
            "content" => assert_eq!(g[k], json!(""), "content kept"),
            "embeds" | "attachments" | "components" => assert_eq!(g[k], json!([]), "{k} kept"),
            "poll" => assert!(!g.contains_key(k), "poll kept"),
            "referenced_message" if v.is_object() => expect_redacted(v, &g[k]),
            "message_snapshots" if v.is_array() => {
                let (a, b) = (
                    v.as_array().expect("array"),
                    g[k].as_array().expect("array"),
                );
                assert_eq!(a.len(), b.len());
                for (x, y) in a.iter().zip(b) {
                    match (x.as_object(), y.as_object()) {
                        (Some(xo), Some(yo)) => {
                            assert_eq!(xo.len(), yo.len());
                            for (sk, sv) in xo {
                                if sk == "message" && sv.is_object() {
                                    expect_redacted(sv, &yo[sk]);
                                } else {
                                    assert_eq!(sv, &yo[sk]);
                                }
                            }
                        }
                        _ => assert_eq!(x, y),
                    }
                }
            }
            _ => assert_eq!(&g[k], v, "{k} changed"),
        }
    }
    let dropped = usize::from(o.contains_key("poll"));
    assert_eq!(g.len() + dropped, o.len(), "fields added or lost");
}
