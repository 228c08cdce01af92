//! Admin endpoint: Prometheus metrics and health on their own port, served by
//! one thread of its own (so it never competes with the workers' rings)
//! through `net::front`: it polls every connection, so idle or trickling
//! clients cost a descriptor each and never delay a health check (10 idle
//! connections used to hold `/readyz` for 20 s, one 2-s read each, before
//! any token was looked at: issue 41). Every answer is made on that thread
//! at once: none waits for anything outside the process.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use net::front::{Front, FrontStats, Handled, Limits};

use crate::ingest::pipeline::IngestStats;
use crate::link::LinkStats;
use crate::worker::shared::Shared;

/// What the admin port reads: the workers' shared state and counters, and
/// the ingest and registry-link counters.
pub struct Views {
    pub shared: Arc<Shared>,
    pub ingest: Arc<IngestStats>,
    pub link: Arc<LinkStats>,
    pub chat: Arc<crate::chat::ChatStats>,
    /// The counters thread (REST limits shared through Redis).
    pub redis: Arc<crate::link::counters::RedisStats>,
    /// What people see of their interactions, and the interactions' counters.
    pub board: Arc<crate::chat::interactions::Board>,
    pub interactions: Arc<crate::chat::interactions::InteractionStats>,
    pub endpoint: Arc<crate::chat::endpoint::EndpointStats>,
    /// The egress client's outcome counters.
    pub egress: Arc<crate::egress::EgressStats>,
    /// The developer portal's counters.
    pub portal: Arc<crate::portal::PortalStats>,
    /// The cluster link (docs/cluster.md).
    pub cluster: Arc<crate::link::cluster::ClusterStats>,
}

pub struct Admin {
    /// Where it listens (the port is resolved when the config says 0).
    pub addr: SocketAddr,
    _thread: std::thread::JoinHandle<()>,
}

/// The admin port's bounds: a request (a head; a body of at most 1 KiB is
/// taken and ignored) sent whole within 2 s; 1,024 connections at once, the oldest still sending
/// its request closed to make room for a new one.
pub const LIMITS: Limits = Limits {
    max_connections: 1024,
    request_deadline: Duration::from_secs(2),
    write_deadline: Duration::from_secs(5),
    answer_deadline: Duration::from_secs(1),
    max_head: 8 << 10,
    max_body: 1 << 10,
};

pub fn start(addr: SocketAddr, views: Views) -> std::io::Result<Admin> {
    let listener = TcpListener::bind(addr)?;
    let addr = listener.local_addr()?;
    let front = Front::new(&listener)?;
    let thread = std::thread::Builder::new()
        .name("admin".into())
        .spawn(move || {
            let (stats, stop) = (FrontStats::default(), AtomicBool::new(false));
            front.run(listener, LIMITS, &stats, &stop, |req, _| {
                Handled::Answer(answer(req.head(), &views))
            });
        })?;
    Ok(Admin {
        addr,
        _thread: thread,
    })
}

/// Set by `POST /drain` before it signals the process: the drain that
/// follows ends in the exit status that asks to be restarted
/// (node/notify.rs, EXIT_DRAINED_ON_REQUEST).
pub static DRAIN_REQUESTED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Whether the request may use a protected endpoint: no token configured, or
/// `Authorization: Bearer <token>` matching it (compared in constant time).
fn authorized(token: &str, authorization: Option<&str>) -> bool {
    if token.is_empty() {
        return true;
    }
    let Some(given) = authorization.and_then(|a| {
        let (scheme, rest) = a.trim().split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
    }) else {
        return false;
    };
    use sha2::{Digest, Sha256};
    let (a, b) = (
        Sha256::digest(given.as_bytes()),
        Sha256::digest(token.as_bytes()),
    );
    a.iter()
        .zip(b.iter())
        .fold(0u8, |acc, (x, y)| acc | (x ^ y))
        == 0
}

/// The whole answer to one request head.
fn answer(head: &[u8], views: &Views) -> Vec<u8> {
    let shared = &*views.shared;
    let (method, path, query, authorization) = match net::http::parse_head(head) {
        Ok(Some((_, head))) => (head.method, head.path, head.query, head.authorization),
        _ => Default::default(),
    };
    let method = method.as_str();
    let cfg = &shared.cfg;
    let allowed = authorized(&cfg.admin_token, authorization.as_deref());
    let protected = match path.as_str() {
        "/drain" | "/fault/registry" | "/fault/worker-panic" => method == "POST",
        "/metrics" => cfg.admin_metrics_auth,
        p => p.starts_with("/interactions/") || p.starts_with("/applications/"),
    };
    let (status, ctype, body) = match path.as_str() {
        _ if protected && !allowed => {
            views.link.admin_refused.fetch_add(1, Ordering::Relaxed);
            (
                401,
                "text/plain",
                "unauthorized: this endpoint needs Authorization: Bearer <admin_token>\n"
                    .to_string(),
            )
        }
        "/metrics" => {
            let mut out = String::with_capacity(8192);
            crate::ops::metrics::render(
                &shared.metrics,
                shared.started.elapsed().as_secs_f64(),
                &mut out,
            );
            crate::ops::metrics::render_node(shared, &mut out);
            render_ingest(&views.ingest, &mut out);
            render_link(&views.link, &shared.metrics, &mut out);
            crate::ops::metrics::render_ops(&shared.metrics, &views.ingest, &views.link, &mut out);
            crate::ops::rest_metrics::render(&shared.metrics, &views.chat, &views.ingest, &mut out);
            crate::ops::rest_metrics::render_redis(&views.redis, &mut out);
            crate::ops::rest_metrics::render_interactions(
                &views.interactions,
                &views.endpoint,
                &mut out,
            );
            crate::ops::rest_metrics::render_egress(&views.egress, &mut out);
            crate::ops::rest_metrics::render_portal(&views.portal, &shared.apps, &mut out);
            crate::ops::cluster_metrics::render(&views.cluster, &mut out);
            let rec = views.shared.recovery.as_ref().map(|r| &*r.stats);
            crate::ops::cluster_metrics::render_recovery(rec, &mut out);
            (200, "text/plain; version=0.0.4; charset=utf-8", out)
        }
        "/healthz" => (200, "text/plain", "ok\n".to_string()),
        // One application's interactions (ADR-03: its ack rate and latency).
        p if p.starts_with("/applications/") && p.ends_with("/interactions") => {
            match p["/applications/".len()..p.len() - "/interactions".len()].parse::<u64>() {
                Ok(app) => (
                    200,
                    "application/json",
                    views
                        .board
                        .app(app)
                        .unwrap_or_default()
                        .to_json(app)
                        .to_string(),
                ),
                Err(_) => (
                    404,
                    "application/json",
                    r#"{"message": "not an application id"}"#.to_string(),
                ),
            }
        }
        // What the person sees of an interaction (the `gatewayd interact` CLI).
        p if p.starts_with("/interactions/") => match p["/interactions/".len()..]
            .parse::<u64>()
            .ok()
            .and_then(|id| views.board.get(id))
        {
            Some(v) => (200, "application/json", v.to_string()),
            None => (
                404,
                "application/json",
                r#"{"state": "unknown"}"#.to_string(),
            ),
        },
        "/fault/registry" if method == "POST" && shared.cfg.registry.fault_injection => {
            // A drill: every registry call fails until cleared (?down=0).
            let down = !query.contains("down=0");
            views
                .link
                .fault_down
                .store(down, std::sync::atomic::Ordering::Relaxed);
            (
                200,
                "text/plain",
                format!("registry fault injection: down={down}\n"),
            )
        }
        "/fault/worker-panic" if method == "POST" && shared.cfg.registry.fault_injection => {
            // A drill: worker N (?worker=N, default 0) panics as a bug would
            // make it; the node drains the others and exits 1 (node/panic.rs).
            let n = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("worker="))
                .map_or(Some(0), |v| v.parse::<usize>().ok());
            match n.and_then(|w| shared.workers.get(w).map(|h| (w, h))) {
                Some((w, h)) => {
                    h.send(crate::worker::mail::ToWorker::PanicDrill);
                    (202, "text/plain", format!("worker {w}: panic drill sent\n"))
                }
                None => (
                    400,
                    "text/plain",
                    format!(
                        "no such worker: ?worker= takes 0 to {}\n",
                        shared.workers.len() - 1
                    ),
                ),
            }
        }
        "/drain" if method == "POST" => {
            // The same path as SIGTERM: op 7 spread over the drain window,
            // then exit, with the status that asks to be restarted.
            DRAIN_REQUESTED.store(true, Ordering::SeqCst);
            // SAFETY: signalling our own process.
            unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
            (202, "text/plain", "draining\n".to_string())
        }
        "/readyz" => {
            if shared.ready() {
                (200, "text/plain", "ready\n".to_string())
            } else {
                (503, "text/plain", "not ready\n".to_string())
            }
        }
        _ => (
            404,
            "text/plain",
            "not found: try /metrics, /healthz, /readyz\n".to_string(),
        ),
    };
    let mut out = Vec::with_capacity(body.len() + 128);
    let challenge: &[(&str, &str)] = if status == 401 {
        &[("WWW-Authenticate", "Bearer realm=\"gatewayd-admin\"")]
    } else {
        &[]
    };
    net::http::write_response(status, ctype, body.as_bytes(), false, challenge, &mut out);
    out
}

fn render_ingest(st: &crate::ingest::pipeline::IngestStats, out: &mut String) {
    use std::fmt::Write;
    use std::sync::atomic::Ordering::Relaxed;
    let mut one = |name: &str, kind: &str, help: &str, v: u64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
        );
    };
    one(
        "gatewayd_ingest_records_total",
        "counter",
        "Event records accepted by the ingest listener.",
        st.records.load(Relaxed),
    );
    one(
        "gatewayd_ingest_batches_total",
        "counter",
        "Batches of event records handed to the workers (records per batch: records_total over this; each batch wakes the workers it concerns).",
        st.batches.load(Relaxed),
    );
    one(
        "gatewayd_ingest_bytes_total",
        "counter",
        "Bytes read by the ingest listener.",
        st.bytes.load(Relaxed),
    );
    one(
        "gatewayd_ingest_connections",
        "gauge",
        "Producer connections open.",
        st.connections.load(Relaxed) as u64,
    );
    one(
        "gatewayd_ingest_refused_connections_total",
        "counter",
        "Producer connections refused (over the limit).",
        st.refused_connections.load(Relaxed),
    );
    one(
        "gatewayd_ingest_dropped_batches_total",
        "counter",
        "Batches a worker could not take within 1 s.",
        st.dropped_batches.load(Relaxed),
    );
    one(
        "gatewayd_ingest_state_changes_total",
        "counter",
        "Server changes applied from the stream.",
        st.state_changes.load(Relaxed),
    );
    one(
        "gatewayd_ingest_state_changes_failed_total",
        "counter",
        "Server changes that could not be applied.",
        st.state_changes_failed.load(Relaxed),
    );
    let _ = writeln!(out, "# HELP gatewayd_ingest_rejected_total Records rejected, by reason.\n# TYPE gatewayd_ingest_rejected_total counter");
    for (i, reason) in ingest::DecodeError::REASONS.iter().enumerate() {
        let _ = writeln!(
            out,
            "gatewayd_ingest_rejected_total{{reason=\"{reason}\"}} {}",
            st.errors[i].load(Relaxed)
        );
    }
}

fn render_link(
    st: &crate::link::LinkStats,
    workers: &[crate::worker::metrics::WorkerMetrics],
    out: &mut String,
) {
    use std::fmt::Write;
    use std::sync::atomic::Ordering::Relaxed;
    let mut one = |name: &str, kind: &str, help: &str, v: u64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
        );
    };
    one("gatewayd_registry_brownout", "gauge", "1 while the registry is slow or unreachable (existing leases extended, identifies refused).", st.brownout.load(Relaxed) as u64);
    one(
        "gatewayd_identifies_refused_brownout_total",
        "counter",
        "Identifies answered op 9 because the registry was unavailable.",
        st.refused_brownout.load(Relaxed),
    );
    one(
        "gatewayd_identifies_refused_concurrency_total",
        "counter",
        "Identifies answered op 9 by the max_concurrency bucket (one per 5 s).",
        st.refused_concurrency.load(Relaxed),
    );
    one(
        "gatewayd_identifies_refused_daily_limit_total",
        "counter",
        "Identifies answered op 9 because session_start_limit was used up.",
        st.refused_daily_limit.load(Relaxed),
    );
    one(
        "gatewayd_identifies_refused_admission_total",
        "counter",
        "Identifies answered op 9 by the node-wide admission rate or queue bound.",
        st.refused_admission.load(Relaxed)
            + workers
                .iter()
                .map(|m| m.identifies_refused_admission.load(Relaxed))
                .sum::<u64>(),
    );
    one(
        "gatewayd_lease_renewal_batches_total",
        "counter",
        "Lease renewal batches (one registry round trip each).",
        st.lease_batches.load(Relaxed),
    );
    one(
        "gatewayd_leases_renewed_total",
        "counter",
        "(application, server) leases renewed.",
        st.leases_renewed.load(Relaxed),
    );
    one(
        "gatewayd_leases_lost_total",
        "counter",
        "Leases not renewed because the installation is gone.",
        st.leases_lost.load(Relaxed),
    );
    one(
        "gatewayd_leases_extended_brownout_total",
        "counter",
        "Leases extended without confirmation during a brownout.",
        st.leases_extended_in_brownout.load(Relaxed),
    );
    one(
        "gatewayd_revocations_total",
        "counter",
        "Revocations read from the registry outbox and pushed to workers.",
        st.revocations.load(Relaxed),
    );
    one(
        "gatewayd_admin_unauthorized_total",
        "counter",
        "Admin requests refused with 401 (no or wrong bearer token).",
        st.admin_refused.load(Relaxed),
    );
    one(
        "gatewayd_registry_calls_failed_total",
        "counter",
        "Registry calls that failed as unavailable: refused, broken, or no answer within registry.timeout_ms.",
        st.calls_failed.load(Relaxed),
    );
    one(
        "gatewayd_registry_calls_skipped_brownout_total",
        "counter",
        "Registry calls not made in a brownout (failed at once; one probe per max(timeout_ms, 1 s) goes through).",
        st.calls_skipped_brownout.load(Relaxed),
    );
    st.registry_latency.render(
        "gatewayd_registry_call_seconds",
        "Latency of each registry call made by the sidecar.",
        out,
    );
    st.revocation_latency.render(
        "gatewayd_revocation_apply_seconds",
        "From the registry write of a revocation to the last worker applying it.",
        out,
    );
}
