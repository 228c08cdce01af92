//! What every task shares: [`State`] (the config, the bots, one broadcast
//! channel per served server, the metrics), the bots and channels of the
//! made-up servers, and an ingest [`Event`] as parsed once for all its
//! receivers ([`Payload`]: a typed [`MessageData`] for messages, a
//! `serde_json::Value` otherwise). Also the permission and intent bits the
//! gateway filters by. Uses only `config.rs`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::broadcast;

use crate::config::{die, Config};

pub const GUILDS: u64 = 1 << 0;
pub const MESSAGE_CONTENT: u64 = 1 << 15;
pub const VIEW_CHANNEL: u64 = 1 << 10;
pub const SEND_MESSAGES: u64 = 1 << 11;

/// The error of a connection's task (logged or dropped, never fatal).
pub type BoxErr = Box<dyn std::error::Error + Send + Sync>;

pub struct Bot {
    pub application_id: u64,
    pub user_id: u64,
    pub username: String,
    /// The one server it is installed in.
    pub server: u64,
}

pub struct Channel {
    pub id: u64,
    pub name: &'static str,
    pub position: u32,
}

/// One event from the ingest port, parsed once, shared by every receiver.
pub struct Event {
    pub t: String,
    pub guild_id: u64,
    pub channel_id: u64,
    pub intent: u64,
    pub permissions: u64,
    pub has_content: bool,
    pub mentions: Vec<u64>,
    pub d: Payload,
}

/// An event's `d`: MESSAGE_CREATE / MESSAGE_UPDATE into a typed struct (as
/// Rust Discord libraries model them), everything else as a `Value`.
pub enum Payload {
    Message(Box<MessageData>),
    Other(Value),
}

impl Serialize for Payload {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Payload::Message(m) => m.serialize(s),
            Payload::Other(v) => v.serialize(s),
        }
    }
}

/// A message as the gateway sends it. Field order is the struct's (a
/// `serde_json::Value` would sort the keys). `ts_ns` is the benchmark's
/// timestamp (`loadgen measure fanout` expects it first); unknown fields are
/// dropped, as typed clients do.
#[derive(Serialize, Deserialize, Clone)]
pub struct MessageData {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ts_ns: Option<u64>,
    id: String,
    #[serde(rename = "type", default)]
    kind: u8,
    channel_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    guild_id: Option<String>,
    author: User,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    member: Option<Value>,
    #[serde(default)]
    pub content: String,
    timestamp: String,
    #[serde(default)]
    edited_timestamp: Option<String>,
    #[serde(default)]
    tts: bool,
    #[serde(default)]
    mention_everyone: bool,
    #[serde(default)]
    mentions: Vec<Value>,
    #[serde(default)]
    mention_roles: Vec<String>,
    #[serde(default)]
    pub attachments: Vec<Value>,
    #[serde(default)]
    pub embeds: Vec<Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub components: Vec<Value>,
    #[serde(default)]
    pinned: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    nonce: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    flags: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    referenced_message: Option<Value>,
}

#[derive(Serialize, Deserialize, Clone)]
pub struct User {
    id: String,
    username: String,
    #[serde(default)]
    discriminator: String,
    #[serde(default)]
    global_name: Option<String>,
    #[serde(default)]
    avatar: Option<String>,
    #[serde(default)]
    bot: bool,
}

#[derive(Default)]
pub struct Metrics {
    pub deliveries: AtomicU64,
    pub events_in: AtomicU64,
    pub lagged_events: AtomicU64,
    pub identifies: AtomicU64,
    pub sessions: AtomicI64,
    pub connections: AtomicI64,
    pub ingest_errors: AtomicU64,
    /// Ingest records for a server this node does not serve.
    pub unknown_server_events: AtomicU64,
}

pub struct State {
    pub cfg: Config,
    /// `None`: any token is accepted (one bot per distinct token, made up).
    pub bots: Option<HashMap<String, Bot>>,
    /// Each server's broadcast channel: its events reach only its sessions.
    pub servers: HashMap<u64, broadcast::Sender<Arc<Event>>>,
    pub metrics: Metrics,
    pub gateway_url: String,
}

/// Server `j` of `cfg` (j < servers).
pub fn server_of(cfg: &Config, j: u64) -> u64 {
    cfg.server_id + (j % cfg.servers) * 16
}

/// A server's channels: ids the server id + 1, 2, 3.
pub fn channels(server: u64) -> [Channel; 3] {
    [
        Channel {
            id: server + 1,
            name: "general",
            position: 0,
        },
        Channel {
            id: server + 2,
            name: "random",
            position: 1,
        },
        Channel {
            id: server + 3,
            name: "announcements",
            position: 2,
        },
    ]
}

pub fn load_bots(path: &str, cfg: &Config) -> HashMap<String, Bot> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| die(&format!("reading {path}: {e}")));
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .enumerate()
        .map(|(i, t)| {
            let id = 1_170_000_000_100_000_000 + i as u64;
            (
                t.to_string(),
                Bot {
                    application_id: id,
                    user_id: id,
                    username: format!("bot{}", i + 1),
                    server: server_of(cfg, i as u64),
                },
            )
        })
        .collect()
}
