//! The admin port's /metrics against a real node: every line is valid
//! Prometheus text exposition, the operations families exist with sane
//! values after a session identifies and an event is delivered, and
//! `gatewayd stats --once` renders a view of it (or fails clearly).

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::{Duration, Instant};

use support::bot::Next;
use support::metrics::Samples;
use support::node::Node;
use support::{intent, BOT_INTENTS};

const WORKERS: usize = 2;

/// Check the whole exposition; returns the samples. Panics naming the line.
/// Lines are read by the project's parser (`promtext`: names, label
/// syntax, escapes, duplicate labels, values); this adds the rules of a
/// page: HELP then TYPE once per family, its samples together under it.
fn check_exposition(text: &str) -> Samples {
    use promtext::{Kind, Line};
    let lines = promtext::parse_lines(text).unwrap_or_else(|e| panic!("{e}"));
    let mut declared: BTreeMap<String, Kind> = BTreeMap::new();
    let mut helped: BTreeSet<String> = BTreeSet::new();
    // The family whose samples may follow (its TYPE was the last declaration).
    let mut current: Option<(String, Kind)> = None;
    let mut finished: BTreeSet<String> = BTreeSet::new();
    let mut series = BTreeSet::new();
    let mut samples = Vec::new();
    for (n, (parsed, line)) in lines.into_iter().zip(text.lines()).enumerate() {
        let at = || format!("line {}: {line:?}", n + 1);
        match parsed {
            Line::Blank => panic!("empty line: {}", at()),
            Line::Comment(_) => panic!("unknown comment keyword: {}", at()),
            Line::Help { name, text } => {
                assert!(helped.insert(name.clone()), "HELP twice: {}", at());
                assert!(!declared.contains_key(&name), "HELP after TYPE: {}", at());
                assert!(!text.trim().is_empty(), "empty HELP: {}", at());
            }
            Line::Type { name, kind } => {
                assert!(
                    declared.insert(name.clone(), kind).is_none(),
                    "TYPE twice: {}",
                    at()
                );
                if let Some((prev, _)) = current.take() {
                    finished.insert(prev);
                }
                current = Some((name, kind));
            }
            Line::Sample(s) => {
                assert!(s.timestamp_ms.is_none(), "timestamp on a sample: {}", at());
                let labels = s.label_map();
                let (name, value) = (s.name.as_str(), s.value);
                let (family, kind) = current
                    .clone()
                    .unwrap_or_else(|| panic!("sample before any TYPE: {}", at()));
                let belongs = name == family
                    || (kind == Kind::Histogram
                        && [
                            format!("{family}_bucket"),
                            format!("{family}_sum"),
                            format!("{family}_count"),
                        ]
                        .iter()
                        .any(|s| s == name));
                assert!(
                    belongs,
                    "sample not under its family's HELP/TYPE (current {family}): {}",
                    at()
                );
                assert!(helped.contains(&family), "no HELP for {family}: {}", at());
                assert!(!finished.contains(&family), "family split: {}", at());
                if name.ends_with("_bucket") && kind == Kind::Histogram {
                    assert!(labels.contains_key("le"), "bucket without le: {}", at());
                }
                if kind == Kind::Counter || name.ends_with("_total") {
                    assert!(value >= 0.0, "negative counter: {}", at());
                }
                assert!(
                    series.insert((name.to_string(), labels.clone())),
                    "duplicate series: {}",
                    at()
                );
                samples.push((name.to_string(), labels, value));
            }
        }
    }
    // Histograms: cumulative buckets ending in +Inf = _count.
    for (family, kind) in &declared {
        if *kind != promtext::Kind::Histogram {
            continue;
        }
        let mut buckets: Vec<(f64, f64)> = samples
            .iter()
            .filter(|(n, _, _)| *n == format!("{family}_bucket"))
            .map(|(_, l, v)| {
                let le = match l["le"].as_str() {
                    "+Inf" => f64::INFINITY,
                    s => s.parse().unwrap(),
                };
                (le, *v)
            })
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert!(
            buckets.windows(2).all(|w| w[0].1 <= w[1].1),
            "{family}: buckets not cumulative"
        );
        let last = buckets
            .last()
            .unwrap_or_else(|| panic!("{family}: no buckets"));
        assert!(last.0.is_infinite(), "{family}: no +Inf bucket");
        let count = samples
            .iter()
            .find(|(n, _, _)| *n == format!("{family}_count"))
            .unwrap_or_else(|| panic!("{family}: no _count"))
            .2;
        assert_eq!(last.1, count, "{family}: +Inf bucket != _count");
    }
    samples
}

fn scrape(node: &Node) -> Samples {
    let (status, body) = support::http::http_get(node.admin, "/metrics").expect("GET /metrics");
    assert_eq!(status, 200, "{body}");
    check_exposition(&body)
}

fn sum(s: &Samples, name: &str, with: &[(&str, &str)]) -> f64 {
    support::metrics::metric_sum(s, name, with)
}

fn has(s: &Samples, name: &str) -> bool {
    s.iter().any(|(n, _, _)| n == name)
}

/// Scrape until `ok` holds (the worker gauges are set each 250 ms tick, the
/// lease gauges at each renewal).
fn scrape_until(node: &Node, what: &str, ok: impl Fn(&Samples) -> bool) -> Samples {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = scrape(node);
        if ok(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "{what}: never seen in /metrics");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn start() -> Node {
    Node::start(&[
        "--workers",
        &WORKERS.to_string(),
        "--max-sessions-per-worker",
        "1000",
        "--demo-interval-ms",
        "100",
        // Renewals every 300 ms: the lease gauges are set at each one.
        "--lease-ttl-ms",
        "900",
    ])
}

#[test]
fn metrics_exposition_is_valid_and_has_the_operations_families() {
    let node = start();
    // Before any session: already valid, with every family present.
    let s = scrape(&node);
    for fam in [
        "gatewayd_sessions_by_state",
        "gatewayd_drops_total",
        "gatewayd_ring_chunks_used",
        "gatewayd_ring_chunks_capacity",
        "gatewayd_identify_refusals_total",
        "gatewayd_leases",
        "gatewayd_registry_call_seconds_count",
        "gatewayd_revocation_apply_seconds_count",
        "gatewayd_worker_busy_seconds_total",
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
    ] {
        assert!(has(&s, fam), "{fam} missing");
    }

    // A WebSocket that never identifies is handshaking.
    let mut idle = support::bot::connect(node.gateway);
    assert!(
        matches!(support::bot::read_next(&mut idle, Duration::from_secs(10)), Next::Json(v) if v["op"] == 10)
    );
    scrape_until(&node, "a handshaking session", |s| {
        sum(s, "gatewayd_sessions_by_state", &[("state", "handshaking")]) >= 1.0
    });

    // A bad token: refused with a close (4004).
    let mut bad = support::bot::connect(node.gateway);
    let _hello = support::bot::read_next(&mut bad, Duration::from_secs(10));
    support::bot::send_json(
        &mut bad,
        &support::bot::identify_payload("Bot nope", intent::GUILDS, None),
    );
    match support::bot::read_next(&mut bad, Duration::from_secs(10)) {
        Next::Close(Some((4004, _))) => {}
        other => panic!("expected 4004, got {other:?}"),
    }

    // The demo bot identifies and gets a demo MESSAGE_CREATE.
    let mut session = support::bot::identify(node.gateway, "demo", &node.token, BOT_INTENTS, None)
        .expect("identify");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match support::bot::read_next(&mut session.ws, Duration::from_secs(10)) {
            Next::Json(v) if v["t"] == "MESSAGE_CREATE" => break,
            Next::Json(_) => {}
            other => panic!("no event delivered: {other:?}"),
        }
        assert!(Instant::now() < deadline, "no MESSAGE_CREATE in 10 s");
    }

    let s = scrape_until(&node, "the session, its lease and its delivery", |s| {
        sum(s, "gatewayd_sessions_by_state", &[("state", "connected")]) >= 1.0
            && sum(s, "gatewayd_leases", &[("state", "held")]) >= 1.0
            && sum(
                s,
                "gatewayd_identify_refusals_total",
                &[("reason", "close")],
            ) >= 1.0
    });

    // Sessions by worker and state: every worker, every state.
    let states: BTreeSet<(String, String)> = s
        .iter()
        .filter(|(n, _, _)| n == "gatewayd_sessions_by_state")
        .map(|(_, l, _)| (l["worker"].clone(), l["state"].clone()))
        .collect();
    assert_eq!(states.len(), WORKERS * 4, "{states:?}");
    // The old per-state names still work and agree.
    assert_eq!(
        sum(&s, "gatewayd_sessions", &[]),
        sum(&s, "gatewayd_sessions_by_state", &[("state", "connected")])
    );
    assert!(sum(&s, "gatewayd_sessions", &[]) >= 1.0);

    // Traffic.
    assert!(sum(&s, "gatewayd_identifies_total", &[]) >= 1.0);
    assert!(sum(&s, "gatewayd_events_in_total", &[]) >= 1.0);
    assert!(sum(&s, "gatewayd_deliveries_total", &[]) >= 1.0);
    assert!(sum(&s, "gatewayd_sent_bytes_total", &[]) > 0.0);

    // Drops by reason: one family, the known reasons, nothing dropped here.
    let reasons: BTreeSet<&str> = s
        .iter()
        .filter(|(n, _, _)| n == "gatewayd_drops_total")
        .map(|(_, l, _)| l["reason"].as_str())
        .collect();
    for r in [
        "slow_consumer_close",
        "inbox_full",
        "ring_exhausted",
        "history_reclaim",
        "arena_lost_read",
        "ingest_malformed",
        "ingest_batch_dropped",
    ] {
        assert!(reasons.contains(r), "drops reason {r} missing: {reasons:?}");
    }
    assert_eq!(sum(&s, "gatewayd_drops_total", &[]), 0.0);

    // Ring fill per worker: used within capacity, the session's chunks in use.
    for w in 0..WORKERS {
        let w = w.to_string();
        let used = sum(&s, "gatewayd_ring_chunks_used", &[("worker", &w)]);
        let cap = sum(&s, "gatewayd_ring_chunks_capacity", &[("worker", &w)]);
        let free = sum(&s, "gatewayd_ring_chunks_free", &[("worker", &w)]);
        assert!(cap > 0.0, "worker {w}: no ring capacity");
        assert!(
            used <= cap && used + free == cap,
            "worker {w}: {used} + {free} != {cap}"
        );
    }
    assert!(sum(&s, "gatewayd_ring_chunks_used", &[]) >= 1.0);

    // Identify refusals by reason, and the registry histograms.
    assert!(
        sum(
            &s,
            "gatewayd_identify_refusals_total",
            &[("reason", "close")]
        ) >= 1.0
    );
    assert!(sum(&s, "gatewayd_identifies_refused_total", &[]) >= 1.0);
    assert!(sum(&s, "gatewayd_registry_call_seconds_count", &[]) >= 1.0);
    assert!(
        sum(
            &s,
            "gatewayd_registry_call_seconds_bucket",
            &[("le", "+Inf")]
        ) >= 1.0
    );
    assert!(
        sum(&s, "gatewayd_leases_renewed_total", &[]) >= 1.0
            || sum(&s, "gatewayd_lease_renewal_batches_total", &[]) >= 1.0
    );

    // CPU and memory.
    assert!(sum(&s, "gatewayd_worker_busy_seconds_total", &[]) > 0.0);
    let cpu = sum(&s, "process_cpu_seconds_total", &[]);
    assert!(cpu > 0.0 && cpu < 3600.0, "process_cpu_seconds_total {cpu}");
    let rss = sum(&s, "process_resident_memory_bytes", &[]);
    assert!(
        rss > 1e6 && rss < 64e9,
        "process_resident_memory_bytes {rss}"
    );
    assert!(sum(&s, "process_open_fds", &[]) >= 3.0);
    let start = sum(&s, "process_start_time_seconds", &[]);
    let unix = support::events::now_ns() as f64 / 1e9;
    assert!(
        (unix - start).abs() < 600.0,
        "process_start_time_seconds {start} vs now {unix}"
    );

    drop(idle);
}

fn stats(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gatewayd"))
        .arg("stats")
        .args(args)
        .output()
        .expect("run gatewayd stats")
}

#[test]
fn stats_once_prints_a_view_and_fails_clearly_without_a_node() {
    let node = start();
    let intents = intent::GUILDS | intent::GUILD_MESSAGES;
    let _session =
        support::bot::identify(node.gateway, "demo", &node.token, intents, None).expect("identify");
    let admin = node.admin.to_string();
    let out = stats(&["--admin", &admin, "--interval", "300ms", "--once"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "stats --once failed: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !text.contains('\x1b'),
        "--once must not clear the screen:\n{text}"
    );
    for want in [
        "gatewayd stats",
        "connected",
        "detached",
        "handshaking",
        "ring used/capacity",
        "events in",
        "deliveries",
        "identifies",
        "resumes",
        "registry",
        "revocation apply p99",
        "drops",
        "slow_consumer_close",
        "rss ",
    ] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }
    // One row per worker.
    for w in 0..WORKERS {
        assert!(
            text.lines().any(|l| l.starts_with(&format!("{w} "))),
            "no row for worker {w}:\n{text}"
        );
    }

    // Nothing listening: a clear error, exit status 1.
    let port = support::node::free_port();
    let out = stats(&["--admin", &format!("127.0.0.1:{port}"), "--once"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot reach the admin port"), "{err}");
    assert!(out.stdout.is_empty());

    // A bad interval is a usage error.
    let out = stats(&["--admin", &admin, "--interval", "soon", "--once"]);
    assert!(!out.status.success());
}
