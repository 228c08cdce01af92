//! Sessions moving between two real gatewayd nodes that share a real
//! PostgreSQL registry (docs/cluster.md): a Resume that reaches node B for
//! a session node A holds is served by handing the session over, with
//! events in flight; every way it cannot be moved ends in op 9 and leaves
//! exactly one owner. Both nodes consume the same stream: one producer
//! connection per node, fed the same records in the same order (what a
//! broker gives every node's consumer group). Needs
//! GATEWAYD_TEST_DATABASE_URL (`scripts/pg-test-server.sh start`).

mod support;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use std::io::Write;
use std::net::TcpStream;

use support::events::message_event;
use support::metrics::{metric_sum, metrics};
use support::node::Node;
use support::raw::{Msg, Ws};
use support::BOT_INTENTS;

struct Cluster {
    admin_url: String,
    url: String,
    a: Node,
    b: Node,
}

impl Cluster {
    fn start(extra: &[&str]) -> Cluster {
        let (admin_url, url) = support::registry::pg_database();
        let mut flags = vec!["--registry-url", url.as_str(), "--no-demo-traffic"];
        flags.extend_from_slice(extra);
        let a = Node::start(&flags);
        let b = Node::start(&flags);
        assert!(!a.token.is_empty(), "the first node created the demo bot");
        Cluster {
            admin_url,
            url,
            a,
            b,
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // SAFETY: kill(2) of our own child (it may be stopped by a test).
        unsafe { libc::kill(self.a.child.id() as i32, libc::SIGCONT) };
        let _ = self.a.child.kill();
        let _ = self.b.child.kill();
        let _ = self.a.child.wait();
        let _ = self.b.child.wait();
        if let Ok(mut c) = postgres::Client::connect(&self.admin_url, postgres::NoTls) {
            let db = self.url.rsplit('/').next().unwrap_or_default();
            let _ = c.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"));
        }
    }
}

/// A bot session on `node`: (connection, session id, server, channel, seq).
fn login(node: &Node, token: &str) -> (Ws, String, u64, u64) {
    let mut ws = Ws::connect(node.gateway, "/?v=10&encoding=json");
    let ready = ws.login(&format!("Bot {token}"), BOT_INTENTS);
    let gc = ws.read_until(0, Some("GUILD_CREATE"), Duration::from_secs(10));
    let (server, channel) = support::bot::server_and_general(&gc["d"]);
    let sid = ready["d"]["session_id"].as_str().unwrap().to_string();
    (ws, sid, server, channel)
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

/// What a client saw: (s, t, message id) of each dispatch, and whether (and
/// when) op 9 or a close came.
#[derive(Default, Debug)]
struct Seen {
    dispatches: Vec<(u64, String, u64)>,
    invalid_session: bool,
    closed: Option<Msg>,
}

/// Read until `stop(seen)` or `timeout`.
fn read(ws: &mut Ws, timeout: Duration, mut stop: impl FnMut(&Seen) -> bool) -> Seen {
    let deadline = Instant::now() + timeout;
    let mut seen = Seen::default();
    while !stop(&seen) {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match ws.read_message(left) {
            Msg::Text(t) => {
                let v: Value = serde_json::from_str(&t).unwrap();
                match v["op"].as_u64() {
                    Some(0) => {
                        let id = v["d"]["id"]
                            .as_str()
                            .and_then(|i| i.parse().ok())
                            .unwrap_or(0);
                        seen.dispatches.push((
                            v["s"].as_u64().unwrap(),
                            v["t"].as_str().unwrap().to_string(),
                            id,
                        ));
                    }
                    Some(9) => seen.invalid_session = true,
                    _ => {}
                }
            }
            Msg::Timeout => break,
            other => {
                seen.closed = Some(other);
                break;
            }
        }
    }
    seen
}

/// The same records, in the same order, to both nodes' ingest listeners
/// (a node that has stopped, after a drain, is skipped).
struct Feed {
    to: Vec<Option<TcpStream>>,
}

impl Feed {
    fn new(nodes: &[&Node]) -> Feed {
        let to = nodes
            .iter()
            .map(|n| {
                let s = TcpStream::connect(n.ingest).unwrap();
                s.set_nodelay(true).unwrap();
                Some(s)
            })
            .collect();
        Feed { to }
    }

    fn message(&mut self, id: u64, server: u64, channel: u64) {
        let ev = message_event(id, server, channel, &format!("m{id}"), &[]);
        let d = serde_json::to_vec(&ev.d).unwrap();
        let mut buf = Vec::new();
        ingest::encode_parts(
            &ev.t,
            ev.server_id,
            ev.channel_id,
            ev.intent,
            ev.permissions,
            ev.commit_ns,
            ev.flags,
            &ev.mentions,
            &d,
            &mut buf,
        );
        for slot in &mut self.to {
            if slot.as_mut().is_some_and(|s| s.write_all(&buf).is_err()) {
                *slot = None;
            }
        }
    }
}

/// Posts messages 1..=n (ids `base + i`) every `every`, from a thread,
/// until `n` are out; returns the ids.
fn produce(
    nodes: &[&Node],
    server: u64,
    channel: u64,
    base: u64,
    n: u64,
    every: Duration,
) -> (std::thread::JoinHandle<()>, Arc<AtomicBool>) {
    let mut feed = Feed::new(nodes);
    let done = Arc::new(AtomicBool::new(false));
    let flag = done.clone();
    let t = std::thread::spawn(move || {
        for i in 1..=n {
            feed.message(base + i, server, channel);
            std::thread::sleep(every);
        }
        flag.store(true, Ordering::SeqCst);
    });
    (t, done)
}

/// Every message id exactly once and in order, and `s` contiguous, across
/// what the client saw on both connections.
fn assert_whole(before: &Seen, after: &Seen, ids: std::ops::RangeInclusive<u64>) {
    let all: Vec<&(u64, String, u64)> = before.dispatches.iter().chain(&after.dispatches).collect();
    for w in all.windows(2) {
        assert_eq!(
            w[1].0,
            w[0].0 + 1,
            "s must grow by exactly 1: {:?} then {:?}",
            w[0],
            w[1]
        );
    }
    let msgs: Vec<u64> = all
        .iter()
        .filter(|d| d.1 == "MESSAGE_CREATE")
        .map(|d| d.2)
        .collect();
    let want: Vec<u64> = ids.collect();
    let dupes = msgs.len() - msgs.iter().collect::<BTreeSet<_>>().len();
    assert_eq!(dupes, 0, "duplicates across the move");
    let missing: Vec<u64> = want.iter().filter(|i| !msgs.contains(i)).copied().collect();
    assert!(missing.is_empty(), "lost across the move: {missing:?}");
    assert_eq!(msgs, want, "out of order");
}

fn handoffs(node: &Node, name: &str) -> f64 {
    metric_sum(&metrics(node.admin), name, &[])
}

fn refusals(node: &Node, reason: &str) -> f64 {
    metric_sum(
        &metrics(node.admin),
        "gatewayd_resume_refusals_total",
        &[("reason", reason)],
    )
}

#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn a_resume_on_the_other_node_moves_the_session_with_events_in_flight() {
    let c = Cluster::start(&[]);
    let (mut ws, sid, server, channel) = login(&c.a, &c.a.token);
    let (producer, _done) = produce(
        &[&c.a, &c.b],
        server,
        channel,
        1000,
        400,
        Duration::from_millis(2),
    );
    // Read some live events on A, then lose the connection (no Close frame:
    // the session stays resumable) while events keep coming.
    let before = read(&mut ws, Duration::from_secs(20), |s| {
        s.dispatches
            .iter()
            .filter(|d| d.1 == "MESSAGE_CREATE")
            .count()
            >= 60
    });
    let seq = before.dispatches.last().unwrap().0;
    drop(ws);
    std::thread::sleep(Duration::from_millis(100)); // events in flight land on A meanwhile
    let mut on_b = resume(&c.b, &c.a.token, &sid, seq);
    let after = read(&mut on_b, Duration::from_secs(30), |s| {
        s.dispatches.iter().any(|d| d.2 == 1400)
    });
    producer.join().unwrap();
    assert!(
        !after.invalid_session,
        "op 9 instead of a hand-off: {after:?}"
    );
    assert!(
        after.dispatches.iter().any(|d| d.1 == "RESUMED"),
        "no RESUMED on B"
    );
    // RESUMED takes an s of its own, after the replay.
    assert_whole(&before, &after, 1001..=1400);
    assert_eq!(handoffs(&c.a, "gatewayd_handoffs_out_total"), 1.0);
    assert_eq!(handoffs(&c.b, "gatewayd_handoffs_in_total"), 1.0);
    assert_eq!(
        handoffs(&c.b, "gatewayd_identifies_total"),
        0.0,
        "no re-identify"
    );
    // The session is B's now: A no longer holds it, so a Resume at A asks
    // the other nodes and moves it back from B, which lets go (one owner at
    // any time; a restarted node reclaims its predecessor's number, so a
    // Resume naming this node may be for a session elsewhere).
    let mut on_a = resume(&c.a, &c.a.token, &sid, seq);
    let resumed = |s: &Seen| s.dispatches.iter().any(|d| d.1 == "RESUMED");
    let r = read(&mut on_a, Duration::from_secs(5), |s| {
        s.invalid_session || resumed(s)
    });
    assert!(
        !r.invalid_session && resumed(&r),
        "A must take the session back from B: {r:?}"
    );
    assert_eq!(handoffs(&c.b, "gatewayd_handoffs_out_total"), 1.0);
    assert_eq!(handoffs(&c.a, "gatewayd_handoffs_in_total"), 1.0);
}

#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn another_bots_token_gets_op_9_and_the_session_stays_with_its_node() {
    let c = Cluster::start(&[]);
    let other =
        support::registry::Registry::with_url(c.a.dir.path(), Some(&c.url)).add_app("intruder", 0);
    let (ws, sid, server, channel) = login(&c.a, &c.a.token);
    let seq = ws.seq.unwrap();
    drop(ws);
    let mut thief = resume(&c.b, &other.token, &sid, seq);
    let r = read(&mut thief, Duration::from_secs(5), |s| s.invalid_session);
    assert!(r.invalid_session && r.dispatches.is_empty(), "{r:?}");
    assert_eq!(refusals(&c.b, "token_mismatch"), 1.0);
    // Nothing reaches the wrong bot later either.
    Feed::new(&[&c.a, &c.b]).message(77, server, channel);
    let later = read(&mut thief, Duration::from_millis(500), |_| false);
    assert!(later.dispatches.is_empty(), "{later:?}");
    // The owner resumes on A, untouched, and gets the event.
    let mut owner = resume(&c.a, &c.a.token, &sid, seq);
    let r = read(&mut owner, Duration::from_secs(5), |s| {
        s.dispatches.iter().any(|d| d.1 == "RESUMED")
    });
    assert!(r.dispatches.iter().any(|d| d.1 == "RESUMED"), "{r:?}");
    assert!(r.dispatches.iter().any(|d| d.2 == 77), "{r:?}");
    assert_eq!(handoffs(&c.a, "gatewayd_handoffs_out_total"), 0.0);
}

#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn a_frozen_holder_means_op_9_within_the_deadline() {
    let c = Cluster::start(&["--cluster-handoff-timeout-ms", "800"]);
    let (ws, sid, _, _) = login(&c.a, &c.a.token);
    let seq = ws.seq.unwrap();
    drop(ws);
    // SAFETY: kill(2) of our own child; Cluster's drop continues it.
    unsafe { libc::kill(c.a.child.id() as i32, libc::SIGSTOP) };
    let t0 = Instant::now();
    let mut on_b = resume(&c.b, &c.a.token, &sid, seq);
    let r = read(&mut on_b, Duration::from_secs(10), |s| s.invalid_session);
    let took = t0.elapsed();
    // SAFETY: as above.
    unsafe { libc::kill(c.a.child.id() as i32, libc::SIGCONT) };
    assert!(r.invalid_session, "{r:?}");
    assert!(took < Duration::from_millis(2500), "op 9 took {took:?}");
    assert!(
        took >= Duration::from_millis(700),
        "op 9 before the deadline: {took:?}"
    );
    assert_eq!(refusals(&c.b, "node_unreachable"), 1.0);
    // A, awake again, still holds it (it never answered, so never let go).
    let mut on_a = resume(&c.a, &c.a.token, &sid, seq);
    let r = read(&mut on_a, Duration::from_secs(5), |s| {
        !s.dispatches.is_empty()
    });
    assert!(r.dispatches.iter().any(|d| d.1 == "RESUMED"), "{r:?}");
}

#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn forged_session_ids_get_op_9_and_nothing_else() {
    let c = Cluster::start(&[]);
    let (ws, sid, server, channel) = login(&c.a, &c.a.token);
    let seq = ws.seq.unwrap();
    // Same node and worker, other random bits: A knows no such session.
    let mut forged = sid.clone();
    let last = if forged.ends_with('0') { "1" } else { "0" };
    forged.replace_range(31..32, last);
    // A node number nobody holds; a worker number node A does not have.
    let nobody = format!("{}fff0{}", &sid[..2], &sid[6..]);
    let bad_worker = format!("ff{}", &sid[2..]);
    for (i, id) in [forged, nobody, bad_worker].iter().enumerate() {
        let mut w = resume(&c.b, &c.a.token, id, seq);
        let r = read(&mut w, Duration::from_secs(5), |s| s.invalid_session);
        assert!(
            r.invalid_session && r.dispatches.is_empty(),
            "forgery {i}: {r:?}"
        );
        Feed::new(&[&c.a, &c.b]).message(500 + i as u64, server, channel);
        let later = read(&mut w, Duration::from_millis(300), |_| false);
        assert!(later.dispatches.is_empty(), "forgery {i} got {later:?}");
    }
    assert_eq!(handoffs(&c.a, "gatewayd_handoffs_out_total"), 0.0);
    drop(ws);
}

#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn two_clients_racing_to_resume_one_session_leave_exactly_one_owner() {
    let c = Cluster::start(&[]);
    for round in 0..3u64 {
        let (ws, sid, server, channel) = login(&c.a, &c.a.token);
        let seq = ws.seq.unwrap();
        drop(ws);
        // One on B (a hand-off), one on A (local) at the same moment; then
        // two on B at once.
        let targets: [&Node; 2] = if round == 2 {
            [&c.b, &c.b]
        } else {
            [&c.b, &c.a]
        };
        let token = c.a.token.clone();
        let racers: Vec<_> = targets
            .iter()
            .map(|n| {
                let (addr, token, sid) = (n.gateway, token.clone(), sid.clone());
                std::thread::spawn(move || {
                    let mut ws = Ws::connect(addr, "/?v=10&encoding=json");
                    ws.expect_hello();
                    ws.send_json(&json!({"op": 6, "d": {"token": format!("Bot {token}"), "session_id": sid, "seq": seq}}))
                        .unwrap();
                    ws
                })
            })
            .collect();
        let mut conns: Vec<Ws> = racers.into_iter().map(|t| t.join().unwrap()).collect();
        std::thread::sleep(Duration::from_millis(500));
        Feed::new(&[&c.a, &c.b]).message(9000 + round, server, channel);
        let seen: Vec<Seen> = conns
            .iter_mut()
            .map(|w| {
                read(w, Duration::from_secs(3), |s| {
                    s.dispatches.iter().any(|d| d.2 == 9000 + round) || s.closed.is_some()
                })
            })
            .collect();
        let owners = seen
            .iter()
            .filter(|s| s.dispatches.iter().any(|d| d.2 == 9000 + round))
            .count();
        assert_eq!(
            owners, 1,
            "round {round}: exactly one connection gets the live event: {seen:?}"
        );
        for s in &seen {
            let got = s.dispatches.iter().any(|d| d.2 == 9000 + round);
            assert!(
                got || s.invalid_session || s.closed.is_some(),
                "round {round}: the loser is told (op 9 or a close): {s:?}"
            );
        }
    }
}

#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn a_bot_drained_off_one_node_resumes_on_the_other_without_a_gap() {
    let c = Cluster::start(&["--drain-spread-ms", "300"]);
    let (mut ws, sid, server, channel) = login(&c.a, &c.a.token);
    let (producer, _done) = produce(
        &[&c.a, &c.b],
        server,
        channel,
        5000,
        500,
        Duration::from_millis(2),
    );
    let warm = read(&mut ws, Duration::from_secs(20), |s| {
        s.dispatches
            .iter()
            .filter(|d| d.1 == "MESSAGE_CREATE")
            .count()
            >= 30
    });
    let (status, _) = support::http::http_request(c.a.admin, "POST", "/drain", &[]).unwrap();
    assert_eq!(status, 202);
    // Until op 7, events keep coming on A; then the bot reconnects (through
    // the load balancer: here, to B) and resumes from what it has.
    let mut before = warm;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(Instant::now() < deadline, "no op 7 from the draining node");
        match ws.read_message(Duration::from_secs(5)) {
            Msg::Text(t) => {
                let v: Value = serde_json::from_str(&t).unwrap();
                if v["op"] == 7 {
                    break;
                }
                if v["op"] == 0 {
                    let id = v["d"]["id"]
                        .as_str()
                        .and_then(|i| i.parse().ok())
                        .unwrap_or(0);
                    before.dispatches.push((
                        v["s"].as_u64().unwrap(),
                        v["t"].as_str().unwrap().into(),
                        id,
                    ));
                }
            }
            other => panic!("drain: {other:?}"),
        }
    }
    drop(ws);
    let seq = before.dispatches.last().unwrap().0;
    let mut on_b = resume(&c.b, &c.a.token, &sid, seq);
    let after = read(&mut on_b, Duration::from_secs(30), |s| {
        s.dispatches.iter().any(|d| d.2 == 5500)
    });
    producer.join().unwrap();
    let reasons: Vec<(String, f64)> = [
        "unknown_session",
        "node_unreachable",
        "stream_cut",
        "no_room",
        "seq_not_held",
        "events_lost",
    ]
    .iter()
    .map(|r| (r.to_string(), refusals(&c.b, r)))
    .collect();
    assert!(
        !after.invalid_session,
        "op 9 after the drain ({reasons:?}): {after:?}"
    );
    assert!(after.dispatches.iter().any(|d| d.1 == "RESUMED"));
    assert_whole(&before, &after, 5001..=5500);
    assert_eq!(
        handoffs(&c.b, "gatewayd_identifies_total"),
        0.0,
        "no re-identify"
    );
    assert_eq!(handoffs(&c.b, "gatewayd_handoffs_in_total"), 1.0);
}

#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn a_session_moves_twice_and_is_found_after_its_first_node_died() {
    let mut c = Cluster::start(&[]);
    let flags = ["--registry-url", c.url.as_str(), "--no-demo-traffic"];
    let third = Node::start(&flags);
    let (ws, sid, server, channel) = login(&c.a, &c.a.token);
    let seq = ws.seq.unwrap();
    drop(ws);
    let mut feed = Feed::new(&[&c.a, &c.b, &third]);
    feed.message(1, server, channel);
    // A to B.
    let mut on_b = resume(&c.b, &c.a.token, &sid, seq);
    // Message 1 comes in the replay, the catch-up or live after RESUMED:
    // whichever node had taken it, exactly once.
    let first = read(&mut on_b, Duration::from_secs(5), |s| {
        s.dispatches.iter().any(|d| d.1 == "RESUMED") && s.dispatches.iter().any(|d| d.2 == 1)
    });
    assert!(
        first.dispatches.iter().any(|d| d.1 == "RESUMED"),
        "{first:?}"
    );
    assert_eq!(
        first.dispatches.iter().filter(|d| d.2 == 1).count(),
        1,
        "{first:?}"
    );
    feed.message(2, server, channel);
    let live = read(&mut on_b, Duration::from_secs(5), |s| {
        s.dispatches.iter().any(|d| d.2 == 2)
    });
    let seq = live.dispatches.last().expect("message 2 on B").0;
    drop(on_b);
    // The node that created the session dies; its id still names it.
    let _ = c.a.child.kill();
    let _ = c.a.child.wait();
    feed.message(3, server, channel);
    // B to the third node, found by asking the live nodes.
    let mut on_c = resume(&third, &c.a.token, &sid, seq);
    let second = read(&mut on_c, Duration::from_secs(5), |s| {
        s.dispatches.iter().any(|d| d.1 == "RESUMED") && s.dispatches.iter().any(|d| d.2 == 3)
    });
    assert!(!second.invalid_session, "{second:?}");
    let ids: Vec<u64> = second
        .dispatches
        .iter()
        .filter(|d| d.1 == "MESSAGE_CREATE")
        .map(|d| d.2)
        .collect();
    assert_eq!(
        ids,
        vec![3],
        "exactly what the client had not seen: {second:?}"
    );
    assert_eq!(handoffs(&c.b, "gatewayd_handoffs_out_total"), 1.0);
    assert_eq!(handoffs(&third, "gatewayd_handoffs_in_total"), 1.0);
}

#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn a_revocation_the_holder_had_not_applied_reaches_the_moved_session() {
    let (admin_url, url) = support::registry::pg_database();
    // A applies no pushed revocations at all (only its leases would end
    // them); B applies them at once.
    let a = Node::start(&[
        "--registry-url",
        url.as_str(),
        "--no-demo-traffic",
        "--revocation-poll-ms",
        "0",
    ]);
    let b = Node::start(&["--registry-url", url.as_str(), "--no-demo-traffic"]);
    let c = Cluster {
        admin_url,
        url,
        a,
        b,
    };
    let reg = support::registry::Registry::with_url(c.a.dir.path(), Some(&c.url));
    let (ws, _, _, _) = login(&c.a, &c.a.token);
    let app = {
        let mut probe = Ws::connect(c.a.gateway, "/?v=10&encoding=json");
        let ready = probe.login(&format!("Bot {}", c.a.token), BOT_INTENTS);
        ready["d"]["application"]["id"]
            .as_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    drop(ws);
    let (other, other_general) = reg.add_server("Revoked Later");
    reg.install(app, other, None);
    let (mut ws, sid, server, channel) = login(&c.a, &c.a.token);
    let mut feed = Feed::new(&[&c.a, &c.b]);
    feed.message(1, other, other_general);
    let r = read(&mut ws, Duration::from_secs(5), |s| {
        s.dispatches.iter().any(|d| d.2 == 1)
    });
    assert!(
        r.dispatches.iter().any(|d| d.2 == 1),
        "installed in the second server: {r:?}"
    );
    let seq = r.dispatches.last().unwrap().0;
    drop(ws);
    reg.uninstall(app, other);
    std::thread::sleep(Duration::from_millis(500)); // B applied it; A never will
    let mut on_b = resume(&c.b, &c.a.token, &sid, seq);
    let r = read(&mut on_b, Duration::from_secs(5), |s| {
        s.dispatches.iter().any(|d| d.1 == "RESUMED")
    });
    assert!(r.dispatches.iter().any(|d| d.1 == "RESUMED"), "{r:?}");
    feed.message(2, other, other_general);
    feed.message(3, server, channel);
    let r = read(&mut on_b, Duration::from_secs(5), |s| {
        s.dispatches.iter().any(|d| d.2 == 3)
    });
    assert!(
        r.dispatches.iter().any(|d| d.2 == 3),
        "the server it is still in: {r:?}"
    );
    assert!(
        !r.dispatches.iter().any(|d| d.2 == 2),
        "an event of the server it was uninstalled from reached the moved session: {r:?}"
    );
}

#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn a_full_taker_refuses_with_op_9_and_the_session_stays_with_its_node() {
    let (admin_url, url) = support::registry::pg_database();
    let a = Node::start(&["--registry-url", url.as_str(), "--no-demo-traffic"]);
    let b = Node::start(&[
        "--registry-url",
        url.as_str(),
        "--no-demo-traffic",
        "--workers",
        "1",
        "--max-sessions-per-worker",
        "1",
    ]);
    let c = Cluster {
        admin_url,
        url,
        a,
        b,
    };
    let (ws, sid, _, _) = login(&c.a, &c.a.token);
    let seq = ws.seq.unwrap();
    drop(ws);
    // B's one worker holds its one session.
    let (_occupant, _, _, _) = login(&c.b, &c.a.token);
    let mut on_b = resume(&c.b, &c.a.token, &sid, seq);
    let r = read(&mut on_b, Duration::from_secs(5), |s| s.invalid_session);
    assert!(r.invalid_session && r.dispatches.is_empty(), "{r:?}");
    assert_eq!(refusals(&c.b, "no_room"), 1.0);
    assert_eq!(handoffs(&c.a, "gatewayd_handoffs_out_total"), 0.0);
    let mut on_a = resume(&c.a, &c.a.token, &sid, seq);
    let r = read(&mut on_a, Duration::from_secs(5), |s| {
        !s.dispatches.is_empty()
    });
    assert!(
        r.dispatches.iter().any(|d| d.1 == "RESUMED"),
        "still A's: {r:?}"
    );
}
