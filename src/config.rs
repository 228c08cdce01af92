//! Node configuration: a TOML file (`--config`), then command-line flags on
//! top. Every address, path and size has a default that runs on a laptop.

use std::path::{Path, PathBuf};

mod cluster;
mod egress;
mod flags;
mod model;
mod portal;
mod recovery;
mod secrets;
mod sections;
pub use cluster::Cluster;
pub use egress::Egress;
pub use flags::{OnOff, RunArgs, SecretArgs};
pub use model::{Config, Events, Limits, RegistryLink, RingSizes, TlsConfig};
pub use portal::{Portal, PortalArgs};
pub use recovery::Recovery;
pub use sections::{Chat, Demo, Rest};

impl Config {
    pub fn load(args: &RunArgs) -> Result<Config, String> {
        let mut cfg = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("reading config {}: {e}", path.display()))?;
                toml::from_str(&text).map_err(|e| format!("config {}: {e}", path.display()))?
            }
            None => Config::default(),
        };
        args.apply(&mut cfg);
        secrets::from_files(&mut cfg, args)?;
        cfg.validate()?;
        Ok(cfg)
    }

    fn validate(&self) -> Result<(), String> {
        if self.tls.cert.is_some() != self.tls.key.is_some() {
            return Err("tls: set both cert and key, or neither".into());
        }
        let e = &self.events;
        if e.kafka_tls_cert.is_some() != e.kafka_tls_key.is_some() {
            return Err("events: set both kafka_tls_cert and kafka_tls_key, or neither".into());
        }
        for (key, path) in [
            ("kafka_tls_ca", &e.kafka_tls_ca),
            ("kafka_tls_cert", &e.kafka_tls_cert),
            ("kafka_tls_key", &e.kafka_tls_key),
        ] {
            if let Some(path) = path {
                std::fs::File::open(path)
                    .map_err(|err| format!("events.{key} {}: {err}", path.display()))?;
            }
        }
        if !self.ring.recv_buffers.is_power_of_two() {
            return Err("ring.recv_buffers must be a power of two".into());
        }
        if self.limits.heartbeat_interval_ms < 100 {
            return Err("limits.heartbeat_interval_ms must be at least 100".into());
        }
        if self.limits.inbound_message_bytes < 128 {
            return Err("limits.inbound_message_bytes must be at least 128".into());
        }
        if self.workers > 255 {
            return Err(
                "workers: at most 255 (the session id encodes the worker in one byte)".into(),
            );
        }
        if self.events.max_unsent == 0
            || self.events.max_unsent > self.events.max_held.max(self.events.max_unsent)
        {
            return Err("events.max_unsent must be positive".into());
        }
        if self.events.arena_bytes < 1 << 20 {
            return Err("events.arena_bytes must be at least 1 MiB".into());
        }
        if self.events.send_slots == 0 {
            return Err("events.send_slots must be positive".into());
        }
        if !self.admin_addr.ip().is_loopback() && self.admin_token.is_empty() {
            return Err(format!(
                "admin_addr {} is not a loopback address: set admin_token in the config \
                 (or GATEWAYD_ADMIN_TOKEN) so that POST /drain and /fault/registry require \
                 `Authorization: Bearer <token>`",
                self.admin_addr
            ));
        }
        if !self.admin_token.is_empty() && self.admin_token.chars().count() < 16 {
            return Err("admin_token must be at least 16 characters".into());
        }
        if self.admin_token.chars().any(|c| !c.is_ascii_graphic()) {
            return Err("admin_token may hold only printable ASCII without spaces".into());
        }
        if self.registry.timeout_ms < 10 {
            return Err("registry.timeout_ms must be at least 10".into());
        }
        if self.registry.lease_ttl_ms < 100 {
            return Err("registry.lease_ttl_ms must be at least 100".into());
        }
        // The URL itself is checked where it is used (`chat::upstream::Url`).
        if !(1..=64).contains(&self.chat.upstream_connections) {
            return Err("chat.upstream_connections must be 1-64".into());
        }
        if !(10..=60_000).contains(&self.chat.upstream_timeout_ms) {
            return Err("chat.upstream_timeout_ms must be 10-60000".into());
        }
        let redis = |u: &str| u.starts_with("redis://") || u.starts_with("rediss://");
        if !self.rest.redis_url.is_empty() && !redis(&self.rest.redis_url) {
            return Err(
                "rest.redis_url: expected redis://[:password@]host[:port][/db] or rediss://... (TLS)"
                    .into(),
            );
        }
        if !(2..=100).contains(&self.rest.redis_sync_ms) {
            return Err("rest.redis_sync_ms must be 2..=100 (counters are reconciled at least every 100 ms)".into());
        }
        if !(1..=5_000).contains(&self.rest.redis_timeout_ms) {
            return Err("rest.redis_timeout_ms must be 1..=5000".into());
        }
        self.cluster
            .validate(self.cluster.enabled && !self.registry_url.is_empty())?;
        self.egress.validate()?;
        self.recovery.validate(
            &self.registry_url,
            self.cluster.enabled,
            !self.events.kafka_brokers.is_empty(),
            self.registry.lease_ttl_ms,
            self.cluster.node_ttl_ms,
        )?;
        self.portal.validate(self.admin_addr)?;
        if self.demo.interval_ms == 0 {
            return Err("demo.interval_ms must be positive".into());
        }
        Ok(())
    }

    pub fn registry_file(&self) -> PathBuf {
        if self.registry_path.as_os_str().is_empty() {
            self.data_dir.join("registry.sqlite")
        } else {
            self.registry_path.clone()
        }
    }

    pub fn tls_enabled(&self) -> bool {
        self.tls.cert.is_some()
    }

    /// The URL bots are told to connect (and resume) to.
    pub fn gateway_url(&self) -> String {
        if !self.public_url.is_empty() {
            return self.public_url.trim_end_matches('/').to_string();
        }
        let scheme = if self.tls_enabled() { "wss" } else { "ws" };
        format!("{scheme}://{}", self.gateway_addr)
    }

    pub fn worker_count(&self) -> usize {
        if self.workers > 0 {
            self.workers
        } else {
            shards::available_cores().len().max(1)
        }
    }

    pub fn data_path(&self, name: impl AsRef<Path>) -> PathBuf {
        self.data_dir.join(name)
    }
}

#[cfg(test)]
mod tests;
