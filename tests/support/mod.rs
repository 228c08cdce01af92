//! What the integration tests share, by concept; every test file declares
//! `mod support;` and uses what it needs. Everything here talks to a real
//! `gatewayd` the way an operator, the chat service or a bot would.
//!
//! - `node`: starting a node (a child process on port 0) and its addresses;
//! - `http`: one-shot HTTP requests to its admin and gateway ports;
//! - `metrics`: its `/metrics`, parsed;
//! - `bot`: a well-behaved bot over tungstenite (Identify, sessions);
//! - `raw`: a raw WebSocket client on `net::ws` framing, for hostile input;
//! - `interact`: a person clicking (`gatewayd interact`);
//! - `registry`: the registry CLI, and databases on the test PostgreSQL server;
//! - `cluster`: two nodes on one registry, Identify on a shard, Resume on another node;
//! - `recovery`: what a bot sees across a crash recovery (dispatches, op 9, the end);
//! - `rest`: a node with its bot connected, acting through the REST edge;
//! - `events`: the chat service's events and the ingest producer;
//! - `fields`: the field lists of docs/rest.md, as checks over JSON;
//! - `flood`: strangers holding a listener's connections, silent or trickling;
//! - `kafka`: a Kafka-protocol topic and its producer;
//! - `services`: PostgreSQL, Tansu and Redis servers a test owns (to freeze, kill);
//! - `pki`: a throwaway CA and its certificates; `tls_front`: TLS before a plaintext server;
//! - `python`: the discord.py / hikari interpreter and the tests/py scripts;
//! - `portal`: the developer portal over plain HTTP; `webdriver`: chromium driving it.
//!
//! Tests name items by their module (`support::node::Node`,
//! `support::bot::identify`); the bits and `wait_until` live here.

// Each test binary compiles this whole module and uses a different subset
// of it, so every binary would warn about the items it does not use.
#![allow(dead_code)]

pub mod bot;
pub mod cli;
pub mod cluster;
pub mod events;
pub mod fields;
pub mod flood;
pub mod http;
pub mod interact;
pub mod js;
pub mod kafka;
pub mod metrics;
pub mod node;
pub mod pki;
pub mod placement;
pub mod portal;
pub mod python;
pub mod raw;
pub mod recovery;
pub mod registry;
pub mod rest;
pub mod services;
pub mod tls_front;
pub mod webdriver;

use std::time::{Duration, Instant};

// ------------------------------------------------------------------ bits

/// Intent and permission bits are the `proto` crate's, as the node's.
pub use proto::intents as intent;

/// What the test bots ask for: guilds and their messages, with content
/// (the demo bot is approved for MESSAGE_CONTENT).
pub const BOT_INTENTS: u64 = intent::GUILDS | intent::GUILD_MESSAGES | intent::MESSAGE_CONTENT;

pub mod perm {
    pub use proto::permissions::*;
    /// What `install` grants without `--permissions`.
    pub const INSTALL_DEFAULT: u64 = EVERYONE_DEFAULT;
}

// ------------------------------------------------------------------ waiting

/// Polls `f` every 20 ms until it holds; the time it took, or None after `limit`.
pub fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> Option<Duration> {
    let t = Instant::now();
    loop {
        if f() {
            return Some(t.elapsed());
        }
        if t.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
