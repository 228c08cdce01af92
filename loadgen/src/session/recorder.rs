//! What one fleet thread's sessions record into ([`Recorder`]): the
//! [`Counters`] (added to the fleet's totals now and then), latency and
//! recovery histograms (microseconds), the watch on one (bot, server),
//! the first violation and refusal seen, and the guilds read.

/// Per-thread counters, added to the fleet's shared totals now and then.
#[derive(Default, Clone, Debug)]
pub struct Counters {
    pub connects: u64,
    pub connect_errors: u64,
    pub identifies: u64,
    pub readies: u64,
    pub resumes_sent: u64,
    pub resumed: u64,
    pub invalid_resumable: u64,
    pub invalid_new_session: u64,
    pub deliveries: u64,
    pub other_dispatches: u64,
    pub duplicates: u64,
    pub gaps: u64,
    pub entitlement_violations: u64,
    pub content_violations: u64,
    pub hb_acks: u64,
    pub zombies: u64,
    pub reconnects_asked: u64,
    pub fatal: u64,
    pub protocol_errors: u64,
    /// Closes received, by code - 4000 (0..=15); [16] = other codes, [17] = EOF/error.
    pub closes: [u64; 18],
    pub bytes_in: u64,
    /// Upgrades answered 101.
    pub upgrades: u64,
    /// Connections that ended while streaming.
    pub lost: u64,
    /// Sessions that stopped for good before streaming (a fatal close, or
    /// any failure of a session that does not reconnect).
    pub failed: u64,
    /// MESSAGE_CREATE read by paced or stalled readers (also in `deliveries`).
    pub paced_deliveries: u64,
    /// Bytes of READY and GUILD_CREATE payloads received.
    pub handshake_bytes: u64,
    pub guild_creates: u64,
    /// MESSAGE_CREATE of the generated world whose event number is not
    /// above the last one the session received: the same event twice (with
    /// a fresh `s`, which the seq check cannot see) or events out of order.
    /// The producer numbers events in the order it writes them, the same
    /// order to every node, so a session's numbers only grow, across a
    /// resume, a hand-off or a new session alike (one totally ordered
    /// stream: the listener, or a one-partition topic).
    pub event_repeats: u64,
}

/// What one thread's sessions record into.
pub struct Recorder {
    pub c: Counters,
    /// Commit-to-receive latency in microseconds, while measuring.
    pub latency: hdrhistogram::Histogram<u64>,
    /// Time from losing a connection to READY/RESUMED again, microseconds.
    pub recovery: hdrhistogram::Histogram<u64>,
    pub measuring: bool,
    /// Latency by scheduled second (series.rs), while the fleet records one.
    pub series: Option<crate::series::PerSecond>,
    /// Sessions (by fleet index) whose latency is left out (e.g. the slow bot).
    pub latency_exclude_bot: Option<u32>,
    /// Only these bots' latency is recorded, when set (neighbour studies).
    pub latency_only_bots: Option<std::sync::Arc<Vec<bool>>>,
    /// Watched (bot, server): last receive time (ns) and count since `watch_from`.
    pub watch: Option<(u32, u32)>,
    pub watch_last_ns: u64,
    pub watch_count: u64,
    pub first_violation: Option<String>,
    /// The first refused upgrade (HTTP status line), for diagnostics.
    pub first_refusal: Option<String>,
    /// Set: the next GUILD_CREATE's (server id, `#general` channel id) is
    /// read into `guild` (for a run against a server loadgen did not make).
    pub want_guild: bool,
    pub guild: Option<(u64, u64)>,
    /// Set: every GUILD_CREATE's (server id, `#general` channel id, read by
    /// a session that reads every event) is queued into `guilds` (the
    /// fleet drains it into `Shared::servers`).
    pub collect_guilds: bool,
    pub guilds: Vec<(u64, u64, bool)>,
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder {
            c: Counters::default(),
            latency: hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000, 3).unwrap(),
            recovery: hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000, 3).unwrap(),
            measuring: false,
            series: None,
            latency_exclude_bot: None,
            latency_only_bots: None,
            watch: None,
            watch_last_ns: 0,
            watch_count: 0,
            first_violation: None,
            first_refusal: None,
            want_guild: false,
            guild: None,
            collect_guilds: false,
            guilds: Vec::new(),
        }
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}
