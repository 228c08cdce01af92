//! Rate-limit counters shared between nodes (ADR-10; docs/rate-limits.md
//! "Several nodes"): the keys, the arithmetic and the messages, no I/O.
//! Redis is spoken by `link::counters`, a thread of its own; a worker never
//! waits for it.
//!
//! ```text
//!   worker: admits locally ──Delta per admission (try_send)──► counters thread
//!      ▲    (local + others < limit)                              │ every sync_ms / 2:
//!      │                                                          │ INCRBY delta / GET, pipelined
//!      └──── ToWorker::RestCounters(Answer): others' counts ◄─────┘ (one Redis round, one deadline)
//! ```
//!
//! - Windows line up across nodes: with Redis configured a window of
//!   `per_ms` opens at `now - now % per_ms` (Unix ms, wall clock), so every
//!   node names the same window by its start. A `Key` is (application,
//!   bucket or the global window, top-level resource, window start).
//! - A worker admits while `local + others < limit`; `others` is what the
//!   other nodes had counted in Redis for that window at the last round
//!   (`Redis total - what this node pushed`).
//! - Bound: an admission is pushed at the counters thread's next round
//!   (within sync_ms / 2) and read by every other node at its first round
//!   after that (another sync_ms / 2), each round bounded by its deadline.
//!   So N nodes admit at most `limit` + what the other nodes admitted in
//!   the last `sync_ms + 2 x timeout_ms` in any window (the proof is in
//!   docs/rate-limits.md).
//! - Fallback (a Redis round failed or passed its deadline): each node
//!   applies `ceil(limit / N)` (at least 1) with N the live nodes it last
//!   read from Redis or `rest.nodes`, or the full limit if it knows no N;
//!   `others` is forgotten until Redis answers again.
//! - Bounds: `OUTBOX` deltas queued per node (a full queue drops the delta
//!   from sharing, counted), `MAX_TRACKED` keys tracked (windows the node
//!   touched, forgotten when they close), `MAX_SYNC_KEYS` keys per round
//!   (those with new admissions first).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender};

use super::buckets::Bucket;

/// Deltas a node may have queued for its counters thread.
pub const OUTBOX: usize = 1 << 16;
/// Windows the counters thread tracks (this node touched, still open).
pub const MAX_TRACKED: usize = 1 << 16;
/// Keys read or written in one Redis round.
pub const MAX_SYNC_KEYS: usize = 4096;

/// One window, as every node names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    pub app: u64,
    /// None: the application's global window.
    pub bucket: Option<Bucket>,
    pub major: u64,
    pub start_ms: u64,
}

impl Key {
    /// The Redis key (stable across nodes and versions).
    pub fn redis_key(&self) -> String {
        let b = self.bucket.map_or("global", |b| b.def().id);
        format!(
            "gatewayd:rl:{}:{b}:{}:{}",
            self.app, self.major, self.start_ms
        )
    }
}

/// The start of the window of `per_ms` that holds `now` (aligned windows).
pub fn aligned_start(now: u64, per_ms: u64) -> u64 {
    now - now % per_ms.max(1)
}

/// How a node counts: shared through Redis, or on its own.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Sharing {
    #[default]
    Shared,
    /// Redis is unreachable: a 1/`nodes` share of each limit (0: N unknown,
    /// the full limit).
    Fallback { nodes: u32 },
}

/// The limit a node applies to a window of `limit` under `sharing`.
pub fn share(limit: u32, sharing: Sharing) -> u32 {
    match sharing {
        Sharing::Fallback { nodes } if nodes > 1 => limit.div_ceil(nodes).max(1),
        _ => limit,
    }
}

/// One admission on a worker, for the counters thread.
#[derive(Clone, Copy, Debug)]
pub struct Delta {
    pub worker: u16,
    pub key: Key,
    /// When the window closes (Unix ms).
    pub end_ms: u64,
}

/// A worker's end of the queue to the counters thread.
#[derive(Clone)]
pub struct Outbox {
    tx: Sender<Delta>,
    /// Admissions not shared because the queue was full.
    pub unshared: Arc<AtomicU64>,
}

impl Outbox {
    pub fn new(capacity: usize) -> (Outbox, Receiver<Delta>) {
        let (tx, rx) = crossbeam_channel::bounded(capacity);
        let unshared = Arc::default();
        (Outbox { tx, unshared }, rx)
    }

    /// Never blocks: a full queue drops the delta (counted).
    pub fn note(&self, d: Delta) {
        if self.tx.try_send(d).is_err() {
            self.unshared.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What a worker's limiter needs to share: the queue and the node's mode.
pub struct Link {
    pub outbox: Outbox,
    pub worker: u16,
    pub sharing: Sharing,
}

/// The other nodes' count of one window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Remote {
    pub key: Key,
    pub others: u32,
}

/// The counters thread's answer to one worker after a round.
#[derive(Debug, Default)]
pub struct Answer {
    pub sharing: Sharing,
    pub remote: Vec<Remote>,
}

/// One key of a round: push `delta` (0: read only) of a window closing at `end_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Push {
    pub key: Key,
    pub delta: u32,
    pub end_ms: u64,
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    worker: u16,
    end_ms: u64,
    /// Admitted here, not yet in a round.
    pending: u32,
    /// In the round under way.
    inflight: u32,
    /// This node's share of the Redis total.
    pushed: u64,
}

/// The counters thread's book of the windows this node touched.
#[derive(Default)]
pub struct Tracker {
    map: HashMap<Key, Entry>,
    /// Admissions not shared because `MAX_TRACKED` windows were tracked.
    pub untracked: u64,
}

impl Tracker {
    pub fn add(&mut self, d: Delta) {
        if !self.map.contains_key(&d.key) && self.map.len() >= MAX_TRACKED {
            self.untracked += 1;
            return;
        }
        let e = self.map.entry(d.key).or_insert(Entry {
            worker: d.worker,
            end_ms: d.end_ms,
            pending: 0,
            inflight: 0,
            pushed: 0,
        });
        e.worker = d.worker;
        e.pending = e.pending.saturating_add(1);
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// The keys of the next round, at most `max`: windows with new
    /// admissions first, then the others still open (read only). Closed
    /// windows are forgotten. Their pending counts are in flight until
    /// `settled` or `failed`.
    pub fn round(&mut self, now: u64, max: usize) -> Vec<Push> {
        self.map.retain(|_, e| e.end_ms > now);
        self.failed(); // nothing is in flight between rounds
        let mut out = Vec::with_capacity(self.map.len().min(max));
        for pass in [true, false] {
            for (k, e) in self.map.iter_mut() {
                if out.len() >= max {
                    return out;
                }
                // First pass: new admissions; second: the rest, read only.
                let pick = if pass { e.pending > 0 } else { e.inflight == 0 };
                if pick {
                    e.inflight = e.pending;
                    e.pending = 0;
                    out.push(Push {
                        key: *k,
                        delta: e.inflight,
                        end_ms: e.end_ms,
                    });
                }
            }
        }
        out
    }

    /// Redis answered `total` for `key` after this round's push: the
    /// worker that admits into it, and the other nodes' count.
    pub fn settled(&mut self, key: &Key, total: u64) -> Option<(u16, Remote)> {
        let e = self.map.get_mut(key)?;
        e.pushed += e.inflight as u64;
        e.inflight = 0;
        let others = total.saturating_sub(e.pushed).min(u32::MAX as u64) as u32;
        Some((e.worker, Remote { key: *key, others }))
    }

    /// The round failed: what was in flight is pushed in a later round
    /// (if its window is still open then).
    pub fn failed(&mut self) {
        for e in self.map.values_mut() {
            e.pending = e.pending.saturating_add(e.inflight);
            e.inflight = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(major: u64) -> Key {
        Key {
            app: 7,
            bucket: Some(Bucket::MessageCreate),
            major,
            start_ms: 10_000,
        }
    }

    fn delta(major: u64) -> Delta {
        Delta {
            worker: 1,
            key: key(major),
            end_ms: 15_000,
        }
    }

    #[test]
    fn the_fallback_share_is_a_ceiling_of_at_least_one() {
        assert_eq!(share(100, Sharing::Shared), 100);
        assert_eq!(share(100, Sharing::Fallback { nodes: 0 }), 100, "N unknown");
        assert_eq!(share(100, Sharing::Fallback { nodes: 1 }), 100);
        assert_eq!(share(100, Sharing::Fallback { nodes: 3 }), 34);
        assert_eq!(share(5, Sharing::Fallback { nodes: 2 }), 3);
        assert_eq!(share(1, Sharing::Fallback { nodes: 8 }), 1, "never 0");
        // N nodes at their share never exceed the limit by more than N - 1.
        for limit in 1..60u32 {
            for n in 1..9u32 {
                let s = share(limit, Sharing::Fallback { nodes: n });
                assert!(s * n >= limit && s * n < limit + n, "{limit} / {n}");
            }
        }
    }

    #[test]
    fn windows_line_up_on_the_wall_clock() {
        assert_eq!(aligned_start(12_345, 5_000), 10_000);
        assert_eq!(aligned_start(10_000, 5_000), 10_000);
        assert_eq!(aligned_start(9_999, 250), 9_750);
        assert_eq!(
            aligned_start(77, 0),
            77,
            "a zero period does not divide by zero"
        );
        assert_eq!(key(3).redis_key(), "gatewayd:rl:7:7a1f3c0e5d2b4a69:3:10000");
        let g = Key {
            bucket: None,
            major: 0,
            ..key(0)
        };
        assert_eq!(g.redis_key(), "gatewayd:rl:7:global:0:10000");
    }

    #[test]
    fn others_are_the_redis_total_less_what_this_node_pushed() {
        let mut t = Tracker::default();
        for _ in 0..3 {
            t.add(delta(1));
        }
        let r = t.round(11_000, MAX_SYNC_KEYS);
        assert_eq!(
            r,
            [Push {
                key: key(1),
                delta: 3,
                end_ms: 15_000
            }]
        );
        // Another node had pushed 4: Redis answers 7 after our INCRBY 3.
        let (w, remote) = t.settled(&key(1), 7).unwrap();
        assert_eq!((w, remote.others), (1, 4));
        // Next round, nothing new here: a read; the others reached 10.
        let r = t.round(11_050, MAX_SYNC_KEYS);
        assert_eq!(r[0].delta, 0);
        assert_eq!(t.settled(&key(1), 13).unwrap().1.others, 10);
        // Two more here, and Redis says 15: the others are still 10.
        t.add(delta(1));
        t.add(delta(1));
        t.round(11_100, MAX_SYNC_KEYS);
        assert_eq!(t.settled(&key(1), 15).unwrap().1.others, 10);
        // A total below what we pushed (the key expired, Redis restarted): 0, not an underflow.
        t.round(11_150, MAX_SYNC_KEYS);
        assert_eq!(t.settled(&key(1), 2).unwrap().1.others, 0);
    }

    #[test]
    fn a_failed_round_pushes_its_deltas_later_and_closed_windows_are_forgotten() {
        let mut t = Tracker::default();
        t.add(delta(1));
        t.add(delta(1));
        assert_eq!(t.round(11_000, MAX_SYNC_KEYS)[0].delta, 2);
        t.failed();
        t.add(delta(1));
        assert_eq!(t.round(11_100, MAX_SYNC_KEYS)[0].delta, 3, "nothing lost");
        t.failed();
        assert!(
            t.round(15_000, MAX_SYNC_KEYS).is_empty(),
            "the window closed"
        );
        assert!(t.is_empty());
    }

    #[test]
    fn a_round_is_bounded_and_new_admissions_go_first() {
        let mut t = Tracker::default();
        for m in 0..10 {
            t.add(delta(m));
        }
        let first = t.round(11_000, 4);
        assert_eq!(first.len(), 4);
        for p in &first {
            t.settled(&p.key, 1);
        }
        // Six keys still have admissions: they go before the four read-only ones.
        let second = t.round(11_050, 6);
        assert!(second.iter().all(|p| p.delta == 1), "{second:?}");
        assert!(second.iter().all(|p| !first.iter().any(|f| f.key == p.key)));
        // The table itself is bounded.
        let mut t = Tracker::default();
        for m in 0..(MAX_TRACKED as u64 + 5) {
            t.add(delta(m));
        }
        assert_eq!((t.len(), t.untracked), (MAX_TRACKED, 5));
    }
}
