//! Close frames (RFC 6455 §5.5.1, §7.4): the codes a peer may send, parsing
//! a received Close payload, and encoding one either way with its reason
//! cut on a char boundary so the payload stays within the 125-byte control
//! frame limit ([`MAX_CLOSE_REASON`] reason bytes after the 2-byte code).

use super::frame::{
    encode_client_frame, encode_header, OpCode, MAX_CONTROL_PAYLOAD, MAX_SERVER_HEADER,
};
use super::message::{Message, WsError};

/// A Close payload is a 2-byte code plus at most this many reason bytes.
pub const MAX_CLOSE_REASON: usize = MAX_CONTROL_PAYLOAD - 2;

/// Appends a complete Close frame. `reason` is truncated on a char boundary so
/// the payload fits the 125-byte control frame limit.
pub fn encode_close(code: u16, reason: &str, out: &mut Vec<u8>) {
    let reason = truncate_on_char_boundary(reason, MAX_CLOSE_REASON);
    let mut hdr = [0u8; MAX_SERVER_HEADER];
    let n = encode_header(OpCode::Close, true, 2 + reason.len(), &mut hdr);
    out.reserve(n + 2 + reason.len());
    out.extend_from_slice(&hdr[..n]);
    out.extend_from_slice(&code.to_be_bytes());
    out.extend_from_slice(reason.as_bytes());
}

/// Appends a masked Close frame as a client would send it; `reason` is
/// truncated on a char boundary like [`encode_close`]'s.
pub fn encode_client_close(code: u16, reason: &str, mask: [u8; 4], out: &mut Vec<u8>) {
    let reason = truncate_on_char_boundary(reason, MAX_CLOSE_REASON);
    let mut payload = [0u8; MAX_CONTROL_PAYLOAD];
    payload[..2].copy_from_slice(&code.to_be_bytes());
    payload[2..2 + reason.len()].copy_from_slice(reason.as_bytes());
    encode_client_frame(OpCode::Close, true, mask, &payload[..2 + reason.len()], out);
}

fn truncate_on_char_boundary(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1; // terminates: index 0 is always a boundary
    }
    s.get(..end).unwrap_or("")
}

/// Close codes a peer may legitimately send (RFC 6455 §7.4).
pub fn is_valid_close_code(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1011 | 3000..=4999)
}

pub(super) fn parse_close(payload: &[u8]) -> Result<Message<'_>, WsError> {
    match payload {
        [] => Ok(Message::Close(None, "")),
        [_] => Err(WsError::Protocol("close payload of one byte")),
        [hi, lo, reason @ ..] => {
            let code = u16::from_be_bytes([*hi, *lo]);
            if !is_valid_close_code(code) {
                return Err(WsError::Protocol("invalid close code"));
            }
            let reason = std::str::from_utf8(reason).map_err(|_| WsError::InvalidUtf8)?;
            Ok(Message::Close(Some(code), reason))
        }
    }
}
