//! Networking that knows nothing of Discord: io_uring sockets, HTTP/1.1
//! upgrade, WebSocket framing, TLS.
pub mod http;
pub mod tls;
pub mod uring;
pub mod ws;
