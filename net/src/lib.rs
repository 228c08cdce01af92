//! Networking that knows nothing of Discord: io_uring sockets, HTTP/1.1
//! upgrade, WebSocket framing, TLS.
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod tls;
pub mod uring;
pub mod ws;
