//! The sessions-over-time history the health view shows (`History`): the
//! live sessions per minute of each tracked application, a ring of
//! `MINUTES`, and the node's delivery latency per minute (the workers'
//! end-to-end histograms summed, as they stood at the first sample of each
//! minute: a minute's figures are the difference to the next, so to the
//! 10 s of the sampling). A leaf: `health.rs` samples into it and reads it,
//! `Ctx` holds it.

use std::collections::HashMap;

use crate::delivery::latency::{self, BUCKETS};
use crate::worker::app_stats::SLOTS;

/// Minutes of sessions history per application (a ring).
pub const MINUTES: usize = 60;

/// Live sessions per minute (the highest sample of the minute), for at
/// most `SLOTS` applications (those `AppTable` tracks): 480 bytes each.
#[derive(Default)]
pub struct History {
    pub(super) by_app: HashMap<u64, [(u32, u32); MINUTES]>,
    pub(super) scratch: Vec<u64>,
    /// (Unix minute, the delivery buckets at its first sample), a ring of
    /// one more than `MINUTES` so the oldest minute has its end.
    delivery: Vec<(u32, [u64; BUCKETS])>,
}

/// One minute of deliveries: how many, and p50 and p99 (ms, estimated
/// inside their buckets).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DeliveryMinute {
    pub minute: u32,
    pub deliveries: u64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
}

impl History {
    pub(super) fn record(&mut self, app: u64, minute: u32, live: u32) {
        if self.by_app.len() >= SLOTS && !self.by_app.contains_key(&app) {
            return;
        }
        let ring = self.by_app.entry(app).or_insert([(0, 0); MINUTES]);
        let slot = &mut ring[minute as usize % MINUTES];
        if slot.0 != minute {
            *slot = (minute, live);
        } else {
            slot.1 = slot.1.max(live);
        }
    }

    /// The node's delivery buckets (summed over workers) at a sample.
    pub(super) fn record_delivery(&mut self, minute: u32, counts: [u64; BUCKETS]) {
        if self.delivery.is_empty() {
            self.delivery = vec![(0, [0; BUCKETS]); MINUTES + 1];
        }
        let slot = &mut self.delivery[minute as usize % (MINUTES + 1)];
        if slot.0 != minute {
            *slot = (minute, counts);
        }
    }

    /// The last hour of delivery latency, oldest first; `now` is the
    /// buckets as they are (the current minute's end). Minutes without
    /// deliveries are left out.
    pub(super) fn delivery_series(
        &self,
        now_minute: u32,
        now: &[u64; BUCKETS],
    ) -> Vec<DeliveryMinute> {
        let at = |m: u32| {
            self.delivery
                .get(m as usize % (MINUTES + 1))
                .filter(|s| s.0 == m && m != 0)
                .map(|s| s.1)
        };
        let mut out = Vec::new();
        for back in (0..MINUTES as u32).rev() {
            let m = now_minute.saturating_sub(back);
            let Some(start) = at(m) else { continue };
            let end = if m == now_minute {
                Some(*now)
            } else {
                at(m + 1)
            };
            let Some(end) = end else { continue };
            let d: [u64; BUCKETS] = std::array::from_fn(|i| end[i].saturating_sub(start[i]));
            let n: u64 = d.iter().sum();
            if n == 0 {
                continue;
            }
            out.push(DeliveryMinute {
                minute: m,
                deliveries: n,
                p50_ms: latency::quantile_us(&d, 0.5).map(|u| u / 1000.0),
                p99_ms: latency::quantile_us(&d, 0.99).map(|u| u / 1000.0),
            });
        }
        out
    }

    pub(super) fn series(&self, app: u64, now_minute: u32) -> Vec<(u32, u32)> {
        let mut out: Vec<(u32, u32)> = self
            .by_app
            .get(&app)
            .map(|r| {
                r.iter()
                    .copied()
                    .filter(|(m, _)| *m != 0 && now_minute.saturating_sub(*m) < MINUTES as u32)
                    .collect()
            })
            .unwrap_or_default();
        out.sort_unstable();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_keeps_the_highest_sample_of_a_minute_for_an_hour() {
        let mut h = History::default();
        h.record(1, 100, 3);
        h.record(1, 100, 5);
        h.record(1, 100, 4);
        h.record(1, 101, 2);
        h.record(2, 101, 9);
        assert_eq!(h.series(1, 101), [(100, 5), (101, 2)]);
        assert_eq!(h.series(1, 100 + MINUTES as u32), [(101, 2)]);
        assert!(h.series(3, 101).is_empty());
    }

    #[test]
    fn delivery_minutes_are_the_differences_of_the_samples() {
        let mut h = History::default();
        let mut c = [0u64; BUCKETS];
        h.record_delivery(100, c);
        c[5] = 10; // (0.5, 1] ms
        h.record_delivery(100, c); // not the minute's first sample
        h.record_delivery(101, c);
        c[5] = 12;
        c[12] = 2; // (100, 250] ms
        let s = h.delivery_series(101, &c);
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].minute, s[0].deliveries), (100, 10));
        assert_eq!(s[0].p50_ms, Some(0.75));
        assert_eq!((s[1].minute, s[1].deliveries), (101, 4));
        assert!(s[1].p99_ms.unwrap() > 100.0);
        // Past the hour the minute is gone.
        assert!(h.delivery_series(100 + MINUTES as u32 + 1, &c).is_empty());
    }
}
