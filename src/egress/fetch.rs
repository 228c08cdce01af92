//! One outbound HTTP/1.1 exchange, bounded everywhere: the guard's
//! addresses and no others (no second lookup, no proxy: nothing here reads
//! the environment), a connect deadline and a total deadline checked
//! before every read and write, a cap on the answer's head and body that
//! stops reading past it, and no redirect followed (a 3xx is the answer;
//! its `Location` is relayed, never fetched).

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::guard::{self, Policy};
use super::reason::Reason;

/// Largest answer head (status line and headers).
const MAX_HEAD: usize = 16 << 10;
/// Largest chunk-size line of a chunked answer.
const MAX_CHUNK_LINE: usize = 1024;
/// Bytes read from the socket at a time.
const READ_CHUNK: usize = 16 << 10;
/// Answer headers relayed (the rest are dropped).
const RELAYED_HEADERS: usize = 32;

pub type Failure = (Reason, String);

/// The bounds of one exchange.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub connect: Duration,
    pub total: Duration,
    pub max_response_bytes: usize,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// The https client configuration: the Mozilla root store compiled in
/// (webpki-roots), not the system's, so the zone needs no CA files.
fn tls_config() -> Result<Arc<rustls::ClientConfig>, Failure> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots = rustls::RootCertStore {
                roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
            };
            rustls::ClientConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .map(|b| Arc::new(b.with_root_certificates(roots).with_no_client_auth()))
            .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|e| (Reason::TlsFailed, e))
}

trait Io: Read + Write + Send {}
impl<T: Read + Write + Send> Io for T {}

/// Runs one exchange. `headers` must not name the ones the egress writes.
pub fn fetch(
    policy: &Policy,
    method: &str,
    url: &str,
    headers: &[(String, String)],
    body: &[u8],
    bounds: Bounds,
) -> Result<Response, Failure> {
    let start = Instant::now();
    let deadline = start + bounds.total;
    let connect_by = (start + bounds.connect).min(deadline);
    if !matches!(method, "GET" | "POST" | "PUT" | "PATCH" | "DELETE") {
        return Err((Reason::BadUrl, format!("method {method:?} not allowed")));
    }
    let target = guard::parse_url(url)?;
    let head = request_head(method, &target, headers, body.len())?;
    // Resolve and validate immediately before connecting; connect to
    // exactly what was validated.
    let addrs = guard::resolve(&target, policy, connect_by)?;
    let tcp = connect(&addrs, connect_by)?;
    let _ = tcp.set_nodelay(true);
    let sock = tcp
        .try_clone()
        .map_err(|e| (Reason::ConnectFailed, e.to_string()))?;
    let mut io: Box<dyn Io> = if target.https {
        Box::new(handshake(&target, tcp, &sock, deadline)?)
    } else {
        Box::new(tcp)
    };
    let result = exchange(&mut *io, &sock, &head, body, method, deadline, bounds);
    let _ = sock.shutdown(Shutdown::Both);
    result
}

fn request_head(
    method: &str,
    target: &guard::Target,
    headers: &[(String, String)],
    body_len: usize,
) -> Result<Vec<u8>, Failure> {
    let mut head = format!(
        "{method} {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: gatewayd-egress\r\nConnection: close\r\nContent-Length: {body_len}\r\n",
        target.path,
        target.host_header()
    );
    for (k, v) in headers {
        let token = !k.is_empty()
            && k.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        let reserved = [
            "host",
            "content-length",
            "connection",
            "transfer-encoding",
            "user-agent",
        ]
        .iter()
        .any(|r| k.eq_ignore_ascii_case(r));
        if !token || reserved || v.bytes().any(|b| b < 0x20 && b != b'\t' || b == 0x7f) {
            return Err((Reason::BadUrl, format!("request header {k:?} refused")));
        }
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    Ok(head.into_bytes())
}

fn connect(addrs: &[SocketAddr], by: Instant) -> Result<TcpStream, Failure> {
    let mut last = (Reason::ConnectFailed, "no address".to_string());
    for a in addrs {
        let left = by.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err((Reason::Timeout, format!("connect to {a}: deadline passed")));
        }
        match TcpStream::connect_timeout(a, left) {
            Ok(s) => return Ok(s),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
                ) =>
            {
                last = (Reason::Timeout, format!("connect to {a}: {e}"))
            }
            Err(e) => last = (Reason::ConnectFailed, format!("connect to {a}: {e}")),
        }
    }
    Err(last)
}

/// Both socket timeouts set to what is left of `deadline`; a passed one is
/// a timeout.
fn arm(sock: &TcpStream, deadline: Instant) -> Result<(), Failure> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left < Duration::from_millis(1) {
        return Err((Reason::Timeout, "deadline passed".into()));
    }
    let _ = sock.set_read_timeout(Some(left));
    let _ = sock.set_write_timeout(Some(left));
    Ok(())
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    )
}

fn handshake(
    target: &guard::Target,
    mut tcp: TcpStream,
    sock: &TcpStream,
    deadline: Instant,
) -> Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>, Failure> {
    let name = rustls::pki_types::ServerName::try_from(target.host.clone())
        .map_err(|e| (Reason::TlsFailed, format!("server name: {e}")))?;
    let mut conn = rustls::ClientConnection::new(tls_config()?, name)
        .map_err(|e| (Reason::TlsFailed, e.to_string()))?;
    while conn.is_handshaking() {
        arm(sock, deadline)?;
        if let Err(e) = conn.complete_io(&mut tcp) {
            let reason = if is_timeout(&e) {
                Reason::Timeout
            } else {
                Reason::TlsFailed
            };
            return Err((reason, format!("TLS handshake: {e}")));
        }
    }
    Ok(rustls::StreamOwned::new(conn, tcp))
}

fn exchange(
    io: &mut dyn Io,
    sock: &TcpStream,
    head: &[u8],
    body: &[u8],
    method: &str,
    deadline: Instant,
    bounds: Bounds,
) -> Result<Response, Failure> {
    let write_err = |e: io::Error| {
        if is_timeout(&e) {
            (Reason::Timeout, format!("sending: {e}"))
        } else {
            (Reason::ConnectFailed, format!("sending: {e}"))
        }
    };
    for part in [head, body] {
        for piece in part.chunks(READ_CHUNK) {
            arm(sock, deadline)?;
            io.write_all(piece).map_err(write_err)?;
        }
    }
    arm(sock, deadline)?;
    io.flush().map_err(write_err)?;
    let mut rd = Reader {
        io,
        sock,
        deadline,
        buf: Vec::with_capacity(READ_CHUNK),
        pos: 0,
    };
    rd.response(method, bounds.max_response_bytes)
}

struct Reader<'a> {
    io: &'a mut dyn Io,
    sock: &'a TcpStream,
    deadline: Instant,
    /// Bytes read and not yet consumed start at `pos`.
    buf: Vec<u8>,
    pos: usize,
}

impl Reader<'_> {
    fn pending(&self) -> &[u8] {
        &self.buf[self.pos..]
    }

    /// Reads at most `READ_CHUNK` more bytes; false at the end of stream.
    fn more(&mut self) -> Result<bool, Failure> {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        arm(self.sock, self.deadline)?;
        let have = self.buf.len();
        self.buf.resize(have + READ_CHUNK, 0);
        let r = self.io.read(&mut self.buf[have..]);
        let n = match r {
            Ok(n) => n,
            // A peer closing without TLS close_notify: the end, as for http.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => 0,
            Err(e) => {
                self.buf.truncate(have);
                let reason = if is_timeout(&e) {
                    Reason::Timeout
                } else if e.kind() == io::ErrorKind::InvalidData {
                    Reason::TlsFailed
                } else {
                    Reason::MalformedResponse
                };
                return Err((reason, format!("reading the answer: {e}")));
            }
        };
        self.buf.truncate(have + n);
        Ok(n > 0)
    }

    fn malformed(why: &str) -> Failure {
        (Reason::MalformedResponse, why.to_string())
    }

    /// One CRLF-terminated line (without it), at most `max` bytes.
    fn line(&mut self, max: usize) -> Result<Vec<u8>, Failure> {
        loop {
            if let Some(i) = self.pending().windows(2).position(|w| w == b"\r\n") {
                let line = self.pending()[..i].to_vec();
                self.pos += i + 2;
                return Ok(line);
            }
            if self.pending().len() > max {
                return Err(Self::malformed("line too long"));
            }
            if !self.more()? {
                return Err(Self::malformed("answer ended mid-line"));
            }
        }
    }

    /// Appends exactly `n` bytes to `out`.
    fn exact(&mut self, mut n: usize, out: &mut Vec<u8>) -> Result<(), Failure> {
        while n > 0 {
            if self.pending().is_empty() && !self.more()? {
                return Err(Self::malformed("answer shorter than announced"));
            }
            let take = n.min(self.pending().len());
            out.extend_from_slice(&self.pending()[..take]);
            self.pos += take;
            n -= take;
        }
        Ok(())
    }

    fn response(&mut self, method: &str, cap: usize) -> Result<Response, Failure> {
        // The head.
        let end = loop {
            if let Some(i) = self.pending().windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            if self.pending().len() > MAX_HEAD {
                return Err(Self::malformed("answer head over 16 KiB"));
            }
            if !self.more()? {
                return Err(Self::malformed(
                    "connection closed before a complete answer head",
                ));
            }
        };
        let mut slots = [httparse::EMPTY_HEADER; 64];
        let mut parsed = httparse::Response::new(&mut slots);
        match parsed.parse(&self.pending()[..end]) {
            Ok(httparse::Status::Complete(_)) => {}
            _ => return Err(Self::malformed("not an HTTP/1.x answer head")),
        }
        let status = parsed.code.unwrap_or(0);
        if !(200..=599).contains(&status) {
            return Err(Self::malformed("status outside 200-599"));
        }
        let mut length: Option<usize> = None;
        let mut chunked = false;
        let mut headers = Vec::new();
        for h in parsed.headers.iter() {
            let value = String::from_utf8_lossy(h.value).into_owned();
            if h.name.eq_ignore_ascii_case("content-length") {
                let n = value
                    .trim()
                    .parse::<usize>()
                    .map_err(|_| Self::malformed("bad Content-Length"))?;
                if length.is_some_and(|l| l != n) {
                    return Err(Self::malformed("conflicting Content-Length"));
                }
                length = Some(n);
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = value.to_ascii_lowercase().trim().ends_with("chunked");
                if !chunked {
                    return Err(Self::malformed("unsupported Transfer-Encoding"));
                }
            }
            if headers.len() < RELAYED_HEADERS {
                headers.push((h.name.to_string(), value));
            }
        }
        self.pos += end;
        let mut body = Vec::new();
        let too_large = |n: usize| {
            (
                Reason::TooLarge,
                format!("answer body over {cap} bytes (at least {n})"),
            )
        };
        if method == "HEAD" || status == 204 || status == 304 {
            // No body.
        } else if chunked {
            loop {
                let line = self.line(MAX_CHUNK_LINE)?;
                let size = std::str::from_utf8(&line)
                    .ok()
                    .map(|l| l.split(';').next().unwrap_or("").trim())
                    .and_then(|h| usize::from_str_radix(h, 16).ok())
                    .ok_or_else(|| Self::malformed("bad chunk size"))?;
                if size == 0 {
                    break;
                }
                let total = body.len().saturating_add(size);
                if total > cap {
                    return Err(too_large(total));
                }
                self.exact(size, &mut body)?;
                if !self.line(2)?.is_empty() {
                    return Err(Self::malformed("chunk not followed by CRLF"));
                }
            }
        } else if let Some(n) = length {
            if n > cap {
                return Err(too_large(n));
            }
            self.exact(n, &mut body)?;
        } else {
            // Until the end of the stream.
            loop {
                let take = self.pending().len().min(cap + 1 - body.len());
                body.extend_from_slice(&self.pending()[..take]);
                self.pos += take;
                if body.len() > cap {
                    return Err(too_large(body.len()));
                }
                if !self.more()? {
                    break;
                }
            }
        }
        Ok(Response {
            status,
            headers,
            body,
        })
    }
}
