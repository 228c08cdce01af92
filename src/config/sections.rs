//! `[chat]`, `[rest]` and `[demo]`: the chat service behind the REST edge,
//! the REST edge's rate limits, and the demo a fresh node comes with.

use serde::Deserialize;

/// The chat service behind the REST edge: embedded, or an upstream one
/// (docs/chat-upstream.md).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Chat {
    /// `http://host:port/path` of the chat service every validated,
    /// permitted action is POSTed to (its answer is relayed; it commits).
    /// Empty: the embedded chat service. http only for now.
    pub upstream_url: String,
    /// Keep-alive connections to it, one call at a time on each (1-64).
    pub upstream_connections: usize,
    /// Each call's deadline (waiting for a connection, connect, send, answer).
    pub upstream_timeout_ms: u64,
    /// How long an interaction's token works for follow-ups (the
    /// platform's 15 minutes; shortened in tests).
    pub interaction_token_ttl_ms: u64,
}

impl Default for Chat {
    fn default() -> Self {
        Chat {
            upstream_url: String::new(),
            upstream_connections: 4,
            upstream_timeout_ms: 2_000,
            interaction_token_ttl_ms: 15 * 60 * 1000,
        }
    }
}

/// The REST edge's rate limits (docs/rate-limits.md).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Rest {
    /// Multiplies every route bucket's published limit (1: as published).
    pub limit_scale: u32,
    /// Requests per second per bot token across all routes.
    pub global_per_second: u32,
    /// Invalid requests (401, 403, 429) per token per 10 minutes before a restriction.
    pub invalid_per_10_minutes: u32,
    /// Invalid requests per source address per 10 minutes (across its
    /// tokens) before the address is restricted; 0: never.
    pub invalid_per_address: u32,
    /// 429s within 10 s after which a token is banned for `ban_seconds`.
    pub ban_after_429s: u32,
    pub ban_seconds: u64,
    /// How often a worker rebuilds an application's REST view from the
    /// registry (new installations become visible).
    pub view_refresh_ms: u64,
    /// Share the rate-limit counters with other nodes through Redis
    /// (`redis://[:password@]host[:port][/db]`); empty: each node alone.
    pub redis_url: String,
    /// A file holding redis_url (its password with it): config/secrets.rs.
    pub redis_url_file: std::path::PathBuf,
    /// Every admission reaches every other node's limiter within this
    /// (plus two Redis round trips): the counters thread runs a round every
    /// half of it. 2..=100.
    pub redis_sync_ms: u64,
    /// Deadline of each Redis connect and round; past it the node falls
    /// back to its local share of each limit.
    pub redis_timeout_ms: u64,
    /// How many nodes share the limits, for the fallback share; 0: learn
    /// it from the nodes' heartbeats in Redis.
    pub nodes: u32,
}

impl Default for Rest {
    fn default() -> Self {
        Rest {
            limit_scale: 1,
            global_per_second: 50,
            invalid_per_10_minutes: 10_000,
            invalid_per_address: 10_000,
            ban_after_429s: 100,
            ban_seconds: 60,
            view_refresh_ms: 60_000,
            redis_url: String::new(),
            redis_url_file: std::path::PathBuf::new(),
            redis_sync_ms: 100,
            redis_timeout_ms: 50,
            nodes: 0,
        }
    }
}

/// The demo a fresh node comes with (README.md): on by default, off in
/// production (deploy/gatewayd.toml).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Demo {
    /// Seed the demo application `demo-bot`, its server `Demo Server` (with
    /// its people) and write its token to `<data_dir>/demo-token` on first
    /// start. Off (`--no-demo`): nothing is seeded, no token file is
    /// written, no traffic runs; a demo application an earlier start seeded
    /// stays (with a warning at every start) until
    /// `gatewayd registry delete-app` removes it.
    pub enabled: bool,
    /// With `enabled`: the traffic source posting a MESSAGE_CREATE (and now
    /// and then a `/ping`) in the demo server's `#general`. Off
    /// (`--no-demo-traffic`): the demo data without the traffic.
    pub traffic: bool,
    pub interval_ms: u64,
}

impl Default for Demo {
    fn default() -> Self {
        Demo {
            enabled: true,
            traffic: true,
            interval_ms: 1000,
        }
    }
}
