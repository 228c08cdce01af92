//! A minimal RESP2 client for the counters thread (`link::counters`): one
//! blocking TCP connection, pipelined commands, and a deadline on every
//! call. Hand-written rather than a crate because the node needs five
//! commands' worth of protocol (integers, bulk strings, simple strings,
//! errors) and a deadline per *round* (connect, write, every read), which
//! client crates express per socket operation at best.
//!
//! - Deadline: `connect` and `pipeline` take an `Instant`; each socket
//!   operation's timeout is the time left, and a call that reaches it
//!   fails with `TimedOut`. After any error the connection is dropped (a
//!   reply may be half read).
//! - Bounds: a reply line or bulk string over `MAX_REPLY` bytes, and any
//!   array reply (no command we send answers one), are protocol errors.
//! - TLS: `rediss://` (see `link::resp_tls`): the handshake is bounded by
//!   the connect deadline, and every later socket operation by its call's.
//! - Address resolution (a host name in the URL) goes through the system
//!   resolver, which the deadline does not bound: use an IP address where
//!   that matters.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::resp_tls::{left, timed_out, Stream};

/// The longest reply line or bulk string accepted.
const MAX_REPLY: usize = 64 << 10;

/// Where the counters live: `redis://[[user]:password@]host[:port][/db]`,
/// or `rediss://...[?ca=/path/ca.pem]` over TLS (always verified: the
/// chain to the `ca` PEM file, else to webpki-roots, and the host).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub host: String,
    pub port: u16,
    pub user: Option<String>,
    pub password: Option<String>,
    pub db: u32,
    /// `rediss://`.
    pub tls: bool,
    /// `?ca=`: the roots to verify the server with (rediss:// only).
    pub ca: Option<PathBuf>,
}

impl Target {
    pub fn parse(url: &str) -> Result<Target, String> {
        let shown = shown(url);
        let bad = |why: &str| {
            format!(
                "redis URL {shown:?}: {why} (expected redis://[:password@]host[:port][/db] \
                 or rediss://[:password@]host[:port][/db][?ca=/path/ca.pem])"
            )
        };
        let (tls, rest) = match url.strip_prefix("rediss://") {
            Some(r) => (true, r),
            None => (
                false,
                url.strip_prefix("redis://")
                    .ok_or_else(|| bad("not redis:// or rediss://"))?,
            ),
        };
        let (rest, ca) = match rest.split_once('?') {
            None => (rest, None),
            Some((r, q)) => {
                let mut ca = None;
                for pair in q.split('&').filter(|p| !p.is_empty()) {
                    match pair.split_once('=') {
                        Some(("ca", p)) if tls && !p.is_empty() => ca = Some(PathBuf::from(p)),
                        Some(("ca", _)) if !tls => return Err(bad("ca= is for rediss://")),
                        _ => return Err(bad(&format!("unknown parameter {pair:?}"))),
                    }
                }
                (r, ca)
            }
        };
        let (auth, rest) = match rest.rsplit_once('@') {
            Some((a, r)) => (Some(a), r),
            None => (None, rest),
        };
        let (hostport, db) = match rest.split_once('/') {
            Some((h, "")) => (h, 0),
            Some((h, d)) => (h, d.parse().map_err(|_| bad("the db is not a number"))?),
            None => (rest, 0),
        };
        let bracketed = hostport.starts_with('[') && hostport.ends_with(']');
        let (host, port) = match hostport.rsplit_once(':') {
            Some((h, p)) if !bracketed => {
                (h, p.parse().map_err(|_| bad("the port is not a number"))?)
            }
            _ => (hostport, 6379),
        };
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let (user, password) = match auth {
            None => (None, None),
            Some(a) => match a.split_once(':') {
                Some(("", p)) => (None, Some(p.to_string())),
                Some((u, p)) => (Some(u.to_string()), Some(p.to_string())),
                None => return Err(bad("credentials are user:password or :password")),
            },
        };
        Ok(Target {
            host: host.to_string(),
            port,
            user,
            password,
            db,
            tls,
            ca,
        })
    }
}

pub use super::resp_tls::is_verify_failure;

/// At start, for a `rediss://` URL: one connection by `timeout_ms`; a
/// certificate that does not verify is an error naming `what` (the config
/// key) and the reason, so the node refuses to start. An unreachable server
/// is not: the caller's fallback applies (and it keeps retrying).
pub fn refuse_unverified(url: &str, timeout_ms: u64, what: &str) -> Result<(), String> {
    let Ok(t) = Target::parse(url) else {
        return Ok(()); // the caller reports a bad URL
    };
    if !t.tls {
        return Ok(());
    }
    let deadline = Instant::now() + Duration::from_millis(timeout_ms.max(1));
    match Conn::connect(&t, deadline) {
        Err(e) if is_verify_failure(&e) => {
            Err(format!("Redis ({what}) at {}:{}: {e}", t.host, t.port))
        }
        _ => Ok(()),
    }
}

/// `url` without its credentials (for messages).
fn shown(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    match rest[..end].rsplit_once('@') {
        Some((_, host)) => format!("{scheme}://***@{host}{}", &rest[end..]),
        None => url.to_string(),
    }
}

/// One reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Int(i64),
    Simple(String),
    /// `None`: the nil bulk string (a missing key).
    Bulk(Option<Vec<u8>>),
    Error(String),
    /// An array (LRANGE), `None` for nil; only on a connection that
    /// allows them (`Conn::allow_large`), at most `MAX_ARRAY` items.
    Array(Option<Vec<Reply>>),
}

/// Items of an array reply accepted (on connections that allow arrays).
pub const MAX_ARRAY: usize = 1 << 16;

impl Reply {
    /// An integer reply, or a bulk string holding one (GET), nil as 0.
    pub fn as_count(&self) -> Option<u64> {
        match self {
            Reply::Int(n) => u64::try_from(*n).ok(),
            Reply::Bulk(None) => Some(0),
            Reply::Bulk(Some(b)) => std::str::from_utf8(b).ok()?.parse().ok(),
            _ => None,
        }
    }
}

/// Append one command (RESP array of bulk strings) to `out`.
pub fn command(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

pub struct Conn {
    stream: Stream,
    buf: Vec<u8>,
    pos: usize,
    /// The longest bulk string accepted, and whether arrays are.
    max_bulk: usize,
    arrays: bool,
}

fn protocol(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("redis: {what}"))
}

impl Conn {
    /// Connect, authenticate and select the database, all by `deadline`.
    pub fn connect(t: &Target, deadline: Instant) -> io::Result<Conn> {
        let addrs: Vec<SocketAddr> = (t.host.as_str(), t.port).to_socket_addrs()?.collect();
        let mut last = io::Error::new(
            io::ErrorKind::NotFound,
            format!("redis: {} resolves to nothing", t.host),
        );
        for a in addrs {
            match TcpStream::connect_timeout(&a, left(deadline)?) {
                Ok(tcp) => {
                    tcp.set_nodelay(true)?;
                    let stream = if t.tls {
                        Stream::tls(tcp, &t.host, t.ca.as_deref(), deadline)?
                    } else {
                        Stream::Plain(tcp)
                    };
                    let mut c = Conn {
                        stream,
                        buf: Vec::with_capacity(16 << 10),
                        pos: 0,
                        max_bulk: MAX_REPLY,
                        arrays: false,
                    };
                    let mut hello = Vec::new();
                    let mut n = 0;
                    if let Some(p) = &t.password {
                        match &t.user {
                            Some(u) => command(&mut hello, &[b"AUTH", u.as_bytes(), p.as_bytes()]),
                            None => command(&mut hello, &[b"AUTH", p.as_bytes()]),
                        }
                        n += 1;
                    }
                    if t.db != 0 {
                        command(&mut hello, &[b"SELECT", t.db.to_string().as_bytes()]);
                        n += 1;
                    }
                    command(&mut hello, &[b"PING"]);
                    for r in c.pipeline(&hello, n + 1, deadline)? {
                        if let Reply::Error(e) = r {
                            return Err(protocol(format!("connecting: {e}")));
                        }
                    }
                    return Ok(c);
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Accept bulk strings up to `max_bulk` bytes and array replies (the
    /// recovery store's blobs and journal reads).
    pub fn allow_large(&mut self, max_bulk: usize) {
        self.max_bulk = max_bulk.max(MAX_REPLY);
        self.arrays = true;
    }

    /// Send `commands` (already encoded, `count` of them) and read their
    /// `count` replies, all by `deadline`. A Redis error is a `Reply`;
    /// I/O, protocol and deadline failures are `Err`.
    pub fn pipeline(
        &mut self,
        commands: &[u8],
        count: usize,
        deadline: Instant,
    ) -> io::Result<Vec<Reply>> {
        let mut sent = 0;
        while sent < commands.len() {
            self.stream.bound(deadline)?;
            match self.stream.write(&commands[sent..]) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(timed_out(e)),
            }
        }
        // TLS: what the session still holds goes out now.
        if sent > 0 {
            self.stream.bound(deadline)?;
            self.stream.flush().map_err(timed_out)?;
        }
        (0..count).map(|_| self.reply(deadline)).collect()
    }

    fn reply(&mut self, deadline: Instant) -> io::Result<Reply> {
        self.reply_at(deadline, 0)
    }

    fn reply_at(&mut self, deadline: Instant, depth: usize) -> io::Result<Reply> {
        let line = self.line(deadline)?;
        let (kind, rest) = line
            .split_first()
            .ok_or_else(|| protocol("empty reply line".into()))?;
        let text = || String::from_utf8_lossy(rest).into_owned();
        Ok(match kind {
            b':' => Reply::Int(
                text()
                    .parse()
                    .map_err(|_| protocol(format!("bad integer {:?}", text())))?,
            ),
            b'+' => Reply::Simple(text()),
            b'-' => Reply::Error(text()),
            b'$' => {
                let n: i64 = text()
                    .parse()
                    .map_err(|_| protocol(format!("bad length {:?}", text())))?;
                if n < 0 {
                    return Ok(Reply::Bulk(None));
                }
                let n = n as usize;
                if n > self.max_bulk {
                    return Err(protocol(format!("a {n}-byte bulk reply")));
                }
                while self.buf.len() - self.pos < n + 2 {
                    self.fill(deadline)?;
                }
                let b = self.buf[self.pos..self.pos + n].to_vec();
                self.pos += n + 2;
                Reply::Bulk(Some(b))
            }
            b'*' if self.arrays && depth == 0 => {
                let n: i64 = text()
                    .parse()
                    .map_err(|_| protocol(format!("bad length {:?}", text())))?;
                if n < 0 {
                    return Ok(Reply::Array(None));
                }
                if n as usize > MAX_ARRAY {
                    return Err(protocol(format!("a {n}-item array reply")));
                }
                let items = (0..n)
                    .map(|_| self.reply_at(deadline, depth + 1))
                    .collect::<io::Result<Vec<Reply>>>()?;
                Reply::Array(Some(items))
            }
            k => return Err(protocol(format!("unexpected reply type {:?}", *k as char))),
        })
    }

    /// The next line, without its CRLF.
    fn line(&mut self, deadline: Instant) -> io::Result<Vec<u8>> {
        loop {
            if let Some(i) = self.buf[self.pos..].windows(2).position(|w| w == b"\r\n") {
                let l = self.buf[self.pos..self.pos + i].to_vec();
                self.pos += i + 2;
                return Ok(l);
            }
            if self.buf.len() - self.pos > MAX_REPLY {
                return Err(protocol("a reply line over 64 KiB".into()));
            }
            self.fill(deadline)?;
        }
    }

    fn fill(&mut self, deadline: Instant) -> io::Result<()> {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.stream.bound(deadline)?;
        let mut tmp = [0u8; 16 << 10];
        match self.stream.read(&mut tmp) {
            Ok(0) => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "redis closed the connection",
            )),
            Ok(n) => {
                self.buf.extend_from_slice(&tmp[..n]);
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(e) => Err(timed_out(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let t = Target::parse("redis://127.0.0.1:6380/2").unwrap();
        assert_eq!((t.host.as_str(), t.port, t.db), ("127.0.0.1", 6380, 2));
        let t = Target::parse("redis://:s3cret@cache").unwrap();
        assert_eq!(
            (t.port, t.password.as_deref(), t.user),
            (6379, Some("s3cret"), None)
        );
        let t = Target::parse("redis://u:p@[::1]:7000/").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.user.as_deref()),
            ("::1", 7000, Some("u"))
        );
        assert_eq!(Target::parse("redis://[::1]").unwrap().port, 6379);
        let t = Target::parse("rediss://:pw@cache.internal:6380/1?ca=/etc/gw/ca.pem").unwrap();
        assert!(t.tls);
        assert_eq!(
            (t.host.as_str(), t.port, t.db, t.password.as_deref()),
            ("cache.internal", 6380, 1, Some("pw"))
        );
        assert_eq!(t.ca, Some(PathBuf::from("/etc/gw/ca.pem")));
        let t = Target::parse("rediss://127.0.0.1").unwrap();
        assert!(t.tls && t.ca.is_none());
        assert!(!Target::parse("redis://h").unwrap().tls);
        for bad in [
            "http://x",
            "redis://",
            "redis://h:port",
            "redis://h/db",
            "redis://nopass@h",
            "redis://h?ca=/x.pem",
            "rediss://h?cert=/x.pem",
            "rediss://h?ca=",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
        for secret in ["redis://:s3cret@h:x", "rediss://u:s3cret@h/0?bogus=1"] {
            let e = Target::parse(secret).unwrap_err();
            assert!(!e.contains("s3cret") && e.contains("***@h"), "{e}");
        }
    }

    #[test]
    fn replies_are_parsed_within_bounds() {
        // A loopback peer that answers a canned byte string.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let canned: &'static [u8] = b"+PONG\r\n:42\r\n$2\r\n17\r\n$-1\r\n-ERR wrong\r\n*1\r\n";
        let peer = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut b = [0u8; 256];
            let _ = s.read(&mut b);
            s.write_all(canned).unwrap();
            std::thread::sleep(Duration::from_millis(300));
        });
        let deadline = Instant::now() + Duration::from_secs(5);
        let stream = Stream::Plain(TcpStream::connect(addr).unwrap());
        let mut c = Conn {
            stream,
            buf: Vec::new(),
            pos: 0,
            max_bulk: MAX_REPLY,
            arrays: false,
        };
        let mut cmds = Vec::new();
        command(&mut cmds, &[b"PING"]);
        let r = c.pipeline(&cmds, 5, deadline).unwrap();
        assert_eq!(r[0], Reply::Simple("PONG".into()));
        assert_eq!(r[1].as_count(), Some(42));
        assert_eq!(r[2].as_count(), Some(17), "GET's bulk string");
        assert_eq!(r[3].as_count(), Some(0), "nil: a missing key");
        assert_eq!(r[4], Reply::Error("ERR wrong".into()));
        assert!(r[4].as_count().is_none());
        let e = c.pipeline(&[], 1, deadline).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "an array: {e}");
        // Nothing more comes: the deadline ends the wait.
        let e = c
            .pipeline(&[], 1, Instant::now() + Duration::from_millis(50))
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
        peer.join().unwrap();
    }

    #[test]
    fn nothing_listening_fails_fast() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let t = Target::parse(&format!("redis://127.0.0.1:{port}")).unwrap();
        let started = Instant::now();
        assert!(Conn::connect(&t, Instant::now() + Duration::from_millis(200)).is_err());
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn arrays_only_where_allowed_and_bounded() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let canned: &'static [u8] = b"*2\r\n$1\r\na\r\n$-1\r\n*-1\r\n*99999999\r\n";
        let peer = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut b = [0u8; 256];
            let _ = s.read(&mut b);
            s.write_all(canned).unwrap();
            std::thread::sleep(Duration::from_millis(300));
        });
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut c = Conn {
            stream: Stream::Plain(TcpStream::connect(addr).unwrap()),
            buf: Vec::new(),
            pos: 0,
            max_bulk: MAX_REPLY,
            arrays: false,
        };
        c.allow_large(1 << 20);
        let mut cmds = Vec::new();
        command(&mut cmds, &[b"LRANGE", b"k", b"0", b"-1"]);
        let r = c.pipeline(&cmds, 2, deadline).unwrap();
        assert_eq!(
            r[0],
            Reply::Array(Some(vec![
                Reply::Bulk(Some(b"a".to_vec())),
                Reply::Bulk(None)
            ]))
        );
        assert_eq!(r[1], Reply::Array(None));
        let e = c.pipeline(&[], 1, deadline).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "a huge array: {e}");
        peer.join().unwrap();
    }
}
