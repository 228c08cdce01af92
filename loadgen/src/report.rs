//! The result of one scenario run: a JSON file, a self-contained HTML page
//! (inline SVG charts drawn here, no script, no external assets) and a
//! one-screen text summary.
//!
//! A scenario fills a [`Report`] (claims, figures, latency histograms via
//! [`Report::add_histogram`], time series) and writes it with
//! [`Report::write_json`] and [`Report::write_html`]. Latencies are in
//! microseconds everywhere in the data; the HTML shows milliseconds.

use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
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

/// Lines of [`Report::text_summary`] never exceed this many characters.
pub const SUMMARY_WIDTH: usize = 100;
/// [`Report::text_summary`] never has more lines than this.
pub const SUMMARY_MAX_LINES: usize = 39;

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

    /// Writes the self-contained HTML page (see [`Report::html`]).
    pub fn write_html(&self, path: &Path) -> io::Result<()> {
        std::fs::write(path, self.html())
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

    /// A summary that fits one screen: at most [`SUMMARY_MAX_LINES`] lines
    /// of at most [`SUMMARY_WIDTH`] characters. Long sections are cut with
    /// a "... N more" line; failed claims are listed first.
    pub fn text_summary(&self) -> String {
        let mut head = vec![
            format!(
                "== {} : {} ({:.1} s)",
                self.scenario,
                if self.passed { "PASS" } else { "FAIL" },
                self.duration_s
            ),
            format!("command: {}", self.command),
        ];
        if !self.host.is_empty() {
            head.push(format!("host: {}", self.host));
        }

        let mut claims: Vec<&Claim> = self.claims.iter().filter(|c| !c.passed).collect();
        claims.extend(self.claims.iter().filter(|c| c.passed));
        let claim_lines: Vec<String> = claims
            .iter()
            .map(|c| {
                format!(
                    "  [{}] {}: {} (expected {})",
                    if c.passed { "ok" } else { "FAIL" },
                    c.name,
                    c.measured,
                    c.expected
                )
            })
            .collect();

        let figure_lines: Vec<String> = self
            .figures
            .iter()
            .map(|f| {
                let group = if f.group.is_empty() {
                    String::new()
                } else {
                    format!("[{}] ", f.group)
                };
                format!("  {}{}: {} {}", group, f.name, fmt_value(f.value), f.unit)
                    .trim_end()
                    .to_string()
            })
            .collect();

        let mut latency_lines: Vec<String> = self
            .latency
            .iter()
            .map(|l| {
                format!(
                    "  {:<18} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}",
                    clip(&l.phase, 18),
                    l.count,
                    fmt_ms(l.p50_us),
                    fmt_ms(l.p90_us),
                    fmt_ms(l.p99_us),
                    fmt_ms(l.p999_us),
                    fmt_ms(l.max_us)
                )
            })
            .collect();
        if !latency_lines.is_empty() {
            latency_lines.insert(
                0,
                format!(
                    "  {:<18} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}",
                    "phase (ms)", "count", "p50", "p90", "p99", "p99.9", "max"
                ),
            );
        }

        let note_lines: Vec<String> = self
            .notes
            .iter()
            .map(|n| format!("  {}", n.replace(['\n', '\r'], " ")))
            .collect();

        // Sections: (title, lines). Each non-empty section costs one title
        // line plus its rows; rows are shared out so the total fits.
        let sections: Vec<(&str, Vec<String>)> = vec![
            ("claims:", claim_lines),
            ("figures:", figure_lines),
            ("latency:", latency_lines),
            ("notes:", note_lines),
        ];
        let sections: Vec<(&str, Vec<String>)> = sections
            .into_iter()
            .filter(|(_, l)| !l.is_empty())
            .collect();
        let mut budget = SUMMARY_MAX_LINES.saturating_sub(head.len() + sections.len());
        // Give each section its rows in turn, one at a time, so a long
        // section cannot starve the others.
        let mut shown = vec![0usize; sections.len()];
        loop {
            let mut progressed = false;
            for (i, (_, lines)) in sections.iter().enumerate() {
                if budget == 0 {
                    break;
                }
                if shown[i] < lines.len() {
                    shown[i] += 1;
                    budget -= 1;
                    progressed = true;
                }
            }
            if !progressed || budget == 0 {
                break;
            }
        }
        // A cut section shows one row fewer plus a "... N more" line.
        let mut out = head;
        for (i, (title, lines)) in sections.iter().enumerate() {
            out.push(title.to_string());
            if shown[i] >= lines.len() {
                out.extend(lines.iter().cloned());
            } else {
                let keep = shown[i].saturating_sub(1);
                out.extend(lines[..keep].iter().cloned());
                out.push(format!("  ... {} more", lines.len() - keep));
            }
        }
        let mut s = String::new();
        for line in out.iter().take(SUMMARY_MAX_LINES) {
            s.push_str(&clip(line, SUMMARY_WIDTH));
            s.push('\n');
        }
        s
    }

    /// The self-contained HTML page: header, claims, figures, latency
    /// table, the latency percentile plot and one line chart per unit.
    pub fn html(&self) -> String {
        let mut h = String::with_capacity(64 * 1024);
        let verdict = if self.passed { "PASS" } else { "FAIL" };
        let _ = write!(
            h,
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>loadgen {} : {}</title>\n<style>{}</style>\n</head>\n<body>\n",
            esc(&self.scenario),
            verdict,
            CSS
        );
        let _ = write!(
            h,
            "<h1>loadgen <code>{}</code> <span class=\"{}\">{}</span></h1>\n<table class=\"meta\">\n",
            esc(&self.scenario),
            if self.passed { "pass" } else { "fail" },
            verdict
        );
        let _ = writeln!(
            h,
            "<tr><th>command</th><td><code>{}</code></td></tr>",
            esc(&self.command)
        );
        let _ = writeln!(h, "<tr><th>host</th><td>{}</td></tr>", esc(&self.host));
        let _ = writeln!(
            h,
            "<tr><th>started</th><td>{} (Unix ms {})</td></tr>",
            esc(&utc_string(self.started_unix_ms)),
            self.started_unix_ms
        );
        let _ = writeln!(
            h,
            "<tr><th>duration</th><td>{:.1} s</td></tr>\n</table>",
            self.duration_s
        );

        // Claims.
        h.push_str("<h2>Claims</h2>\n");
        if self.claims.is_empty() {
            h.push_str("<p>No claims checked.</p>\n");
        } else {
            h.push_str("<table>\n<tr><th>claim</th><th>verdict</th><th>expected</th><th>measured</th></tr>\n");
            for c in &self.claims {
                let _ = writeln!(
                    h,
                    "<tr><td>{}</td><td class=\"{}\">{}</td><td>{}</td><td>{}</td></tr>",
                    esc(&c.name),
                    if c.passed { "pass" } else { "fail" },
                    if c.passed { "pass" } else { "FAIL" },
                    esc(&c.expected),
                    esc(&c.measured)
                );
            }
            h.push_str("</table>\n");
        }

        // Figures: rows = names, columns = groups (side by side).
        if !self.figures.is_empty() {
            h.push_str("<h2>Figures</h2>\n");
            let mut groups: Vec<&str> = Vec::new();
            let mut names: Vec<&str> = Vec::new();
            for f in &self.figures {
                if !groups.contains(&f.group.as_str()) {
                    groups.push(&f.group);
                }
                if !names.contains(&f.name.as_str()) {
                    names.push(&f.name);
                }
            }
            h.push_str("<table>\n<tr><th>figure</th>");
            for g in &groups {
                let _ = write!(
                    h,
                    "<th>{}</th>",
                    if g.is_empty() {
                        "value".to_string()
                    } else {
                        esc(g)
                    }
                );
            }
            h.push_str("</tr>\n");
            for n in &names {
                let _ = write!(h, "<tr><td>{}</td>", esc(n));
                for g in &groups {
                    let cells: Vec<String> = self
                        .figures
                        .iter()
                        .filter(|f| f.name == *n && f.group == *g)
                        .map(|f| {
                            format!("{} {}", fmt_value(f.value), esc(&f.unit))
                                .trim_end()
                                .to_string()
                        })
                        .collect();
                    let _ = write!(h, "<td class=\"num\">{}</td>", cells.join("<br>"));
                }
                h.push_str("</tr>\n");
            }
            h.push_str("</table>\n");
        }

        // Latency.
        if !self.latency.is_empty() {
            h.push_str("<h2>Latency</h2>\n<table>\n<tr><th>phase</th><th>count</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>p99.9 ms</th><th>max ms</th></tr>\n");
            for l in &self.latency {
                let _ = writeln!(
                    h,
                    "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>",
                    esc(&l.phase),
                    l.count,
                    fmt_ms(l.p50_us),
                    fmt_ms(l.p90_us),
                    fmt_ms(l.p99_us),
                    fmt_ms(l.p999_us),
                    fmt_ms(l.max_us)
                );
            }
            h.push_str("</table>\n");
            h.push_str(&percentile_svg(&self.latency));
        }

        // Time series, one chart per unit.
        if !self.series.is_empty() {
            h.push_str("<h2>Over time</h2>\n");
            let mut units: Vec<&str> = Vec::new();
            for s in &self.series {
                if !units.contains(&s.unit.as_str()) {
                    units.push(&s.unit);
                }
            }
            for u in units {
                let group: Vec<&Series> = self.series.iter().filter(|s| s.unit == u).collect();
                let title = if group.len() == 1 {
                    if u.is_empty() {
                        group[0].name.clone()
                    } else {
                        format!("{} ({})", group[0].name, u)
                    }
                } else {
                    let names: Vec<&str> = group.iter().map(|s| s.name.as_str()).collect();
                    let names = names.join(", ");
                    match (names.chars().count() <= 60, u.is_empty()) {
                        (true, true) => names,
                        (true, false) => format!("{names} ({u})"),
                        (false, true) => "values".to_string(),
                        (false, false) => u.to_string(),
                    }
                };
                h.push_str(&series_svg(&title, u, &group));
            }
        }

        if !self.notes.is_empty() {
            h.push_str("<h2>Notes</h2>\n<ul>\n");
            for n in &self.notes {
                let _ = writeln!(h, "<li>{}</li>", esc(n));
            }
            h.push_str("</ul>\n");
        }
        h.push_str("</body>\n</html>\n");
        h
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

const CSS: &str = "body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1000px;color:#222;padding:0 1em}\
table{border-collapse:collapse;margin:.5em 0 1em}th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}\
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}\
.pass{color:#1a7f37;font-weight:bold}.fail{color:#c62828;font-weight:bold}\
table.meta th{width:7em}code{font-size:90%;word-break:break-all}svg{display:block;margin:.5em 0 1.5em;max-width:100%;height:auto}\
h1 span{margin-left:.5em}";

const PALETTE: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

// Chart geometry (SVG user units).
const W: f64 = 900.0;
const H: f64 = 340.0;
const LEFT: f64 = 70.0;
const TOP: f64 = 36.0;
const PLOT_W: f64 = 600.0;
const PLOT_H: f64 = 250.0;
const LEGEND_X: f64 = LEFT + PLOT_W + 20.0;

/// Escapes text for HTML and SVG (element content and attribute values).
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c if c.is_control() && c != '\n' && c != '\t' => o.push('\u{fffd}'),
            c => o.push(c),
        }
    }
    o
}

/// Tick positions covering [lo, hi] with a 1/2/5 x 10^k step: (lo', hi', ticks).
fn nice_ticks(lo: f64, hi: f64, target: usize) -> (f64, f64, Vec<f64>) {
    let (mut lo, mut hi) = if lo.is_finite() && hi.is_finite() {
        (lo, hi)
    } else {
        (0.0, 1.0)
    };
    if hi < lo {
        std::mem::swap(&mut lo, &mut hi);
    }
    if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
        let pad = if hi == 0.0 { 1.0 } else { hi.abs() * 0.1 };
        lo -= if lo == 0.0 { 0.0 } else { pad };
        hi += pad;
    }
    let raw = (hi - lo) / target.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let lo2 = (lo / step).floor() * step;
    let hi2 = (hi / step).ceil() * step;
    let n = ((hi2 - lo2) / step).round() as usize;
    let ticks = (0..=n.min(50)).map(|i| lo2 + step * i as f64).collect();
    (lo2, hi2, ticks)
}

/// A tick label with as many decimals as the step needs.
fn tick_label(v: f64, step: f64) -> String {
    let decimals = if step > 0.0 {
        (-step.log10().floor()).clamp(0.0, 6.0) as usize
    } else {
        0
    };
    let s = format!("{:.*}", decimals, v);
    if s.starts_with('-') && s.trim_start_matches(['-', '0', '.']).is_empty() {
        s[1..].to_string()
    } else {
        s
    }
}

fn svg_open(out: &mut String, title: &str) {
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" font-family=\"sans-serif\" font-size=\"12\" role=\"img\" aria-label=\"{t}\">\n<title>{t}</title>\n<rect x=\"0\" y=\"0\" width=\"{W}\" height=\"{H}\" fill=\"#fff\"/>\n<text x=\"{cx}\" y=\"20\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">{t}</text>\n",
        t = esc(title),
        cx = LEFT + PLOT_W / 2.0
    );
}

/// Y axis: grid lines, tick labels and a rotated label.
fn y_axis(out: &mut String, lo: f64, hi: f64, ticks: &[f64], label: &str) {
    let step = if ticks.len() > 1 {
        ticks[1] - ticks[0]
    } else {
        1.0
    };
    for &t in ticks {
        let y = TOP + PLOT_H - (t - lo) / (hi - lo) * PLOT_H;
        let _ = write!(
            out,
            "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{x2}\" y2=\"{y:.1}\" stroke=\"#e4e4e4\"/>\n<text x=\"{tx}\" y=\"{ty:.1}\" text-anchor=\"end\">{l}</text>\n",
            x2 = LEFT + PLOT_W,
            tx = LEFT - 6.0,
            ty = y + 4.0,
            l = esc(&tick_label(t, step))
        );
    }
    let cy = TOP + PLOT_H / 2.0;
    let _ = writeln!(
        out,
        "<text x=\"16\" y=\"{cy}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {cy})\">{}</text>",
        esc(label)
    );
}

/// X axis tick at data position `x` (already mapped to SVG units).
fn x_tick(out: &mut String, sx: f64, label: &str) {
    let yb = TOP + PLOT_H;
    let _ = write!(
        out,
        "<line x1=\"{sx:.1}\" y1=\"{TOP}\" x2=\"{sx:.1}\" y2=\"{yb}\" stroke=\"#e4e4e4\"/>\n<line x1=\"{sx:.1}\" y1=\"{yb}\" x2=\"{sx:.1}\" y2=\"{y2}\" stroke=\"#444\"/>\n<text x=\"{sx:.1}\" y=\"{ty}\" text-anchor=\"middle\">{l}</text>\n",
        y2 = yb + 5.0,
        ty = yb + 19.0,
        l = esc(label)
    );
}

fn frame_and_xlabel(out: &mut String, label: &str) {
    let _ = write!(
        out,
        "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{PLOT_W}\" height=\"{PLOT_H}\" fill=\"none\" stroke=\"#444\"/>\n<text x=\"{cx}\" y=\"{ly}\" text-anchor=\"middle\">{l}</text>\n",
        cx = LEFT + PLOT_W / 2.0,
        ly = TOP + PLOT_H + 40.0,
        l = esc(label)
    );
}

/// Legend rows fit beside the plot; further series are summarised.
const LEGEND_ROWS: usize = 12;

fn legend(out: &mut String, i: usize, name: &str, total: usize) {
    let y = TOP + 8.0 + 20.0 * i as f64;
    if i >= LEGEND_ROWS || (i == LEGEND_ROWS - 1 && total > LEGEND_ROWS) {
        if i == LEGEND_ROWS - 1 {
            let _ = writeln!(
                out,
                "<text x=\"{LEGEND_X}\" y=\"{ty}\">… {n} more</text>",
                ty = y + 4.0,
                n = total - i
            );
        }
        return;
    }
    let color = PALETTE[i % PALETTE.len()];
    let _ = writeln!(
        out,
        "<g><title>{full}</title><line x1=\"{LEGEND_X}\" y1=\"{y}\" x2=\"{x2}\" y2=\"{y}\" stroke=\"{color}\" stroke-width=\"3\"/><text x=\"{tx}\" y=\"{ty}\">{l}</text></g>",
        full = esc(name),
        x2 = LEGEND_X + 22.0,
        tx = LEGEND_X + 28.0,
        ty = y + 4.0,
        l = esc(&clip(name, 24))
    );
}

fn polyline(out: &mut String, i: usize, pts: &[(f64, f64)]) {
    if pts.is_empty() {
        return;
    }
    let color = PALETTE[i % PALETTE.len()];
    if pts.len() == 1 {
        let _ = writeln!(
            out,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{color}\"/>",
            pts[0].0, pts[0].1
        );
        return;
    }
    let mut p = String::with_capacity(pts.len() * 14);
    for (x, y) in pts {
        let _ = write!(p, "{x:.1},{y:.1} ");
    }
    let _ = writeln!(
        out,
        "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" stroke-linejoin=\"round\" points=\"{}\"/>",
        p.trim_end()
    );
}

/// Percentile plot: x = log10(1/(1-p)), y = latency in ms, one line per phase.
fn percentile_svg(phases: &[LatencyPhase]) -> String {
    let mut out = String::new();
    svg_open(&mut out, "Latency by percentile");
    let x_of = |pct: f64| -> f64 {
        let p = (pct / 100.0).clamp(0.0, CURVE_MAX_PERCENTILE / 100.0);
        (1.0 / (1.0 - p)).log10()
    };
    let x_max = x_of(CURVE_MAX_PERCENTILE);
    let y_max_ms = phases
        .iter()
        .flat_map(|l| l.curve.iter().map(|(_, v)| *v as f64 / 1000.0))
        .fold(0.0f64, f64::max);
    let (lo, hi, ticks) = nice_ticks(0.0, if y_max_ms > 0.0 { y_max_ms } else { 1.0 }, 5);
    y_axis(&mut out, lo, hi, &ticks, "latency (ms)");
    for (pct, label) in [
        (0.0, "0%"),
        (50.0, "50%"),
        (90.0, "90%"),
        (99.0, "99%"),
        (99.9, "99.9%"),
        (99.99, "99.99%"),
        (99.999, "99.999%"),
    ] {
        x_tick(&mut out, LEFT + x_of(pct) / x_max * PLOT_W, label);
    }
    frame_and_xlabel(&mut out, "percentile");
    for (i, l) in phases.iter().enumerate() {
        let pts: Vec<(f64, f64)> = l
            .curve
            .iter()
            .map(|(p, v)| {
                (
                    LEFT + x_of(*p) / x_max * PLOT_W,
                    TOP + PLOT_H - ((*v as f64 / 1000.0) - lo) / (hi - lo) * PLOT_H,
                )
            })
            .collect();
        polyline(&mut out, i, &pts);
        legend(&mut out, i, &l.phase, phases.len());
    }
    out.push_str("</svg>\n");
    out
}

/// Line chart of several series sharing one unit; x = seconds since start.
fn series_svg(title: &str, unit: &str, series: &[&Series]) -> String {
    let mut out = String::new();
    svg_open(&mut out, title);
    let finite = |(x, y): &&(f64, f64)| x.is_finite() && y.is_finite();
    let all: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().filter(finite).copied())
        .collect();
    let (mut x0, mut x1, mut y0, mut y1) = (
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::INFINITY,
        f64::NEG_INFINITY,
    );
    for (x, y) in &all {
        x0 = x0.min(*x);
        x1 = x1.max(*x);
        y0 = y0.min(*y);
        y1 = y1.max(*y);
    }
    if all.is_empty() {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    // Start both axes at zero when the data is non-negative: honest scales.
    if x0 >= 0.0 {
        x0 = 0.0;
    }
    if y0 >= 0.0 {
        y0 = 0.0;
    }
    let (ylo, yhi, yticks) = nice_ticks(y0, y1, 5);
    let (xlo, xhi, xticks) = nice_ticks(x0, x1, 8);
    y_axis(
        &mut out,
        ylo,
        yhi,
        &yticks,
        if unit.is_empty() { "value" } else { unit },
    );
    let xstep = if xticks.len() > 1 {
        xticks[1] - xticks[0]
    } else {
        1.0
    };
    let sx = |x: f64| LEFT + (x - xlo) / (xhi - xlo) * PLOT_W;
    let sy = |y: f64| TOP + PLOT_H - (y - ylo) / (yhi - ylo) * PLOT_H;
    for &t in &xticks {
        x_tick(&mut out, sx(t), &tick_label(t, xstep));
    }
    frame_and_xlabel(&mut out, "seconds since start");
    if all.is_empty() {
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#888\">no data</text>",
            LEFT + PLOT_W / 2.0,
            TOP + PLOT_H / 2.0
        );
    }
    for (i, s) in series.iter().enumerate() {
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter(finite)
            .map(|(x, y)| (sx(*x), sy(*y)))
            .collect();
        polyline(&mut out, i, &pts);
        legend(&mut out, i, &s.name, series.len());
    }
    out.push_str("</svg>\n");
    out
}

/// Microseconds as milliseconds with 3 significant-ish decimals.
fn fmt_ms(us: u64) -> String {
    let ms = us as f64 / 1000.0;
    if ms >= 100.0 {
        format!("{ms:.1}")
    } else {
        format!("{ms:.3}")
    }
}

/// A figure value: integers plain, others with a sensible number of decimals.
fn fmt_value(v: f64) -> String {
    if !v.is_finite() {
        return format!("{v}");
    }
    if v.fract() == 0.0 && v.abs() < 1e15 {
        return format!("{}", v as i64);
    }
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
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

/// At most `n` characters, ending with "…" when cut.
fn clip(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut o: String = s.chars().take(n.saturating_sub(1)).collect();
        o.push('…');
        o
    }
}

/// "YYYY-MM-DD HH:MM:SS UTC" from Unix milliseconds.
fn utc_string(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    format!(
        "{:04}-{:02}-{:02} {:02}:{:02}:{:02} UTC",
        y,
        m,
        d,
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::Histogram;

    fn hist() -> Histogram<u64> {
        let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
        // A long tail: mostly ~1 ms, some 10 ms, a few 100 ms, one 2 s.
        for i in 0..100_000u64 {
            let v = match i % 1000 {
                0 => 100_000 + i,
                1..=9 => 10_000 + i % 500,
                _ => 800 + i % 400,
            };
            h.record(v).unwrap();
        }
        h.record(2_000_000).unwrap();
        h
    }

    fn sample() -> Report {
        let mut r = Report {
            scenario: "storm".into(),
            command: "loadgen scenario storm --sessions 40000".into(),
            started_unix_ms: 1_700_000_000_000,
            duration_s: 93.25,
            host: "2 cores, kernel 6.18".into(),
            passed: false,
            ..Report::default()
        };
        r.claim("all sessions back", true, "100 %", "100 %");
        r.claim("registry p99 during storm", false, "< 50 ms", "72.1 ms");
        r.figure("throttle on", "time until all back p99", 12.5, "s");
        r.figure("throttle off", "time until all back p99", 31.25, "s");
        r.figure("throttle on", "identifies refused", 0.0, "");
        r.figure("throttle off", "identifies refused", 1234.0, "");
        r.add_histogram("steady", &hist());
        let mut h2 = Histogram::<u64>::new(3).unwrap();
        for v in [500u64, 700, 900, 40_000] {
            h2.record(v).unwrap();
        }
        r.add_histogram("storm", &h2);
        r.series.push(Series {
            name: "sessions connected".into(),
            unit: "sessions".into(),
            points: (0..50).map(|i| (i as f64, (i * 800) as f64)).collect(),
        });
        r.series.push(Series {
            name: "gatewayd-a RSS".into(),
            unit: "MiB".into(),
            points: (0..50)
                .map(|i| (i as f64 * 2.0, 100.0 + i as f64))
                .collect(),
        });
        r.series.push(Series {
            name: "gatewayd-b RSS".into(),
            unit: "MiB".into(),
            points: (0..50)
                .map(|i| (i as f64 * 2.0, 90.0 + 0.5 * i as f64))
                .collect(),
        });
        r.notes
            .push("killed gatewayd-a at 30 s <script>alert(1)</script>".into());
        r
    }

    #[test]
    fn json_round_trip() {
        let r = sample();
        let dir = std::env::temp_dir().join(format!("loadgen-report-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("r.json");
        r.write_json(&path).unwrap();
        let back = Report::read_json(&path).unwrap();
        assert_eq!(back, r);
        // Plain serde too.
        let text = std::fs::read_to_string(&path).unwrap();
        let back2: Report = serde_json::from_str(&text).unwrap();
        assert_eq!(back2, r);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn html_has_svgs_and_escapes() {
        let r = sample();
        let html = r.html();
        // Percentile plot + one chart for "sessions" + one for "MiB".
        assert_eq!(html.matches("<svg ").count(), 3, "{html}");
        assert_eq!(html.matches("</svg>").count(), 3);
        assert!(html.contains("Latency by percentile"));
        for label in ["50%", "90%", "99%", "99.9%", "99.99%"] {
            assert!(
                html.contains(&format!(">{label}</text>")),
                "missing x label {label}"
            );
        }
        assert!(html.contains("latency (ms)"));
        assert!(html.contains("seconds since start"));
        assert!(html.contains("gatewayd-a RSS") && html.contains("gatewayd-b RSS"));
        assert!(html.contains("<polyline"));
        // Escaping: the note's script never appears raw.
        assert!(!html.contains("<script"));
        assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
        // Self-contained: no external references.
        assert!(!html.contains("src="));
        assert!(!html.contains("href="));
        assert!(html.contains("FAIL"));
        assert!(html.contains("throttle on") && html.contains("throttle off"));
        // Writes to a file.
        let dir = std::env::temp_dir().join(format!("loadgen-report-html-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("r.html");
        r.write_html(&path).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), html);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn json_reads_non_finite_numbers_back_as_nan() {
        let mut r = Report {
            duration_s: f64::NAN,
            ..Report::default()
        };
        r.figure("", "ratio", f64::INFINITY, "");
        r.series.push(Series {
            name: "s".into(),
            unit: "u".into(),
            points: vec![(1.0, f64::NAN)],
        });
        let text = serde_json::to_string(&r).unwrap();
        let back: Report = serde_json::from_str(&text).unwrap();
        assert!(back.duration_s.is_nan());
        assert!(back.figures[0].value.is_nan());
        assert_eq!(back.series[0].points[0].0, 1.0);
        assert!(back.series[0].points[0].1.is_nan());
    }

    #[test]
    fn html_escapes_every_field() {
        let mut r = Report {
            scenario: "<b>".into(),
            command: "a & b \"c\"".into(),
            host: "<i>".into(),
            ..Report::default()
        };
        r.claim("<c>", true, "<e>", "<m>");
        r.figure("<grp>", "<n>", 1.0, "<u>");
        r.series.push(Series {
            name: "<s>".into(),
            unit: "<su>".into(),
            points: vec![(0.0, 1.0)],
        });
        r.latency.push(LatencyPhase {
            phase: "<p>".into(),
            ..LatencyPhase::default()
        });
        let html = r.html();
        for raw in [
            "<b>", "<i>", "<c>", "<e>", "<m>", "<grp>", "<n>", "<u>", "<s>", "<su>", "<p>", "a & b",
        ] {
            assert!(!html.contains(raw), "unescaped {raw}");
        }
        assert!(html.contains("a &amp; b &quot;c&quot;"));
    }

    #[test]
    fn html_handles_empty_and_degenerate_data() {
        let mut r = Report::default();
        r.series.push(Series {
            name: "flat".into(),
            unit: "x".into(),
            points: vec![(1.0, 5.0), (2.0, 5.0)],
        });
        r.series.push(Series {
            name: "empty".into(),
            unit: "y".into(),
            points: vec![],
        });
        r.series.push(Series {
            name: "nan".into(),
            unit: "z".into(),
            points: vec![(f64::NAN, 1.0), (1.0, f64::INFINITY)],
        });
        r.add_histogram("empty", &Histogram::<u64>::new(3).unwrap());
        let html = r.html();
        assert!(!html.contains("NaN") && !html.contains("inf"));
        assert_eq!(html.matches("<svg ").count(), 4);
        // Many series in one chart: the legend stays beside the plot.
        let mut r = Report::default();
        for i in 0..20 {
            r.series.push(Series {
                name: format!("s{i}"),
                unit: "u".into(),
                points: vec![(0.0, i as f64), (1.0, i as f64 + 1.0)],
            });
        }
        let html = r.html();
        assert_eq!(html.matches("<polyline").count(), 20);
        assert!(html.contains("… 9 more</text>"), "{html}");
    }

    #[test]
    fn text_summary_fits_one_screen() {
        let r = sample();
        let s = r.text_summary();
        assert!(s.starts_with("== storm : FAIL"));
        assert!(s.contains("[FAIL] registry p99 during storm"));
        assert!(s.contains("p99.9"));
        let lines: Vec<&str> = s.lines().collect();
        assert!(lines.len() < 40, "{} lines", lines.len());
        assert!(lines.iter().all(|l| l.chars().count() <= 100));

        // Many of everything, long strings: still one screen, failures first.
        let mut big = sample();
        big.command = "x".repeat(500);
        for i in 0..100 {
            big.claim(&format!("claim {i}"), true, "e", "m");
            big.figure(
                "g",
                &format!("figure {i} {}", "y".repeat(200)),
                i as f64 * 1.5,
                "u",
            );
            big.add_histogram(&format!("phase {i}"), &hist());
            big.notes.push(format!("note {i}\nwith newline"));
        }
        big.claim("late failure", false, "e", "m");
        let s = big.text_summary();
        let lines: Vec<&str> = s.lines().collect();
        assert!(lines.len() < 40, "{} lines:\n{s}", lines.len());
        assert!(lines.iter().all(|l| l.chars().count() <= 100));
        assert!(s.contains("late failure"), "failed claims come first:\n{s}");
        assert!(s.contains("more"));
        for title in ["claims:", "figures:", "latency:", "notes:"] {
            assert!(lines.contains(&title), "{title} missing:\n{s}");
        }

        // Empty report.
        let s = Report::default().text_summary();
        assert!(s.lines().count() < 40);
    }

    #[test]
    fn percentile_curve_is_monotone() {
        let mut r = Report::default();
        r.add_histogram("p", &hist());
        let l = &r.latency[0];
        assert_eq!(l.count, 100_001);
        assert!(
            l.curve.len() >= 50 && l.curve.len() <= 70,
            "{}",
            l.curve.len()
        );
        assert_eq!(l.curve[0].0, 0.0);
        assert!((l.curve.last().unwrap().0 - 99.999).abs() < 1e-9);
        for w in l.curve.windows(2) {
            assert!(w[1].0 > w[0].0, "percentiles increase: {:?}", w);
            assert!(w[1].1 >= w[0].1, "values never decrease: {:?}", w);
        }
        // Points are spread on a log scale of 1/(1-p): several beyond 99 %.
        assert!(l.curve.iter().filter(|(p, _)| *p > 99.0).count() >= 20);
        assert!(
            l.p50_us <= l.p90_us
                && l.p90_us <= l.p99_us
                && l.p99_us <= l.p999_us
                && l.p999_us <= l.max_us
        );
        assert!(l.p50_us >= 800 && l.p50_us < 1300, "{}", l.p50_us);
        assert!(l.max_us >= 2_000_000);
        // Replacing a phase keeps one entry.
        r.add_histogram("p", &hist());
        assert_eq!(r.latency.len(), 1);
    }

    #[test]
    fn ticks_are_nice() {
        let (lo, hi, t) = nice_ticks(0.0, 37.0, 5);
        assert_eq!((lo, hi), (0.0, 40.0));
        assert_eq!(t, vec![0.0, 10.0, 20.0, 30.0, 40.0]);
        let (lo, hi, _) = nice_ticks(5.0, 5.0, 5);
        assert!(lo <= 5.0 && hi > 5.0);
        assert_eq!(tick_label(0.25, 0.05), "0.25");
        assert_eq!(tick_label(20.0, 10.0), "20");
        assert_eq!(utc_string(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc_string(1_700_000_000_000), "2023-11-14 22:13:20 UTC");
    }
}
