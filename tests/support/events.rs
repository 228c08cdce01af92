//! The chat service's side of a node: events as it commits them, written
//! to the ingest listener (or framed for a Kafka topic).

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use super::intent;

pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// One event as the chat service commits it.
#[derive(Clone, Debug)]
pub struct Event {
    pub t: String,
    pub server_id: u64,
    /// 0: server-wide.
    pub channel_id: u64,
    pub intent: u64,
    /// Channel permissions needed beyond VIEW_CHANNEL.
    pub permissions: u64,
    pub flags: u32,
    pub mentions: Vec<u64>,
    pub commit_ns: u64,
    pub d: Value,
}

/// A producer connection to the node's ingest listener. Records written on
/// one connection reach every worker in the order written.
pub struct Producer {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Producer {
    pub fn connect(ingest: SocketAddr) -> Producer {
        let stream = TcpStream::connect(ingest).expect("connect to the ingest listener");
        stream.set_nodelay(true).unwrap();
        Producer {
            stream,
            buf: Vec::with_capacity(128 * 1024),
        }
    }

    pub fn send(&mut self, ev: &Event) {
        let d = serde_json::to_vec(&ev.d).unwrap();
        self.send_raw(ev, &d);
    }

    /// Like `send`, with `d` already serialised (it wins over `ev.d`).
    pub fn send_raw(&mut self, ev: &Event, d: &[u8]) {
        self.buf.clear();
        ingest::encode_parts(
            &ev.t,
            ev.server_id,
            ev.channel_id,
            ev.intent,
            ev.permissions,
            ev.commit_ns,
            ev.flags,
            &ev.mentions,
            d,
            &mut self.buf,
        );
        self.stream
            .write_all(&self.buf)
            .expect("write to the ingest listener");
    }
}

/// The user who posts the test messages (not a bot).
pub const AUTHOR_ID: u64 = 1_180_000_000_000_000_777;

/// A MESSAGE_CREATE `d` with every MESSAGE_CONTENT-governed field populated
/// (content, an embed, an attachment, a button row and a poll), so that
/// redaction is visible in each of them. `mentions` are bot user ids.
pub fn message_d(id: u64, server: u64, channel: u64, content: &str, mentions: &[u64]) -> Value {
    let ts = "2025-01-01T00:00:00.000000+00:00";
    json!({
        "id": id.to_string(),
        "type": 0,
        "channel_id": channel.to_string(),
        "guild_id": server.to_string(),
        "author": {"id": AUTHOR_ID.to_string(), "username": "test-user", "discriminator": "0",
                   "global_name": "Test User", "avatar": null, "public_flags": 0},
        "member": {"roles": [], "joined_at": ts, "deaf": false, "mute": false, "flags": 0,
                   "pending": false, "premium_since": null, "nick": null, "avatar": null,
                   "communication_disabled_until": null},
        "content": content,
        "timestamp": ts,
        "edited_timestamp": null,
        "tts": false,
        "mention_everyone": false,
        "mentions": mentions.iter().map(|m| json!({
            "id": m.to_string(), "username": format!("bot-{m}"), "discriminator": "0",
            "global_name": null, "avatar": null, "bot": true, "public_flags": 0
        })).collect::<Vec<_>>(),
        "mention_roles": [],
        "attachments": [{"id": (id + 1).to_string(), "filename": "notes.txt", "size": 12,
                         "url": "https://cdn.example/notes.txt", "proxy_url": "https://media.example/notes.txt",
                         "content_type": "text/plain"}],
        "embeds": [{"type": "rich", "title": "embed title", "description": format!("embed of {content}")}],
        "components": [{"id": 1, "type": 1, "components": [{"id": 2, "type": 2, "style": 1, "label": "Press", "custom_id": "press"}]}],
        "poll": {"question": {"text": "which?"},
                 "answers": [{"answer_id": 1, "poll_media": {"text": "this"}},
                             {"answer_id": 2, "poll_media": {"text": "that"}}],
                 "expiry": "2030-01-01T00:00:00.000000+00:00",
                 "allow_multiselect": false, "layout_type": 1},
        "pinned": false,
        "flags": 0,
        "nonce": null,
    })
}

/// What a bot without MESSAGE_CONTENT must see of `d` (PROTOCOL.md): content,
/// embeds, attachments, components emptied, poll removed, the rest intact.
pub fn redacted(d: &Value) -> Value {
    let mut r = d.clone();
    let o = r.as_object_mut().unwrap();
    o.insert("content".into(), json!(""));
    o.insert("embeds".into(), json!([]));
    o.insert("attachments".into(), json!([]));
    o.insert("components".into(), json!([]));
    o.remove("poll");
    r
}

/// A MESSAGE_CREATE record for `message_d`.
pub fn message_event(id: u64, server: u64, channel: u64, content: &str, mentions: &[u64]) -> Event {
    Event {
        t: "MESSAGE_CREATE".into(),
        server_id: server,
        channel_id: channel,
        intent: intent::GUILD_MESSAGES,
        permissions: 0,
        flags: ingest::FLAG_HAS_CONTENT,
        mentions: mentions.to_vec(),
        commit_ns: now_ns(),
        d: message_d(id, server, channel, content, mentions),
    }
}

/// A framed MESSAGE_CREATE record with a small `d` (GUILD_MESSAGES, with
/// content): for the listener (`Producer::write_raw`) or a Kafka topic.
pub fn frame_message(server: u64, channel: u64, content: &str) -> Vec<u8> {
    frame_message_with_id(1, server, channel, content)
}

/// Like `frame_message`, with the message id `id` (`d.id`).
pub fn frame_message_with_id(id: u64, server: u64, channel: u64, content: &str) -> Vec<u8> {
    let mut out = Vec::new();
    append_message(id, server, channel, content, &mut out);
    out
}

/// Appends the record `frame_message_with_id` makes to `out`.
pub fn append_message(id: u64, server: u64, channel: u64, content: &str, out: &mut Vec<u8>) {
    let d = json!({"id": id.to_string(), "channel_id": channel.to_string(), "guild_id": server.to_string(), "content": content,
                   "author": {"id": "5", "username": "u", "discriminator": "0", "avatar": null}, "embeds": [], "attachments": []});
    ingest::encode_parts(
        "MESSAGE_CREATE",
        server,
        channel,
        intent::GUILD_MESSAGES,
        0,
        0,
        ingest::FLAG_HAS_CONTENT,
        &[],
        d.to_string().as_bytes(),
        out,
    );
}
