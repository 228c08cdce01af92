//! The flags of `gatewayd run`: each overrides one key of the config file.
//!
//! Every flag has a one-line help: what it sets, its unit, its default, and
//! last `[config: KEY]`, the key it overrides (`section.name` as in
//! docs/configuration.md; `KEY = VALUE` for a switch that sets it to one
//! value). A default written `(default V` is the key's literal default (as
//! the TOML would spell it, without quotes); `(default: ...)` describes one.
//! tests/configuration_doc.rs holds docs/configuration.md to these
//! definitions: a flag without help, without its `[config: ...]`, missing
//! from its key's line in the doc, or with a default the doc does not give
//! fails it.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::model::Config;
use super::portal::PortalArgs;

/// Flags of `gatewayd run`; each overrides the config file.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct RunArgs {
    /// TOML configuration file; flags given as well override its keys (every key:
    /// docs/configuration.md)
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Validate the configuration and reach every service it names, each within its deadline;
    /// print one line per check and exit 0 (all passed) or 1; starts nothing
    #[arg(long)]
    pub check: bool,
    /// Directory of the registry file, the demo token and gatewayd.addrs (default ./gatewayd-data)
    /// [config: data_dir]
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Listener of the gateway, WebSocket and REST on one port (default 127.0.0.1:8080; port 0: any
    /// free port) [config: gateway_addr]
    #[arg(long)]
    pub gateway_addr: Option<SocketAddr>,
    #[command(flatten)]
    pub portal: PortalArgs,
    /// Listener of /metrics, /healthz, /readyz and POST /drain (default 127.0.0.1:9090; port 0: any
    /// free port) [config: admin_addr]
    #[arg(long)]
    pub admin_addr: Option<SocketAddr>,
    /// Bearer token for POST /drain and /fault/*, 16+ characters, required when the admin
    /// address is not loopback; prefer the environment variable (a flag is visible in the process
    /// list) [config: admin_token]
    #[arg(long, env = "GATEWAYD_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,
    /// URL handed to clients in /gateway and resume_gateway_url (default: ws:// or wss:// and the
    /// gateway address; behind a load balancer, its URL) [config: public_url]
    #[arg(long)]
    pub public_url: Option<String>,
    /// Worker threads, one per core (default 0: as many as the cores the node may use; at most 255)
    /// [config: workers]
    #[arg(long)]
    pub workers: Option<usize>,
    /// Embedded SQLite registry file (default: <data dir>/registry.sqlite) [config: registry_path]
    #[arg(long)]
    pub registry_path: Option<PathBuf>,
    /// Shared PostgreSQL registry, postgres://user@host:port/db, instead of the embedded file (for
    /// several nodes) [config: registry_url]
    #[arg(long, env = "GATEWAYD_REGISTRY_URL", hide_env_values = true)]
    pub registry_url: Option<String>,
    /// PEM certificate chain of the gateway port; with --tls-key it speaks wss:// and https://
    /// (default: none, plain) [config: tls.cert]
    #[arg(long)]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert (set both or neither) [config: tls.key]
    #[arg(long)]
    pub tls_key: Option<PathBuf>,
    /// Sessions one worker may hold; sizes its rings' io_uring fixed file tables, allocated at
    /// start (default 25000) [config: limits.max_sessions_per_worker]
    #[arg(long)]
    pub max_sessions_per_worker: Option<u32>,
    /// Heartbeat interval sent in Hello, ms; a session silent for 1.5 times it is closed (default
    /// 41250; at least 100) [config: limits.heartbeat_interval_ms]
    #[arg(long)]
    pub heartbeat_interval_ms: Option<u64>,
    /// Time from TCP accept to a complete HTTP request head, ms; past it the connection is closed
    /// (default 10000) [config: limits.handshake_timeout_ms]
    #[arg(long)]
    pub handshake_timeout_ms: Option<u64>,
    /// How long a disconnected session stays resumable, ms (default 120000)
    /// [config: limits.resume_window_ms]
    #[arg(long)]
    pub resume_window_ms: Option<u64>,
    /// After a drain's last op 7: time before the sessions left are closed, ms (default 3000)
    /// [config: limits.shutdown_grace_ms]
    #[arg(long)]
    pub shutdown_grace_ms: Option<u64>,
    /// Window over which a drain (SIGTERM, POST /drain) spreads op 7 over the sessions, ms; SIGINT
    /// drains at once (default 30000) [config: limits.drain_spread_ms]
    #[arg(long)]
    pub drain_spread_ms: Option<u64>,
    /// Connections compressed (zlib-stream / zstd-stream) at once, node-wide (~150 KiB each);
    /// beyond it they get the stream's framing with nothing compressed (default 4096; 0: none
    /// compressed) [config: limits.max_compressed_sessions]
    #[arg(long)]
    pub max_compressed_sessions: Option<usize>,
    /// Listener of the length-prefixed event records producers send (default 127.0.0.1:8081)
    /// [config: events.ingest_addr]
    #[arg(long)]
    pub ingest_addr: Option<SocketAddr>,
    /// While a producer's stream is busy, a batch of its records waits up to this many µs for
    /// more before it goes to the workers (fewer wake-ups per event; 0: off; default 1000)
    /// [config: events.ingest_gather_us]
    #[arg(long)]
    pub ingest_gather_us: Option<u64>,
    /// Kafka-protocol bootstrap servers to consume events from, e.g. 127.0.0.1:9092 (default: none)
    /// [config: events.kafka_brokers]
    #[arg(long)]
    pub kafka_brokers: Option<String>,
    /// Topic the events are consumed from (default gatewayd-events) [config: events.kafka_topic]
    #[arg(long)]
    pub kafka_topic: Option<String>,
    /// Consumer group, one per node: every node needs every event of its servers (default:
    /// gatewayd-<hostname>-<gateway port>) [config: events.kafka_group]
    #[arg(long)]
    pub kafka_group: Option<String>,
    /// The broker's session timeout for this consumer, ms (default 10000)
    /// [config: events.kafka_session_timeout_ms]
    #[arg(long)]
    pub kafka_session_timeout_ms: Option<u32>,
    /// Speak TLS to the brokers, verified against the system's CA store (implied by
    /// --kafka-tls-ca and --kafka-tls-cert) [config: events.kafka_tls]
    #[arg(long)]
    pub kafka_tls: bool,
    /// PEM roots the brokers' certificates must chain to (turns TLS to the brokers on)
    /// [config: events.kafka_tls_ca]
    #[arg(long)]
    pub kafka_tls_ca: Option<PathBuf>,
    /// Client certificate chain (PEM) offered to the brokers, with --kafka-tls-key
    /// [config: events.kafka_tls_cert]
    #[arg(long)]
    pub kafka_tls_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM, unencrypted) [config: events.kafka_tls_key]
    #[arg(long)]
    pub kafka_tls_key: Option<PathBuf>,
    /// Unsent events a session may queue; at the bound it is closed with 4000, resumable (default
    /// 5000) [config: events.max_unsent]
    #[arg(long)]
    pub max_unsent: Option<u32>,
    /// Per-worker event arena, bytes, allocated at start; Resume replays only what it still holds
    /// (default 67108864, 64 MiB; at least 1 MiB) [config: events.arena_bytes]
    #[arg(long)]
    pub arena_bytes: Option<u64>,
    /// Per-application identify limits, max_concurrency buckets and daily session starts; on by
    /// default [config: registry.identify_limits]
    #[arg(long)]
    pub identify_limits: Option<OnOff>,
    /// Node-wide identifies admitted per second; the rest get op 9 (default 500; 0: off)
    /// [config: registry.admission_per_second]
    #[arg(long)]
    pub admission_per_second: Option<u32>,
    /// Lifetime of an (application, server) lease, ms, renewed every third of it: the longest a
    /// revocation can take (default 10000) [config: registry.lease_ttl_ms]
    #[arg(long)]
    pub lease_ttl_ms: Option<u64>,
    /// How often the revocation outbox is read, ms (default 100; 0: never, leases alone)
    /// [config: registry.revocation_poll_ms]
    #[arg(long)]
    pub revocation_poll_ms: Option<u64>,
    /// In a registry brownout, how long existing sessions keep their last leases, ms (default
    /// 300000) [config: registry.brownout_max_ms]
    #[arg(long)]
    pub brownout_max_ms: Option<u64>,
    /// Deadline of each registry call, ms; slower (or failing) means brownout (default 2000)
    /// [config: registry.timeout_ms]
    #[arg(long)]
    pub registry_timeout_ms: Option<u64>,
    /// Allow POST /fault/registry and /fault/worker-panic on the admin port (drills and tests)
    /// [config: registry.fault_injection = true]
    #[arg(long)]
    pub fault_injection: bool,
    /// Post a demo MESSAGE_CREATE every N ms (default 1000) [config: demo.interval_ms]
    #[arg(long)]
    pub demo_interval_ms: Option<u64>,
    /// No demo at all: no demo application, server or token is seeded and no demo traffic
    /// runs [config: demo.enabled = false]
    #[arg(long)]
    pub no_demo: bool,
    /// Seed the demo application, server and token, but run no demo traffic source
    /// [config: demo.traffic = false]
    #[arg(long)]
    pub no_demo_traffic: bool,
    /// REST: multiply every route bucket's limit, for load tests of the edge (default 1)
    /// [config: rest.limit_scale]
    #[arg(long)]
    pub rest_limit_scale: Option<u32>,
    /// REST: requests per second per bot token across all routes (default 50)
    /// [config: rest.global_per_second]
    #[arg(long)]
    pub rest_global_per_second: Option<u32>,
    /// REST: invalid requests per source address per 10 minutes before it is restricted (default
    /// 10000; 0: never) [config: rest.invalid_per_address]
    #[arg(long)]
    pub rest_invalid_per_address: Option<u32>,
    /// REST: 429s within 10 s after which a token is banned (default 100)
    /// [config: rest.ban_after_429s]
    #[arg(long)]
    pub rest_ban_after_429s: Option<u32>,
    /// REST: how long such a ban lasts, seconds (default 60) [config: rest.ban_seconds]
    #[arg(long)]
    pub rest_ban_seconds: Option<u64>,
    /// REST: how often an application's view is rebuilt from the registry (new installations), ms
    /// (default 60000) [config: rest.view_refresh_ms]
    #[arg(long)]
    pub rest_view_refresh_ms: Option<u64>,
    /// Forward REST actions to this chat service, http://host:port/path, instead of the embedded
    /// one (default: embedded) [config: chat.upstream_url]
    #[arg(long)]
    pub chat_upstream_url: Option<String>,
    /// Deadline of each call to that chat service, ms, 10-60000 (default 2000)
    /// [config: chat.upstream_timeout_ms]
    #[arg(long)]
    pub chat_upstream_timeout_ms: Option<u64>,
    /// Connections to that chat service per pool, each worker's and the chat thread's, 1-64
    /// (default 4) [config: chat.upstream_connections]
    #[arg(long)]
    pub chat_upstream_connections: Option<usize>,
    /// How long an interaction's token works for follow-ups, ms (default 900000, 15 minutes)
    /// [config: chat.interaction_token_ttl_ms]
    #[arg(long)]
    pub interaction_token_ttl_ms: Option<u64>,
    /// REST: share the rate-limit counters with other nodes through this Redis,
    /// redis://[:password@]host[:port][/db] (default: none, each node alone)
    /// [config: rest.redis_url]
    #[arg(long, env = "GATEWAYD_REST_REDIS_URL", hide_env_values = true)]
    pub rest_redis_url: Option<String>,
    /// REST: how soon an admission is counted on every other node, ms, 2-100 (default 100)
    /// [config: rest.redis_sync_ms]
    #[arg(long)]
    pub rest_redis_sync_ms: Option<u64>,
    /// REST: deadline of each Redis connect and round, ms, 1-5000; past it the node falls back to
    /// its share (default 50) [config: rest.redis_timeout_ms]
    #[arg(long)]
    pub rest_redis_timeout_ms: Option<u64>,
    /// REST: nodes sharing the limits, for the fallback share (default 0: learnt from the nodes'
    /// heartbeats in Redis) [config: rest.nodes]
    #[arg(long)]
    pub rest_nodes: Option<u32>,
    /// Cluster: where the node-to-node link listens; keep it private (default 127.0.0.1:0;
    /// docs/cluster.md) [config: cluster.link_addr]
    #[arg(long)]
    pub cluster_link_addr: Option<SocketAddr>,
    /// Cluster: deadline of one hand-off, connect to answer, ms; past it op 9 (default 1000)
    /// [config: cluster.handoff_timeout_ms]
    #[arg(long)]
    pub cluster_handoff_timeout_ms: Option<u64>,
    /// Cluster: this node's link certificate chain, PEM (IP SAN = its advertised link address;
    /// turns mutual TLS on with the key and CA; docs/cluster.md) [config: cluster.tls_cert]
    #[arg(long)]
    pub cluster_tls_cert: Option<String>,
    /// Cluster: the private key of --cluster-tls-cert, PEM [config: cluster.tls_key]
    #[arg(long)]
    pub cluster_tls_key: Option<String>,
    /// Cluster: the cluster CA, PEM; every peer's certificate must chain to it
    /// [config: cluster.tls_ca]
    #[arg(long)]
    pub cluster_tls_ca: Option<String>,
    /// Cluster: run a link bound off loopback without TLS (logs a warning; default: refuse to
    /// start) [config: cluster.allow_plaintext_link]
    #[arg(long)]
    pub cluster_allow_plaintext_link: bool,
    /// Crash recovery: the session store, redis://host:port; turns [recovery] on (default: off)
    /// [config: recovery.redis_url]
    #[arg(long, env = "GATEWAYD_RECOVERY_REDIS_URL", hide_env_values = true)]
    pub recovery_redis_url: Option<String>,
    /// Crash recovery: how often each worker checkpoints its sessions, ms, 100-60000 (default 1000)
    /// [config: recovery.checkpoint_ms]
    #[arg(long)]
    pub recovery_checkpoint_ms: Option<u64>,
    /// Where the node's child egress listens: a Unix socket path (with a /) or host:port (default:
    /// <data dir>/egress.sock) [config: egress.addr]
    #[arg(long)]
    pub egress_addr: Option<String>,
    /// Use the egress at host:port instead of starting one (default: start a child)
    /// [config: egress.remote]
    #[arg(long)]
    pub egress_remote: Option<String>,
    /// Private ranges the child egress may reach anyway, comma-separated CIDRs; development and
    /// tests only (default: none) [config: egress.allow_private_cidrs]
    #[arg(long, value_delimiter = ',')]
    pub egress_allow_private_cidrs: Option<Vec<String>>,
    #[command(flatten)]
    pub secrets: SecretArgs,
}

/// The `*_file` flags of `gatewayd run`.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct SecretArgs {
    /// Read the admin token from this file; a relative path from $CREDENTIALS_DIRECTORY when set
    /// (not with --admin-token) [config: admin_token_file]
    #[arg(long, value_name = "FILE")]
    pub admin_token_file: Option<PathBuf>,
    /// Read the registry URL (with its password) from this file (not with --registry-url)
    /// [config: registry_url_file]
    #[arg(long, value_name = "FILE")]
    pub registry_url_file: Option<PathBuf>,
    /// Read the REST limits' Redis URL from this file (not with --rest-redis-url)
    /// [config: rest.redis_url_file]
    #[arg(long, value_name = "FILE")]
    pub rest_redis_url_file: Option<PathBuf>,
    /// Read crash recovery's Redis URL from this file; turns recovery on (not with
    /// --recovery-redis-url) [config: recovery.redis_url_file]
    #[arg(long, value_name = "FILE")]
    pub recovery_redis_url_file: Option<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnOff {
    On,
    Off,
}

impl RunArgs {
    /// Set the keys the flags given name (the file's values stay for the rest).
    pub(super) fn apply(&self, cfg: &mut Config) {
        let args = self;
        macro_rules! set {
            ($flag:expr => $field:expr) => {
                if let Some(v) = $flag.clone() {
                    $field = v;
                }
            };
        }
        set!(args.data_dir => cfg.data_dir);
        set!(args.gateway_addr => cfg.gateway_addr);
        set!(args.admin_addr => cfg.admin_addr);
        set!(args.admin_token => cfg.admin_token);
        args.portal.apply(&mut cfg.portal);
        set!(args.public_url => cfg.public_url);
        set!(args.workers => cfg.workers);
        set!(args.registry_path => cfg.registry_path);
        set!(args.registry_url => cfg.registry_url);
        set!(args.max_sessions_per_worker => cfg.limits.max_sessions_per_worker);
        set!(args.heartbeat_interval_ms => cfg.limits.heartbeat_interval_ms);
        set!(args.handshake_timeout_ms => cfg.limits.handshake_timeout_ms);
        set!(args.resume_window_ms => cfg.limits.resume_window_ms);
        set!(args.shutdown_grace_ms => cfg.limits.shutdown_grace_ms);
        set!(args.drain_spread_ms => cfg.limits.drain_spread_ms);
        set!(args.max_compressed_sessions => cfg.limits.max_compressed_sessions);
        set!(args.demo_interval_ms => cfg.demo.interval_ms);
        set!(args.ingest_addr => cfg.events.ingest_addr);
        set!(args.ingest_gather_us => cfg.events.ingest_gather_us);
        set!(args.kafka_brokers => cfg.events.kafka_brokers);
        set!(args.kafka_topic => cfg.events.kafka_topic);
        set!(args.kafka_group => cfg.events.kafka_group);
        set!(args.kafka_session_timeout_ms => cfg.events.kafka_session_timeout_ms);
        if args.kafka_tls {
            cfg.events.kafka_tls = true;
        }
        for (flag, field) in [
            (&args.kafka_tls_ca, &mut cfg.events.kafka_tls_ca),
            (&args.kafka_tls_cert, &mut cfg.events.kafka_tls_cert),
            (&args.kafka_tls_key, &mut cfg.events.kafka_tls_key),
        ] {
            if flag.is_some() {
                field.clone_from(flag);
            }
        }
        if let Some(v) = args.identify_limits {
            cfg.registry.identify_limits = v == OnOff::On;
        }
        set!(args.admission_per_second => cfg.registry.admission_per_second);
        set!(args.lease_ttl_ms => cfg.registry.lease_ttl_ms);
        set!(args.revocation_poll_ms => cfg.registry.revocation_poll_ms);
        set!(args.brownout_max_ms => cfg.registry.brownout_max_ms);
        set!(args.registry_timeout_ms => cfg.registry.timeout_ms);
        if args.fault_injection {
            cfg.registry.fault_injection = true;
        }
        set!(args.rest_limit_scale => cfg.rest.limit_scale);
        set!(args.rest_global_per_second => cfg.rest.global_per_second);
        set!(args.rest_ban_after_429s => cfg.rest.ban_after_429s);
        set!(args.rest_ban_seconds => cfg.rest.ban_seconds);
        set!(args.rest_invalid_per_address => cfg.rest.invalid_per_address);
        set!(args.rest_view_refresh_ms => cfg.rest.view_refresh_ms);
        set!(args.chat_upstream_url => cfg.chat.upstream_url);
        set!(args.chat_upstream_timeout_ms => cfg.chat.upstream_timeout_ms);
        set!(args.chat_upstream_connections => cfg.chat.upstream_connections);
        set!(args.interaction_token_ttl_ms => cfg.chat.interaction_token_ttl_ms);
        set!(args.rest_redis_url => cfg.rest.redis_url);
        set!(args.rest_redis_sync_ms => cfg.rest.redis_sync_ms);
        set!(args.rest_redis_timeout_ms => cfg.rest.redis_timeout_ms);
        set!(args.rest_nodes => cfg.rest.nodes);
        set!(args.cluster_link_addr => cfg.cluster.link_addr);
        set!(args.cluster_handoff_timeout_ms => cfg.cluster.handoff_timeout_ms);
        set!(args.cluster_tls_cert => cfg.cluster.tls_cert);
        set!(args.cluster_tls_key => cfg.cluster.tls_key);
        set!(args.cluster_tls_ca => cfg.cluster.tls_ca);
        if args.cluster_allow_plaintext_link {
            cfg.cluster.allow_plaintext_link = true;
        }
        if let Some(url) = args.recovery_redis_url.clone() {
            cfg.recovery.enabled = true;
            cfg.recovery.redis_url = url;
        }
        set!(args.recovery_checkpoint_ms => cfg.recovery.checkpoint_ms);
        set!(args.egress_addr => cfg.egress.addr);
        set!(args.egress_remote => cfg.egress.remote);
        set!(args.egress_allow_private_cidrs => cfg.egress.allow_private_cidrs);
        set!(args.max_unsent => cfg.events.max_unsent);
        set!(args.arena_bytes => cfg.events.arena_bytes);
        if args.tls_cert.is_some() {
            cfg.tls.cert = args.tls_cert.clone();
        }
        if args.tls_key.is_some() {
            cfg.tls.key = args.tls_key.clone();
        }
        if args.no_demo {
            cfg.demo.enabled = false;
        }
        if args.no_demo_traffic {
            cfg.demo.traffic = false;
        }
    }
}
