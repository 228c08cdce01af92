//! The demo traffic source: a MESSAGE_CREATE in #general every interval, so a
//! fresh `cargo run` has something to deliver. It is an ordinary producer: it
//! writes ingest records to the node's ingest listener over TCP.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::protocol::intents;
use crate::protocol::payload::iso8601;

pub struct DemoTarget {
    pub server_id: u64,
    pub channel_id: u64,
    /// The demo bot's user id: every `PING_EVERY`th tick a person uses its
    /// `/ping` command (an interaction record; the person sees a failure
    /// unless the bot registered `ping` and answers it).
    pub bot_user_id: u64,
    /// The person who posts the demo messages and uses `/ping` (alice, the
    /// demo server's owner: a member of it, so `GET /guilds/{id}/members/
    /// {author}` finds who wrote a message).
    pub person: Option<serde_json::Value>,
}

/// Ticks between two demo `/ping`s.
pub const PING_EVERY: u64 = 5;

/// The demo author when the registry could not name the server's owner at
/// start: a user, not a bot, and not a member.
const AUTHOR_ID: u64 = 1_180_000_000_000_000_001;

pub fn start(
    target: DemoTarget,
    interval_ms: u64,
    ingest: SocketAddr,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("demo".into())
        .spawn(move || {
            let ids = registry::snowflake::SnowflakeGenerator::new(crate::api::ids::DEMO);
            let mut conn: Option<TcpStream> = None;
            let mut frame = Vec::with_capacity(4096);
            let mut n: u64 = 0;
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(interval_ms));
                n += 1;
                frame.clear();
                encode_message_create(&target, ids.next_id(), n, &mut frame);
                if n.is_multiple_of(PING_EVERY) {
                    encode_ping(&target, ids.next_id(), &mut frame);
                }
                if conn.is_none() {
                    conn = TcpStream::connect(ingest).ok();
                }
                if let Some(c) = conn.as_mut() {
                    if c.write_all(&frame).is_err() {
                        conn = None; // reconnect on the next tick
                    }
                }
            }
        })
        .expect("spawn demo thread")
}

/// One framed ingest record holding a MESSAGE_CREATE.
pub fn encode_message_create(target: &DemoTarget, id: u64, n: u64, out: &mut Vec<u8>) {
    let now = registry::snowflake::unix_ms_now();
    let author = target.person.clone().unwrap_or_else(|| json!({"id": AUTHOR_ID.to_string(), "username": "demo-user", "discriminator": "0", "global_name": "Demo User", "avatar": null, "public_flags": 0}));
    let d = json!({
        "id": id.to_string(),
        "type": 0,
        "channel_id": target.channel_id.to_string(),
        "guild_id": target.server_id.to_string(),
        "author": author,
        "member": {"roles": [], "joined_at": iso8601(now), "deaf": false, "mute": false, "flags": 0, "pending": false, "premium_since": null, "nick": null, "avatar": null, "communication_disabled_until": null},
        "content": format!("demo message {n}"),
        "timestamp": iso8601(now),
        "edited_timestamp": null,
        "tts": false,
        "mention_everyone": false,
        "mentions": [],
        "mention_roles": [],
        "mention_channels": [],
        "attachments": [],
        "embeds": [],
        "components": [],
        "pinned": false,
        "flags": 0,
        "nonce": null,
    });
    let d = serde_json::to_vec(&d).expect("json");
    let commit_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    ingest::encode_parts(
        "MESSAGE_CREATE",
        target.server_id,
        target.channel_id,
        intents::GUILD_MESSAGES,
        0,
        commit_ns,
        ingest::FLAG_HAS_CONTENT,
        &[],
        &d,
        out,
    );
}

/// A person using the demo bot's `/ping` (an interaction record).
pub fn encode_ping(target: &DemoTarget, id: u64, out: &mut Vec<u8>) {
    let Some(person) = &target.person else { return };
    let d = json!({"id": id.to_string(), "type": 2, "user": person, "data": {"name": "ping", "type": 1}, "locale": "en-US"});
    let d = serde_json::to_vec(&d).expect("json");
    ingest::encode_parts(
        "INTERACTION_CREATE",
        target.server_id,
        target.channel_id,
        0,
        0,
        registry::snowflake::unix_ms_now() * 1_000_000,
        ingest::FLAG_INTERACTION,
        &[target.bot_user_id],
        &d,
        out,
    );
}
