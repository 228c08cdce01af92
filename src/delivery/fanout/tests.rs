//! Fan-out tests: ring storage under pressure, and crash recovery's group
//! replay against live delivery.

use super::handoff::Rebuilding;
use super::*;
use crate::protocol::intents;
use crate::protocol::session::GuildAccess;

#[test]
fn resume_history_gives_way_when_ring_storage_runs_out() {
    let mut fan = FanOut::new(
        FanOutConfig {
            arena_bytes: 1 << 20,
            ring_chunks: 8, // 128 entries for everyone
            ring: RingConfig {
                max_unsent: 100,
                max_held: 164,
                max_unsent_bytes: u64::MAX,
            },
            resume_window_ms: 120_000,
        },
        2,
    )
    .unwrap();
    for i in 0..2u32 {
        let id = Identity {
            session_id: SessionId::new(0, i as u128 + 1),
            application_id: proto::AppId(1),
            bot_user_id: 7,
            intents: intents::GUILD_MESSAGES,
            shard: [0, 1],
            token_digest: [0; 32],
            guilds: vec![GuildAccess {
                id: proto::ServerId(5),
                channels: vec![(proto::ChannelId(6), intents::perm::VIEW_CHANNEL)],
                lease_until_ms: u64::MAX,
            }],
            user_json: "{}".into(),
        };
        fan.create(
            Box::new(id),
            ConnKey {
                ring: 0,
                gen: 1,
                slot: i,
            },
        );
    }
    let ev = EventIn {
        t: "MESSAGE_CREATE",
        server_id: proto::ServerId(5),
        channel_id: proto::ChannelId(6),
        intent: intents::GUILD_MESSAGES,
        permissions: 0,
        has_content: false,
        addressed: false,
        mentions: &[],
        d: b"{}",
        stamp: Stamp::NONE,
    };
    // Both sessions read everything; 500 events would need far more than
    // 8 chunks of history, so history is trimmed instead of anyone closing.
    let mut reclaims = 0;
    for _ in 0..500 {
        let d = fan.deliver(
            &ev,
            0,
            0,
            |_| {},
            |_, _| panic!("a reading session must not be closed"),
        );
        assert_eq!(d.recipients, 2);
        reclaims += d.history_reclaims;
        for i in [SessionIdx(0), SessionIdx(1)] {
            let n = fan.get(i).unwrap().ring.len_unsent();
            fan.mark_sent(i, n);
        }
    }
    assert!(reclaims > 0, "storage ran out and history was reclaimed");
    for i in [SessionIdx(0), SessionIdx(1)] {
        let s = fan.get(i).unwrap();
        assert_eq!(s.ring.last_seq(), 500);
        assert!(!s.lost);
    }
}

fn identity(n: u128, bot: u64, intents: u64, servers: &[u64]) -> Identity {
    Identity {
        session_id: SessionId::new(0, n),
        application_id: proto::AppId(bot),
        bot_user_id: bot,
        intents,
        shard: [0, 1],
        token_digest: [0; 32],
        guilds: servers
            .iter()
            .map(|s| GuildAccess {
                id: proto::ServerId(*s),
                channels: vec![(proto::ChannelId(s * 10), intents::perm::VIEW_CHANNEL)],
                lease_until_ms: u64::MAX,
            })
            .collect(),
        user_json: "{}".into(),
    }
}

/// Crash recovery offers a group of rebuilt sessions each record once
/// (`deliver_to_group`): each member must end up with exactly the
/// dispatches, bytes and seqs live delivery gave it, redacted variants,
/// direct messages and events it is not entitled to included.
#[test]
fn a_group_replay_gives_each_member_what_live_delivery_gave_it() {
    let cfg = || FanOutConfig {
        arena_bytes: 1 << 20,
        ring_chunks: 256,
        ring: RingConfig {
            max_unsent: 1_000,
            max_held: 1_000,
            max_unsent_bytes: u64::MAX,
        },
        resume_window_ms: 120_000,
    };
    let all = intents::GUILD_MESSAGES | intents::DIRECT_MESSAGES;
    let ids = [
        identity(1, 7, all | intents::MESSAGE_CONTENT, &[5, 6]),
        identity(2, 8, all, &[5]),                      // redacted content
        identity(3, 9, all, &[6, 7]),                   // other servers
        identity(4, 7, intents::DIRECT_MESSAGES, &[5]), // no guild messages
    ];
    let mut live = FanOut::new(cfg(), 8).unwrap();
    for (i, id) in ids.iter().enumerate() {
        let conn = ConnKey {
            ring: 0,
            gen: 1,
            slot: i as u32,
        };
        live.create(Box::new(id.clone()), conn);
    }
    let mut rebuilt = FanOut::new(cfg(), 8).unwrap();
    let members: Vec<SessionIdx> = ids
        .iter()
        .map(|id| rebuilt.import_at(id, 0, 0, 120_000).unwrap())
        .collect();
    let group = Rebuilding::new(&rebuilt, members.clone());
    let body = |n: u32| format!(r#"{{"id":"{n}","content":"secret {n}"}}"#);
    for n in 0..60u32 {
        let server = [5u64, 6, 7, 8, 0][n as usize % 5];
        let mentions: Vec<u64> = if n % 7 == 0 { vec![7, 9] } else { Vec::new() };
        let d = body(n);
        let ev = EventIn {
            t: "MESSAGE_CREATE",
            server_id: proto::ServerId(server),
            channel_id: proto::ChannelId(if n % 11 == 0 { 99 } else { server * 10 }),
            intent: if server == 0 {
                intents::DIRECT_MESSAGES
            } else {
                intents::GUILD_MESSAGES
            },
            permissions: intents::perm::VIEW_CHANNEL,
            has_content: true,
            addressed: false,
            mentions: &mentions,
            d: d.as_bytes(),
            stamp: Stamp::NONE,
        };
        live.deliver(&ev, 0, 0, |_| {}, |_, _| panic!("no ring fills up"));
        rebuilt.deliver_to_group(&group, &ev, 0, 0);
    }
    let take = |id: &Identity| crate::delivery::moved::Take {
        session_id: id.session_id,
        token_digest: id.token_digest,
        seq: 0,
        max_entries: 1_000,
        max_bytes: u64::MAX,
        deadline_unix_ms: u64::MAX,
    };
    let mut redacted = 0;
    for (k, id) in ids.iter().enumerate() {
        let want = live
            .export(live.lookup(&id.session_id).unwrap(), &take(id))
            .unwrap();
        let got = rebuilt.export(members[k], &take(id)).unwrap();
        assert_eq!(got, want, "session {k}");
        assert!(!want.is_empty() || k == 3, "session {k} got something");
        redacted += want
            .iter()
            .filter(|(_, d)| !String::from_utf8_lossy(d).contains("secret"))
            .count();
    }
    assert!(redacted > 0, "the redacted variant is covered");
}
