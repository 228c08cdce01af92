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
    /// Other nodes connect here to take sessions over; keep it on a private
    /// network (it trusts the other nodes, see docs/cluster.md).
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
        }
    }
}
