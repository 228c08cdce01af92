//! The incremental WebSocket [`Decoder`]: one frame per call from the start
//! of the caller's buffer, masked client frames (server role) or unmasked
//! server frames (client role), with fragmented messages reassembled.
//!
//! Bounds: every data frame and every reassembled message is at most
//! `max_message` bytes, refused from the header alone; control payloads
//! are at most 125 bytes. A reassembly buffer over
//! [`KEEP_REASSEMBLY_CAPACITY`] is freed once its message is handed out.
//! No panics on any input (fuzzed through `crate::fuzzing`).

use super::close::parse_close;
use super::frame::{apply_mask, OpCode, MAX_CONTROL_PAYLOAD};
use super::message::{Message, WsError};

/// Reassembly buffers with more capacity than this are freed once their message
/// has been handed out, so idle connections do not pin large allocations.
pub(super) const KEEP_REASSEMBLY_CAPACITY: usize = 4096;

/// Incremental decoder: client-to-server frames (masked, [`Decoder::new`])
/// on the node, server-to-client frames (unmasked, [`Decoder::client`]) in
/// clients. A frame masked the wrong way for the role is a protocol error.
///
/// Usage: keep unconsumed bytes in a buffer starting at the next frame and call
/// [`Decoder::decode`] on it:
/// - `Ok(None)`: no complete frame yet; append more bytes and call again with
///   the same start. Neither the buffer nor the decoder was modified.
/// - `Ok(Some((n, msg)))`: one frame of `n` bytes was consumed (its payload was
///   unmasked in place); `msg` is `Some` when a whole message is available,
///   `None` after a non-final data fragment.
/// - `Err(e)`: fatal; send a Close with `e.close_code()` and drop the
///   connection. The decoder must not be used again.
///
/// A caller that loops until `Ok(None)` also releases the reassembly buffer: it
/// is reset at the start of the call after the one that returned it.
#[derive(Debug)]
pub struct Decoder {
    max_message: usize,
    /// Opcode (Text or Binary) of the fragmented message being reassembled.
    frag_op: Option<OpCode>,
    frag: Vec<u8>,
    /// Length of the prefix of `frag` already checked to be valid UTF-8, so a
    /// bad fragmented text message fails as soon as its bad fragment arrives.
    utf8_checked: usize,
    /// `frag` holds a message handed out by the previous call.
    frag_returned: bool,
    /// Client role: frames come from a server and are unmasked.
    client: bool,
}

struct Header {
    fin: bool,
    op: OpCode,
    /// None for an unmasked (server-to-client) frame.
    mask: Option<[u8; 4]>,
    header_len: usize,
    payload_len: usize,
}

impl Decoder {
    /// Server role: decodes masked client frames. `max_message` bounds each
    /// data frame and each reassembled message.
    pub fn new(max_message: usize) -> Self {
        Decoder {
            max_message,
            frag_op: None,
            frag: Vec::new(),
            utf8_checked: 0,
            frag_returned: false,
            client: false,
        }
    }

    /// Client role: decodes unmasked server frames (a masked one is a
    /// protocol error, RFC 6455 §5.1). Same bounds as [`Decoder::new`].
    pub fn client(max_message: usize) -> Self {
        Decoder {
            client: true,
            ..Decoder::new(max_message)
        }
    }

    /// Whether this decoder reads server frames ([`Decoder::client`]).
    pub fn is_client(&self) -> bool {
        self.client
    }

    pub fn max_message(&self) -> usize {
        self.max_message
    }

    /// True between the first and the final fragment of a message.
    pub fn is_mid_message(&self) -> bool {
        self.frag_op.is_some()
    }

    /// Bytes currently allocated for reassembly (for tests and metrics).
    pub fn reassembly_capacity(&self) -> usize {
        self.frag.capacity()
    }

    /// Parses at most one frame from the start of `buf`; see the type docs.
    /// A masked frame's payload is unmasked in place.
    pub fn decode<'a>(
        &'a mut self,
        buf: &'a mut [u8],
    ) -> Result<Option<(usize, Option<Message<'a>>)>, WsError> {
        self.release_returned();
        let Some(h) = self.parse_header(buf)? else {
            return Ok(None);
        };
        let Some(total) = h.header_len.checked_add(h.payload_len) else {
            return Err(WsError::MessageTooBig);
        };
        let Some(payload) = buf.get_mut(h.header_len..total) else {
            return Ok(None);
        };
        if let Some(mask) = h.mask {
            apply_mask(payload, mask);
        }
        self.message(&h, payload, total)
    }

    /// [`Decoder::decode`] for a client, on a buffer it may not modify:
    /// server frames are unmasked, so nothing needs to be written. In the
    /// server role every (well-formed) frame is masked and this fails.
    pub fn decode_unmasked<'a>(
        &'a mut self,
        buf: &'a [u8],
    ) -> Result<Option<(usize, Option<Message<'a>>)>, WsError> {
        self.release_returned();
        let Some(h) = self.parse_header(buf)? else {
            return Ok(None);
        };
        if h.mask.is_some() {
            return Err(WsError::Protocol("masked frame given to decode_unmasked"));
        }
        let Some(total) = h.header_len.checked_add(h.payload_len) else {
            return Err(WsError::MessageTooBig);
        };
        let Some(payload) = buf.get(h.header_len..total) else {
            return Ok(None);
        };
        self.message(&h, payload, total)
    }

    /// Frees the message handed out by the previous call.
    fn release_returned(&mut self) {
        if self.frag_returned {
            self.frag_returned = false;
            self.frag.clear();
            self.utf8_checked = 0;
            if self.frag.capacity() > KEEP_REASSEMBLY_CAPACITY {
                self.frag = Vec::new();
            }
        }
    }

    /// The message (if complete) of one whole frame with its plain payload.
    fn message<'a>(
        &'a mut self,
        h: &Header,
        payload: &'a [u8],
        total: usize,
    ) -> Result<Option<(usize, Option<Message<'a>>)>, WsError> {
        let msg = match h.op {
            OpCode::Ping => Some(Message::Ping(payload)),
            OpCode::Pong => Some(Message::Pong(payload)),
            OpCode::Close => Some(parse_close(payload)?),
            OpCode::Text | OpCode::Binary if h.fin => Some(if h.op == OpCode::Text {
                Message::Text(std::str::from_utf8(payload).map_err(|_| WsError::InvalidUtf8)?)
            } else {
                Message::Binary(payload)
            }),
            OpCode::Text | OpCode::Binary => {
                self.frag_op = Some(h.op);
                self.frag.extend_from_slice(payload);
                self.check_partial_utf8()?;
                None
            }
            OpCode::Continuation => {
                self.frag.extend_from_slice(payload);
                if !h.fin {
                    self.check_partial_utf8()?;
                    None
                } else {
                    self.frag_returned = true;
                    match self.frag_op.take() {
                        Some(OpCode::Text) => Some(Message::Text(
                            std::str::from_utf8(&self.frag).map_err(|_| WsError::InvalidUtf8)?,
                        )),
                        Some(_) => Some(Message::Binary(&self.frag)),
                        // parse_header rejects a continuation with no open message.
                        None => return Err(WsError::Protocol("unexpected continuation frame")),
                    }
                }
            }
        };
        Ok(Some((total, msg)))
    }

    /// Validates everything the header can tell before its payload arrives.
    /// `Ok(None)` means the header itself is still incomplete.
    fn parse_header(&self, buf: &[u8]) -> Result<Option<Header>, WsError> {
        let (b0, b1) = match buf {
            [b0, b1, ..] => (*b0, *b1),
            _ => return Ok(None),
        };
        if b0 & 0x70 != 0 {
            return Err(WsError::Protocol("reserved bits set"));
        }
        let op = OpCode::try_from(b0 & 0x0F)?;
        let fin = b0 & 0x80 != 0;
        let masked = b1 & 0x80 != 0;
        if !masked && !self.client {
            return Err(WsError::Protocol("client frame is not masked"));
        }
        if masked && self.client {
            return Err(WsError::Protocol("server frame is masked"));
        }
        let len7 = b1 & 0x7F;
        if op.is_control() {
            if !fin {
                return Err(WsError::Protocol("fragmented control frame"));
            }
            if usize::from(len7) > MAX_CONTROL_PAYLOAD {
                return Err(WsError::Protocol("control frame payload too long"));
            }
        } else {
            match (op, self.frag_op) {
                (OpCode::Continuation, None) => {
                    return Err(WsError::Protocol("continuation frame without a message"));
                }
                (OpCode::Text | OpCode::Binary, Some(_)) => {
                    return Err(WsError::Protocol("data frame inside a fragmented message"));
                }
                _ => {}
            }
        }

        let (len, ext): (u64, usize) = match len7 {
            126 => match buf.get(2..).and_then(|s| s.first_chunk::<2>()) {
                Some(b) => (u64::from(u16::from_be_bytes(*b)), 2),
                None => return Ok(None),
            },
            127 => match buf.get(2..).and_then(|s| s.first_chunk::<8>()) {
                Some(b) => {
                    let len = u64::from_be_bytes(*b);
                    if len >> 63 != 0 {
                        return Err(WsError::Protocol("64-bit length has its top bit set"));
                    }
                    (len, 8)
                }
                None => return Ok(None),
            },
            n => (u64::from(n), 0),
        };

        if !op.is_control() {
            let before = if op == OpCode::Continuation {
                self.frag.len() as u64
            } else {
                0
            };
            let max = u64::try_from(self.max_message).unwrap_or(u64::MAX);
            if before.saturating_add(len) > max {
                return Err(WsError::MessageTooBig);
            }
        }
        // Data lengths are now <= max_message and control lengths <= 125.
        let payload_len = usize::try_from(len).map_err(|_| WsError::MessageTooBig)?;

        let mask_at = 2 + ext;
        if !masked {
            return Ok(Some(Header {
                fin,
                op,
                mask: None,
                header_len: mask_at,
                payload_len,
            }));
        }
        let Some(mask) = buf.get(mask_at..).and_then(|s| s.first_chunk::<4>()) else {
            return Ok(None);
        };
        Ok(Some(Header {
            fin,
            op,
            mask: Some(*mask),
            header_len: mask_at + 4,
            payload_len,
        }))
    }

    /// Fails fast on invalid UTF-8 in a partly received text message; an
    /// incomplete trailing sequence is fine, it may finish in the next fragment.
    fn check_partial_utf8(&mut self) -> Result<(), WsError> {
        if self.frag_op != Some(OpCode::Text) {
            return Ok(());
        }
        let tail = self.frag.get(self.utf8_checked..).unwrap_or_default();
        match std::str::from_utf8(tail) {
            Ok(_) => self.utf8_checked = self.frag.len(),
            Err(e) if e.error_len().is_some() => return Err(WsError::InvalidUtf8),
            Err(e) => self.utf8_checked += e.valid_up_to(),
        }
        Ok(())
    }
}
