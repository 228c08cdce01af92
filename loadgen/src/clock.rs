//! One monotonic clock for the whole process: the producer stamps scheduled
//! commit times with it and the fleet reads it on receipt, so latency needs
//! no clock synchronisation (producer and fleet share the process).

use std::sync::OnceLock;
use std::time::Instant;

static EPOCH: OnceLock<Instant> = OnceLock::new();

/// Nanoseconds since the first call in this process (never 0 after it).
pub fn now_ns() -> u64 {
    let e = EPOCH.get_or_init(Instant::now);
    e.elapsed().as_nanos() as u64 + 1
}

/// Wall-clock nanoseconds since the Unix epoch (for records' commit time).
pub fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

pub fn unix_ms() -> u64 {
    unix_ns() / 1_000_000
}
