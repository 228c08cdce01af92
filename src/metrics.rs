//! Counters each worker bumps without locks, read by the admin endpoint.
//!
//! One `WorkerMetrics` per worker, written only by that worker (relaxed
//! atomics, each on its own cache lines), summed or labelled by the reader.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::gateway::CloseCode;

#[derive(Default)]
#[repr(align(128))]
pub struct WorkerMetrics {
    pub connections_open: AtomicU64,
    pub connections_accepted: AtomicU64,
    pub accept_errors: AtomicU64,
    pub sessions_ready: AtomicU64,
    pub sessions_detached: AtomicU64,
    pub identifies: AtomicU64,
    pub identifies_refused: AtomicU64,
    pub resumes: AtomicU64,
    pub resumes_refused: AtomicU64,
    pub events_in: AtomicU64,
    pub deliveries: AtomicU64,
    pub deliveries_redacted: AtomicU64,
    pub bytes_out: AtomicU64,
    pub rest_requests: AtomicU64,
    pub handshake_timeouts: AtomicU64,
    pub inbox_full_drops: AtomicU64,
    pub handovers_out: AtomicU64,
    pub handovers_in: AtomicU64,
    pub slow_consumer_closes: AtomicU64,
    pub reconnects_sent: AtomicU64,
    pub rejected_full: AtomicU64,
    pub ring_exhausted: AtomicU64,
    pub history_reclaims: AtomicU64,
    pub handover_fallbacks: AtomicU64,
    pub sessions_degraded: AtomicU64,
    pub arena_records: AtomicU64,
    pub arena_wraps: AtomicU64,
    pub arena_lost_reads: AtomicU64,
    pub ring_chunks_free: AtomicU64,
    /// Gateway closes sent, indexed by code - 4000 (0..=14); 15 counts WebSocket-level closes.
    pub closes: [AtomicU64; 16],
    pub busy_ns: AtomicU64,
}

impl WorkerMetrics {
    pub fn inc(c: &AtomicU64) {
        c.fetch_add(1, Relaxed);
    }
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Relaxed);
    }
    pub fn dec(c: &AtomicU64) {
        c.fetch_sub(1, Relaxed);
    }
    pub fn close_sent(&self, code: u16) {
        let i = code.checked_sub(4000).filter(|i| *i < 15).unwrap_or(15);
        self.closes[i as usize].fetch_add(1, Relaxed);
    }
}

/// Render Prometheus text exposition for all workers.
pub fn render(workers: &[WorkerMetrics], uptime_s: f64, out: &mut String) {
    fn family(out: &mut String, name: &str, kind: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }
    let per_worker: [(&str, &str, &str, fn(&WorkerMetrics) -> &AtomicU64); 29] = [
        ("gatewayd_connections", "gauge", "Open TCP connections (HTTP, WebSocket, closing).", |m| &m.connections_open),
        ("gatewayd_connections_accepted_total", "counter", "TCP connections accepted.", |m| &m.connections_accepted),
        ("gatewayd_accept_errors_total", "counter", "Accepts that failed (e.g. fixed file table full).", |m| &m.accept_errors),
        ("gatewayd_sessions", "gauge", "Gateway sessions that completed READY or RESUMED and are connected.", |m| &m.sessions_ready),
        ("gatewayd_sessions_detached", "gauge", "Disconnected sessions still resumable.", |m| &m.sessions_detached),
        ("gatewayd_identifies_total", "counter", "Identifies that reached READY.", |m| &m.identifies),
        ("gatewayd_identifies_refused_total", "counter", "Identifies refused (bad token, intents, shard, ...).", |m| &m.identifies_refused),
        ("gatewayd_resumes_total", "counter", "Resumes that reached RESUMED.", |m| &m.resumes),
        ("gatewayd_resumes_refused_total", "counter", "Resumes answered with op 9.", |m| &m.resumes_refused),
        ("gatewayd_events_in_total", "counter", "Events received by the worker.", |m| &m.events_in),
        ("gatewayd_deliveries_total", "counter", "Dispatches queued to sessions.", |m| &m.deliveries),
        ("gatewayd_deliveries_redacted_total", "counter", "Dispatches sent without message content.", |m| &m.deliveries_redacted),
        ("gatewayd_sent_bytes_total", "counter", "Bytes written to sockets.", |m| &m.bytes_out),
        ("gatewayd_rest_requests_total", "counter", "REST requests served.", |m| &m.rest_requests),
        ("gatewayd_handshake_timeouts_total", "counter", "Connections closed for not completing the HTTP handshake in time.", |m| &m.handshake_timeouts),
        ("gatewayd_worker_inbox_drops_total", "counter", "Messages dropped because a worker inbox was full.", |m| &m.inbox_full_drops),
        ("gatewayd_handovers_out_total", "counter", "Connections passed to the worker owning their session or placement.", |m| &m.handovers_out),
        ("gatewayd_handovers_in_total", "counter", "Connections adopted from another worker.", |m| &m.handovers_in),
        ("gatewayd_slow_consumer_closes_total", "counter", "Sessions closed (4000, resumable) because their send queue reached its bound.", |m| &m.slow_consumer_closes),
        ("gatewayd_rejected_full_total", "counter", "Connections answered 503 because the ring's fixed file table was full.", |m| &m.rejected_full),
        ("gatewayd_handover_fallbacks_total", "counter", "Handovers refused by a full worker; the connection was served where it was.", |m| &m.handover_fallbacks),
        ("gatewayd_ring_exhausted_total", "counter", "Identifies refused (op 9) because the worker's ring storage (events.ring_chunks) was used up.", |m| &m.ring_exhausted),
        ("gatewayd_history_reclaims_total", "counter", "Times ring storage ran out and every session's sent (resume) history was halved to make room.", |m| &m.history_reclaims),
        ("gatewayd_reconnects_sent_total", "counter", "Op 7 Reconnect sent (drain).", |m| &m.reconnects_sent),
        ("gatewayd_sessions_degraded", "gauge", "Sessions whose send queue is at least 80 % full.", |m| &m.sessions_degraded),
        ("gatewayd_arena_records_total", "counter", "Event records copied into the worker's arena (at most one per variant per event).", |m| &m.arena_records),
        ("gatewayd_arena_wraps_total", "counter", "Times the worker's event arena wrapped around.", |m| &m.arena_wraps),
        ("gatewayd_arena_lost_reads_total", "counter", "Reads of records the arena had already overwritten (events lost to a slow session or resume).", |m| &m.arena_lost_reads),
        ("gatewayd_ring_chunks_free", "gauge", "Free chunks in the worker's session ring slab.", |m| &m.ring_chunks_free),
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
    family(
        out,
        "gatewayd_uptime_seconds",
        "gauge",
        "Seconds since the node started.",
    );
    let _ = writeln!(out, "gatewayd_uptime_seconds {uptime_s:.3}");
}
