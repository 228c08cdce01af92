//! The bot fleet: N sessions over real WebSockets from one process, every
//! socket an io_uring direct descriptor (Socket + Bind + Connect on fixed
//! slots, never in the fd table), so one process holds more sessions than
//! RLIMIT_NOFILE allows. One thread per ring; a ring's fixed table is capped
//! by the soft RLIMIT_NOFILE, so 40,000 sessions take three rings here.
//!
//! Each thread owns its sessions outright (slot index == session index in
//! the thread) and shares only counters and histograms with the rest.
//!
//! Files: `config` (what a fleet is asked to run), `handle` (the [`Fleet`]
//! a caller holds: start, counts, histograms, stop), `shared` (what the
//! threads share with the handle), and per thread the driver: its
//! completions (`driver`), socket operations (`sockets`), the 20 ms tick
//! (`tick`), and the slot table's types (`slot`). This file only
//! declares and re-exports.

mod config;
mod driver;
mod handle;
mod shared;
mod slot;
mod sockets;
mod tick;

pub use config::{spread_sources, FleetConfig};
pub use handle::Fleet;
pub use shared::{add_counters, Shared};
