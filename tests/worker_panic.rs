//! A worker that panics stops the node (src/node/panic.rs), against a real
//! node with two workers and real bot sessions on both: the drill
//! `POST /fault/worker-panic` (only with `--fault-injection`) makes worker
//! 0 panic; every bot is then told to reconnect (op 7, the surviving
//! worker's drain) or disconnected (the dead worker's), none is left
//! hanging, the log names the worker, and the node exits 1 (failed: a
//! service manager restarts it) instead of running on a worker short.

mod support;

use std::time::{Duration, Instant};

use support::bot::{identify, read_next, Next};
use support::metrics::{metric_sum, metrics};
use support::node::Node;
use support::placement::id_of;
use support::BOT_INTENTS;

/// Connected sessions the node counts on `worker` (set each 250 ms tick).
fn connected_on(node: &Node, worker: &str) -> f64 {
    metric_sum(
        &metrics(node.admin),
        "gatewayd_sessions_by_state",
        &[("worker", worker), ("state", "connected")],
    )
}

#[test]
fn a_worker_that_panics_drains_the_others_and_the_node_exits_1() {
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("node.log");
    let mut node = Node::start_logging(
        &[
            "--workers",
            "2",
            "--fault-injection",
            "--no-demo-traffic",
            "--drain-spread-ms",
            "200",
            "--shutdown-grace-ms",
            "300",
        ],
        &log,
    );

    // Bots on both workers: an (application, shard) pair is served by the
    // worker `shards::placement::worker_for` names, so two shards of eight
    // that land on different workers, and two sessions each.
    const SHARDS: u32 = 8;
    let probe = identify(
        node.gateway,
        "probe",
        &node.token,
        BOT_INTENTS,
        Some((0, SHARDS)),
    )
    .expect("READY");
    let app = id_of(&probe.ready["d"]["application"]["id"]);
    assert_ne!(app, 0, "READY names the application");
    drop(probe);
    let on = |w: u32| {
        (0..SHARDS)
            .find(|&k| shards::placement::worker_for(app, k, 2) == w)
            .expect("a shard on each of two workers")
    };
    let mut sessions = Vec::new();
    for (w, shard) in [(0, on(0)), (1, on(1))] {
        for i in 0..2 {
            let s = identify(
                node.gateway,
                &format!("worker {w} bot {i}"),
                &node.token,
                BOT_INTENTS,
                Some((shard, SHARDS)),
            )
            .expect("READY");
            sessions.push((w, s));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while connected_on(&node, "0") < 2.0 || connected_on(&node, "1") < 2.0 {
        assert!(
            Instant::now() < deadline,
            "the node does not count two sessions on each worker"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // A worker that does not exist is refused, and nothing happens.
    let (status, body) =
        support::http::http_request(node.admin, "POST", "/fault/worker-panic?worker=2", &[])
            .unwrap();
    assert_eq!(status, 400, "{body}");
    assert!(
        node.child.try_wait().unwrap().is_none(),
        "the node still runs"
    );

    let (status, body) =
        support::http::http_request(node.admin, "POST", "/fault/worker-panic?worker=0", &[])
            .unwrap();
    assert_eq!(status, 202, "{body}");

    // The survivor's bots are told to reconnect (op 7, its drain); the
    // dead worker's are cut off (its sockets close as its thread unwinds,
    // or with the process); none is left hanging.
    for (w, s) in sessions.iter_mut() {
        let got = loop {
            match read_next(&mut s.ws, Duration::from_secs(30)) {
                Next::Json(v) if v["op"] == 7 => break "op 7",
                Next::Json(_) => {} // a heartbeat ack or a late dispatch
                Next::Close(_) | Next::Ended(_) => break "cut off",
                Next::Timeout => panic!(
                    "{}: neither op 7 nor a disconnect within 30 s of the panic",
                    s.name
                ),
            }
        };
        if *w == 1 {
            assert_eq!(got, "op 7", "{}: the surviving worker drains", s.name);
        }
    }

    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = node.child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "the node still runs 30 s after a worker panicked"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        status.code(),
        Some(1),
        "a worker's panic fails the node (status 1): {status}\n{text}"
    );
    assert!(
        text.contains("worker 0 panicked") && text.contains("fault injection drill"),
        "the log names the worker and the panic's message:\n{text}"
    );
}

#[test]
fn the_drill_is_refused_without_fault_injection() {
    let mut node = Node::start(&["--no-demo-traffic", "--workers", "2"]);
    let (status, _) =
        support::http::http_request(node.admin, "POST", "/fault/worker-panic?worker=0", &[])
            .unwrap();
    assert_eq!(status, 404);
    let (status, _) = support::http::http_request(node.admin, "GET", "/readyz", &[]).unwrap();
    assert_eq!(status, 200, "the node is untouched");
    let status = node.terminate();
    assert_eq!(status.code(), Some(0), "{status}");
}
