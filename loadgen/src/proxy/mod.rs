//! A fault-injecting TCP proxy, used between gatewayd and its registry
//! (PostgreSQL) to script a brownout: added latency, stalled connections,
//! dropped connections.
//!
//! Design: std threads. One accept thread; per connection four threads (a
//! reader and a writer per direction) around a FIFO of chunks per
//! direction. Readers stamp each chunk with its arrival time; writers
//! forward it when the current [`Fault`] allows:
//!
//! - [`Fault::Pass`]: at once.
//! - [`Fault::Latency`]`(d)`: at arrival + `d` (both directions, order kept).
//! - [`Fault::Stall`]: never, until the fault changes. Connections stay
//!   open; new ones are accepted but not connected upstream.
//! - [`Fault::Drop`]: every open connection is reset (RST on both sides),
//!   new ones are reset at once.
//!
//! Bounded: at most `max_connections` connections (more are closed at
//! once), and a reader stops reading while its direction holds more than
//! `max_pending` bytes (so a stall pushes back on the sender through TCP).
//! I/O errors close the connection concerned; nothing panics on them.
//!
//! Files: `script` (the [`Fault`]s and the fault-script parser), `handle`
//! (the [`Proxy`] a caller holds: start, set, run a script, stats, stop),
//! `pump` (the accept thread and the per-connection threads), `state`
//! (what the handle and the threads share: the connection table, the
//! per-direction queues, counters). This file only declares and
//! re-exports.

mod handle;
mod pump;
mod script;
mod state;
#[cfg(test)]
mod tests;

pub use handle::{Proxy, ProxyStats, MAX_CONNECTIONS, MAX_PENDING};
pub use pump::CONNECT_TIMEOUT;
pub use script::{parse_duration, parse_script, Fault, Step};
