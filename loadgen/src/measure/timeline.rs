//! `measure fanout --series-dir DIR`: the run second by second and session
//! by session (issue 42), so a tail can be placed: in a few sessions, in a
//! few seconds (one worker turn, a stall), or everywhere.
//!
//! Two views of each second `k` after the start of measuring:
//! - the **sampler's** (`Sampler`, wall clock, read every second while
//!   the producer runs and the fleet drains): events the producer handed
//!   over, deliveries the sessions read, node CPU;
//! - the **schedule's** (`series::PerSecond`, merged from the fleet at the
//!   end): the latency of the events *scheduled* in that second, and how
//!   many of them were read at all (`missing` = offered - read, offered =
//!   the producer's events of that second x deliveries per event).
//!
//! Written: `series.tsv`, `sessions.tsv` (worst p99 first), `report.json`
//! and `report.html` (the scenario reports' model and SVG charts); printed:
//! the seconds whose p99 broke the target and the spread across sessions
//! as `key value` lines, which scripts/side-by-side.sh reads. Bounded: one
//! row per second up to `series::MAX_SECONDS`, one per session.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::report::Report;
use crate::series::{PerSecond, SessionRow};

/// One wall-clock second of the run.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    pub events: u64,
    pub read: u64,
    pub node_cpu: Option<f64>,
}

/// Reads the run once a second.
pub struct Sampler {
    t0: Instant,
    next: usize,
    last: (u64, u64, Option<f64>),
    pub rows: Vec<Sample>,
}

impl Sampler {
    /// Starts at `t0` with the producer's events, the sessions' reads and
    /// the node's CPU seconds as they are then.
    pub fn new(t0: Instant, events: u64, read: u64, cpu: Option<f64>) -> Sampler {
        Sampler {
            t0,
            next: 1,
            last: (events, read, cpu),
            rows: Vec::new(),
        }
    }

    /// Takes a sample if a second boundary passed; `read` is called only then.
    pub fn poll(&mut self, read: impl FnOnce() -> (u64, u64, Option<f64>)) {
        if self.rows.len() >= crate::series::MAX_SECONDS
            || self.t0.elapsed() < Duration::from_secs(self.next as u64)
        {
            return;
        }
        let (e, r, c) = read();
        let (e0, r0, c0) = self.last;
        self.rows.push(Sample {
            events: e.saturating_sub(e0),
            read: r.saturating_sub(r0),
            node_cpu: c.zip(c0).map(|(a, b)| a - b),
        });
        self.last = (e, r, c);
        self.next += 1;
    }
}

/// A second of the joined table.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Row {
    pub second: usize,
    pub offered_events: u64,
    pub offered_deliveries: f64,
    pub read: u64,
    pub timed: u64,
    pub missing: f64,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: f64,
    pub node_cpu: Option<f64>,
}

/// Joins the sampler's seconds and the schedule's.
pub fn join(samples: &[Sample], series: Option<&PerSecond>, per_event: f64) -> Vec<Row> {
    let n = samples.len().max(series.map_or(0, |s| s.len()));
    (0..n)
        .map(|k| {
            let smp = samples.get(k).copied().unwrap_or_default();
            let (timed, p50, p99, max) = series
                .filter(|s| k < s.len())
                .map(|s| s.second(k))
                .unwrap_or((0, None, None, 0));
            let offered = smp.events as f64 * per_event;
            Row {
                second: k,
                offered_events: smp.events,
                offered_deliveries: offered,
                read: smp.read,
                timed,
                missing: (offered - timed as f64).max(0.0),
                p50_ms: p50.map(|u| u as f64 / 1e3),
                p99_ms: p99.map(|u| u as f64 / 1e3),
                max_ms: max as f64 / 1e3,
                node_cpu: smp.node_cpu,
            }
        })
        .collect()
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(|| "".into(), |v| format!("{v:.3}"))
}

/// `series.tsv`.
pub fn series_tsv(rows: &[Row]) -> String {
    let mut s = String::from(
        "second\toffered_events\toffered_deliveries\tread_deliveries\ttimed_deliveries\tmissing\tp50_ms\tp99_ms\tmax_ms\tnode_cpu_cores\n",
    );
    for r in rows {
        let _ = writeln!(
            s,
            "{}\t{}\t{:.0}\t{}\t{}\t{:.0}\t{}\t{}\t{:.3}\t{}",
            r.second,
            r.offered_events,
            r.offered_deliveries,
            r.read,
            r.timed,
            r.missing,
            opt(r.p50_ms),
            opt(r.p99_ms),
            r.max_ms,
            opt(r.node_cpu)
        );
    }
    s
}

/// `sessions.tsv`, worst p99 first.
pub fn sessions_tsv(rows: &mut [SessionRow]) -> String {
    rows.sort_by_key(|r| std::cmp::Reverse((r.p99_us, r.max_us)));
    let mut s = String::from("bot\tshard\tdeliveries\tp50_ms\tp99_ms\tmax_ms\n");
    for r in rows.iter() {
        let _ = writeln!(
            s,
            "{}\t{}\t{}\t{:.3}\t{:.3}\t{:.3}",
            r.bot,
            r.shard,
            r.count,
            r.p50_us as f64 / 1e3,
            r.p99_us as f64 / 1e3,
            r.max_us as f64 / 1e3
        );
    }
    s
}

/// The seconds whose p99 is above `target_ms`, as `k:p99` (at most 30).
pub fn over_target(rows: &[Row], target_ms: f64) -> Vec<String> {
    rows.iter()
        .filter(|r| r.p99_ms.is_some_and(|p| p > target_ms))
        .take(30)
        .map(|r| format!("{}:{:.1}", r.second, r.p99_ms.unwrap_or(0.0)))
        .collect()
}

/// Quantile of sorted values (nearest rank).
fn q(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// The sessions' own p99s and maxes, summarised: (p99 across sessions of
/// their p99, the worst p99, sessions whose max passed `target_ms`).
pub fn session_spread(rows: &[SessionRow], target_ms: f64) -> (f64, f64, f64, usize) {
    let mut p99: Vec<f64> = rows.iter().map(|r| r.p99_us as f64 / 1e3).collect();
    p99.sort_by(f64::total_cmp);
    let over = rows
        .iter()
        .filter(|r| r.max_us as f64 / 1e3 > target_ms)
        .count();
    (
        q(&p99, 0.5),
        q(&p99, 0.99),
        p99.last().copied().unwrap_or(0.0),
        over,
    )
}

/// Writes everything into `dir` and prints the summary lines.
#[allow(clippy::too_many_arguments)]
pub fn write(
    dir: &Path,
    command: &str,
    rows: &[Row],
    sessions: &mut [SessionRow],
    all: &hdrhistogram::Histogram<u64>,
    target_ms: f64,
) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("series.tsv"), series_tsv(rows))?;
    std::fs::write(dir.join("sessions.tsv"), sessions_tsv(sessions))?;
    let over = over_target(rows, target_ms);
    let (s50, s99, smax, s_over) = session_spread(sessions, target_ms);
    println!("series_seconds {}", rows.len());
    println!(
        "series_p99_over_target_secs {} (target {target_ms} ms; second:p99_ms) {}",
        rows.iter()
            .filter(|r| r.p99_ms.is_some_and(|p| p > target_ms))
            .count(),
        over.join(" ")
    );
    println!(
        "sessions_p99_ms p50 {s50:.2} p99 {s99:.2} max {smax:.2} sessions_max_over_target {s_over} of {}",
        sessions.len()
    );
    let mut rep = Report::new("measure fanout", command);
    rep.duration_s = rows.len() as f64;
    rep.add_histogram("all deliveries", all);
    let pts = |f: &dyn Fn(&Row) -> Option<f64>| -> Vec<(f64, f64)> {
        rows.iter()
            .filter_map(|r| f(r).map(|v| (r.second as f64, v)))
            .collect()
    };
    let series = |name: &str, unit: &str, points| crate::report::Series {
        name: name.into(),
        unit: unit.into(),
        points,
    };
    rep.series = vec![
        series(
            "offered deliveries/s",
            "deliveries/s",
            pts(&|r| Some(r.offered_deliveries)),
        ),
        series(
            "read deliveries/s",
            "deliveries/s",
            pts(&|r| Some(r.read as f64)),
        ),
        series(
            "missing (of events scheduled that second)",
            "deliveries/s",
            pts(&|r| Some(r.missing)),
        ),
        series("p50", "ms", pts(&|r| r.p50_ms)),
        series("p99", "ms", pts(&|r| r.p99_ms)),
        series("max", "ms", pts(&|r| Some(r.max_ms))),
        series("node CPU", "cores", pts(&|r| r.node_cpu)),
    ];
    let broke = rows
        .iter()
        .filter(|r| r.p99_ms.is_some_and(|p| p > target_ms))
        .count();
    rep.claim(
        "p99 of every second within the target",
        broke == 0,
        &format!("p99 <= {target_ms} ms in each second"),
        &if broke == 0 {
            "every second".into()
        } else {
            format!("{broke} seconds over: {}", over.join(" "))
        },
    );
    rep.passed = broke == 0;
    rep.figure("sessions", "sessions", sessions.len() as f64, "");
    rep.figure("sessions", "p50 of the sessions' p99", s50, "ms");
    rep.figure("sessions", "p99 of the sessions' p99", s99, "ms");
    rep.figure("sessions", "worst session's p99", smax, "ms");
    rep.figure(
        "sessions",
        "sessions whose max passed the target",
        s_over as f64,
        "",
    );
    rep.notes.push(
        "Latency per second is of the events scheduled in that second (receive time - scheduled \
         time), from log-linear buckets: each quantile is its bucket's upper bound, at most 12.5 % \
         above the true value. Missing = offered - read for that second's events."
            .into(),
    );
    rep.write_json(&dir.join("report.json"))?;
    rep.write_html(&dir.join("report.html"))?;
    println!("series_dir {}", dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_join_and_the_broken_ones_are_named() {
        let mut ps = PerSecond::new(1);
        for _ in 0..10 {
            ps.record(1, 1_000); // second 0, 1 ms
        }
        for _ in 0..10 {
            ps.record(1_000_000_001, 90_000); // second 1, 90 ms
        }
        let samples = [
            Sample {
                events: 5,
                read: 10,
                node_cpu: Some(0.5),
            },
            Sample {
                events: 6,
                read: 9,
                node_cpu: Some(0.9),
            },
        ];
        let rows = join(&samples, Some(&ps), 2.0);
        assert_eq!(rows.len(), 2);
        assert_eq!(
            (rows[0].offered_deliveries, rows[0].timed, rows[0].missing),
            (10.0, 10, 0.0)
        );
        assert_eq!((rows[1].offered_deliveries, rows[1].missing), (12.0, 2.0));
        assert_eq!(over_target(&rows, 50.0), ["1:90.0"], "p99 at most the max");
        let tsv = series_tsv(&rows);
        assert_eq!(tsv.lines().count(), 3);
        assert!(
            tsv.lines()
                .nth(2)
                .unwrap()
                .starts_with("1\t6\t12\t9\t10\t2\t"),
            "{tsv}"
        );
        let mut s = vec![
            SessionRow {
                bot: 1,
                shard: 0,
                count: 5,
                p50_us: 100,
                p99_us: 200,
                max_us: 300,
            },
            SessionRow {
                bot: 2,
                shard: 0,
                count: 5,
                p50_us: 100,
                p99_us: 90_000,
                max_us: 95_000,
            },
        ];
        let (_, _, worst, over) = session_spread(&s, 50.0);
        assert_eq!((worst, over), (90.0, 1));
        assert!(sessions_tsv(&mut s)
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("2\t"));
    }
}
