//! What the services of a node are started with (`node.rs` makes them,
//! `services.rs` hands them out): the registry connection, this node's
//! name in the shared interaction state and the figures every service
//! publishes. A leaf of `node`.

use std::sync::Arc;
use std::time::Duration;

use registry::{Registry, SqliteRegistry};

use crate::config::Config;

/// The registry, on a connection of its own (the sidecar's; the chat
/// thread's for open interactions).
pub(super) fn open_registry(cfg: &Config) -> Result<Box<dyn Registry>, String> {
    let timeout = Duration::from_millis(cfg.registry.timeout_ms);
    Ok(if cfg.registry_url.is_empty() {
        let reg = SqliteRegistry::open(&cfg.registry_file())
            .map_err(|e| format!("opening registry {}: {e}", cfg.registry_file().display()))?;
        reg.set_busy_timeout(timeout)
            .map_err(|e| format!("registry busy timeout: {e}"))?;
        Box::new(reg)
    } else {
        if let Ok((_, tls)) = registry::postgres::tls::split_url(&cfg.registry_url) {
            if tls.mode == registry::postgres::tls::SslMode::Require && tls.root_cert.is_none() {
                tracing::warn!(
                    sslmode = ?tls.mode,
                    "the PostgreSQL registry's certificate is not verified (sslmode=require): \
                     set sslmode=verify-full and sslrootcert in registry_url"
                );
            }
        }
        Box::new(
            registry::PostgresRegistry::connect(&cfg.registry_url, timeout)
                .map_err(|e| format!("connecting to the PostgreSQL registry: {e}"))?,
        )
    })
}

/// This node's name in the shared interaction state: an embedded registry
/// is this node's alone; a shared one tells nodes apart by host and port.
pub(super) fn interaction_node(cfg: &Config) -> String {
    if cfg.registry_url.is_empty() {
        return "local".into();
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{}:{}", host.trim(), cfg.gateway_addr.port())
}

/// The figures every service publishes and the admin port and the portal
/// read; made once, each service handed its own.
#[derive(Default)]
pub(super) struct Stats {
    pub(super) ingest: Arc<crate::ingest::pipeline::IngestStats>,
    pub(super) link: Arc<crate::link::LinkStats>,
    pub(super) chat: Arc<crate::chat::ChatStats>,
    pub(super) board: Arc<crate::chat::interactions::Board>,
    pub(super) interactions: Arc<crate::chat::interactions::InteractionStats>,
    pub(super) endpoint: Arc<crate::chat::endpoint::EndpointStats>,
    pub(super) portal: Arc<crate::portal::PortalStats>,
    pub(super) cluster: Arc<crate::link::cluster::ClusterStats>,
}
