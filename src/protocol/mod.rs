//! The Discord Gateway v10 protocol as a state machine, without sockets.
//!
//! `session` consumes client payloads and writes server frames into a byte
//! buffer; `payload` renders the JSON the server sends; `close` names every
//! close code. The worker (src/worker/) moves bytes; nothing here does I/O.

pub mod bot_user;
pub mod close;
pub mod compress;
pub mod guild;
pub mod identify;
pub mod intents;
pub mod payload;
pub mod rest;
pub mod session;
pub mod stored;
pub mod upgrade;
pub mod user;

pub use close::{Close, CloseCode};
