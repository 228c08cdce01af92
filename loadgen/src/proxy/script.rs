//! What the proxy does to traffic ([`Fault`]) and fault scripts: a list
//! of [`Step`]s parsed from text such as
//! `"0s:pass,5s:latency=200ms,10s:stall"`, with errors that name the step
//! and what was expected. Pure parsing, no I/O (tested in tests.rs).

use std::fmt;
use std::time::Duration;

/// What the proxy does to traffic.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Fault {
    /// Forward at once.
    #[default]
    Pass,
    /// Forward each chunk this long after it arrived, both directions,
    /// order kept.
    Latency(Duration),
    /// Keep connections open and forward nothing; accept new connections but
    /// forward nothing on them either.
    Stall,
    /// Reset all open connections and reset new ones at once.
    Drop,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Pass => f.write_str("pass"),
            Fault::Latency(d) => write!(f, "latency={}", fmt_duration(*d)),
            Fault::Stall => f.write_str("stall"),
            Fault::Drop => f.write_str("drop"),
        }
    }
}

/// One step of a fault script: at `at` after the script starts, apply `fault`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub at: Duration,
    pub fault: Fault,
}

/// Parses a script such as `"0s:pass,5s:latency=200ms,10s:stall,20s:drop,25s:pass"`.
///
/// Steps are `TIME:FAULT` separated by commas; TIME and the latency are a
/// number (decimals allowed) with unit `ms` or `s`; FAULT is `pass`,
/// `latency=DURATION`, `stall` or `drop`. Times must not decrease.
pub fn parse_script(s: &str) -> Result<Vec<Step>, String> {
    if s.trim().is_empty() {
        return Err(
            "empty fault script (expected e.g. \"0s:pass,5s:latency=200ms,10s:stall\")".into(),
        );
    }
    let mut steps: Vec<Step> = Vec::new();
    for (i, item) in s.split(',').enumerate() {
        let n = i + 1;
        let item = item.trim();
        let ctx = |msg: String| format!("fault script step {n} ({item:?}): {msg}");
        if item.is_empty() {
            return Err(ctx("empty step (stray comma?)".into()));
        }
        let (time, fault) = item
            .split_once(':')
            .ok_or_else(|| ctx("expected TIME:FAULT, e.g. 5s:stall".into()))?;
        let at = parse_duration(time.trim()).map_err(|e| ctx(format!("bad time: {e}")))?;
        let fault = parse_fault(fault.trim()).map_err(ctx)?;
        if let Some(prev) = steps.last() {
            if at < prev.at {
                return Err(ctx(format!(
                    "time {} is before the previous step's {}; steps must be in time order",
                    fmt_duration(at),
                    fmt_duration(prev.at)
                )));
            }
        }
        steps.push(Step { at, fault });
    }
    Ok(steps)
}

fn parse_fault(s: &str) -> Result<Fault, String> {
    let lower = s.to_ascii_lowercase();
    match lower.as_str() {
        "pass" => return Ok(Fault::Pass),
        "stall" => return Ok(Fault::Stall),
        "drop" => return Ok(Fault::Drop),
        "latency" => return Err("latency needs a delay, e.g. latency=200ms".into()),
        _ => {}
    }
    if let Some((name, d)) = lower.split_once('=') {
        if name.trim() == "latency" {
            return parse_duration(d.trim())
                .map(Fault::Latency)
                .map_err(|e| format!("bad latency: {e}"));
        }
    }
    Err(format!(
        "unknown fault {s:?} (expected pass, latency=DURATION, stall or drop)"
    ))
}

/// `"200ms"`, `"5s"`, `"1.5s"`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else {
        return Err(format!("{s:?} needs a unit: ms or s (e.g. 200ms, 5s)"));
    };
    let num = num.trim();
    if num.is_empty() || !num.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!(
            "{s:?} is not a non-negative number followed by ms or s"
        ));
    }
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a non-negative number followed by ms or s"))?;
    let secs = v * scale;
    if !secs.is_finite() || secs > 1e9 {
        return Err(format!("{s:?} is too large"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn fmt_duration(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms >= 1000.0 && (ms / 1000.0).fract() == 0.0 {
        format!("{}s", ms as u64 / 1000)
    } else if ms.fract() == 0.0 {
        format!("{}ms", ms as u64)
    } else {
        format!("{ms:.3}ms")
    }
}
