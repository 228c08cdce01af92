//! The upstream chat service's HTTP/1.1 client: one keep-alive connection,
//! one call at a time, every step under the call's deadline, and a strict
//! reader of the answer (`parse_answer`, which never panics on what a
//! hostile or broken upstream sends). The policy it implements is in
//! `upstream/mod.rs`; the contract in docs/chat-upstream.md.
//!
//! Bounds: an answer head of `MAX_HEAD` bytes (at most 64 headers), a body
//! of `MAX_ANSWER` bytes (chunked or not), a chunk line of 1 KiB.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use crate::api::body::ApiError;

/// The largest answer head (status line and headers) read.
pub const MAX_HEAD: usize = 16 * 1024;
/// The largest answer body relayed (the bound of the node's own bodies).
pub const MAX_ANSWER: usize = 64 * 1024;
/// Why a call got no answer to relay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    Unreachable = 0,
    Timeout = 1,
    Malformed = 2,
    Busy = 3,
}

impl Failure {
    /// What the bot gets instead (docs/chat-upstream.md, "Failures").
    pub fn error(self) -> ApiError {
        match self {
            Failure::Unreachable => {
                ApiError::new(503, 0, "the chat service is unreachable; try again")
            }
            Failure::Timeout => {
                ApiError::new(503, 0, "the chat service did not answer in time; try again")
            }
            Failure::Malformed => ApiError::new(502, 0, "the chat service gave a malformed answer"),
            Failure::Busy => ApiError::new(503, 0, "the chat service is busy: try again"),
        }
    }
}

/// `http://host[:port][/path]` of the upstream chat service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Url {
    pub host: String,
    pub port: u16,
    /// Starts with `/`; the path every call is POSTed to.
    pub path: String,
}

impl Url {
    pub fn parse(s: &str) -> Result<Url, String> {
        let bad = |why: &str| format!("chat.upstream_url {s:?}: {why}");
        let lower = s.get(..8).unwrap_or(s).to_ascii_lowercase();
        if lower.starts_with("https://") {
            return Err(bad(
                "https is not supported yet: use http:// (a trusted network, or a local TLS proxy)",
            ));
        }
        if !lower.starts_with("http://") {
            return Err(bad("must start with http://"));
        }
        let rest = &s[7..];
        if rest.bytes().any(|b| b <= b' ' || b == 0x7f || b == b'#') {
            return Err(bad(
                "spaces, control characters and fragments are not allowed",
            ));
        }
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let path = if path.starts_with('?') {
            format!("/{path}")
        } else {
            path.to_string()
        };
        if authority.contains('@') {
            return Err(bad("credentials in the URL are not supported"));
        }
        // `host[:port]`, or `[v6][:port]`.
        let (host, port, v6) = match authority.strip_prefix('[') {
            Some(inner) => {
                let (h, after) = inner.split_once(']').ok_or_else(|| bad("unclosed ["))?;
                match after {
                    "" => (h, None, true),
                    a => (
                        h,
                        Some(a.strip_prefix(':').ok_or_else(|| bad("junk after ]"))?),
                        true,
                    ),
                }
            }
            None => match authority.split_once(':') {
                Some((h, p)) => (h, Some(p), false),
                None => (authority, None, false),
            },
        };
        let port = match port {
            None => 80,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|&p| p > 0)
                .ok_or_else(|| bad("the port must be 1-65535"))?,
        };
        let ok =
            |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') || (v6 && c == ':');
        if host.is_empty() || !host.chars().all(ok) {
            return Err(bad("no valid host"));
        }
        Ok(Url {
            host: host.to_string(),
            port,
            path,
        })
    }

    /// The `Host` header's value.
    fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == 80 {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

impl std::fmt::Display for Url {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "http://{}{}", self.authority(), self.path)
    }
}

/// One keep-alive connection to the upstream, one call at a time.
pub struct Client {
    url: Url,
    stream: Option<TcpStream>,
    buf: Vec<u8>,
    out: Vec<u8>,
    /// The last call failed (log the first failure of a run at warn only).
    failing: bool,
}

fn remaining(deadline: Instant) -> Result<Duration, Failure> {
    deadline
        .checked_duration_since(Instant::now())
        .filter(|d| !d.is_zero())
        .ok_or(Failure::Timeout)
}

fn timed_out(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    )
}

/// Still open and silent: nothing to read, no EOF (a peer that closed an
/// idle connection, or sent something unasked, makes it unusable).
fn idle_and_open(s: &TcpStream) -> bool {
    if s.set_nonblocking(true).is_err() {
        return false;
    }
    let silent = matches!(s.peek(&mut [0u8; 1]), Err(e) if e.kind() == io::ErrorKind::WouldBlock);
    s.set_nonblocking(false).is_ok() && silent
}

impl Client {
    pub fn new(url: Url) -> Client {
        Client {
            url,
            stream: None,
            buf: Vec::with_capacity(8 * 1024),
            out: Vec::with_capacity(8 * 1024),
            failing: false,
        }
    }

    /// POST `body`; the answer to relay (status, body) or why there is none.
    pub fn call(&mut self, body: &[u8], deadline: Instant) -> Result<(u16, Vec<u8>), Failure> {
        let r = self.exchange(body, deadline);
        match &r {
            Ok(_) => self.failing = false,
            Err(f) => {
                self.stream = None;
                if !self.failing {
                    tracing::warn!(failure = ?f, url = %self.url, "chat upstream: a call failed");
                }
                self.failing = true;
            }
        }
        r
    }

    fn exchange(&mut self, body: &[u8], deadline: Instant) -> Result<(u16, Vec<u8>), Failure> {
        self.out.clear();
        let _ = write!(
            self.out,
            "POST {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: gatewayd/{}\r\nContent-Type: application/json\r\n\
             Accept: application/json\r\nContent-Length: {}\r\n\r\n",
            self.url.path,
            self.url.authority(),
            env!("CARGO_PKG_VERSION"),
            body.len()
        );
        self.out.extend_from_slice(body);
        let reused = self.stream.as_ref().is_some_and(idle_and_open);
        if !reused {
            self.stream = Some(self.connect(deadline)?);
        }
        if let Err(e) = self.send(deadline) {
            if timed_out(&e) {
                return Err(Failure::Timeout);
            }
            if !reused {
                return Err(Failure::Unreachable);
            }
            // The peer closed the reused connection before taking the request.
            self.stream = Some(self.connect(deadline)?);
            self.send(deadline).map_err(|e| {
                if timed_out(&e) {
                    Failure::Timeout
                } else {
                    Failure::Unreachable
                }
            })?;
        }
        let a = self.receive(deadline)?;
        if !a.keep_alive {
            self.stream = None;
        }
        Ok((a.status, a.body))
    }

    fn connect(&self, deadline: Instant) -> Result<TcpStream, Failure> {
        let addrs: Vec<SocketAddr> = (self.url.host.as_str(), self.url.port)
            .to_socket_addrs()
            .map_err(|e| {
                tracing::debug!(error = %e, host = %self.url.host, "chat upstream: no address");
                Failure::Unreachable
            })?
            .collect();
        let mut last = Failure::Unreachable;
        for a in addrs {
            match TcpStream::connect_timeout(&a, remaining(deadline)?) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    return Ok(s);
                }
                Err(e) if timed_out(&e) => last = Failure::Timeout,
                Err(e) => tracing::debug!(error = %e, addr = %a, "chat upstream: connect"),
            }
        }
        Err(last)
    }

    fn send(&mut self, deadline: Instant) -> io::Result<()> {
        let s = self.stream.as_mut().expect("connected");
        let rem = remaining(deadline).map_err(|_| io::ErrorKind::TimedOut)?;
        s.set_write_timeout(Some(rem))?;
        s.write_all(&self.out)
    }

    fn receive(&mut self, deadline: Instant) -> Result<Answer, Failure> {
        let s = self.stream.as_mut().expect("connected");
        self.buf.clear();
        let mut tmp = [0u8; 8192];
        let mut eof = false;
        loop {
            match parse_answer(&self.buf, eof) {
                Ok(Some(a)) => return Ok(a),
                Ok(None) if eof && self.buf.is_empty() => return Err(Failure::Unreachable),
                Ok(None) if eof => return Err(malformed("the answer was cut short")),
                Ok(None) => {}
                Err(why) => return Err(malformed(why)),
            }
            if self.buf.len() > MAX_HEAD + 2 * MAX_ANSWER {
                return Err(malformed("answer over the bound"));
            }
            s.set_read_timeout(Some(remaining(deadline)?))
                .map_err(|_| Failure::Unreachable)?;
            match s.read(&mut tmp) {
                Ok(0) => eof = true,
                Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if timed_out(&e) => return Err(Failure::Timeout),
                Err(_) if self.buf.is_empty() => return Err(Failure::Unreachable),
                Err(_) => return Err(malformed("the connection failed mid-answer")),
            }
        }
    }
}

fn malformed(why: &str) -> Failure {
    tracing::debug!(why, "chat upstream: malformed answer");
    Failure::Malformed
}

/// A complete answer of the upstream.
#[derive(Debug, PartialEq)]
struct Answer {
    status: u16,
    body: Vec<u8>,
    /// The connection may carry the next call.
    keep_alive: bool,
}

/// The answer in `buf` if it is complete (`eof`: no more bytes will come),
/// `None` if more are needed, or why it is malformed. Never panics.
fn parse_answer(buf: &[u8], eof: bool) -> Result<Option<Answer>, &'static str> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut res = httparse::Response::new(&mut headers);
    let head_len = match res.parse(buf) {
        Ok(httparse::Status::Complete(n)) if n <= MAX_HEAD => n,
        Ok(httparse::Status::Complete(_)) => return Err("head over 16 KiB"),
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => return Err("head over 16 KiB"),
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err("more than 64 headers"),
        Err(_) => return Err("not an HTTP/1.x answer"),
    };
    let status = res.code.unwrap_or(0);
    if !(200..=599).contains(&status) {
        return Err("status outside 200-599");
    }
    let version = res.version.unwrap_or(0);
    let mut keep_alive = version == 1;
    let (mut length, mut chunked) = (None::<usize>, false);
    for h in res.headers.iter() {
        let value = std::str::from_utf8(h.value)
            .map(str::trim)
            .unwrap_or("\u{0}");
        if h.name.eq_ignore_ascii_case("content-length") {
            let n = value.parse::<usize>().map_err(|_| "bad Content-Length")?;
            if length.is_some_and(|l| l != n) {
                return Err("conflicting Content-Length");
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            if !value.eq_ignore_ascii_case("chunked") {
                return Err("a Transfer-Encoding other than chunked");
            }
            chunked = true;
        } else if h.name.eq_ignore_ascii_case("connection") {
            let v = value.to_ascii_lowercase();
            if v.contains("close") {
                keep_alive = false;
            } else if version == 0 && v.contains("keep-alive") {
                keep_alive = true;
            }
        }
    }
    if chunked && length.is_some() {
        return Err("both Content-Length and chunked");
    }
    let rest = &buf[head_len..];
    let (body, used) = if status == 204 || status == 304 {
        (Vec::new(), 0)
    } else if chunked {
        match dechunk(rest)? {
            Some(b) => b,
            None => return Ok(None),
        }
    } else if let Some(n) = length {
        if n > MAX_ANSWER {
            return Err("body over 64 KiB");
        }
        if rest.len() < n {
            return Ok(None);
        }
        (rest[..n].to_vec(), n)
    } else {
        // Delimited by the end of the connection.
        keep_alive = false;
        if rest.len() > MAX_ANSWER {
            return Err("body over 64 KiB");
        }
        if !eof {
            return Ok(None);
        }
        (rest.to_vec(), rest.len())
    };
    if used != rest.len() {
        // Bytes nobody asked for: the connection is not trusted further.
        keep_alive = false;
    }
    if !body.is_empty() && serde_json::from_slice::<serde::de::IgnoredAny>(&body).is_err() {
        return Err("the body is not JSON");
    }
    Ok(Some(Answer {
        status,
        body,
        keep_alive,
    }))
}

/// A chunked body: (the data, bytes used) once complete, `None` if more is
/// needed, or why it is malformed (at most `MAX_ANSWER` bytes of data).
fn dechunk(raw: &[u8]) -> Result<Option<(Vec<u8>, usize)>, &'static str> {
    let line = |at: usize| -> Result<Option<&[u8]>, &'static str> {
        let rest = &raw[at..];
        match rest.windows(2).position(|w| w == b"\r\n") {
            Some(n) => Ok(Some(&rest[..n])),
            None if rest.len() > 1024 => Err("a chunk line over 1 KiB"),
            None => Ok(None),
        }
    };
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let Some(size_line) = line(at)? else {
            return Ok(None);
        };
        at += size_line.len() + 2;
        let hex = std::str::from_utf8(size_line)
            .ok()
            .and_then(|l| l.split(';').next())
            .map(str::trim)
            .ok_or("bad chunk size")?;
        let size = usize::from_str_radix(hex, 16).map_err(|_| "bad chunk size")?;
        if size > MAX_ANSWER - out.len() {
            return Err("body over 64 KiB");
        }
        if size == 0 {
            // Trailers, up to the empty line.
            loop {
                let Some(t) = line(at)? else {
                    return Ok(None);
                };
                at += t.len() + 2;
                if t.is_empty() {
                    return Ok(Some((out, at)));
                }
            }
        }
        if raw.len() < at + size + 2 {
            return Ok(None);
        }
        out.extend_from_slice(&raw[at..at + size]);
        if &raw[at + size..at + size + 2] != b"\r\n" {
            return Err("a chunk without its CRLF");
        }
        at += size + 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = Url::parse("http://127.0.0.1:8099/base").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("127.0.0.1", 8099, "/base")
        );
        assert_eq!(u.authority(), "127.0.0.1:8099");
        let u = Url::parse("HTTP://chat.internal").unwrap();
        assert_eq!(
            (u.port, u.path.as_str(), u.authority().as_str()),
            (80, "/", "chat.internal")
        );
        let u = Url::parse("http://[::1]:81/a/b?x=1").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("::1", 81, "/a/b?x=1")
        );
        assert_eq!(u.authority(), "[::1]:81");
        assert_eq!(Url::parse("http://h?q").unwrap().path, "/?q");
        for bad in [
            "https://h/x",
            "ftp://h",
            "http://",
            "http://:80/",
            "http://h:0/",
            "http://h:99999/",
            "http://h:x/",
            "http://u:p@h/",
            "http://h/a b",
            "http://h/#f",
            "http://[::1/",
            "h:80",
            "",
        ] {
            assert!(Url::parse(bad).is_err(), "{bad}");
        }
        assert!(Url::parse("https://h").unwrap_err().contains("https"));
    }

    fn ok(raw: &str) -> Answer {
        parse_answer(raw.as_bytes(), false)
            .unwrap_or_else(|e| panic!("{raw:?}: {e}"))
            .unwrap_or_else(|| panic!("{raw:?}: incomplete"))
    }

    #[test]
    fn answers_that_are_relayed() {
        let a = ok("HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n{\"a\":1}\n");
        assert_eq!(
            (a.status, a.body.as_slice(), a.keep_alive),
            (200, &b"{\"a\":1}\n"[..], true)
        );
        let a = ok("HTTP/1.1 404 Not Found\r\nconnection: Close\r\ncontent-length: 2\r\n\r\n{}");
        assert_eq!((a.status, a.keep_alive), (404, false));
        let a = ok("HTTP/1.1 204 No Content\r\n\r\n");
        assert_eq!((a.status, a.body.len(), a.keep_alive), (204, 0, true));
        let a = ok("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n[1,\r\n2;x=y\r\n2]\r\n0\r\nT: v\r\n\r\n");
        assert_eq!((a.body.as_slice(), a.keep_alive), (&b"[1,2]"[..], true));
        let a = ok("HTTP/1.0 500 Oops\r\nContent-Length: 2\r\n\r\n{}");
        assert_eq!((a.status, a.keep_alive), (500, false));
        let a = parse_answer(b"HTTP/1.1 200 OK\r\n\r\n{\"until\":\"eof\"}", true)
            .unwrap()
            .unwrap();
        assert_eq!((a.body.len(), a.keep_alive), (15, false));
        // Stray bytes after the answer: relayed, the connection not reused.
        assert!(!ok("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}junk").keep_alive);
    }

    #[test]
    fn incomplete_answers_wait_for_more() {
        for raw in [
            "",
            "HTTP/1.1 200 OK\r\nContent-Le",
            "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{\"a\"",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n[1,2",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n",
            "HTTP/1.1 200 OK\r\n\r\n{}",
        ] {
            assert_eq!(parse_answer(raw.as_bytes(), false), Ok(None), "{raw:?}");
        }
    }

    #[test]
    fn hostile_answers_are_malformed_never_a_panic() {
        let big = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
            MAX_ANSWER + 1
        );
        let long_head = format!("HTTP/1.1 200 OK\r\nX: {}", "a".repeat(MAX_HEAD + 1));
        let many = format!("HTTP/1.1 200 OK\r\n{}\r\n", "A: b\r\n".repeat(65));
        let huge_chunk = format!(
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n",
            MAX_ANSWER + 1
        );
        for raw in [
            "SSH-2.0-OpenSSH\r\n\r\n",
            "HTTP/2 200\r\n\r\n",
            "HTTP/1.1 099 Low\r\n\r\n",
            "HTTP/1.1 100 Continue\r\n\r\n",
            "HTTP/1.1 600 High\r\nContent-Length: 2\r\n\r\n{}",
            "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 6\r\n\r\n<html>",
            big.as_str(),
            long_head.as_str(),
            many.as_str(),
            huge_chunk.as_str(),
        ] {
            assert!(parse_answer(raw.as_bytes(), true).is_err(), "{raw:.80?}");
        }
        let eof_body = format!("HTTP/1.1 200 OK\r\n\r\n{}", "1".repeat(MAX_ANSWER + 1));
        assert!(parse_answer(eof_body.as_bytes(), true).is_err());
        // Every prefix of a valid answer, and every byte changed to every value: no panic.
        let good = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n";
        for n in 0..good.len() {
            let _ = parse_answer(&good[..n], n % 2 == 0);
        }
        for at in 0..good.len() {
            for b in 0..=255u8 {
                let mut raw = good.to_vec();
                raw[at] = b;
                let _ = parse_answer(&raw, true);
            }
        }
    }

    #[test]
    fn failures_are_the_documented_errors() {
        for (f, status) in [
            (Failure::Unreachable, 503),
            (Failure::Timeout, 503),
            (Failure::Malformed, 502),
            (Failure::Busy, 503),
        ] {
            let e = f.error();
            assert_eq!(e.status, status);
            assert_eq!(e.body["code"], 0);
            assert!(e.body["message"].is_string());
        }
    }
}
