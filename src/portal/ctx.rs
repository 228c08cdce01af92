//! What every page of the portal works with: `Ctx` (the node's views, the
//! configuration, the registry connection, the sign-in sessions and
//! guard, the sessions history and the cluster view), the portal's
//! counters, and the small helpers all handlers share. A leaf of
//! `portal`: `mod.rs` routes to the handlers, which all take a `Ctx`.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, MutexGuard};

use registry::Registry;

use super::cluster_state::State;
use super::history::History;
use super::limit::SigninGuard;
use super::sessions::Sessions;
use crate::config::Portal as PortalConfig;
use crate::worker::shared::Shared;

/// What the portal reads and uses.
pub struct Views {
    pub shared: Arc<Shared>,
    pub board: Arc<crate::chat::board::Board>,
    pub egress: Arc<crate::egress::EgressClient>,
    /// The ingest listener (test events go in as a producer's would).
    pub ingest_addr: SocketAddr,
    pub stats: Arc<PortalStats>,
    /// The cluster link's TLS (other nodes' figures are asked over it).
    pub link_tls: crate::link::cluster::tls::Tls,
}

/// The portal's counters (`gatewayd_portal_*` on the admin port).
#[derive(Default)]
pub struct PortalStats {
    pub requests: AtomicU64,
    pub signins: AtomicU64,
    pub signins_failed: AtomicU64,
    /// Sign-ins refused unlooked-at: the address or everyone over the limit.
    pub signins_refused: AtomicU64,
    pub csrf_refused: AtomicU64,
    /// Requests with a session cookie that is unknown, forged or expired.
    pub bad_sessions: AtomicU64,
    /// Connections answered 503 because every handler was busy.
    pub busy: AtomicU64,
    pub sessions: AtomicU64,
    /// Other nodes asked for an application's figures (link calls made).
    pub cluster_asks: AtomicU64,
    /// Of them, the nodes that gave no figures in time (named on the page).
    pub cluster_silent: AtomicU64,
    /// Health polls served the other nodes' figures from the cache.
    pub cluster_cached: AtomicU64,
}

pub(crate) struct Ctx {
    pub v: Views,
    pub cfg: PortalConfig,
    pub secure: bool,
    pub registry: Mutex<Box<dyn Registry>>,
    pub sessions: Mutex<Sessions>,
    pub guard: Mutex<SigninGuard>,
    pub history: Mutex<History>,
    pub cluster: State,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Ctx {
    pub(crate) fn registry(&self) -> MutexGuard<'_, Box<dyn Registry>> {
        lock(&self.registry)
    }
}

/// The key of an address in the REST edge's per-address table.
pub(crate) fn ip_key(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

pub(crate) fn now_ms() -> u64 {
    registry::snowflake::unix_ms_now()
}
