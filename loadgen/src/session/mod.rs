//! One bot session as a sans-IO state machine: bytes in, frames out, and a
//! check of every event it receives. The fleet (fleet/) owns the sockets.
//!
//! Client behaviour follows what real libraries do (discord.py, twilight):
//! - heartbeat at the Hello interval, the first one after a random fraction
//!   of it; an interval without an ACK is a zombie connection: reconnect and
//!   resume;
//! - op 7: reconnect at once and resume; op 9 `d:true`: reconnect and resume;
//!   op 9 `d:false`: forget the session, wait 1-5 s, reconnect and identify
//!   (the only place a gap in the stream is allowed);
//! - closes 4004 and 4010-4014 are fatal (the session stops); 4007 and 4009
//!   start a new session; anything else (and EOF, errors) resumes;
//! - reconnect backoff: the first retry after 0-1 s, then exponential
//!   (2^n s, jittered, at most 60 s) while attempts keep failing.
//!
//! Files: `state` (the [`Session`] and its phases, timers and outgoing
//! frames), `lifecycle` (connect, loss and reconnect backoff, heartbeats,
//! closes), `inbound` (bytes from the node: upgrade, frames, gateway ops),
//! `dispatch` (the checks of every dispatch and event received),
//! `recorder` (what sessions count into), `bytes` (byte-scanning
//! helpers). This file only declares and re-exports.

mod bytes;
mod dispatch;
mod inbound;
mod lifecycle;
mod recorder;
mod state;
#[cfg(test)]
mod tests;

pub use bytes::{find, parse_u64};
pub use recorder::{Counters, Recorder};
pub use state::{Action, Phase, Session};
