//! RFC 6455 WebSocket framing. Pure: no I/O, no allocation on the encode hot
//! path, and no panics on any input (the decoder is fuzzed).
//!
//! Server side (the node): [`Decoder::new`] reads masked client frames,
//! [`encode_frame`] / [`encode_close`] write unmasked ones. Client side (load
//! generators, tests): [`Decoder::client`] reads unmasked server frames
//! ([`Decoder::decode_unmasked`] without copying them), and
//! [`encode_client_frame`] / [`encode_client_close`] write masked ones.
//!
//! Extensions are never negotiated, so every RSV bit must be zero.
//!
//! Files, one concept each (this one only declares and re-exports, so
//! `net::ws::X` paths stay as they were):
//! - `message.rs`: what decoding yields ([`Message`], [`OwnedMessage`])
//!   and why it fails ([`WsError`]); a leaf.
//! - `frame.rs`: the frame header ([`OpCode`], [`encode_header`]),
//!   whole data frames both ways and the client mask.
//! - `close.rs`: Close frames: codes a peer may send, payload parsing,
//!   reasons cut to the 125-byte control limit.
//! - `decode.rs`: the incremental [`Decoder`] and its reassembly bounds.
//! - `tests.rs`: unit tests of the whole framing (encode, then decode).
//!
//! The HTTP/1.1 upgrade handshake (`Sec-WebSocket-Accept`) is in
//! [`crate::http`], not here.

mod close;
mod decode;
mod frame;
mod message;
#[cfg(test)]
mod tests;

pub use close::{encode_client_close, encode_close, is_valid_close_code, MAX_CLOSE_REASON};
pub use decode::Decoder;
pub use frame::{
    encode_client_frame, encode_frame, encode_header, OpCode, MAX_CONTROL_PAYLOAD,
    MAX_SERVER_HEADER,
};
pub use message::{Message, OwnedMessage, WsError};
