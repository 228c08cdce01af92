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
    // Histograms: each series (its labels but `le`) has cumulative buckets
    // ending in +Inf = its _count.
    for (family, kind) in &declared {
        if *kind != promtext::Kind::Histogram {
            continue;
        }
        let mut by_series: BTreeMap<BTreeMap<String, String>, Vec<(f64, f64)>> = BTreeMap::new();
        for (_, l, v) in samples
            .iter()
            .filter(|(n, _, _)| *n == format!("{family}_bucket"))
        {
            let le = match l["le"].as_str() {
                "+Inf" => f64::INFINITY,
                s => s.parse().unwrap(),
            };
            let mut key = l.clone();
            key.remove("le");
            by_series.entry(key).or_default().push((le, *v));
        }
        assert!(!by_series.is_empty(), "{family}: no buckets");
        for (labels, mut buckets) in by_series {
            buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            assert!(
                buckets.windows(2).all(|w| w[0].1 <= w[1].1),
                "{family}{labels:?}: buckets not cumulative"
            );
            let last = buckets.last().expect("one bucket at least");
            assert!(last.0.is_infinite(), "{family}{labels:?}: no +Inf bucket");
            let count = samples
                .iter()
                .find(|(n, l, _)| *n == format!("{family}_count") && *l == labels)
                .unwrap_or_else(|| panic!("{family}{labels:?}: no _count"))
                .2;
            assert_eq!(last.1, count, "{family}{labels:?}: +Inf bucket != _count");
        }
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
        // The cluster link's refusals by reason (zeros outside a cluster).
        "gatewayd_cluster_link_refused_total",
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

/// `git rev-parse --short HEAD` of this checkout, if it is one and git answers.
fn git_head() -> Option<String> {
    let dir = env!("CARGO_MANIFEST_DIR");
    if !std::path::Path::new(dir).join(".git").exists() {
        return None;
    }
    let out = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(dir)
        .output()
        .ok()?;
    let head = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !head.is_empty()).then_some(head)
}

/// The soft "Max open files" of a process, from /proc/PID/limits.
fn max_open_files(pid: u32) -> f64 {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("Max open files in /proc/PID/limits");
    let soft = line["Max open files".len()..]
        .split_whitespace()
        .next()
        .unwrap();
    if soft == "unlimited" {
        u64::MAX as f64
    } else {
        soft.parse().unwrap()
    }
}

/// The node's own gauges on a real node: which build runs, whether it takes
/// traffic (1 exactly when /readyz answers 200; 0 once a drain begins), the
/// fd limit, each worker's io_uring fixed file table slots as connections
/// come and go, and the revocation histogram's 1.5 s bucket.
#[test]
fn build_readiness_fd_limit_and_fixed_file_slots() {
    let node = Node::start(&[
        "--workers",
        &WORKERS.to_string(),
        "--max-sessions-per-worker",
        "1000",
        // A drain that lasts (op 7 within 10 s, then 3 s for the session
        // to go): the admin port answers throughout.
        "--drain-spread-ms",
        "10000",
        "--shutdown-grace-ms",
        "3000",
    ]);
    let s = scrape(&node);

    // gatewayd_build_info: one series, 1, this crate's version, the commit
    // build.rs found (that of this checkout, when git answers).
    let info: Vec<_> = s
        .iter()
        .filter(|(n, _, _)| n == "gatewayd_build_info")
        .collect();
    assert_eq!(info.len(), 1, "{info:?}");
    let (_, labels, v) = info[0];
    assert_eq!(*v, 1.0);
    assert_eq!(labels["version"], env!("CARGO_PKG_VERSION"));
    let commit = labels["commit"].as_str();
    assert_eq!(commit, env!("GATEWAYD_COMMIT"));
    if std::env::var_os("GATEWAYD_COMMIT").is_none() {
        match git_head() {
            // The abbreviation may grow by a digit as the repository does.
            Some(head) => assert!(
                head.starts_with(commit) || commit.starts_with(&head),
                "built from {commit}, HEAD is {head}"
            ),
            None => assert_eq!(commit, "unknown"),
        }
    }

    // Ready, as /readyz says.
    assert_eq!(sum(&s, "gatewayd_ready", &[]), 1.0);
    assert_eq!(
        support::http::http_get(node.admin, "/readyz").unwrap().0,
        200
    );

    // The fd limit: the node's own soft RLIMIT_NOFILE, above what is open.
    let max = sum(&s, "process_max_fds", &[]);
    assert_eq!(max, max_open_files(node.child.id()));
    assert!(max > sum(&s, "process_open_fds", &[]), "{max}");

    // Fixed file slots: every worker, used and free; 1000 sessions and 25 %
    // headroom per worker, in one ring (the fd limit is above 1250).
    assert!(max >= 1250.0);
    for w in 0..WORKERS {
        let w = w.to_string();
        let used = sum(
            &s,
            "gatewayd_fixed_file_slots",
            &[("worker", &w), ("state", "used")],
        );
        let free = sum(
            &s,
            "gatewayd_fixed_file_slots",
            &[("worker", &w), ("state", "free")],
        );
        assert_eq!(used + free, 1250.0, "worker {w}: {used} used + {free} free");
    }
    let series = s
        .iter()
        .filter(|(n, _, _)| n == "gatewayd_fixed_file_slots")
        .count();
    assert_eq!(series, WORKERS * 2);
    let used = |s: &Samples| sum(s, "gatewayd_fixed_file_slots", &[("state", "used")]);
    let idle = used(&s);

    // The revocation histogram has its 1.5 s bucket.
    assert!(
        s.iter()
            .any(|(n, l, _)| n == "gatewayd_revocation_apply_seconds_bucket"
                && l.get("le").map(String::as_str) == Some("1.5")),
        "no le=\"1.5\" bucket in gatewayd_revocation_apply_seconds"
    );

    // A connection takes a slot (on whichever worker), and gives it back.
    let mut ws = support::bot::connect(node.gateway);
    assert!(
        matches!(support::bot::read_next(&mut ws, Duration::from_secs(10)), Next::Json(v) if v["op"] == 10)
    );
    let s = scrape_until(&node, "a used fixed file slot", |s| used(s) >= idle + 1.0);
    assert_eq!(
        sum(&s, "gatewayd_fixed_file_slots", &[]),
        1250.0 * WORKERS as f64
    );
    drop(ws);
    scrape_until(&node, "the slot given back", |s| used(s) == idle);

    // A drain: not ready from its first moment, /readyz agreeing, while the
    // node is still up serving its session.
    let intents = intent::GUILDS | intent::GUILD_MESSAGES;
    let _session =
        support::bot::identify(node.gateway, "demo", &node.token, intents, None).expect("identify");
    node.sigterm();
    scrape_until(&node, "gatewayd_ready 0 in the drain", |s| {
        sum(s, "gatewayd_ready", &[]) == 0.0
    });
    assert_eq!(
        support::http::http_get(node.admin, "/readyz").unwrap().0,
        503
    );
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
