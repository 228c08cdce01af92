//! The options of `loadgen measure idle|fanout` and `hold-sessions`, and
//! their defaults ([`DEFAULT_INTENTS`], [`SESSIONS_PER_SOURCE`]). Plain
//! data, filled in by measure_cli.rs.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

/// Sessions per source address with `bind_base` (one address has ~28,000 ports).
pub const SESSIONS_PER_SOURCE: usize = 25_000;

/// GUILDS | GUILD_MESSAGES | MESSAGE_CONTENT.
pub const DEFAULT_INTENTS: u64 =
    proto::intents::GUILDS | proto::intents::GUILD_MESSAGES | proto::intents::MESSAGE_CONTENT;

/// How the sessions of `idle` and `fanout` are opened.
#[derive(Clone, Debug)]
pub struct SessionOpts {
    pub addr: SocketAddrV4,
    /// Session `k` identifies with token `k % tokens.len()`.
    pub tokens: Vec<String>,
    pub sessions: usize,
    pub intents: u64,
    pub threads: usize,
    /// Sessions per thread between connect and READY at a time.
    pub window: usize,
    /// Source addresses from here, one per [`SESSIONS_PER_SOURCE`].
    pub bind_base: Option<Ipv4Addr>,
    /// Heartbeats carry the last `s` (false: `null`, which releases nothing).
    pub ack_seq: bool,
    /// A session not READY this long after its connect has failed.
    pub ready_timeout: Duration,
    /// How long to wait for all to be READY.
    pub timeout: Duration,
    /// The node's pid (RSS, CPU) and admin address (/metrics), when known.
    pub node_pid: Option<u32>,
    pub admin: Option<SocketAddr>,
}

pub struct IdleOpts {
    pub s: SessionOpts,
    pub settle: Duration,
    pub hold: Duration,
}

pub struct FanoutOpts {
    pub s: SessionOpts,
    pub ingest: SocketAddr,
    pub rate: f64,
    pub seconds: f64,
    pub payload: usize,
    pub stall: usize,
    pub stall_rcvbuf: Option<i32>,
    pub drain: Duration,
    /// (server id, channel id); None: from the first GUILD_CREATE (`#general`).
    pub target: Option<(u64, u64)>,
    /// Servers to send to, `rate` events/s each (1: the one of `target`).
    pub servers: usize,
    /// Events per burst (`ProducerConfig::burst`).
    pub burst: u64,
    /// Where to write the time series and report (None: not recorded).
    pub series_dir: Option<std::path::PathBuf>,
    /// The p99 target each second is judged by (ms).
    pub p99_target_ms: f64,
}

pub struct HoldOpts {
    pub gateway: SocketAddrV4,
    pub token: String,
    pub count: usize,
    pub source: Option<Ipv4Addr>,
    pub threads: usize,
    pub window: usize,
    pub intents: u64,
    pub hold: Option<Duration>,
    /// A session not READY this long after its connect has failed.
    pub stall: Duration,
    /// Session `k` identifies as `[(first_index + k) % N, N]`; None: no
    /// `shard` in Identify (shard `[0, 1]`).
    pub shards: Option<u32>,
    pub first_index: usize,
}
