//! The demo only with the demo on (issue 28, "No demo in production"),
//! against real nodes and the real registry CLI:
//!
//! - a node started with the demo off (`--no-demo`, or `[demo] enabled =
//!   false` in its config file) seeds nothing: `gatewayd registry list`
//!   shows no demo application and no demo server, no `demo-token` file is
//!   written, and the node serves an application made with the CLI;
//! - a registry with a demo application from an earlier start keeps it
//!   when the node is restarted with the demo off, and the node warns at
//!   every start, naming the command that removes it; after `gatewayd
//!   registry delete-app` (and `delete-server`, the warning's other
//!   command) the demo is gone and the warning with it;
//! - `--no-demo-traffic` seeds the demo application, server and token and
//!   runs no demo traffic (a node with the traffic on, as a control, does).

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use support::http::request;
use support::node::Node;
use support::registry::Registry;
use support::BOT_INTENTS;

/// The lines of `gatewayd registry list` naming the demo (its application
/// or its server).
fn demo_lines(list: &str) -> Vec<String> {
    list.lines()
        .filter(|l| l.contains("\"demo-bot\"") || l.contains("\"Demo Server\""))
        .map(str::to_string)
        .collect()
}

/// `application ID name="demo-bot" ...` -> ID; `server ID name="Demo
/// Server"` -> ID.
fn id_of(list: &str, kind: &str, name: &str) -> Option<u64> {
    list.lines().find_map(|l| {
        let rest = l.strip_prefix(kind)?.trim_start();
        let (id, rest) = rest.split_once(' ')?;
        rest.starts_with(&format!("name={name:?}"))
            .then(|| id.parse().unwrap())
    })
}

/// GET /gateway/bot with `token`: the status.
fn gateway_bot(node: &Node, token: &str) -> u16 {
    let auth = format!("Bot {token}");
    request(
        node.gateway,
        "GET",
        "/api/v10/gateway/bot",
        &[("Authorization", auth.as_str())],
    )
    .unwrap()
    .status
}

/// The node's log so far.
fn log_text(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

/// The demo warning's lines in a node's log.
fn demo_warnings(log: &Path) -> Vec<String> {
    log_text(log)
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("the demo is off"))
        .map(str::to_string)
        .collect()
}

/// A node with the demo off has no demo, and works.
fn assert_no_demo(node: &Node, log: &Path) {
    assert!(node.token.is_empty());
    assert!(
        !node.token_path().exists(),
        "no demo-token file with the demo off"
    );
    let reg = Registry::new(node.dir.path());
    let list = reg.text(&["list"]);
    assert_eq!(
        demo_lines(&list),
        Vec::<String>::new(),
        "registry list:\n{list}"
    );
    assert!(
        demo_warnings(log).is_empty(),
        "nothing to warn about:\n{}",
        log_text(log)
    );
    // A fresh registry with the demo off is empty but usable.
    let app = reg.add_app("prod-bot", 0);
    let (server, _) = reg.add_server("Production");
    reg.install(app.id, server, None);
    assert_eq!(gateway_bot(node, &app.token), 200);
    let intents = support::intent::GUILDS | support::intent::GUILD_MESSAGES;
    let s = support::bot::identify(node.gateway, "prod-bot", &app.token, intents, None)
        .expect("identify");
    assert_eq!(s.first_server(), server);
    assert_eq!(s.guild_creates.len(), 1, "only its own server");
}

#[test]
fn a_registry_made_with_the_demo_off_has_no_demo_application() {
    let logs = tempfile::tempdir().unwrap();
    // By flag.
    let log = logs.path().join("flag.log");
    let node = Node::start_logging(&["--no-demo"], &log);
    assert_no_demo(&node, &log);
    drop(node);

    // By config file, as deploy/gatewayd.toml sets it.
    let cfg = logs.path().join("gatewayd.toml");
    std::fs::write(&cfg, "[demo]\nenabled = false\n").unwrap();
    let log = logs.path().join("config.log");
    let node = Node::start_logging(&["--config", cfg.to_str().unwrap()], &log);
    assert_no_demo(&node, &log);
}

#[test]
fn a_demo_from_an_earlier_start_stays_with_a_warning_until_deleted() {
    let logs = tempfile::tempdir().unwrap();
    // First start with the demo on (its traffic off: nothing to wait for).
    let node = Node::start(&["--no-demo-traffic"]);
    let token = node.token.clone();
    assert!(!token.is_empty(), "the demo on writes its token");
    let reg = Registry::new(node.dir.path());
    let list = reg.text(&["list"]);
    let app = id_of(&list, "application", "demo-bot").expect("demo-bot seeded");
    let server = id_of(&list, "server", "Demo Server").expect("Demo Server seeded");

    // Restarted with the demo off: kept, token file included, and named.
    let log = logs.path().join("off.log");
    let node = node.crash_and_restart_logging(&["--no-demo"], &log);
    let list = reg.text(&["list"]);
    assert_eq!(id_of(&list, "application", "demo-bot"), Some(app), "{list}");
    assert_eq!(id_of(&list, "server", "Demo Server"), Some(server));
    assert!(node.token_path().exists(), "the token file is not deleted");
    assert_eq!(
        gateway_bot(&node, &token),
        200,
        "as the warning says, the token still authenticates"
    );
    let warnings = demo_warnings(&log);
    assert_eq!(
        warnings.len(),
        1,
        "one warning at start:\n{}",
        log_text(&log)
    );
    let cli = format!("gatewayd registry --data-dir {}", node.dir.path().display());
    for part in [
        "\"demo-bot\"".to_string(),
        format!("`{cli} delete-app --app {app}`"),
        format!("`{cli} delete-server --server {server}`"),
        node.token_path().display().to_string(),
    ] {
        assert!(
            warnings[0].contains(&part),
            "the warning names {part}: {}",
            warnings[0]
        );
    }

    // The commands it names, run while the node is up.
    let deleted = reg.run(&["delete-app", "--app", &app.to_string()]);
    assert_eq!(deleted["deleted"], "true");
    let deleted = reg.run(&["delete-server", "--server", &server.to_string()]);
    assert_eq!(deleted["deleted"], "true");
    let list = reg.text(&["list"]);
    assert_eq!(demo_lines(&list), Vec::<String>::new(), "{list}");

    // The next start with the demo off has nothing to say.
    let log = logs.path().join("after.log");
    let node = node.crash_and_restart_logging(&["--no-demo"], &log);
    assert!(
        demo_warnings(&log).is_empty(),
        "no demo, no warning:\n{}",
        log_text(&log)
    );
    assert_eq!(gateway_bot(&node, &token), 401, "its token went with it");
}

#[test]
fn no_demo_traffic_seeds_the_demo_without_its_traffic() {
    let run = |flags: &[&str]| {
        let mut all = vec!["--demo-interval-ms", "100"];
        all.extend_from_slice(flags);
        let node = Node::start(&all);
        assert!(
            !node.token.is_empty(),
            "{flags:?}: the demo token is written"
        );
        let list = Registry::new(node.dir.path()).text(&["list"]);
        assert!(id_of(&list, "application", "demo-bot").is_some(), "{list}");
        let server = id_of(&list, "server", "Demo Server").expect("Demo Server");
        let mut s = support::bot::identify(node.gateway, "demo", &node.token, BOT_INTENTS, None)
            .expect("the demo bot identifies");
        assert_eq!(s.first_server(), server);
        // Ten demo ticks.
        s.messages_until(Instant::now() + Duration::from_secs(1))
            .len()
    };
    assert_eq!(run(&["--no-demo-traffic"]), 0, "no demo traffic");
    // The control: the same node with the traffic on.
    assert!(run(&[]) >= 3, "the demo traffic reaches the demo bot");
}

/// The same on a shared PostgreSQL registry: a node with the demo off
/// seeds nothing there, and warns of a demo another node seeded (the
/// command it names reaches the registry through GATEWAYD_REGISTRY_URL:
/// the URL itself may hold a password and is not logged).
#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn on_a_shared_postgresql_registry_too() {
    let (_admin, url) = support::registry::pg_database();
    let logs = tempfile::tempdir().unwrap();
    let log = logs.path().join("off.log");
    let off = Node::start_logging(&["--registry-url", &url, "--no-demo"], &log);
    assert!(!off.token_path().exists());
    let reg = Registry::with_url(off.dir.path(), Some(&url));
    let list = reg.text(&["list"]);
    assert_eq!(demo_lines(&list), Vec::<String>::new(), "{list}");
    assert!(demo_warnings(&log).is_empty(), "{}", log_text(&log));
    drop(off);

    // Another node, with the demo on, seeds it into the shared registry.
    let on = Node::start(&["--registry-url", &url, "--no-demo-traffic"]);
    assert!(!on.token.is_empty());
    let list = reg.text(&["list"]);
    let app = id_of(&list, "application", "demo-bot").expect("demo-bot seeded");
    let server = id_of(&list, "server", "Demo Server").expect("Demo Server seeded");
    drop(on);

    let log = logs.path().join("left.log");
    let off = Node::start_logging(&["--registry-url", &url, "--no-demo"], &log);
    let warnings = demo_warnings(&log);
    assert_eq!(warnings.len(), 1, "{}", log_text(&log));
    let cli = "GATEWAYD_REGISTRY_URL=<this node's registry_url> gatewayd registry";
    assert!(
        warnings[0].contains(&format!("`{cli} delete-app --app {app}`"))
            && warnings[0].contains(&format!("`{cli} delete-server --server {server}`")),
        "{}",
        warnings[0]
    );
    assert!(!warnings[0].contains(&url), "the URL is not logged");
    assert_eq!(
        reg.run(&["delete-app", "--app", &app.to_string()])["deleted"],
        "true"
    );
    assert!(
        demo_lines(&reg.text(&["list"])).len() == 1,
        "Demo Server left"
    );
    drop(off);
}
