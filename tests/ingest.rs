//! The ingest listener against a real node: bad records are rejected and
//! counted without desynchronising the stream, and server changes in the
//! stream change what bots may see from that point on.

mod support;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{json, Value};
use support::bot::{self, recv};
use support::events::append_message;
use support::metrics::metric;
use support::node::Node;
use support::{intent, BOT_INTENTS};

/// Identify as the demo bot on a new connection; returns it with the
/// server id and its #general id.
fn identify(node: &Node) -> (bot::Ws, u64, u64) {
    let mut ws = bot::connect(node.gateway);
    let (_, guild_creates) = bot::login(&mut ws, &node.token, BOT_INTENTS);
    assert_eq!(guild_creates.len(), 1, "the demo bot is on one server");
    let (server, general) = support::bot::server_and_general(&guild_creates[0]);
    (ws, server, general)
}

fn message(server: u64, channel: u64, content: &str, out: &mut Vec<u8>) {
    append_message(1, server, channel, content, out);
}

#[test]
fn malformed_records_are_counted_and_the_stream_stays_in_sync() {
    let node = Node::start(&["--no-demo-traffic"]);
    let (mut ws, server, general) = identify(&node);
    let mut producer = TcpStream::connect(node.ingest).unwrap();
    let mut bytes = Vec::new();
    message(server, general, "before", &mut bytes);
    // `d` that is not one JSON object: it would be pasted into what bots get.
    ingest::encode_parts(
        "MESSAGE_CREATE",
        server,
        general,
        intent::GUILD_MESSAGES,
        0,
        0,
        1,
        &[],
        br#"{}, "op": 7, "x": {}"#,
        &mut bytes,
    );
    // Reserved flag bits.
    ingest::encode_parts(
        "MESSAGE_CREATE",
        server,
        general,
        intent::GUILD_MESSAGES,
        0,
        0,
        1 << 30,
        &[],
        b"{}",
        &mut bytes,
    );
    // A valid length prefix around garbage.
    bytes.extend_from_slice(&16u32.to_le_bytes());
    bytes.extend_from_slice(&1u16.to_le_bytes());
    bytes.extend_from_slice(&0u16.to_le_bytes());
    bytes.extend_from_slice(&[0xAB; 16]);
    message(server, general, "after", &mut bytes);
    producer.write_all(&bytes).unwrap();
    let a = recv(&mut ws);
    let b = recv(&mut ws);
    assert_eq!(
        (a["d"]["content"].as_str(), b["d"]["content"].as_str()),
        (Some("before"), Some("after"))
    );
    assert_eq!(
        b["s"].as_u64(),
        a["s"].as_u64().map(|s| s + 1),
        "no gap in the session's sequence"
    );
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(metric(&node, "gatewayd_ingest_rejected_total"), 3.0);

    // An impossible length ends that producer's connection, nobody else's.
    let mut bad = TcpStream::connect(node.ingest).unwrap();
    bad.write_all(&u32::MAX.to_le_bytes()).unwrap();
    bad.write_all(&[0u8; 4]).unwrap();
    bad.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 1];
    assert_eq!(
        std::io::Read::read(&mut bad, &mut buf).unwrap_or(0),
        0,
        "the node closed the untrustworthy stream"
    );
    bytes.clear();
    message(server, general, "still flowing", &mut bytes);
    producer.write_all(&bytes).unwrap();
    assert_eq!(recv(&mut ws)["d"]["content"], "still flowing");
}

#[test]
fn a_channel_overwrite_in_the_stream_changes_who_sees_later_events() {
    let node = Node::start(&["--no-demo-traffic"]);
    let (mut ws, server, general) = identify(&node);
    let mut producer = TcpStream::connect(node.ingest).unwrap();
    let overwrite = |deny: u64, out: &mut Vec<u8>| {
        let d = json!({"id": general.to_string(), "type": 0, "guild_id": server.to_string(), "name": "general", "position": 1,
                       "permission_overwrites": [{"id": server.to_string(), "type": 0, "allow": "0", "deny": deny.to_string()}]});
        ingest::encode_parts(
            "CHANNEL_UPDATE",
            server,
            general,
            1,
            0,
            0,
            ingest::FLAG_GUILD_STATE,
            &[],
            d.to_string().as_bytes(),
            out,
        );
    };
    let mut bytes = Vec::new();
    message(server, general, "one", &mut bytes);
    overwrite(proto::permissions::VIEW_CHANNEL, &mut bytes); // @everyone may no longer view #general
    message(server, general, "hidden", &mut bytes);
    overwrite(0, &mut bytes); // and now may again
    message(server, general, "two", &mut bytes);
    message(server, general, "marker", &mut bytes);
    producer.write_all(&bytes).unwrap();
    let mut got = Vec::new();
    loop {
        let v = recv(&mut ws);
        let item = (
            v["t"].as_str().unwrap().to_string(),
            v["d"]["content"].as_str().unwrap_or("").to_string(),
        );
        got.push(item);
        if v["d"]["content"] == "marker" {
            break;
        }
    }
    let expect = |t: &str, c: &str| (t.to_string(), c.to_string());
    // The first CHANNEL_UPDATE hid #general, so the bot does not get it (it
    // can no longer see the channel) nor "hidden"; the second shows it again.
    assert_eq!(
        got,
        vec![
            expect("MESSAGE_CREATE", "one"),
            expect("CHANNEL_UPDATE", ""),
            expect("MESSAGE_CREATE", "two"),
            expect("MESSAGE_CREATE", "marker"),
        ]
    );
    // A new session's GUILD_CREATE carries the channel as the stream left it.
    let _second = identify(&node);
    assert_eq!(metric(&node, "gatewayd_ingest_state_changes_total"), 2.0);
}

#[test]
fn a_direct_message_reaches_only_the_named_bot_with_its_content() {
    let node = Node::start(&["--no-demo-traffic"]);
    let mut ws = bot::connect_path(node.gateway, "/");
    // DIRECT_MESSAGES and GUILD_MESSAGES, but no MESSAGE_CONTENT.
    let intents = intent::DIRECT_MESSAGES | intent::GUILD_MESSAGES;
    let (ready, _) = bot::login(&mut ws, &node.token, intents);
    let bot: u64 = ready["d"]["user"]["id"].as_str().unwrap().parse().unwrap();
    let mut producer = TcpStream::connect(node.ingest).unwrap();
    let mut bytes = Vec::new();
    let dm = |to: u64, content: &str, out: &mut Vec<u8>| {
        let d = json!({"id": "2", "channel_id": "900", "content": content, "author": {"id": "5", "username": "u"}, "embeds": []});
        ingest::encode_parts(
            "MESSAGE_CREATE",
            0,
            900,
            intent::DIRECT_MESSAGES,
            0,
            0,
            ingest::FLAG_HAS_CONTENT,
            &[to],
            d.to_string().as_bytes(),
            out,
        );
    };
    dm(bot + 1, "not for you", &mut bytes);
    dm(bot, "for you", &mut bytes);
    producer.write_all(&bytes).unwrap();
    let v = recv(&mut ws);
    assert_eq!(v["t"], "MESSAGE_CREATE");
    assert_eq!(
        v["d"]["content"], "for you",
        "DMs keep their content without MESSAGE_CONTENT"
    );
}

/// A producer's records after a quiet spell leave at once; records that
/// follow each other closely (a busy stream) are gathered into one batch,
/// one wake-up of the workers, for at most `--ingest-gather-us` after the
/// first of them (issue 30; the rule in src/ingest/gather.rs). The window
/// is 5 s here so that the test holds on a slow machine: the records are
/// 50 ms apart, far inside it, and the quiet record's bound is the window.
#[test]
fn a_busy_stream_is_gathered_and_a_record_after_a_quiet_spell_is_not_held() {
    let node = Node::start(&["--no-demo-traffic", "--ingest-gather-us", "5000000"]);
    let (mut ws, server, general) = identify(&node);
    let mut producer = TcpStream::connect(node.ingest).unwrap();
    let batches0 = metric(&node, "gatewayd_ingest_batches_total");
    let send = |producer: &mut TcpStream, content: &str| {
        let mut bytes = Vec::new();
        message(server, general, content, &mut bytes);
        producer.write_all(&bytes).unwrap();
    };
    let t0 = std::time::Instant::now();
    send(&mut producer, "quiet");
    assert_eq!(recv(&mut ws)["d"]["content"], "quiet");
    assert!(
        t0.elapsed() < Duration::from_secs(5),
        "a record after a quiet spell is not held for the gathering window ({:?})",
        t0.elapsed()
    );
    for content in ["busy 1", "busy 2", "busy 3"] {
        send(&mut producer, content);
        std::thread::sleep(Duration::from_millis(50));
    }
    let got: Vec<Value> = (0..3).map(|_| recv(&mut ws)).collect();
    let contents: Vec<&str> = got
        .iter()
        .map(|e| e["d"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(contents, ["busy 1", "busy 2", "busy 3"], "in stream order");
    assert_eq!(
        metric(&node, "gatewayd_ingest_batches_total") - batches0,
        2.0,
        "the quiet record alone, then the three busy ones in one batch"
    );
}
