//! Networking that knows nothing of Discord: io_uring sockets, HTTP/1.1
//! upgrade, WebSocket framing, TLS, PEM files.
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod pem;
pub mod tls;
pub mod uring;
pub mod ws;
