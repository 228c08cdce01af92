//! What every worker reads: the configuration, the other workers' inboxes
//! and rings (for handing connections over), the sidecar's queue, and the
//! per-worker counters. Built once by `node::run` before the workers start.

use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;
use std::time::Instant;

use crossbeam_channel::Sender;

use crate::config::Config;
use crate::worker::mail::{SidecarRequest, WorkerHandle};
use crate::worker::metrics::WorkerMetrics;

/// Read-only state the workers share (plus lock-free counters). The
/// node-wide view of the admin port adds the ingest and link counters
/// (`ops::admin::Views`).
pub struct Shared {
    pub cfg: Config,
    pub gateway_url: String,
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub sidecar: Sender<SidecarRequest>,
    /// The counters thread's queue, when the REST limits are shared
    /// between nodes through Redis (`rest.redis_url`).
    pub counters: Option<crate::api::shared::Outbox>,
    /// Invalid REST requests per source address, across workers.
    pub rest_addrs: crate::api::addr::AddressTable,
    /// The chat service (the commit step of REST actions).
    pub chat: Sender<crate::worker::mail::ChatRequest>,
    /// Every worker's inbox, for handing connections over.
    pub workers: Arc<[WorkerHandle]>,
    /// Every worker's ring descriptors: MSG_RING targets.
    pub ring_fds: Vec<Vec<std::os::fd::RawFd>>,
    /// Slots in use per worker per ring (written by the owner), and the
    /// level above which no connection is handed to that ring.
    pub ring_load: Vec<Vec<std::sync::atomic::AtomicU32>>,
    pub ring_limits: Vec<Vec<u32>>,
    pub metrics: Box<[WorkerMetrics]>,
    /// Per-application figures for the developer portal (bounded).
    pub apps: crate::worker::app_stats::AppTable,
    pub ready_workers: AtomicUsize,
    /// Node-wide cap on connections served compressed (limits.max_compressed_sessions).
    pub compress_budget: Arc<crate::protocol::compress::Budget>,
    pub shutting_down: AtomicBool,
    pub started: Instant,
}
