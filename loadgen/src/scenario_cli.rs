//! `loadgen scenario NAME [flags]`: flags to `loadgen::scenario`.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, ValueEnum};
use loadgen::producer::Dist;
use loadgen::scenario::{
    self, Common, RecoveryOpts, RevocationOpts, RollingOpts, SlowOpts, StormOpts, Which,
};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Name {
    /// N sessions under a constant event rate: latency, deliveries/s, RSS, CPU.
    Steady,
    /// Kill the node holding every session; time until all are back (with and without the identify throttle).
    Storm,
    /// One bot reads at 1 % of its event rate on a server posting 5,000 messages/s.
    SlowConsumer,
    /// Revoke a bot during a registry brownout; time until its last event.
    Revocation,
    /// Clustered nodes behind a load balancer; drain and restart each in turn; sessions must resume on the others.
    RollingRelease,
}

#[derive(Args, Debug)]
pub struct ScenarioArgs {
    pub name: Name,
    /// Bot sessions (default: steady, storm and rolling-release 40000, slow-consumer 2000, revocation 1000).
    #[arg(long)]
    pub sessions: Option<u32>,
    /// Background events per second over all servers (default: steady 2000, others 200).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Length of the measured phase, seconds.
    #[arg(long, default_value_t = 30.0)]
    pub seconds: f64,
    /// Traffic before measuring starts, seconds.
    #[arg(long, default_value_t = 3.0)]
    pub warmup: f64,
    /// Approximate bytes of each MESSAGE_CREATE's `d`.
    #[arg(long, default_value_t = 600)]
    pub payload: usize,
    /// Server choice: uniform, zipf or zipf:EXPONENT.
    #[arg(long, default_value = "uniform")]
    pub dist: String,
    /// Output directory for result.json, report.html, summary.txt
    /// (default loadgen-results/NAME-UNIXTIME).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// gatewayd binary (default: next to loadgen).
    #[arg(long)]
    pub gatewayd: Option<PathBuf>,
    /// PostgreSQL registry URL (default: an embedded SQLite file in the output directory).
    /// The revocation scenario needs one.
    #[arg(long, env = "LOADGEN_REGISTRY_URL")]
    pub registry_url: Option<String>,
    /// Source addresses to bind, comma separated (default 127.0.0.2, .3, ... one per 4,000 sessions).
    #[arg(long, value_delimiter = ',')]
    pub sources: Vec<Ipv4Addr>,
    /// Fleet threads (one io_uring each); 0: as the fixed-table limit needs, at least 2.
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// gatewayd workers.
    #[arg(long, default_value_t = 2)]
    pub workers: u32,
    /// Extra flag for every gatewayd started (repeat it), e.g. --node-arg=--max-unsent=2000.
    #[arg(long = "node-arg", allow_hyphen_values = true)]
    pub node_args: Vec<String>,
    /// steady: attach to a running gatewayd instead of starting one:
    /// GATEWAY,ADMIN,INGEST[,PID]; its registry must be --registry-url.
    #[arg(long)]
    pub attach: Option<String>,
    /// Bound on the whole run, seconds.
    #[arg(long, default_value_t = 1500)]
    pub timeout_secs: u64,
    /// Time for all sessions to reach READY, seconds.
    #[arg(long, default_value_t = 300)]
    pub connect_timeout_secs: u64,
    /// Latency claims (the design's floor: p50 <= 120 ms, p99 <= 800 ms).
    #[arg(long, default_value_t = 120.0)]
    pub max_p50_ms: f64,
    #[arg(long, default_value_t = 800.0)]
    pub max_p99_ms: f64,
    /// Identify through this fleet coordinator (`loadgen coordinator`), so
    /// several loadgen processes respect each application's max_concurrency.
    #[arg(long)]
    pub coordinator: Option<SocketAddr>,
    /// storm: gatewayd processes (the first is killed); rolling-release: nodes drained in turn.
    #[arg(long, default_value_t = 2)]
    pub nodes: usize,
    /// rolling-release: the nodes' drain_spread_ms (op 7 spread over it).
    #[arg(long, default_value_t = 30_000)]
    pub drain_spread_ms: u64,
    /// rolling-release: every session of a drained node back within drain spread + this, s.
    #[arg(long, default_value_t = 10.0)]
    pub back_margin_secs: f64,
    /// rolling-release: share of a drained node's sessions that must get RESUMED, %.
    #[arg(long, default_value_t = 99.9)]
    pub min_resumed_pct: f64,
    /// rolling-release: identifies during the release below this % of the sessions.
    #[arg(long, default_value_t = 0.1)]
    pub max_identify_pct: f64,
    /// storm: runs with the identify throttle: both, on, off.
    #[arg(long, default_value = "both")]
    pub throttle: String,
    /// storm: every session must be back within this many seconds.
    #[arg(long, default_value_t = 600.0)]
    pub max_back_secs: f64,
    /// storm: registry call p99 bound, ms.
    #[arg(long, default_value_t = 50.0)]
    pub max_registry_p99_ms: f64,
    /// storm: `resume` = crash recovery configured (a Redis session store and
    /// Kafka ingest, both started by loadgen; needs --registry-url).
    /// steady: the same node configuration, the producer writing to the
    /// topic (with --recovery-config '': Kafka ingest alone, the A/B's
    /// baseline of scripts/recovery-ab.sh).
    #[arg(long)]
    pub recovery: Option<String>,
    /// storm --recovery: a line of the nodes' [recovery] section (repeat it;
    /// `{redis_url}` is replaced). Default: enabled = true and redis_url = "{redis_url}".
    #[arg(long = "recovery-config")]
    pub recovery_config: Vec<String>,
    /// storm --recovery: extra gatewayd flag for the recovery run (repeat it).
    #[arg(long = "recovery-node-arg", allow_hyphen_values = true)]
    pub recovery_node_args: Vec<String>,
    /// storm --recovery: every session back within this many seconds.
    #[arg(long, default_value_t = 30.0)]
    pub recovery_max_back_secs: f64,
    /// storm --recovery: share of node A's sessions that must get RESUMED, %.
    #[arg(long, default_value_t = 99.0)]
    pub recovery_min_resumed_pct: f64,
    /// storm --recovery: topic partitions.
    #[arg(long, default_value_t = 1)]
    pub recovery_partitions: i32,
    /// slow-consumer / revocation: events per second in the hot server.
    #[arg(long)]
    pub hot_rate: Option<f64>,
    /// slow-consumer: the slow bot reads this % of what it is sent.
    #[arg(long, default_value_t = 1.0)]
    pub slow_percent: f64,
    /// slow-consumer: the slow session must be closed (4000) within this many seconds.
    #[arg(long, default_value_t = 60.0)]
    pub max_close_secs: f64,
    /// slow-consumer: allowed neighbour p99 increase, ms.
    #[arg(long, default_value_t = 10.0)]
    pub max_added_p99_ms: f64,
    /// slow-consumer: allowed peak RSS increase over the baseline run, MiB.
    #[arg(long, default_value_t = 128.0)]
    pub max_added_rss_mib: f64,
    /// revocation: added registry latency in the pushed case, ms.
    #[arg(long, default_value_t = 300)]
    pub brownout_latency_ms: u64,
    /// revocation: the pushed revocation must land within this many seconds.
    #[arg(long, default_value_t = 10.0)]
    pub max_stop_secs: f64,
    /// revocation: gatewayd's brownout_max_ms (how long leases are extended while the registry is down).
    #[arg(long, default_value_t = 15_000)]
    pub brownout_max_ms: u64,
    /// revocation: gatewayd's lease TTL.
    #[arg(long, default_value_t = 5_000)]
    pub lease_ttl_ms: u64,
}

fn parse_attach(s: &str) -> Result<(SocketAddrV4, SocketAddr, SocketAddr, Option<u32>), String> {
    let p: Vec<&str> = s.split(',').collect();
    if p.len() < 3 {
        return Err("--attach GATEWAY,ADMIN,INGEST[,PID]".into());
    }
    let g = p[0].parse().map_err(|e| format!("gateway {}: {e}", p[0]))?;
    let a = p[1].parse().map_err(|e| format!("admin {}: {e}", p[1]))?;
    let i = p[2].parse().map_err(|e| format!("ingest {}: {e}", p[2]))?;
    let pid = p
        .get(3)
        .map(|x| x.parse().map_err(|e| format!("pid {x}: {e}")))
        .transpose()?;
    Ok((g, a, i, pid))
}

pub fn run(a: ScenarioArgs) -> ExitCode {
    let fail = |e: String| {
        eprintln!("loadgen scenario: {e}");
        ExitCode::from(2)
    };
    let dist: Dist = match a.dist.parse() {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    let attach = match a.attach.as_deref().map(parse_attach).transpose() {
        Ok(x) => x,
        Err(e) => return fail(e),
    };
    let (name, def_sessions, def_rate) = match a.name {
        Name::Steady => ("steady", 40_000, 2000.0),
        Name::Storm => ("storm", 40_000, 200.0),
        Name::SlowConsumer => ("slow-consumer", 2000, 200.0),
        Name::Revocation => ("revocation", 1000, 200.0),
        Name::RollingRelease => ("rolling-release", 40_000, 200.0),
    };
    if attach.is_some() && !matches!(a.name, Name::Steady) {
        return fail("--attach works with steady only (the others start and kill nodes)".into());
    }
    let common = Common {
        sessions: a.sessions.unwrap_or(def_sessions),
        rate: a.rate.unwrap_or(def_rate),
        seconds: a.seconds,
        warmup: a.warmup,
        payload: a.payload,
        dist,
        out: a.out.unwrap_or_else(|| scenario::default_out(name)),
        gatewayd: a.gatewayd,
        registry_url: a.registry_url,
        sources: a.sources,
        threads: a.threads,
        workers: a.workers,
        node_args: a.node_args,
        attach,
        timeout: Duration::from_secs(a.timeout_secs),
        connect_timeout: Duration::from_secs(a.connect_timeout_secs),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        max_p50_ms: a.max_p50_ms,
        max_p99_ms: a.max_p99_ms,
        coordinator: a.coordinator,
    };
    let recovery = match a.recovery.as_deref() {
        None => None,
        Some("resume") => Some(RecoveryOpts {
            config: if a.recovery_config.is_empty() {
                RecoveryOpts::default().config
            } else {
                a.recovery_config.clone()
            },
            node_args: a.recovery_node_args.clone(),
            max_back_secs: a.recovery_max_back_secs,
            min_resumed_pct: a.recovery_min_resumed_pct,
            partitions: a.recovery_partitions,
            ..RecoveryOpts::default()
        }),
        Some(x) => return fail(format!("--recovery {x}: the only mode is resume")),
    };
    if recovery.is_some() && !matches!(a.name, Name::Steady | Name::Storm) {
        return fail("--recovery works with storm and steady only".into());
    }
    let which = match a.name {
        Name::Steady => Which::Steady(recovery),
        Name::Storm => Which::Storm(StormOpts {
            nodes: a.nodes,
            throttle: a.throttle,
            max_back_secs: a.max_back_secs,
            max_registry_p99_ms: a.max_registry_p99_ms,
            recovery,
        }),
        Name::SlowConsumer => Which::SlowConsumer(SlowOpts {
            hot_rate: a.hot_rate.unwrap_or(5000.0),
            slow_percent: a.slow_percent,
            max_close_secs: a.max_close_secs,
            max_added_p99_ms: a.max_added_p99_ms,
            max_added_rss_mib: a.max_added_rss_mib,
        }),
        Name::Revocation => Which::Revocation(RevocationOpts {
            hot_rate: a.hot_rate.unwrap_or(200.0),
            brownout_latency_ms: a.brownout_latency_ms,
            max_stop_secs: a.max_stop_secs,
            brownout_max_ms: a.brownout_max_ms,
            lease_ttl_ms: a.lease_ttl_ms,
        }),
        Name::RollingRelease => Which::RollingRelease(RollingOpts {
            nodes: a.nodes,
            drain_spread_ms: a.drain_spread_ms,
            back_margin_secs: a.back_margin_secs,
            min_resumed_pct: a.min_resumed_pct,
            max_identify_pct: a.max_identify_pct,
            ..RollingOpts::default()
        }),
    };
    // The run is bounded: a watchdog ends the process if it overstays.
    let bound = common.timeout + Duration::from_secs(120);
    std::thread::spawn(move || {
        std::thread::sleep(bound);
        eprintln!("loadgen scenario: exceeded --timeout-secs; giving up");
        std::process::exit(3);
    });
    match scenario::run(which, common) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("loadgen scenario {name}: FAILED (a claim did not hold; see the summary)");
            ExitCode::FAILURE
        }
        Err(e) => fail(e),
    }
}
