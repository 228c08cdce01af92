//! Counters each worker bumps without locks, read by the admin endpoint
//! (rendered by `ops::metrics`).
//!
//! One `WorkerMetrics` per worker, written only by that worker (relaxed
//! atomics, each on its own cache lines), summed or labelled by the reader.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use crate::api::limit::Scope;
use crate::api::route::ROUTE_NAMES;
use crate::delivery::resume::ResumeRefusal;

/// The statuses the REST edge answers with, as metric labels.
pub const REST_STATUSES: [u16; 13] = [
    200, 204, 400, 401, 403, 404, 405, 413, 429, 500, 501, 503, 504,
];

/// REST response counters: a row per route, a column per status. `Default`
/// by hand: the derive stops at arrays of 32, and there are more routes.
pub struct PerRoute(pub [[AtomicU64; REST_STATUSES.len() + 1]; ROUTE_NAMES.len()]);

impl Default for PerRoute {
    fn default() -> Self {
        PerRoute(std::array::from_fn(|_| Default::default()))
    }
}

impl std::ops::Deref for PerRoute {
    type Target = [[AtomicU64; REST_STATUSES.len() + 1]; ROUTE_NAMES.len()];
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

#[derive(Default)]
#[repr(align(128))]
pub struct WorkerMetrics {
    /// Identifies refused at the worker because the sidecar's queue was at
    /// the admission bound (the sidecar counts its own in `LinkStats`).
    pub identifies_refused_admission: AtomicU64,
    pub connections_open: AtomicU64,
    pub connections_accepted: AtomicU64,
    pub accept_errors: AtomicU64,
    pub sessions_ready: AtomicU64,
    pub sessions_detached: AtomicU64,
    pub identifies: AtomicU64,
    pub identifies_refused: AtomicU64,
    pub resumes: AtomicU64,
    pub resumes_refused: AtomicU64,
    /// Refused starts (4010, 4013, a Resume's op 9) not offered to the
    /// sidecar for attribution: its queue was full.
    pub refusals_unattributed: AtomicU64,
    /// The same, by `ResumeRefusal::index`.
    pub resume_refusals: [AtomicU64; ResumeRefusal::COUNT],
    pub events_in: AtomicU64,
    pub deliveries: AtomicU64,
    pub deliveries_redacted: AtomicU64,
    pub bytes_out: AtomicU64,
    /// Sends that wrote bytes (one gathered send per connection per turn),
    /// and the event frames the plain-text ones carried: their ratio is how
    /// much queued events coalesce (issue 30).
    pub sends: AtomicU64,
    pub sent_frames: AtomicU64,
    pub rest_requests: AtomicU64,
    /// REST responses by route (`api::route::ROUTE_NAMES`) and status
    /// (`REST_STATUSES`; the last column counts any other).
    pub rest_responses: PerRoute,
    /// REST latency (request read to answer written) by `ROUTE_CLASSES`.
    pub rest_latency: [crate::histogram::Histogram; crate::api::route::ROUTE_CLASSES.len()],
    /// REST 429s by scope: user, global, shared.
    pub rest_limited: [AtomicU64; 3],
    /// Tokens banned for hammering after 429s, and restricted for too many
    /// invalid requests (the worker's limiter counts, copied after each request).
    pub rest_bans: AtomicU64,
    pub rest_restrictions: AtomicU64,
    /// Source addresses this worker saw reach the invalid-request limit,
    /// and requests it refused because their address was restricted.
    pub rest_address_restrictions: AtomicU64,
    pub rest_address_refused: AtomicU64,
    pub handshake_timeouts: AtomicU64,
    pub inbox_full_drops: AtomicU64,
    pub handovers_out: AtomicU64,
    pub handovers_in: AtomicU64,
    pub slow_consumer_closes: AtomicU64,
    pub reconnects_sent: AtomicU64,
    /// Sessions taken over from another node (RESUMED here) and given to one.
    pub handoffs_in: AtomicU64,
    pub handoffs_out: AtomicU64,
    pub rejected_full: AtomicU64,
    pub ring_exhausted: AtomicU64,
    pub history_reclaims: AtomicU64,
    pub handover_fallbacks: AtomicU64,
    /// Sockets (accepted or adopted) the kernel placed in a slot whose old
    /// connection had not left our table yet; they waited for it.
    pub slot_waits: AtomicU64,
    pub sessions_degraded: AtomicU64,
    pub arena_records: AtomicU64,
    pub arena_wraps: AtomicU64,
    pub arena_lost_reads: AtomicU64,
    pub ring_chunks_free: AtomicU64,
    /// Chunks in the worker's session ring slab (set each tick).
    pub ring_chunks_capacity: AtomicU64,
    /// WebSocket connections that have not reached READY/RESUMED (set each tick).
    pub sessions_handshaking: AtomicU64,
    /// (application, server) leases of this worker's sessions, valid and
    /// lapsed (set at each renewal, every lease TTL/3).
    pub leases_held: AtomicU64,
    pub leases_lapsed: AtomicU64,
    /// Identifies refused with a close (bad token, intents, shard, ...).
    pub identifies_refused_closed: AtomicU64,
    /// Gateway closes sent, indexed by code - 4000 (0..=14); 15 counts WebSocket-level closes.
    pub closes: [AtomicU64; 16],
    pub busy_ns: AtomicU64,
    /// Housekeeping ticks (every 250 ms): the watchdog's proof that the
    /// worker turns (node/notify.rs).
    pub ticks: AtomicU64,
    /// Connections of this worker served with transport compression (set each tick).
    pub compressed_sessions: AtomicU64,
    /// Connections that asked for compression past
    /// limits.max_compressed_sessions: served stored blocks.
    pub compression_stored: AtomicU64,
    /// Message bytes given to compression streams, and what came out.
    pub compress_bytes_in: AtomicU64,
    pub compress_bytes_out: AtomicU64,
    /// Where deliveries' time goes, by stage (delivery/latency.rs).
    pub delivery: crate::delivery::latency::DeliveryLatency,
    /// How long sessions were away before they resumed (delivery/reconnect.rs).
    pub reconnect: crate::delivery::reconnect::ReconnectStats,
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
    pub fn rest_response(&self, route: usize, status: u16) {
        let s = REST_STATUSES
            .iter()
            .position(|&x| x == status)
            .unwrap_or(REST_STATUSES.len());
        self.rest_responses[route.min(ROUTE_NAMES.len() - 1)][s].fetch_add(1, Relaxed);
    }
    pub fn rest_limited(&self, scope: Scope) {
        let i = match scope {
            Scope::User => 0,
            Scope::Global => 1,
            Scope::Shared => 2,
        };
        self.rest_limited[i].fetch_add(1, Relaxed);
    }
    pub fn close_sent(&self, code: u16) {
        let i = code.checked_sub(4000).filter(|i| *i < 15).unwrap_or(15);
        self.closes[i as usize].fetch_add(1, Relaxed);
    }
}
