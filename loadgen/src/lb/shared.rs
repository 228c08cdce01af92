//! What the balancer's threads share with its handle: the backends (each
//! with the operator's switch and its last health check, behind a version
//! number the threads poll) and the counters.

use std::net::{SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Mutex;

/// A node behind the balancer.
#[derive(Clone, Debug)]
pub struct Backend {
    pub gateway: SocketAddrV4,
    /// Admin address whose `/readyz` is checked (None: always healthy).
    pub admin: Option<SocketAddr>,
    /// The operator's switch: new connections only while on.
    pub enabled: bool,
}

pub(super) struct BackendState {
    pub(super) b: Backend,
    pub(super) healthy: bool,
}

pub(super) struct Shared {
    pub(super) stop: AtomicBool,
    pub(super) backends: Mutex<Vec<BackendState>>,
    pub(super) version: AtomicU64,
    pub(super) accepted: AtomicU64,
    pub(super) open: AtomicU64,
    pub(super) no_backend: AtomicU64,
    pub(super) refused_full: AtomicU64,
    pub(super) upstream_failures: AtomicU64,
    pub(super) overflows: AtomicU64,
    pub(super) bytes_up: AtomicU64,
    pub(super) bytes_down: AtomicU64,
    pub(super) per_backend: Vec<AtomicU64>,
}
