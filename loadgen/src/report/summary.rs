//! [`Report::text_summary`]: the one-screen text summary printed at the
//! end of a run and written to `summary.txt`, bounded to
//! [`SUMMARY_MAX_LINES`] lines of [`SUMMARY_WIDTH`] characters.

use super::format::{clip, fmt_ms, fmt_value};
use super::model::{Claim, Report};

/// Lines of [`Report::text_summary`] never exceed this many characters.
pub const SUMMARY_WIDTH: usize = 100;
/// [`Report::text_summary`] never has more lines than this.
pub const SUMMARY_MAX_LINES: usize = 39;

impl Report {
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
}
