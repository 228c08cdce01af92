//! A blocking raw WebSocket client over `std::net::TcpStream`, so tests can
//! send what a real library never would: unmasked frames, RSV bits,
//! reserved opcodes, oversized or fragmented messages, half an HTTP request.
//!
//! Framing is the project's own (`net::ws`): frames are encoded with
//! `net::ws::encode_client_frame` and decoded, with every RFC 6455 check,
//! by `net::ws::Decoder` (see `zero_masked`); the handshake's accept value
//! is `net::http::websocket_accept`.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use net::ws::{self, Decoder, OpCode, OwnedMessage};
use serde_json::{json, Value};

use super::bot::identify_payload;
use super::http::{head_end, header, status_of};

/// The largest server message the client accepts.
const MAX_MESSAGE: usize = 64 << 20;

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

/// What `read_frame` returns: a whole message or a control frame as
/// `net::ws` decoded it, or why there is none.
#[derive(Debug)]
pub enum Incoming {
    Message(OwnedMessage),
    Eof,
    Timeout,
    Bad(String),
}

/// A random mask key.
fn mask() -> [u8; 4] {
    getrandom::u32().expect("getrandom").to_ne_bytes()
}

/// A masked client frame.
pub fn client_frame(op: OpCode, fin: bool, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 14);
    ws::encode_client_frame(op, fin, mask(), payload, &mut out);
    out
}

/// A masked client frame whose first byte (FIN, RSV bits, opcode) is
/// `first`, whatever it says: for RSV bits and reserved opcodes.
pub fn client_frame_first_byte(first: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = client_frame(OpCode::Text, true, payload);
    out[0] = first;
    out
}

/// `net::ws::Decoder` decodes client frames, which are masked; a server
/// frame is the same frame without a mask. This rewrites the server frame
/// at the front of `buf` as that frame with an all-zero mask key (XOR with
/// zero leaves the payload as sent) and returns it with the bytes it took
/// on the wire; `Ok(None)` while it is incomplete. A masked server frame is
/// an error (RFC 6455 §5.1); everything else is the Decoder's to judge.
pub fn zero_masked(buf: &[u8]) -> Result<Option<(Vec<u8>, usize)>, String> {
    let [b0, b1, rest @ ..] = buf else {
        return Ok(None);
    };
    if b1 & 0x80 != 0 {
        return Err("server frame is masked".into());
    }
    let ext = match b1 & 0x7F {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    let Some(ext_bytes) = rest.get(..ext) else {
        return Ok(None);
    };
    let len = match *ext_bytes {
        [] => u64::from(b1 & 0x7F),
        [a, b] => u64::from(u16::from_be_bytes([a, b])),
        _ => u64::from_be_bytes(ext_bytes.try_into().unwrap()),
    };
    if len > MAX_MESSAGE as u64 {
        return Err(format!("server frame of {len} bytes"));
    }
    let header_len = 2 + ext;
    let end = header_len + len as usize;
    let Some(payload) = buf.get(header_len..end) else {
        return Ok(None);
    };
    let mut frame = Vec::with_capacity(end + 4);
    frame.extend_from_slice(&[*b0, b1 | 0x80]);
    frame.extend_from_slice(ext_bytes);
    frame.extend_from_slice(&[0; 4]);
    frame.extend_from_slice(payload);
    Ok(Some((frame, end)))
}

/// Server-to-client decoding: `zero_masked` frames through one
/// `net::ws::Decoder` (which keeps the reassembly state of fragmented
/// messages).
pub struct ServerFrames {
    dec: Decoder,
}

impl Default for ServerFrames {
    fn default() -> Self {
        ServerFrames {
            dec: Decoder::new(MAX_MESSAGE),
        }
    }
}

impl ServerFrames {
    /// Takes frames from the front of `buf` until one completes a message
    /// or control frame: `Ok(None)` if `buf` holds no more whole frames,
    /// `Err` for anything no server may send (fatal for the connection).
    pub fn next(&mut self, buf: &mut Vec<u8>) -> Result<Option<OwnedMessage>, String> {
        while let Some((mut frame, used)) = zero_masked(buf)? {
            buf.drain(..used);
            match self.dec.decode(&mut frame).map_err(|e| e.to_string())? {
                Some((_, Some(m))) => return Ok(Some(m.into())),
                // A fragment of a message still being reassembled.
                Some((_, None)) => {}
                None => return Err("the decoder wants more of a whole frame".into()),
            }
        }
        Ok(None)
    }
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

/// Checks a complete response head: 101, Upgrade websocket, matching accept.
pub fn check_handshake_response(head: &str, key: &str) -> Result<(), String> {
    let status = status_of(head);
    if status != 101 {
        return Err(format!("expected 101, got {status}: {head:?}"));
    }
    let want = net::http::websocket_accept(key);
    let accept = header(head, "sec-websocket-accept")
        .ok_or_else(|| format!("no Sec-WebSocket-Accept: {head:?}"))?;
    if accept != want {
        return Err(format!(
            "bad Sec-WebSocket-Accept {accept:?} (want {want:?})"
        ));
    }
    match header(head, "upgrade") {
        Some(u) if u.eq_ignore_ascii_case("websocket") => {}
        other => return Err(format!("bad Upgrade header {other:?}")),
    }
    Ok(())
}

/// A blocking WebSocket client connection.
pub struct Ws {
    pub stream: TcpStream,
    /// Received bytes not yet decoded.
    rbuf: Vec<u8>,
    frames: ServerFrames,
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
        let key = tungstenite::handshake::client::generate_key();
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
            frames: ServerFrames::default(),
            close_sent: false,
            response_head: head,
            seq: None,
        })
    }

    pub fn write_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Sends a masked frame.
    pub fn send(&mut self, op: OpCode, fin: bool, payload: &[u8]) -> io::Result<()> {
        self.write_raw(&client_frame(op, fin, payload))
    }

    /// Sends a final frame without a mask (a protocol violation from a client).
    pub fn send_unmasked(&mut self, op: OpCode, payload: &[u8]) -> io::Result<()> {
        let mut out = Vec::new();
        ws::encode_frame(op, payload, &mut out);
        self.write_raw(&out)
    }

    /// Sends a masked frame whose first byte is given whole (e.g. with RSV bits set).
    pub fn send_first_byte(&mut self, first: u8, payload: &[u8]) -> io::Result<()> {
        self.write_raw(&client_frame_first_byte(first, payload))
    }

    pub fn send_text(&mut self, text: &str) -> io::Result<()> {
        self.send(OpCode::Text, true, text.as_bytes())
    }

    pub fn send_json(&mut self, v: &Value) -> io::Result<()> {
        self.send_text(&v.to_string())
    }

    pub fn send_close(&mut self, code: u16, reason: &str) -> io::Result<()> {
        let mut p = code.to_be_bytes().to_vec();
        p.extend_from_slice(reason.as_bytes());
        self.close_sent = true;
        self.send(OpCode::Close, true, &p)
    }

    pub fn heartbeat(&mut self) -> io::Result<()> {
        let d = self.seq.map(Value::from).unwrap_or(Value::Null);
        self.send_json(&json!({"op": 1, "d": d}))
    }

    pub fn identify(&mut self, token: &str, intents: u64) -> io::Result<()> {
        self.send_json(&identify_payload(token, intents, None))
    }

    /// Reads one whole message or control frame, as the server sent it.
    pub fn read_frame(&mut self, timeout: Duration) -> Incoming {
        let deadline = Instant::now() + timeout;
        loop {
            match self.frames.next(&mut self.rbuf) {
                Err(e) => return Incoming::Bad(e),
                Ok(Some(m)) => return Incoming::Message(m),
                Ok(None) => {}
            }
            let now = Instant::now();
            if now >= deadline {
                return Incoming::Timeout;
            }
            let _ = self
                .stream
                .set_read_timeout(Some((deadline - now).max(Duration::from_millis(1))));
            let mut tmp = [0u8; 16384];
            match self.stream.read(&mut tmp) {
                Ok(0) => return Incoming::Eof,
                Ok(n) => self.rbuf.extend_from_slice(&tmp[..n]),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Incoming::Timeout
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Incoming::Eof,
            }
        }
    }

    /// Reads one complete message, answering pings and echoing a Close.
    pub fn read_message(&mut self, timeout: Duration) -> Msg {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let m = match self.read_frame(left) {
                Incoming::Message(m) => m,
                Incoming::Eof => return Msg::Eof,
                Incoming::Timeout => return Msg::Timeout,
                Incoming::Bad(e) => return Msg::Bad(e),
            };
            match m {
                OwnedMessage::Text(t) => return Msg::Text(t),
                OwnedMessage::Binary(b) => return Msg::Binary(b),
                OwnedMessage::Ping(p) => {
                    let _ = self.send(OpCode::Pong, true, &p);
                }
                OwnedMessage::Pong(_) => {}
                OwnedMessage::Close(code, reason) => {
                    if !self.close_sent {
                        // Echo the close, as a well-behaved client does.
                        let p = code.map(u16::to_be_bytes);
                        let _ = self.send(OpCode::Close, true, p.as_ref().map_or(&[], |p| p));
                        self.close_sent = true;
                    }
                    return Msg::Close(code, reason);
                }
            }
        }
    }

    /// Parses a text message as JSON, noting its `s`.
    fn json_of(&mut self, text: &str) -> Value {
        let v: Value = serde_json::from_str(text)
            .unwrap_or_else(|e| panic!("server sent non-JSON text {text:?}: {e}"));
        if let Some(s) = v.get("s").and_then(Value::as_u64) {
            self.seq = Some(s);
        }
        v
    }

    /// Reads one message that must be a JSON text frame; panics otherwise.
    pub fn read_json(&mut self, timeout: Duration) -> Value {
        match self.read_message(timeout) {
            Msg::Text(t) => self.json_of(&t),
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
                    let v = self.json_of(&text);
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
    /// (Close, Eof, Bad or Timeout) and the messages skipped.
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
