//! The registry link against a real node: revocations pushed and applied,
//! a lost push bounded by the lease TTL, brownout, identify limits and node
//! admission. Revocations are made with the registry CLI, as an operator would.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;

use support::bot::{read_next, Next, Session};
use support::metrics::metric;
use support::node::Node;
use support::registry::Registry;
use support::{intent, BOT_INTENTS};

/// The demo bot's session, its application and its server.
fn demo(node: &Node) -> (Session, u64, u64) {
    let s = support::bot::identify(node.gateway, "demo", &node.token, BOT_INTENTS, None).unwrap();
    let (app, server) = (s.app_id(), s.first_server());
    (s, app, server)
}

/// Where the node's registry lives: the embedded file, or a fresh database
/// on the test PostgreSQL server. Every test here runs on both.
struct Backend {
    url: Option<String>,
}

impl Backend {
    fn start(&self, extra: &[&str]) -> Node {
        let mut flags: Vec<&str> = extra.to_vec();
        if let Some(url) = &self.url {
            flags.extend(["--registry-url", url.as_str()]);
        }
        Node::start(&flags)
    }

    fn registry(&self, node: &Node) -> Registry {
        Registry::with_url(node.dir.path(), self.url.as_deref())
    }
}

macro_rules! on_both_registries {
    ($($name:ident),* $(,)?) => {
        mod embedded {
            $(#[test]
            fn $name() {
                super::$name(&super::Backend { url: None })
            })*
        }
        mod postgres {
            $(#[test]
            #[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
            fn $name() {
                let (_, url) = super::support::registry::pg_database();
                super::$name(&super::Backend { url: Some(url) })
            })*
        }
    };
}

on_both_registries!(
    a_narrowed_grant_applies_at_once,
    a_pushed_revocation_stops_delivery_within_a_second,
    a_lost_push_is_bounded_by_the_lease_ttl,
    brownout_keeps_existing_sessions_for_a_while_and_refuses_new_ones,
    identify_buckets_and_the_daily_limit,
    node_admission_refuses_a_storm_beyond_its_rate,
    a_token_reset_closes_sessions_with_4004_and_withdrawn_intents_with_4014
);

fn a_pushed_revocation_stops_delivery_within_a_second(backend: &Backend) {
    let node = backend.start(&["--demo-interval-ms", "20"]);
    let (mut s, app, server) = demo(&node);
    assert!(
        !s.messages_until(Instant::now() + Duration::from_millis(300))
            .is_empty(),
        "events flow"
    );
    backend.registry(&node).uninstall(app, server);
    let revoked = Instant::now();
    let after = s.messages_until(revoked + Duration::from_millis(2500));
    if let Some(last) = after.last() {
        assert!(
            *last - revoked < Duration::from_secs(1),
            "events stopped {:?} after the revocation",
            *last - revoked
        );
    }
    assert_eq!(metric(&node, "gatewayd_revocations_total"), 1.0);
    assert_eq!(
        metric(&node, "gatewayd_revocation_apply_seconds_count"),
        1.0,
        "write-to-applied latency measured"
    );
}

fn a_lost_push_is_bounded_by_the_lease_ttl(backend: &Backend) {
    // No outbox polling: only lease renewal can notice the uninstall.
    let node = backend.start(&[
        "--demo-interval-ms",
        "20",
        "--revocation-poll-ms",
        "0",
        "--lease-ttl-ms",
        "1500",
    ]);
    let (mut s, app, server) = demo(&node);
    s.messages_until(Instant::now() + Duration::from_millis(1200)); // a renewal or two
    backend.registry(&node).uninstall(app, server);
    let revoked = Instant::now();
    let after = s.messages_until(revoked + Duration::from_millis(4000));
    let last = *after
        .last()
        .expect("without the push, events go on until the lease lapses");
    assert!(
        last - revoked > Duration::from_millis(200),
        "the push really was off"
    );
    assert!(
        last - revoked <= Duration::from_millis(1500 + 600),
        "stopped {:?} after revocation: TTL bounds it",
        last - revoked
    );
    assert!(metric(&node, "gatewayd_leases_lost_total") >= 1.0);
}

fn brownout_keeps_existing_sessions_for_a_while_and_refuses_new_ones(backend: &Backend) {
    let node = backend.start(&[
        "--demo-interval-ms",
        "50",
        "--fault-injection",
        "--lease-ttl-ms",
        "1000",
        "--brownout-max-ms",
        "3000",
    ]);
    let (mut s, _, _) = demo(&node);
    s.messages_until(Instant::now() + Duration::from_millis(400));
    let (status, _) =
        support::http::http_request(node.admin, "POST", "/fault/registry", &[]).unwrap();
    assert_eq!(status, 200);
    let down = Instant::now();
    // A new identify during the outage is told to back off.
    let refused = support::bot::identify(node.gateway, "new", &node.token, BOT_INTENTS, None)
        .err()
        .expect("refused");
    assert!(
        refused.contains("\"op\":9") && refused.contains("\"d\":false"),
        "{refused}"
    );
    // The existing session keeps receiving past its lease TTL ...
    let during = s.messages_until(down + Duration::from_millis(2200));
    assert!(
        during
            .iter()
            .any(|t| *t - down > Duration::from_millis(1500)),
        "leases extended in brownout"
    );
    // ... but not past brownout_max.
    let late = s.messages_until(down + Duration::from_millis(5500));
    assert!(
        late.iter()
            .all(|t| *t - down < Duration::from_millis(3000 + 600)),
        "stopped at brownout_max"
    );
    assert_eq!(metric(&node, "gatewayd_registry_brownout"), 1.0);
    assert!(metric(&node, "gatewayd_identifies_refused_brownout_total") >= 1.0);
    // The registry comes back: leases are renewed and events flow again.
    let (status, _) =
        support::http::http_request(node.admin, "POST", "/fault/registry?down=0", &[]).unwrap();
    assert_eq!(status, 200);
    let back = s.messages_until(Instant::now() + Duration::from_millis(2500));
    assert!(
        !back.is_empty(),
        "delivery resumes after the registry recovers"
    );
    assert_eq!(metric(&node, "gatewayd_registry_brownout"), 0.0);
}

fn identify_buckets_and_the_daily_limit(backend: &Backend) {
    let node = backend.start(&["--no-demo-traffic", "--identify-limits", "on"]);
    let reg = backend.registry(&node);
    let (_, _, server) = demo(&node);
    let a = reg.add_app_with("bucketed", 0, 2);
    reg.install(a.id, server, None);
    let ok = |shard: u32| {
        support::bot::identify(
            node.gateway,
            "a",
            &a.token,
            BOT_INTENTS & !intent::MESSAGE_CONTENT,
            Some((shard, 4)),
        )
    };
    let s0 = ok(0).expect("bucket 0");
    let refused = ok(2).err().expect("bucket 0 again within 5 s");
    assert!(refused.contains("\"op\":9"), "{refused}");
    let s1 = ok(1).expect("bucket 1 is its own");
    assert!(metric(&node, "gatewayd_identifies_refused_concurrency_total") >= 1.0);

    let b = reg.add_app_with("budget", 0, 16);
    reg.install(b.id, server, None);
    reg.run(&[
        "set-limits",
        "--app",
        &b.id.to_string(),
        "--session-start-total",
        "2",
    ]);
    let id = |shard: u32| {
        support::bot::identify(
            node.gateway,
            "b",
            &b.token,
            intent::GUILDS,
            Some((shard, 16)),
        )
    };
    let _b0 = id(0).expect("first start");
    let _b1 = id(1).expect("second start");
    let refused = id(2).err().expect("third start is over the daily budget");
    assert!(refused.contains("\"op\":9"), "{refused}");
    assert!(metric(&node, "gatewayd_identifies_refused_daily_limit_total") >= 1.0);
    let (status, body) = support::http::http_request(
        node.gateway,
        "GET",
        "/api/v10/gateway/bot",
        &[("Authorization", &format!("Bot {}", b.token))],
    )
    .unwrap();
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["session_start_limit"]["remaining"], 0);
    assert_eq!(v["session_start_limit"]["total"], 2);
    assert!(v["session_start_limit"]["reset_after"].as_u64().unwrap() > 0);
    drop((s0, s1));
}

fn node_admission_refuses_a_storm_beyond_its_rate(backend: &Backend) {
    let node = backend.start(&["--no-demo-traffic", "--admission-per-second", "2"]);
    let (mut ready, mut refused) = (0, 0);
    let mut held = Vec::new();
    for i in 0..8 {
        match support::bot::identify(
            node.gateway,
            &format!("s{i}"),
            &node.token,
            intent::GUILDS,
            None,
        ) {
            Ok(s) => {
                ready += 1;
                held.push(s);
            }
            Err(e) => {
                assert!(e.contains("\"op\":9"), "{e}");
                refused += 1;
            }
        }
    }
    assert!(
        (1..=4).contains(&ready),
        "about two per second admitted: {ready} ready, {refused} refused"
    );
    assert!(metric(&node, "gatewayd_identifies_refused_admission_total") >= 4.0);
}

fn a_token_reset_closes_sessions_with_4004_and_withdrawn_intents_with_4014(backend: &Backend) {
    let node = backend.start(&["--no-demo-traffic"]);
    let reg = backend.registry(&node);
    let (_, _, server) = demo(&node);
    let a = reg.add_app("resettable", intent::MESSAGE_CONTENT);
    reg.install(a.id, server, None);
    let mut with_content =
        support::bot::identify(node.gateway, "c", &a.token, BOT_INTENTS, None).unwrap();
    let mut without =
        support::bot::identify(node.gateway, "p", &a.token, intent::GUILDS, None).unwrap();
    reg.run(&[
        "set-intents",
        "--app",
        &a.id.to_string(),
        "--privileged-intents",
        "0",
    ]);
    match read_next(&mut with_content.ws, Duration::from_secs(3)) {
        Next::Close(Some((code, _))) => assert_eq!(code, 4014),
        other => panic!("expected close 4014, got {other:?}"),
    }
    reg.run(&["reset-token", "--app", &a.id.to_string()]);
    match read_next(&mut without.ws, Duration::from_secs(3)) {
        Next::Close(Some((code, _))) => assert_eq!(code, 4004),
        other => panic!("expected close 4004, got {other:?}"),
    }
}

fn a_narrowed_grant_applies_at_once(backend: &Backend) {
    let node = backend.start(&["--demo-interval-ms", "20"]);
    let (mut s, app, server) = demo(&node);
    assert!(
        !s.messages_until(Instant::now() + Duration::from_millis(300))
            .is_empty(),
        "events flow"
    );
    // Re-install with a grant without VIEW_CHANNEL: the bot can no longer see #general.
    backend
        .registry(&node)
        .install(app, server, Some(support::perm::SEND_MESSAGES));
    let narrowed = Instant::now();
    let after = s.messages_until(narrowed + Duration::from_millis(2500));
    if let Some(last) = after.last() {
        assert!(
            *last - narrowed < Duration::from_secs(1),
            "events stopped {:?} after the change",
            *last - narrowed
        );
    }
    // And widening it again brings them back (the new grant is pushed too).
    backend
        .registry(&node)
        .install(app, server, Some(support::perm::INSTALL_DEFAULT));
    assert!(
        !s.messages_until(Instant::now() + Duration::from_millis(2000))
            .is_empty(),
        "events flow again"
    );
}
