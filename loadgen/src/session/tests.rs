//! Tests of the session state machine: sequence and entitlement checks,
//! resume and re-identify, fatal closes and zombies, op 7, paced and
//! stalled readers, content without the intent, fragments and bad frames,
//! unchecked latency stamps, guild capture, and sessions that do not
//! reconnect.

use net::ws::{self, Decoder, OpCode};

use super::*;
use crate::world::{Bot, Server, World, GUILDS, GUILD_MESSAGES, MESSAGE_CONTENT};

fn world() -> World {
    World {
        bots: vec![Bot {
            app_id: 1,
            token: "tok".into(),
            shards: 1,
            intents: GUILDS | GUILD_MESSAGES | MESSAGE_CONTENT,
            servers: vec![(0, false)],
        }],
        servers: vec![
            Server {
                id: 10 << 22,
                channels: [1, 2],
            },
            Server {
                id: 11 << 22,
                channels: [3, 4],
            },
        ],
        recipients: vec![[1, 0], [0, 0]],
        hot_bots: vec![],
        revoked_hot: vec![Default::default()],
    }
}

fn frame(text: &str) -> Vec<u8> {
    let mut v = Vec::new();
    ws::encode_frame(OpCode::Text, text.as_bytes(), &mut v);
    v
}

/// What the session sent, as the node decodes it.
fn sent(s: &mut Session) -> Vec<ws::OwnedMessage> {
    let mut d = Decoder::new(1 << 20);
    let mut out = Vec::new();
    let mut buf = std::mem::take(&mut s.out);
    let mut off = 0;
    while let Some((n, m)) = d.decode(&mut buf[off..]).expect("masked client frames") {
        out.extend(m.map(ws::OwnedMessage::from));
        off += n;
    }
    assert_eq!(off, buf.len());
    out
}

fn msg(s: u64, server: u32, chan: u8) -> Vec<u8> {
    frame(&format!(
        r#"{{"op":0,"t":"MESSAGE_CREATE","s":{s},"d":{{"lg":[1,{s},{server},{chan}],"content":"x"}}}}"#
    ))
}

/// A fresh connection up to the server's Hello (upgrade request sent,
/// 101 and op 10 fed at `at`); returns what the session does next.
fn connect_through_hello(s: &mut Session, w: &World, r: &mut Recorder, at: u64) -> Action {
    s.on_connecting();
    s.on_connected("h", r);
    assert!(s.out.starts_with(b"GET /?v=10"));
    s.out.clear();
    let mut b = b"HTTP/1.1 101 Switching Protocols\r\n\r\n".to_vec();
    b.extend(frame(r#"{"op":10,"d":{"heartbeat_interval":41250}}"#));
    s.feed(&b, at, w, r)
}

fn ready(s: &mut Session, w: &World, r: &mut Recorder) {
    assert_eq!(connect_through_hello(s, w, r, 1), Action::Continue);
    assert_eq!(s.phase, Phase::Identifying);
    let m = sent(s);
    assert!(
        matches!(&m[..], [ws::OwnedMessage::Text(t)] if t.starts_with(r#"{"op":2,"#)),
        "{m:?}"
    );
    let b = frame(r#"{"op":0,"t":"READY","s":1,"d":{"session_id":"abc"}}"#);
    s.feed(&b, 2, w, r);
    assert!(s.streaming());
}

#[test]
fn checks_sequence_and_entitlement() {
    let w = world();
    let mut r = Recorder::new();
    let mut s = Session::new(0, 0, 1, 7);
    ready(&mut s, &w, &mut r);
    // Split across two reads.
    let m = msg(2, 0, 0);
    s.feed(&m[..7], 3, &w, &mut r);
    s.feed(&m[7..], 3, &w, &mut r);
    assert_eq!(r.c.deliveries, 1);
    s.feed(&msg(2, 0, 0), 3, &w, &mut r);
    assert_eq!(r.c.duplicates, 1);
    s.feed(&msg(5, 0, 0), 3, &w, &mut r);
    assert_eq!(r.c.gaps, 2);
    s.feed(&msg(6, 0, 1), 3, &w, &mut r); // private channel, no admin
    s.feed(&msg(7, 1, 0), 3, &w, &mut r); // not installed
    assert_eq!(r.c.entitlement_violations, 2);
    assert!(r.first_violation.is_some());
}

#[test]
fn resumes_after_a_drop_and_reidentifies_after_op9_false() {
    let w = world();
    let mut r = Recorder::new();
    let mut s = Session::new(0, 0, 1, 9);
    ready(&mut s, &w, &mut r);
    s.feed(&msg(2, 0, 0), 3, &w, &mut r);
    s.on_lost(10, false, 2, &mut r);
    assert_eq!(s.phase, Phase::Idle);
    assert!(s.reconnect_at >= 10 && s.reconnect_at < 10 + 1_000_000_001);
    connect_through_hello(&mut s, &w, &mut r, 20);
    assert_eq!(s.phase, Phase::Resuming);
    assert_eq!(r.c.resumes_sent, 1);
    // op 9 false: new session, close, identify on the next connection.
    let act = s.feed(&frame(r#"{"op":9,"d":false}"#), 30, &w, &mut r);
    assert_eq!(act, Action::Close);
    assert_eq!(r.c.invalid_new_session, 1);
    s.on_lost(30, false, 2, &mut r);
    assert!(s.reconnect_at >= 30 + 1_000_000_000);
    ready(&mut s, &w, &mut r);
    assert_eq!(r.c.identifies, 2);
    assert_eq!(r.recovery.len(), 1);
    s.feed(&msg(2, 0, 0), 3, &w, &mut r);
    assert_eq!(r.c.gaps, 0, "a new session starts from 1");
}

#[test]
fn fatal_close_stops_and_zombie_reconnects() {
    let w = world();
    let mut r = Recorder::new();
    let mut s = Session::new(0, 0, 1, 3);
    ready(&mut s, &w, &mut r);
    let t = s.next_hb;
    assert_eq!(s.tick(t, &mut r), Action::Continue);
    assert!(!s.out.is_empty(), "heartbeat sent");
    assert_eq!(
        s.tick(t + 41_250_000_000, &mut r),
        Action::Close,
        "no ACK: zombie"
    );
    assert_eq!(r.c.zombies, 1);
    let mut close = Vec::new();
    ws::encode_close(4014, "Disallowed intent(s).", &mut close);
    assert_eq!(s.feed(&close, 5, &w, &mut r), Action::Close);
    assert_eq!(s.phase, Phase::Stopped);
    assert_eq!(r.c.closes[14], 1);
}

#[test]
fn op7_reconnects_at_once_and_resumes() {
    let w = world();
    let mut r = Recorder::new();
    let mut s = Session::new(0, 0, 1, 5);
    ready(&mut s, &w, &mut r);
    s.feed(&msg(2, 0, 0), 3, &w, &mut r);
    assert_eq!(
        s.feed(&frame(r#"{"op":7,"d":null}"#), 50, &w, &mut r),
        Action::Close
    );
    s.on_lost(50, false, 1, &mut r);
    assert_eq!(s.reconnect_at, 50, "no backoff after op 7");
    assert!(!s.needs_identify());
    connect_through_hello(&mut s, &w, &mut r, 60);
    assert_eq!(s.phase, Phase::Resuming);
    s.feed(&msg(3, 0, 0), 61, &w, &mut r); // replayed
    s.feed(
        &frame(r#"{"op":0,"t":"RESUMED","s":4,"d":{}}"#),
        62,
        &w,
        &mut r,
    );
    assert!(s.streaming());
    assert_eq!((r.c.resumed, r.c.gaps, r.c.duplicates), (1, 0, 0));
}

#[test]
fn a_paced_reader_reads_at_its_rate() {
    let w = world();
    let mut r = Recorder::new();
    let mut s = Session::new(0, 0, 1, 5);
    s.read_rate = Some(10.0);
    ready(&mut s, &w, &mut r);
    let t0 = s.streaming_since;
    assert!(s.may_read(t0));
    s.feed(&msg(2, 0, 0), t0, &w, &mut r);
    assert!(!s.may_read(t0), "one event read, none allowed yet");
    assert!(s.may_read(t0 + 100_000_000), "10/s: the next after 100 ms");
}

#[test]
fn content_must_be_empty_without_the_intent() {
    let mut w = world();
    w.bots[0].intents = GUILDS | GUILD_MESSAGES;
    let mut r = Recorder::new();
    let mut s = Session::new(0, 0, 1, 3);
    ready(&mut s, &w, &mut r);
    s.feed(&msg(2, 0, 0), 3, &w, &mut r);
    assert_eq!(r.c.content_violations, 1);
    let ok = frame(r#"{"op":0,"t":"MESSAGE_CREATE","s":3,"d":{"lg":[1,3,0,0],"content":""}}"#);
    s.feed(&ok, 3, &w, &mut r);
    assert_eq!(r.c.content_violations, 1);
}

#[test]
fn fragments_pings_and_bad_frames() {
    let w = world();
    let mut r = Recorder::new();
    let mut s = Session::new(0, 0, 1, 11);
    ready(&mut s, &w, &mut r);
    // A message in two fragments with a ping between them, cut anywhere.
    let m = r#"{"op":0,"t":"MESSAGE_CREATE","s":2,"d":{"lg":[1,2,0,0],"content":"x"}}"#;
    let mut b = Vec::new();
    let mut hdr = [0u8; ws::MAX_SERVER_HEADER];
    let n = ws::encode_header(OpCode::Text, false, 10, &mut hdr);
    b.extend_from_slice(&hdr[..n]);
    b.extend_from_slice(&m.as_bytes()[..10]);
    ws::encode_frame(OpCode::Ping, b"hb", &mut b);
    let n = ws::encode_header(OpCode::Continuation, true, m.len() - 10, &mut hdr);
    b.extend_from_slice(&hdr[..n]);
    b.extend_from_slice(&m.as_bytes()[10..]);
    for chunk in b.chunks(5) {
        assert_eq!(s.feed(chunk, 3, &w, &mut r), Action::Continue);
    }
    assert_eq!(r.c.deliveries, 1);
    assert_eq!(sent(&mut s), vec![ws::OwnedMessage::Pong(b"hb".to_vec())]);
    // A masked frame from the node is a protocol error.
    let mut masked = Vec::new();
    ws::encode_client_frame(OpCode::Text, true, [1, 2, 3, 4], b"{}", &mut masked);
    assert_eq!(s.feed(&masked, 4, &w, &mut r), Action::Close);
    assert_eq!(r.c.protocol_errors, 1);
}

#[test]
fn ts_ns_stamps_give_latency_without_world_checks() {
    let w = world();
    let mut r = Recorder::new();
    r.measuring = true;
    let mut s = Session::new(0, 0, 1, 13);
    ready(&mut s, &w, &mut r);
    let sched = crate::clock::now_ns();
    let m = format!(
        r#"{{"op":0,"t":"MESSAGE_CREATE","s":2,"d":{{"ts_ns":{sched},"id":"1","guild_id":"99","content":"x"}}}}"#
    );
    s.feed(&frame(&m), 3, &w, &mut r);
    assert_eq!(r.c.deliveries, 1);
    assert_eq!(r.c.entitlement_violations, 0);
    assert_eq!(r.latency.len(), 1);
}

#[test]
fn collect_guilds_queues_every_guild_create_and_who_read_it() {
    let w = world();
    let mut r = Recorder::new();
    r.collect_guilds = true;
    for (k, rate) in [None, Some(0.0)].into_iter().enumerate() {
        let mut s = Session::new(0, 0, 1, 17 + k as u64);
        s.read_rate = rate;
        connect_through_hello(&mut s, &w, &mut r, 1);
        s.feed(
            &frame(r#"{"op":0,"t":"READY","s":1,"d":{"session_id":"abc"}}"#),
            2,
            &w,
            &mut r,
        );
        for (seq, id) in [(2, 77), (3, 88)] {
            let g = format!(
                r#"{{"op":0,"t":"GUILD_CREATE","s":{seq},"d":{{"id":"{id}","channels":[{{"id":"{}","name":"general"}}]}}}}"#,
                id + 1
            );
            s.feed(&frame(&g), 2, &w, &mut r);
        }
    }
    assert_eq!(r.guild, None, "want_guild is off");
    assert_eq!(
        r.guilds,
        vec![
            (77, 78, true),
            (88, 89, true),
            (77, 78, false),
            (88, 89, false)
        ]
    );
}

#[test]
fn guild_capture_ack_seq_shard_field_and_close() {
    let w = world();
    let mut r = Recorder::new();
    r.want_guild = true;
    let mut s = Session::new(0, 0, 1, 17);
    s.send_shard = false;
    s.ack_seq = false;
    connect_through_hello(&mut s, &w, &mut r, 1);
    let m = sent(&mut s);
    assert!(
        matches!(&m[..], [ws::OwnedMessage::Text(t)] if !t.contains("shard")),
        "{m:?}"
    );
    s.feed(
        &frame(r#"{"op":0,"t":"READY","s":1,"d":{"session_id":"abc"}}"#),
        2,
        &w,
        &mut r,
    );
    let g = r#"{"op":0,"t":"GUILD_CREATE","s":2,"d":{"id":"77","channels":[{"id":"5","name":"random"},{"id":"6","name":"general"}]}}"#;
    s.feed(&frame(g), 2, &w, &mut r);
    assert_eq!(r.guild, Some((77, 6)));
    assert_eq!(r.c.guild_creates, 1);
    assert!(r.guilds.is_empty(), "collect_guilds is off");
    assert!(r.c.handshake_bytes > g.len() as u64);
    let t = s.next_hb;
    s.tick(t, &mut r);
    assert_eq!(
        sent(&mut s),
        vec![ws::OwnedMessage::Text(r#"{"op":1,"d":null}"#.into())]
    );
    s.close_and_retire(1000);
    assert_eq!(
        sent(&mut s),
        vec![ws::OwnedMessage::Close(Some(1000), String::new())]
    );
    assert_eq!(s.phase, Phase::Stopped);
    s.on_lost(5, false, 1, &mut r);
    assert_eq!(
        (r.c.lost, r.c.failed),
        (0, 0),
        "a retired session is not lost"
    );
}

#[test]
fn without_reconnect_a_loss_stops_the_session() {
    let w = world();
    let mut r = Recorder::new();
    let mut s = Session::new(0, 0, 1, 19);
    s.reconnect = false;
    ready(&mut s, &w, &mut r);
    s.on_lost(10, false, 1, &mut r);
    assert_eq!(s.phase, Phase::Stopped);
    assert_eq!((r.c.lost, r.c.failed), (1, 0));
    let mut s = Session::new(0, 0, 1, 23);
    s.reconnect = false;
    s.on_connecting();
    s.on_lost(10, true, 1, &mut r);
    assert_eq!((r.c.lost, r.c.failed, r.c.connect_errors), (1, 1, 1));
    // A fatal close before READY fails a reconnecting session too.
    let mut s = Session::new(0, 0, 1, 29);
    connect_through_hello(&mut s, &w, &mut r, 1);
    let mut close = Vec::new();
    ws::encode_close(4004, "Authentication failed.", &mut close);
    assert_eq!(s.feed(&close, 2, &w, &mut r), Action::Close);
    assert_eq!(r.c.failed, 2);
}

#[test]
fn a_stalled_reader_stops_reading_and_is_no_zombie() {
    let w = world();
    let mut r = Recorder::new();
    let mut s = Session::new(0, 0, 1, 31);
    s.read_rate = Some(0.0);
    assert!(s.stalled());
    ready(&mut s, &w, &mut r);
    assert!(!s.may_read(s.streaming_since + 10_000_000_000));
    let t = s.next_hb;
    assert_eq!(s.tick(t, &mut r), Action::Continue);
    assert_eq!(s.tick(t + 41_250_000_000, &mut r), Action::Continue);
    assert_eq!(r.c.zombies, 0);
}
