//! The cluster link's counters (`link::cluster`, docs/cluster.md); all zero
//! on a node outside a cluster. Hand-offs per worker and op 9 by reason are
//! in `ops::metrics` (`gatewayd_handoffs_*_total`,
//! `gatewayd_resume_refusals_total{reason}`).

use std::fmt::Write;
use std::sync::atomic::Ordering::Relaxed;

use crate::link::cluster::ClusterStats;

pub fn render(c: &ClusterStats, out: &mut String) {
    let fams: [(&str, &str, &str, u64); 10] = [
        ("gatewayd_cluster_node", "gauge", "This node's number in the cluster (named in its session ids); 0 outside a cluster.", c.node.load(Relaxed)),
        ("gatewayd_cluster_served_total", "counter", "Hand-off requests from other nodes answered (the session, or why not).", c.served.load(Relaxed)),
        ("gatewayd_cluster_served_refused_busy_total", "counter", "Hand-off requests closed unanswered: cluster.max_link_connections were being served.", c.served_refused_busy.load(Relaxed)),
        ("gatewayd_cluster_served_late_total", "counter", "Hand-off requests that reached this node after the asker's deadline (dropped; the session stays here).", c.served_late.load(Relaxed)),
        ("gatewayd_cluster_served_bad_total", "counter", "Malformed hand-off requests on the link.", c.served_bad_request.load(Relaxed)),
        ("gatewayd_cluster_take_unreachable_total", "counter", "Hand-offs this node asked for that got no answer in time (op 9, node_unreachable).", c.take_unreachable.load(Relaxed)),
        ("gatewayd_cluster_heartbeat_failures_total", "counter", "Heartbeats to the registry that failed (the claim lapses after cluster.node_ttl_ms without one).", c.heartbeat_failures.load(Relaxed)),
        ("gatewayd_cluster_claim_lost_total", "counter", "Heartbeats that found this node's number held by another node.", c.claim_lost.load(Relaxed)),
        ("gatewayd_cluster_figures_served_total", "counter", "Application figures requests from other nodes' portals answered.", c.figures_served.load(Relaxed)),
        ("gatewayd_cluster_figures_refused_total", "counter", "Application figures requests not answered (past the asker's deadline, malformed, too long).", c.figures_refused.load(Relaxed)),
    ];
    for (name, kind, help, v) in fams {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
        );
    }
}
