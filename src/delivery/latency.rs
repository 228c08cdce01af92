//! Where a delivery's time goes (issue 42): four stages and the whole, per
//! worker, as Prometheus histograms.
//!
//! ```text
//!  commit_unix_ns        read            take              submitted           sent
//!  (the record, set  ──▶ (ingest thread, ──▶ (the worker ──▶ (its send pushed ──▶ (the send's
//!   by the producer)      Batch::push_at)     takes the       to io_uring)         completion
//!                                             batch)                               reaped)
//!  └── commit_to_read ──┘└─ read_to_inbox ─┘└─ inbox_to_submit ─┘└─ submit_to_sent ─┘
//!  └──────────────────────────── end to end: commit_to_sent ─────────────────────────┘
//! ```
//!
//! Every stage counts deliveries (one session getting one stream event),
//! each once:
//! - `commit_to_read` and `read_to_inbox` when the event is fanned out,
//!   weighted by its recipients on this worker (one bucket add, not one per
//!   recipient);
//! - `inbox_to_submit`, `submit_to_sent` and the end to end when the frame
//!   has wholly gone to the kernel (a short send's rest is counted by the
//!   send that finishes it). A frame sent again after a RESUME (its seq at
//!   or below the session's `counted_seq`) is not counted again; a frame
//!   never sent (its session closed first) is counted by the first two
//!   only.
//! - TLS and transport compression copy a send's frames into one buffer
//!   when it is built, and count them as sent there (as the send path
//!   does): for those, `inbox_to_submit` and the end to end end at the
//!   submission; their `submit_to_sent` is added at the completion.
//! - Records the node makes itself (READY, GUILD_CREATE, RESUMED) and those
//!   a session brings from another node carry no stamp and are not timed.
//!
//! Clocks: every stamp is Unix nanoseconds (`CLOCK_REALTIME`, a vDSO read),
//! because the first one is the producer's; a clock step shows as one
//! stage clamped at 0 or one large sample. Commit times from another host
//! include the clocks' offset in `commit_to_read` (and the end to end).
//!
//! Cost on the per-event path: one clock read per batch taken and per send
//! submitted and per completion drain, 16 bytes per arena record (not per
//! session), and per delivered frame three bucket adds by the worker that
//! owns the histograms: single-writer, so a plain load and store (no
//! locked instruction), no allocation, no lock. Readers (the admin port)
//! may see a bucket one add behind its neighbour, never a torn count.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Upper bounds in microseconds: fine where a healthy node is (tens of µs
/// to a few ms), 800 ms for the seed's promise (the alert's line), minutes
/// at the end for a session that waited out a reconnect.
#[rustfmt::skip]
pub const BOUNDS_US: [u64; 20] = [
    25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000,
    500_000, 800_000, 1_000_000, 2_500_000, 10_000_000, 60_000_000, 300_000_000,
];
pub const BUCKETS: usize = BOUNDS_US.len() + 1;

/// The four stages, in order (their label values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    CommitToRead = 0,
    ReadToInbox = 1,
    InboxToSubmit = 2,
    SubmitToSent = 3,
}

impl Stage {
    pub const ALL: [Stage; 4] = [
        Stage::CommitToRead,
        Stage::ReadToInbox,
        Stage::InboxToSubmit,
        Stage::SubmitToSent,
    ];
    pub fn label(self) -> &'static str {
        [
            "commit_to_read",
            "read_to_inbox",
            "inbox_to_submit",
            "submit_to_sent",
        ][self as usize]
    }
}

/// Unix nanoseconds now.
pub fn unix_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_REALTIME always exists.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The bucket of a duration in nanoseconds.
#[inline]
pub fn bucket(ns: u64) -> usize {
    let us = ns.div_ceil(1000);
    BOUNDS_US
        .iter()
        .position(|b| us <= *b)
        .unwrap_or(BOUNDS_US.len())
}

/// What an arena record of a stream event carries besides its `t` and `d`
/// (delivery/record.rs): when it was committed and when the worker took it.
/// All zero: not timed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stamp {
    pub commit_ns: u64,
    pub take_ns: u64,
}

impl Stamp {
    pub const NONE: Stamp = Stamp {
        commit_ns: 0,
        take_ns: 0,
    };
    pub const LEN: usize = 16;

    pub fn is_timed(&self) -> bool {
        self.take_ns != 0
    }

    pub fn to_bytes(self) -> [u8; Stamp::LEN] {
        let mut b = [0u8; Stamp::LEN];
        b[..8].copy_from_slice(&self.commit_ns.to_le_bytes());
        b[8..].copy_from_slice(&self.take_ns.to_le_bytes());
        b
    }

    /// The stamp at the front of `b` (NONE if `b` is short).
    pub fn from_bytes(b: &[u8]) -> Stamp {
        match (b.get(..8), b.get(8..16)) {
            (Some(c), Some(t)) => Stamp {
                commit_ns: u64::from_le_bytes(c.try_into().expect("8 bytes")),
                take_ns: u64::from_le_bytes(t.try_into().expect("8 bytes")),
            },
            _ => Stamp::NONE,
        }
    }
}

/// One histogram, written by one thread only.
pub struct Hist {
    buckets: [AtomicU64; BUCKETS],
    sum_ns: AtomicU64,
}

impl Default for Hist {
    fn default() -> Self {
        Hist {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            sum_ns: AtomicU64::new(0),
        }
    }
}

/// A single writer's add: no locked instruction (every counter of this
/// module and of reconnect.rs has one writer, its worker).
#[inline]
pub(crate) fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
}

impl Hist {
    /// `n` deliveries that each took `ns` (the owning thread only).
    #[inline]
    pub fn record_n(&self, ns: u64, n: u64) {
        bump(&self.buckets[bucket(ns)], n);
        bump(&self.sum_ns, ns.saturating_mul(n));
    }

    /// Bucket counts (not cumulative) and the sum in ns.
    pub fn read(&self) -> ([u64; BUCKETS], u64) {
        (
            std::array::from_fn(|i| self.buckets[i].load(Relaxed)),
            self.sum_ns.load(Relaxed),
        )
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Relaxed)).sum()
    }
}

/// A worker's delivery histograms.
#[derive(Default)]
pub struct DeliveryLatency {
    pub stages: [Hist; 4],
    pub end_to_end: Hist,
    /// Frames sent again after a RESUME (not timed again).
    pub resent: AtomicU64,
}

impl DeliveryLatency {
    #[inline]
    pub fn stage(&self, s: Stage, ns: u64, n: u64) {
        self.stages[s as usize].record_n(ns, n);
    }

    /// An event fanned out to `recipients` sessions of this worker: its
    /// first two stages (`read_ns`: the ingest thread's read).
    #[inline]
    pub fn fanned_out(&self, stamp: Stamp, read_ns: u64, recipients: u64) {
        if recipients == 0 || !stamp.is_timed() {
            return;
        }
        if stamp.commit_ns != 0 {
            self.stage(
                Stage::CommitToRead,
                read_ns.saturating_sub(stamp.commit_ns),
                recipients,
            );
        }
        self.stage(
            Stage::ReadToInbox,
            stamp.take_ns.saturating_sub(read_ns),
            recipients,
        );
    }

    /// Frames of one session wholly handed to the kernel (submitted at
    /// `submit_ns`, sent at `end_ns`): `inbox_to_submit` and the end to end
    /// of each not timed before (its seq above `timed_seq`, which moves on).
    /// Returns how many were timed (their `submit_to_sent` is `sent`'s).
    #[inline]
    pub fn frames_done(
        &self,
        stamps: &[Stamp],
        seqs: &[u64],
        timed_seq: &mut u64,
        submit_ns: u64,
        end_ns: u64,
    ) -> u64 {
        let mut n = 0;
        let mut again = 0;
        for (st, &seq) in stamps.iter().zip(seqs) {
            if !st.is_timed() {
                continue;
            }
            if seq <= *timed_seq {
                again += 1;
                continue;
            }
            *timed_seq = seq;
            self.stage(
                Stage::InboxToSubmit,
                submit_ns.saturating_sub(st.take_ns),
                1,
            );
            if st.commit_ns != 0 {
                self.end_to_end
                    .record_n(end_ns.saturating_sub(st.commit_ns), 1);
            }
            n += 1;
        }
        if again > 0 {
            self.resent(again);
        }
        n
    }

    /// `n` timed frames of one send, submitted at `submit_ns`, completed at
    /// `end_ns`.
    #[inline]
    pub fn sent(&self, n: u64, submit_ns: u64, end_ns: u64) {
        if n > 0 {
            self.stage(Stage::SubmitToSent, end_ns.saturating_sub(submit_ns), n);
        }
    }

    pub fn resent(&self, n: u64) {
        bump(&self.resent, n);
    }
}

/// Render one histogram series from bucket counts (not cumulative);
/// `labels` is `k="v",...`. `_count` is the `+Inf` bucket as summed here.
pub fn render_series(
    name: &str,
    labels: &str,
    counts: &[u64; BUCKETS],
    sum_ns: u64,
    out: &mut String,
) {
    let mut cum = 0;
    for (i, b) in BOUNDS_US.iter().enumerate() {
        cum += counts[i];
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels},le=\"{}\"}} {cum}",
            *b as f64 / 1e6
        );
    }
    cum += counts[BOUNDS_US.len()];
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {cum}");
    let _ = writeln!(out, "{name}_sum{{{labels}}} {:.6}", sum_ns as f64 / 1e9);
    let _ = writeln!(out, "{name}_count{{{labels}}} {cum}");
}

/// The `q` quantile of bucket counts, estimated linearly inside its bucket
/// (as Prometheus' histogram_quantile does), in microseconds; None if empty.
/// Past the last bound: the last bound.
pub fn quantile_us(counts: &[u64; BUCKETS], q: f64) -> Option<f64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let mut cum = 0u64;
    for (i, &c) in counts.iter().enumerate() {
        if c > 0 && (cum + c) as f64 >= rank {
            let Some(&hi) = BOUNDS_US.get(i) else {
                return Some(BOUNDS_US[BOUNDS_US.len() - 1] as f64);
            };
            let lo = if i == 0 { 0 } else { BOUNDS_US[i - 1] };
            let into = ((rank - cum as f64) / c as f64).clamp(0.0, 1.0);
            return Some(lo as f64 + (hi - lo) as f64 * into);
        }
        cum += c;
    }
    Some(BOUNDS_US[BOUNDS_US.len() - 1] as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_by_upper_bound_and_counts_are_weighted() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(25_000), 0);
        assert_eq!(bucket(25_001), 1);
        assert_eq!(
            bucket(800_000_000),
            BOUNDS_US.iter().position(|b| *b == 800_000).unwrap()
        );
        assert_eq!(bucket(u64::MAX), BOUNDS_US.len());
        let h = Hist::default();
        h.record_n(30_000, 5);
        h.record_n(2_000_000, 1);
        let (c, sum) = h.read();
        assert_eq!(c[1], 5);
        assert_eq!(c[6], 1);
        assert_eq!(h.count(), 6);
        assert_eq!(sum, 150_000 + 2_000_000);
        let mut out = String::new();
        render_series("x_seconds", "worker=\"0\"", &c, sum, &mut out);
        assert!(
            out.contains("x_seconds_bucket{worker=\"0\",le=\"0.00005\"} 5\n"),
            "{out}"
        );
        assert!(out.contains("x_seconds_bucket{worker=\"0\",le=\"+Inf\"} 6\n"));
        assert!(out.contains("x_seconds_count{worker=\"0\"} 6\n"));
    }

    #[test]
    fn a_stamp_round_trips_and_a_short_one_is_none() {
        let s = Stamp {
            commit_ns: 1_700_000_000_123_456_789,
            take_ns: 1_700_000_000_223_456_789,
        };
        assert_eq!(Stamp::from_bytes(&s.to_bytes()), s);
        assert!(s.is_timed());
        assert_eq!(Stamp::from_bytes(&[1, 2, 3]), Stamp::NONE);
        assert!(!Stamp::NONE.is_timed());
    }

    #[test]
    fn quantiles_are_estimated_inside_their_bucket() {
        let mut c = [0u64; BUCKETS];
        assert_eq!(quantile_us(&c, 0.5), None);
        c[5] = 100; // (500, 1000] µs
        assert_eq!(quantile_us(&c, 0.5), Some(750.0));
        c[BUCKETS - 1] = 100;
        assert_eq!(quantile_us(&c, 0.99), Some(300_000_000.0));
    }
}
