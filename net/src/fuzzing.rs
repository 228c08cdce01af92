//! Fuzz oracles for this crate's parsers of a stranger's bytes. Each
//! function takes one fuzz input, runs the parser the way the node does and
//! panics when an oracle fails. They are called by the libFuzzer targets in
//! `fuzz/fuzz_targets/` and, on the committed corpus, by
//! the root crate's `tests/fuzz_corpus.rs` (so every `cargo test --workspace`
//! replays the corpus).
//! Not an API.

use crate::http::{
    parse_head, query_param, websocket_accept, write_response, write_upgrade_response, HttpError,
    RequestHead, MAX_HEAD,
};
use crate::ws::{
    encode_client_frame, is_valid_close_code, Decoder, Message, OpCode, WsError,
    MAX_CONTROL_PAYLOAD,
};

/// The decoder's message limit in the oracles (the node's default
/// `inbound_message_bytes`).
pub const WS_LIMIT: usize = 4096;

/// A decoded message, owned (so runs can be compared).
pub use crate::ws::OwnedMessage as Owned;

/// Chunk sizes 1..=max from a small xorshift seeded by `seed` (the same
/// sequence for the same seed).
pub fn chunker(seed: u8, max: usize) -> impl FnMut() -> usize {
    let mut s = u32::from(seed) | 0x100;
    let max = max.max(1);
    move || {
        s ^= s << 13;
        s ^= s >> 17;
        s ^= s << 5;
        (s as usize % max) + 1
    }
}

/// Decodes `stream` delivered in chunks whose sizes come from `next_chunk`,
/// as the worker does: append, then decode until `Ok(None)`, dropping what
/// each frame consumed. Checks the decoder's contract on every call.
pub fn ws_run(
    stream: &[u8],
    limit: usize,
    mut next_chunk: impl FnMut() -> usize,
) -> (Vec<Owned>, Option<WsError>) {
    let mut dec = Decoder::new(limit);
    let mut buf = Vec::new();
    let mut got = Vec::new();
    let mut pos = 0;
    while pos < stream.len() {
        let end = stream.len().min(pos.saturating_add(next_chunk().max(1)));
        buf.extend_from_slice(&stream[pos..end]);
        pos = end;
        loop {
            let snapshot = buf.clone();
            let len = buf.len();
            match dec.decode(&mut buf) {
                Err(e) => {
                    assert!(matches!(e.close_code(), 1002 | 1007 | 1009));
                    return (got, Some(e));
                }
                Ok(None) => {
                    assert_eq!(buf, snapshot, "Ok(None) must leave the buffer alone");
                    break;
                }
                Ok(Some((n, m))) => {
                    // A frame is at least 2 header bytes + the 4-byte mask.
                    assert!(n <= len && n >= 6, "consumed {n} of {len}");
                    if let Some(m) = m {
                        check_message(&m, limit);
                        got.push(Owned::from(m));
                    }
                    buf.drain(..n);
                }
            }
        }
    }
    (got, None)
}

fn check_message(m: &Message<'_>, limit: usize) {
    match *m {
        Message::Text(t) => assert!(t.len() <= limit),
        Message::Binary(b) => assert!(b.len() <= limit),
        Message::Ping(b) | Message::Pong(b) => assert!(b.len() <= MAX_CONTROL_PAYLOAD),
        Message::Close(code, reason) => {
            assert!(reason.len() <= MAX_CONTROL_PAYLOAD - 2);
            if let Some(c) = code {
                assert!(is_valid_close_code(c), "close code {c} let through");
            } else {
                assert!(reason.is_empty());
            }
        }
    }
}

/// `ws_decode` target. Input: one control byte, then a client byte stream.
/// Oracles: no panic; consumption within bounds; `Ok(None)` leaves the
/// buffer alone; messages within the limits; chunked delivery decodes
/// exactly like one-shot delivery; and the same bytes, taken as a payload,
/// survive encode (masked, possibly fragmented, with a Ping in between) ->
/// decode.
pub fn ws_decode(data: &[u8]) {
    let Some((&ctl, stream)) = data.split_first() else {
        return;
    };
    let whole = ws_run(stream, WS_LIMIT, || usize::MAX);
    let chunked = ws_run(stream, WS_LIMIT, chunker(ctl, usize::from(ctl % 32) + 1));
    assert_eq!(whole, chunked, "chunked delivery decoded differently");
    ws_round_trip(ctl, stream);
}

/// Encodes `payload` as a client would (opcode and fragmentation from
/// `ctl`) and checks it decodes back to the same message.
pub fn ws_round_trip(ctl: u8, payload: &[u8]) {
    let mask = [ctl, ctl.rotate_left(3), 0x5a, !ctl];
    let mut wire = Vec::new();
    let op = match ctl & 3 {
        0 if std::str::from_utf8(payload).is_ok() => OpCode::Text,
        0 | 1 => OpCode::Binary,
        2 => OpCode::Ping,
        _ => OpCode::Close,
    };
    let expected: Result<Vec<Owned>, WsError> = match op {
        OpCode::Text | OpCode::Binary => {
            // Fragments at cut points taken from ctl; a Ping between the
            // first two when bit 2 is set.
            let parts = usize::from((ctl >> 3) & 3) + 1;
            let step = payload.len() / parts + 1;
            let count = payload.chunks(step).count();
            let mut pinged = false;
            if payload.is_empty() {
                encode_client_frame(op, true, mask, payload, &mut wire);
            }
            for (i, c) in payload.chunks(step).enumerate() {
                let fin = i + 1 == count;
                let this = if i == 0 { op } else { OpCode::Continuation };
                encode_client_frame(this, fin, mask, c, &mut wire);
                if ctl & 4 != 0 && i == 0 && !fin {
                    encode_client_frame(OpCode::Ping, true, mask, b"p", &mut wire);
                    pinged = true;
                }
            }
            if payload.len() > WS_LIMIT {
                Err(WsError::MessageTooBig)
            } else {
                let msg = if op == OpCode::Text {
                    Owned::Text(String::from_utf8(payload.to_vec()).expect("checked"))
                } else {
                    Owned::Binary(payload.to_vec())
                };
                Ok(if pinged {
                    vec![Owned::Ping(b"p".to_vec()), msg]
                } else {
                    vec![msg]
                })
            }
        }
        OpCode::Ping => {
            let p = &payload[..payload.len().min(MAX_CONTROL_PAYLOAD)];
            encode_client_frame(OpCode::Ping, true, mask, p, &mut wire);
            Ok(vec![Owned::Ping(p.to_vec())])
        }
        _ => {
            // A Close with the first two bytes as its code.
            let p = &payload[..payload.len().min(MAX_CONTROL_PAYLOAD)];
            encode_client_frame(OpCode::Close, true, mask, p, &mut wire);
            match p {
                [] => Ok(vec![Owned::Close(None, String::new())]),
                [_] => Err(WsError::Protocol("close payload of one byte")),
                [hi, lo, reason @ ..] => {
                    let code = u16::from_be_bytes([*hi, *lo]);
                    match std::str::from_utf8(reason) {
                        _ if !is_valid_close_code(code) => {
                            Err(WsError::Protocol("invalid close code"))
                        }
                        Ok(r) => Ok(vec![Owned::Close(Some(code), r.to_string())]),
                        Err(_) => Err(WsError::InvalidUtf8),
                    }
                }
            }
        }
    };
    let (got, err) = ws_run(&wire, WS_LIMIT, || usize::MAX);
    match expected {
        Ok(msgs) => {
            assert_eq!(err, None, "round trip of {op:?} failed");
            assert_eq!(got, msgs, "round trip of {op:?} changed the message");
        }
        Err(e) => assert_eq!(err, Some(e), "round trip of {op:?}"),
    }
}

type HeadResult = Result<Option<(usize, RequestHead)>, HttpError>;

/// Prefix lengths at which `http_head` re-parses: every length for short
/// inputs, otherwise ~48 spread over the input plus the lengths around `n`.
fn cut_points(len: usize, n: Option<usize>) -> Vec<usize> {
    let mut v: Vec<usize> = if len <= 96 {
        (0..=len).collect()
    } else {
        (0..=48).map(|i| len * i / 48).collect()
    };
    if let Some(n) = n {
        v.extend(
            [n.saturating_sub(1), n, n + 1]
                .into_iter()
                .filter(|&k| k <= len),
        );
    }
    v.sort_unstable();
    v.dedup();
    v
}

/// `http_head` target. Input: the bytes a client sends on the gateway port.
/// Oracles: no panic; the head length is within the input and `MAX_HEAD`;
/// the head parses the same from exactly its own bytes; statuses 400/431
/// only; incremental delivery (re-parsing a growing buffer, as the worker
/// does) agrees with one-shot: `Ok(None)` until the head is complete, then
/// the same head, and an error stays an error; `query_param` values are
/// slices of the query; the upgrade response is well formed.
pub fn http_head(data: &[u8]) {
    let whole = parse_head(data);
    match &whole {
        Ok(Some((n, head))) => {
            let n = *n;
            assert!(n <= data.len() && n <= MAX_HEAD);
            assert_eq!(parse_head(&data[..n]), Ok(Some((n, head.clone()))));
            check_head(head);
        }
        Ok(None) => assert!(data.len() < MAX_HEAD),
        Err(e) => assert!(matches!(e.status(), 400 | 431)),
    }
    // Growing buffer: the first answer that is not "need more" is final.
    let n = whole
        .as_ref()
        .ok()
        .and_then(|r| r.as_ref().map(|(n, _)| *n));
    let mut first: Option<(usize, HeadResult)> = None;
    for k in cut_points(data.len(), n) {
        let r = parse_head(&data[..k]);
        match (&first, &r) {
            (None, Ok(None)) => {}
            (None, _) => first = Some((k, r)),
            (Some((_, Ok(Some(h)))), _) => {
                assert_eq!(r, Ok(Some(h.clone())), "more bytes changed a complete head")
            }
            (Some((k0, Err(e))), _) => {
                assert!(r.is_err(), "{e:?} at {k0} bytes, then {r:?} at {k}")
            }
            (Some((_, Ok(None))), _) => unreachable!(),
        }
    }
    if let Some((_, r)) = &first {
        if let Ok(Some(_)) = r {
            assert_eq!(r, &whole, "a prefix parsed to a different head");
        }
    }
    // query_param on arbitrary text, with the name taken from the input too.
    let text = String::from_utf8_lossy(data);
    let name = text.split('&').next().unwrap_or("");
    for name in [name, name.get(..name.len() / 2).unwrap_or("")] {
        if let Some(v) = query_param(&text, name) {
            assert!(text.contains(v));
        }
    }
}

fn check_head(head: &RequestHead) {
    for name in ["v", "encoding", "compress", "", "="] {
        if let Some(v) = query_param(&head.query, name) {
            assert!(head.query.contains(v));
            assert!(!v.contains('&'));
        }
    }
    assert!(!head.path.contains('?'));
    if head.is_websocket_upgrade {
        assert_eq!(head.method, "GET");
        assert!(head.websocket_version_ok);
    }
    if let Some(key) = &head.websocket_key {
        assert_eq!(key.len(), 24);
        let mut out = Vec::new();
        write_upgrade_response(key, &mut out);
        assert_eq!(websocket_accept(key).len(), 28);
        assert!(out.ends_with(b"\r\n\r\n"));
        // The response is itself a parseable HTTP/1.1 head.
        let mut headers = [httparse::EMPTY_HEADER; 8];
        let mut resp = httparse::Response::new(&mut headers);
        assert!(matches!(resp.parse(&out), Ok(httparse::Status::Complete(n)) if n == out.len()));
        assert_eq!(resp.code, Some(101));
    }
    let mut out = Vec::new();
    write_response(
        400,
        "application/json",
        head.path.as_bytes(),
        head.keep_alive,
        &[],
        &mut out,
    );
    assert!(out.starts_with(b"HTTP/1.1 400 "));
}
