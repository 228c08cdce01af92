//! What the WebSocket decoder yields and why it fails: [`Message`] (borrowed,
//! zero-copy), [`OwnedMessage`] (owned, for keeping or comparing) and
//! [`WsError`], which names the close code to answer a bad peer with.
//! A leaf: uses no other file of the crate.

use thiserror::Error;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum WsError {
    #[error("websocket protocol error: {0}")]
    Protocol(&'static str),
    #[error("websocket message too big")]
    MessageTooBig,
    #[error("invalid UTF-8 in websocket text message or close reason")]
    InvalidUtf8,
}

impl WsError {
    /// The close code to send to the peer before dropping the connection.
    pub fn close_code(&self) -> u16 {
        match self {
            WsError::Protocol(_) => 1002,
            WsError::MessageTooBig => 1009,
            WsError::InvalidUtf8 => 1007,
        }
    }
}

/// A complete message. Unfragmented data and all control frames borrow the
/// caller's buffer; reassembled fragmented messages borrow the decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message<'a> {
    Text(&'a str),
    Binary(&'a [u8]),
    Ping(&'a [u8]),
    Pong(&'a [u8]),
    /// Status code (None for an empty Close payload) and reason.
    Close(Option<u16>, &'a str),
}

/// A [`Message`] that owns its bytes: to keep a message past the decoder's
/// next call, or compare decodings (tests, fuzz oracles).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnedMessage {
    Text(String),
    Binary(Vec<u8>),
    Ping(Vec<u8>),
    Pong(Vec<u8>),
    Close(Option<u16>, String),
}

impl From<Message<'_>> for OwnedMessage {
    fn from(m: Message<'_>) -> OwnedMessage {
        match m {
            Message::Text(s) => OwnedMessage::Text(s.into()),
            Message::Binary(b) => OwnedMessage::Binary(b.into()),
            Message::Ping(b) => OwnedMessage::Ping(b.into()),
            Message::Pong(b) => OwnedMessage::Pong(b.into()),
            Message::Close(c, r) => OwnedMessage::Close(c, r.into()),
        }
    }
}
