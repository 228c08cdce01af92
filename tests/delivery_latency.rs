//! Delivery latency and the reconnect-time distribution (issue 42) against
//! a real node and real WebSocket bots: every delivery is in every stage's
//! histogram exactly once (`_count` of each == `gatewayd_deliveries_total`),
//! the replay after a Resume is not timed again, a Resume lands in
//! `gatewayd_reconnect_seconds` with its time away, a Resume after the
//! window is counted with what a longer window would have done, and the
//! portal shows the minute's deliveries. What the figures are is the
//! benchmarks' business (docs/bench/side-by-side.md); here, that they count
//! what happened.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::bot::{self, recv, send_json, Session};
use support::events::{message_event, Producer};
use support::metrics::{metric_sum, metrics, Samples};
use support::node::Node;
use support::BOT_INTENTS;

const STAGES: [&str; 4] = [
    "commit_to_read",
    "read_to_inbox",
    "inbox_to_submit",
    "submit_to_sent",
];

fn stage_count(s: &Samples, stage: &str) -> f64 {
    metric_sum(
        s,
        "gatewayd_delivery_stage_seconds_count",
        &[("stage", stage)],
    )
}

/// Scrape until `ok` holds (10 s), returning the last scrape either way.
fn scrape_until(node: &Node, ok: impl Fn(&Samples) -> bool) -> Samples {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = metrics(node.admin);
        if ok(&s) || Instant::now() > deadline {
            return s;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn every_stage_counts(s: &Samples, deliveries: f64) -> bool {
    STAGES.iter().all(|st| stage_count(s, st) == deliveries)
        && metric_sum(s, "gatewayd_delivery_seconds_count", &[]) == deliveries
}

/// The server and #general of the node's demo bot.
fn server_of(s: &Session) -> (u64, u64) {
    bot::server_and_general(&s.guild_creates[0])
}

/// Reads MESSAGE_CREATEs until `n` came (20 s); returns their seqs.
fn messages(ws: &mut bot::Ws, n: usize) -> Vec<u64> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seqs = Vec::new();
    while seqs.len() < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} messages",
            seqs.len()
        );
        let v = recv(ws);
        if v["t"] == "MESSAGE_CREATE" {
            seqs.push(v["s"].as_u64().unwrap());
        }
    }
    seqs
}

fn send_messages(node: &Node, server: u64, channel: u64, from: u64, n: u64) {
    let mut p = Producer::connect(node.ingest);
    for i in from..from + n {
        p.send(&message_event(i, server, channel, &format!("m{i}"), &[]));
    }
}

#[test]
fn every_delivery_is_in_every_stage_once_and_in_the_portal() {
    let node = Node::start(&["--no-demo-traffic", "--workers", "2"]);
    let mut bots: Vec<Session> = (0..6)
        .map(|i| {
            bot::identify(
                node.gateway,
                &format!("b{i}"),
                &node.token,
                BOT_INTENTS,
                None,
            )
            .expect("identify")
        })
        .collect();
    let (server, channel) = server_of(&bots[0]);
    const N: usize = 60;
    send_messages(&node, server, channel, 1, N as u64);
    for b in &mut bots {
        assert_eq!(messages(&mut b.ws, N).len(), N);
    }
    let want = (N * bots.len()) as f64;
    let s = scrape_until(&node, |s| every_stage_counts(s, want));
    assert_eq!(metric_sum(&s, "gatewayd_deliveries_total", &[]), want);
    for st in STAGES {
        assert_eq!(
            stage_count(&s, st),
            want,
            "stage {st} counts every delivery once"
        );
    }
    assert_eq!(metric_sum(&s, "gatewayd_delivery_seconds_count", &[]), want);
    assert!(metric_sum(&s, "gatewayd_delivery_seconds_sum", &[]) > 0.0);
    // Both workers had sessions, and each counts its own.
    let per_worker: Vec<f64> = ["0", "1"]
        .iter()
        .map(|w| metric_sum(&s, "gatewayd_delivery_seconds_count", &[("worker", w)]))
        .collect();
    assert_eq!(per_worker.iter().sum::<f64>(), want, "{per_worker:?}");
    // The READY and GUILD_CREATEs the node made are not deliveries.
    assert_eq!(metric_sum(&s, "gatewayd_delivery_resent_total", &[]), 0.0);

    // The portal's page shows the node's deliveries per minute.
    let addr = support::portal::addr(&node);
    let me = support::portal::sign_in(addr, &node.token).expect("sign in");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let h = me.get("/api/health").json();
        let minutes = h["delivery_minutes"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let total: u64 = minutes
            .iter()
            .map(|m| m["deliveries"].as_u64().unwrap())
            .sum();
        if total == want as u64 {
            assert!(
                minutes.iter().all(|m| m["p99_ms"].as_f64().is_some()),
                "{minutes:?}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the portal shows {total} of {want} deliveries: {minutes:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let page = me.get("/");
    assert!(
        page.body.contains("chart-delivery"),
        "the delivery chart is on the page"
    );
}

/// Resume `sid` from `seq` on a new connection; returns it after RESUMED.
fn resume(node: &Node, sid: &str, seq: u64) -> bot::Ws {
    let mut ws = bot::connect(node.gateway);
    assert_eq!(recv(&mut ws)["op"], 10);
    send_json(
        &mut ws,
        &json!({"op": 6, "d": {"token": format!("Bot {}", node.token), "session_id": sid, "seq": seq}}),
    );
    ws
}

#[test]
fn a_resume_is_in_the_reconnect_histogram_and_its_replay_is_not_timed_again() {
    let node = Node::start(&["--no-demo-traffic", "--workers", "1"]);
    let mut b = bot::identify(node.gateway, "away", &node.token, BOT_INTENTS, None).unwrap();
    let (server, channel) = server_of(&b);
    send_messages(&node, server, channel, 1, 5);
    let seqs = messages(&mut b.ws, 5);
    let sid = b.session_id.clone();
    // Away without a close frame; the node sees the connection go.
    drop(b.ws);
    let s = scrape_until(&node, |s| {
        metric_sum(s, "gatewayd_sessions_detached", &[]) == 1.0
    });
    assert_eq!(metric_sum(&s, "gatewayd_sessions_detached", &[]), 1.0);
    let away = Duration::from_millis(600);
    std::thread::sleep(away);
    // Five more while it is away, then a Resume from two before the last
    // it saw: those two are sent again (not timed again), the five for the
    // first time.
    send_messages(&node, server, channel, 6, 5);
    scrape_until(&node, |s| {
        metric_sum(s, "gatewayd_deliveries_total", &[]) == 10.0
    });
    let from = seqs[2];
    let mut ws = resume(&node, &sid, from);
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < 7 {
        assert!(Instant::now() < deadline, "replay: {got:?}");
        let v: Value = recv(&mut ws);
        assert_ne!(v["op"], 9, "the Resume was refused: {v}");
        if v["t"] == "MESSAGE_CREATE" {
            got.push(v["s"].as_u64().unwrap());
        }
    }
    assert_eq!(got[0], from + 1, "the replay starts after the Resume's seq");
    let s = scrape_until(&node, |s| every_stage_counts(s, 10.0));
    for st in STAGES {
        assert_eq!(
            stage_count(&s, st),
            10.0,
            "stage {st}: the replay is not timed again"
        );
    }
    assert_eq!(metric_sum(&s, "gatewayd_delivery_resent_total", &[]), 2.0);
    // One Resume, away at least `away`.
    assert_eq!(metric_sum(&s, "gatewayd_reconnect_seconds_count", &[]), 1.0);
    let gap = metric_sum(&s, "gatewayd_reconnect_seconds_sum", &[]);
    assert!(gap >= away.as_secs_f64() - 0.001, "gap {gap} s");
    assert_eq!(
        metric_sum(&s, "gatewayd_reconnect_seconds_bucket", &[("le", "0.5")]),
        0.0,
        "away more than 0.5 s"
    );
    assert_eq!(
        metric_sum(&s, "gatewayd_resume_attempts_timed_total", &[]),
        1.0
    );
    assert_eq!(
        metric_sum(&s, "gatewayd_resume_window_refusals_total", &[]),
        0.0
    );
    // The portal shows it.
    let me = support::portal::sign_in(support::portal::addr(&node), &node.token).unwrap();
    let rc = me.get("/api/health").json()["reconnects"].clone();
    assert_eq!(rc["timed_attempts"], 1, "{rc}");
    assert_eq!(rc["window_s"], 120, "{rc}");
}

#[test]
fn a_resume_after_the_window_is_refused_and_counted_with_what_longer_windows_would_do() {
    let node = Node::start(&["--no-demo-traffic", "--resume-window-ms", "1000"]);
    let b = bot::identify(node.gateway, "late", &node.token, BOT_INTENTS, None).unwrap();
    let sid = b.session_id.clone();
    let seq = b.seq;
    drop(b.ws);
    scrape_until(&node, |s| {
        metric_sum(s, "gatewayd_sessions_detached", &[]) == 1.0
    });
    // The window passes and the session ends.
    let s = scrape_until(&node, |s| {
        metric_sum(s, "gatewayd_sessions_detached", &[]) == 0.0
            && metric_sum(s, "gatewayd_sessions", &[]) == 0.0
    });
    assert_eq!(metric_sum(&s, "gatewayd_sessions_detached", &[]), 0.0);
    let mut ws = resume(&node, &sid, seq);
    let v = recv(&mut ws);
    assert_eq!(
        (v["op"].as_u64(), v["d"].as_bool()),
        (Some(9), Some(false)),
        "{v}"
    );
    let s = scrape_until(&node, |s| {
        metric_sum(s, "gatewayd_resume_expired_total", &[]) == 1.0
    });
    assert_eq!(metric_sum(&s, "gatewayd_resume_expired_total", &[]), 1.0);
    assert_eq!(
        metric_sum(&s, "gatewayd_resume_attempts_timed_total", &[]),
        1.0
    );
    // Away a second or two: every window from 30 s up would have kept it.
    for w in ["30", "60", "120", "300"] {
        assert_eq!(
            metric_sum(
                &s,
                "gatewayd_resume_window_refusals_total",
                &[("window", w)]
            ),
            0.0,
            "window {w} s"
        );
    }
    // A refusal is not a reconnect.
    assert_eq!(metric_sum(&s, "gatewayd_reconnect_seconds_count", &[]), 0.0);
}
