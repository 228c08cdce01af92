//! The data of a report ([`Report`]: claims, figures, latency phases,
//! time series, notes) and how a scenario fills it: [`Report::claim`],
//! [`Report::figure`], [`Report::add_histogram`] (a percentile curve of
//! [`CURVE_POINTS`] points); JSON out and back in (NaN written as null and
//! read back as NaN). The host line comes from /proc.

use serde::{Deserialize, Serialize};
use std::io;
use std::path::Path;

/// Results of one scenario run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Report {
    /// Scenario name: "steady", "storm", ...
    pub scenario: String,
    /// The command line that produced the report.
    pub command: String,
    /// Start of the run, Unix time in milliseconds.
    pub started_unix_ms: u64,
    /// Length of the run in seconds.
    #[serde(deserialize_with = "f64_or_null")]
    pub duration_s: f64,
    /// The machine, e.g. "2 cores, kernel 6.18" (see [`host_description`]).
    pub host: String,
    /// Overall verdict (normally: every claim passed).
    pub passed: bool,
    /// Each claim checked.
    pub claims: Vec<Claim>,
    /// Named scalar figures, shown in a table grouped by [`Figure::group`].
    pub figures: Vec<Figure>,
    /// Latency percentiles per phase.
    pub latency: Vec<LatencyPhase>,
    /// Time series for the line charts; series with the same unit share a chart.
    pub series: Vec<Series>,
    /// Free-form remarks.
    pub notes: Vec<String>,
}

/// One claim and its verdict.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Claim {
    pub name: String,
    pub passed: bool,
    /// What the claim requires, e.g. "p99 < 50 ms".
    pub expected: String,
    /// What was measured, e.g. "p99 = 12.3 ms".
    pub measured: String,
}

/// A named scalar figure.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Figure {
    pub name: String,
    #[serde(deserialize_with = "f64_or_null")]
    pub value: f64,
    pub unit: String,
    /// Column of the figures table, e.g. "throttle on"; "" for a single group.
    pub group: String,
}

/// Latency percentiles of one phase, in microseconds.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct LatencyPhase {
    pub phase: String,
    pub count: u64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    /// (percentile 0..100, value in us) for the percentile plot; percentiles
    /// increase, values never decrease.
    pub curve: Vec<(f64, u64)>,
}

/// A time series: (seconds since start, value).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Series {
    pub name: String,
    pub unit: String,
    #[serde(deserialize_with = "points_or_null")]
    pub points: Vec<(f64, f64)>,
}

/// Number of points in a percentile curve made by [`Report::add_histogram`].
pub const CURVE_POINTS: usize = 60;
/// Highest percentile of a curve made by [`Report::add_histogram`].
pub const CURVE_MAX_PERCENTILE: f64 = 99.999;

impl Report {
    /// A report for `scenario` started now, with `host` filled from /proc.
    pub fn new(scenario: &str, command: &str) -> Report {
        let started_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Report {
            scenario: scenario.to_string(),
            command: command.to_string(),
            started_unix_ms,
            host: host_description(),
            ..Report::default()
        }
    }

    /// Appends a claim and returns its verdict.
    pub fn claim(&mut self, name: &str, passed: bool, expected: &str, measured: &str) -> bool {
        self.claims.push(Claim {
            name: name.to_string(),
            passed,
            expected: expected.to_string(),
            measured: measured.to_string(),
        });
        passed
    }

    /// Appends a figure.
    pub fn figure(&mut self, group: &str, name: &str, value: f64, unit: &str) {
        self.figures.push(Figure {
            name: name.to_string(),
            value,
            unit: unit.to_string(),
            group: group.to_string(),
        });
    }

    /// Writes the report as pretty-printed JSON.
    pub fn write_json(&self, path: &Path) -> io::Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(io::Error::other)?;
        std::fs::write(path, text + "\n")
    }

    /// Reads a report written by [`Report::write_json`].
    pub fn read_json(path: &Path) -> io::Result<Report> {
        let text = std::fs::read_to_string(path)?;
        serde_json::from_str(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    /// Adds (or replaces) the latency phase `phase` from a histogram of
    /// microsecond values, with a curve of [`CURVE_POINTS`] points evenly
    /// spaced on a log scale of 1/(1-p), from p = 0 to p = 99.999 %.
    pub fn add_histogram(&mut self, phase: &str, h: &hdrhistogram::Histogram<u64>) {
        let count = h.len();
        let q = |quantile: f64| {
            if count == 0 {
                0
            } else {
                h.value_at_quantile(quantile)
            }
        };
        let mut curve = Vec::new();
        if count > 0 {
            // x = log10(1/(1-p)) from 0 to log10(1/(1-0.99999)) = 5.
            let x_max = (1.0 / (1.0 - CURVE_MAX_PERCENTILE / 100.0)).log10();
            let mut last = 0u64;
            for i in 0..CURVE_POINTS {
                let x = x_max * i as f64 / (CURVE_POINTS - 1) as f64;
                let p = if i == CURVE_POINTS - 1 {
                    CURVE_MAX_PERCENTILE / 100.0
                } else {
                    1.0 - 10f64.powf(-x)
                };
                let v = h.value_at_quantile(p).max(last);
                last = v;
                curve.push((round_to(p * 100.0, 6), v));
            }
        }
        let lp = LatencyPhase {
            phase: phase.to_string(),
            count,
            p50_us: q(0.50),
            p90_us: q(0.90),
            p99_us: q(0.99),
            p999_us: q(0.999),
            max_us: if count == 0 { 0 } else { h.max() },
            curve,
        };
        match self.latency.iter_mut().find(|l| l.phase == phase) {
            Some(existing) => *existing = lp,
            None => self.latency.push(lp),
        }
    }
}

/// "N cores, kernel X, M GiB RAM" from /proc (parts that cannot be read are left out).
pub fn host_description() -> String {
    let mut parts = Vec::new();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    if cores > 0 {
        parts.push(format!(
            "{} core{}",
            cores,
            if cores == 1 { "" } else { "s" }
        ));
    }
    if let Ok(cpu) = std::fs::read_to_string("/proc/cpuinfo") {
        if let Some(model) = cpu
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, m)| m.split_whitespace().collect::<Vec<_>>().join(" "))
        {
            if !model.is_empty() {
                parts.push(model);
            }
        }
    }
    if let Ok(rel) = std::fs::read_to_string("/proc/sys/kernel/osrelease") {
        let rel = rel.trim();
        if !rel.is_empty() {
            parts.push(format!("kernel {rel}"));
        }
    }
    if let Ok(mem) = std::fs::read_to_string("/proc/meminfo") {
        if let Some(kb) = mem
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
        {
            parts.push(format!("{:.1} GiB RAM", kb as f64 / (1024.0 * 1024.0)));
        }
    }
    parts.join(", ")
}

// JSON has no NaN or infinity: serde_json writes them as null. Read null
// back as NaN so a report with an undefined figure still round-trips.
fn f64_or_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

fn points_or_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<(f64, f64)>, D::Error> {
    let v = Vec::<(Option<f64>, Option<f64>)>::deserialize(d)?;
    Ok(v.into_iter()
        .map(|(x, y)| (x.unwrap_or(f64::NAN), y.unwrap_or(f64::NAN)))
        .collect())
}

fn round_to(v: f64, decimals: i32) -> f64 {
    let m = 10f64.powi(decimals);
    (v * m).round() / m
}
