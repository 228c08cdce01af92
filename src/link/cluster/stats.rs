//! The link's counters (`ClusterStats`, read by the admin port): hand-off
//! requests served and refused, heartbeats, figures, TLS refusals and
//! reloads. A leaf: the serving, taking and TLS threads all count here.

use std::sync::atomic::AtomicU64;

/// Counters of the link (read by the admin port).
#[derive(Default)]
pub struct ClusterStats {
    /// This node's number (0: not in a cluster).
    pub node: AtomicU64,
    /// Hand-off requests served, by outcome.
    pub served: AtomicU64,
    pub served_refused_busy: AtomicU64,
    pub served_bad_request: AtomicU64,
    /// Requests that reached us after the asker's deadline (dropped, the session kept).
    pub served_late: AtomicU64,
    /// Our requests that failed on the link (no answer in time, no such node).
    pub take_unreachable: AtomicU64,
    /// Heartbeats that found our claim taken by another node.
    pub claim_lost: AtomicU64,
    pub heartbeat_failures: AtomicU64,
    /// Figures requests (another node's portal) answered, and not (late,
    /// malformed, too long).
    pub figures_served: AtomicU64,
    pub figures_refused: AtomicU64,
    /// Registry reads of the hand-off threads (node addresses, live nodes).
    pub registry_reads: AtomicU64,
    /// Link connections refused before a whole request (at the TLS
    /// handshake, or not let in), by `tls::Refusal::index`.
    pub link_refused: [AtomicU64; 6],
    /// Reloads of the link's certificates, and those that failed (the old
    /// ones kept).
    pub tls_reloads: AtomicU64,
    pub tls_reload_failures: AtomicU64,
}
