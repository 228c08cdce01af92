//! Two gatewayd nodes sharing one real PostgreSQL registry: identifies on
//! either, and a revocation made with the CLI reaches both within a second
//! (pushed with LISTEN/NOTIFY). Needs GATEWAYD_TEST_DATABASE_URL (a role that
//! may CREATE DATABASE; `.ci/run` starts a server and sets it). Without it the
//! test is skipped locally and fails under CI.

mod common;
mod support;

use std::time::{Duration, Instant};

use common::Node;
use support::{intent, read_next, Next};

const INTENTS: u64 = intent::GUILDS | intent::GUILD_MESSAGES | intent::MESSAGE_CONTENT;

fn messages_until(s: &mut support::Session, until: Instant) -> Vec<Instant> {
    let mut at = Vec::new();
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        match read_next(&mut s.ws, left) {
            Next::Json(v) if v["t"] == "MESSAGE_CREATE" => at.push(Instant::now()),
            Next::Json(_) => {}
            Next::Timeout => break,
            other => panic!("session ended: {other:?}"),
        }
    }
    at
}

#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn two_nodes_share_a_postgresql_registry_and_both_apply_a_revocation() {
    let (admin, url) = support::pg_database();
    // Push only: the outbox poll is slowed to 10 s, so a stop within 1 s is NOTIFY's doing.
    let flags = [
        "--registry-url",
        url.as_str(),
        "--demo-interval-ms",
        "20",
        "--revocation-poll-ms",
        "10000",
    ];
    let a = Node::start(&flags);
    let b = Node::start(&flags);
    assert!(!a.token.is_empty(), "the first node created the demo bot");
    assert!(
        b.token.is_empty(),
        "the second found it and did not reset its token"
    );
    let mut on_a = support::identify(a.gateway, "a", &a.token, INTENTS, None).unwrap();
    let mut on_b = support::identify(b.gateway, "b", &a.token, INTENTS, None).unwrap();
    let app: u64 = on_a.ready["d"]["application"]["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let server: u64 = on_a.guild_creates[0]["id"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(!messages_until(&mut on_a, Instant::now() + Duration::from_millis(300)).is_empty());
    assert!(!messages_until(&mut on_b, Instant::now() + Duration::from_millis(300)).is_empty());

    // The CLI against the shared registry, as an operator would.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_gatewayd"))
        .args([
            "registry",
            "--registry-url",
            &url,
            "uninstall",
            "--app",
            &app.to_string(),
            "--server",
            &server.to_string(),
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let revoked = Instant::now();
    for (name, s) in [("a", &mut on_a), ("b", &mut on_b)] {
        let after = messages_until(s, revoked + Duration::from_millis(2000));
        if let Some(last) = after.last() {
            assert!(
                *last - revoked < Duration::from_secs(1),
                "node {name} stopped {:?} after the revocation",
                *last - revoked
            );
        }
    }
    for node in [&a, &b] {
        let m = support::metrics(node.admin);
        assert_eq!(
            support::metric_sum(&m, "gatewayd_revocation_apply_seconds_count", &[]),
            1.0
        );
    }
    drop((a, b));
    let mut client = postgres::Client::connect(&admin, postgres::NoTls).unwrap();
    let db = url.rsplit('/').next().unwrap();
    let _ = client.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"));
}
