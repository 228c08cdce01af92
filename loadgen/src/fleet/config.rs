//! [`FleetConfig`]: what a fleet runs (nodes, source addresses, threads,
//! handshake windows and timeout, paced and stalled readers, the
//! coordinator, the sessions to open, client behaviour switches) and
//! [`spread_sources`] for source addresses.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct FleetConfig {
    /// Gateway addresses; sessions start on `nodes[start_node]` (or spread
    /// over all with `spread`) and move to the next one when a connect fails.
    pub nodes: Vec<SocketAddrV4>,
    pub spread: bool,
    /// Source addresses to bind, round robin (each gives ~28,000 ports).
    pub sources: Vec<Ipv4Addr>,
    /// Threads (rings); 0: enough for the fixed-table limit, at least 2.
    pub threads: usize,
    /// Sessions per thread between connect and READY at a time.
    pub window: usize,
    /// The same bound for sessions that reconnect to Resume (default: the
    /// same as `window`). Real bots resume on their own, at once, after
    /// op 7; a fleet that queues them behind a window measures itself.
    pub resume_window: usize,
    /// A handshake not done in this long is abandoned and retried.
    pub handshake_timeout: Duration,
    /// Paced readers: (bot, MESSAGE_CREATE per second it reads).
    pub slow: Vec<(u32, f64)>,
    /// Fleet coordinator (`loadgen coordinator`): every Identify waits for
    /// its `identify_acquire` grant (keyed by application).
    pub coordinator: Option<std::net::SocketAddr>,
    /// The sessions to open as (bot, shard); None: every shard of every
    /// bot of the world once. A bot may appear more than once (several
    /// sessions on one token, as against a node loadgen did not provision).
    pub sessions: Option<Vec<(u32, u32)>>,
    /// The first `stall` sessions stop reading once streaming (they still
    /// heartbeat): what unread events cost the node.
    pub stall: usize,
    /// SO_RCVBUF of the stalled sessions' sockets, set before connect (None:
    /// the kernel's default, autotuned; loopback buffers then absorb a lot).
    pub stall_rcvbuf: Option<i32>,
    /// Heartbeats carry the last `s` (false: `null`, acknowledging nothing).
    pub ack_seq: bool,
    /// Identify says `shard` (false: left out, as one-shard bots often do).
    pub send_shard: bool,
    /// Sessions reconnect after a loss (false: they stop, counted in
    /// `Counters::lost` / `failed`: what a measurement wants to see).
    pub reconnect: bool,
    /// Every GUILD_CREATE read is parsed into `Shared::servers` (the
    /// many-servers workload of `measure fanout --servers`).
    pub collect_servers: bool,
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            nodes: Vec::new(),
            spread: false,
            sources: Vec::new(),
            threads: 0,
            window: 256,
            resume_window: 256,
            handshake_timeout: Duration::from_secs(30),
            slow: Vec::new(),
            coordinator: None,
            sessions: None,
            stall: 0,
            stall_rcvbuf: None,
            ack_seq: true,
            send_shard: true,
            reconnect: true,
            collect_servers: false,
        }
    }
}

/// Source addresses from `base` on, one per `per_source` sessions
/// (`base`, `base`+1, ...): each address has ~28,000 ports.
pub fn spread_sources(base: Ipv4Addr, sessions: usize, per_source: usize) -> Vec<Ipv4Addr> {
    let n = sessions.div_ceil(per_source.max(1)).max(1);
    (0..n as u32)
        .map(|i| Ipv4Addr::from(u32::from(base).wrapping_add(i)))
        .collect()
}
