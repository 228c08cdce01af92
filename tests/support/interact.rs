//! A person using a bot's commands and buttons: `gatewayd interact`, which
//! writes the interaction record to the node's ingest listener and prints
//! what the person sees (`state=`, `content=`, `message_id=`, `seen=`).

use std::collections::BTreeMap;
use std::process::Command;

use super::node::Node;
use super::registry::{App, Registry};

/// Where the person acts: the application, the server and the channel.
#[derive(Clone, Copy, Debug)]
pub struct Place {
    pub app: u64,
    pub server: u64,
    pub channel: u64,
}

/// `gatewayd interact ...` running in the background.
pub struct Click(std::thread::JoinHandle<(i32, BTreeMap<String, String>)>);

impl Click {
    /// Its exit status and its `key=value` lines.
    pub fn wait(self) -> (i32, BTreeMap<String, String>) {
        self.0.join().unwrap()
    }
}

/// `gatewayd interact --data-dir .. --app .. --server .. --channel .. WHAT`
/// against `node` (the person: the server's first member in the registry).
/// No `--ingest` or `--admin`: the CLI reads the node's addresses from the
/// data directory's `gatewayd.addrs`, as a user's would (every listener of
/// a node under test is on port 0).
pub fn click(node: &Node, at: Place, what: &[&str]) -> Click {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gatewayd"));
    cmd.arg("interact")
        .arg("--data-dir")
        .arg(node.dir.path())
        .args(["--app", &at.app.to_string()])
        .args(["--server", &at.server.to_string()])
        .args(["--channel", &at.channel.to_string()])
        .args(what);
    Click(std::thread::spawn(move || {
        let out = cmd.output().expect("run gatewayd interact");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let kv = text
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        (out.status.code().unwrap_or(-1), kv)
    }))
}

/// An application `name` installed (with the default grant) in a new
/// server whose `#general` has alice, its one person: where the person
/// will use the bot's commands.
pub fn installed(node: &Node, name: &str) -> (App, Place) {
    let (app, at, _) = installed_in(&Registry::new(node.dir.path()), name);
    (app, at)
}

/// [`installed`] through `reg` (e.g. a shared PostgreSQL registry); also
/// alice's user id.
pub fn installed_in(reg: &Registry, name: &str) -> (App, Place, u64) {
    let app = reg.add_app(name, 0);
    let (server, channel) = reg.add_server("slash-server");
    reg.install(app.id, server, None);
    let alice = reg.add_member(server, "alice", &[]);
    let at = Place {
        app: app.id,
        server,
        channel,
    };
    (app, at, alice)
}

/// The names of the server-scoped commands `app` has in `server`, sorted
/// (what a library's sync registered).
pub fn guild_command_names(node: &Node, app: &App, server: u64) -> Vec<String> {
    let r = super::http::json_request(
        node.gateway,
        "GET",
        &format!("/api/v10/applications/{}/guilds/{server}/commands", app.id),
        Some(&format!("Bot {}", app.token)),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let mut names: Vec<String> = r
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

/// What a person saw of the library tests' three commands, used in turn:
/// `/ping`, `/slow` (a deferral, waited for up to 20 s), `/menu`, then the
/// button on `/menu`'s message (`menu:click`). Each is (exit status,
/// `state`, `content`) as `gatewayd interact` printed them.
pub struct Tour {
    pub ping: (i32, Option<String>, Option<String>),
    pub slow: (i32, Option<String>, Option<String>),
    /// `/slow`'s whole `seen=` object.
    pub slow_seen: serde_json::Value,
    pub menu: (i32, Option<String>),
    /// The `/menu` message's id (empty if there was none).
    pub menu_message: String,
    /// With the edited message's id last.
    pub button: (i32, Option<String>, Option<String>, Option<String>),
}

pub fn tour(node: &Node, at: Place) -> Tour {
    let triple = |(status, seen): (i32, BTreeMap<String, String>)| {
        (
            status,
            seen.get("state").cloned(),
            seen.get("content").cloned(),
        )
    };
    let ping = triple(click(node, at, &["--command", "ping"]).wait());
    let (status, seen) = click(node, at, &["--command", "slow", "--wait-ms", "20000"]).wait();
    let slow_seen = seen
        .get("seen")
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_default();
    let slow = triple((status, seen));
    let (status, seen) = click(node, at, &["--command", "menu"]).wait();
    let menu = (status, seen.get("content").cloned());
    let menu_message = seen.get("message_id").cloned().unwrap_or_default();
    let button = if menu_message.is_empty() {
        (-1, None, None, None)
    } else {
        let (status, seen) = click(
            node,
            at,
            &["--button", "menu:click", "--message", &menu_message],
        )
        .wait();
        (
            status,
            seen.get("state").cloned(),
            seen.get("content").cloned(),
            seen.get("message_id").cloned(),
        )
    };
    Tour {
        ping,
        slow,
        slow_seen,
        menu,
        menu_message,
        button,
    }
}

/// What a library test waits for before its bot acts (issue 26: a bot's
/// own messages lost their `author` once an interaction for it had been
/// refused): the demo source's `/ping` refused twice (its timers have
/// fired twice; the node must run the demo, and nothing else may have
/// been refused yet), then, with `at`, a person's two uses of a command
/// `at.app` never registered, each refused at once.
pub fn refused_first(node: &Node, at: Option<Place>) {
    let refused = || super::metrics::metric(node, "gatewayd_interactions_refused_total");
    let waited = super::wait_until(std::time::Duration::from_secs(60), || refused() >= 2.0);
    assert!(waited.is_some(), "the demo's /ping was not refused twice");
    if let Some(at) = at {
        for _ in 0..2 {
            let (_, seen) = click(node, at, &["--command", "never-registered"]).wait();
            assert_eq!(
                seen.get("state").map(String::as_str),
                Some("failed"),
                "an unregistered command is refused: {seen:?}"
            );
        }
    }
}
