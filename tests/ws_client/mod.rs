//! A tiny blocking raw WebSocket client for black-box tests.
//!
//! No test uses this any more (they use `tests/support/raw.rs`, on the
//! project's own framer, `net::ws`); it stays only for
//! `examples/hold_sessions.rs`, which `#[path]`s it, until that example
//! becomes a loadgen subcommand. Then delete this directory.
//!
//! Written by hand over `std::net::TcpStream` so tests can send what a real
//! library never would: unmasked frames, RSV bits, oversized or fragmented
//! messages, half an HTTP request. The pure framing helpers (`encode_frame`,
//! `parse_frame`, `handshake_request`, `parse_handshake_response`) are also
//! used by `examples/hold_sessions.rs` for its nonblocking driver.
#![allow(dead_code)]

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

pub const OP_CONT: u8 = 0x0;
pub const OP_TEXT: u8 = 0x1;
pub const OP_BINARY: u8 = 0x2;
pub const OP_CLOSE: u8 = 0x8;
pub const OP_PING: u8 = 0x9;
pub const OP_PONG: u8 = 0xA;

pub const GOOD_INTENTS: u64 =
    proto::intents::GUILDS | proto::intents::GUILD_MESSAGES | proto::intents::MESSAGE_CONTENT;

/// What `read_message` returns.
#[derive(Debug, Clone, PartialEq)]
pub enum Msg {
    Text(String),
    Binary(Vec<u8>),
    /// A Close frame from the server: code (None if the payload was empty) and reason.
    Close(Option<u16>, String),
    /// The TCP stream ended (or was reset) without a Close frame.
    Eof,
    /// Nothing complete arrived within the timeout.
    Timeout,
    /// The server sent something that is not valid RFC 6455 server framing.
    Bad(String),
}

impl Msg {
    pub fn is_terminal(&self) -> bool {
        matches!(self, Msg::Close(..) | Msg::Eof | Msg::Bad(_))
    }
}

/// One decoded frame.
#[derive(Debug, Clone)]
pub struct Frame {
    pub fin: bool,
    pub rsv: u8,
    pub opcode: u8,
    pub masked: bool,
    pub payload: Vec<u8>,
}

/// Encodes a frame. `first` is the whole first byte (FIN, RSV bits, opcode),
/// so callers can set anything. A mask key masks the payload.
pub fn encode_raw(first: u8, mask: Option<[u8; 4]>, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 14);
    out.push(first);
    let mbit = if mask.is_some() { 0x80 } else { 0 };
    let len = payload.len();
    if len < 126 {
        out.push(mbit | len as u8);
    } else if len <= 0xFFFF {
        out.push(mbit | 126);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(mbit | 127);
        out.extend_from_slice(&(len as u64).to_be_bytes());
    }
    match mask {
        Some(key) => {
            out.extend_from_slice(&key);
            out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        }
        None => out.extend_from_slice(payload),
    }
    out
}

/// Encodes a frame from its parts.
pub fn encode_frame(opcode: u8, fin: bool, mask: Option<[u8; 4]>, payload: &[u8]) -> Vec<u8> {
    encode_raw(if fin { 0x80 } else { 0 } | (opcode & 0x0F), mask, payload)
}

/// Parses one frame from the front of `buf`: `Ok(None)` if incomplete,
/// `Ok(Some((frame, bytes used)))`, or an error for frames no server may send
/// (masked, RSV set, reserved opcode, oversized or fragmented control frame).
pub fn parse_frame(buf: &[u8]) -> Result<Option<(Frame, usize)>, String> {
    if buf.len() < 2 {
        return Ok(None);
    }
    let fin = buf[0] & 0x80 != 0;
    let rsv = (buf[0] >> 4) & 0x7;
    let opcode = buf[0] & 0x0F;
    let masked = buf[1] & 0x80 != 0;
    let mut len = (buf[1] & 0x7F) as u64;
    let mut pos = 2;
    if len == 126 {
        if buf.len() < 4 {
            return Ok(None);
        }
        len = u16::from_be_bytes([buf[2], buf[3]]) as u64;
        pos = 4;
    } else if len == 127 {
        if buf.len() < 10 {
            return Ok(None);
        }
        len = u64::from_be_bytes(buf[2..10].try_into().unwrap());
        pos = 10;
    }
    if rsv != 0 {
        return Err(format!(
            "server frame with RSV bits {rsv:#b} (first byte {:#04x})",
            buf[0]
        ));
    }
    if masked {
        return Err("server frame is masked".into());
    }
    if !matches!(opcode, 0x0 | 0x1 | 0x2 | 0x8 | 0x9 | 0xA) {
        return Err(format!("server frame with reserved opcode {opcode:#x}"));
    }
    if opcode & 0x8 != 0 && (len > 125 || !fin) {
        return Err(format!(
            "bad control frame: opcode {opcode:#x} len {len} fin {fin}"
        ));
    }
    if len > 64 << 20 {
        return Err(format!("server frame of {len} bytes"));
    }
    let end = pos + len as usize;
    if buf.len() < end {
        return Ok(None);
    }
    let frame = Frame {
        fin,
        rsv,
        opcode,
        masked,
        payload: buf[pos..end].to_vec(),
    };
    Ok(Some((frame, end)))
}

/// Splits a Close payload into (code, reason).
pub fn parse_close_payload(p: &[u8]) -> (Option<u16>, String) {
    if p.len() >= 2 {
        (
            Some(u16::from_be_bytes([p[0], p[1]])),
            String::from_utf8_lossy(&p[2..]).into_owned(),
        )
    } else {
        (None, String::new())
    }
}

/// A small non-cryptographic generator for mask keys and handshake keys.
#[derive(Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new() -> Rng {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        let addr = &t as *const u64 as u64;
        Rng(t ^ addr.rotate_left(32) ^ 0x9E37_79B9_7F4A_7C15 | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        // xorshift64*
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn mask(&mut self) -> [u8; 4] {
        (self.next_u64() as u32).to_be_bytes()
    }
    pub fn key(&mut self) -> String {
        let mut k = [0u8; 16];
        k[..8].copy_from_slice(&self.next_u64().to_le_bytes());
        k[8..].copy_from_slice(&self.next_u64().to_le_bytes());
        base64(&k)
    }
}

impl Default for Rng {
    fn default() -> Self {
        Rng::new()
    }
}

pub fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        out.push(T[(n >> 18) as usize & 63] as char);
        out.push(T[(n >> 12) as usize & 63] as char);
        out.push(if chunk.len() > 1 {
            T[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if chunk.len() > 2 {
            T[n as usize & 63] as char
        } else {
            '='
        });
    }
    out
}

/// SHA-1 (for checking Sec-WebSocket-Accept only).
pub fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0];
    let mut msg = data.to_vec();
    let bit_len = (data.len() as u64) * 8;
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bit_len.to_be_bytes());
    for block in msg.chunks(64) {
        let mut w = [0u32; 80];
        for i in 0..16 {
            w[i] = u32::from_be_bytes(block[4 * i..4 * i + 4].try_into().unwrap());
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let (mut a, mut b, mut c, mut d, mut e) = (h[0], h[1], h[2], h[3], h[4]);
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A827999),
                20..=39 => (b ^ c ^ d, 0x6ED9EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1BBCDC),
                _ => (b ^ c ^ d, 0xCA62C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
        }
        h[0] = h[0].wrapping_add(a);
        h[1] = h[1].wrapping_add(b);
        h[2] = h[2].wrapping_add(c);
        h[3] = h[3].wrapping_add(d);
        h[4] = h[4].wrapping_add(e);
    }
    let mut out = [0u8; 20];
    for (i, v) in h.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&v.to_be_bytes());
    }
    out
}

pub fn accept_for(key: &str) -> String {
    base64(&sha1(
        format!("{key}258EAFA5-E914-47DA-95CA-C5AB0DC85B11").as_bytes(),
    ))
}

/// The HTTP upgrade request for `path`.
pub fn handshake_request(host: &str, path: &str, key: &str, extra: &[(&str, &str)]) -> String {
    let mut req = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nUser-Agent: gatewayd-tests\r\n"
    );
    for (k, v) in extra {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req
}

/// Finds the end of the HTTP response head in `buf`: `Some(head length incl. CRLFCRLF)`.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

/// Checks a complete response head: 101, Upgrade websocket, matching accept.
pub fn check_handshake_response(head: &str, key: &str) -> Result<(), String> {
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse::<u16>().ok())
        .unwrap_or(0);
    if status != 101 {
        return Err(format!("expected 101, got {status}: {head:?}"));
    }
    let accept = header(head, "sec-websocket-accept")
        .ok_or_else(|| format!("no Sec-WebSocket-Accept: {head:?}"))?;
    if accept != accept_for(key) {
        return Err(format!(
            "bad Sec-WebSocket-Accept {accept:?} (want {:?})",
            accept_for(key)
        ));
    }
    match header(head, "upgrade") {
        Some(u) if u.eq_ignore_ascii_case("websocket") => {}
        other => return Err(format!("bad Upgrade header {other:?}")),
    }
    Ok(())
}

/// Value of the first header named `name` (case-insensitive) in an HTTP head.
pub fn header(head: &str, name: &str) -> Option<String> {
    head.split("\r\n").skip(1).find_map(|line| {
        let (k, v) = line.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_string())
    })
}

pub fn identify_payload(token: &str, intents: u64, shard: Option<[u64; 2]>) -> Value {
    let mut d = json!({
        "token": token,
        "intents": intents,
        "properties": {"os": "linux", "browser": "gatewayd-tests", "device": "gatewayd-tests"},
        "large_threshold": 50,
    });
    if let Some(s) = shard {
        d["shard"] = json!(s);
    }
    json!({"op": 2, "d": d})
}

/// A blocking WebSocket client connection.
pub struct Ws {
    pub stream: TcpStream,
    rbuf: Vec<u8>,
    frag: Option<(u8, Vec<u8>)>,
    rng: Rng,
    /// Whether we sent a Close (so a Close from the server is the reply, not to be echoed).
    pub close_sent: bool,
    /// The server's HTTP response head.
    pub response_head: String,
    /// Last dispatch sequence number seen by the JSON helpers.
    pub seq: Option<u64>,
}

impl Ws {
    /// Opens a TCP connection and upgrades it; panics with details on failure.
    pub fn connect(addr: SocketAddr, path: &str) -> Ws {
        Ws::try_connect(addr, path, &[])
            .unwrap_or_else(|e| panic!("websocket connect to {addr}{path}: {e}"))
    }

    pub fn try_connect(addr: SocketAddr, path: &str, extra: &[(&str, &str)]) -> io::Result<Ws> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        Ws::upgrade(stream, &addr.to_string(), path, extra)
    }

    /// Upgrades an already connected stream.
    pub fn upgrade(
        mut stream: TcpStream,
        host: &str,
        path: &str,
        extra: &[(&str, &str)],
    ) -> io::Result<Ws> {
        stream.set_nodelay(true)?;
        let mut rng = Rng::new();
        let key = rng.key();
        stream.write_all(handshake_request(host, path, &key, extra).as_bytes())?;
        stream.set_read_timeout(Some(Duration::from_secs(10)))?;
        let mut buf = Vec::new();
        let mut tmp = [0u8; 4096];
        let end = loop {
            if let Some(end) = head_end(&buf) {
                break end;
            }
            let n = stream.read(&mut tmp)?;
            if n == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "EOF during handshake after {:?}",
                        String::from_utf8_lossy(&buf)
                    ),
                ));
            }
            buf.extend_from_slice(&tmp[..n]);
            if buf.len() > 64 * 1024 {
                return Err(io::Error::other("handshake response too long"));
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        check_handshake_response(&head, &key).map_err(io::Error::other)?;
        Ok(Ws {
            stream,
            rbuf: buf[end..].to_vec(),
            frag: None,
            rng,
            close_sent: false,
            response_head: head,
            seq: None,
        })
    }

    pub fn write_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Sends a frame; `mask` false sends it unmasked (a protocol violation from a client).
    pub fn send_frame(
        &mut self,
        opcode: u8,
        fin: bool,
        mask: bool,
        payload: &[u8],
    ) -> io::Result<()> {
        let key = if mask { Some(self.rng.mask()) } else { None };
        let bytes = encode_frame(opcode, fin, key, payload);
        self.stream.write_all(&bytes)
    }

    /// Sends a frame whose first byte is given whole (e.g. with RSV bits set); masked.
    pub fn send_frame_first_byte(&mut self, first: u8, payload: &[u8]) -> io::Result<()> {
        let key = self.rng.mask();
        self.stream
            .write_all(&encode_raw(first, Some(key), payload))
    }

    pub fn send_text(&mut self, text: &str) -> io::Result<()> {
        self.send_frame(OP_TEXT, true, true, text.as_bytes())
    }

    pub fn send_json(&mut self, v: &Value) -> io::Result<()> {
        self.send_text(&v.to_string())
    }

    pub fn send_close(&mut self, code: u16, reason: &str) -> io::Result<()> {
        let mut p = code.to_be_bytes().to_vec();
        p.extend_from_slice(reason.as_bytes());
        self.close_sent = true;
        self.send_frame(OP_CLOSE, true, true, &p)
    }

    pub fn heartbeat(&mut self) -> io::Result<()> {
        let d = self.seq.map(Value::from).unwrap_or(Value::Null);
        self.send_json(&json!({"op": 1, "d": d}))
    }

    pub fn identify(&mut self, token: &str, intents: u64) -> io::Result<()> {
        self.send_json(&identify_payload(token, intents, None))
    }

    /// Reads one complete message (reassembling fragments, answering pings).
    pub fn read_message(&mut self, timeout: Duration) -> Msg {
        let deadline = Instant::now() + timeout;
        loop {
            match parse_frame(&self.rbuf) {
                Err(e) => return Msg::Bad(e),
                Ok(Some((frame, used))) => {
                    self.rbuf.drain(..used);
                    match frame.opcode {
                        OP_CLOSE => {
                            let (code, reason) = parse_close_payload(&frame.payload);
                            if !self.close_sent {
                                // Echo the close, as a well-behaved client does.
                                let mut p = Vec::new();
                                if let Some(c) = code {
                                    p.extend_from_slice(&c.to_be_bytes());
                                }
                                let _ = self.send_frame(OP_CLOSE, true, true, &p);
                                self.close_sent = true;
                            }
                            return Msg::Close(code, reason);
                        }
                        OP_PING => {
                            let _ = self.send_frame(OP_PONG, true, true, &frame.payload);
                        }
                        OP_PONG => {}
                        OP_TEXT | OP_BINARY => {
                            if self.frag.is_some() {
                                return Msg::Bad(
                                    "new data frame inside a fragmented message".into(),
                                );
                            }
                            if frame.fin {
                                return data_msg(frame.opcode, frame.payload);
                            }
                            self.frag = Some((frame.opcode, frame.payload));
                        }
                        OP_CONT => match self.frag.take() {
                            None => return Msg::Bad("continuation without a start".into()),
                            Some((op, mut data)) => {
                                data.extend_from_slice(&frame.payload);
                                if frame.fin {
                                    return data_msg(op, data);
                                }
                                self.frag = Some((op, data));
                            }
                        },
                        _ => unreachable!(),
                    }
                    continue;
                }
                Ok(None) => {}
            }
            let now = Instant::now();
            if now >= deadline {
                return Msg::Timeout;
            }
            let _ = self
                .stream
                .set_read_timeout(Some((deadline - now).max(Duration::from_millis(1))));
            let mut tmp = [0u8; 16384];
            match self.stream.read(&mut tmp) {
                Ok(0) => return Msg::Eof,
                Ok(n) => self.rbuf.extend_from_slice(&tmp[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Msg::Timeout
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Msg::Eof,
            }
        }
    }

    /// Reads one message that must be a JSON text frame; panics otherwise.
    pub fn read_json(&mut self, timeout: Duration) -> Value {
        match self.read_message(timeout) {
            Msg::Text(t) => {
                let v: Value = serde_json::from_str(&t)
                    .unwrap_or_else(|e| panic!("server sent non-JSON text {t:?}: {e}"));
                if let Some(s) = v.get("s").and_then(Value::as_u64) {
                    self.seq = Some(s);
                }
                v
            }
            other => panic!("expected a JSON text message, got {other:?}"),
        }
    }

    /// Reads the Hello; returns its heartbeat_interval.
    pub fn expect_hello(&mut self) -> u64 {
        let v = self.read_json(Duration::from_secs(10));
        assert_eq!(v["op"], 10, "first message must be Hello (op 10), got {v}");
        v["d"]["heartbeat_interval"]
            .as_u64()
            .unwrap_or_else(|| panic!("Hello without integer heartbeat_interval: {v}"))
    }

    /// Reads JSON messages until one with `op` (and `t`, if given) arrives; panics on close/timeout.
    pub fn read_until(&mut self, op: u64, t: Option<&str>, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        let mut skipped = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.read_message(left) {
                Msg::Text(text) => {
                    let v: Value = serde_json::from_str(&text)
                        .unwrap_or_else(|e| panic!("non-JSON text {text:?}: {e}"));
                    if let Some(s) = v.get("s").and_then(Value::as_u64) {
                        self.seq = Some(s);
                    }
                    if v["op"] == op && t.is_none_or(|t| v["t"] == t) {
                        return v;
                    }
                    if skipped.len() < 8 {
                        skipped.push(format!("op={} t={}", v["op"], v["t"]));
                    }
                }
                other => panic!("waiting for op {op} {t:?}: got {other:?} (skipped {skipped:?})"),
            }
        }
    }

    /// Hello, Identify, READY; returns the READY dispatch.
    pub fn login(&mut self, token: &str, intents: u64) -> Value {
        self.expect_hello();
        self.identify(token, intents).expect("send identify");
        self.read_until(0, Some("READY"), Duration::from_secs(10))
    }

    /// Reads until the server closes, skipping text messages; returns the final message
    /// (Close, Eof, Bad or Timeout) and how many text messages were skipped.
    pub fn read_until_closed(&mut self, timeout: Duration) -> (Msg, Vec<String>) {
        let deadline = Instant::now() + timeout;
        let mut texts = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.read_message(left) {
                Msg::Text(t) => texts.push(t),
                Msg::Binary(b) => texts.push(format!("<binary {} bytes>", b.len())),
                other => return (other, texts),
            }
        }
    }

    /// Expects the server to close with a Close frame; returns (code, reason).
    pub fn expect_close(&mut self, timeout: Duration) -> (u16, String) {
        let (m, texts) = self.read_until_closed(timeout);
        match m {
            Msg::Close(Some(code), reason) => (code, reason),
            other => {
                panic!("expected a Close frame with a code, got {other:?} after texts {texts:?}")
            }
        }
    }

    /// After a Close, waits for the server to end the TCP stream; true if it did in time.
    pub fn wait_eof(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.read_message(left) {
                Msg::Eof => return true,
                Msg::Timeout => return false,
                Msg::Bad(_) => return true,
                _ => {}
            }
        }
    }
}

fn data_msg(op: u8, data: Vec<u8>) -> Msg {
    if op == OP_TEXT {
        match String::from_utf8(data) {
            Ok(s) => Msg::Text(s),
            Err(_) => Msg::Bad("text message is not UTF-8".into()),
        }
    } else {
        Msg::Binary(data)
    }
}

#[cfg(test)]
mod self_tests {
    use super::*;

    #[test]
    fn sha1_and_accept_match_rfc6455_example() {
        assert_eq!(
            accept_for("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
    }

    #[test]
    fn frame_round_trip() {
        let f = encode_frame(OP_TEXT, true, None, &[b'x'; 70000]);
        let (fr, used) = parse_frame(&f).unwrap().unwrap();
        assert_eq!(used, f.len());
        assert_eq!(fr.payload.len(), 70000);
        assert!(parse_frame(&f[..f.len() - 1]).unwrap().is_none());
        assert!(parse_frame(&encode_frame(OP_TEXT, true, Some([1, 2, 3, 4]), b"hi")).is_err());
    }
}
