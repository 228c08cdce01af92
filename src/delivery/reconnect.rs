//! How long sessions stay away before they resume (issue 42; the seed's
//! open risk: "instrument the reconnect-time distribution before fixing the
//! 120 s window").
//!
//! - A **gap** is the time from the node seeing a session's connection go
//!   (`FanOut::detach`) to a Resume of it. It is counted once, by the node
//!   that held the session: a Resume here (RESUMED), or a hand-off to
//!   another node that a Resume reached (the holder knows when it lost the
//!   connection; the gap travels nowhere). A Resume that arrived before the
//!   node saw the old connection drop has a gap of 0.
//! - A session whose window passed is remembered in `Expired` (its id and
//!   detach time, for `HORIZON_MS`, at most `EXPIRED_CAP` per worker, the
//!   oldest forgotten first): a later Resume of it is refused as always,
//!   and its gap is counted among the attempts.
//! - For each window of `WINDOWS_S`, `beyond[w]` counts the attempts (a
//!   RESUMED, a hand-off, or a refusal of a remembered session) whose gap
//!   was longer: what that window would have refused. A Resume after the
//!   horizon, or of a session forgotten to make room, is not counted.
//!
//! Written by the owning worker only (plain load and store), read by the
//! admin port and the portal.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::delivery::latency::bump;

/// Gap bucket bounds (ms).
#[rustfmt::skip]
pub const GAP_BOUNDS_MS: [u64; 14] = [
    100, 250, 500, 1_000, 2_000, 5_000, 10_000, 20_000, 30_000, 60_000, 90_000, 120_000,
    180_000, 300_000,
];
/// The windows whose refusals are counted (seconds).
pub const WINDOWS_S: [u64; 4] = [30, 60, 120, 300];
/// How long an expired session is remembered after its detach.
pub const HORIZON_MS: u64 = 300_000 + 60_000;
/// Expired sessions remembered per worker (24 bytes each and the map's).
pub const EXPIRED_CAP: usize = 16_384;

#[derive(Default)]
pub struct ReconnectStats {
    /// Resumes (here or handed off) by gap: bucket counts, not cumulative.
    pub gaps: [AtomicU64; GAP_BOUNDS_MS.len() + 1],
    pub gap_sum_ms: AtomicU64,
    /// Attempts with a known gap (resumed, handed off, or refused as
    /// expired), and those each window of `WINDOWS_S` would have refused.
    pub attempts: AtomicU64,
    pub beyond: [AtomicU64; WINDOWS_S.len()],
    /// Resumes refused because the window had passed (remembered sessions).
    pub expired_refused: AtomicU64,
}

impl ReconnectStats {
    fn attempt(&self, gap_ms: u64) {
        bump(&self.attempts, 1);
        for (i, w) in WINDOWS_S.iter().enumerate() {
            if gap_ms > w * 1000 {
                bump(&self.beyond[i], 1);
            }
        }
    }

    /// A session came back after `gap_ms` (resumed here or handed off).
    pub fn resumed(&self, gap_ms: u64) {
        let i = GAP_BOUNDS_MS
            .iter()
            .position(|b| gap_ms <= *b)
            .unwrap_or(GAP_BOUNDS_MS.len());
        bump(&self.gaps[i], 1);
        bump(&self.gap_sum_ms, gap_ms);
        self.attempt(gap_ms);
    }

    /// A Resume of a session whose window had passed, `gap_ms` after its detach.
    pub fn refused_expired(&self, gap_ms: u64) {
        bump(&self.expired_refused, 1);
        self.attempt(gap_ms);
    }

    pub fn gap_counts(&self) -> [u64; GAP_BOUNDS_MS.len() + 1] {
        std::array::from_fn(|i| self.gaps[i].load(Relaxed))
    }
}

/// Sessions whose window passed, by id (`SessionId::random_bits`), with
/// their detach time (Unix ms). Bounded: allocated at start, the oldest
/// forgotten first.
pub struct Expired {
    order: VecDeque<(u128, u64)>,
    by_id: HashMap<u128, u64>,
}

impl Expired {
    pub fn new() -> Expired {
        Expired {
            order: VecDeque::with_capacity(EXPIRED_CAP),
            by_id: HashMap::with_capacity(2 * EXPIRED_CAP),
        }
    }

    /// Remember a session that expired (detached at `detached_ms`).
    pub fn remember(&mut self, id: u128, detached_ms: u64) {
        if self.order.len() == EXPIRED_CAP {
            self.forget_oldest();
        }
        // Every insert gets its place in `order` (a remembered id again
        // too: its older place then forgets nothing), so every map entry
        // is reached by the horizon and the cap: by_id <= order <= CAP.
        self.by_id.insert(id, detached_ms);
        self.order.push_back((id, detached_ms));
        debug_assert!(self.by_id.len() <= self.order.len() && self.order.len() <= EXPIRED_CAP);
    }

    fn forget_oldest(&mut self) {
        if let Some((id, at)) = self.order.pop_front() {
            if self.by_id.get(&id) == Some(&at) {
                self.by_id.remove(&id);
            }
        }
    }

    /// Forget what is past the horizon at `now_ms`.
    pub fn expire(&mut self, now_ms: u64) {
        while let Some(&(_, at)) = self.order.front() {
            if now_ms.saturating_sub(at) <= HORIZON_MS {
                break;
            }
            self.forget_oldest();
        }
    }

    /// The gap of a Resume of `id` at `now_ms`, if it is remembered (and
    /// forgets it: one attempt counts once).
    pub fn take(&mut self, id: u128, now_ms: u64) -> Option<u64> {
        let at = self.by_id.remove(&id)?;
        Some(now_ms.saturating_sub(at))
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

impl Default for Expired {
    fn default() -> Self {
        Expired::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_and_what_each_window_would_have_refused() {
        let r = ReconnectStats::default();
        r.resumed(0);
        r.resumed(45_000);
        r.refused_expired(200_000);
        r.refused_expired(400_000);
        assert_eq!(r.attempts.load(Relaxed), 4);
        let beyond: Vec<u64> = r.beyond.iter().map(|b| b.load(Relaxed)).collect();
        assert_eq!(beyond, [3, 2, 2, 1]); // 30 s, 60 s, 120 s, 300 s
        let g = r.gap_counts();
        assert_eq!(g[0], 1);
        assert_eq!(
            g[GAP_BOUNDS_MS.iter().position(|b| *b == 60_000).unwrap()],
            1
        );
        assert_eq!(r.expired_refused.load(Relaxed), 2);
    }

    #[test]
    fn expired_sessions_are_bounded_and_forgotten_past_the_horizon() {
        let mut e = Expired::new();
        for i in 0..EXPIRED_CAP as u128 + 10 {
            e.remember(i, 1_000);
        }
        assert_eq!(e.len(), EXPIRED_CAP);
        assert_eq!(e.take(0, 5_000), None, "the oldest made room");
        assert_eq!(e.take(20, 5_000), Some(4_000));
        assert_eq!(e.take(20, 5_000), None, "counted once");
        e.expire(1_000 + HORIZON_MS + 1);
        assert!(e.is_empty());
        // The same id twice: the later time counts, and it still ages out.
        e.remember(7, 10_000);
        e.remember(7, 20_000);
        assert_eq!(e.take(7, 25_000), Some(5_000));
        e.remember(8, 10_000);
        e.remember(8, 20_000);
        e.expire(10_000 + HORIZON_MS + 1);
        assert_eq!(e.len(), 1, "the older place forgets nothing");
        e.expire(20_000 + HORIZON_MS + 1);
        assert!(e.is_empty());
    }
}
