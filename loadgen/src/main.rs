//! The `loadgen` command: `scenario` (steady, storm, slow-consumer,
//! revocation, rolling-release: a node loadgen starts and provisions, with
//! claims and a report; scenario_cli.rs), `measure` and `hold-sessions`
//! (against a node it did not provision, for scripts/side-by-side.sh;
//! measure_cli.rs), `coordinator` (the fleet's shared identify and REST
//! limits, for load from several hosts) and `proxy` (the fault-injecting TCP
//! proxy). The work itself is in the library.

mod measure_cli;
mod scenario_cli;

use clap::{Args, Parser, Subcommand};
use std::net::{SocketAddr, TcpListener};
use std::process::ExitCode;
use std::time::Duration;

/// gatewayd load tester.
#[derive(Parser)]
#[command(name = "loadgen", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

// The scenario variants hold every flag; parsed once at start.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Cmd {
    /// Run the fleet coordinator (identify, REST and cooldown limits over
    /// JSON Lines/TCP). No authentication: keep it on loopback.
    Coordinator(CoordinatorArgs),
    /// Run the fault-injecting TCP proxy (e.g. between gatewayd and
    /// PostgreSQL): pass, latency, stall or drop, optionally scripted.
    Proxy(ProxyArgs),
    /// Run a scenario (steady, storm, slow-consumer, revocation) and write its report.
    Scenario(scenario_cli::ScenarioArgs),
    /// Measure a running node loadgen did not start (idle memory per
    /// session, fan-out throughput and latency), given tokens of apps
    /// installed in one server; prints `key value` lines.
    #[command(subcommand)]
    Measure(measure_cli::MeasureCmd),
    /// Open and hold sessions of one token until stdin closes (or
    /// --hold-secs), printing `opened/ready/failed/lost/acks N` lines.
    HoldSessions(measure_cli::HoldArgs),
}

#[derive(Args)]
struct CoordinatorArgs {
    /// Address to listen on. Anyone who can connect can use it.
    #[arg(long, default_value = "127.0.0.1:7600")]
    addr: SocketAddr,
    /// Identify buckets: shard s identifies in bucket s % N.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    max_concurrency: u64,
    /// Minimum time between two identifies of one bucket, in milliseconds.
    #[arg(long, default_value_t = 5250)]
    identify_spacing_ms: u64,
    /// Global REST limit, requests per second (0 = unlimited).
    #[arg(long, default_value_t = 50)]
    global_per_second: u32,
    /// Maximum concurrent client connections.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
    max_connections: u64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Coordinator(a) => coordinator(a),
        Cmd::Scenario(a) => scenario_cli::run(a),
        Cmd::Proxy(a) => proxy(a),
        Cmd::Measure(m) => measure_cli::run(m),
        Cmd::HoldSessions(a) => measure_cli::hold(a),
    }
}

fn coordinator(a: CoordinatorArgs) -> ExitCode {
    if !a.addr.ip().is_loopback() {
        eprintln!(
            "loadgen coordinator: warning: {} is not a loopback address; the coordinator has no authentication",
            a.addr
        );
    }
    let listener = match TcpListener::bind(a.addr) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("loadgen coordinator: cannot listen on {}: {e}", a.addr);
            return ExitCode::FAILURE;
        }
    };
    let config = loadgen::Config {
        max_concurrency: a.max_concurrency,
        identify_spacing: Duration::from_millis(a.identify_spacing_ms),
        global_per_second: a.global_per_second,
        max_connections: a.max_connections as usize,
        ..loadgen::Config::default()
    };
    eprintln!(
        "loadgen coordinator: listening on {} (max_concurrency {}, identify spacing {} ms, global {}/s)",
        listener.local_addr().unwrap_or(a.addr),
        config.max_concurrency,
        a.identify_spacing_ms,
        config.global_per_second
    );
    match loadgen::serve(listener, config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("loadgen coordinator: {e}");
            ExitCode::FAILURE
        }
    }
}

#[derive(Args)]
struct ProxyArgs {
    /// Address to listen on (port 0 picks a free port, printed at start).
    #[arg(long)]
    listen: SocketAddr,
    /// Address to forward connections to.
    #[arg(long)]
    upstream: SocketAddr,
    /// Fault script, e.g. "0s:pass,5s:latency=200ms,10s:stall,20s:drop,25s:pass"
    /// (times from the start; units ms or s). Without it the proxy passes traffic.
    #[arg(long)]
    script: Option<String>,
    /// Exit this many seconds after the script's last step (default: run
    /// until Ctrl-C or SIGTERM).
    #[arg(long)]
    exit_after: Option<f64>,
    /// Maximum concurrent proxied connections; more are closed at once.
    #[arg(long, default_value_t = loadgen::proxy::MAX_CONNECTIONS)]
    max_connections: usize,
    /// Bytes buffered per direction of a connection before the proxy stops
    /// reading from that side.
    #[arg(long, default_value_t = loadgen::proxy::MAX_PENDING)]
    max_pending: usize,
}

fn proxy(a: ProxyArgs) -> ExitCode {
    use loadgen::proxy::{parse_script, Fault, Proxy, Step};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Instant;

    let steps: Vec<Step> = match a.script.as_deref().map(parse_script).transpose() {
        Ok(s) => s.unwrap_or_default(),
        Err(e) => {
            eprintln!("loadgen proxy: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(x) = a.exit_after {
        if !(x.is_finite() && x >= 0.0) {
            eprintln!("loadgen proxy: --exit-after must be a non-negative number of seconds");
            return ExitCode::FAILURE;
        }
    }
    let term = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        if let Err(e) = signal_hook::flag::register(sig, term.clone()) {
            eprintln!("loadgen proxy: cannot handle signal {sig}: {e}");
            return ExitCode::FAILURE;
        }
    }
    let p = match Proxy::start_with_limits(a.listen, a.upstream, a.max_connections, a.max_pending) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("loadgen proxy: cannot listen on {}: {e}", a.listen);
            return ExitCode::FAILURE;
        }
    };
    let start = Instant::now();
    let stamp = |start: Instant| format!("[{:>9.3}s]", start.elapsed().as_secs_f64());
    let stats_line = |p: &Proxy| {
        let s = p.stats();
        format!(
            "accepted {} open {} refused {} dropped {} upstream-failures {} bytes up {} down {}",
            s.accepted, s.open, s.refused, s.dropped, s.upstream_failures, s.bytes_up, s.bytes_down
        )
    };
    println!(
        "{} loadgen proxy: listening on {} -> {}, fault {}",
        stamp(start),
        p.local_addr(),
        a.upstream,
        p.fault()
    );
    // Sleeps until `due`; false if a signal came first.
    let wait_until = |due: Instant| -> bool {
        loop {
            if term.load(Ordering::Relaxed) {
                return false;
            }
            let now = Instant::now();
            if now >= due {
                return true;
            }
            std::thread::sleep((due - now).min(Duration::from_millis(50)));
        }
    };
    let mut interrupted = false;
    for step in &steps {
        if !wait_until(start + step.at) {
            interrupted = true;
            break;
        }
        let before = p.stats().dropped;
        p.set(step.fault.clone());
        let extra = if step.fault == Fault::Drop {
            format!(" (reset {} open connections)", p.stats().dropped - before)
        } else {
            String::new()
        };
        println!(
            "{} fault -> {}{}; {}",
            stamp(start),
            step.fault,
            extra,
            stats_line(&p)
        );
    }
    if !interrupted {
        match a.exit_after {
            Some(x) => {
                let end = start + steps.last().map(|s| s.at).unwrap_or_default();
                let _ = wait_until(end + Duration::from_secs_f64(x));
            }
            None => {
                let _ = wait_until(start + Duration::from_secs(u32::MAX as u64));
            }
        }
    }
    println!(
        "{} loadgen proxy: stopping; {}",
        stamp(start),
        stats_line(&p)
    );
    p.stop();
    ExitCode::SUCCESS
}
