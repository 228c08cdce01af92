//! One-shot HTTP/1.1 requests to a node's admin or gateway port, read the
//! way a client must: the head, then a Content-Length or chunked body, or
//! everything up to EOF.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::Value;

/// A response: status, the head as received (for header checks) and the body.
pub struct Resp {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Resp {
    /// The first header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<String> {
        header(&self.head, name)
    }

    /// The body as JSON; panics (showing it) if it is not.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {:?}\nhead: {}",
                self.body, self.head
            )
        })
    }

    /// Asserts `Content-Type: application/json` exactly.
    pub fn assert_json_type(&self, what: &str) {
        assert_eq!(
            self.header("content-type").as_deref(),
            Some("application/json"),
            "{what}: Content-Type must be exactly application/json; head:\n{}",
            self.head
        );
    }
}

/// `METHOD path` with `Connection: close` and the headers given.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> io::Result<Resp> {
    request_with_body(addr, method, path, headers, None)
}

/// A JSON request: `Authorization` (if given), `Content-Type:
/// application/json` and the body.
pub fn json_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    auth: Option<&str>,
    body: Option<&Value>,
) -> Resp {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
    send_json(s, addr, method, path, auth, body)
}

/// A JSON request on `s` (see `json_request`).
fn send_json(
    s: TcpStream,
    addr: SocketAddr,
    method: &str,
    path: &str,
    auth: Option<&str>,
    body: Option<&Value>,
) -> Resp {
    let mut h = vec![];
    if let Some(a) = auth {
        h.push(("Authorization", a));
    }
    let bytes = body.map(|b| serde_json::to_vec(b).expect("json"));
    if bytes.is_some() {
        h.push(("Content-Type", "application/json"));
    }
    send_request(s, addr, method, path, &h, bytes.as_deref())
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

/// `json_request` from the source address `from` (e.g. 127.0.0.2: the
/// node counts invalid requests per source address).
pub fn json_request_from(
    from: std::net::Ipv4Addr,
    addr: SocketAddr,
    method: &str,
    path: &str,
    auth: Option<&str>,
) -> Resp {
    let s = connect_from(from, addr).unwrap_or_else(|e| panic!("connect from {from}: {e}"));
    send_json(s, addr, method, path, auth, None)
}

/// A TCP connection to `addr` (IPv4) bound to the source address `from`.
fn connect_from(from: std::net::Ipv4Addr, addr: SocketAddr) -> io::Result<TcpStream> {
    use std::os::fd::FromRawFd;
    let SocketAddr::V4(to) = addr else {
        return Err(io::Error::other("IPv4 only"));
    };
    let sin = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a fresh socket, owned by the TcpStream once connected (or
    // closed here on failure); the sockaddrs live across the calls.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let (src, dst) = (sin(from, 0), sin(*to.ip(), to.port()));
        if libc::bind(fd, (&src as *const libc::sockaddr_in).cast(), len) != 0
            || libc::connect(fd, (&dst as *const libc::sockaddr_in).cast(), len) != 0
        {
            let e = io::Error::last_os_error();
            libc::close(fd);
            return Err(e);
        }
        Ok(TcpStream::from_raw_fd(fd))
    }
}

/// Like `request`, with a body (and its `Content-Length`).
pub fn request_with_body(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> io::Result<Resp> {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    send_request(s, addr, method, path, headers, body)
}

fn send_request(
    mut s: TcpStream,
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> io::Result<Resp> {
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: gatewayd-tests\r\nAccept: */*\r\n\
         Connection: close\r\n"
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(b) = body {
        req.push_str(&format!("Content-Length: {}\r\n", b.len()));
    }
    req.push_str("\r\n");
    let mut bytes = req.into_bytes();
    if let Some(b) = body {
        bytes.extend_from_slice(b);
    }
    s.write_all(&bytes)?;
    let eof = |what: String| io::Error::new(io::ErrorKind::UnexpectedEof, what);
    let mut buf = Vec::new();
    let mut tmp = [0u8; 8192];
    let end = loop {
        if let Some(e) = head_end(&buf) {
            break e;
        }
        let n = s.read(&mut tmp)?;
        if n == 0 {
            return Err(eof(format!(
                "EOF before the response head: {:?}",
                String::from_utf8_lossy(&buf)
            )));
        }
        buf.extend_from_slice(&tmp[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut rest = buf[end..].to_vec();
    let body = if let Some(len) = header(&head, "content-length").and_then(|v| v.parse().ok()) {
        while rest.len() < len {
            let n = s.read(&mut tmp)?;
            if n == 0 {
                return Err(eof(format!("EOF inside a {len}-byte body")));
            }
            rest.extend_from_slice(&tmp[..n]);
        }
        rest.truncate(len);
        rest
    } else {
        loop {
            match s.read(&mut tmp) {
                Ok(0) | Err(_) => break,
                Ok(n) => rest.extend_from_slice(&tmp[..n]),
            }
        }
        let chunked =
            header(&head, "transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
        if chunked {
            dechunk(&rest)
        } else {
            rest
        }
    };
    Ok(Resp {
        status: status_of(&head),
        head,
        body: String::from_utf8(body)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("body: {e}")))?,
    })
}

/// A GET; returns (status, body).
pub fn http_get(addr: SocketAddr, path: &str) -> io::Result<(u16, String)> {
    http_request(addr, "GET", path, &[])
}

/// Any method; returns (status, body).
pub fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> io::Result<(u16, String)> {
    request(addr, method, path, headers).map(|r| (r.status, r.body))
}

/// The status code of a response head (0 if there is none).
pub fn status_of(head: &str) -> u16 {
    head.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0)
}

/// Where the head in `buf` ends: its length including the blank line.
pub fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4)
}

/// The value of the first header named `name` (case-insensitive) in a head.
pub fn header(head: &str, name: &str) -> Option<String> {
    head.split("\r\n").skip(1).find_map(|line| {
        let (k, v) = line.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_string())
    })
}

/// The body of a `Transfer-Encoding: chunked` response.
fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = b
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("chunk size line");
        let size_str = std::str::from_utf8(&b[..line_end]).unwrap();
        let size = usize::from_str_radix(size_str.split(';').next().unwrap().trim(), 16)
            .expect("chunk size");
        b = &b[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&b[..size]);
        b = &b[size + 2..];
    }
}

/// One HTTP/1.1 request read off an accepted connection, as a test's
/// endpoint serves it: its path and its `Content-Length` body (None: the
/// peer sent nothing).
pub fn read_request(s: &TcpStream) -> Option<(String, Vec<u8>)> {
    use std::io::{BufRead, BufReader};
    let mut r = BufReader::new(s.try_clone().ok()?);
    let mut line = String::new();
    if r.read_line(&mut line).is_err() {
        return None;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let mut len = 0;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
            break;
        }
        if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0; len];
    let _ = r.read_exact(&mut body);
    Some((path, body))
}
