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
    /// Slots in each worker's rings' fixed file tables (their sizes).
    pub ring_slots: Vec<Vec<u32>>,
    pub metrics: Box<[WorkerMetrics]>,
    /// Per-application figures for the developer portal (bounded).
    pub apps: crate::worker::app_stats::AppTable,
    /// Each worker's sessions one by one, republished once a second.
    pub sessions: crate::worker::session_board::SessionBoard,
    pub ready_workers: AtomicUsize,
    /// Node-wide cap on connections served compressed (limits.max_compressed_sessions).
    pub compress_budget: Arc<crate::protocol::compress::Budget>,
    pub shutting_down: AtomicBool,
    pub started: Instant,
    /// This node in a cluster (docs/cluster.md); None: on its own.
    pub cluster: Option<ClusterLink>,
    /// Crash recovery (docs/cluster.md, "Crash recovery"); None: off.
    pub recovery: Option<RecoveryLink>,
}

/// What the workers of a node with `[recovery]` on need.
pub struct RecoveryLink {
    /// This process in the cluster (random per start) and its link address.
    pub instance: String,
    pub link: String,
    pub writes: Sender<crate::worker::mail::RecoveryWrite>,
    /// Per worker: the checkpoint buffers (allocated at start) come back here.
    pub pools: Vec<crossbeam_channel::Receiver<Vec<u8>>>,
    pub fence: Arc<Fence>,
    pub stats: Arc<RecoveryStats>,
}

/// Whether this node may still serve its sessions: its claim in the
/// registry was last renewed at `last_ok_ms` (Unix ms); past `ttl_ms`
/// after that, other nodes count it dead and may have recovered them.
/// `epoch` grows each time the heartbeat found the claim lapsed or taken.
pub struct Fence {
    pub epoch: std::sync::atomic::AtomicU64,
    pub last_ok_ms: std::sync::atomic::AtomicU64,
    pub ttl_ms: u64,
}

impl Fence {
    /// True if a worker must not deliver (and must end its sessions).
    pub fn lapsed(&self, unix_ms: u64) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        unix_ms > self.last_ok_ms.load(Relaxed).saturating_add(self.ttl_ms)
    }
}

/// Crash recovery's counters (read by the admin port).
#[derive(Default)]
pub struct RecoveryStats {
    pub journal_appends: std::sync::atomic::AtomicU64,
    pub journal_failures: std::sync::atomic::AtomicU64,
    pub checkpoints: std::sync::atomic::AtomicU64,
    pub checkpoints_skipped: std::sync::atomic::AtomicU64,
    pub summaries: std::sync::atomic::AtomicU64,
    pub summaries_skipped: std::sync::atomic::AtomicU64,
    pub store_failures: std::sync::atomic::AtomicU64,
    pub recovered: std::sync::atomic::AtomicU64,
    /// Dead workers' checkpoints read from the topic and assembled (each
    /// serves every session recovered from it for a while).
    pub replays: std::sync::atomic::AtomicU64,
    pub fenced_sessions: std::sync::atomic::AtomicU64,
    /// Registry reads of the survivor threads (is the holder dead yet?).
    pub registry_reads: std::sync::atomic::AtomicU64,
}

/// What a worker of a clustered node needs: its node number (named in the
/// session ids it issues) and the queue of the hand-off threads.
pub struct ClusterLink {
    pub node: u16,
    pub jobs: Sender<crate::worker::mail::TakeJob>,
}

impl Shared {
    /// This node's number in session ids (0: not in a cluster).
    pub fn node(&self) -> u16 {
        self.cluster.as_ref().map_or(0, |c| c.node)
    }

    /// Whether the node takes traffic: every worker is running and no drain
    /// has begun (what `/readyz` answers and `gatewayd_ready` says).
    pub fn ready(&self) -> bool {
        use std::sync::atomic::Ordering::SeqCst;
        self.ready_workers.load(SeqCst) == self.metrics.len() && !self.shutting_down.load(SeqCst)
    }
}

/// The worker of this node that holds (or would hold) session `sid`: the
/// one its id names if this node created it, else the id's worker modulo
/// the workers here (a session moved in from another node). None: a
/// worker number this node does not have (a forged id).
pub fn home_worker(sid: &shards::SessionId, node: u16, workers: usize) -> Option<usize> {
    let w = usize::from(sid.worker());
    if sid.node() == node {
        (w < workers).then_some(w)
    } else {
        Some(w % workers.max(1))
    }
}
