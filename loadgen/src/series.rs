//! Latency where the load is measured, over time and by session (issue 42):
//! is a tail a few sessions, one second, or everything?
//!
//! - [`Buckets`]: log-linear buckets of microseconds, 8 per power of two
//!   (exact below 8 µs): a quantile read from them is the upper bound of
//!   its bucket, at most 12.5 % above the true value. 224 buckets reach
//!   2^30 µs (18 min); longer is counted in the last.
//! - [`PerSecond`]: one fleet thread's buckets by the second the event was
//!   *scheduled* in (its `sched_ns` against the start of measuring), so a
//!   second's p99 is that of the events offered in it, wherever they were
//!   received; at most [`MAX_SECONDS`] (later ones land in the last).
//!   Allocated when measuring starts, merged at collection.
//! - [`SessionLatency`]: one session's buckets (u16 counts, saturating) and
//!   its max; allocated at the session's first measured delivery.

/// Sub-buckets per power of two.
const SUB: u64 = 8;
pub const NB: usize = 224;
/// Seconds a run's series holds.
pub const MAX_SECONDS: usize = 900;

/// The bucket of `us` microseconds.
pub fn bucket(us: u64) -> usize {
    if us < SUB {
        return us as usize;
    }
    let e = 63 - us.leading_zeros() as u64; // >= 3
    let sub = (us >> (e - 3)) & (SUB - 1);
    (SUB + (e - 3) * SUB + sub).min(NB as u64 - 1) as usize
}

/// The largest value in bucket `i` (µs).
pub fn upper(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB {
        return i;
    }
    let e = (i - SUB) / SUB + 3;
    let sub = (i - SUB) % SUB;
    ((SUB + sub + 1) << (e - 3)) - 1
}

/// The `q` quantile of bucket counts: its bucket's upper bound (µs).
pub fn quantile<T: Copy + Into<u64>>(counts: &[T], q: f64) -> Option<u64> {
    let total: u64 = counts.iter().map(|c| (*c).into()).sum();
    if total == 0 {
        return None;
    }
    let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
    let mut cum = 0;
    for (i, c) in counts.iter().enumerate() {
        cum += (*c).into();
        if cum >= rank {
            return Some(upper(i));
        }
    }
    Some(upper(counts.len() - 1))
}

/// Bucket counts of one second.
pub type Buckets = [u32; NB];

/// One thread's latency by scheduled second.
pub struct PerSecond {
    pub start_ns: u64,
    pub secs: Vec<Buckets>,
    pub max_us: Vec<u32>,
}

impl PerSecond {
    /// Empty, for a run that started measuring at `start_ns` (clock::now_ns).
    pub fn new(start_ns: u64) -> PerSecond {
        PerSecond {
            start_ns,
            secs: vec![[0; NB]; MAX_SECONDS],
            max_us: vec![0; MAX_SECONDS],
        }
    }

    pub fn record(&mut self, sched_ns: u64, us: u64) {
        let s = (sched_ns.saturating_sub(self.start_ns) / 1_000_000_000) as usize;
        let s = s.min(MAX_SECONDS - 1);
        let b = &mut self.secs[s][bucket(us)];
        *b = b.saturating_add(1);
        let m = &mut self.max_us[s];
        *m = (*m).max(us.min(u32::MAX as u64) as u32);
    }

    /// Add `other` (of the same start) into this one.
    pub fn add(&mut self, other: &PerSecond) {
        for (a, b) in self.secs.iter_mut().zip(&other.secs) {
            for (x, y) in a.iter_mut().zip(b) {
                *x = x.saturating_add(*y);
            }
        }
        for (a, b) in self.max_us.iter_mut().zip(&other.max_us) {
            *a = (*a).max(*b);
        }
    }

    /// Seconds that saw an event, up to the last one.
    pub fn len(&self) -> usize {
        self.secs
            .iter()
            .rposition(|s| s.iter().any(|c| *c > 0))
            .map_or(0, |i| i + 1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// (count, p50, p99, max) of second `s`, in µs (a quantile is at most
    /// the max: the bucket's bound may pass it).
    pub fn second(&self, s: usize) -> (u64, Option<u64>, Option<u64>, u64) {
        let c = &self.secs[s];
        let max = u64::from(self.max_us[s]);
        (
            c.iter().map(|x| u64::from(*x)).sum(),
            quantile(c, 0.5).map(|v| v.min(max)),
            quantile(c, 0.99).map(|v| v.min(max)),
            max,
        )
    }
}

/// One session's latency.
pub struct SessionLatency {
    pub counts: [u16; NB],
    pub max_us: u32,
}

impl SessionLatency {
    pub fn new() -> SessionLatency {
        SessionLatency {
            counts: [0; NB],
            max_us: 0,
        }
    }

    pub fn record(&mut self, us: u64) {
        let b = &mut self.counts[bucket(us)];
        *b = b.saturating_add(1);
        self.max_us = self.max_us.max(us.min(u32::MAX as u64) as u32);
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().map(|c| u64::from(*c)).sum()
    }
}

impl Default for SessionLatency {
    fn default() -> Self {
        SessionLatency::new()
    }
}

/// One session's figures for the report: (bot, shard, deliveries, p50, p99, max) in µs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionRow {
    pub bot: u32,
    pub shard: u32,
    pub count: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

impl SessionRow {
    pub fn of(bot: u32, shard: u32, l: &SessionLatency) -> SessionRow {
        SessionRow {
            bot,
            shard,
            count: l.count(),
            p50_us: quantile(&l.counts, 0.5)
                .unwrap_or(0)
                .min(u64::from(l.max_us)),
            p99_us: quantile(&l.counts, 0.99)
                .unwrap_or(0)
                .min(u64::from(l.max_us)),
            max_us: u64::from(l.max_us),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_within_an_eighth_and_cover_their_range() {
        for us in [
            0u64,
            1,
            7,
            8,
            9,
            15,
            16,
            100,
            999,
            1_000,
            50_000,
            123_456,
            1 << 29,
        ] {
            let i = bucket(us);
            assert!(upper(i) >= us, "{us}: bucket {i} ends at {}", upper(i));
            assert!(
                i == 0 || upper(i - 1) < us,
                "{us}: bucket {i} starts above it"
            );
            assert!(
                upper(i) as f64 <= us as f64 * 1.125 + 1.0,
                "{us}: {}",
                upper(i)
            );
        }
        assert_eq!(bucket(u64::MAX), NB - 1);
        // Buckets are contiguous.
        for i in 1..NB {
            assert_eq!(bucket(upper(i - 1) + 1), i);
        }
    }

    #[test]
    fn seconds_are_by_schedule_and_quantiles_by_bucket() {
        let mut p = PerSecond::new(1_000_000_000);
        for k in 0..100 {
            p.record(1_000_000_000 + 10_000, 1_000 + k); // second 0
        }
        p.record(3_500_000_000, 200_000); // second 2
        p.record(0, 5); // before the start: second 0
        let mut q = PerSecond::new(1_000_000_000);
        q.record(3_000_000_000, 300_000);
        p.add(&q);
        assert_eq!(p.len(), 3);
        let (n, p50, p99, max) = p.second(0);
        assert_eq!(n, 101);
        assert!((1_000..=1_200).contains(&p50.unwrap()), "{p50:?}");
        assert!(p99.unwrap() >= 1_098 && max == 1_099 && p99.unwrap() <= max);
        assert_eq!(p.second(1).0, 0);
        let (n, _, _, max) = p.second(2);
        assert_eq!((n, max), (2, 300_000));
        let mut s = SessionLatency::new();
        s.record(10);
        s.record(20_000);
        let r = SessionRow::of(3, 0, &s);
        assert_eq!((r.count, r.max_us), (2, 20_000));
        assert_eq!(r.p99_us, 20_000, "at most the max");
    }
}
