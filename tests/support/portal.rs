//! The developer portal of a node (docs/portal.md): its address, and a
//! plain HTTP client that signs in the way the sign-in form does.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde_json::Value;

use super::node::Node;

/// The portal's bound address (`<data dir>/gatewayd.portal-addr`).
pub fn addr(node: &Node) -> SocketAddr {
    let text = std::fs::read_to_string(node.dir.path().join("gatewayd.portal-addr"))
        .expect("gatewayd.portal-addr");
    text.trim().parse().expect("a socket address")
}

#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body: String,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {:.300}", self.body))
    }
    /// The value of cookie `name` set by this answer.
    pub fn set_cookie(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let v = l.strip_prefix("Set-Cookie: ")?;
            let (k, rest) = v.split_once('=')?;
            (k == name).then(|| rest.split(';').next().unwrap_or("").to_string())
        })
    }
    pub fn cookie_line(&self, name: &str) -> Option<String> {
        self.head
            .lines()
            .find(|l| l.starts_with(&format!("Set-Cookie: {name}=")))
            .map(str::to_string)
    }
}

/// One request (`headers` as full lines without CRLF).
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[String],
    body: &str,
) -> Answer {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("portal connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !body.is_empty() {
        req.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
    }
    for h in headers {
        req.push_str(h);
        req.push_str("\r\n");
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    Answer {
        status: head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0),
        head: head.to_string(),
        body: body.to_string(),
    }
}

/// Percent-encodes a form value.
pub fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A signed-in portal session: its cookie and CSRF token.
#[derive(Clone, Debug)]
pub struct Signed {
    pub addr: SocketAddr,
    pub cookie: String,
    pub csrf: String,
}

/// The sign-in form's round: GET / for the form's token, POST /signin.
/// Ok(session), or Err(the answer) if refused.
pub fn sign_in(addr: SocketAddr, token: &str) -> Result<Signed, Answer> {
    sign_in_with_fields(addr, &format!("token={}", enc(token)))
}

/// Signs in as a developer (name and password).
pub fn sign_in_developer(addr: SocketAddr, name: &str, password: &str) -> Result<Signed, Answer> {
    sign_in_with_fields(
        addr,
        &format!("name={}&password={}", enc(name), enc(password)),
    )
}

/// Signs in with these form fields (`admin_token=...` for the operator).
pub fn sign_in_with_fields(addr: SocketAddr, fields: &str) -> Result<Signed, Answer> {
    let page = request(addr, "GET", "/", &[], "");
    let pre = page
        .set_cookie("gw_pre")
        .expect("the sign-in form's cookie");
    let a = request(
        addr,
        "POST",
        "/signin",
        &[format!("Cookie: gw_pre={pre}")],
        &format!("csrf={pre}&{fields}"),
    );
    let Some(cookie) = a.set_cookie("gw_portal") else {
        return Err(a);
    };
    let home = request(
        addr,
        "GET",
        "/",
        &[format!("Cookie: gw_portal={cookie}")],
        "",
    );
    let csrf = home
        .body
        .split("<meta name=\"csrf\" content=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("the page's CSRF token")
        .to_string();
    Ok(Signed { addr, cookie, csrf })
}

impl Signed {
    pub fn get(&self, path: &str) -> Answer {
        request(
            self.addr,
            "GET",
            path,
            &[format!("Cookie: gw_portal={}", self.cookie)],
            "",
        )
    }
    /// A POST with the CSRF header, as the page's script sends it.
    pub fn post(&self, path: &str, form: &str) -> Answer {
        request(
            self.addr,
            "POST",
            path,
            &[
                format!("Cookie: gw_portal={}", self.cookie),
                format!("X-CSRF-Token: {}", self.csrf),
            ],
            form,
        )
    }
    pub fn health(&self) -> Value {
        let a = self.get("/api/health");
        assert_eq!(a.status, 200, "{a:?}");
        a.json()
    }
}

/// An interactions endpoint that answers every request with a PONG, a
/// badly signed one too (what the platform must refuse to save): its URL.
/// Serves 16 requests, then stops.
pub fn lax_endpoint() -> String {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in l.incoming().flatten().take(16) {
            let mut s = s;
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let mut buf = [0u8; 4096];
            let _ = s.read(&mut buf);
            let _ = s.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 10\r\nConnection: close\r\n\r\n{\"type\":1}",
            );
        }
    });
    format!("http://{addr}/interactions")
}
