//! A TCP load balancer in front of several gatewayd nodes, for the
//! `rolling-release` scenario: the bots connect (and reconnect after op 7)
//! to ONE address that is not a node, and each new connection goes to a
//! node that is up and not draining, as a production load balancer does
//! with its health checks. Existing connections stay where they are until
//! either side closes them.
//!
//! Built for 40,000 and more connections on a machine whose RLIMIT_NOFILE is
//! 20,000: every socket (accepted and upstream) is an io_uring direct
//! descriptor in a ring's fixed table, never in the fd table. Each thread
//! owns one ring and one SO_REUSEPORT listener on the shared port (the
//! kernel spreads new connections over them); a pair (client, upstream)
//! takes two slots of its ring's table. Upstream sockets bind to source
//! addresses of their own (127.0.1.x by default), since one address has
//! about 28,000 ports and every moved session leaves one in TIME_WAIT.
//!
//! A node is used for new connections while it is `enabled` (the operator:
//! the scenario turns a node off before it drains it, as an orchestrator
//! takes a node out of the load balancer) and its `/readyz` answers 200
//! (checked every 200 ms: 503 while draining, refused when gone).
//!
//! Files: `handle` (the [`Lb`] a caller holds: start, switch and replace
//! backends, stats, stop; and the health-check thread), `shared` (the
//! backends and counters the threads share), `driver` (one thread's ring:
//! accepts and completions), `relay` (a pair's bytes both ways, its
//! teardown), `pair` (a pair's state and the user data of its operations).
//! This file only declares and re-exports.

mod driver;
mod handle;
mod pair;
mod relay;
mod shared;
#[cfg(test)]
mod tests;

pub use handle::{Lb, LbStats, MAX_BACKENDS};
pub use pair::MAX_QUEUED;
pub use shared::Backend;
