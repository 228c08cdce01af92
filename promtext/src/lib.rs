//! The Prometheus text exposition format (version 0.0.4): one parser for
//! everything in the workspace that reads a `/metrics` page (the node's
//! `gatewayd stats`, loadgen, the tests). No dependencies.
//!
//! - [`parse_lines`]: every line in order (`# HELP`, `# TYPE`, other
//!   comments, blank lines, samples), for validators that check a page's
//!   structure (families not split, HELP before TYPE, ...);
//! - [`parse`]: the samples, or the first malformed line;
//! - [`parse_lossy`]: the samples of the well-formed lines, for a scraper
//!   that must not fail on one odd line;
//! - [`SampleSet`] (on `[Sample]`): find a sample by name and labels, sum a
//!   family, group by a label, a histogram's buckets.
//!
//! Strict where the format is: metric and label names must be valid, label
//! values may only escape `\\`, `\"` and `\n`, a label may not repeat, and
//! nothing may follow the value and the optional timestamp. Values are
//! floats, `+Inf`, `-Inf` or `NaN`.

use std::collections::BTreeMap;
use std::fmt;

/// One sample: `name{labels} value [timestamp]`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    /// In exposition order.
    pub labels: Vec<(String, String)>,
    pub value: f64,
    /// Milliseconds since the Unix epoch, when the line has one.
    pub timestamp_ms: Option<i64>,
}

impl Sample {
    /// The value of label `k`.
    pub fn label(&self, k: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }

    /// Named `name` with every one of `labels` (it may have more).
    pub fn matches(&self, name: &str, labels: &[(&str, &str)]) -> bool {
        self.name == name && labels.iter().all(|(k, v)| self.label(k) == Some(v))
    }

    /// The labels as a sorted map.
    pub fn label_map(&self) -> BTreeMap<String, String> {
        self.labels.iter().cloned().collect()
    }
}

/// A family's `# TYPE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
    Summary,
    Untyped,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
            Kind::Summary => "summary",
            Kind::Untyped => "untyped",
        }
    }

    pub fn from_name(s: &str) -> Option<Kind> {
        Some(match s {
            "counter" => Kind::Counter,
            "gauge" => Kind::Gauge,
            "histogram" => Kind::Histogram,
            "summary" => Kind::Summary,
            "untyped" => Kind::Untyped,
            _ => return None,
        })
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One line of an exposition.
#[derive(Debug, Clone, PartialEq)]
pub enum Line {
    /// Empty or only blanks.
    Blank,
    /// `# HELP name text` (text unescaped: `\\` and `\n`).
    Help {
        name: String,
        text: String,
    },
    /// `# TYPE name kind`.
    Type {
        name: String,
        kind: Kind,
    },
    /// Any other `#` line, without the `#`.
    Comment(String),
    Sample(Sample),
}

/// A malformed line: its number (from 1), what is wrong, and the line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub line: usize,
    pub what: &'static str,
    pub text: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}: {:?}", self.line, self.what, self.text)
    }
}

impl std::error::Error for Error {}

/// Every line of `text`, in order; stops at the first malformed one.
pub fn parse_lines(text: &str) -> Result<Vec<Line>, Error> {
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            parse_line(l).map_err(|what| Error {
                line: i + 1,
                what,
                text: l.to_string(),
            })
        })
        .collect()
}

/// The samples of `text` (comments and blank lines skipped), or the first
/// malformed line.
pub fn parse(text: &str) -> Result<Vec<Sample>, Error> {
    let mut out = Vec::new();
    for line in parse_lines(text)? {
        if let Line::Sample(s) = line {
            out.push(s);
        }
    }
    Ok(out)
}

/// The samples of the well-formed lines; malformed lines are skipped.
pub fn parse_lossy(text: &str) -> Vec<Sample> {
    text.lines()
        .filter_map(|l| match parse_line(l) {
            Ok(Line::Sample(s)) => Some(s),
            _ => None,
        })
        .collect()
}

/// Parses one line (without its line break).
pub fn parse_line(line: &str) -> Result<Line, &'static str> {
    let line = line.trim_matches(is_blank);
    if line.is_empty() {
        return Ok(Line::Blank);
    }
    if let Some(rest) = line.strip_prefix('#') {
        return parse_comment(rest);
    }
    parse_sample(line).map(Line::Sample)
}

fn is_blank(c: char) -> bool {
    c == ' ' || c == '\t' || c == '\r'
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// A valid metric name: `[a-zA-Z_:][a-zA-Z0-9_:]*`.
pub fn is_metric_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next().is_some_and(is_name_start) && c.all(is_name_char)
}

/// A valid label name: `[a-zA-Z_][a-zA-Z0-9_]*`.
pub fn is_label_name(s: &str) -> bool {
    let mut c = s.chars();
    c.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && c.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn parse_comment(rest: &str) -> Result<Line, &'static str> {
    let body = rest.trim_start_matches(is_blank);
    let (kw, after) = body.split_once(is_blank).unwrap_or((body, ""));
    match kw {
        "HELP" | "TYPE" => {}
        _ => return Ok(Line::Comment(rest.to_string())),
    }
    let after = after.trim_start_matches(is_blank);
    let (name, arg) = after.split_once(is_blank).unwrap_or((after, ""));
    if !is_metric_name(name) {
        return Err(if name.is_empty() {
            "HELP or TYPE without a metric name"
        } else {
            "invalid metric name"
        });
    }
    let arg = arg.trim_start_matches(is_blank);
    if kw == "HELP" {
        let mut text = String::with_capacity(arg.len());
        let mut chars = arg.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some('n') => text.push('\n'),
                    Some('\\') => text.push('\\'),
                    // Other escapes are kept as written.
                    Some(o) => {
                        text.push('\\');
                        text.push(o);
                    }
                    None => text.push('\\'),
                },
                c => text.push(c),
            }
        }
        return Ok(Line::Help {
            name: name.to_string(),
            text,
        });
    }
    let kind = Kind::from_name(arg.trim_end_matches(is_blank)).ok_or("unknown TYPE")?;
    Ok(Line::Type {
        name: name.to_string(),
        kind,
    })
}

fn parse_sample(line: &str) -> Result<Sample, &'static str> {
    let name_end = line.find(|c: char| !is_name_char(c)).unwrap_or(line.len());
    let name = &line[..name_end];
    if !is_metric_name(name) {
        return Err("invalid metric name");
    }
    let mut rest = line[name_end..].trim_start_matches(is_blank);
    let mut labels: Vec<(String, String)> = Vec::new();
    if let Some(r) = rest.strip_prefix('{') {
        rest = parse_labels(r, &mut labels)?;
        if !rest.starts_with(is_blank) {
            return Err("no blank between the labels and the value");
        }
    } else if name_end == line.len() || !line[name_end..].starts_with(is_blank) {
        return Err("no value");
    }
    let mut fields = rest.split(is_blank).filter(|f| !f.is_empty());
    let value = parse_value(fields.next().ok_or("no value")?)?;
    let timestamp_ms = match fields.next() {
        Some(t) => Some(t.parse::<i64>().map_err(|_| "bad timestamp")?),
        None => None,
    };
    if fields.next().is_some() {
        return Err("text after the timestamp");
    }
    Ok(Sample {
        name: name.to_string(),
        labels,
        value,
        timestamp_ms,
    })
}

/// Parses `k="v",...}` (after the `{`); returns what follows the `}`.
fn parse_labels<'a>(
    mut r: &'a str,
    labels: &mut Vec<(String, String)>,
) -> Result<&'a str, &'static str> {
    loop {
        r = r.trim_start_matches(is_blank);
        if let Some(after) = r.strip_prefix('}') {
            return Ok(after);
        }
        let key_end = r
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .ok_or("unclosed labels")?;
        let key = &r[..key_end];
        if !is_label_name(key) {
            return Err("invalid label name");
        }
        if labels.iter().any(|(k, _)| k == key) {
            return Err("label repeated");
        }
        r = r[key_end..].trim_start_matches(is_blank);
        r = r.strip_prefix('=').ok_or("label without =")?;
        r = r.trim_start_matches(is_blank);
        r = r.strip_prefix('"').ok_or("label value not quoted")?;
        let mut value = String::new();
        let mut chars = r.char_indices();
        let end = loop {
            match chars.next().ok_or("unterminated label value")? {
                (i, '"') => break i,
                (_, '\\') => match chars.next().ok_or("unterminated label value")?.1 {
                    'n' => value.push('\n'),
                    c @ ('\\' | '"') => value.push(c),
                    _ => return Err("bad escape in a label value"),
                },
                (_, c) => value.push(c),
            }
        };
        labels.push((key.to_string(), value));
        r = r[end + 1..].trim_start_matches(is_blank);
        if let Some(after) = r.strip_prefix(',') {
            r = after;
        } else if !r.starts_with('}') {
            return Err("labels not separated by a comma");
        }
    }
}

fn parse_value(v: &str) -> Result<f64, &'static str> {
    match v {
        "+Inf" | "Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        v if v
            .bytes()
            .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b)) =>
        {
            v.parse().map_err(|_| "bad value")
        }
        _ => Err("bad value"),
    }
}

/// Queries over a page's samples.
pub trait SampleSet {
    /// The first sample named `name` with all of `labels`.
    fn find(&self, name: &str, labels: &[(&str, &str)]) -> Option<&Sample>;
    /// Its value.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.find(name, labels).map(|s| s.value)
    }
    /// Whether any sample is named `name`.
    fn has(&self, name: &str) -> bool {
        self.find(name, &[]).is_some()
    }
    /// Sum of the samples named `name` with all of `labels` (0 if none).
    fn sum_with(&self, name: &str, labels: &[(&str, &str)]) -> f64;
    /// Sum of every series named `name` (any labels; 0 if none).
    fn sum(&self, name: &str) -> f64 {
        self.sum_with(name, &[])
    }
    /// Like [`SampleSet::sum`], but None when no sample is named `name`.
    fn try_sum(&self, name: &str) -> Option<f64> {
        self.has(name).then(|| self.sum(name))
    }
    /// Sums of the samples named `name`, per value of `label` (samples
    /// without it left out).
    fn by_label(&self, name: &str, label: &str) -> BTreeMap<String, f64>;
    /// Cumulative buckets of histogram `name` (its `name_bucket` samples)
    /// as (upper bound `le`, count), sorted by bound; `+Inf` is infinity.
    fn buckets(&self, name: &str) -> Vec<(f64, f64)>;
}

impl SampleSet for [Sample] {
    fn find(&self, name: &str, labels: &[(&str, &str)]) -> Option<&Sample> {
        self.iter().find(|s| s.matches(name, labels))
    }

    fn sum_with(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.iter()
            .filter(|s| s.matches(name, labels))
            .map(|s| s.value)
            .sum()
    }

    fn by_label(&self, name: &str, label: &str) -> BTreeMap<String, f64> {
        let mut m = BTreeMap::new();
        for s in self.iter().filter(|s| s.name == name) {
            if let Some(v) = s.label(label) {
                *m.entry(v.to_string()).or_insert(0.0) += s.value;
            }
        }
        m
    }

    fn buckets(&self, name: &str) -> Vec<(f64, f64)> {
        let bucket = format!("{name}_bucket");
        let mut b: Vec<(f64, f64)> = self
            .iter()
            .filter(|s| s.name == bucket)
            .filter_map(|s| Some((parse_value(s.label("le")?).ok()?, s.value)))
            .collect();
        b.sort_by(|x, y| x.0.total_cmp(&y.0));
        b
    }
}

impl SampleSet for Vec<Sample> {
    fn find(&self, name: &str, labels: &[(&str, &str)]) -> Option<&Sample> {
        self.as_slice().find(name, labels)
    }
    fn sum_with(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.as_slice().sum_with(name, labels)
    }
    fn by_label(&self, name: &str, label: &str) -> BTreeMap<String, f64> {
        self.as_slice().by_label(name, label)
    }
    fn buckets(&self, name: &str) -> Vec<(f64, f64)> {
        self.as_slice().buckets(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = "# HELP a_seconds Time of a.\n\
                        # TYPE a_seconds histogram\n\
                        a_seconds_bucket{le=\"0.001\"} 1\n\
                        a_seconds_bucket{le=\"0.01\"} 99\n\
                        a_seconds_bucket{le=\"+Inf\"} 100\n\
                        a_seconds_sum 0.5\n\
                        a_seconds_count 100\n\
                        # HELP b_total B, with a \\\\ and a \\n in its help.\n\
                        # TYPE b_total counter\n\
                        b_total{worker=\"0\",reason=\"a \\\"q\\\", b\"} 3\n\
                        b_total{worker=\"1\",reason=\"x\\\\y\\nz\"} 4 1700000000000\n\
                        # a plain comment\n\
                        \n\
                        c 1.5e3\n\
                        d{} -Inf\n\
                        e NaN\n";

    #[test]
    fn lines_in_order() {
        let l = parse_lines(PAGE).unwrap();
        assert_eq!(l.len(), 16);
        assert_eq!(
            l[0],
            Line::Help {
                name: "a_seconds".into(),
                text: "Time of a.".into()
            }
        );
        assert_eq!(
            l[1],
            Line::Type {
                name: "a_seconds".into(),
                kind: Kind::Histogram
            }
        );
        assert_eq!(
            l[7],
            Line::Help {
                name: "b_total".into(),
                text: "B, with a \\ and a \n in its help.".into()
            }
        );
        assert_eq!(l[11], Line::Comment(" a plain comment".into()));
        assert_eq!(l[12], Line::Blank);
        assert!(matches!(&l[13], Line::Sample(s) if s.name == "c" && s.value == 1500.0));
    }

    #[test]
    fn samples_labels_escapes_and_special_values() {
        let s = parse(PAGE).unwrap();
        assert_eq!(s.len(), 10);
        assert_eq!(s[2].label("le"), Some("+Inf"));
        assert_eq!(s[5].label("reason"), Some("a \"q\", b"));
        assert_eq!(s[5].labels[0], ("worker".into(), "0".into()));
        assert_eq!(s[6].label("reason"), Some("x\\y\nz"));
        assert_eq!(s[6].timestamp_ms, Some(1_700_000_000_000));
        assert_eq!(s[5].timestamp_ms, None);
        assert_eq!(s[8].value, f64::NEG_INFINITY);
        assert!(s[8].labels.is_empty());
        assert!(s[9].value.is_nan());
        assert_eq!(s[5].label_map().len(), 2);
    }

    #[test]
    fn queries() {
        let s = parse(PAGE).unwrap();
        assert_eq!(s.sum("b_total"), 7.0);
        assert_eq!(s.sum_with("b_total", &[("worker", "1")]), 4.0);
        assert_eq!(s.value("b_total", &[("worker", "0")]), Some(3.0));
        assert_eq!(s.find("b_total", &[("worker", "2")]), None);
        assert_eq!(s.try_sum("nope"), None);
        assert_eq!(s.sum("nope"), 0.0);
        assert_eq!(s.try_sum("c"), Some(1500.0));
        let w = s.by_label("b_total", "worker");
        assert_eq!(w.get("1"), Some(&4.0));
        assert_eq!(
            s.buckets("a_seconds"),
            vec![(0.001, 1.0), (0.01, 99.0), (f64::INFINITY, 100.0)]
        );
        assert!(s.has("a_seconds_count"));
        assert!(!s.has("a_seconds"));
    }

    #[test]
    fn blanks_around_tokens_and_trailing_comma() {
        let s = parse("x { a = \"1\" , b=\"2\", }\t 5 \r\n").unwrap();
        assert_eq!(s[0].label_map().len(), 2);
        assert_eq!(s[0].value, 5.0);
        let s = parse("# TYPE  y  gauge \ny\t2\n").unwrap();
        assert_eq!(s[0].value, 2.0);
    }

    #[test]
    fn malformed_lines_are_errors_naming_the_line() {
        for (bad, what) in [
            ("x{le=\"1\" 2", "labels not separated by a comma"),
            ("x{le=\"1\"", "labels not separated by a comma"),
            ("x{le=\"1} 2", "unterminated label value"),
            ("x{le=1} 2", "label value not quoted"),
            ("x{a=\"1\",a=\"2\"} 2", "label repeated"),
            ("x{a=\"\\t\"} 2", "bad escape in a label value"),
            ("x{1a=\"1\"} 2", "invalid label name"),
            ("x{a=\"1\",,b=\"2\"} 2", "invalid label name"),
            ("x{a=\"1\"}2", "no blank between the labels and the value"),
            ("x", "no value"),
            ("x two", "bad value"),
            ("x 1 2 3", "text after the timestamp"),
            ("x 1 1.5", "bad timestamp"),
            ("1x 2", "invalid metric name"),
            ("x-y 2", "no value"),
            ("# TYPE x gauges", "unknown TYPE"),
            ("# HELP", "HELP or TYPE without a metric name"),
            ("# TYPE 9 gauge", "invalid metric name"),
        ] {
            let text = format!("ok 1\n{bad}\n");
            let e = parse(&text).unwrap_err();
            assert_eq!((e.line, e.what), (2, what), "{bad:?}");
            assert_eq!(e.text, bad);
            assert!(e.to_string().starts_with("line 2: "), "{e}");
        }
        // The lossy parse keeps the good lines.
        let s = parse_lossy("a 1\nb{x=\"1\" 2\nc 3\n");
        assert_eq!(
            s.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["a", "c"]
        );
    }

    #[test]
    fn names() {
        assert!(is_metric_name("a:b_c9"));
        assert!(!is_metric_name("9a"));
        assert!(!is_metric_name(""));
        assert!(is_label_name("_le"));
        assert!(!is_label_name("a:b"));
        assert_eq!(Kind::from_name("summary"), Some(Kind::Summary));
        assert_eq!(Kind::Untyped.to_string(), "untyped");
    }
}
