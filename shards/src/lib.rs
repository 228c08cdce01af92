//! Shard arithmetic, placement of `(application, shard)` sessions on workers,
//! session ids that encode their owning worker, and core pinning.
//!
//! Knows nothing of sockets or protocols.

pub mod cpu;
pub mod placement;
pub mod session_id;
pub mod shard;

pub use cpu::{available_cores, pin_current_thread, worker_cores, worker_cores_from};
pub use placement::worker_for;
pub use session_id::{InvalidSessionId, SessionId, SESSION_ID_LEN};
pub use shard::{shard_for, validate_shard, ShardError, MAX_SHARD_COUNT};
