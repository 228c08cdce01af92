//! The loadgen scenarios at a small scale (hundreds of sessions, seconds),
//! each run once where its claim must hold and once where it must not, so
//! the pass/fail logic is checked both ways. They start this build's
//! gatewayd as child processes, like `loadgen scenario NAME` does. The
//! revocation and rolling-release scenarios need PostgreSQL
//! (GATEWAYD_TEST_DATABASE_URL; `.ci/run` provides it), `storm --recovery`
//! also Redis and Tansu (GATEWAYD_TEST_REDIS_SERVER, GATEWAYD_TEST_TANSU);
//! without them those tests are skipped locally and fail under CI.

mod support;

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use loadgen::producer::Dist;
use loadgen::report::Report;
use loadgen::scenario::{
    self, Common, RecoveryOpts, RevocationOpts, RollingOpts, SlowOpts, StormOpts, Which,
};

/// One scenario at a time: each starts nodes and a fleet on 2 cores.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn common(name: &str, sessions: u32, rate: f64) -> (Common, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let c = Common {
        sessions,
        rate,
        seconds: 3.0,
        warmup: 1.0,
        payload: 400,
        dist: Dist::Zipf(1.0),
        out: dir.path().join(name),
        gatewayd: Some(PathBuf::from(env!("CARGO_BIN_EXE_gatewayd"))),
        registry_url: None,
        sources: vec![],
        threads: 2,
        workers: 2,
        node_args: vec![],
        attach: None,
        timeout: Duration::from_secs(240),
        connect_timeout: Duration::from_secs(120),
        command: format!("test {name}"),
        max_p50_ms: 120.0,
        max_p99_ms: 800.0,
        coordinator: None,
    };
    (c, dir)
}

/// Runs it and returns (passed, the report it wrote).
fn run(which: Which, c: Common) -> (bool, Report) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = c.out.clone();
    let passed = scenario::run(which, c).expect("the scenario runs");
    let report = Report::read_json(&out.join("result.json")).expect("result.json");
    let html = std::fs::read_to_string(out.join("report.html")).expect("report.html");
    assert!(html.contains("<svg"), "the HTML report has its charts");
    assert!(out.join("summary.txt").exists());
    assert_eq!(report.passed, passed);
    (passed, report)
}

fn claim<'a>(r: &'a Report, name: &str) -> &'a loadgen::report::Claim {
    r.claims
        .iter()
        .find(|c| c.name.contains(name))
        .unwrap_or_else(|| panic!("no claim {name:?} in {:#?}", r.claims))
}

fn figure(r: &Report, group: &str, name: &str) -> f64 {
    r.figures
        .iter()
        .find(|f| f.group == group && f.name == name)
        .unwrap_or_else(|| panic!("no figure {group}/{name}"))
        .value
}

#[test]
fn steady_passes_and_fails_on_its_latency_bound() {
    let (c, _d) = common("steady", 200, 100.0);
    let (passed, r) = run(Which::Steady(None), c);
    assert!(passed, "{}", r.text_summary());
    assert_eq!(figure(&r, "", "sessions READY"), 200.0);
    assert!(figure(&r, "", "deliveries per second") > 0.0);
    assert_eq!(r.latency.len(), 1);
    assert!(r.latency[0].count > 0);

    // The same run with an impossible p99 bound must fail on that claim alone.
    let (mut c, _d) = common("steady-fail", 200, 100.0);
    c.max_p99_ms = 0.001;
    let (passed, r) = run(Which::Steady(None), c);
    assert!(!passed);
    assert!(!claim(&r, "delivery latency p99").passed);
    assert!(claim(&r, "every session reaches READY").passed);
    assert!(claim(&r, "every event is one the session is entitled to").passed);
}

#[test]
fn storm_every_session_comes_back_and_the_bound_is_enforced() {
    let (c, _d) = common("storm", 200, 50.0);
    let opts = StormOpts {
        nodes: 2,
        throttle: "both".into(),
        max_back_secs: 120.0,
        max_registry_p99_ms: 1000.0,
        recovery: None,
    };
    let (passed, r) = run(Which::Storm(opts.clone()), c);
    assert!(passed, "{}", r.text_summary());
    for g in ["throttle on", "throttle off"] {
        assert_eq!(figure(&r, g, "sessions back"), 200.0, "{g}");
        assert!(figure(&r, g, "time until all back") > 0.0);
    }

    let (c, _d) = common("storm-fail", 200, 50.0);
    let (passed, r) = run(
        Which::Storm(StormOpts {
            throttle: "off".into(),
            max_back_secs: 0.2,
            ..opts
        }),
        c,
    );
    assert!(!passed);
    assert!(!claim(&r, "every session resumes or re-identifies").passed);
}

#[test]
fn slow_consumer_is_closed_and_a_fast_one_is_not() {
    let opts = SlowOpts {
        hot_rate: 1000.0,
        slow_percent: 1.0,
        max_close_secs: 60.0,
        max_added_p99_ms: 200.0,
        max_added_rss_mib: 256.0,
    };
    let (c, _d) = common("slow", 200, 50.0);
    let (passed, r) = run(Which::SlowConsumer(opts.clone()), c);
    assert!(passed, "{}", r.text_summary());
    assert!(figure(&r, "with the slow bot", "node: slow-consumer closes") >= 1.0);
    assert_eq!(
        figure(&r, "without (baseline)", "node: slow-consumer closes"),
        0.0
    );

    // Reading everything it is sent, the "slow" bot is never closed: the
    // claim must fail (and say so), everything else still holds.
    let (mut c, _d) = common("slow-fail", 200, 50.0);
    c.seconds = 3.0;
    let (passed, r) = run(
        Which::SlowConsumer(SlowOpts {
            slow_percent: 1000.0,
            max_close_secs: 8.0,
            ..opts
        }),
        c,
    );
    assert!(!passed);
    let cl = claim(&r, "closed resumably");
    assert!(!cl.passed, "{cl:?}");
    assert!(claim(&r, "memory stays bounded").passed);
}

#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn revocation_lands_and_its_bound_is_enforced() {
    let (url, _db) = support::registry::pg_database();
    let opts = RevocationOpts {
        hot_rate: 100.0,
        brownout_latency_ms: 300,
        max_stop_secs: 10.0,
        brownout_max_ms: 4000,
        lease_ttl_ms: 2000,
    };
    let (mut c, _d) = common("revocation", 200, 20.0);
    c.registry_url = Some(url.clone());
    let (passed, r) = run(Which::Revocation(opts.clone()), c);
    assert!(passed, "{}", r.text_summary());
    let pushed = figure(&r, "pushed", "last event after the revoke");
    assert!((0.0..=10.0).contains(&pushed), "{pushed}");

    // A bound no revocation can meet (the pushed one can land before the
    // next event, i.e. "0 s"): the claim must fail.
    let (url, _db2) = support::registry::pg_database();
    let (mut c, _d) = common("revocation-fail", 200, 20.0);
    c.registry_url = Some(url);
    let (passed, r) = run(
        Which::Revocation(RevocationOpts {
            max_stop_secs: -1.0,
            ..opts
        }),
        c,
    );
    assert!(!passed);
    assert!(!claim(&r, "pushed: the revoked bot stops receiving").passed);
}

#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn rolling_release_resumes_every_session_on_the_other_node() {
    let (url, _db) = support::registry::pg_database();
    let opts = RollingOpts {
        nodes: 2,
        drain_spread_ms: 2_000,
        settle_secs: 2.0,
        ..RollingOpts::default()
    };
    let (mut c, _d) = common("rolling", 200, 100.0);
    c.registry_url = Some(url);
    let (passed, r) = run(Which::RollingRelease(opts.clone()), c);
    assert!(passed, "{}", r.text_summary());
    for g in ["drain A", "drain B"] {
        let held = figure(&r, g, "sessions on the drained node");
        assert!(held > 0.0, "{g}");
        assert_eq!(figure(&r, g, "RESUMED"), held, "{g}");
        assert_eq!(figure(&r, g, "identifies sent"), 0.0, "{g}");
        assert!(figure(&r, g, "hand-offs in (other nodes)") >= held, "{g}");
    }
    // The second drain moves every session, including those a node that
    // was restarted once took over.
    assert_eq!(figure(&r, "drain B", "sessions on the drained node"), 200.0);

    // A bound no drain can meet: the claim must fail.
    let (url, _db2) = support::registry::pg_database();
    let (mut c, _d) = common("rolling-fail", 200, 100.0);
    c.registry_url = Some(url);
    let (passed, r) = run(
        Which::RollingRelease(RollingOpts {
            back_margin_secs: -2.0,
            ..opts
        }),
        c,
    );
    assert!(!passed);
    assert!(!claim(&r, "drain A: all back within").passed);
}

#[test]
#[ignore = "needs PostgreSQL, Redis and Tansu: run scripts/test-all.sh (GATEWAYD_TEST_DATABASE_URL, GATEWAYD_TEST_REDIS_SERVER, GATEWAYD_TEST_TANSU)"]
fn storm_with_crash_recovery_resumes_on_the_survivor_or_says_why_not() {
    let (url, _db) = support::registry::pg_database();
    let (mut c, _d) = common("storm-recovery", 200, 50.0);
    c.registry_url = Some(url);
    let opts = StormOpts {
        nodes: 2,
        throttle: "on".into(),
        max_back_secs: 120.0,
        max_registry_p99_ms: 1000.0,
        recovery: Some(RecoveryOpts::default()),
    };
    // Not `run`: a run that measured nothing has no charts.
    let (passed, r) = {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let out = c.out.clone();
        let passed = scenario::run(Which::Storm(opts), c).expect("the scenario runs");
        let r = Report::read_json(&out.join("result.json")).expect("result.json");
        assert!(out.join("summary.txt").exists() && out.join("report.html").exists());
        assert_eq!(r.passed, passed);
        (passed, r)
    };
    // Crash recovery is in this gatewayd: refusing the configuration is a
    // failure, not a reason to skip.
    let accepted = claim(&r, "accept the crash-recovery configuration");
    assert!(accepted.passed, "{accepted:?}");
    assert!(passed, "{}", r.text_summary());
    assert!(figure(&r, "recovery", "RESUMED share of node A's sessions") >= 99.0);
}
