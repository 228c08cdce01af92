//! The cluster link's counters (`link::cluster`, docs/cluster.md); all zero
//! on a node outside a cluster. Hand-offs per worker and op 9 by reason are
//! in `ops::metrics` (`gatewayd_handoffs_*_total`,
//! `gatewayd_resume_refusals_total{reason}`).

use std::fmt::Write;
use std::sync::atomic::Ordering::Relaxed;

use crate::link::cluster::tls::Refusal;
use crate::link::cluster::ClusterStats;

pub fn render(c: &ClusterStats, out: &mut String) {
    let fams: [(&str, &str, &str, u64); 11] = [
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
        ("gatewayd_cluster_registry_reads_total", "counter", "Registry reads of the hand-off threads (a node's link address, the live nodes; each cached 1 s). Not in gatewayd_registry_call_seconds (the sidecar's).", c.registry_reads.load(Relaxed)),
    ];
    for (name, kind, help, v) in fams {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
        );
    }
    let name = "gatewayd_cluster_link_refused_total";
    let _ = writeln!(
        out,
        "# HELP {name} Connections to the cluster link refused at the TLS handshake (docs/cluster.md): no_client_cert, bad_cert (another CA, expired, wrong EKU), not_tls (plaintext to a TLS link), handshake_timeout, other. Nothing of theirs is read.\n# TYPE {name} counter"
    );
    for why in Refusal::ALL {
        let v = c.link_refused[why.index()].load(Relaxed);
        let _ = writeln!(out, "{name}{{reason=\"{}\"}} {v}", why.as_str());
    }
    let reloads: [(&str, &str, u64); 2] = [
        ("gatewayd_cluster_tls_reloads_total", "Reloads of the cluster link's certificates (SIGHUP, or their files changed).", c.tls_reloads.load(Relaxed)),
        ("gatewayd_cluster_tls_reload_failures_total", "Reloads of the cluster link's certificates that failed (the previous ones stay in use).", c.tls_reload_failures.load(Relaxed)),
    ];
    for (name, help, v) in reloads {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
        );
    }
}

/// Crash recovery's counters (docs/cluster.md, "Crash recovery"); all zero
/// with `[recovery]` off.
pub fn render_recovery(r: Option<&crate::worker::shared::RecoveryStats>, out: &mut String) {
    let d = crate::worker::shared::RecoveryStats::default();
    let r = r.unwrap_or(&d);
    let fams: [(&str, &str, u64); 11] = [
        ("gatewayd_recovery_journal_appends_total", "Batches whose order was appended to the journal in Redis before they went out.", r.journal_appends.load(Relaxed)),
        ("gatewayd_recovery_journal_failures_total", "Batches whose journal append failed or was skipped (Redis down or past recovery.journal_timeout_ms): delivery went on, recovery past them is refused.", r.journal_failures.load(Relaxed)),
        ("gatewayd_recovery_checkpoints_total", "Worker checkpoints handed to the recovery writer.", r.checkpoints.load(Relaxed)),
        ("gatewayd_recovery_checkpoints_skipped_total", "Checkpoints skipped: no free buffer or the writer's queue full.", r.checkpoints_skipped.load(Relaxed)),
        ("gatewayd_recovery_summaries_total", "Session summaries handed to the recovery writer.", r.summaries.load(Relaxed)),
        ("gatewayd_recovery_summaries_skipped_total", "Session summaries not written (queue full): such a session gets op 9 after a crash.", r.summaries_skipped.load(Relaxed)),
        ("gatewayd_recovery_store_failures_total", "Rounds of the recovery writer that Redis did not answer in time.", r.store_failures.load(Relaxed)),
        ("gatewayd_recovery_recovered_total", "Sessions of a dead node rebuilt here (RESUMED once their cut is reached).", r.recovered.load(Relaxed)),
        ("gatewayd_recovery_replays_total", "Dead workers' checkpoints read back from the topic and assembled; each serves every session recovered from that checkpoint for 500 ms (recovery costs one per checkpoint and interval, not one per session).", r.replays.load(Relaxed)),
        ("gatewayd_recovery_fenced_sessions_total", "Sessions ended because this node's cluster claim lapsed (a survivor may have recovered them).", r.fenced_sessions.load(Relaxed)),
        ("gatewayd_recovery_registry_reads_total", "Registry reads of the survivor threads (has the holder's claim lapsed? a process proven dead is not asked again for 60 s). Not in gatewayd_registry_call_seconds (the sidecar's).", r.registry_reads.load(Relaxed)),
    ];
    for (name, help, v) in fams {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
        );
    }
}
