//! Fixtures for the hot-path micro benchmarks in `benches/hot_path.rs`:
//! realistic inputs built once, outside the measured loops. The tests below
//! check that each fixture takes the path its benchmark claims to measure
//! (a frame that decodes, a record that validates, a recipient that is
//! let through), so a benchmark cannot silently measure an error path.

use gatewayd::protocol::intents::{self, perm};
use gatewayd::protocol::session::{GuildAccess, Identity};
use ingest::FLAG_HAS_CONTENT;
use net::ws::{self, OpCode};
use proto::{AppId, ChannelId, ServerId};
use ringbuf::{Arena, ArenaConfig, Entry, RingConfig, RingSlab, SessionRing};
use shards::SessionId;

/// The event type used throughout (the most common dispatch).
pub const EVENT_TYPE: &str = "MESSAGE_CREATE";
/// A Discord-sized snowflake for the server.
pub const SERVER: u64 = 175_928_847_299_117_063;
/// The channel the message event is in.
pub const CHANNEL: u64 = 381_870_553_235_193_857;
/// The bot user that recipient 0 is (and that the message mentions).
pub const BOT: u64 = 1_000_000;

/// A MESSAGE_CREATE `d` object of exactly `len` bytes (at least ~240),
/// padded in `content`.
pub fn message_d(len: usize) -> Vec<u8> {
    let head = format!(
        r#"{{"id":"1180000000000000001","channel_id":"{CHANNEL}","guild_id":"{SERVER}","author":{{"id":"80351110224678912","username":"bench","global_name":null,"avatar":null}},"embeds":[],"attachments":[],"mentions":[],"pinned":false,"tts":false,"type":0,"content":""#
    );
    let tail = r#""}"#;
    assert!(
        len >= head.len() + tail.len(),
        "d of {len} bytes is too short"
    );
    let mut d = head.into_bytes();
    let pad = len - d.len() - tail.len();
    d.extend((0..pad).map(|i| b"hello gateway "[i % 14]));
    d.extend_from_slice(tail.as_bytes());
    d
}

/// A masked client Text frame whose payload is `len` bytes of JSON (an op 1
/// heartbeat padded with a `pad` string, so it is valid UTF-8).
pub fn client_text_frame(len: usize) -> Vec<u8> {
    let head = br#"{"op":1,"d":251,"pad":""#;
    let tail = br#""}"#;
    assert!(len >= head.len() + tail.len());
    let mut p = head.to_vec();
    p.resize(len - tail.len(), b'x');
    p.extend_from_slice(tail);
    let mut out = Vec::new();
    ws::encode_client_frame(OpCode::Text, true, [0x37, 0xfa, 0x21, 0x3d], &p, &mut out);
    out
}

/// One framed ingest record (header + rkyv body) of a MESSAGE_CREATE whose
/// `d` is `d_len` bytes, mentioning three users.
pub fn ingest_frame(d_len: usize) -> Vec<u8> {
    let mut out = Vec::new();
    ingest::encode_parts(
        EVENT_TYPE,
        SERVER,
        CHANNEL,
        intents::GUILD_MESSAGES,
        0,
        1_700_000_000_000_000_000,
        FLAG_HAS_CONTENT,
        &[BOT, 80_351_110_224_678_912, 80_351_110_224_678_913],
        &message_d(d_len),
        &mut out,
    );
    out
}

/// A recipient: a bot session in `n_guilds` servers of `n_channels`
/// channels each (sorted, as the node keeps them), one of which is
/// (SERVER, CHANNEL) with VIEW_CHANNEL.
pub fn identity(bot: u64, intents_: u64, n_guilds: u64, n_channels: u64) -> Identity {
    assert!(n_guilds >= 1 && n_channels >= 1);
    let mut guilds: Vec<GuildAccess> = (0..n_guilds)
        .map(|g| {
            let id = if g == 0 { SERVER } else { SERVER + 1000 * g };
            let mut channels: Vec<(ChannelId, u64)> = (0..n_channels)
                .map(|c| {
                    let cid = if c == 0 { CHANNEL } else { CHANNEL + 7 * c };
                    (ChannelId(cid), perm::VIEW_CHANNEL | perm::SEND_MESSAGES)
                })
                .collect();
            channels.sort_unstable_by_key(|c| c.0);
            GuildAccess {
                id: ServerId(id),
                channels,
                lease_until_ms: u64::MAX,
            }
        })
        .collect();
    guilds.sort_unstable_by_key(|g| g.id);
    Identity {
        session_id: SessionId::new(0, u128::from(bot)),
        application_id: AppId(bot),
        bot_user_id: bot,
        intents: intents_,
        shard: [0, 1],
        token_digest: [0; 32],
        guilds,
        user_json: "{}".into(),
    }
}

/// The requirement of a guild MESSAGE_CREATE in (SERVER, CHANNEL) with
/// content, mentioning `mentions`.
pub fn message_requirement(mentions: &[u64]) -> gatewayd::delivery::entitlement::Requirement<'_> {
    gatewayd::delivery::entitlement::Requirement {
        server_id: ServerId(SERVER),
        channel_id: ChannelId(CHANNEL),
        intent: intents::GUILD_MESSAGES,
        permissions: 0,
        has_content: true,
        addressed: false,
        mentions,
        now_ms: 1_700_000_000_000,
    }
}

/// An arena, the ring slab and one session ring over them.
pub struct Loaded {
    pub arena: Arena,
    pub slab: RingSlab,
    pub ring: SessionRing,
}

/// One event record, as the node writes it (gatewayd::delivery::record),
/// stamped as a stream event is (commit and take times).
pub fn append_event(arena: &mut Arena, d: &[u8]) -> ringbuf::RecordRef {
    let stamp = gatewayd::delivery::latency::Stamp {
        commit_ns: 1_700_000_000_000_000_000,
        take_ns: 1_700_000_000_001_000_000,
    };
    gatewayd::delivery::record::append(arena, stamp, EVENT_TYPE, d).expect("record fits the arena")
}

/// An arena with `n` MESSAGE_CREATE records of `d_len` bytes, and a session
/// ring (bounded at `n`) holding entries 1..=n for them, the first `sent`
/// of them sent.
pub fn loaded(n: u32, sent: u32, d_len: usize) -> Loaded {
    let d = message_d(d_len);
    let mut arena = Arena::new(ArenaConfig::new(16 << 20)).expect("arena");
    let mut slab = RingSlab::new(4096);
    let cfg = RingConfig {
        max_unsent: n.max(1),
        max_held: n.max(1),
        max_unsent_bytes: u64::MAX,
    };
    let mut ring = SessionRing::new(&cfg, 0);
    for seq in 1..=u64::from(n) {
        let record = append_event(&mut arena, &d);
        ring.push(
            &mut slab,
            Entry {
                record,
                seq,
                at_ms: 0,
            },
        )
        .expect("ring has room");
    }
    ring.mark_sent(&slab, sent);
    Loaded { arena, slab, ring }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gatewayd::delivery::entitlement::{decide, Variant};

    #[test]
    fn message_d_is_exact_json() {
        for len in [300, 600, 4096] {
            let d = message_d(len);
            assert_eq!(d.len(), len);
            ingest::validate_json_object(&d).unwrap();
        }
    }

    #[test]
    fn client_frames_decode_as_text() {
        for len in [100, 4096] {
            let mut f = client_text_frame(len);
            let total = f.len();
            let mut dec = ws::Decoder::new(1 << 20);
            let (n, msg) = dec.decode(&mut f).unwrap().unwrap();
            assert_eq!(n, total);
            match msg {
                Some(ws::Message::Text(s)) => assert_eq!(s.len(), len),
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn ingest_frame_validates() {
        let f = ingest_frame(500);
        assert!((560..=680).contains(&f.len()), "{} bytes", f.len());
        let mut r = ingest::FrameReader::new();
        r.push(&f);
        let rec = r.next().unwrap().unwrap();
        assert_eq!(rec.event_type(), EVENT_TYPE);
        assert_eq!(rec.d().len(), 500);
        assert!(r.next().is_none());
    }

    #[test]
    fn recipients_are_let_through() {
        let mentions = [BOT];
        let req = message_requirement(&mentions);
        let gm = intents::GUILDS | intents::GUILD_MESSAGES;
        assert_eq!(decide(&identity(BOT, gm, 1, 1), &req), Some(Variant::Full));
        assert_eq!(
            decide(&identity(BOT + 1, gm, 100, 50), &req),
            Some(Variant::Redacted)
        );
        assert_eq!(
            decide(&identity(BOT + 1, intents::GUILDS, 1, 1), &req),
            None
        );
    }

    #[test]
    fn loaded_ring_holds_everything() {
        let l = loaded(256, 256, 500);
        assert_eq!(l.ring.len_held(), 256);
        assert_eq!(l.ring.len_unsent(), 0);
        assert!(l
            .ring
            .held(&l.slab)
            .all(|e| l.arena.get(e.record).is_some()));
    }
}
