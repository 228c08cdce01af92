//! The Discord Gateway v10 wire facts, once (../shared/PROTOCOL.md): what an
//! opcode, a close code, an intent bit or a permission bit means. gatewayd,
//! the registry, loadgen and the tests all take them from here, so a fact
//! is written in one place.
//!
//! Facts only: no I/O, no parsing, no dependencies. The state machine that
//! acts on them is gatewayd's (`src/gateway/session.rs`).

pub mod close;
pub mod ids;
pub mod intents;
pub mod op;
pub mod permissions;

pub use close::{Close, CloseCode};
pub use ids::{AppId, ChannelId, ServerId, SessionIdx};
pub use op::Op;
