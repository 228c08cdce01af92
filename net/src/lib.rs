//! Networking that knows nothing of Discord: io_uring sockets, HTTP/1.1
//! upgrade, WebSocket framing, TLS, PEM files, and the polled HTTP/1.1
//! front of the small listeners (`front`).
pub mod front;
#[doc(hidden)]
pub mod fuzzing;
pub mod http;
pub mod pem;
pub mod tls;
pub mod uring;
pub mod ws;
