//! Frames between the node and the egress: a 4-byte big-endian length, then
//! that many bytes of JSON. Requests carry an id; answers name it, in any
//! order (several calls are in flight on one connection). Every frame is
//! at most [`MAX_FRAME`]; a larger length ends the connection.

use std::io::{self, Read, Write};

use base64::Engine;
use serde::{Deserialize, Serialize};

/// Largest frame either way (a 1 MiB answer body in base64, with headers).
pub const MAX_FRAME: usize = 2 << 20;
/// Largest request body the egress sends.
pub const MAX_REQUEST_BODY: usize = 256 << 10;
/// Largest `max_response_bytes` a request may ask for.
pub const MAX_RESPONSE_CAP: usize = 1 << 20;
/// Headers a request may carry, and an answer may relay.
pub const MAX_HEADERS: usize = 32;
/// Longest `total_ms` a request may ask for.
pub const MAX_TOTAL_MS: u64 = 10_000;

/// The one line `gatewayd egress` writes to its stdout once it listens,
/// followed by the address (a TCP port 0 resolved to the one the kernel
/// chose): how the node that started it learns where to connect
/// (`child::EgressChild::spawn`). Nothing else is written to stdout.
pub const LISTENING: &str = "gatewayd egress listening on ";

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Request {
    pub id: u64,
    pub method: String,
    pub url: String,
    /// Extra request headers (the egress writes Host, Content-Length,
    /// Connection and User-Agent itself).
    pub headers: Vec<(String, String)>,
    /// Base64 (standard, padded).
    pub body: String,
    pub connect_ms: u64,
    pub total_ms: u64,
    pub max_response_bytes: usize,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Answer {
    pub id: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ok: Option<Http>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Refusal>,
}

/// An HTTP answer, whatever its status (a 3xx is returned, not followed).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Http {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// Base64.
    pub body: String,
    /// Milliseconds from the egress taking the request to the last byte.
    pub elapsed_ms: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Refusal {
    /// One of [`super::Reason`]'s names.
    pub reason: String,
    pub detail: String,
}

pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

pub fn unb64(s: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD.decode(s).ok()
}

/// Writes one frame.
pub fn write_frame(w: &mut impl Write, value: &impl Serialize) -> io::Result<()> {
    let json = serde_json::to_vec(value).map_err(io::Error::other)?;
    if json.len() > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "frame too large",
        ));
    }
    let mut buf = Vec::with_capacity(4 + json.len());
    buf.extend_from_slice(&(json.len() as u32).to_be_bytes());
    buf.extend_from_slice(&json);
    w.write_all(&buf)?;
    w.flush()
}

/// Reads one frame; Ok(None) at a clean end of stream.
pub fn read_frame<T: for<'de> Deserialize<'de>>(r: &mut impl Read) -> io::Result<Option<T>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("frame of {len} bytes (at most {MAX_FRAME})"),
        ));
    }
    let mut buf = vec![0u8; len];
    r.read_exact(&mut buf)?;
    serde_json::from_slice(&buf)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_oversized_lengths_are_refused() {
        let req = Request {
            id: 7,
            method: "POST".into(),
            url: "http://example.com/".into(),
            headers: vec![("X-A".into(), "b".into())],
            body: b64(b"{}"),
            connect_ms: 1000,
            total_ms: 2500,
            max_response_bytes: 65536,
        };
        let mut buf = Vec::new();
        write_frame(&mut buf, &req).unwrap();
        let back: Request = read_frame(&mut &buf[..]).unwrap().unwrap();
        assert_eq!(back, req);
        let none: Option<Request> = read_frame(&mut &[][..]).unwrap();
        assert!(none.is_none());
        let huge = ((MAX_FRAME + 1) as u32).to_be_bytes();
        assert!(read_frame::<Request>(&mut &huge[..]).is_err());
        let junk = [0, 0, 0, 2, b'{', b'x'];
        assert!(read_frame::<Request>(&mut &junk[..]).is_err());
    }
}
