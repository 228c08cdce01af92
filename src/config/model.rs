//! The configuration's model: `Config` and the sections it holds directly
//! (the others are their own files: `cluster`, `egress`, `portal`,
//! `recovery`, `sections`), each with its defaults, as the TOML file
//! deserializes into it. A leaf of `config`: the flags (`flags.rs`) and the
//! secrets (`secrets.rs`) fill it; `config.rs` loads and checks it.

use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use super::cluster::Cluster;
use super::egress::Egress;
use super::portal::Portal;
use super::recovery::Recovery;
use super::sections::{Chat, Demo, Rest};

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where the registry file and the demo token live.
    pub data_dir: PathBuf,
    /// One port for REST (`/api/...`) and WebSocket (any other path).
    pub gateway_addr: SocketAddr,
    /// Metrics, health, and the controls that change a running node
    /// (`POST /drain`, `POST /fault/registry`).
    pub admin_addr: SocketAddr,
    /// Bearer token for the admin controls (`Authorization: Bearer <token>`),
    /// at least 16 characters. Required when `admin_addr` is not a loopback
    /// address (the node refuses to start without one); also settable with
    /// `GATEWAYD_ADMIN_TOKEN`. Empty: none (loopback only).
    pub admin_token: String,
    /// A file holding admin_token (config/secrets.rs): a systemd credential.
    pub admin_token_file: PathBuf,
    /// Whether `GET /metrics` needs the token too (default false: metrics stay
    /// readable by the scraper; `/healthz` and `/readyz` never need it).
    pub admin_metrics_auth: bool,
    /// URL handed to clients in `/gateway` and `resume_gateway_url`;
    /// empty means `ws://` (or `wss://`) + gateway_addr.
    pub public_url: String,
    /// Worker threads (one per core when 0).
    pub workers: usize,
    /// Registry file; empty means `<data_dir>/registry.sqlite`.
    pub registry_path: PathBuf,
    /// A shared PostgreSQL registry (`postgres://user@host:port/db`) instead
    /// of the embedded file: for several nodes.
    pub registry_url: String,
    /// A file holding registry_url (its password with it).
    pub registry_url_file: PathBuf,
    pub tls: TlsConfig,
    pub limits: Limits,
    pub ring: RingSizes,
    pub events: Events,
    pub registry: RegistryLink,
    pub demo: Demo,
    pub rest: Rest,
    pub chat: Chat,
    pub egress: Egress,
    pub portal: Portal,
    pub cluster: Cluster,
    pub recovery: Recovery,
}

/// How the node uses the registry: leases, revocations, limits, brownout.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RegistryLink {
    /// A session delivers a server's events only while the (application,
    /// server) lease is valid; leases are renewed in batches well before.
    pub lease_ttl_ms: u64,
    /// How often the revocation outbox is read. 0 turns revocation pushes off
    /// entirely (no polling, no PostgreSQL LISTEN): a drill in which only
    /// lease expiry bounds the delay.
    pub revocation_poll_ms: u64,
    /// A registry call slower than this (or failing) puts the node in brownout.
    pub timeout_ms: u64,
    /// In brownout, existing sessions keep their last leases this long.
    pub brownout_max_ms: u64,
    /// Per-application limits: one identify per `shard % max_concurrency`
    /// bucket per `identify_spacing_ms`, and `session_start_limit` per 24 h.
    pub identify_limits: bool,
    pub identify_spacing_ms: u64,
    /// Node-wide identify admission (0: off): at most this many per second
    /// (burst of one second's worth) and this many waiting; the rest get op 9.
    pub admission_per_second: u32,
    pub admission_queue: usize,
    /// Allow POST /fault/registry (tests and drills: simulate a registry outage).
    pub fault_injection: bool,
}

impl Default for RegistryLink {
    fn default() -> Self {
        RegistryLink {
            lease_ttl_ms: 10_000,
            revocation_poll_ms: 100,
            timeout_ms: 2_000,
            brownout_max_ms: 300_000,
            identify_limits: true,
            identify_spacing_ms: 5_000,
            admission_per_second: 500,
            admission_queue: 4096,
            fault_injection: false,
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Events {
    /// Listener for length-prefixed event records (the `ingest` crate's format).
    pub ingest_addr: SocketAddr,
    /// Producer connections served at once; more are refused.
    pub ingest_max_connections: usize,
    /// While a producer's stream is busy (a batch went out less than this
    /// long ago), a new batch waits up to this long for more records before
    /// it goes to the workers: fewer worker wake-ups per event, at most this
    /// much added latency. An event after a quiet spell goes at once. 0: off.
    pub ingest_gather_us: u64,
    /// Per-worker event arena (allocated at start). Resume can replay only
    /// what is still in it; size it for 120 s of the worker's traffic.
    pub arena_bytes: u64,
    /// Per-worker ring storage: chunks of 16 references (384 bytes each),
    /// allocated at start and shared by the worker's sessions. 0: sized from
    /// max_sessions_per_worker (2 per session + 16,384 for backlogs).
    pub ring_chunks: u32,
    /// Unsent events a session may queue; at the bound it is closed with
    /// 4000 (resumable).
    pub max_unsent: u32,
    /// Sent events a session keeps for Resume (and the 120 s window).
    pub max_held: u32,
    /// Unsent payload bytes a session may queue (the other half of the bound).
    pub max_unsent_bytes: u64,
    /// Vectored sends a worker may have in the kernel at once.
    pub send_slots: u16,
    /// Also (or instead) consume events from a Kafka-protocol topic
    /// (Kafka, Redpanda, Event Hubs, MSK, Tansu): bootstrap servers, empty for off.
    pub kafka_brokers: String,
    pub kafka_topic: String,
    /// Consumer group: one per node (every node needs every event of its servers).
    pub kafka_group: String,
    /// Low for tests; the broker's session timeout for this consumer.
    pub kafka_session_timeout_ms: u32,
    /// TLS to the brokers (src/ingest/brokers.rs), verified against the
    /// system's CA store; setting `kafka_tls_ca` or a client certificate
    /// turns it on too.
    pub kafka_tls: bool,
    /// PEM roots the brokers' certificates must chain to.
    pub kafka_tls_ca: Option<PathBuf>,
    /// A client certificate chain (PEM) offered to the brokers, with its key.
    pub kafka_tls_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM, unencrypted).
    pub kafka_tls_key: Option<PathBuf>,
}

impl Events {
    /// Whether the node's Kafka clients speak TLS to the brokers.
    pub fn kafka_tls_on(&self) -> bool {
        self.kafka_tls || self.kafka_tls_ca.is_some() || self.kafka_tls_cert.is_some()
    }
}

impl Default for Events {
    fn default() -> Self {
        Events {
            ingest_addr: "127.0.0.1:8081".parse().unwrap(),
            ingest_max_connections: 64,
            ingest_gather_us: 1000,
            arena_bytes: 64 << 20,
            ring_chunks: 0,
            max_unsent: 5000,
            max_held: 5000,
            max_unsent_bytes: 16 << 20,
            send_slots: 1024,
            kafka_brokers: String::new(),
            kafka_topic: "gatewayd-events".into(),
            kafka_group: String::new(),
            kafka_session_timeout_ms: 10_000,
            kafka_tls: false,
            kafka_tls_ca: None,
            kafka_tls_cert: None,
            kafka_tls_key: None,
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// PEM certificate chain; with `key`, the gateway port speaks wss/https.
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Sessions one worker may hold; sets how many rings (fixed file tables) it opens.
    pub max_sessions_per_worker: u32,
    /// Largest client message (bytes); larger closes with 4002.
    pub inbound_message_bytes: usize,
    pub commands_per_window: u32,
    pub command_window_ms: u64,
    pub heartbeat_interval_ms: u64,
    /// Time allowed from TCP accept to a complete HTTP request head.
    pub handshake_timeout_ms: u64,
    /// How long a disconnected session stays resumable.
    pub resume_window_ms: u64,
    /// Kernel send buffer per session socket (SO_SNDBUF; Linux doubles it).
    /// Bounds what a peer that stops reading holds in the kernel; 0 leaves
    /// the kernel's autotuning (up to tcp_wmem max, megabytes per socket).
    pub socket_send_buffer_bytes: usize,
    /// After the last op 7 of a drain: time before closing what is left.
    pub shutdown_grace_ms: u64,
    /// SIGTERM and POST /drain send op 7 to every session at a random moment
    /// within this window (SIGINT drains at once).
    pub drain_spread_ms: u64,
    /// Connections (node-wide) that may use transport compression
    /// (`compress=zlib-stream` / `zstd-stream`) at once; each holds its own
    /// compression stream (about 150 KiB zlib, 80 KiB zstd: see
    /// docs/measurements.md). Beyond the cap a connection that asks for
    /// compression is served the stream's framing with nothing compressed
    /// (stored blocks: no state). 0: none compressed.
    pub max_compressed_sessions: usize,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RingSizes {
    pub sq_entries: u32,
    pub cq_entries: u32,
    /// Provided receive buffers per ring (power of two).
    pub recv_buffers: u16,
    pub recv_buffer_size: u32,
    /// Fixed-table slots per ring beyond its share of sessions (the kernel
    /// does not spread connections evenly over SO_REUSEPORT listeners).
    pub headroom_percent: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            data_dir: PathBuf::from("./gatewayd-data"),
            gateway_addr: "127.0.0.1:8080".parse().unwrap(),
            admin_addr: "127.0.0.1:9090".parse().unwrap(),
            admin_token: String::new(),
            admin_token_file: PathBuf::new(),
            admin_metrics_auth: false,
            public_url: String::new(),
            workers: 0,
            registry_path: PathBuf::new(),
            registry_url: String::new(),
            registry_url_file: PathBuf::new(),
            tls: TlsConfig::default(),
            limits: Limits::default(),
            ring: RingSizes::default(),
            events: Events::default(),
            registry: RegistryLink::default(),
            demo: Demo::default(),
            rest: Rest::default(),
            chat: Chat::default(),
            egress: Egress::default(),
            portal: Portal::default(),
            cluster: Cluster::default(),
            recovery: Recovery::default(),
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_sessions_per_worker: 25_000,
            inbound_message_bytes: 4096,
            commands_per_window: 120,
            command_window_ms: 60_000,
            heartbeat_interval_ms: 41_250,
            handshake_timeout_ms: 10_000,
            resume_window_ms: 120_000,
            socket_send_buffer_bytes: 256 << 10,
            shutdown_grace_ms: 3_000,
            drain_spread_ms: 30_000,
            max_compressed_sessions: 4096,
        }
    }
}

impl Default for RingSizes {
    fn default() -> Self {
        RingSizes {
            sq_entries: 4096,
            cq_entries: 32768,
            recv_buffers: 2048,
            recv_buffer_size: 4096,
            headroom_percent: 25,
        }
    }
}
