//! Session-count tests: many concurrent sessions on one node.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use support::node::Node;
use support::raw::Ws;
use support::{intent, BOT_INTENTS};

/// Sum of the current-session gauge(s) in `/metrics`: every sample of the
/// metric family named exactly `gatewayd_sessions` (any labels), and those
/// samples as text.
fn sessions_metric(node: &Node) -> (f64, String) {
    let samples = support::metrics::metrics(node.admin);
    let sessions: Vec<_> = samples
        .iter()
        .filter(|(n, _, _)| n == "gatewayd_sessions")
        .collect();
    assert!(
        !sessions.is_empty(),
        "/metrics has no gatewayd_sessions samples: {samples:?}"
    );
    let sum = sessions.iter().map(|(_, _, v)| v).sum();
    let lines: Vec<String> = sessions
        .iter()
        .map(|(n, l, v)| format!("{n}{l:?} {v}"))
        .collect();
    (sum, lines.join("\n"))
}

fn vm_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS")
}

enum Stage {
    Opened,
    Acked,
    Done(Vec<String>),
}

#[test]
fn hold_2000_sessions() {
    const N: usize = 2000;
    const THREADS: usize = 8;
    const STAGE_TIMEOUT: Duration = Duration::from_secs(120);
    let node = Node::start(&["--heartbeat-interval-ms", "30000", "--no-demo-traffic"]);
    let (base, _) = sessions_metric(&node);
    assert_eq!(base, 0.0, "sessions before any client");
    let t0 = Instant::now();
    let (tx, rx) = mpsc::channel::<(usize, Stage)>();
    let mut go = Vec::new();
    for t in 0..THREADS {
        let (gw, token, tx) = (node.gateway, node.token.clone(), tx.clone());
        let (go_tx, go_rx) = mpsc::channel::<()>();
        go.push(go_tx);
        thread::spawn(move || {
            let n = N / THREADS;
            let mut conns = Vec::with_capacity(n);
            let mut session_ids = Vec::with_capacity(n);
            for i in 0..n {
                let mut ws = Ws::try_connect(gw, "/?v=10&encoding=json", &[])
                    .unwrap_or_else(|e| panic!("thread {t} session {i}: connect: {e}"));
                let ready = ws.login(&token, BOT_INTENTS);
                session_ids.push(
                    ready["d"]["session_id"]
                        .as_str()
                        .expect("session_id")
                        .to_string(),
                );
                conns.push(ws);
            }
            tx.send((t, Stage::Opened)).unwrap();
            go_rx.recv().unwrap();
            // Every session, while all are open, gets a heartbeat ACK.
            for ws in conns.iter_mut() {
                ws.heartbeat().unwrap();
            }
            for ws in conns.iter_mut() {
                let v = ws.read_until(11, None, Duration::from_secs(20));
                assert_eq!(v["op"], 11);
            }
            tx.send((t, Stage::Acked)).unwrap();
            go_rx.recv().unwrap();
            for ws in conns.iter_mut() {
                let _ = ws.send_close(1000, "done");
            }
            tx.send((t, Stage::Done(session_ids))).unwrap();
            // Keep the sockets until the server has answered the closes.
            for ws in conns.iter_mut() {
                let _ = ws.read_until_closed(Duration::from_secs(5));
            }
        });
    }
    drop(tx);
    let wait_all = |what: &str| -> Vec<Stage> {
        (0..THREADS)
            .map(|_| match rx.recv_timeout(STAGE_TIMEOUT) {
                Ok((_, st)) => st,
                Err(e) => panic!("client threads did not reach '{what}' ({e}; a thread panicked, see above, or timed out)"),
            })
            .collect()
    };
    wait_all("opened");
    let open_time = t0.elapsed();
    go.iter().for_each(|g| g.send(()).unwrap());
    wait_all("acked");
    let ack_time = t0.elapsed();
    let (sessions, lines) = sessions_metric(&node);
    let rss = vm_rss_kib(node.child.id());
    go.iter().for_each(|g| g.send(()).unwrap());
    let mut ids = std::collections::HashSet::new();
    for st in wait_all("closed") {
        if let Stage::Done(list) = st {
            for id in list {
                assert!(ids.insert(id.clone()), "duplicate session_id {id}");
            }
        }
    }
    eprintln!(
        "2000 sessions: open+identify {open_time:?}, all ACKed at {ack_time:?}; gatewayd RSS {rss} KiB; metrics:\n{lines}"
    );
    assert_eq!(ids.len(), N);
    assert!(
        sessions >= N as f64,
        "/metrics reports {sessions} sessions with {N} open:\n{lines}"
    );
    // Closing them with 1000 (which ends a session) is reflected too.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (s, lines) = sessions_metric(&node);
        if s == 0.0 {
            break;
        }
        assert!(Instant::now() < deadline, "20 s after all clients closed with 1000, /metrics still reports {s} sessions:\n{lines}");
        thread::sleep(Duration::from_millis(200));
    }
}

/// 40,000 sessions on one gatewayd, from 4 `loadgen hold-sessions` processes (each
/// process can hold at most ~20,000 fds) spread over 127.0.0.2..=127.0.0.5,
/// identifying as shards `[k % 1000, 1000]` of the demo app.
#[test]
#[ignore = "heavy: 40,000 sessions; run with --ignored --nocapture"]
fn hold_40000_sessions() {
    const PROCS: usize = 4;
    const PER: usize = 10_000;
    const TOTAL: usize = PROCS * PER;
    // All sessions of one (application, shard) live on one worker, so the
    // load spreads over 1000 shards of the demo app (40 sessions each) to use
    // both workers; the split is ~50/50 (+-2%), under 24,000 per worker.
    const SHARDS: usize = 1000;
    let exe = std::env::current_exe().unwrap();
    let hold = exe.parent().unwrap().parent().unwrap().join("loadgen");
    if !hold.exists() {
        // `cargo test --test sessions` alone does not build other packages' binaries.
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        // Same profile as this test binary (target/release for --release).
        let profile: &[&str] = if cfg!(debug_assertions) {
            &[]
        } else {
            &["--release"]
        };
        let st = Command::new(cargo)
            .args(["build", "-p", "loadgen", "--bin", "loadgen"])
            .args(profile)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("run cargo build -p loadgen");
        assert!(st.success(), "cargo build -p loadgen failed");
    }
    assert!(hold.exists(), "{} not built", hold.display());

    let node = Node::start(&[
        "--no-demo-traffic",
        "--workers",
        "2",
        "--max-sessions-per-worker",
        "24000",
    ]);
    let pid = node.child.id();
    let rss_before = vm_rss_kib(pid);

    let t0 = Instant::now();
    let (tx, rx) = mpsc::channel::<(usize, Option<String>)>();
    let mut children = Vec::new();
    for p in 0..PROCS {
        let mut child = Command::new(&hold)
            .arg("hold-sessions")
            .args([
                "--gateway",
                &node.gateway.to_string(),
                "--token",
                &node.token,
            ])
            .args([
                "--count",
                &PER.to_string(),
                "--source",
                &format!("127.0.0.{}", p + 2),
                "--threads",
                "2",
            ])
            .args([
                "--shards",
                &SHARDS.to_string(),
                "--first-index",
                &(p * PER).to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn loadgen hold-sessions");
        let out = child.stdout.take().unwrap();
        let tx = tx.clone();
        thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                match line {
                    Ok(l) => {
                        if tx.send((p, Some(l))).is_err() {
                            return;
                        }
                    }
                    Err(_) => break,
                }
            }
            let _ = tx.send((p, None));
        });
        children.push(child);
    }
    drop(tx);

    let mut state = vec![std::collections::HashMap::<String, usize>::new(); PROCS];
    let sum = |state: &Vec<std::collections::HashMap<String, usize>>, k: &str| -> usize {
        state.iter().map(|m| m.get(k).copied().unwrap_or(0)).sum()
    };
    let deadline = t0 + Duration::from_secs(300);
    let mut last_print = Instant::now();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "not all sessions READY in 300 s: opened {} ready {} failed {}",
            sum(&state, "opened"),
            sum(&state, "ready"),
            sum(&state, "failed")
        );
        match rx.recv_timeout(left.min(Duration::from_secs(1))) {
            Ok((p, Some(line))) => {
                let mut it = line.split_whitespace();
                if let (Some(k), Some(v)) = (it.next(), it.next().and_then(|v| v.parse().ok())) {
                    state[p].insert(k.to_string(), v);
                }
            }
            Ok((p, None)) => panic!(
                "loadgen hold-sessions #{p} exited early; state {:?}",
                state[p]
            ),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(e) => panic!("{e}"),
        }
        let failed = sum(&state, "failed") + sum(&state, "lost");
        assert_eq!(failed, 0, "sessions failed (reasons on stderr): {state:?}");
        if last_print.elapsed() > Duration::from_secs(5) {
            eprintln!(
                "{:?}: opened {} ready {}",
                t0.elapsed(),
                sum(&state, "opened"),
                sum(&state, "ready")
            );
            last_print = Instant::now();
        }
        if sum(&state, "ready") == TOTAL {
            break;
        }
    }
    let open_time = t0.elapsed();
    let (sessions, lines) = sessions_metric(&node);
    let rss_after = vm_rss_kib(pid);
    // Hold a little longer: nobody may be dropped.
    thread::sleep(Duration::from_secs(5));
    while let Ok((p, Some(line))) = rx.try_recv() {
        let mut it = line.split_whitespace();
        if let (Some(k), Some(v)) = (it.next(), it.next().and_then(|v| v.parse().ok())) {
            state[p].insert(k.to_string(), v);
        }
    }
    let per_1000 = (rss_after.saturating_sub(rss_before)) as f64 / (TOTAL as f64 / 1000.0);
    eprintln!(
        "40k sessions: open+identify {open_time:?} ({:.0}/s); gatewayd VmRSS before {rss_before} KiB, after {rss_after} KiB, \
         {per_1000:.0} KiB per 1,000 sessions; lost {}; metrics:\n{lines}",
        TOTAL as f64 / open_time.as_secs_f64(),
        sum(&state, "lost")
    );
    for mut c in children {
        drop(c.stdin.take());
        let _ = c.wait();
    }
    assert_eq!(sum(&state, "ready"), TOTAL);
    assert_eq!(
        sum(&state, "lost"),
        0,
        "sessions lost while held: {state:?}"
    );
    assert!(
        sessions >= TOTAL as f64,
        "/metrics reports {sessions} sessions with {TOTAL} open:\n{lines}"
    );
    let _ = std::io::stderr().flush();
}

/// A node at capacity answers every connection: READY while any worker has
/// a slot (a full placement worker hands nothing over, the session is served
/// where it landed), then HTTP 503 once the fixed tables are full. Nothing
/// hangs in a listen queue.
#[test]
fn a_full_node_answers_every_connection() {
    // 2 workers x 1 ring x 64 slots: 128 sockets at most.
    let node = Node::start(&[
        "--no-demo-traffic",
        "--workers",
        "2",
        "--max-sessions-per-worker",
        "40",
    ]);
    let (mut ready, mut rejected) = (0, 0);
    let mut held = Vec::new();
    for i in 0..200 {
        let stream = std::net::TcpStream::connect(node.gateway).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        match tungstenite::client(format!("ws://{}/?v=10", node.gateway), stream) {
            Ok((mut ws, _)) => {
                let hello = ws.read().expect("hello");
                assert!(hello.is_text(), "connection {i}: {hello:?}");
                let intents = intent::GUILDS | intent::GUILD_MESSAGES;
                support::bot::send_json(
                    &mut ws,
                    &support::bot::identify_payload(&node.token, intents, None),
                );
                match ws.read() {
                    Ok(tungstenite::Message::Text(t)) if t.contains("\"READY\"") => ready += 1,
                    other => panic!("connection {i}: expected READY, got {other:?}"),
                }
                held.push(ws);
            }
            Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(resp))) => {
                assert_eq!(resp.status(), 503, "connection {i}");
                rejected += 1;
            }
            Err(e) => panic!("connection {i} got neither READY nor a 503: {e}"),
        }
    }
    assert_eq!(ready + rejected, 200);
    assert!(
        ready >= 110,
        "the node fills its tables before refusing: {ready} ready, {rejected} refused"
    );
    assert!(rejected > 0);
}
