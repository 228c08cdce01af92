//! Crash recovery (docs/cluster.md, "Crash recovery"): two or three real
//! nodes on one real PostgreSQL registry, one real Redis (the session
//! store, owned by each test so it can be frozen), one multi-partition
//! topic on a real Kafka-protocol broker. A node is killed with SIGKILL (or
//! frozen with SIGSTOP) while it delivers; its bot resumes on a survivor,
//! which rebuilds the session from Redis and the topic.
//! Needs GATEWAYD_TEST_DATABASE_URL, GATEWAYD_TEST_KAFKA_BROKERS and
//! GATEWAYD_TEST_REDIS_SERVER.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::events::frame_message_with_id;
use support::kafka::{brokers, create_topic, unique, Kafka};
use support::metrics::{metric_sum, metrics};
use support::node::Node;
use support::raw::{Msg, Ws};
use support::registry::Registry;
use support::services::{RedisServer, Server};
use support::BOT_INTENTS;

const SERVERS: usize = 6;
const NEEDS: &str = "needs PostgreSQL, a Kafka-protocol broker and redis-server: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL, GATEWAYD_TEST_KAFKA_BROKERS and GATEWAYD_TEST_REDIS_SERVER";

/// Short clocks so a crash is provable in 2 s.
const CONFIG: &str = "[cluster]\nheartbeat_ms = 400\nnode_ttl_ms = 2000\n\n[recovery]\ncheckpoint_ms = 300\nresume_timeout_ms = 9000\n";

struct World {
    admin_url: String,
    url: String,
    brokers: String,
    topic: String,
    redis: RedisServer,
    config: tempfile::NamedTempFile,
    nodes: Vec<Node>,
}

impl World {
    fn new(nodes: usize) -> World {
        let brokers = brokers();
        let topic = create_topic(&brokers);
        let (admin_url, url) = support::registry::pg_database();
        let redis = RedisServer::start();
        let mut config = tempfile::NamedTempFile::new().unwrap();
        config.write_all(CONFIG.as_bytes()).unwrap();
        let mut w = World {
            admin_url,
            url,
            brokers,
            topic,
            redis,
            config,
            nodes: Vec::new(),
        };
        for _ in 0..nodes {
            let n = w.start_node();
            w.nodes.push(n);
        }
        w
    }

    fn start_node(&self) -> Node {
        let config = self.config.path().to_str().unwrap().to_string();
        Node::start(&[
            "--config",
            &config,
            "--registry-url",
            &self.url,
            "--no-demo",
            "--kafka-brokers",
            &self.brokers,
            "--kafka-topic",
            &self.topic,
            "--kafka-group",
            &unique("recovery"),
            "--kafka-session-timeout-ms",
            "6000",
            "--recovery-redis-url",
            &self.redis.url(),
        ])
    }

    fn token(&self) -> String {
        self.nodes[0].token.clone()
    }

    /// The demo bot installed in `SERVERS` servers (spread over the
    /// partitions), one message per server delivered to every node first.
    fn servers(&self) -> Vec<(u64, u64)> {
        let a = &self.nodes[0];
        let reg = Registry::with_url(a.dir.path(), Some(&self.url));
        let app_id = {
            let mut probe = Ws::connect(a.gateway, "/?v=10&encoding=json");
            let ready = probe.login(&format!("Bot {}", a.token), BOT_INTENTS);
            ready["d"]["application"]["id"]
                .as_str()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        };
        let mut targets = Vec::new();
        for i in 0..SERVERS {
            let (server, general) = reg.add_server(&format!("recovery-{i}"));
            reg.install(app_id, server, None);
            targets.push((server, general));
        }
        // Every partition has records and every node has taken them (a
        // worker's checkpoint then names every partition).
        let kafka = Kafka::new(&self.brokers, &self.topic);
        for (i, &(server, general)) in targets.iter().enumerate() {
            kafka.send(
                server,
                &frame_message_with_id(i as u64 + 1, server, general, "warm"),
            );
        }
        kafka.flush();
        let deadline = Instant::now() + Duration::from_secs(60);
        for n in &self.nodes {
            while metric_sum(&metrics(n.admin), "gatewayd_events_in_total", &[])
                < (SERVERS * 2) as f64
            {
                assert!(Instant::now() < deadline, "a node's consumer did not start");
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        targets
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            // SAFETY: kill(2) of our own child (a test may have stopped it).
            unsafe { libc::kill(n.child.id() as i32, libc::SIGCONT) };
            let _ = n.child.kill();
            let _ = n.child.wait();
        }
        if let Ok(mut c) = postgres::Client::connect(&self.admin_url, postgres::NoTls) {
            let db = self.url.rsplit('/').next().unwrap_or_default();
            let _ = c.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"));
        }
    }
}

/// Every dispatch as received: s -> (t, the frame's text), and op 9s.
#[derive(Default, Debug)]
struct Seen {
    frames: BTreeMap<u64, (String, String)>,
    order: Vec<u64>,
    /// (s, message id) of each MESSAGE_CREATE.
    messages: Vec<(u64, u64)>,
    resumed: bool,
    invalid: bool,
    closed: Option<String>,
}

fn read(ws: &mut Ws, until: Instant, mut done: impl FnMut(&Seen) -> bool, seen: &mut Seen) {
    while !done(seen) {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        match ws.read_message(left) {
            Msg::Text(t) => {
                let v: Value = serde_json::from_str(&t).unwrap();
                match v["op"].as_u64() {
                    Some(0) => {
                        let s = v["s"].as_u64().unwrap();
                        let kind = v["t"].as_str().unwrap().to_string();
                        if kind == "RESUMED" {
                            seen.resumed = true;
                        }
                        if kind == "MESSAGE_CREATE" {
                            let id = v["d"]["id"].as_str().unwrap().parse().unwrap();
                            seen.messages.push((s, id));
                        }
                        seen.order.push(s);
                        seen.frames.insert(s, (kind, t));
                    }
                    Some(9) => seen.invalid = true,
                    _ => {}
                }
            }
            Msg::Timeout => return,
            other => {
                seen.closed = Some(format!("{other:?}"));
                return;
            }
        }
    }
}

fn resume(node: &Node, token: &str, sid: &str, seq: u64) -> Ws {
    let mut ws = Ws::connect(node.gateway, "/?v=10&encoding=json");
    ws.expect_hello();
    ws.send_json(
        &json!({"op": 6, "d": {"token": format!("Bot {token}"), "session_id": sid, "seq": seq}}),
    )
    .unwrap();
    ws
}

fn refusals(node: &Node, reason: &str) -> f64 {
    metric_sum(
        &metrics(node.admin),
        "gatewayd_resume_refusals_total",
        &[("reason", reason)],
    )
}

fn all_refusals(node: &Node) -> Vec<(String, f64)> {
    let m = metrics(node.admin);
    [
        "node_unreachable",
        "stream_cut",
        "no_room",
        "unknown_session",
        "token_mismatch",
        "recovery_no_summary",
        "recovery_unproven",
        "recovery_store_down",
        "recovery_retention",
    ]
    .iter()
    .map(|r| {
        (
            r.to_string(),
            metric_sum(&m, "gatewayd_resume_refusals_total", &[("reason", r)]),
        )
    })
    .collect()
}

/// A producer sending `n` messages round-robin over the servers, one every
/// `gap`, ids from `first`.
fn produce(
    w: &World,
    targets: &[(u64, u64)],
    first: u64,
    n: u64,
    gap: Duration,
) -> std::thread::JoinHandle<()> {
    let (brokers, topic, targets) = (w.brokers.clone(), w.topic.clone(), targets.to_vec());
    std::thread::spawn(move || {
        let kafka = Kafka::new(&brokers, &topic);
        for id in first..first + n {
            let (server, general) = targets[(id as usize) % targets.len()];
            kafka.send(server, &frame_message_with_id(id, server, general, "m"));
            std::thread::sleep(gap);
        }
        kafka.flush();
    })
}

fn kill9(node: &mut Node) {
    let _ = node.child.kill();
    let _ = node.child.wait();
}

#[test]
#[ignore = "needs PostgreSQL, a Kafka-protocol broker and redis-server: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL, GATEWAYD_TEST_KAFKA_BROKERS and GATEWAYD_TEST_REDIS_SERVER"]
fn a_crashed_nodes_session_resumes_on_a_survivor_byte_for_byte() {
    let _ = NEEDS;
    let mut w = World::new(2);
    let targets = w.servers();
    let token = w.token();
    let mut ws = Ws::connect(w.nodes[0].gateway, "/?v=10&encoding=json");
    let ready = ws.login(&format!("Bot {token}"), BOT_INTENTS);
    let sid = ready["d"]["session_id"].as_str().unwrap().to_string();
    let mut on_a = Seen::default();
    read(
        &mut ws,
        Instant::now() + Duration::from_secs(5),
        |s| s.frames.len() >= SERVERS,
        &mut on_a,
    );
    // A checkpoint holds the session before the traffic starts (and the
    // setup's changes are older than what a survivor looks back for).
    std::thread::sleep(Duration::from_millis(2500));
    const N: u64 = 900;
    let producer = produce(&w, &targets, 100, N, Duration::from_millis(3));
    read(
        &mut ws,
        Instant::now() + Duration::from_secs(30),
        |s| s.messages.len() >= 300,
        &mut on_a,
    );
    assert!(on_a.messages.len() >= 300, "A delivered: {on_a:?}");
    kill9(&mut w.nodes[0]);
    // Keep reading what A had already put on the wire.
    read(
        &mut ws,
        Instant::now() + Duration::from_millis(300),
        |_| false,
        &mut on_a,
    );
    let last_on_a = *on_a.order.last().unwrap();
    // Resume from earlier than the last received: the survivor must replay
    // events the dead node had already sent, byte for byte.
    let seq = last_on_a - 25;
    let started = Instant::now();
    let mut on_b_ws = resume(&w.nodes[1], &token, &sid, seq);
    let mut on_b = Seen::default();
    let last_id = 100 + N - 1;
    read(
        &mut on_b_ws,
        Instant::now() + Duration::from_secs(40),
        |s| s.invalid || s.closed.is_some() || s.messages.iter().any(|m| m.1 == last_id),
        &mut on_b,
    );
    producer.join().unwrap();
    read(
        &mut on_b_ws,
        Instant::now() + Duration::from_secs(2),
        |_| false,
        &mut on_b,
    );
    let b = &w.nodes[1];
    assert!(
        on_b.resumed && !on_b.invalid,
        "no recovery (refusals on B: {:?}): {:?}",
        all_refusals(b),
        on_b.order.first()
    );
    eprintln!("recovered after {:?}", started.elapsed());
    // The replay is byte-identical to what A had sent for those seqs.
    let mut compared = 0;
    for s in seq + 1..=last_on_a {
        let a_frame = &on_a.frames[&s];
        let b_frame = on_b
            .frames
            .get(&s)
            .unwrap_or_else(|| panic!("s={s} not replayed"));
        assert_eq!(
            a_frame, b_frame,
            "s={s} differs from what the dead node sent"
        );
        compared += 1;
    }
    assert_eq!(compared, 25);
    // Contiguous s from the client's seq on, across the join.
    let mut expect = seq + 1;
    for s in &on_b.order {
        assert_eq!(*s, expect, "s must grow by exactly 1: {:?}", on_b.order);
        expect += 1;
    }
    // Every message exactly once, in per-server order.
    let ids: Vec<u64> = on_a
        .messages
        .iter()
        .filter(|m| m.0 <= seq)
        .chain(&on_b.messages)
        .map(|m| m.1)
        .collect();
    let set: BTreeSet<u64> = ids.iter().copied().collect();
    assert_eq!(set.len(), ids.len(), "duplicates across the recovery");
    let want: BTreeSet<u64> = (1..=SERVERS as u64).chain(100..100 + N).collect();
    let missing: Vec<&u64> = want.difference(&set).collect();
    assert!(
        missing.is_empty(),
        "lost across the recovery: {} ids, first {:?}",
        missing.len(),
        missing.first()
    );
    let mut per_server: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    for id in ids.iter().filter(|i| **i >= 100) {
        per_server
            .entry(*id as usize % SERVERS)
            .or_default()
            .push(*id);
    }
    for (server, list) in per_server {
        assert!(
            list.windows(2).all(|w| w[0] < w[1]),
            "server {server} out of order"
        );
    }
    assert_eq!(
        metric_sum(&metrics(b.admin), "gatewayd_recovery_recovered_total", &[]),
        1.0
    );
}
