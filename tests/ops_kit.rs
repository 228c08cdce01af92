//! The ops kit in deploy/ against the real node:
//!
//! - every metric name the Prometheus alerts (deploy/prometheus/gatewayd-alerts.yml)
//!   and the Grafana dashboard (deploy/grafana/gatewayd-dashboard.json) use is
//!   in a real scrape of `/metrics` (histograms: their `_bucket`/`_sum`/`_count`
//!   series), every `label="value"` matcher they use selects a series that
//!   exists, and `rate()`/`increase()` are taken of counters only;
//! - deploy/metric-families.txt, the list scripts/check-ops.sh checks those
//!   names against without starting a node, names only families the node
//!   exports, each with its real type;
//! - deploy/gatewayd.toml (the example /etc/gatewayd/gatewayd.toml) parses,
//!   and a node started with it (addresses on port 0 and a temp data dir,
//!   given as flags on top) becomes ready and drains on SIGTERM well within
//!   the unit's TimeoutStopSec, with no demo seeded (the demo is off in it);
//! - deploy/systemd/gatewayd.service agrees with that config: TimeoutStopSec
//!   covers drain_spread_ms + shutdown_grace_ms, the data dir is writable,
//!   the io_uring system calls are allowed.
//!
//! Names are taken from PromQL with a plain scan for `gatewayd_[a-z0-9_]+`
//! and `process_[a-z0-9_]+` (standing alone, not part of a longer word);
//! `up` is Prometheus's own and not looked for.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gatewayd::ops::stats::Sample;
use support::node::Node;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo(path)).unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

const ALERTS: &str = "deploy/prometheus/gatewayd-alerts.yml";
const DASHBOARD: &str = "deploy/grafana/gatewayd-dashboard.json";
const FAMILIES: &str = "deploy/metric-families.txt";
const CONFIG: &str = "deploy/gatewayd.toml";
const UNIT: &str = "deploy/systemd/gatewayd.service";

/// One use of a metric name in a query: the name, the exact-match
/// (`label="value"`) matchers right after it, and whether it is the
/// argument of `rate(`/`increase(`/`irate(`.
#[derive(Debug)]
struct Use {
    name: String,
    matchers: Vec<(String, String)>,
    rated: bool,
    /// `label_values(NAME, LABEL)` (Grafana variables): the label.
    label_values: Option<String>,
}

fn is_word(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b':'
}

/// Every `gatewayd_...` / `process_...` name in `text`, with its context.
fn uses(text: &str) -> Vec<Use> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let at_name = (i == 0 || !is_word(b[i - 1]))
            && (b[i..].starts_with(b"gatewayd_") || b[i..].starts_with(b"process_"));
        if !at_name {
            i += 1;
            continue;
        }
        let mut end = i;
        while end < b.len()
            && (b[end].is_ascii_lowercase() || b[end].is_ascii_digit() || b[end] == b'_')
        {
            end += 1;
        }
        let name = text[i..end].to_string();
        if name.ends_with('_') && !name[..name.len() - 1].contains('_') {
            // A bare prefix (`gatewayd_*` in prose), as the regex
            // `gatewayd_[a-z0-9_]+` would not match it either.
            i = end;
            continue;
        }
        let before = text[..i].trim_end();
        let rated = ["rate(", "increase(", "irate("]
            .iter()
            .any(|f| before.ends_with(f));
        // label_values(NAME, LABEL) or label_values(NAME{...}, LABEL).
        let after = &text[end..];
        let after = match after.strip_prefix('{') {
            Some(r) => r.split_once('}').map_or("", |(_, r)| r),
            None => after,
        };
        let label_values = before
            .strip_suffix("label_values(")
            .and_then(|_| after.trim_start().strip_prefix(','))
            .map(|rest| {
                rest.trim_start()
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .next()
                    .unwrap_or("")
                    .to_string()
            });
        let mut matchers = Vec::new();
        if b.get(end) == Some(&b'{') {
            if let Some(close) = text[end..].find('}') {
                for m in text[end + 1..end + close].split(',') {
                    // `label="value"`, and `label=~"a|b"` when it is a plain
                    // list of values (each must exist). Negative matchers,
                    // real regexes and Grafana variables ($worker) are not checked.
                    let Some((k, v)) = m.split_once('=') else {
                        continue;
                    };
                    let (k, v) = (k.trim(), v.trim());
                    if k.ends_with('!') || v.contains('$') {
                        continue;
                    }
                    let (list, v) = match v.strip_prefix('~') {
                        Some(re) => (true, re.trim().trim_matches('"')),
                        None => (false, v.trim_matches('"')),
                    };
                    let plain = |s: &str| s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
                    if list && !v.split('|').all(plain) {
                        continue;
                    }
                    for alt in v.split('|') {
                        matchers.push((k.to_string(), alt.to_string()));
                    }
                }
            }
        }
        out.push(Use {
            name,
            matchers,
            rated,
            label_values,
        });
        i = end;
    }
    out
}

/// All string values of a JSON document, one per line (the queries of a
/// dashboard, decoded: `\"` in the file is `"` here).
fn json_strings(v: &serde_json::Value, out: &mut String) {
    match v {
        serde_json::Value::String(s) => {
            out.push_str(s);
            out.push('\n');
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| json_strings(v, out)),
        serde_json::Value::Object(o) => o.values().for_each(|v| json_strings(v, out)),
        _ => {}
    }
}

fn dashboard() -> serde_json::Value {
    serde_json::from_str(&read(DASHBOARD)).unwrap_or_else(|e| panic!("{DASHBOARD}: {e}"))
}

/// (file, uses) for the alerts and the dashboard.
fn kit_uses() -> Vec<(&'static str, Vec<Use>)> {
    let mut strings = String::new();
    json_strings(&dashboard(), &mut strings);
    vec![(ALERTS, uses(&read(ALERTS))), (DASHBOARD, uses(&strings))]
}

/// deploy/metric-families.txt: `name type` per line, `#` comments.
fn family_list() -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (n, line) in read(FAMILIES).lines().enumerate() {
        let line = line.split('#').next().unwrap().trim();
        if line.is_empty() {
            continue;
        }
        let mut f = line.split_whitespace();
        let (Some(name), Some(kind), None) = (f.next(), f.next(), f.next()) else {
            panic!("{FAMILIES}:{}: expected `name type`: {line:?}", n + 1);
        };
        assert!(
            out.insert(name.to_string(), kind.to_string()).is_none(),
            "{FAMILIES}:{}: {name} twice",
            n + 1
        );
    }
    out
}

/// The series names a family of `kind` has.
fn series_of(name: &str, kind: &str) -> Vec<String> {
    if kind == "histogram" {
        ["_bucket", "_sum", "_count"]
            .iter()
            .map(|s| format!("{name}{s}"))
            .collect()
    } else {
        vec![name.to_string()]
    }
}

fn unit_value(unit: &str, key: &str) -> Vec<String> {
    unit.lines()
        .filter_map(|l| l.trim().strip_prefix(&format!("{key}=")))
        .map(|v| v.trim().to_string())
        .collect()
}

/// systemd time span: "45s", "1min 30s", "45" (seconds).
fn unit_seconds(v: &str) -> u64 {
    let mut total = 0;
    for part in v.split_whitespace() {
        let digits: String = part.chars().take_while(|c| c.is_ascii_digit()).collect();
        let n: u64 = digits.parse().unwrap_or_else(|_| panic!("time span {v:?}"));
        total += match &part[digits.len()..] {
            "" | "s" | "sec" => n,
            "min" | "m" => n * 60,
            other => panic!("unit {other:?} in {v:?}"),
        };
    }
    total
}

fn example_config() -> gatewayd::config::Config {
    gatewayd::config::Config::load(&gatewayd::config::RunArgs {
        config: Some(repo(CONFIG)),
        // As a flag overrides the file's admin_token_file (the unit's
        // credential, read where systemd puts it: the node test below).
        admin_token: Some("a-flag-overrides-the-credential".into()),
        ..Default::default()
    })
    .unwrap_or_else(|e| panic!("{CONFIG} is not accepted: {e}"))
}

#[test]
fn example_config_parses_and_the_unit_fits_it() {
    let cfg = example_config();
    let unit = read(UNIT);

    // The stop timeout covers a whole SIGTERM drain: op 7 spread over
    // drain_spread_ms, then shutdown_grace_ms, then the worker's close
    // linger (2 s) and its last second (src/worker.rs LINGER_MS, finished()).
    let timeout = unit_value(&unit, "TimeoutStopSec");
    assert_eq!(timeout.len(), 1, "one TimeoutStopSec= in {UNIT}");
    let timeout_ms = unit_seconds(&timeout[0]) * 1000;
    let drain_ms = cfg.limits.drain_spread_ms + cfg.limits.shutdown_grace_ms + 3_000;
    assert!(
        timeout_ms >= drain_ms,
        "TimeoutStopSec={} is shorter than a drain with {CONFIG} ({drain_ms} ms)",
        timeout[0]
    );

    assert_eq!(
        unit_value(&unit, "ExecStart"),
        ["/usr/local/bin/gatewayd run --config /etc/gatewayd/gatewayd.toml"]
    );
    assert_eq!(unit_value(&unit, "KillSignal"), ["SIGTERM"]);
    // ProtectSystem=strict: the data dir of the example config must be writable.
    assert_eq!(unit_value(&unit, "ProtectSystem"), ["strict"]);
    let rw: Vec<String> = unit_value(&unit, "ReadWritePaths")
        .iter()
        .flat_map(|v| {
            v.split_whitespace()
                .map(|p| p.trim_start_matches('-').to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    let data_dir = cfg
        .data_dir
        .to_string_lossy()
        .trim_end_matches('/')
        .to_string();
    assert!(
        rw.contains(&data_dir),
        "data_dir {data_dir} not in ReadWritePaths {rw:?}"
    );
    // The io_uring system calls allowed by name (older systemd releases do not
    // have them in @system-service: see the unit).
    let filter = unit_value(&unit, "SystemCallFilter").join(" ");
    for call in ["io_uring_setup", "io_uring_enter", "io_uring_register"] {
        assert!(
            filter.split_whitespace().any(|w| w == call),
            "{call} not allowed in SystemCallFilter: {filter}"
        );
    }
    for key in ["LimitNOFILE", "LimitMEMLOCK", "User", "Restart"] {
        assert_eq!(unit_value(&unit, key).len(), 1, "{key}= once in {UNIT}");
    }
    // A node the service manager can run (node/notify.rs): it says when it
    // is ready and that it is alive, and its exit statuses drive restarts.
    assert_eq!(unit_value(&unit, "Type"), ["notify"]);
    assert_eq!(unit_value(&unit, "NotifyAccess"), ["main"]);
    assert_eq!(unit_value(&unit, "WatchdogSec").len(), 1, "WatchdogSec=");
    assert!(unit_seconds(&unit_value(&unit, "WatchdogSec")[0]) >= 2);
    assert_eq!(unit_value(&unit, "Restart"), ["on-failure"]);
    assert_eq!(unit_value(&unit, "RestartForceExitStatus"), ["75"]);
    assert_eq!(unit_value(&unit, "SuccessExitStatus"), ["75"]);
    assert_eq!(unit_value(&unit, "RestartPreventExitStatus"), ["78"]);
    // Every secret file the example config names is a credential of the unit.
    let text = read(CONFIG);
    let creds = unit_credentials();
    for line in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
        if let Some((key, value)) = line.split_once('=') {
            if key.trim().ends_with("_file") {
                let name = value.trim().trim_matches('"');
                assert!(
                    creds.iter().any(|c| c == name),
                    "{CONFIG} reads {name} but {UNIT} has no LoadCredential={name}:...: {creds:?}"
                );
            }
        }
    }
}

/// The credential names of the unit's `LoadCredential=name:path` lines.
fn unit_credentials() -> Vec<String> {
    unit_value(&read(UNIT), "LoadCredential")
        .iter()
        .map(|v| v.split_once(':').map_or(v.as_str(), |(n, _)| n).to_string())
        .collect()
}

#[test]
fn dashboard_is_importable() {
    let d = dashboard();
    assert!(d["schemaVersion"].as_u64().is_some(), "schemaVersion");
    assert!(d["title"].as_str().is_some(), "title");
    let inputs = d["__inputs"].as_array().expect("__inputs");
    assert!(
        inputs
            .iter()
            .any(|i| i["name"] == "DS_PROMETHEUS" && i["pluginId"] == "prometheus"),
        "a DS_PROMETHEUS datasource input"
    );
    let vars: Vec<&str> = d["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    for v in ["datasource", "instance", "worker"] {
        assert!(vars.contains(&v), "templating variable {v}: {vars:?}");
    }
    // The datasource variable defaults to the DS_PROMETHEUS chosen at import;
    // every panel and query uses the variable (so provisioning from a file works too).
    let ds = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "datasource")
        .unwrap();
    assert_eq!(ds["type"], "datasource");
    assert_eq!(ds["query"], "prometheus");
    assert_eq!(ds["current"]["value"], "${DS_PROMETHEUS}");
    let panels = d["panels"].as_array().expect("panels");
    let mut ids = BTreeSet::new();
    for p in panels {
        assert!(
            ids.insert(p["id"].as_u64().expect("panel id")),
            "panel id twice"
        );
        if p["type"] == "row" {
            continue;
        }
        let targets = p["targets"]
            .as_array()
            .unwrap_or_else(|| panic!("targets of {}", p["title"]));
        assert!(!targets.is_empty(), "panel {} has no query", p["title"]);
        assert_eq!(
            p["datasource"]["uid"], "${datasource}",
            "panel {}",
            p["title"]
        );
        for t in targets {
            assert_eq!(
                t["datasource"]["uid"], "${datasource}",
                "query of {}",
                p["title"]
            );
            assert!(
                t["expr"].as_str().is_some_and(|e| !e.is_empty()),
                "{}: empty expr",
                p["title"]
            );
        }
    }
}

#[test]
fn every_metric_of_the_alerts_and_the_dashboard_is_exported_and_the_example_config_runs() {
    // The example config as shipped: none of the tests' defaults, only
    // port 0 and a fresh data directory.
    let config = repo(CONFIG);
    // The unit's credentials (LoadCredential=): systemd puts each in a
    // directory of the service's own and names it in CREDENTIALS_DIRECTORY.
    let creds = tempfile::tempdir().unwrap();
    for name in unit_credentials() {
        std::fs::write(
            creds.path().join(&name),
            format!("{name}-0123456789abcdef\n"),
        )
        .unwrap();
    }
    let mut node = Node::start_exactly_with_env(
        &["--config", config.to_str().unwrap()],
        &[("CREDENTIALS_DIRECTORY", creds.path().to_str().unwrap())],
    );
    let (gateway, admin) = (node.gateway, node.admin);
    // The production config turns the demo off: nothing of it is seeded.
    assert!(!node.token_path().exists(), "{CONFIG} wrote a demo-token");
    let list = support::registry::Registry::new(node.dir.path()).text(&["list"]);
    assert!(
        !list.contains("\"demo-bot\""),
        "{CONFIG} seeded the demo:\n{list}"
    );

    // One refused WebSocket (encoding=etf: close 4002), so that
    // gatewayd_closes_total, which has series only for codes sent, has one.
    let (mut ws, _) = tungstenite::connect(format!("ws://{gateway}/?v=10&encoding=etf"))
        .expect("WebSocket upgrade");
    loop {
        match ws.read() {
            Ok(tungstenite::Message::Close(frame)) => {
                assert_eq!(frame.map(|f| u16::from(f.code)), Some(4002));
                break;
            }
            Ok(_) => continue,
            Err(e) => panic!("no close 4002 for encoding=etf: {e}"),
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let body = loop {
        let (status, body) = support::http::http_get(admin, "/metrics").expect("GET /metrics");
        assert_eq!(status, 200, "{body}");
        if body.contains("gatewayd_closes_total{") {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "close 4002 never counted in gatewayd_closes_total"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let samples: Vec<Sample> = gatewayd::ops::stats::parse(&body).expect("exposition");
    let series: BTreeSet<&str> = samples.iter().map(|s| s.name.as_str()).collect();
    let types: BTreeMap<&str, &str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .collect();
    // A series name's family type: its own TYPE, or its histogram's.
    let kind_of = |name: &str| -> Option<&str> {
        if let Some(k) = types.get(name) {
            return Some(k);
        }
        ["_bucket", "_sum", "_count"].iter().find_map(|s| {
            let base = name.strip_suffix(s)?;
            types.get(base).copied().filter(|k| *k == "histogram")
        })
    };

    // The family list check-ops.sh uses: real names, real types, and it
    // covers everything the alerts and the dashboard use.
    // (A family may be declared without series yet, e.g. gatewayd_closes_total
    // before the first close: the series the kit uses are checked below.)
    let list = family_list();
    for (name, kind) in &list {
        assert_eq!(
            types.get(name.as_str()).copied(),
            Some(kind.as_str()),
            "{FAMILIES}: {name} {kind} is not what /metrics says"
        );
    }
    let listed: BTreeSet<String> = list.iter().flat_map(|(n, k)| series_of(n, k)).collect();

    let mut problems = Vec::new();
    let mut checked = BTreeSet::new();
    for (file, uses) in kit_uses() {
        assert!(!uses.is_empty(), "{file}: no metric names found");
        for u in uses {
            checked.insert(u.name.clone());
            let is_histogram = types.get(u.name.as_str()) == Some(&"histogram");
            if !(series.contains(u.name.as_str()) || is_histogram) {
                problems.push(format!("{file}: {} is not in /metrics", u.name));
                continue;
            }
            if !(listed.contains(&u.name) || list.contains_key(&u.name)) {
                problems.push(format!(
                    "{file}: {} is exported but missing from {FAMILIES}",
                    u.name
                ));
            }
            if u.rated
                && kind_of(&u.name) != Some("counter")
                && !u.name.ends_with("_bucket")
                && !u.name.ends_with("_sum")
                && !u.name.ends_with("_count")
            {
                problems.push(format!(
                    "{file}: rate()/increase() of {} ({:?}), not a counter",
                    u.name,
                    kind_of(&u.name)
                ));
            }
            for (k, v) in &u.matchers {
                if k == "instance" || k == "job" {
                    continue; // added by Prometheus
                }
                if !samples
                    .iter()
                    .any(|s| s.name == u.name && s.label(k) == Some(v.as_str()))
                {
                    problems.push(format!(
                        "{file}: no {}{{{k}=\"{v}\"}} series in /metrics",
                        u.name
                    ));
                }
            }
            if let Some(label) = u
                .label_values
                .as_ref()
                .filter(|l| *l != "instance" && *l != "job")
            {
                if !samples
                    .iter()
                    .any(|s| s.name == u.name && s.label(label).is_some())
                {
                    problems.push(format!(
                        "{file}: label_values({}, {label}): no such label",
                        u.name
                    ));
                }
            }
        }
    }
    problems.sort();
    problems.dedup();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    eprintln!(
        "ops kit: {} metric names checked against a real scrape: {checked:?}",
        checked.len()
    );

    // SIGTERM with the example config's 30 s drain: no sessions, so the
    // workers stop at once; far inside TimeoutStopSec either way.
    let t = Instant::now();
    node.sigterm();
    let status = loop {
        if let Some(s) = node.child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > Duration::from_secs(45) {
            let _ = node.child.kill();
            panic!("gatewayd did not stop within 45 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(
        status.success(),
        "gatewayd exited with {status} after SIGTERM"
    );
    eprintln!("ops kit: SIGTERM to exit in {:?}", t.elapsed());
}
