//! One HTTP/1.1 exchange of the portal: a request read whole under a
//! deadline (head at most `MAX_HEAD`, body at most `MAX_BODY`: `LIMITS`,
//! which `net::front` holds it to), an answer with the headers every page
//! carries, then the connection closes.

use std::time::Duration;

use net::front::Limits;

pub const MAX_HEAD: usize = 8 << 10;
pub const MAX_BODY: usize = 16 << 10;
/// Time a client has to send its whole request.
pub const DEADLINE: Duration = Duration::from_secs(3);

/// The portal's front: 2,048 connections at once (the oldest still
/// sending its request makes room for a new one), each request whole
/// within `DEADLINE`, each answer made within 10 s (a sign-in runs argon2id;
/// the registry and the egress have their own deadlines, below it) and
/// taken by the client within `DEADLINE`.
pub const LIMITS: Limits = Limits {
    max_connections: 2048,
    request_deadline: DEADLINE,
    write_deadline: DEADLINE,
    answer_deadline: Duration::from_secs(10),
    max_head: MAX_HEAD,
    max_body: MAX_BODY,
};

#[derive(Debug, Default)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub query: String,
    pub cookie: Option<String>,
    pub origin: Option<String>,
    pub host: Option<String>,
    pub csrf_header: Option<String>,
    /// `Accept-Encoding` names gzip.
    pub accepts_gzip: bool,
    pub body: Vec<u8>,
}

impl Request {
    /// The value of cookie `name`, if sent.
    pub fn cookie(&self, name: &str) -> Option<&str> {
        self.cookie.as_deref()?.split(';').find_map(|kv| {
            let (k, v) = kv.trim().split_once('=')?;
            (k == name).then_some(v)
        })
    }

    /// A field of the url-encoded form body, or of the query string.
    pub fn field(&self, name: &str) -> Option<String> {
        let body = std::str::from_utf8(&self.body).unwrap_or("");
        form_value(body, name).or_else(|| form_value(&self.query, name))
    }
}

/// Parses one whole request (`net::front` read it). Err: the status to
/// answer (malformed, or a body that is not what its head says).
pub fn parse(whole: &net::front::Request) -> Result<Request, u16> {
    let buf = &whole.bytes;
    let head_end = whole.head_len;
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    if !matches!(
        req.parse(&buf[..head_end]),
        Ok(httparse::Status::Complete(_))
    ) {
        return Err(400);
    }
    let target = req.path.unwrap_or("/");
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let mut out = Request {
        method: req.method.unwrap_or("").to_string(),
        path: path.to_string(),
        query: query.to_string(),
        ..Default::default()
    };
    let mut length = 0usize;
    for h in req.headers.iter() {
        let v = String::from_utf8_lossy(h.value).trim().to_string();
        match h.name.to_ascii_lowercase().as_str() {
            "cookie" => out.cookie = Some(v),
            "accept-encoding" => {
                out.accepts_gzip = v.split(',').any(|e| {
                    e.split(';')
                        .next()
                        .is_some_and(|n| n.trim().eq_ignore_ascii_case("gzip"))
                })
            }
            "origin" => out.origin = Some(v),
            "host" => out.host = Some(v),
            "x-csrf-token" => out.csrf_header = Some(v),
            "content-length" => length = v.parse().map_err(|_| 400u16)?,
            "transfer-encoding" => return Err(411),
            _ => {}
        }
    }
    if length > MAX_BODY {
        return Err(413);
    }
    if whole.body().len() != length {
        return Err(400);
    }
    out.body = whole.body().to_vec();
    Ok(out)
}

/// An answer. Every one refuses framing and sniffing and is uncacheable
/// but for the static files (`assets`); pages allow only the portal's own
/// script and style (no inline script).
pub struct Response {
    pub status: u16,
    pub ctype: &'static str,
    pub body: Vec<u8>,
    pub cookies: Vec<String>,
    pub location: Option<String>,
    /// `Cache-Control` (default `no-store`).
    pub cache: &'static str,
    /// The body is gzip (`Content-Encoding: gzip`).
    pub gzip: bool,
}

impl Response {
    pub fn new(status: u16, ctype: &'static str, body: impl Into<Vec<u8>>) -> Response {
        Response {
            status,
            ctype,
            body: body.into(),
            cookies: Vec::new(),
            location: None,
            cache: "no-store",
            gzip: false,
        }
    }
    pub fn json(status: u16, v: &serde_json::Value) -> Response {
        Response::new(status, "application/json", v.to_string())
    }
    pub fn html(status: u16, body: String) -> Response {
        Response::new(status, "text/html; charset=utf-8", body)
    }
    /// 303 to `to` (after a form POST).
    pub fn see_other(to: &str) -> Response {
        let mut r = Response::new(303, "text/plain", "");
        r.location = Some(to.to_string());
        r
    }

    /// The whole answer on the wire: head and body.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut head = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\
             Cache-Control: {}\r\nX-Content-Type-Options: nosniff\r\nX-Frame-Options: DENY\r\n\
             Referrer-Policy: same-origin\r\nContent-Security-Policy: default-src 'none'; \
             script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; \
             form-action 'self'; frame-ancestors 'none'; base-uri 'none'\r\n",
            self.status,
            reason(self.status),
            self.ctype,
            self.body.len(),
            self.cache
        );
        if self.gzip {
            head.push_str("Content-Encoding: gzip\r\n");
        }
        if self.cache != "no-store" {
            head.push_str("Vary: Accept-Encoding\r\n");
        }
        for c in &self.cookies {
            head.push_str("Set-Cookie: ");
            head.push_str(c);
            head.push_str("\r\n");
        }
        if let Some(l) = &self.location {
            head.push_str("Location: ");
            head.push_str(l);
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        out.extend_from_slice(&self.body);
        out
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        303 => "See Other",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        411 => "Length Required",
        413 => "Payload Too Large",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// `name`'s value in `a=1&b=2` (percent- and plus-decoded).
pub fn form_value(form: &str, name: &str) -> Option<String> {
    form.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (decode(k) == name).then(|| decode(v))
    })
}

fn decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len()
                && b[i + 1].is_ascii_hexdigit()
                && b[i + 2].is_ascii_hexdigit() =>
            {
                let hex = |c: u8| (c as char).to_digit(16).unwrap_or(0) as u8;
                out.push(hex(b[i + 1]) << 4 | hex(b[i + 2]));
                i += 2;
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_decode_and_bad_escapes_stay() {
        assert_eq!(
            form_value("a=1&token=x%2By+z", "token").as_deref(),
            Some("x+y z")
        );
        assert_eq!(form_value("t=%zz%", "t").as_deref(), Some("%zz%"));
        assert_eq!(form_value("t=%4", "t").as_deref(), Some("%4"));
        assert_eq!(form_value("t=%e2%82%ac", "t").as_deref(), Some("€"));
        assert!(form_value("", "t").is_none());
    }

    #[test]
    fn cookies_by_name() {
        let r = Request {
            cookie: Some("a=1; gw_portal=abc; b=2".into()),
            ..Default::default()
        };
        assert_eq!(r.cookie("gw_portal"), Some("abc"));
        assert_eq!(r.cookie("c"), None);
    }
}
