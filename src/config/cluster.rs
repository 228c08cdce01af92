//! `[cluster]`: nodes sharing a PostgreSQL registry find each other and
//! hand sessions over on Resume (docs/cluster.md).

use std::net::SocketAddr;

use serde::Deserialize;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Cluster {
    /// Join the cluster when the registry is shared (`registry_url` set).
    pub enabled: bool,
    /// Where this node's node-to-node link listens (port 0: any free port).
    /// Other nodes connect here to take sessions over; off loopback it needs
    /// TLS (`tls_*`) or `allow_plaintext_link` (docs/cluster.md).
    pub link_addr: SocketAddr,
    /// The address other nodes are told to dial (empty: `link_addr` as bound).
    pub advertise_addr: String,
    /// How often the node renews its claim in the registry.
    pub heartbeat_ms: u64,
    /// A claim not renewed within this long lapses (the node is dead).
    pub node_ttl_ms: u64,
    /// Deadline of one hand-off, connect to answer: past it, op 9.
    pub handoff_timeout_ms: u64,
    /// Hand-offs waiting for a link thread (op 9 beyond).
    pub handoff_queue: usize,
    /// Threads asking other nodes for sessions, each one request at a time
    /// (1-256): a drain of N sessions over S seconds asks N/S a second.
    pub handoff_threads: usize,
    /// Hand-offs this node serves at once (others are refused at once).
    pub max_link_connections: usize,
    /// After a drain, how long the node keeps its sessions for other nodes
    /// to take (their clients reconnect through the load balancer).
    pub drain_handoff_ms: u64,
    /// Mutual TLS on the link (docs/cluster.md): this node's certificate
    /// chain and key (PEM), and the cluster CA every peer's certificate must
    /// chain to. All three or none.
    pub tls_cert: String,
    pub tls_key: String,
    pub tls_ca: String,
    /// How often the certificate files are looked at (reloaded when their
    /// modification time or length changed); SIGHUP reloads at once.
    pub tls_reload_ms: u64,
    /// Let a link bound to a non-loopback address run without TLS (a loud
    /// warning at start). Off: such a node refuses to start.
    pub allow_plaintext_link: bool,
}

impl Cluster {
    /// `in_cluster`: the node will bind the link (a shared registry, the
    /// cluster enabled).
    pub fn validate(&self, in_cluster: bool) -> Result<(), String> {
        let set = [&self.tls_cert, &self.tls_key, &self.tls_ca]
            .iter()
            .filter(|s| !s.is_empty())
            .count();
        if set != 0 && set != 3 {
            return Err(
                "cluster: set all of tls_cert, tls_key and tls_ca (mutual TLS on the link), or none"
                    .into(),
            );
        }
        if self.tls_reload_ms < 100 {
            return Err("cluster.tls_reload_ms must be at least 100".into());
        }
        if in_cluster
            && set == 0
            && !self.link_addr.ip().is_loopback()
            && !self.allow_plaintext_link
        {
            return Err(format!(
                "cluster.link_addr {} is not a loopback address and the link has no TLS: \
                 set cluster.tls_cert, tls_key and tls_ca (docs/cluster.md, \
                 \"Mutual TLS on the link\"), or allow_plaintext_link = true to run it \
                 unauthenticated",
                self.link_addr
            ));
        }
        Ok(())
    }
}

impl Default for Cluster {
    fn default() -> Self {
        Cluster {
            enabled: true,
            link_addr: "127.0.0.1:0".parse().expect("a socket address"),
            advertise_addr: String::new(),
            heartbeat_ms: 1_000,
            node_ttl_ms: 5_000,
            handoff_timeout_ms: 1_000,
            handoff_queue: 4_096,
            handoff_threads: 16,
            max_link_connections: 64,
            drain_handoff_ms: 8_000,
            tls_cert: String::new(),
            tls_key: String::new(),
            tls_ca: String::new(),
            tls_reload_ms: 60_000,
            allow_plaintext_link: false,
        }
    }
}
