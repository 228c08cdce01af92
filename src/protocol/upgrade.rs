//! What the WebSocket upgrade and its frames earn before the session
//! state machine sees a payload: the query checks (`v`, `encoding`) and the
//! close a framing error gets.

use net::http;
use net::ws;

use crate::protocol::{Close, CloseCode};

/// The close an upgrade's query earns right after Hello (`v` other than
/// 10 or 9, `encoding` other than json), or None to go on.
pub fn upgrade_refusal(query: &str) -> Option<Close> {
    let version = http::query_param(query, "v");
    let encoding = http::query_param(query, "encoding");
    if !matches!(version, None | Some("10") | Some("9")) {
        Some(Close::new(
            CloseCode::InvalidApiVersion,
            "invalid API version: use v=10 (v=9 is accepted)",
        ))
    } else if encoding == Some("etf") {
        Some(Close::new(
            CloseCode::DecodeError,
            "encoding not supported: etf is not served; this node serves encoding=json only",
        ))
    } else if matches!(encoding, Some(e) if e != "json") {
        Some(Close::new(
            CloseCode::DecodeError,
            "encoding not supported: this node serves encoding=json only",
        ))
    } else {
        None
    }
}

/// The close a WebSocket decoding error earns.
pub fn ws_error_close(e: ws::WsError) -> Close {
    match e {
        ws::WsError::MessageTooBig => Close::new(
            CloseCode::DecodeError,
            "decode error: message larger than 4096 bytes",
        ),
        ws::WsError::InvalidUtf8 => Close::new(
            CloseCode::DecodeError,
            "decode error: text is not valid UTF-8",
        ),
        ws::WsError::Protocol(_) => Close::websocket(1002, "websocket protocol error"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_encoding_refusal_names_what_is_served() {
        for q in [
            "v=10&encoding=etf",
            "v=10&encoding=msgpack",
            "encoding=",
            "encoding=JSON",
        ] {
            let close = upgrade_refusal(q).unwrap_or_else(|| panic!("{q} accepted"));
            assert_eq!(close.code, 4002, "{q}");
            assert!(
                close.reason.contains("encoding=json"),
                "{q}: {}",
                close.reason
            );
        }
        assert!(upgrade_refusal("v=10&encoding=etf")
            .unwrap()
            .reason
            .contains("etf"));
        assert!(!upgrade_refusal("encoding=msgpack")
            .unwrap()
            .reason
            .contains("etf"));
        for q in [
            "",
            "v=10",
            "v=10&encoding=json",
            "v=9&encoding=json&compress=zlib-stream",
        ] {
            assert!(upgrade_refusal(q).is_none(), "{q}");
        }
    }
}
