//! RFC 6455 frame headers and whole data frames: [`OpCode`], the unmasked
//! server header ([`encode_header`], at most [`MAX_SERVER_HEADER`] bytes),
//! complete server frames ([`encode_frame`]), masked client frames
//! ([`encode_client_frame`]) and the XOR mask both directions use.
//!
//! Pure and allocation-free on the server's encode hot path: the header is
//! written into a caller's 10-byte array. Close frames are in `close.rs`.

use super::message::WsError;

/// Longest unmasked server frame header: 2 bytes + 64-bit extended length.
pub const MAX_SERVER_HEADER: usize = 10;
/// Control frames (Close/Ping/Pong) carry at most this many payload bytes.
pub const MAX_CONTROL_PAYLOAD: usize = 125;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum OpCode {
    Continuation = 0x0,
    Text = 0x1,
    Binary = 0x2,
    Close = 0x8,
    Ping = 0x9,
    Pong = 0xA,
}

impl OpCode {
    /// The opcode for the low nibble `b`, or `None` for reserved values.
    pub const fn from_u8(b: u8) -> Option<Self> {
        Some(match b {
            0x0 => OpCode::Continuation,
            0x1 => OpCode::Text,
            0x2 => OpCode::Binary,
            0x8 => OpCode::Close,
            0x9 => OpCode::Ping,
            0xA => OpCode::Pong,
            _ => return None,
        })
    }

    pub const fn as_u8(self) -> u8 {
        self as u8
    }

    pub const fn is_control(self) -> bool {
        (self as u8) & 0x8 != 0
    }
}

impl From<OpCode> for u8 {
    fn from(op: OpCode) -> u8 {
        op.as_u8()
    }
}

impl TryFrom<u8> for OpCode {
    type Error = WsError;
    fn try_from(b: u8) -> Result<Self, WsError> {
        OpCode::from_u8(b).ok_or(WsError::Protocol("reserved opcode"))
    }
}

/// Writes an unmasked server frame header for a payload of `payload_len` bytes
/// into `out` and returns its length (2, 4 or 10).
#[inline]
pub fn encode_header(
    op: OpCode,
    fin: bool,
    payload_len: usize,
    out: &mut [u8; MAX_SERVER_HEADER],
) -> usize {
    out[0] = if fin { 0x80 } else { 0 } | op.as_u8();
    if payload_len < 126 {
        out[1] = payload_len as u8;
        2
    } else if let Ok(len) = u16::try_from(payload_len) {
        out[1] = 126;
        out[2..4].copy_from_slice(&len.to_be_bytes());
        4
    } else {
        out[1] = 127;
        // usize is at most 64 bits on every supported target.
        out[2..10].copy_from_slice(&(payload_len as u64).to_be_bytes());
        10
    }
}

/// Appends a complete, final, unmasked frame.
pub fn encode_frame(op: OpCode, payload: &[u8], out: &mut Vec<u8>) {
    let mut hdr = [0u8; MAX_SERVER_HEADER];
    let n = encode_header(op, true, payload.len(), &mut hdr);
    out.reserve(n + payload.len());
    out.extend_from_slice(&hdr[..n]);
    out.extend_from_slice(payload);
}

/// Appends a masked frame as a client would send it. Not used by the server;
/// exists for tests, benchmarks and load generators. A control frame's
/// payload must be at most [`MAX_CONTROL_PAYLOAD`] bytes (not checked).
pub fn encode_client_frame(
    op: OpCode,
    fin: bool,
    mask: [u8; 4],
    payload: &[u8],
    out: &mut Vec<u8>,
) {
    let mut hdr = [0u8; MAX_SERVER_HEADER];
    let n = encode_header(op, fin, payload.len(), &mut hdr);
    hdr[1] |= 0x80;
    out.reserve(n + 4 + payload.len());
    out.extend_from_slice(&hdr[..n]);
    out.extend_from_slice(&mask);
    let start = out.len();
    out.extend_from_slice(payload);
    if let Some(p) = out.get_mut(start..) {
        apply_mask(p, mask);
    }
}

/// XORs `data` with the repeating 4-byte `mask`, starting at mask offset 0.
#[inline]
pub(super) fn apply_mask(data: &mut [u8], mask: [u8; 4]) {
    let wide = u64::from_ne_bytes([
        mask[0], mask[1], mask[2], mask[3], mask[0], mask[1], mask[2], mask[3],
    ]);
    let (chunks, rest) = data.as_chunks_mut::<8>();
    for c in chunks {
        *c = (u64::from_ne_bytes(*c) ^ wide).to_ne_bytes();
    }
    // Chunks cover a multiple of 8 bytes, so the remainder starts at mask offset 0.
    for (b, m) in rest.iter_mut().zip(mask.iter().cycle()) {
        *b ^= m;
    }
}
