//! Kafka-protocol ingest against a real broker (Tansu in CI; Apache Kafka
//! or Redpanda work the same): the behaviours of the embedded listener
//! (tests/ingest.rs) with the events coming from a topic instead, plus the
//! offsets: committed once delivered, and a restarted node of the same
//! consumer group goes on from them instead of replaying the topic.
//!
//! Needs GATEWAYD_TEST_KAFKA_BROKERS (host:port[,...]); skipped locally
//! without it, a failure under CI. Each test makes its own topic and group.

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use support::bot::{Next, Session};
use support::events::frame_message;
use support::kafka::{brokers, create_topic, unique, Kafka};
use support::metrics::metric;
use support::node::Node;
use support::BOT_INTENTS;

/// First delivery waits for the consumer to join its group (and, after a
/// restart without leaving, for the old member's 6 s session to expire).
const FIRST_EVENT: Duration = Duration::from_secs(40);

fn start_node(brokers: &str, topic: &str, group: &str) -> Node {
    Node::start(&[
        "--no-demo-traffic",
        "--kafka-brokers",
        brokers,
        "--kafka-topic",
        topic,
        "--kafka-group",
        group,
        "--kafka-session-timeout-ms",
        "6000",
    ])
}

/// Identify as the demo bot; returns the session, its server and #general.
/// Node B: shares A's registry file (SQLite, two processes) and consumes
/// the same topic in its own group.
fn start_beside(a: &Node, brokers: &str, topic: &str) -> Node {
    let registry = a.dir.path().join("registry.sqlite");
    Node::start(&[
        "--no-demo-traffic",
        "--registry-path",
        registry.to_str().unwrap(),
        "--kafka-brokers",
        brokers,
        "--kafka-topic",
        topic,
        "--kafka-group",
        &unique("b"),
        "--kafka-session-timeout-ms",
        "6000",
    ])
}

fn identify(node: &Node, intents: u64) -> (Session, u64, u64) {
    let s = support::bot::identify(node.gateway, "demo-bot", &node.token, intents, None)
        .expect("identify");
    let (server, general) = support::bot::server_and_general(&s.guild_creates[0]);
    (s, server, general)
}

/// Nothing more arrives within `wait`.
fn quiet(s: &mut Session, wait: Duration) {
    match support::bot::read_next(&mut s.ws, wait) {
        Next::Timeout => {}
        other => panic!("{}: expected nothing, got {other:?}", s.name),
    }
}

#[test]
#[ignore = "needs a Kafka-protocol broker: run scripts/test-all.sh, or set GATEWAYD_TEST_KAFKA_BROKERS"]
fn events_arrive_in_order_and_malformed_records_are_skipped_and_counted() {
    let brokers = brokers();
    let topic = create_topic(&brokers);
    let node = start_node(&brokers, &topic, &unique("g"));
    let (mut s, server, general) = identify(&node, BOT_INTENTS);
    let kafka = Kafka::new(&brokers, &topic);

    kafka.send(server, &frame_message(server, general, "before"));
    // `d` that is not one JSON object: it would be pasted into what bots get.
    let mut bad = Vec::new();
    ingest::encode_parts(
        "MESSAGE_CREATE",
        server,
        general,
        support::intent::GUILD_MESSAGES,
        0,
        0,
        1,
        &[],
        br#"{}, "op": 7, "x": {}"#,
        &mut bad,
    );
    kafka.send(server, &bad);
    // Reserved flag bits.
    bad.clear();
    ingest::encode_parts(
        "MESSAGE_CREATE",
        server,
        general,
        support::intent::GUILD_MESSAGES,
        0,
        0,
        1 << 30,
        &[],
        b"{}",
        &mut bad,
    );
    kafka.send(server, &bad);
    // A valid length prefix around garbage.
    bad.clear();
    bad.extend_from_slice(&16u32.to_le_bytes());
    bad.extend_from_slice(&1u16.to_le_bytes());
    bad.extend_from_slice(&0u16.to_le_bytes());
    bad.extend_from_slice(&[0xAB; 16]);
    kafka.send(server, &bad);
    // A value cut inside its frame.
    let whole = frame_message(server, general, "cut short");
    kafka.send(server, &whole[..whole.len() - 8]);
    // An impossible length: fatal on a TCP stream, here it costs only this message.
    bad.clear();
    bad.extend_from_slice(&u32::MAX.to_le_bytes());
    bad.extend_from_slice(&[0u8; 4]);
    kafka.send(server, &bad);
    for i in 0..40 {
        kafka.send(
            server,
            &frame_message(server, general, &format!("after {i}")),
        );
    }
    kafka.flush();

    let first = s.next_dispatch(FIRST_EVENT);
    assert_eq!(first["t"], "MESSAGE_CREATE");
    assert_eq!(first["d"]["content"], "before");
    let first_s = first["s"].as_u64().unwrap();
    for i in 0..40u64 {
        let v = s.next_dispatch(Duration::from_secs(10));
        assert_eq!(
            v["d"]["content"],
            format!("after {i}"),
            "in order, malformed ones skipped"
        );
        assert_eq!(
            v["s"].as_u64(),
            Some(first_s + 1 + i),
            "no gap in the session's sequence"
        );
    }
    quiet(&mut s, Duration::from_millis(300));
    // bad_d, reserved_flags, malformed (garbage), malformed (cut), too_large.
    assert_eq!(metric(&node, "gatewayd_ingest_rejected_total"), 5.0);
    assert_eq!(metric(&node, "gatewayd_ingest_records_total"), 41.0);

    // And the stream goes on.
    kafka.send(server, &frame_message(server, general, "still flowing"));
    kafka.flush();
    assert_eq!(
        s.next_dispatch(Duration::from_secs(10))["d"]["content"],
        "still flowing"
    );
}

#[test]
#[ignore = "needs a Kafka-protocol broker: run scripts/test-all.sh, or set GATEWAYD_TEST_KAFKA_BROKERS"]
fn a_channel_overwrite_in_the_topic_changes_who_sees_later_events() {
    let brokers = brokers();
    let topic = create_topic(&brokers);
    let node = start_node(&brokers, &topic, &unique("g"));
    let (mut s, server, general) = identify(&node, BOT_INTENTS);
    let kafka = Kafka::new(&brokers, &topic);
    let overwrite = |deny: u64| {
        let d = json!({"id": general.to_string(), "type": 0, "guild_id": server.to_string(), "name": "general", "position": 1,
                       "permission_overwrites": [{"id": server.to_string(), "type": 0, "allow": "0", "deny": deny.to_string()}]});
        let mut out = Vec::new();
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
            &mut out,
        );
        out
    };
    kafka.send(server, &frame_message(server, general, "one"));
    kafka.send(server, &overwrite(proto::permissions::VIEW_CHANNEL)); // @everyone may no longer view #general
    kafka.send(server, &frame_message(server, general, "hidden"));
    kafka.send(server, &overwrite(0)); // and now may again
    kafka.send(server, &frame_message(server, general, "two"));
    kafka.send(server, &frame_message(server, general, "marker"));
    kafka.flush();

    let mut got = Vec::new();
    let mut last_s = None;
    loop {
        let v = s.next_dispatch(if got.is_empty() {
            FIRST_EVENT
        } else {
            Duration::from_secs(10)
        });
        if let Some(prev) = last_s {
            assert_eq!(
                v["s"].as_u64(),
                Some(prev + 1),
                "no gap in the session's sequence"
            );
        }
        last_s = v["s"].as_u64();
        got.push((
            v["t"].as_str().unwrap().to_string(),
            v["d"]["content"].as_str().unwrap_or("").to_string(),
        ));
        if v["d"]["content"] == "marker" {
            break;
        }
    }
    let expect = |t: &str, c: &str| (t.to_string(), c.to_string());
    // The first CHANNEL_UPDATE hid #general, so the bot does not get it nor
    // "hidden"; the second shows it again.
    assert_eq!(
        got,
        vec![
            expect("MESSAGE_CREATE", "one"),
            expect("CHANNEL_UPDATE", ""),
            expect("MESSAGE_CREATE", "two"),
            expect("MESSAGE_CREATE", "marker"),
        ]
    );
    assert_eq!(metric(&node, "gatewayd_ingest_state_changes_total"), 2.0);
    // A new session's GUILD_CREATE carries the channel as the stream left it.
    let (_s2, _, general2) = identify(&node, BOT_INTENTS);
    assert_eq!(general2, general);
}

#[test]
#[ignore = "needs a Kafka-protocol broker: run scripts/test-all.sh, or set GATEWAYD_TEST_KAFKA_BROKERS"]
fn a_direct_message_from_the_topic_reaches_only_the_named_bot() {
    let brokers = brokers();
    let topic = create_topic(&brokers);
    let node = start_node(&brokers, &topic, &unique("g"));
    // DIRECT_MESSAGES and GUILD_MESSAGES, but no MESSAGE_CONTENT.
    let (mut s, _, _) = identify(
        &node,
        support::intent::DIRECT_MESSAGES | support::intent::GUILD_MESSAGES,
    );
    let bot: u64 = s.ready["d"]["user"]["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let kafka = Kafka::new(&brokers, &topic);
    let dm = |to: u64, content: &str| {
        let d = json!({"id": "2", "channel_id": "900", "content": content, "author": {"id": "5", "username": "u"}, "embeds": []});
        let mut out = Vec::new();
        ingest::encode_parts(
            "MESSAGE_CREATE",
            0,
            900,
            support::intent::DIRECT_MESSAGES,
            0,
            0,
            ingest::FLAG_HAS_CONTENT,
            &[to],
            d.to_string().as_bytes(),
            &mut out,
        );
        out
    };
    // Direct messages have server 0: one key, one partition, in order.
    kafka.send(0, &dm(bot + 1, "not for you"));
    kafka.send(0, &dm(bot, "for you"));
    kafka.flush();
    let v = s.next_dispatch(FIRST_EVENT);
    assert_eq!(v["t"], "MESSAGE_CREATE");
    assert_eq!(
        v["d"]["content"], "for you",
        "DMs keep their content without MESSAGE_CONTENT"
    );
    quiet(&mut s, Duration::from_millis(300));
}

#[test]
#[ignore = "needs a Kafka-protocol broker: run scripts/test-all.sh, or set GATEWAYD_TEST_KAFKA_BROKERS"]
fn offsets_are_committed_after_delivery_and_a_restarted_node_goes_on_from_them() {
    let brokers = brokers();
    let topic = create_topic(&brokers);
    let group = unique("g");
    let kafka = Kafka::new(&brokers, &topic);

    let node = start_node(&brokers, &topic, &group);
    let (mut s, server, general) = identify(&node, BOT_INTENTS);
    const N: usize = 30;
    for i in 0..N {
        kafka.send(server, &frame_message(server, general, &format!("r{i}")));
    }
    kafka.flush();
    for i in 0..N {
        let v = s.next_dispatch(if i == 0 {
            FIRST_EVENT
        } else {
            Duration::from_secs(10)
        });
        assert_eq!(v["d"]["content"], format!("r{i}"));
    }
    // Every record was delivered, so every offset gets committed (async, soon).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let c = kafka.committed(&group);
        if c == N as i64 {
            break;
        }
        assert!(c <= N as i64, "committed {c} of {N}");
        assert!(
            Instant::now() < deadline,
            "offsets not committed: {c} of {N} after 10 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // Killed, not drained: the group keeps the dead member until its session
    // times out; the next node takes over then.
    drop(s);
    drop(node);

    let node2 = start_node(&brokers, &topic, &group);
    let (mut s2, server2, general2) = identify(&node2, BOT_INTENTS);
    // One record for the old node's server (another data dir: another
    // server id, so no bot here sees it) and one for this node's.
    kafka.send(
        server,
        &frame_message(server, general, "for the old server"),
    );
    kafka.send(
        server2,
        &frame_message(server2, general2, "after the restart"),
    );
    kafka.flush();
    let v = s2.next_dispatch(FIRST_EVENT);
    assert_eq!(v["d"]["content"], "after the restart");
    quiet(&mut s2, Duration::from_millis(300));
    // Only what came after the committed offsets: not the topic from the start.
    let records = metric(&node2, "gatewayd_ingest_records_total");
    assert_eq!(
        records, 2.0,
        "the restarted node read only the records after the commit"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while kafka.committed(&group) != N as i64 + 2 {
        assert!(
            Instant::now() < deadline,
            "the new records' offsets were not committed"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    // Stopped cleanly (SIGINT: no drain spread), the node leaves its group:
    // the next one gets the partitions at once, not after the session timeout.
    drop(s2);
    let mut node2 = node2;
    // SAFETY: kill(2) of our own child, not yet waited for, so its pid cannot have been reused.
    unsafe { libc::kill(node2.child.id() as i32, libc::SIGINT) };
    assert!(node2.child.wait().unwrap().success());
    let t0 = Instant::now();
    let node3 = start_node(&brokers, &topic, &group);
    let (mut s3, server3, general3) = identify(&node3, BOT_INTENTS);
    kafka.send(
        server3,
        &frame_message(server3, general3, "after a clean stop"),
    );
    kafka.flush();
    let v = s3.next_dispatch(FIRST_EVENT);
    assert_eq!(v["d"]["content"], "after a clean stop");
    let took = t0.elapsed();
    assert!(
        took < Duration::from_secs(5),
        "took {took:?}: the stopped node did not leave its group (session timeout 6 s)"
    );
    assert_eq!(metric(&node3, "gatewayd_ingest_records_total"), 1.0);
}

/// With Kafka ingest, the REST edge's commits go to the topic (not only to
/// the node that took the request), so a bot connected to ANOTHER node sees
/// a message posted through this one, and so does the poster.
#[test]
#[ignore = "needs a Kafka-protocol broker: run scripts/test-all.sh, or set GATEWAYD_TEST_KAFKA_BROKERS"]
fn a_message_posted_through_one_node_reaches_a_bot_on_another() {
    let brokers = brokers();
    let topic = create_topic(&brokers);
    let a = start_node(&brokers, &topic, &unique("a"));
    // A bot and a server of its own (node B's start re-issues the demo
    // bot's token, which it does not have).
    let reg = support::registry::Registry::new(a.dir.path());
    let app = reg.add_app("kafka-rest", support::intent::MESSAGE_CONTENT);
    let (server, general) = reg.add_server("kafka-rest");
    reg.install(app.id, server, None);
    // Node B shares A's registry file (SQLite, two processes), consumes the
    // same topic in its own group.
    let b = start_beside(&a, &brokers, &topic);
    let mut s_a = support::bot::identify(a.gateway, "on-a", &app.token, BOT_INTENTS, None)
        .expect("identify on A");
    let mut s_b = support::bot::identify(b.gateway, "on-b", &app.token, BOT_INTENTS, None)
        .expect("identify on B");
    let post = |content: &str| {
        support::http::json_request(
            a.gateway,
            "POST",
            &format!("/api/v10/channels/{general}/messages"),
            Some(&format!("Bot {}", app.token)),
            Some(&json!({ "content": content })),
        )
    };
    // The consumers join their groups first: post until B sees one.
    let deadline = Instant::now() + FIRST_EVENT;
    let mut posted = Vec::new();
    let seen_on_b = loop {
        assert!(
            Instant::now() < deadline,
            "no REST commit reached node B through the topic"
        );
        let r = post("through the topic");
        assert_eq!(r.status, 200, "{}", r.body);
        posted.push(r.json()["id"].as_str().unwrap().to_string());
        match support::bot::read_next(&mut s_b.ws, Duration::from_secs(3)) {
            Next::Json(v) if v["t"] == "MESSAGE_CREATE" => break v,
            Next::Json(_) | Next::Timeout => {}
            other => panic!("session on B ended: {other:?}"),
        }
    };
    let id = seen_on_b["d"]["id"].as_str().unwrap().to_string();
    assert!(
        posted.contains(&id),
        "B got a message posted through A: {id} in {posted:?}"
    );
    assert_eq!(seen_on_b["d"]["content"], "through the topic");
    // The poster's own node got it from the topic too.
    let until = Instant::now() + Duration::from_secs(20);
    let mut on_a = false;
    while !on_a && Instant::now() < until {
        if let Next::Json(v) = support::bot::read_next(&mut s_a.ws, Duration::from_secs(5)) {
            on_a = v["t"] == "MESSAGE_CREATE" && v["d"]["id"] == id.as_str();
        }
    }
    assert!(
        on_a,
        "the posting node delivered its own commit from the topic"
    );
    assert!(metric(&a, "gatewayd_chat_commits_total") >= 1.0);
}

/// Every node consumes every interaction record; exactly one opens it (its
/// claim in the shared registry lands), so the bot gets one
/// INTERACTION_CREATE however many nodes there are.
#[test]
#[ignore = "needs a Kafka-protocol broker: run scripts/test-all.sh, or set GATEWAYD_TEST_KAFKA_BROKERS"]
fn an_interaction_in_the_topic_is_opened_by_exactly_one_node() {
    let brokers = brokers();
    let topic = create_topic(&brokers);
    let a = start_node(&brokers, &topic, &unique("a"));
    let reg = support::registry::Registry::new(a.dir.path());
    let app = reg.add_app("kafka-slash", 0);
    let (server, general) = reg.add_server("kafka-slash");
    reg.install(app.id, server, None);
    let person = reg.add_member(server, "alice", &[]);
    let r = support::http::json_request(
        a.gateway,
        "PUT",
        &format!("/api/v10/applications/{}/commands", app.id),
        Some(&format!("Bot {}", app.token)),
        Some(&json!([{"name": "ping", "description": "Ping", "type": 1}])),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let b = start_beside(&a, &brokers, &topic);
    // The bot's one session is on A; B consumes the same records.
    let mut s = support::bot::identify(
        a.gateway,
        "on-a",
        &app.token,
        support::intent::GUILDS | support::intent::GUILD_MESSAGES,
        None,
    )
    .expect("identify on A");
    let kafka = Kafka::new(&brokers, &topic);
    // Both consumers joined once both nodes delivered a message from the topic.
    let deadline = Instant::now() + FIRST_EVENT;
    let mut n = 0u64;
    loop {
        assert!(
            Instant::now() < deadline,
            "the nodes never consumed the topic"
        );
        n += 1;
        kafka.send(
            server,
            &frame_message(server, general, &format!("warm-up {n}")),
        );
        let seen = |node: &Node| metric(node, "gatewayd_ingest_records_total") >= 1.0;
        if seen(&a) && seen(&b) {
            break;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let id = 1_200_000_000_000_400_001u64;
    let d = json!({"id": id.to_string(), "type": 2, "user": {"id": person.to_string()},
                   "data": {"name": "ping", "type": 1}});
    let mut frame = Vec::new();
    ingest::encode_parts(
        "INTERACTION_CREATE",
        server,
        general,
        0,
        0,
        1,
        ingest::FLAG_INTERACTION,
        &[app.id],
        &serde_json::to_vec(&d).unwrap(),
        &mut frame,
    );
    kafka.send(server, &frame);
    let mut got = 0;
    let until = Instant::now() + Duration::from_secs(8);
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        match support::bot::read_next(&mut s.ws, left) {
            Next::Json(v) if v["t"] == "INTERACTION_CREATE" => {
                assert_eq!(v["d"]["id"], id.to_string());
                got += 1;
            }
            Next::Json(_) => {}
            Next::Timeout => break,
            other => panic!("session ended: {other:?}"),
        }
    }
    assert_eq!(got, 1, "exactly one node opened the interaction");
    let opened = |node: &Node| metric(node, "gatewayd_interactions_opened_total");
    assert_eq!(opened(&a) + opened(&b), 1.0, "opened on one node only");
}
