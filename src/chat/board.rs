//! What people see of their interactions and what each application's
//! interactions came to (ADR-03), shared with the admin port.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{json, Map, Value};

/// What each person sees of their interactions, for the admin port (the
/// CLI), bounded with the table (entries leave with their interaction); and
/// each application's counters (ADR-03: the ack rate a bot author needs),
/// for at most `MAX_APPS` applications.
#[derive(Default)]
pub struct Board(Mutex<HashMap<u64, Value>>, Mutex<HashMap<u64, AppStats>>);

/// Applications whose interactions are counted one by one.
pub const MAX_APPS: usize = 4096;
/// Upper bounds (ms) of the per-application ack latency buckets.
const APP_BOUNDS_MS: [u64; 7] = [50, 100, 250, 500, 1000, 2000, 3000];

/// Minutes of ack latency kept per application (a ring, for the portal's
/// chart of the last hour against the 3 s line).
pub const MINUTES: usize = 60;
/// Endpoint delivery failures by reason: `egress::Reason::ALL`, then the
/// endpoint's answer was no response, the window passed in the queue, other.
pub const FAILURE_REASONS: [&str; 13] = [
    "bad_url",
    "refused_address",
    "dns_failed",
    "timeout",
    "too_large",
    "connect_failed",
    "tls_failed",
    "malformed_response",
    "egress_busy",
    "egress_unavailable",
    "bad_answer",
    "not_called_in_time",
    "other",
];

/// One application's interactions, by outcome.
#[derive(Clone, Copy, Debug)]
pub struct AppStats {
    pub opened: u64,
    pub refused: u64,
    pub acks: u64,
    pub deferrals: u64,
    pub misses: u64,
    pub late: u64,
    pub double: u64,
    pub followups: u64,
    /// Acks by latency bucket (`APP_BOUNDS_MS`, then over 3 s).
    lat: [u64; 8],
    /// Endpoint delivery failures by `FAILURE_REASONS`.
    pub failures: [u64; FAILURE_REASONS.len()],
    /// Per minute (ring by Unix minute): the minute, and its acks by bucket.
    minutes: [(u32, [u32; 8]); MINUTES],
}

impl Default for AppStats {
    fn default() -> Self {
        AppStats {
            opened: 0,
            refused: 0,
            acks: 0,
            deferrals: 0,
            misses: 0,
            late: 0,
            double: 0,
            followups: 0,
            lat: [0; 8],
            failures: [0; FAILURE_REASONS.len()],
            minutes: [(0, [0; 8]); MINUTES],
        }
    }
}

fn quantile(lat: &[u64], q: f64) -> Option<u64> {
    let n: u64 = lat.iter().sum();
    if n == 0 {
        return None;
    }
    let want = (q * n as f64).ceil() as u64;
    let mut seen = 0;
    for (i, c) in lat.iter().enumerate() {
        seen += c;
        if seen >= want {
            return Some(APP_BOUNDS_MS.get(i).copied().unwrap_or(u64::MAX));
        }
    }
    None
}

/// The latency below which a fraction `q` of the acks came, estimated by
/// interpolating linearly inside the bucket that holds it (the acks spread
/// evenly over it): (estimate, bucket's lower bound, upper bound), ms; the
/// upper bound None past the last bound (over 3 s: no estimate).
fn quantile_estimate(lat: &[u64], q: f64) -> Option<(u64, u64, Option<u64>)> {
    let n: u64 = lat.iter().sum();
    if n == 0 {
        return None;
    }
    let want = (q * n as f64).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, c) in lat.iter().enumerate() {
        if *c > 0 && seen + c >= want {
            let lower = if i == 0 { 0 } else { APP_BOUNDS_MS[i - 1] };
            let Some(&upper) = APP_BOUNDS_MS.get(i) else {
                return Some((lower, lower, None));
            };
            let into = (want - seen) as f64 / *c as f64;
            let est = lower as f64 + (upper - lower) as f64 * into;
            return Some((est.round() as u64, lower, Some(upper)));
        }
        seen += c;
    }
    None
}

fn estimate_json(e: Option<(u64, u64, Option<u64>)>) -> Value {
    match e {
        None => Value::Null,
        Some((ms, lower, Some(upper))) => json!({"ms": ms, "bucket_ms": [lower, upper]}),
        Some((_, lower, None)) => json!({"over_ms": lower}),
    }
}

fn unix_minute() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| (d.as_secs() / 60) as u32)
}

#[derive(Clone, Copy)]
pub(super) enum Count {
    Opened,
    Refused,
    Ack(u64),
    Deferral,
    Miss,
    Late,
    Double,
    Followup,
}

impl AppStats {
    /// The latency below which a fraction `q` of the acks came (the
    /// bucket's upper bound, ms).
    fn quantile_ms(&self, q: f64) -> Option<u64> {
        quantile(&self.lat, q)
    }

    /// The last hour, oldest first: (Unix minute, acks, p50 ms, p99 ms),
    /// the quantiles estimated within their buckets (past 3 s: 3 s);
    /// minutes without acks are left out.
    pub fn minutes(&self, now_minute: u32) -> Vec<(u32, u64, Option<u64>, Option<u64>)> {
        let mut out: Vec<_> = self
            .minutes
            .iter()
            .filter(|(m, _)| *m != 0 && now_minute.saturating_sub(*m) < MINUTES as u32)
            .map(|(m, l)| {
                let l = l.map(u64::from);
                let est = |q| quantile_estimate(&l, q).map(|e| e.0);
                (*m, l.iter().sum(), est(0.5), est(0.99))
            })
            .collect();
        out.sort_unstable_by_key(|e| e.0);
        out
    }

    /// The current Unix minute (for `minutes`).
    pub fn now_minute() -> u32 {
        unix_minute()
    }

    /// The JSON of `GET /applications/{id}/interactions` (admin port).
    pub fn to_json(&self, app: u64) -> Value {
        let first = self.acks + self.misses;
        json!({
            "application_id": app.to_string(),
            "opened": self.opened, "refused": self.refused, "acks": self.acks,
            "ack_rate": if first == 0 { Value::Null } else { (self.acks as f64 / first as f64).into() },
            "deferrals": self.deferrals, "misses": self.misses, "late_callbacks": self.late,
            "double_acks": self.double, "followups": self.followups,
            "ack_latency_ms": {"p50": self.quantile_ms(0.5), "p99": self.quantile_ms(0.99)},
            "ack_latency_estimate_ms": {"p50": estimate_json(quantile_estimate(&self.lat, 0.5)),
                                        "p99": estimate_json(quantile_estimate(&self.lat, 0.99))},
        })
    }
}

impl Board {
    pub fn get(&self, id: u64) -> Option<Value> {
        self.0.lock().expect("board").get(&id).cloned()
    }
    /// An application's counters, if it had interactions.
    pub fn app(&self, app: u64) -> Option<AppStats> {
        self.1.lock().expect("apps").get(&app).copied()
    }
    pub(super) fn count(&self, app: u64, c: Count) {
        let mut apps = self.1.lock().expect("apps");
        if apps.len() >= MAX_APPS && !apps.contains_key(&app) {
            return;
        }
        let a = apps.entry(app).or_default();
        match c {
            Count::Opened => a.opened += 1,
            Count::Refused => a.refused += 1,
            Count::Ack(ms) => {
                a.acks += 1;
                let b = APP_BOUNDS_MS.iter().position(|&b| ms <= b).unwrap_or(7);
                a.lat[b] += 1;
                let m = unix_minute();
                let slot = &mut a.minutes[m as usize % MINUTES];
                if slot.0 != m {
                    *slot = (m, [0; 8]);
                }
                slot.1[b] = slot.1[b].saturating_add(1);
            }
            Count::Deferral => a.deferrals += 1,
            Count::Miss => a.misses += 1,
            Count::Late => a.late += 1,
            Count::Double => a.double += 1,
            Count::Followup => a.followups += 1,
        }
    }
    /// An endpoint delivery of the application's failed (`FAILURE_REASONS`).
    pub fn endpoint_failed(&self, app: u64, reason: usize) {
        let mut apps = self.1.lock().expect("apps");
        if apps.len() >= MAX_APPS && !apps.contains_key(&app) {
            return;
        }
        let a = apps.entry(app).or_default();
        a.failures[reason.min(FAILURE_REASONS.len() - 1)] += 1;
    }
    pub(super) fn set(&self, id: u64, v: Value) {
        self.0.lock().expect("board").insert(id, v);
    }
    pub(super) fn merge(&self, id: u64, f: impl FnOnce(&mut Map<String, Value>)) {
        if let Some(Value::Object(m)) = self.0.lock().expect("board").get_mut(&id) {
            f(m)
        }
    }
    /// Why the application's endpoint gave no response (shown with the
    /// failure at 3 s).
    pub fn note_failure(&self, id: u64, why: &str) {
        self.merge(id, |m| {
            m.insert("endpoint_failure".into(), why.into());
            if m.get("state").and_then(Value::as_str) == Some("failed") {
                let f = format!("The application did not respond ({why})");
                m.insert("failure".into(), f.into());
            }
        })
    }
    pub(super) fn remove(&self, id: u64) {
        self.0.lock().expect("board").remove(&id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_estimated_inside_their_bucket_not_reported_as_its_bound() {
        // Ten acks between 100 and 250 ms: the bound says 250 for both.
        let lat = [0, 0, 10, 0, 0, 0, 0, 0];
        assert_eq!(quantile(&lat, 0.5), Some(250));
        assert_eq!(quantile_estimate(&lat, 0.5), Some((175, 100, Some(250))));
        assert_eq!(quantile_estimate(&lat, 0.99), Some((250, 100, Some(250))));
        // Half under 50 ms, half between 250 and 500: p50 in the first.
        let lat = [4, 0, 0, 4, 0, 0, 0, 0];
        assert_eq!(quantile_estimate(&lat, 0.5), Some((50, 0, Some(50))));
        assert_eq!(quantile_estimate(&lat, 0.99), Some((500, 250, Some(500))));
        // Past the last bound: no estimate, only "over 3 s".
        let lat = [0, 0, 0, 0, 0, 0, 0, 3];
        assert_eq!(quantile_estimate(&lat, 0.5), Some((3000, 3000, None)));
        assert_eq!(
            estimate_json(quantile_estimate(&lat, 0.5)),
            json!({"over_ms": 3000})
        );
        assert_eq!(quantile_estimate(&[0; 8], 0.5), None);
    }
}
