//! Two gatewayd nodes sharing one real PostgreSQL registry: identifies on
//! either, and a revocation made with the CLI reaches both within a second
//! (pushed with LISTEN/NOTIFY). Needs GATEWAYD_TEST_DATABASE_URL (a role that
//! may CREATE DATABASE; `.ci/run` starts a server and sets it). Without it the
//! test is skipped locally and fails under CI.

mod support;

use std::time::{Duration, Instant};

use support::node::Node;
use support::registry::Registry;
use support::BOT_INTENTS;

#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn two_nodes_share_a_postgresql_registry_and_both_apply_a_revocation() {
    let (admin, url) = support::registry::pg_database();
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
    let mut on_a = support::bot::identify(a.gateway, "a", &a.token, BOT_INTENTS, None).unwrap();
    let mut on_b = support::bot::identify(b.gateway, "b", &a.token, BOT_INTENTS, None).unwrap();
    let (app, server) = (on_a.app_id(), on_a.first_server());
    assert!(!on_a
        .messages_until(Instant::now() + Duration::from_millis(300))
        .is_empty());
    assert!(!on_b
        .messages_until(Instant::now() + Duration::from_millis(300))
        .is_empty());

    // The CLI against the shared registry, as an operator would.
    Registry::with_url(a.dir.path(), Some(&url)).uninstall(app, server);
    let revoked = Instant::now();
    for (name, s) in [("a", &mut on_a), ("b", &mut on_b)] {
        let after = s.messages_until(revoked + Duration::from_millis(2000));
        if let Some(last) = after.last() {
            assert!(
                *last - revoked < Duration::from_secs(1),
                "node {name} stopped {:?} after the revocation",
                *last - revoked
            );
        }
    }
    for node in [&a, &b] {
        let m = support::metrics::metrics(node.admin);
        assert_eq!(
            support::metrics::metric_sum(&m, "gatewayd_revocation_apply_seconds_count", &[]),
            1.0
        );
    }
    drop((a, b));
    let mut client = postgres::Client::connect(&admin, postgres::NoTls).unwrap();
    let db = url.rsplit('/').next().unwrap();
    let _ = client.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"));
}
