//! A fixed-bucket latency histogram that any thread can record into without
//! locks, rendered in Prometheus format.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Upper bounds in milliseconds. 1.5 s: the revocation promise
/// (`gatewayd_revocation_apply_seconds`, about a second) is judged between
/// 1 s and 2 s.
const BOUNDS_MS: [u64; 15] = [
    1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 1500, 2000, 5000, 10_000, 60_000,
];

#[derive(Default)]
pub struct Histogram {
    buckets: [AtomicU64; BOUNDS_MS.len() + 1],
    sum_us: AtomicU64,
}

impl Histogram {
    pub fn record_us(&self, us: u64) {
        let ms = us.div_ceil(1000);
        let i = BOUNDS_MS
            .iter()
            .position(|b| ms <= *b)
            .unwrap_or(BOUNDS_MS.len());
        self.buckets[i].fetch_add(1, Relaxed);
        self.sum_us.fetch_add(us, Relaxed);
    }

    pub fn render(&self, name: &str, help: &str, out: &mut String) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        Histogram::render_series(&[self], name, "", out);
    }

    /// The series of one labelled member of a family (its `# HELP` and
    /// `# TYPE` written by the caller), summed over `parts` (e.g. workers);
    /// `labels` is `k="v",...` or empty.
    pub fn render_series(parts: &[&Histogram], name: &str, labels: &str, out: &mut String) {
        let sep = if labels.is_empty() { "" } else { "," };
        let load = |f: &dyn Fn(&Histogram) -> u64| -> u64 { parts.iter().map(|h| f(h)).sum() };
        let mut cum = 0;
        for (i, b) in BOUNDS_MS.iter().enumerate() {
            cum += load(&|h| h.buckets[i].load(Relaxed));
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{}\"}} {cum}",
                *b as f64 / 1000.0
            );
        }
        cum += load(&|h| h.buckets[BOUNDS_MS.len()].load(Relaxed));
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {cum}");
        let braces = |s: &str| {
            if s.is_empty() {
                String::new()
            } else {
                format!("{{{s}}}")
            }
        };
        let _ = writeln!(
            out,
            "{name}_sum{} {:.6}",
            braces(labels),
            load(&|h| h.sum_us.load(Relaxed)) as f64 / 1e6
        );
        // `_count` is the +Inf bucket as read above, not a separate counter:
        // a record landing between two loads must not make them disagree
        // (Prometheus requires `le="+Inf"` == `_count`).
        let _ = writeln!(out, "{name}_count{} {cum}", braces(labels));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative() {
        let h = Histogram::default();
        h.record_us(500);
        h.record_us(3_000);
        h.record_us(1_200_000);
        h.record_us(90_000_000);
        let mut out = String::new();
        h.render("x_seconds", "test", &mut out);
        assert!(out.contains("x_seconds_bucket{le=\"0.001\"} 1"));
        assert!(out.contains("x_seconds_bucket{le=\"0.005\"} 2"));
        assert!(out.contains("x_seconds_bucket{le=\"1\"} 2"));
        assert!(out.contains("x_seconds_bucket{le=\"1.5\"} 3"));
        assert!(out.contains("x_seconds_bucket{le=\"60\"} 3"));
        assert!(out.contains("x_seconds_bucket{le=\"+Inf\"} 4"));
        assert!(out.contains("x_seconds_count 4"));
    }
}
