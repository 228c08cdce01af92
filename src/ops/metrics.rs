//! The Prometheus text the admin port serves: every worker's counters
//! (`worker::metrics::WorkerMetrics`), summed or labelled, and the node's
//! own families (ingest, registry link, process).

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::delivery::resume::ResumeRefusal;
use crate::protocol::CloseCode;
use crate::worker::metrics::WorkerMetrics;

/// Render Prometheus text exposition for all workers.
pub fn render(workers: &[WorkerMetrics], uptime_s: f64, out: &mut String) {
    fn family(out: &mut String, name: &str, kind: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }
    /// (name, type, help, the counter)
    type Family = (
        &'static str,
        &'static str,
        &'static str,
        fn(&WorkerMetrics) -> &AtomicU64,
    );
    let per_worker: [Family; 39] = [
        ("gatewayd_connections", "gauge", "Open TCP connections (HTTP, WebSocket, closing).", |m| &m.connections_open),
        ("gatewayd_connections_accepted_total", "counter", "TCP connections accepted.", |m| &m.connections_accepted),
        ("gatewayd_accept_errors_total", "counter", "Accepts that failed (e.g. fixed file table full).", |m| &m.accept_errors),
        ("gatewayd_sessions", "gauge", "Gateway sessions that completed READY or RESUMED and are connected.", |m| &m.sessions_ready),
        ("gatewayd_sessions_detached", "gauge", "Disconnected sessions still resumable.", |m| &m.sessions_detached),
        ("gatewayd_identifies_total", "counter", "Identifies that reached READY.", |m| &m.identifies),
        ("gatewayd_identifies_refused_total", "counter", "Identifies refused (bad token, intents, shard, ...).", |m| &m.identifies_refused),
        ("gatewayd_resumes_total", "counter", "Resumes that reached RESUMED.", |m| &m.resumes),
        ("gatewayd_resumes_refused_total", "counter", "Resumes answered with op 9.", |m| &m.resumes_refused),
        ("gatewayd_start_refusals_unattributed_total", "counter", "Refused starts (4010, 4013, a Resume's op 9) left out of their application's portal figures: the registry sidecar's queue was full.", |m| &m.refusals_unattributed),
        ("gatewayd_events_in_total", "counter", "Events received by the worker.", |m| &m.events_in),
        ("gatewayd_deliveries_total", "counter", "Dispatches queued to sessions.", |m| &m.deliveries),
        ("gatewayd_deliveries_redacted_total", "counter", "Dispatches sent without message content.", |m| &m.deliveries_redacted),
        ("gatewayd_sent_bytes_total", "counter", "Bytes written to sockets.", |m| &m.bytes_out),
        ("gatewayd_sends_total", "counter", "Sends that wrote bytes: one gathered send per connection per turn, however many frames it carries.", |m| &m.sends),
        ("gatewayd_sent_frames_total", "counter", "Event frames the plain-text sends carried (gatewayd_sent_frames_total / gatewayd_sends_total: frames per send, how much queued events coalesce).", |m| &m.sent_frames),
        ("gatewayd_rest_requests_total", "counter", "REST requests served.", |m| &m.rest_requests),
        ("gatewayd_handshake_timeouts_total", "counter", "Connections closed for not completing the HTTP handshake in time.", |m| &m.handshake_timeouts),
        ("gatewayd_worker_inbox_drops_total", "counter", "Messages dropped because a worker inbox was full.", |m| &m.inbox_full_drops),
        ("gatewayd_handovers_out_total", "counter", "Connections passed to the worker owning their session or placement.", |m| &m.handovers_out),
        ("gatewayd_handovers_in_total", "counter", "Connections adopted from another worker.", |m| &m.handovers_in),
        ("gatewayd_slow_consumer_closes_total", "counter", "Sessions closed (4000, resumable) because their send queue reached its bound.", |m| &m.slow_consumer_closes),
        ("gatewayd_rejected_full_total", "counter", "Connections answered 503 because the ring's fixed file table was full.", |m| &m.rejected_full),
        ("gatewayd_handover_fallbacks_total", "counter", "Handovers refused by a full worker; the connection was served where it was.", |m| &m.handover_fallbacks),
        ("gatewayd_slot_waits_total", "counter", "Sockets the kernel placed in a fixed-table slot before the close or handover of its old connection had completed here; each waited for that completion (a completion-order race, harmless).", |m| &m.slot_waits),
        ("gatewayd_ring_exhausted_total", "counter", "Identifies refused (op 9) because the worker's ring storage (events.ring_chunks) was used up.", |m| &m.ring_exhausted),
        ("gatewayd_history_reclaims_total", "counter", "Times ring storage ran out and every session's sent (resume) history was halved to make room.", |m| &m.history_reclaims),
        ("gatewayd_reconnects_sent_total", "counter", "Op 7 Reconnect sent (drain).", |m| &m.reconnects_sent),
        ("gatewayd_handoffs_in_total", "counter", "Sessions taken over from another node of the cluster (RESUMED here).", |m| &m.handoffs_in),
        ("gatewayd_handoffs_out_total", "counter", "Sessions given to another node of the cluster that a Resume reached.", |m| &m.handoffs_out),
        ("gatewayd_sessions_degraded", "gauge", "Sessions whose send queue is at least 80 % full.", |m| &m.sessions_degraded),
        ("gatewayd_arena_records_total", "counter", "Event records copied into the worker's arena (at most one per variant per event).", |m| &m.arena_records),
        ("gatewayd_arena_wraps_total", "counter", "Times the worker's event arena wrapped around.", |m| &m.arena_wraps),
        ("gatewayd_arena_lost_reads_total", "counter", "Reads of records the arena had already overwritten (events lost to a slow session or resume).", |m| &m.arena_lost_reads),
        ("gatewayd_ring_chunks_free", "gauge", "Free chunks in the worker's session ring slab.", |m| &m.ring_chunks_free),
        ("gatewayd_compressed_sessions", "gauge", "Connections served with a compressing zlib-stream or zstd-stream (not those served stored blocks past the cap).", |m| &m.compressed_sessions),
        ("gatewayd_compression_stored_total", "counter", "Connections that asked for compression past limits.max_compressed_sessions and were served the stream's framing with nothing compressed (stored blocks).", |m| &m.compression_stored),
        ("gatewayd_compression_in_bytes_total", "counter", "Message bytes given to transport compression.", |m| &m.compress_bytes_in),
        ("gatewayd_compression_out_bytes_total", "counter", "Compressed bytes transport compression produced (before WebSocket framing).", |m| &m.compress_bytes_out),
    ];
    for (name, kind, help, get) in per_worker {
        family(out, name, kind, help);
        for (i, w) in workers.iter().enumerate() {
            let _ = writeln!(out, "{name}{{worker=\"{i}\"}} {}", get(w).load(Relaxed));
        }
    }
    family(
        out,
        "gatewayd_closes_total",
        "counter",
        "Close frames sent, by close code.",
    );
    for (i, w) in workers.iter().enumerate() {
        for (j, c) in w.closes.iter().enumerate() {
            let v = c.load(Relaxed);
            if v == 0 {
                continue;
            }
            let reason = if j < 15 {
                CloseCode::from_u16(4000 + j as u16)
                    .map(|c| c.name())
                    .unwrap_or("other")
            } else {
                "websocket"
            };
            let code = if j < 15 {
                (4000 + j).to_string()
            } else {
                "rfc6455".into()
            };
            let _ = writeln!(
                out,
                "gatewayd_closes_total{{worker=\"{i}\",code=\"{code}\",reason=\"{reason}\"}} {v}"
            );
        }
    }
    family(
        out,
        "gatewayd_resume_refusals_total",
        "counter",
        "Resumes answered with op 9, by reason (summed over workers).",
    );
    for r in ResumeRefusal::ALL {
        let v: u64 = workers
            .iter()
            .map(|w| w.resume_refusals[r.index()].load(Relaxed))
            .sum();
        let _ = writeln!(
            out,
            "gatewayd_resume_refusals_total{{reason=\"{}\"}} {v}",
            r.label()
        );
    }
    family(
        out,
        "gatewayd_worker_busy_seconds_total",
        "counter",
        "CPU time each worker thread spent processing (user and system), not waiting.",
    );
    for (i, w) in workers.iter().enumerate() {
        let _ = writeln!(
            out,
            "gatewayd_worker_busy_seconds_total{{worker=\"{i}\"}} {:.6}",
            w.busy_ns.load(Relaxed) as f64 / 1e9
        );
    }
    render_delivery(workers, out);
    family(
        out,
        "gatewayd_uptime_seconds",
        "gauge",
        "Seconds since the node started.",
    );
    let _ = writeln!(out, "gatewayd_uptime_seconds {uptime_s:.3}");
}

/// The delivery latency families (delivery/latency.rs), per worker.
fn render_delivery(workers: &[WorkerMetrics], out: &mut String) {
    use crate::delivery::latency::{render_series, Stage};
    let _ = writeln!(
        out,
        "# HELP gatewayd_delivery_stage_seconds Where a delivery's time goes, per worker: \
         commit_to_read (the record's commit time to the ingest read), read_to_inbox (to the \
         worker taking its batch), inbox_to_submit (to the send carrying its frame submitted), \
         submit_to_sent (to that send's completion). Each counts deliveries (an event to one \
         session), each once.\n# TYPE gatewayd_delivery_stage_seconds histogram"
    );
    for (i, w) in workers.iter().enumerate() {
        for s in Stage::ALL {
            let (c, sum) = w.delivery.stages[s as usize].read();
            let labels = format!("worker=\"{i}\",stage=\"{}\"", s.label());
            render_series("gatewayd_delivery_stage_seconds", &labels, &c, sum, out);
        }
    }
    let _ = writeln!(
        out,
        "# HELP gatewayd_delivery_seconds An event's commit time to its frame handed to the \
         kernel (the send's completion; under TLS or compression its submission), per worker, \
         one count per delivery.\n# TYPE gatewayd_delivery_seconds histogram"
    );
    for (i, w) in workers.iter().enumerate() {
        let (c, sum) = w.delivery.end_to_end.read();
        render_series(
            "gatewayd_delivery_seconds",
            &format!("worker=\"{i}\""),
            &c,
            sum,
            out,
        );
    }
    let _ = writeln!(
        out,
        "# HELP gatewayd_delivery_resent_total Frames sent again after a Resume (not timed again).\n\
         # TYPE gatewayd_delivery_resent_total counter"
    );
    for (i, w) in workers.iter().enumerate() {
        let _ = writeln!(
            out,
            "gatewayd_delivery_resent_total{{worker=\"{i}\"}} {}",
            w.delivery.resent.load(Relaxed)
        );
    }
    render_reconnects(workers, out);
}

/// The reconnect-time families (delivery/reconnect.rs), summed over workers.
fn render_reconnects(workers: &[WorkerMetrics], out: &mut String) {
    use crate::delivery::reconnect::{GAP_BOUNDS_MS, WINDOWS_S};
    let sum = |f: &dyn Fn(&WorkerMetrics) -> u64| -> u64 { workers.iter().map(f).sum() };
    let _ = writeln!(
        out,
        "# HELP gatewayd_reconnect_seconds Time from the node seeing a session's connection go \
         to its Resume (RESUMED here, or handed to another node), counted by the node that held \
         it.\n# TYPE gatewayd_reconnect_seconds histogram"
    );
    let mut cum = 0;
    for (i, b) in GAP_BOUNDS_MS.iter().enumerate() {
        cum += sum(&|w| w.reconnect.gaps[i].load(Relaxed));
        let _ = writeln!(
            out,
            "gatewayd_reconnect_seconds_bucket{{le=\"{}\"}} {cum}",
            *b as f64 / 1000.0
        );
    }
    cum += sum(&|w| w.reconnect.gaps[GAP_BOUNDS_MS.len()].load(Relaxed));
    let _ = writeln!(
        out,
        "gatewayd_reconnect_seconds_bucket{{le=\"+Inf\"}} {cum}"
    );
    let _ = writeln!(
        out,
        "gatewayd_reconnect_seconds_sum {:.3}\ngatewayd_reconnect_seconds_count {cum}",
        sum(&|w| w.reconnect.gap_sum_ms.load(Relaxed)) as f64 / 1000.0
    );
    let _ = writeln!(
        out,
        "# HELP gatewayd_resume_attempts_timed_total Resumes whose time away is known: resumed, \
         handed off, or refused for a session whose window had passed (remembered 6 min).\n\
         # TYPE gatewayd_resume_attempts_timed_total counter\n\
         gatewayd_resume_attempts_timed_total {}",
        sum(&|w| w.reconnect.attempts.load(Relaxed))
    );
    let _ = writeln!(
        out,
        "# HELP gatewayd_resume_expired_total Resumes refused because the session's window had \
         passed (of sessions still remembered).\n\
         # TYPE gatewayd_resume_expired_total counter\n\
         gatewayd_resume_expired_total {}",
        sum(&|w| w.reconnect.expired_refused.load(Relaxed))
    );
    let _ = writeln!(
        out,
        "# HELP gatewayd_resume_window_refusals_total Of the timed Resume attempts, those a resume \
         window of this many seconds would have refused (away longer).\n\
         # TYPE gatewayd_resume_window_refusals_total counter"
    );
    for (i, w) in WINDOWS_S.iter().enumerate() {
        let _ = writeln!(
            out,
            "gatewayd_resume_window_refusals_total{{window=\"{w}\"}} {}",
            sum(&|m| m.reconnect.beyond[i].load(Relaxed))
        );
    }
}

/// The build (`gatewayd_build_info`), whether the node takes traffic
/// (`gatewayd_ready`, as `/readyz` answers) and each worker's io_uring
/// fixed file tables (`gatewayd_fixed_file_slots`).
pub fn render_node(shared: &crate::worker::shared::Shared, out: &mut String) {
    fn family(out: &mut String, name: &str, kind: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }
    family(
        out,
        "gatewayd_build_info",
        "gauge",
        "Always 1; the labels say which build runs: the crate version and the git commit it was built from (unknown: built outside a git checkout).",
    );
    let _ = writeln!(
        out,
        "gatewayd_build_info{{version=\"{}\",commit=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION"),
        env!("GATEWAYD_COMMIT")
    );
    family(
        out,
        "gatewayd_ready",
        "gauge",
        "1 while the node takes traffic (GET /readyz answers 200); 0 while it starts or drains.",
    );
    let _ = writeln!(out, "gatewayd_ready {}", u8::from(shared.ready()));
    family(
        out,
        "gatewayd_fixed_file_slots",
        "gauge",
        "Slots of the io_uring fixed file tables of the worker's rings (one per connection; sized by limits.max_sessions_per_worker and ring.headroom_percent, each table at most RLIMIT_NOFILE), used and free.",
    );
    for (i, (load, slots)) in shared.ring_load.iter().zip(&shared.ring_slots).enumerate() {
        let used: u64 = load.iter().map(|u| u64::from(u.load(Relaxed))).sum();
        let all: u64 = slots.iter().map(|&s| u64::from(s)).sum();
        for (state, v) in [("used", used), ("free", all.saturating_sub(used))] {
            let _ = writeln!(
                out,
                "gatewayd_fixed_file_slots{{worker=\"{i}\",state=\"{state}\"}} {v}"
            );
        }
    }
}

/// The operations view: families that combine the per-worker counters, the
/// ingest listener's and the registry link's into conventional labelled
/// families (sessions by state, drops by reason, ring fill, identify
/// refusals by reason, leases), and the `process_*` families from /proc.
/// The per-worker families above stay as they were (documented in README).
pub fn render_ops(
    workers: &[WorkerMetrics],
    ingest: &crate::ingest::pipeline::IngestStats,
    link: &crate::link::LinkStats,
    out: &mut String,
) {
    fn family(out: &mut String, name: &str, kind: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }
    let sum = |get: fn(&WorkerMetrics) -> &AtomicU64| -> u64 {
        workers.iter().map(|w| get(w).load(Relaxed)).sum()
    };

    family(
        out,
        "gatewayd_sessions_by_state",
        "gauge",
        "Sessions per worker by state: connected (READY/RESUMED, attached), detached (resumable, no connection), \
handshaking (WebSocket open, not yet READY), degraded (send queue at least 80 % full; a subset of connected and detached).",
    );
    for (i, w) in workers.iter().enumerate() {
        for (state, c) in [
            ("connected", &w.sessions_ready),
            ("detached", &w.sessions_detached),
            ("handshaking", &w.sessions_handshaking),
            ("degraded", &w.sessions_degraded),
        ] {
            let _ = writeln!(
                out,
                "gatewayd_sessions_by_state{{worker=\"{i}\",state=\"{state}\"}} {}",
                c.load(Relaxed)
            );
        }
    }

    family(
        out,
        "gatewayd_drops_total",
        "counter",
        "Things dropped or cut short, node-wide, by reason (per-worker detail in the family each reason names in README).",
    );
    let malformed: u64 = ingest.errors.iter().map(|e| e.load(Relaxed)).sum();
    let drops: [(&str, u64); 7] = [
        ("slow_consumer_close", sum(|m| &m.slow_consumer_closes)),
        ("inbox_full", sum(|m| &m.inbox_full_drops)),
        ("ring_exhausted", sum(|m| &m.ring_exhausted)),
        ("history_reclaim", sum(|m| &m.history_reclaims)),
        ("arena_lost_read", sum(|m| &m.arena_lost_reads)),
        ("ingest_malformed", malformed),
        ("ingest_batch_dropped", ingest.dropped_batches.load(Relaxed)),
    ];
    for (reason, v) in drops {
        let _ = writeln!(out, "gatewayd_drops_total{{reason=\"{reason}\"}} {v}");
    }

    family(
        out,
        "gatewayd_ring_chunks_used",
        "gauge",
        "Chunks in use in the worker's session ring slab (events.ring_chunks).",
    );
    for (i, w) in workers.iter().enumerate() {
        let cap = w.ring_chunks_capacity.load(Relaxed);
        let used = cap.saturating_sub(w.ring_chunks_free.load(Relaxed));
        let _ = writeln!(out, "gatewayd_ring_chunks_used{{worker=\"{i}\"}} {used}");
    }
    family(
        out,
        "gatewayd_ring_chunks_capacity",
        "gauge",
        "Chunks in the worker's session ring slab.",
    );
    for (i, w) in workers.iter().enumerate() {
        let _ = writeln!(
            out,
            "gatewayd_ring_chunks_capacity{{worker=\"{i}\"}} {}",
            w.ring_chunks_capacity.load(Relaxed)
        );
    }

    family(
        out,
        "gatewayd_identify_refusals_total",
        "counter",
        "Identifies refused, node-wide, by reason (close: bad token, intents, shard..., see gatewayd_closes_total; \
the others are op 9).",
    );
    let total = sum(|m| &m.identifies_refused);
    let closed = sum(|m| &m.identifies_refused_closed);
    let by_reason: [(&str, u64); 6] = [
        ("close", closed),
        ("brownout", link.refused_brownout.load(Relaxed)),
        ("concurrency", link.refused_concurrency.load(Relaxed)),
        ("daily_limit", link.refused_daily_limit.load(Relaxed)),
        (
            "admission",
            link.refused_admission.load(Relaxed) + sum(|m| &m.identifies_refused_admission),
        ),
        ("ring_exhausted", sum(|m| &m.ring_exhausted)),
    ];
    let known: u64 = by_reason.iter().map(|(_, v)| v).sum();
    for (reason, v) in by_reason {
        let _ = writeln!(
            out,
            "gatewayd_identify_refusals_total{{reason=\"{reason}\"}} {v}"
        );
    }
    let _ = writeln!(
        out,
        "gatewayd_identify_refusals_total{{reason=\"other\"}} {}",
        total.saturating_sub(known)
    );

    family(
        out,
        "gatewayd_leases",
        "gauge",
        "(application, server) leases of the worker's sessions: held (valid) or lapsed (not renewed; \
their events stop). Updated at each renewal (every lease TTL/3).",
    );
    for (i, w) in workers.iter().enumerate() {
        for (state, c) in [("held", &w.leases_held), ("lapsed", &w.leases_lapsed)] {
            let _ = writeln!(
                out,
                "gatewayd_leases{{worker=\"{i}\",state=\"{state}\"}} {}",
                c.load(Relaxed)
            );
        }
    }

    render_process(out);
}

/// Standard `process_*` families from /proc/self (Linux).
fn render_process(out: &mut String) {
    fn family(out: &mut String, name: &str, kind: &str, help: &str, v: f64) {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
        );
    }
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return;
    };
    // The fields after the command name (which may hold spaces) start at field 3.
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| -> f64 { f.get(n - 3).and_then(|v| v.parse().ok()).unwrap_or(0.0) };
    // SAFETY: sysconf has no preconditions.
    let (tck, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK).max(1) as f64,
            libc::sysconf(libc::_SC_PAGESIZE).max(1) as f64,
        )
    };
    family(
        out,
        "process_cpu_seconds_total",
        "counter",
        "Total user and system CPU time spent in seconds.",
        (field(14) + field(15)) / tck,
    );
    family(
        out,
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory size in bytes.",
        field(24) * page,
    );
    family(
        out,
        "process_virtual_memory_bytes",
        "gauge",
        "Virtual memory size in bytes.",
        field(23),
    );
    family(
        out,
        "process_threads",
        "gauge",
        "Number of OS threads in the process.",
        field(20),
    );
    if let Some(btime) = std::fs::read_to_string("/proc/stat").ok().and_then(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("btime ")?.trim().parse::<f64>().ok())
    }) {
        family(
            out,
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since unix epoch in seconds.",
            btime + field(22) / tck,
        );
    }
    if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
        family(
            out,
            "process_open_fds",
            "gauge",
            "Number of open file descriptors.",
            fds.count() as f64,
        );
    }
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into a local.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
        family(
            out,
            "process_max_fds",
            "gauge",
            "Maximum number of open file descriptors.",
            lim.rlim_cur as f64,
        );
    }
}
