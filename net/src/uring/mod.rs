//! One io_uring ring that owns sockets as direct descriptors.
//!
//! Sockets accepted here go straight into the ring's fixed file table and never
//! enter the process fd table, so a process can hold more sockets than
//! `RLIMIT_NOFILE` (one table per ring, each at most the soft limit). Receives
//! are multishot over a provided-buffer ring, so an idle socket pins no buffer.
//!
//! The ring knows nothing of what the sockets carry: every operation is tagged
//! with an opaque `u64` that comes back in its [`Completion`].
//!
//! Files (this one only declares and re-exports, so `net::uring::X` paths
//! stay as they were):
//! - `ring.rs`: [`Ring`] with its [`RingConfig`], the [`Completion`]s it
//!   hands out and its provided-buffer ring: everything a worker calls per
//!   event, kept in one file.
//! - `setup.rs`: what is done once before rings run: the RLIMIT_NOFILE that
//!   caps fixed tables, and the listening sockets rings accept from.
//! - `tests.rs`: unit tests (a socket accepted, read, written and closed
//!   through a ring; the table capped by RLIMIT_NOFILE).

mod ring;
mod setup;
#[cfg(test)]
mod tests;

pub use ring::{Completion, Ring, RingConfig};
pub use setup::{cap_fixed_files, listen_reuseport, raise_nofile_limit, set_send_buffer};
