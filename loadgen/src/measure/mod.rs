//! Measurements of a running node that loadgen neither started nor
//! provisioned (gatewayd, or bench/conventional for the side-by-side
//! benchmark), given tokens of applications installed in one server:
//!
//! - [`idle()`] (`loadgen measure idle`): node RSS before opening N sessions
//!   and once all are READY, per session and per 1,000; then every session
//!   is closed with 1000 (which ends it on the node: nothing is left
//!   detached);
//! - [`fanout()`] (`loadgen measure fanout`): N sessions, then the producer
//!   writes MESSAGE_CREATE to the ingest port open-loop at `rate` for
//!   `seconds`, each `d` about `payload` bytes starting with `"ts_ns":T`
//!   (T the *scheduled* time, so a producer that falls behind shows up as
//!   latency); deliveries, gaps, latency (receive time - T), node CPU,
//!   RSS and metrics. `stall` sessions stop reading once READY (they still
//!   heartbeat) and are left out of latency and gaps. With `servers` S > 1
//!   the tokens are of applications each in its own server: the events go
//!   round-robin to the S servers seen in the GUILD_CREATEs, `rate` per
//!   server (see `servers`), so one event reaches only that server's sessions;
//! - [`hold()`] (`loadgen hold-sessions`): holds sessions until stdin closes
//!   (or `hold_secs`), printing progress as `KEY N` lines, for tests that
//!   need many sessions from several processes.
//!
//! Sessions are the fleet's (io_uring direct descriptors, the producer's
//! schedule, the node's /proc and /metrics from `nodes`), run without
//! reconnecting so that a lost session stays counted as lost. Output is
//! `key value` lines on stdout (scripts/side-by-side.sh and the docs read
//! them), notes on stderr.
//!
//! Files: one per measurement (`idle`, `fanout`, `hold`), `opts` (their
//! options), `common` (opening the sessions, waiting for READY, reading
//! the node, formatting). This file only declares and re-exports.

mod common;
mod fanout;
mod hold;
mod idle;
mod opts;
#[cfg(test)]
mod tests;
mod timeline;

pub use common::read_tokens;
pub use fanout::fanout;
pub use hold::hold;
pub use idle::idle;
pub use opts::{FanoutOpts, HoldOpts, IdleOpts, SessionOpts, DEFAULT_INTENTS, SESSIONS_PER_SOURCE};
