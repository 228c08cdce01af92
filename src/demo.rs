//! The demo traffic source: a MESSAGE_CREATE in #general every interval, so a
//! fresh `cargo run` has something to deliver.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::gateway::intents;
use crate::gateway::payload::iso8601;
use crate::messages::{Event, ToWorker, WorkerHandle};

pub struct DemoTarget {
    pub server_id: u64,
    pub channel_id: u64,
}

/// The demo author: a user, not a bot.
const AUTHOR_ID: u64 = 1_180_000_000_000_000_001;

pub fn start(
    target: DemoTarget,
    interval_ms: u64,
    workers: Arc<[WorkerHandle]>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("demo".into())
        .spawn(move || {
            let mut n: u64 = 0;
            let ids = registry::snowflake::SnowflakeGenerator::new(1);
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(interval_ms));
                n += 1;
                let ev = Arc::new(message_create(&target, ids.next_id(), n));
                for w in workers.iter() {
                    w.send(ToWorker::Event(ev.clone()));
                }
            }
        })
        .expect("spawn demo thread")
}

/// A MESSAGE_CREATE in both forms: full, and with content redacted.
pub fn message_create(target: &DemoTarget, id: u64, n: u64) -> Event {
    let now = registry::snowflake::unix_ms_now();
    let d = |content: &str| {
        json!({
            "id": id.to_string(),
            "type": 0,
            "channel_id": target.channel_id.to_string(),
            "guild_id": target.server_id.to_string(),
            "author": {"id": AUTHOR_ID.to_string(), "username": "demo-user", "discriminator": "0", "global_name": "Demo User", "avatar": null, "public_flags": 0, "flags": 0},
            "member": {"roles": [], "joined_at": iso8601(now), "deaf": false, "mute": false, "flags": 0, "pending": false, "premium_since": null, "nick": null, "avatar": null, "communication_disabled_until": null},
            "content": content,
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
        })
    };
    let full = serde_json::to_vec(&d(&format!("demo message {n}"))).expect("json");
    let redacted = serde_json::to_vec(&d("")).expect("json");
    Event {
        t: "MESSAGE_CREATE",
        server_id: target.server_id,
        channel_id: target.channel_id,
        intent: intents::GUILD_MESSAGES,
        permissions: 0,
        has_content: true,
        mentions: Vec::new(),
        full,
        redacted,
        commit_unix_ns: now * 1_000_000,
    }
}
