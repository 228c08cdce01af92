//! [`Sampler`]: once a second while a phase runs, the sessions streaming,
//! each node's RSS and the deliveries per second, printed as a progress
//! line and kept as report series; [`connect_all`], the wait (bounded
//! by `connect_timeout`) for every session to stream; and
//! [`wait_until_all_back`], the wait (bounded by `limit`) after a node is
//! killed for every session to stream again.

use std::time::{Duration, Instant};

use super::opts::Common;
use super::setup::progress;
use crate::fleet::Fleet;
use crate::nodes::NodeProc;
use crate::report::{Report, Series};

/// Samples taken once a second while a phase runs.
pub(super) struct Sampler {
    t0: Instant,
    streaming: Series,
    rss: Vec<Series>,
    deliveries: Series,
    last: (Instant, u64),
}

impl Sampler {
    pub(super) fn new(nodes: &[&NodeProc]) -> Sampler {
        Sampler {
            t0: Instant::now(),
            streaming: Series {
                name: "sessions streaming".into(),
                unit: "sessions".into(),
                points: Vec::new(),
            },
            rss: nodes
                .iter()
                .enumerate()
                .map(|(i, _)| Series {
                    name: format!("gatewayd {} RSS", (b'A' + i as u8) as char),
                    unit: "MiB".into(),
                    points: Vec::new(),
                })
                .collect(),
            deliveries: Series {
                name: "deliveries per second".into(),
                unit: "deliveries/s".into(),
                points: Vec::new(),
            },
            last: (Instant::now(), 0),
        }
    }

    pub(super) fn sample(&mut self, fleet: &Fleet, nodes: &[&NodeProc], label: &str) -> (u64, f64) {
        let t = self.t0.elapsed().as_secs_f64();
        let s = fleet.streaming();
        self.streaming.points.push((t, s as f64));
        let mut rss_line = String::new();
        for (i, n) in nodes.iter().enumerate() {
            if let Some(r) = n.rss_bytes() {
                let mib = r as f64 / 1048576.0;
                self.rss[i].points.push((t, mib));
                rss_line.push_str(&format!(" rss{}={:.0}MiB", (b'A' + i as u8) as char, mib));
            }
        }
        let c = fleet.counters();
        let dt = self.last.0.elapsed().as_secs_f64().max(1e-3);
        let rate = (c.deliveries - self.last.1.min(c.deliveries)) as f64 / dt;
        self.last = (Instant::now(), c.deliveries);
        self.deliveries.points.push((t, rate));
        progress(&format!(
            "[{label} {t:5.1}s] streaming {s}/{} handshaking {} (connects {} errors {} identifies {} op9 {} closes {}) deliveries {:.0}/s gaps {} dup {} violations {}{rss_line}",
            fleet.shared.sessions,
            fleet.handshaking(),
            c.connects,
            c.connect_errors + c.protocol_errors,
            c.identifies,
            c.invalid_new_session + c.invalid_resumable,
            c.closes.iter().sum::<u64>(),
            rate,
            c.gaps,
            c.duplicates,
            c.entitlement_violations + c.content_violations
        ));
        (s, rate)
    }

    pub(super) fn into_report(self, rep: &mut Report, prefix: &str) {
        let mut add = |mut s: Series| {
            if !prefix.is_empty() {
                s.name = format!("{prefix}: {}", s.name);
            }
            if !s.points.is_empty() {
                rep.series.push(s);
            }
        };
        add(self.streaming);
        add(self.deliveries);
        for s in self.rss {
            add(s);
        }
    }
}

/// Waits for every session to stream, sampling each second.
pub(super) fn connect_all(
    fleet: &Fleet,
    c: &Common,
    nodes: &[&NodeProc],
    sampler: &mut Sampler,
    label: &str,
) -> (u64, f64) {
    let t = Instant::now();
    let deadline = t + c.connect_timeout;
    let n = fleet.shared.sessions as u64;
    loop {
        std::thread::sleep(Duration::from_millis(1000));
        let (s, _) = sampler.sample(fleet, nodes, label);
        if s >= n || Instant::now() >= deadline {
            return (s, t.elapsed().as_secs_f64());
        }
    }
}

/// After node A was killed at `t_kill`: waits until the sessions streaming
/// have dipped below `ready` and come back to it, sampling once a second,
/// and returns the seconds that took, or None if `limit` passed first.
pub(super) fn wait_until_all_back(
    fleet: &Fleet,
    nodes: &[NodeProc],
    sampler: &mut Sampler,
    ready: u64,
    t_kill: Instant,
    limit: Duration,
    label: &str,
) -> Option<f64> {
    let mut dipped = false;
    let mut last_sample = Instant::now();
    loop {
        std::thread::sleep(Duration::from_millis(100));
        let s = fleet.streaming();
        if s < ready {
            dipped = true;
        }
        if dipped && s >= ready {
            return Some(t_kill.elapsed().as_secs_f64());
        }
        if t_kill.elapsed() > limit {
            return None;
        }
        if last_sample.elapsed() >= Duration::from_secs(1) {
            last_sample = Instant::now();
            let refs: Vec<&NodeProc> = nodes.iter().collect();
            sampler.sample(fleet, &refs, label);
        }
    }
}
