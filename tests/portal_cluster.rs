//! The developer portal across a cluster (docs/portal.md, "Several
//! nodes"): two real nodes on one real PostgreSQL registry, bots connected
//! to each; node A's portal shows both nodes' sessions by node and shard
//! (asked on the node-to-node link), names a frozen node as not answering
//! within its deadline, and never shows one application's figures to
//! another's token. Needs GATEWAYD_TEST_DATABASE_URL
//! (`scripts/pg-test-server.sh start`).

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::bot;
use support::cluster::Cluster;
use support::metrics::{metric_sum, metrics};
use support::node::Node;
use support::portal::{self, sign_in};
use support::registry::Registry;
use support::{wait_until, BOT_INTENTS};

/// (node, shard, live, degraded) rows of the cluster table.
fn by_node_shard(h: &Value) -> Vec<(u64, Value, u64, u64)> {
    let mut rows: Vec<_> = h["cluster"]["by_node_shard"]
        .as_array()
        .unwrap_or(&Vec::new())
        .iter()
        .map(|r| {
            (
                r["node"].as_u64().unwrap(),
                r["shard"].clone(),
                r["live"].as_u64().unwrap(),
                r["degraded"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    rows.sort_by_key(|r| (r.0, r.1.to_string()));
    rows
}

fn node_number(n: &Node) -> u64 {
    metric_sum(&metrics(n.admin), "gatewayd_cluster_node", &[]) as u64
}

#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn the_portal_shows_every_nodes_sessions_and_names_a_frozen_node() {
    let c = Cluster::start(&[]);
    let (na, nb) = (node_number(&c.a), node_number(&c.b));
    assert!(na != 0 && nb != 0 && na != nb, "{na} {nb}");
    // Another application, with a bot of its own on B.
    let reg = Registry::with_url(c.a.dir.path(), Some(&c.url));
    let other = reg.add_app("other", 0);

    // The demo bot: shard [0, 2] on A, shard [1, 2] on B.
    let _on_a = bot::identify(c.a.gateway, "a", &c.a.token, BOT_INTENTS, Some((0, 2))).unwrap();
    let _on_b = bot::identify(c.b.gateway, "b", &c.a.token, BOT_INTENTS, Some((1, 2))).unwrap();
    let _other_b = bot::identify(c.b.gateway, "o", &other.token, 1 | (1 << 9), None).unwrap();

    let pa = portal::addr(&c.a);
    let demo = sign_in(pa, &c.a.token).unwrap();
    let mine = sign_in(pa, &other.token).unwrap();
    let want = vec![(na, json!([0, 2]), 1, 0), (nb, json!([1, 2]), 1, 0)];
    let seen = wait_until(Duration::from_secs(10), || {
        by_node_shard(&demo.health()) == want
    });
    let h = demo.health();
    assert!(seen.is_some(), "{:#}", h["cluster"]);
    let cl = &h["cluster"];
    assert_eq!(cl["node"], na);
    assert_eq!(cl["totals"]["live"], 2, "{cl:#}");
    assert_eq!(cl["totals"]["nodes_answered"], 2);
    assert_eq!(cl["not_answering"], json!([]));
    let nodes = cl["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    assert!(
        nodes
            .iter()
            .all(|n| n["answered"] == true && n["live"] == 1),
        "{cl:#}"
    );
    // Link addresses are the operator's: not in what a bot's author sees.
    assert!(nodes.iter().all(|n| n.get("link").is_none()), "{cl:#}");
    assert!(!cl.to_string().contains("\"link\""), "{cl:#}");
    // This node's own figures stay as they were (its sessions only).
    assert_eq!(h["sessions"]["live"], 1);

    // The other application sees its own session on B, and nothing of the demo's.
    let o = wait_until(Duration::from_secs(10), || {
        by_node_shard(&mine.health()) == vec![(nb, json!([0, 1]), 1, 0)]
    });
    let oh = mine.health();
    assert!(o.is_some(), "{:#}", oh["cluster"]);
    assert_eq!(oh["cluster"]["totals"]["live"], 1);
    assert_eq!(oh["sessions"]["live"], 0);
    assert_eq!(
        oh["cluster"]["totals"]["identifies_hour"], 1,
        "its one identify, on B"
    );
    assert_eq!(h["cluster"]["totals"]["identifies_hour"], 2);

    // Many polls in a second: B is asked about once per application.
    let before = metric_sum(
        &metrics(c.a.admin),
        "gatewayd_portal_cluster_asks_total",
        &[],
    );
    std::thread::sleep(Duration::from_millis(1100));
    for _ in 0..20 {
        demo.health();
    }
    let asks = metric_sum(
        &metrics(c.a.admin),
        "gatewayd_portal_cluster_asks_total",
        &[],
    ) - before;
    assert!(
        (1.0..=2.0).contains(&asks),
        "20 polls made {asks} link calls"
    );
    assert!(
        metric_sum(
            &metrics(c.b.admin),
            "gatewayd_cluster_figures_served_total",
            &[]
        ) >= 2.0
    );

    // B frozen: A's page still answers, within its deadline, naming B.
    // SAFETY: kill(2) of our own child; Two's drop continues it.
    unsafe { libc::kill(c.b.child.id() as i32, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_millis(1100)); // past the cache
    let t0 = Instant::now();
    let frozen = demo.health();
    let took = t0.elapsed();
    assert!(took < Duration::from_millis(1000), "the page took {took:?}");
    let cl = &frozen["cluster"];
    assert_eq!(
        cl["not_answering"],
        json!([{"node": nb, "why": "no answer in time"}]),
        "{cl:#}"
    );
    assert_eq!(cl["totals"]["live"], 1);
    assert_eq!(cl["totals"]["nodes_answered"], 1);
    assert_eq!(by_node_shard(&frozen), vec![(na, json!([0, 2]), 1, 0)]);
    // Not asked again for 3 s: the next refresh does not wait for it.
    std::thread::sleep(Duration::from_millis(1100));
    let t0 = Instant::now();
    let again = demo.health();
    let took = t0.elapsed();
    assert!(took < Duration::from_millis(250), "the page took {took:?}");
    assert_eq!(again["cluster"]["not_answering"][0]["node"], nb);
    let page = demo.get("/").body;
    assert!(page.contains("Across the cluster") && page.contains("by-node-shard"));

    // Its claim lapses (5 s): still named, as gone, not silently dropped.
    let gone = wait_until(Duration::from_secs(12), || {
        demo.health()["cluster"]["not_answering"][0]["why"]
            .as_str()
            .is_some_and(|w| w.starts_with("no longer in the cluster"))
    });
    assert!(gone.is_some(), "{:#}", demo.health()["cluster"]);

    // B awake again: it renews its claim and answers.
    // SAFETY: as above.
    unsafe { libc::kill(c.b.child.id() as i32, libc::SIGCONT) };
    let back = wait_until(Duration::from_secs(10), || {
        demo.health()["cluster"]["totals"]["nodes_answered"] == 2
    });
    assert!(back.is_some(), "{:#}", demo.health()["cluster"]);
    assert_eq!(demo.health()["cluster"]["not_answering"], json!([]));
}

/// Sessions one by one across the cluster: A's page lists the session on
/// B with B's number, never another application's; a Resume on B of A's
/// session moves it, and the timeline has both halves of the hand-off.
#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn the_session_list_spans_the_nodes_and_shows_a_hand_off() {
    let c = Cluster::start(&[]);
    let (na, nb) = (node_number(&c.a), node_number(&c.b));
    let reg = Registry::with_url(c.a.dir.path(), Some(&c.url));
    let other = reg.add_app("other", 0);
    let on_a = bot::identify(c.a.gateway, "a", &c.a.token, BOT_INTENTS, Some((0, 2))).unwrap();
    let on_b = bot::identify(c.b.gateway, "b", &c.a.token, BOT_INTENTS, Some((1, 2))).unwrap();
    let theirs = bot::identify(c.b.gateway, "o", &other.token, 1 | (1 << 9), None).unwrap();
    let demo = sign_in(portal::addr(&c.a), &c.a.token).unwrap();
    let nodes_of = |p: &Value| -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = p["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["session_id"].as_str().unwrap().to_string(),
                    s["node"].as_u64().unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let mut want = vec![(on_a.session_id.clone(), na), (on_b.session_id.clone(), nb)];
    want.sort();
    let seen = wait_until(Duration::from_secs(10), || {
        nodes_of(&demo.get("/api/sessions").json()) == want
    });
    let p = demo.get("/api/sessions").json();
    assert!(seen.is_some(), "{p:#}");
    assert_eq!(p["total"], 2);
    assert!(
        !p.to_string().contains(&theirs.session_id),
        "another application's session"
    );
    let identifies: Vec<u64> = p["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["event"] == "identify")
        .map(|e| e["node"].as_u64().unwrap())
        .collect();
    assert!(
        identifies.contains(&na) && identifies.contains(&nb),
        "{p:#}"
    );

    // The bot's connection to A drops; it resumes on B: the session moves.
    let (sid, seq) = (on_a.session_id.clone(), on_a.seq);
    drop(on_a);
    let mut ws = bot::connect(c.b.gateway);
    assert_eq!(bot::recv(&mut ws)["op"], 10);
    bot::send_json(
        &mut ws,
        &json!({"op": 6, "d": {"token": format!("Bot {}", c.a.token), "session_id": sid, "seq": seq}}),
    );
    let resumed = (0..10).any(|_| bot::recv(&mut ws)["t"] == "RESUMED");
    assert!(resumed, "no RESUMED on B");
    let moved = wait_until(Duration::from_secs(10), || {
        let p = demo.get("/api/sessions").json();
        let t = p["timeline"].to_string();
        nodes_of(&p).contains(&(sid.clone(), nb))
            && t.contains("hand_off_in")
            && t.contains("hand_off_out")
    });
    let p = demo.get("/api/sessions").json();
    assert!(moved.is_some(), "{p:#}");
    let halves: Vec<(String, u64)> = p["timeline"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["session_id"] == sid.as_str() && e["event"].as_str().unwrap().starts_with("hand_off")
        })
        .map(|e| {
            (
                e["event"].as_str().unwrap().to_string(),
                e["node"].as_u64().unwrap(),
            )
        })
        .collect();
    assert!(halves.contains(&("hand_off_out".into(), na)), "{halves:?}");
    assert!(halves.contains(&("hand_off_in".into(), nb)), "{halves:?}");
    drop((ws, on_b, theirs));
}

/// With mutual TLS on the link (docs/cluster.md), node A's portal still
/// gets B's figures: the portal dials with the node's certificate.
#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn the_cluster_view_is_asked_over_mutual_tls() {
    use gatewayd::cert_cli::{new_ca, new_node};
    let dir = tempfile::tempdir().unwrap();
    let path = |f: &str| dir.path().join(f).to_str().unwrap().to_string();
    let ca = new_ca(30).unwrap();
    std::fs::write(path("ca.pem"), &ca.cert).unwrap();
    for name in ["a", "b"] {
        let n = new_node(&ca.key, "127.0.0.1".parse().unwrap(), -1, 30).unwrap();
        std::fs::write(path(&format!("{name}.pem")), &n.cert).unwrap();
        std::fs::write(path(&format!("{name}.key")), &n.key).unwrap();
    }
    let c = Cluster::start_with(|name| {
        vec![
            "--cluster-tls-cert".into(),
            path(&format!("{name}.pem")),
            "--cluster-tls-key".into(),
            path(&format!("{name}.key")),
            "--cluster-tls-ca".into(),
            path("ca.pem"),
        ]
    });
    let nb = node_number(&c.b);
    let _on_b = bot::identify(c.b.gateway, "b", &c.a.token, BOT_INTENTS, Some((1, 2))).unwrap();
    let demo = sign_in(portal::addr(&c.a), &c.a.token).unwrap();
    let seen = wait_until(Duration::from_secs(10), || {
        by_node_shard(&demo.health()).contains(&(nb, json!([1, 2]), 1, 0))
    });
    assert!(seen.is_some(), "{:#}", demo.health()["cluster"]);
    let mb = metrics(c.b.admin);
    assert!(metric_sum(&mb, "gatewayd_cluster_figures_served_total", &[]) >= 1.0);
    assert_eq!(
        metric_sum(&mb, "gatewayd_cluster_link_refused_total", &[]),
        0.0
    );
}

#[test]
fn a_node_outside_a_cluster_has_no_cluster_view() {
    let node = Node::start(&["--no-demo-traffic"]);
    let s = sign_in(portal::addr(&node), &node.token).unwrap();
    assert_eq!(s.health()["cluster"], Value::Null);
    assert!(!s.get("/").body.contains("Across the cluster"));
}

fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let f: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    // utime and stime (fields 14 and 15) are 12 and 13 after the command.
    (f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()) as f64 / 100.0
}

/// The cluster view's cost, for docs/portal.md: two nodes, 100 bots on B,
/// 100 signed-in pages on A polling every 2 s (what the page does): for
/// 100 applications, and for 100 pages of one application; against both
/// nodes idle.
#[test]
#[ignore = "measurement for docs/portal.md, run by hand: cargo test --release --test portal_cluster cluster_cost -- --ignored --nocapture (needs GATEWAYD_TEST_DATABASE_URL)"]
fn cluster_cost_figures() {
    const APPS: usize = 100;
    const SECS: u64 = 30;
    let c = Cluster::start(&[]);
    let reg = Registry::with_url(c.a.dir.path(), Some(&c.url));
    let (server, _) = reg.add_server("cost");
    let (pa, mut many, mut bots) = (portal::addr(&c.a), Vec::new(), Vec::new());
    for i in 0..APPS {
        let app = reg.add_app(&format!("cost-{i}"), 0);
        reg.install(app.id, server, None);
        bots.push(bot::identify(c.b.gateway, "cost", &app.token, 1 | (1 << 9), None).unwrap());
        many.push(sign_in(pa, &app.token).unwrap());
    }
    let one: Vec<_> = (0..APPS)
        .map(|_| sign_in(pa, &c.a.token).unwrap())
        .collect();
    let asks = || {
        metric_sum(
            &metrics(c.a.admin),
            "gatewayd_portal_cluster_asks_total",
            &[],
        )
    };
    let window = |pages: &[portal::Signed]| {
        let (a0, b0, k0) = (
            cpu_seconds(c.a.child.id()),
            cpu_seconds(c.b.child.id()),
            asks(),
        );
        let t0 = Instant::now();
        let mut polls = 0;
        while t0.elapsed() < Duration::from_secs(SECS) {
            let round = Instant::now();
            for p in pages {
                let h = p.health();
                assert_eq!(h["cluster"]["not_answering"], json!([]), "{h:#}");
                polls += 1;
            }
            std::thread::sleep(Duration::from_secs(2).saturating_sub(round.elapsed()));
        }
        let s = t0.elapsed().as_secs_f64();
        let (a1, b1, k1) = (
            cpu_seconds(c.a.child.id()),
            cpu_seconds(c.b.child.id()),
            asks(),
        );
        format!(
            "A {:.2} %, B {:.2} % of a core; {:.1} link calls/s; {polls} polls ({:.0}/s)",
            (a1 - a0) / s * 100.0,
            (b1 - b0) / s * 100.0,
            (k1 - k0) / s,
            polls as f64 / s
        )
    };
    let idle = window(&[]);
    let apps = window(&many);
    let same = window(&one);
    println!(
        "cluster view cost: 2 nodes, {APPS} bots on B, pages on A, {SECS} s windows\n  \
         idle:                       {idle}\n  \
         {APPS} pages of {APPS} apps:     {apps}\n  \
         {APPS} pages of one app:     {same}"
    );
    drop(bots);
}
