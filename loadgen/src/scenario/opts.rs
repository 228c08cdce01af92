//! The options of every scenario: [`Common`] (what every scenario takes)
//! and one struct per scenario. Plain data with defaults, filled in by
//! `loadgen scenario`'s flags (scenario_cli.rs) or by tests; nothing here
//! runs anything.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::time::Duration;

use crate::producer::Dist;

/// Options every scenario takes (see `loadgen scenario --help`).
#[derive(Clone, Debug)]
pub struct Common {
    pub sessions: u32,
    pub rate: f64,
    pub seconds: f64,
    pub warmup: f64,
    pub payload: usize,
    pub dist: Dist,
    pub out: PathBuf,
    pub gatewayd: Option<PathBuf>,
    /// PostgreSQL registry (else the embedded SQLite file in `out`).
    pub registry_url: Option<String>,
    pub sources: Vec<Ipv4Addr>,
    pub threads: usize,
    pub workers: u32,
    /// Extra flags for every gatewayd started.
    pub node_args: Vec<String>,
    /// Attach to a running node: gateway, admin, ingest, pid (steady only).
    pub attach: Option<(SocketAddrV4, SocketAddr, SocketAddr, Option<u32>)>,
    /// Bound on the whole run.
    pub timeout: Duration,
    /// Time allowed for all sessions to reach READY.
    pub connect_timeout: Duration,
    pub command: String,
    pub max_p50_ms: f64,
    pub max_p99_ms: f64,
    /// Fleet coordinator for identify (`loadgen coordinator`), if any.
    pub coordinator: Option<SocketAddr>,
}

/// Per-scenario options.
#[derive(Clone, Debug)]
pub struct StormOpts {
    pub nodes: usize,
    /// Which runs: "both", "on", "off".
    pub throttle: String,
    pub max_back_secs: f64,
    pub max_registry_p99_ms: f64,
    /// `--recovery resume`: crash recovery configured (Redis session store,
    /// Kafka ingest); one run, its own claims (scenario/recovery.rs).
    pub recovery: Option<RecoveryOpts>,
}

#[derive(Clone, Debug)]
pub struct SlowOpts {
    pub hot_rate: f64,
    pub slow_percent: f64,
    pub max_close_secs: f64,
    pub max_added_p99_ms: f64,
    pub max_added_rss_mib: f64,
}

#[derive(Clone, Debug)]
pub struct RevocationOpts {
    pub hot_rate: f64,
    pub brownout_latency_ms: u64,
    pub max_stop_secs: f64,
    pub brownout_max_ms: u64,
    pub lease_ttl_ms: u64,
}

#[derive(Clone, Debug)]
pub struct RecoveryOpts {
    /// Lines of the nodes' `[recovery]` section; `{redis_url}` is replaced
    /// by the Redis loadgen started.
    pub config: Vec<String>,
    /// Extra node flags for the recovery run only.
    pub node_args: Vec<String>,
    /// Share of node A's sessions that must get RESUMED on a survivor, %.
    pub min_resumed_pct: f64,
    /// Every session back within this many seconds of the kill.
    pub max_back_secs: f64,
    /// Registry calls of the plain storm (docs/results/storm, throttle on,
    /// 40,000 sessions), scaled by sessions / 40,000 ...
    pub baseline_registry_calls: f64,
    /// ... of which the recovery may use at most this %.
    pub max_registry_pct: f64,
    /// Partitions of the topic (1: one totally ordered stream, so the
    /// fleet's event-order check applies as it stands).
    pub partitions: i32,
    /// Between the warm-up and the kill: time for the nodes to write their
    /// summaries to the store.
    pub checkpoint_secs: f64,
}

impl Default for RecoveryOpts {
    fn default() -> Self {
        RecoveryOpts {
            config: vec![
                "enabled = true".into(),
                "redis_url = \"{redis_url}\"".into(),
            ],
            node_args: Vec::new(),
            min_resumed_pct: 99.0,
            max_back_secs: 30.0,
            baseline_registry_calls: 324_096.0,
            max_registry_pct: 1.0,
            partitions: 1,
            checkpoint_secs: 3.0,
        }
    }
}

#[derive(Clone, Debug)]
pub struct RollingOpts {
    pub nodes: usize,
    /// The nodes' `limits.drain_spread_ms` (op 7 spread over it).
    pub drain_spread_ms: u64,
    /// Every session of a drained node must be back within the drain
    /// spread plus this.
    pub back_margin_secs: f64,
    /// Share of a drained node's sessions that must get RESUMED, %.
    pub min_resumed_pct: f64,
    /// Identifies during the drains, at most this % of the sessions.
    pub max_identify_pct: f64,
    /// Pause between a restarted node's readiness and the next drain, s.
    pub settle_secs: f64,
}

impl Default for RollingOpts {
    fn default() -> Self {
        RollingOpts {
            nodes: 2,
            drain_spread_ms: 30_000,
            back_margin_secs: 10.0,
            min_resumed_pct: 99.9,
            max_identify_pct: 0.1,
            settle_secs: 3.0,
        }
    }
}
