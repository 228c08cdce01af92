//! What a bot sees across a crash recovery (tests/cluster_recovery.rs,
//! docs/cluster.md "Crash recovery"): every dispatch as received, keyed by
//! its seq with the frame's text (to compare a survivor's replay with what
//! the dead node sent, byte for byte), op 9 and the end of the connection;
//! a Resume on a survivor read to its outcome; every refusal a node counts.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::cluster::resume;
use super::metrics::{metric_sum, metrics};
use super::node::Node;
use super::raw::{Msg, Ws};

/// Every dispatch as received: s -> (t, the frame's text), and op 9s.
#[derive(Default, Debug)]
pub struct Seen {
    pub frames: BTreeMap<u64, (String, String)>,
    pub order: Vec<u64>,
    /// (s, message id) of each MESSAGE_CREATE.
    pub messages: Vec<(u64, u64)>,
    pub resumed: bool,
    pub invalid: bool,
    pub closed: Option<String>,
}

/// Reads `ws` into `seen` until `done` holds, `until` passes or the
/// connection ends.
pub fn read(ws: &mut Ws, until: Instant, mut done: impl FnMut(&Seen) -> bool, seen: &mut Seen) {
    while !done(seen) {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        match ws.read_message(left) {
            Msg::Text(t) => {
                let v: Value = serde_json::from_str(&t).unwrap();
                match v["op"].as_u64() {
                    Some(0) => {
                        let s = v["s"].as_u64().unwrap();
                        let kind = v["t"].as_str().unwrap().to_string();
                        if kind == "RESUMED" {
                            seen.resumed = true;
                        }
                        if kind == "MESSAGE_CREATE" {
                            let id = v["d"]["id"].as_str().unwrap().parse().unwrap();
                            seen.messages.push((s, id));
                        }
                        seen.order.push(s);
                        seen.frames.insert(s, (kind, t));
                    }
                    Some(9) => seen.invalid = true,
                    _ => {}
                }
            }
            Msg::Timeout => return,
            other => {
                seen.closed = Some(format!("{other:?}"));
                return;
            }
        }
    }
}

/// Read on a resumed connection until RESUMED, op 9 or the end.
pub fn outcome(ws: &mut Ws, secs: u64) -> Seen {
    let mut seen = Seen::default();
    read(
        ws,
        Instant::now() + Duration::from_secs(secs),
        |s| s.invalid || s.resumed || s.closed.is_some(),
        &mut seen,
    );
    seen
}

/// A Resume of `sid` from `seq` on `node` (a survivor, after the crash),
/// read for up to `secs` until RESUMED, op 9 or the end: the connection,
/// to read on, and what it got.
pub fn resume_after_crash(node: &Node, token: &str, sid: &str, seq: u64, secs: u64) -> (Ws, Seen) {
    let mut ws = resume(node, token, sid, seq);
    let seen = outcome(&mut ws, secs);
    (ws, seen)
}

/// Every reason `node` counted a refused Resume for, with its count.
pub fn all_refusals(node: &Node) -> Vec<(String, f64)> {
    let m = metrics(node.admin);
    [
        "node_unreachable",
        "stream_cut",
        "no_room",
        "unknown_session",
        "token_mismatch",
        "recovery_no_summary",
        "recovery_unproven",
        "recovery_store_down",
        "recovery_retention",
    ]
    .iter()
    .map(|r| {
        (
            r.to_string(),
            metric_sum(&m, "gatewayd_resume_refusals_total", &[("reason", r)]),
        )
    })
    .collect()
}
