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

#[derive(Subcommand)]
enum Cmd {
    /// Run the fleet coordinator (identify, REST and cooldown limits over
    /// JSON Lines/TCP). No authentication: keep it on loopback.
    Coordinator(CoordinatorArgs),
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
