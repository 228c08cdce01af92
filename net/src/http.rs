//! HTTP/1.1 request heads and responses for the gateway port. Pure: no I/O.

use base64::Engine as _;
use sha1::{Digest, Sha1};
use std::io::Write as _;
use thiserror::Error;

/// Longest accepted request head (request line + headers + blank line).
pub const MAX_HEAD: usize = 8192;
/// Most headers accepted in one request.
pub const MAX_HEADERS: usize = 32;

const WS_GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum HttpError {
    #[error("bad request: {0}")]
    BadRequest(&'static str),
    #[error("request head larger than {MAX_HEAD} bytes")]
    HeadTooLarge,
    #[error("more than {MAX_HEADERS} request headers")]
    TooManyHeaders,
}

impl HttpError {
    /// The response status to send before closing the connection.
    pub fn status(&self) -> u16 {
        match self {
            HttpError::BadRequest(_) => 400,
            HttpError::HeadTooLarge | HttpError::TooManyHeaders => 431,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestHead {
    pub method: String,
    /// Request target up to (not including) the first '?'.
    pub path: String,
    /// Everything after the first '?', without it; empty if there is none.
    pub query: String,
    /// `Sec-WebSocket-Key`, only if present and well-formed (base64 of 16
    /// bytes, RFC 6455 §4.2.1). A handshake without it must get a 400.
    pub websocket_key: Option<String>,
    /// GET + `Upgrade: websocket` + `Connection: upgrade` + version 13. The key
    /// is not part of this: check `websocket_key` too.
    pub is_websocket_upgrade: bool,
    /// `Sec-WebSocket-Version: 13`; if an upgrade asks for another version,
    /// answer 426 with `Sec-WebSocket-Version: 13`.
    pub websocket_version_ok: bool,
    pub authorization: Option<String>,
    /// `Content-Type`, if present and UTF-8.
    pub content_type: Option<String>,
    pub content_length: usize,
    /// HTTP/1.1: true unless `Connection: close`; HTTP/1.0: only with
    /// `Connection: keep-alive`.
    pub keep_alive: bool,
    pub offers_permessage_deflate: bool,
}

/// Parses a request head from the start of `buf`. Returns `Ok(None)` while the
/// head is incomplete, otherwise the head's length in bytes (the body, if any,
/// follows) and the parsed head.
pub fn parse_head(buf: &[u8]) -> Result<Option<(usize, RequestHead)>, HttpError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
            return Err(HttpError::HeadTooLarge)
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(HttpError::TooManyHeaders),
        Err(_) => return Err(HttpError::BadRequest("malformed request head")),
    };
    if len > MAX_HEAD {
        return Err(HttpError::HeadTooLarge);
    }
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Err(HttpError::BadRequest("incomplete request line"));
    };
    let (path, query) = target.split_once('?').unwrap_or((target, ""));

    let mut head = RequestHead {
        method: method.to_owned(),
        path: path.to_owned(),
        query: query.to_owned(),
        ..RequestHead::default()
    };
    let mut upgrade_websocket = false;
    let mut connection_upgrade = false;
    let mut connection_close = false;
    let mut connection_keep_alive = false;
    let mut seen_key = false;
    let mut seen_content_length = false;

    for h in req.headers.iter() {
        let name = h.name;
        let value = trim_ows(h.value);
        if name.eq_ignore_ascii_case("connection") {
            for token in comma_list(value) {
                connection_upgrade |= token.eq_ignore_ascii_case(b"upgrade");
                connection_close |= token.eq_ignore_ascii_case(b"close");
                connection_keep_alive |= token.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case("upgrade") {
            upgrade_websocket |= comma_list(value).any(|t| t.eq_ignore_ascii_case(b"websocket"));
        } else if name.eq_ignore_ascii_case("sec-websocket-key") {
            if seen_key {
                return Err(HttpError::BadRequest("duplicate Sec-WebSocket-Key"));
            }
            seen_key = true;
            if is_valid_websocket_key(value) {
                head.websocket_key = std::str::from_utf8(value).ok().map(str::to_owned);
            }
        } else if name.eq_ignore_ascii_case("sec-websocket-version") {
            head.websocket_version_ok = value == b"13";
        } else if name.eq_ignore_ascii_case("sec-websocket-extensions") {
            head.offers_permessage_deflate |= comma_list(value).any(|ext| {
                let name = ext.split(|&b| b == b';').next().unwrap_or_default();
                trim_ows(name).eq_ignore_ascii_case(b"permessage-deflate")
            });
        } else if name.eq_ignore_ascii_case("authorization") {
            let v = std::str::from_utf8(value)
                .map_err(|_| HttpError::BadRequest("non-UTF-8 Authorization"))?;
            head.authorization = Some(v.to_owned());
        } else if name.eq_ignore_ascii_case("content-type") {
            head.content_type = std::str::from_utf8(value).ok().map(str::to_owned);
        } else if name.eq_ignore_ascii_case("content-length") {
            let n = parse_content_length(value)?;
            // Differing duplicates are a request-smuggling vector.
            if seen_content_length && n != head.content_length {
                return Err(HttpError::BadRequest("conflicting Content-Length"));
            }
            seen_content_length = true;
            head.content_length = n;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            // We never read chunked bodies; accepting one would desync keep-alive.
            return Err(HttpError::BadRequest("Transfer-Encoding is not supported"));
        }
    }

    head.keep_alive = match version {
        1 => !connection_close,
        _ => connection_keep_alive && !connection_close,
    };
    head.is_websocket_upgrade =
        method == "GET" && upgrade_websocket && connection_upgrade && head.websocket_version_ok;
    Ok(Some((len, head)))
}

fn trim_ows(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// Non-empty, trimmed elements of a comma-separated header value.
fn comma_list(v: &[u8]) -> impl Iterator<Item = &[u8]> {
    v.split(|&b| b == b',')
        .map(trim_ows)
        .filter(|t| !t.is_empty())
}

fn parse_content_length(v: &[u8]) -> Result<usize, HttpError> {
    if v.is_empty() {
        return Err(HttpError::BadRequest("empty Content-Length"));
    }
    v.iter().try_fold(0usize, |acc, &b| {
        if !b.is_ascii_digit() {
            return Err(HttpError::BadRequest("invalid Content-Length"));
        }
        acc.checked_mul(10)
            .and_then(|a| a.checked_add(usize::from(b - b'0')))
            .ok_or(HttpError::BadRequest("Content-Length overflow"))
    })
}

fn is_valid_websocket_key(v: &[u8]) -> bool {
    // 16 bytes encode to exactly 24 base64 characters ending in "==".
    v.len() == 24
        && base64::engine::general_purpose::STANDARD
            .decode(v)
            .is_ok_and(|d| d.len() == 16)
}

/// The value of the first `name` parameter in `query` (`a=1&b=2`). A bare
/// `name` without '=' yields `Some("")`. No percent-decoding.
pub fn query_param<'a>(query: &'a str, name: &str) -> Option<&'a str> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then_some(v)
    })
}

/// `Sec-WebSocket-Accept` for a client key (RFC 6455 §4.2.2).
pub fn websocket_accept(key: &str) -> String {
    let mut sha = Sha1::new();
    sha.update(key.as_bytes());
    sha.update(WS_GUID.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(sha.finalize())
}

/// Appends the 101 response completing a WebSocket handshake. Extensions are
/// never echoed, which declines permessage-deflate.
pub fn write_upgrade_response(key: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(
        b"HTTP/1.1 101 Switching Protocols\r\n\
          Upgrade: websocket\r\n\
          Connection: Upgrade\r\n\
          Sec-WebSocket-Accept: ",
    );
    out.extend_from_slice(websocket_accept(key).as_bytes());
    out.extend_from_slice(b"\r\n\r\n");
}

/// Reason phrase for `status`; empty (which HTTP allows) for unlisted codes.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        426 => "Upgrade Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "",
    }
}

/// Appends a complete response. `Content-Type` is omitted when `content_type`
/// is empty. Header names/values must not contain CR or LF (callers pass
/// constants or numbers, never client input).
pub fn write_response(
    status: u16,
    content_type: &str,
    body: &[u8],
    keep_alive: bool,
    extra_headers: &[(&str, &str)],
    out: &mut Vec<u8>,
) {
    debug_assert!(extra_headers
        .iter()
        .all(|(k, v)| !k.contains(['\r', '\n']) && !v.contains(['\r', '\n'])));
    // Writing to a Vec cannot fail.
    let _ = write!(out, "HTTP/1.1 {status} {}\r\n", reason_phrase(status));
    if !content_type.is_empty() {
        let _ = write!(out, "Content-Type: {content_type}\r\n");
    }
    let _ = write!(out, "Content-Length: {}\r\n", body.len());
    out.extend_from_slice(if keep_alive {
        b"Connection: keep-alive\r\n"
    } else {
        b"Connection: close\r\n"
    });
    for (k, v) in extra_headers {
        let _ = write!(out, "{k}: {v}\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

    fn upgrade_req(extra: &str) -> String {
        format!(
            "GET /?v=10&encoding=json HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\n\
             Connection: Upgrade\r\nSec-WebSocket-Key: {KEY}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
        )
    }

    fn parse(s: &str) -> Result<Option<(usize, RequestHead)>, HttpError> {
        parse_head(s.as_bytes())
    }

    #[test]
    fn rfc_accept_example() {
        // RFC 6455 §1.3. (A 20-byte SHA-1 is 28 base64 chars.)
        assert_eq!(websocket_accept(KEY), "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    }

    #[test]
    fn websocket_upgrade() {
        let req = upgrade_req("");
        let (n, h) = parse(&req).unwrap().unwrap();
        assert_eq!(n, req.len());
        assert_eq!(h.method, "GET");
        assert_eq!(h.path, "/");
        assert_eq!(h.query, "v=10&encoding=json");
        assert_eq!(h.websocket_key.as_deref(), Some(KEY));
        assert!(h.is_websocket_upgrade);
        assert!(h.websocket_version_ok);
        assert!(h.keep_alive);
        assert!(!h.offers_permessage_deflate);
        assert_eq!(h.authorization, None);
        assert_eq!(h.content_length, 0);
    }

    #[test]
    fn split_across_two_reads_and_trailing_bytes() {
        let req = upgrade_req("");
        let bytes = req.as_bytes();
        for cut in 0..bytes.len() {
            assert_eq!(parse_head(&bytes[..cut]), Ok(None), "cut {cut}");
        }
        // Bytes after the head (a pipelined frame) are not consumed.
        let mut more = bytes.to_vec();
        more.extend_from_slice(&[0x81, 0x80, 1, 2, 3, 4]);
        let (n, h) = parse_head(&more).unwrap().unwrap();
        assert_eq!(n, bytes.len());
        assert!(h.is_websocket_upgrade);
    }

    #[test]
    fn header_names_and_tokens_are_case_insensitive() {
        let req = format!(
            "GET /gw HTTP/1.1\r\nupgrade: WebSocket\r\nCONNECTION: keep-alive, Upgrade\r\n\
             sec-websocket-key: {KEY}\r\nSEC-WEBSOCKET-VERSION: 13\r\n\
             sec-websocket-extensions: Permessage-Deflate; client_max_window_bits\r\n\
             AUTHORIZATION: Bot abc\r\n\r\n"
        );
        let (_, h) = parse(&req).unwrap().unwrap();
        assert!(h.is_websocket_upgrade);
        assert!(h.keep_alive);
        assert!(h.offers_permessage_deflate);
        assert_eq!(h.path, "/gw");
        assert_eq!(h.query, "");
        assert_eq!(h.websocket_key.as_deref(), Some(KEY));
        assert_eq!(h.authorization.as_deref(), Some("Bot abc"));
    }

    #[test]
    fn connection_header_split_over_two_lines() {
        let req = format!(
            "GET / HTTP/1.1\r\nConnection: keep-alive\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {KEY}\r\n\
             Sec-WebSocket-Extensions: x-foo, permessage-deflate\r\n\r\n"
        );
        let (_, h) = parse(&req).unwrap().unwrap();
        assert!(h.is_websocket_upgrade);
        assert!(h.offers_permessage_deflate);
    }

    #[test]
    fn missing_or_bad_key() {
        let req = "GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                   Sec-WebSocket-Version: 13\r\n\r\n";
        let (_, h) = parse(req).unwrap().unwrap();
        assert!(h.is_websocket_upgrade);
        assert_eq!(h.websocket_key, None);

        for bad in [
            "short",
            "dGhlIHNhbXBsZSBub25jZQ",
            "dGhlIHNhbXBsZSBub25jZQ=!",
            "!!!!!!!!!!!!!!!!!!!!!!==",
        ] {
            let req = format!(
                "GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                 Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {bad}\r\n\r\n"
            );
            let (_, h) = parse(&req).unwrap().unwrap();
            assert_eq!(h.websocket_key, None, "{bad}");
        }

        let dup = upgrade_req(&format!("Sec-WebSocket-Key: {KEY}\r\n"));
        assert_eq!(
            parse(&dup),
            Err(HttpError::BadRequest("duplicate Sec-WebSocket-Key"))
        );
    }

    #[test]
    fn not_an_upgrade() {
        // Wrong version.
        let req = upgrade_req("").replace("Version: 13", "Version: 8");
        let (_, h) = parse(&req).unwrap().unwrap();
        assert!(!h.websocket_version_ok);
        assert!(!h.is_websocket_upgrade);
        // POST.
        let req = upgrade_req("").replace("GET", "POST");
        assert!(!parse(&req).unwrap().unwrap().1.is_websocket_upgrade);
        // No Connection: upgrade.
        let req = upgrade_req("").replace("Connection: Upgrade", "Connection: keep-alive");
        assert!(!parse(&req).unwrap().unwrap().1.is_websocket_upgrade);
        // No Upgrade header, or a different protocol.
        let req = upgrade_req("").replace("Upgrade: websocket", "Upgrade: h2c");
        assert!(!parse(&req).unwrap().unwrap().1.is_websocket_upgrade);
        // "Connection: upgraded" is not the upgrade token.
        let req = upgrade_req("").replace("Connection: Upgrade", "Connection: upgraded");
        assert!(!parse(&req).unwrap().unwrap().1.is_websocket_upgrade);
    }

    #[test]
    fn keep_alive_rules() {
        let ka = |s: &str| parse(s).unwrap().unwrap().1.keep_alive;
        assert!(ka("GET / HTTP/1.1\r\n\r\n"));
        assert!(!ka("GET / HTTP/1.1\r\nConnection: close\r\n\r\n"));
        assert!(!ka("GET / HTTP/1.1\r\nConnection: Upgrade, CLOSE\r\n\r\n"));
        assert!(!ka("GET / HTTP/1.0\r\n\r\n"));
        assert!(ka("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"));
    }

    #[test]
    fn content_length() {
        let cl = |v: &str| parse(&format!("POST /x HTTP/1.1\r\nContent-Length: {v}\r\n\r\n"));
        assert_eq!(cl("42").unwrap().unwrap().1.content_length, 42);
        assert_eq!(cl(" 7 ").unwrap().unwrap().1.content_length, 7);
        assert!(matches!(cl("-1"), Err(HttpError::BadRequest(_))));
        assert!(matches!(cl("1e3"), Err(HttpError::BadRequest(_))));
        assert!(matches!(
            cl("99999999999999999999999999"),
            Err(HttpError::BadRequest(_))
        ));
        let two = "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n";
        assert_eq!(
            parse(two),
            Err(HttpError::BadRequest("conflicting Content-Length"))
        );
        let same = "POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n";
        assert_eq!(parse(same).unwrap().unwrap().1.content_length, 2);
        let te = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert!(matches!(parse(te), Err(HttpError::BadRequest(_))));
    }

    #[test]
    fn errors_and_limits() {
        assert_eq!(parse("GARBAGE\r\n\r\n").map_err(|e| e.status()), Err(400));
        assert_eq!(
            parse("GET / HTTP/2.0\r\n\r\n").map_err(|e| e.status()),
            Err(400)
        );

        let mut many = String::from("GET / HTTP/1.1\r\n");
        for i in 0..MAX_HEADERS {
            many.push_str(&format!("X-{i}: y\r\n"));
        }
        assert!(parse(&format!("{many}\r\n")).is_ok());
        many.push_str("X-last: y\r\n\r\n");
        assert_eq!(parse(&many), Err(HttpError::TooManyHeaders));
        assert_eq!(HttpError::TooManyHeaders.status(), 431);

        // Incomplete and already at the limit.
        let big = format!("GET / HTTP/1.1\r\nX: {}", "a".repeat(MAX_HEAD));
        assert_eq!(parse(&big), Err(HttpError::HeadTooLarge));
        assert_eq!(parse(&big[..MAX_HEAD - 1]), Ok(None));
        // Complete but longer than the limit.
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(MAX_HEAD));
        assert_eq!(parse(&big), Err(HttpError::HeadTooLarge));
        assert_eq!(HttpError::HeadTooLarge.status(), 431);
    }

    #[test]
    fn non_utf8_header_values() {
        let mut req = b"GET / HTTP/1.1\r\nX-Junk: \xff\xfe\r\n\r\n".to_vec();
        assert!(parse_head(&req).unwrap().is_some());
        req = b"GET / HTTP/1.1\r\nAuthorization: \xff\r\n\r\n".to_vec();
        assert_eq!(
            parse_head(&req),
            Err(HttpError::BadRequest("non-UTF-8 Authorization"))
        );
    }

    #[test]
    fn query_params() {
        let q = "v=10&encoding=json&compress=&flag&v=9";
        assert_eq!(query_param(q, "v"), Some("10"));
        assert_eq!(query_param(q, "encoding"), Some("json"));
        assert_eq!(query_param(q, "compress"), Some(""));
        assert_eq!(query_param(q, "flag"), Some(""));
        assert_eq!(query_param(q, "missing"), None);
        assert_eq!(query_param(q, "encod"), None);
        assert_eq!(query_param("", "v"), None);
        assert_eq!(query_param("", ""), Some(""));
        assert_eq!(query_param("a=b=c", "a"), Some("b=c"));
        assert_eq!(query_param("é=ü&&=x", "é"), Some("ü"));
    }

    #[test]
    fn upgrade_response() {
        let mut out = Vec::new();
        write_upgrade_response(KEY, &mut out);
        let s = String::from_utf8(out).unwrap();
        assert_eq!(
            s,
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"
        );
        assert!(!s.to_ascii_lowercase().contains("extensions"));
    }

    #[test]
    fn responses() {
        let mut out = Vec::new();
        write_response(200, "application/json", b"{\"a\":1}", true, &[], &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\
             Connection: keep-alive\r\n\r\n{\"a\":1}"
        );

        let mut out = Vec::new();
        write_response(
            426,
            "",
            b"",
            false,
            &[("Sec-WebSocket-Version", "13"), ("Retry-After", "5")],
            &mut out,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "HTTP/1.1 426 Upgrade Required\r\nContent-Length: 0\r\nConnection: close\r\n\
             Sec-WebSocket-Version: 13\r\nRetry-After: 5\r\n\r\n"
        );

        for (code, phrase) in [
            (400, "Bad Request"),
            (401, "Unauthorized"),
            (404, "Not Found"),
            (405, "Method Not Allowed"),
            (413, "Content Too Large"),
            (429, "Too Many Requests"),
            (431, "Request Header Fields Too Large"),
            (500, "Internal Server Error"),
            (503, "Service Unavailable"),
        ] {
            let mut out = Vec::new();
            write_response(code, "text/plain", b"x", false, &[], &mut out);
            let s = String::from_utf8(out).unwrap();
            assert!(
                s.starts_with(&format!("HTTP/1.1 {code} {phrase}\r\n")),
                "{s}"
            );
            // The response itself parses as HTTP.
            let mut hs = [httparse::EMPTY_HEADER; 8];
            let mut r = httparse::Response::new(&mut hs);
            assert!(r.parse(s.as_bytes()).unwrap().is_complete());
            assert_eq!(r.code, Some(code));
        }
        assert_eq!(reason_phrase(299), "");
    }
}
