#![allow(dead_code)]

use ingest::{Record, FLAG_HAS_CONTENT, VERSION};

/// A typical MESSAGE_CREATE `d` of about 600 bytes, as the chat service
/// would pre-serialise it.
pub fn message_d(content: &str) -> Vec<u8> {
    let d = serde_json::json!({
        "type": 0,
        "tts": false,
        "timestamp": "2026-11-30T08:50:26.123000+00:00",
        "referenced_message": null,
        "pinned": false,
        "nonce": "1312385930186801152",
        "mentions": [],
        "mention_roles": [],
        "mention_everyone": false,
        "member": {"roles": [], "nick": null, "joined_at": "2025-01-01T00:00:00.000000+00:00"},
        "id": "1312385931365990400",
        "flags": 0,
        "embeds": [],
        "edited_timestamp": null,
        "content": content,
        "components": [],
        "channel_id": "1312385929306587136",
        "author": {"username": "someone", "public_flags": 0, "id": "1312385928316731392",
                   "global_name": "Someone", "discriminator": "0", "avatar": null},
        "attachments": [],
        "guild_id": "1312385927326875648"
    });
    serde_json::to_vec(&d).unwrap()
}

pub fn message(n: u64) -> Record {
    Record {
        version: VERSION,
        event_type: "MESSAGE_CREATE".into(),
        server_id: 1312385927326875648 + n % 7,
        channel_id: 1312385929306587136,
        intent: 1 << 9,
        permissions: 0,
        commit_unix_ns: 1_780_000_000_000_000_000 + n,
        flags: FLAG_HAS_CONTENT,
        mentions: vec![1312385928316731392, n],
        d: message_d(&format!("hello world, message number {n}")),
    }
}

pub fn small(event_type: &str) -> Record {
    Record {
        version: VERSION,
        event_type: event_type.into(),
        server_id: 5,
        channel_id: 0,
        intent: 1,
        permissions: 0,
        commit_unix_ns: 9,
        flags: 0,
        mentions: vec![],
        d: b"{}".to_vec(),
    }
}

/// Frames an arbitrary body with a valid version-1 header.
pub fn frame(body: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(body);
}

/// One encoded frame.
pub fn framed(r: &Record) -> Vec<u8> {
    let mut v = Vec::new();
    ingest::encode(r, &mut v);
    v
}
