//! Discord-style snowflake ids: `(ms since 2015-01-01) << 22 | worker << 12 | increment`.
//!
//! Shards are `(id >> 22) % count`, so the timestamp part decides placement.

use std::sync::{Mutex, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

pub const DISCORD_EPOCH_MS: u64 = 1_420_070_400_000;
const WORKER_BITS: u32 = 10;
const INCREMENT_BITS: u32 = 12;
const WORKER_MASK: u64 = (1 << WORKER_BITS) - 1;
const INCREMENT_MASK: u64 = (1 << INCREMENT_BITS) - 1;

pub fn unix_ms_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Unix milliseconds at which `id` was generated.
pub fn timestamp_ms(id: u64) -> u64 {
    (id >> 22) + DISCORD_EPOCH_MS
}

#[derive(Debug)]
pub struct SnowflakeGenerator {
    worker: u64,
    /// (last ms since epoch used, last increment)
    state: Mutex<(u64, u64)>,
}

impl SnowflakeGenerator {
    pub fn new(worker: u16) -> Self {
        Self {
            worker: u64::from(worker) & WORKER_MASK,
            state: Mutex::new((0, 0)),
        }
    }

    /// Next id, strictly greater than every id this generator returned.
    pub fn next_id(&self) -> u64 {
        self.next_at(unix_ms_now(), false)
    }

    /// Next id whose timestamp part is unused by this generator. Servers get
    /// these: bulk-created servers then spread round-robin over shards
    /// instead of piling into the shard of the current millisecond. The
    /// clock may run ahead of real time by one ms per server created in a
    /// burst, which is harmless.
    pub fn next_id_fresh_ms(&self) -> u64 {
        self.next_at(unix_ms_now(), true)
    }

    pub fn next_at(&self, unix_ms: u64, fresh_ms: bool) -> u64 {
        let now = unix_ms.saturating_sub(DISCORD_EPOCH_MS);
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (last_ms, last_inc) = *st;
        // Never go backwards, even if the wall clock does.
        let (ms, inc) = if now > last_ms {
            (now, 0)
        } else if fresh_ms || last_inc >= INCREMENT_MASK {
            (last_ms + 1, 0)
        } else {
            (last_ms, last_inc + 1)
        };
        *st = (ms, inc);
        (ms << 22) | (self.worker << INCREMENT_BITS) | inc
    }
}

/// Process-wide generator with a random worker id, so the CLI and a running
/// node writing the same database are unlikely to collide.
pub fn global() -> &'static SnowflakeGenerator {
    static GEN: OnceLock<SnowflakeGenerator> = OnceLock::new();
    GEN.get_or_init(|| {
        let worker = getrandom::u32().unwrap_or_else(|_| std::process::id()) as u16;
        SnowflakeGenerator::new(worker)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_and_monotonic() {
        let g = SnowflakeGenerator::new(5);
        let t = DISCORD_EPOCH_MS + 1000;
        let a = g.next_at(t, false);
        let b = g.next_at(t, false);
        assert_eq!(a >> 22, 1000);
        assert_eq!((a >> 12) & WORKER_MASK, 5);
        assert_eq!(b, a + 1);
        assert_eq!(timestamp_ms(a), t);
        // Clock going back still yields increasing ids.
        let c = g.next_at(t - 500, false);
        assert!(c > b);
    }

    #[test]
    fn fresh_ms_advances_timestamp() {
        let g = SnowflakeGenerator::new(0);
        let t = DISCORD_EPOCH_MS + 10;
        let ids: Vec<u64> = (0..8).map(|_| g.next_at(t, true)).collect();
        for (i, id) in ids.iter().enumerate() {
            assert_eq!(id >> 22, 10 + i as u64);
        }
        // Round-robin over 4 shards.
        let shards: Vec<u64> = ids.iter().map(|id| (id >> 22) % 4).collect();
        assert_eq!(shards, vec![2, 3, 0, 1, 2, 3, 0, 1]);
    }

    #[test]
    fn increment_overflow_moves_to_next_ms() {
        let g = SnowflakeGenerator::new(0);
        let t = DISCORD_EPOCH_MS + 7;
        let mut last = 0;
        for _ in 0..=INCREMENT_MASK + 2 {
            let id = g.next_at(t, false);
            assert!(id > last);
            last = id;
        }
        assert_eq!(last >> 22, 8);
    }
}
