//! [`Report::html`]: the self-contained HTML page (no script, no
//! external assets): header, claims, figures side by side per group, the
//! latency table and the charts drawn by svg.rs. Every text from the
//! report is escaped.

use std::fmt::Write as _;
use std::io;
use std::path::Path;

use super::format::{esc, fmt_ms, fmt_value, utc_string};
use super::model::{Report, Series};
use super::svg::{percentile_svg, series_svg};

impl Report {
    /// Writes the self-contained HTML page (see [`Report::html`]).
    pub fn write_html(&self, path: &Path) -> io::Result<()> {
        std::fs::write(path, self.html())
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

const CSS: &str = "body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:1000px;color:#222;padding:0 1em}\
table{border-collapse:collapse;margin:.5em 0 1em}th,td{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}\
th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}\
.pass{color:#1a7f37;font-weight:bold}.fail{color:#c62828;font-weight:bold}\
table.meta th{width:7em}code{font-size:90%;word-break:break-all}svg{display:block;margin:.5em 0 1.5em;max-width:100%;height:auto}\
h1 span{margin-left:.5em}";
