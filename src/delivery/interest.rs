//! Which servers a worker has sessions in, readable by the threads that
//! hand it events, so a source wakes only the workers an event may reach.
//!
//! ```text
//!   worker w's FanOut ──add/remove per (session, server)──► Interest[w] (4096 counters)
//!   every source's pipeline ──wants(server)?──► wake w (try_send) | queue quietly (push_quiet)
//! ```
//!
//! A counter per bucket of servers (hashed), plus bucket 0 for direct
//! messages (every session may get one). It may say "wanted" for a server
//! nobody here has (a shared bucket): that only costs a wakeup. It may say
//! "not wanted" a moment before a session joins: the batch is still queued,
//! in order, and taken at the worker's next wakeup (its 250 ms tick at the
//! latest; a quiet source also wakes every worker it queued `NUDGE_EVERY`
//! batches for). So interest decides *when* a worker looks, never *what* it
//! gets: no event is lost or reordered by a wrong answer.
//!
//! Bounds: fixed at start (4096 x 4 bytes per worker); no allocation after.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use proto::ServerId;

/// Server buckets (bucket 0 is direct messages).
pub const BUCKETS: usize = 4096;

/// A source that queued this many batches quietly for a worker wakes it
/// anyway, so that worker lets go of them (its source recycles batches
/// only once every worker did; a producer's pipeline has 64 out at most,
/// a worker's chat service 256).
pub const NUDGE_EVERY: u32 = 32;

pub struct Interest {
    counts: Box<[AtomicU32]>,
}

impl Default for Interest {
    fn default() -> Interest {
        Interest {
            counts: (0..BUCKETS).map(|_| AtomicU32::new(0)).collect(),
        }
    }
}

/// A server's bucket: 1..BUCKETS, mixed (snowflake ids made in a burst
/// differ in their low bits only after the increment); server 0 is 0.
fn bucket(server: u64) -> usize {
    if server == 0 {
        return 0;
    }
    1 + ((server.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40) as usize) % (BUCKETS - 1)
}

impl Interest {
    /// A session of this worker receives `server`'s events.
    pub fn add(&self, server: ServerId) {
        self.counts[bucket(server.0)].fetch_add(1, Relaxed);
    }

    /// It no longer does (every `add` is matched by one `remove`).
    pub fn remove(&self, server: ServerId) {
        let prev = self.counts[bucket(server.0)].fetch_sub(1, Relaxed);
        debug_assert!(prev > 0, "interest removed more often than added");
    }

    /// Whether an event of `server` (0: a direct message) may have a
    /// recipient on this worker.
    pub fn wants(&self, server: u64) -> bool {
        self.counts[bucket(server)].load(Relaxed) > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_is_wanted_while_a_session_has_it() {
        let i = Interest::default();
        let (a, b) = (ServerId(1_234_567_890_123_456_789), ServerId(42));
        assert!(!i.wants(a.0) && !i.wants(b.0) && !i.wants(0));
        i.add(a);
        i.add(a);
        i.add(ServerId::NONE);
        assert!(i.wants(a.0) && i.wants(0));
        i.remove(a);
        assert!(i.wants(a.0), "one session still has it");
        i.remove(a);
        i.remove(ServerId::NONE);
        assert!(!i.wants(a.0) && !i.wants(0));
        assert_ne!(bucket(a.0), 0, "only direct messages use bucket 0");
        assert_ne!(bucket(1), 0);
    }
}
