//! `loadgen measure idle|fanout` and `loadgen hold-sessions`: flags to
//! `loadgen::measure` (the flags of the former examples/measure.rs and
//! examples/hold_sessions.rs, unchanged).

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use loadgen::measure::{self, FanoutOpts, HoldOpts, IdleOpts, SessionOpts, DEFAULT_INTENTS};

#[derive(Subcommand)]
pub enum MeasureCmd {
    /// Node RSS per idle session: open N sessions, wait for READY, read
    /// the node's RSS, close them all with 1000.
    Idle(IdleArgs),
    /// Fan-out throughput and latency: N sessions, then MESSAGE_CREATE at
    /// --rate for --seconds into the node's ingest port.
    Fanout(FanoutArgs),
}

/// Flags of both measurements.
#[derive(Args)]
pub struct Common {
    /// The node's gateway address.
    #[arg(long)]
    addr: SocketAddrV4,
    /// Sessions to open (session k identifies with token k % tokens).
    #[arg(long)]
    sessions: usize,
    /// The node's pid, for its RSS and CPU time.
    #[arg(long)]
    node_pid: Option<u32>,
    /// The node's admin address, for its /metrics.
    #[arg(long)]
    admin: Option<SocketAddr>,
    /// First source address; one more per 25,000 sessions.
    #[arg(long)]
    bind_base: Option<Ipv4Addr>,
    /// Client threads (one io_uring each).
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Sessions per thread between connect and READY at a time.
    #[arg(long, default_value_t = 128)]
    window: usize,
    /// Identify intents (default GUILDS | GUILD_MESSAGES | MESSAGE_CONTENT).
    #[arg(long, default_value_t = DEFAULT_INTENTS)]
    intents: u64,
    /// 1: heartbeats carry the last `s`; 0: `null` (releases nothing on the node).
    #[arg(long, default_value_t = 1)]
    ack_seq: u8,
    /// A session not READY this long after its connect has failed.
    #[arg(long, default_value_t = 60)]
    ready_timeout_secs: u64,
    /// How long to wait for every session to be READY.
    #[arg(long, default_value_t = 240)]
    timeout_secs: u64,
}

#[derive(Args)]
pub struct IdleArgs {
    /// Tokens, one a line.
    #[arg(long = "token-file", visible_alias = "tokens-file")]
    token_file: PathBuf,
    #[command(flatten)]
    c: Common,
    /// Wait this long after the last READY before reading RSS.
    #[arg(long, default_value_t = 3)]
    settle_secs: u64,
    /// Then hold the sessions this long (and report how many are left).
    #[arg(long, default_value_t = 0)]
    hold_secs: u64,
}

#[derive(Args)]
pub struct FanoutArgs {
    /// Tokens, one a line.
    #[arg(long = "tokens-file", visible_alias = "token-file")]
    tokens_file: PathBuf,
    #[command(flatten)]
    c: Common,
    /// The node's ingest address.
    #[arg(long)]
    ingest: SocketAddr,
    /// Events per second (open loop).
    #[arg(long)]
    rate: f64,
    /// Seconds of events.
    #[arg(long)]
    seconds: f64,
    /// Bytes of each event's `d`.
    #[arg(long, default_value_t = 600)]
    payload: usize,
    /// The first K sessions stop reading once READY (left out of latency and gaps).
    #[arg(long, default_value_t = 0)]
    stall: usize,
    /// SO_RCVBUF of the stalled sessions' sockets.
    #[arg(long)]
    stall_rcvbuf: Option<i32>,
    /// After the last event, wait up to this long for the rest.
    #[arg(long, default_value_t = 5.0)]
    drain_secs: f64,
    /// Server id for the events (with --channel; default: the first
    /// GUILD_CREATE's server and its #general).
    #[arg(long, requires = "channel")]
    server: Option<u64>,
    /// Channel id for the events (with --server).
    #[arg(long, requires = "server")]
    channel: Option<u64>,
    /// Many servers: send --rate events/s to EACH of S servers, round-robin
    /// (S x rate events/s in all), each to its #general. The servers are
    /// those the sessions' GUILD_CREATEs name (tokens of applications each
    /// installed in its own server; session k uses token k % tokens, so S
    /// tokens spread the sessions evenly); fails if fewer than S are seen
    /// within 10 s of the last READY. One event then reaches only the
    /// sessions of its server. 1: every event to one server (the first
    /// GUILD_CREATE's, or --server/--channel).
    #[arg(long, default_value_t = 1, conflicts_with = "server",
          value_parser = clap::value_parser!(u64).range(1..=loadgen::servers::MAX_SERVERS as u64))]
    servers: u64,
    /// Events in bursts of K: K events back to back to one server (at the
    /// same scheduled time), then the next server; the average rate per
    /// server is unchanged. A session then has K events queued at once, so
    /// they can leave in one send (gatewayd_sent_frames_total /
    /// gatewayd_sends_total). 1: evenly spaced.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1000))]
    burst: u64,
    /// Write the run's time series there: series.tsv (per second: offered
    /// and received deliveries, missing, p50/p99/max of the events scheduled
    /// in that second, node CPU), sessions.tsv (per session: deliveries,
    /// p50, p99, max), report.json and report.html (SVG plots).
    #[arg(long, value_name = "DIR")]
    series_dir: Option<std::path::PathBuf>,
    /// The p99 target (ms) the series judges each second by (the seconds
    /// above it are named in the output and the report).
    #[arg(long, default_value_t = 50.0)]
    p99_target_ms: f64,
}

fn session_opts(c: &Common, tokens: Vec<String>) -> SessionOpts {
    SessionOpts {
        addr: c.addr,
        tokens,
        sessions: c.sessions,
        intents: c.intents,
        threads: c.threads,
        window: c.window,
        bind_base: c.bind_base,
        ack_seq: c.ack_seq != 0,
        ready_timeout: Duration::from_secs(c.ready_timeout_secs),
        timeout: Duration::from_secs(c.timeout_secs),
        node_pid: c.node_pid,
        admin: c.admin,
    }
}

fn done(what: &str, r: Result<(), String>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("loadgen {what}: {e}");
            ExitCode::from(2)
        }
    }
}

pub fn run(cmd: MeasureCmd) -> ExitCode {
    match cmd {
        MeasureCmd::Idle(a) => done(
            "measure idle",
            measure::read_tokens(&a.token_file).and_then(|t| {
                measure::idle(&IdleOpts {
                    s: session_opts(&a.c, t),
                    settle: Duration::from_secs(a.settle_secs),
                    hold: Duration::from_secs(a.hold_secs),
                })
            }),
        ),
        MeasureCmd::Fanout(a) => done(
            "measure fanout",
            measure::read_tokens(&a.tokens_file).and_then(|t| {
                if !(a.rate > 0.0 && a.rate.is_finite() && a.seconds > 0.0) {
                    return Err("--rate and --seconds must be positive".into());
                }
                measure::fanout(&FanoutOpts {
                    s: session_opts(&a.c, t),
                    ingest: a.ingest,
                    rate: a.rate,
                    seconds: a.seconds,
                    payload: a.payload,
                    stall: a.stall,
                    stall_rcvbuf: a.stall_rcvbuf,
                    drain: Duration::from_secs_f64(a.drain_secs.max(0.0)),
                    target: a.server.zip(a.channel),
                    servers: a.servers as usize,
                    burst: a.burst,
                    series_dir: a.series_dir,
                    p99_target_ms: a.p99_target_ms,
                })
            }),
        ),
    }
}

#[derive(Args)]
pub struct HoldArgs {
    /// The node's gateway address.
    #[arg(long, default_value = "127.0.0.1:8080")]
    gateway: SocketAddrV4,
    /// The token every session identifies with.
    #[arg(long)]
    token: String,
    /// Sessions to hold.
    #[arg(long, default_value_t = 1000)]
    count: usize,
    /// Source address of every connection (spread processes over
    /// 127.0.0.2, .3, ... so they do not run out of ports).
    #[arg(long)]
    source: Option<Ipv4Addr>,
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// Sessions per thread between connect and READY at a time.
    #[arg(long, default_value_t = 128)]
    window: usize,
    #[arg(long, default_value_t = 1 | (1 << 9))]
    intents: u64,
    /// Stop after this many seconds (default: when stdin is closed).
    #[arg(long)]
    hold_secs: Option<u64>,
    /// A session not READY this long after its connect counts as failed.
    #[arg(long, default_value_t = 30)]
    stall_secs: u64,
    /// Session k (counted from --first-index) identifies as [k % N, N];
    /// without it, Identify has no shard ([0, 1]).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    shards: Option<u32>,
    #[arg(long, default_value_t = 0)]
    first_index: usize,
}

pub fn hold(a: HoldArgs) -> ExitCode {
    done(
        "hold-sessions",
        measure::hold(&HoldOpts {
            gateway: a.gateway,
            token: a.token,
            count: a.count,
            source: a.source,
            threads: a.threads,
            window: a.window,
            intents: a.intents,
            hold: a.hold_secs.map(Duration::from_secs),
            stall: Duration::from_secs(a.stall_secs),
            shards: a.shards,
            first_index: a.first_index,
        }),
    )
}
