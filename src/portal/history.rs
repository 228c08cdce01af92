//! The sessions-over-time history the health view shows (`History`): the
//! live sessions per minute of each tracked application, a ring of
//! `MINUTES`. A leaf: `health.rs` samples into it and reads it, `Ctx`
//! holds it.

use std::collections::HashMap;

use crate::worker::app_stats::SLOTS;

/// Minutes of sessions history per application (a ring).
pub const MINUTES: usize = 60;

/// Live sessions per minute (the highest sample of the minute), for at
/// most `SLOTS` applications (those `AppTable` tracks): 480 bytes each.
#[derive(Default)]
pub struct History {
    pub(super) by_app: HashMap<u64, [(u32, u32); MINUTES]>,
    pub(super) scratch: Vec<u64>,
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
}
