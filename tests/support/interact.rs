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

/// `gatewayd interact --app .. --server .. --channel .. WHAT` against `node`
/// (the person: the server's first member in the registry).
pub fn click(node: &Node, at: Place, what: &[&str]) -> Click {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gatewayd"));
    cmd.arg("interact")
        .arg("--data-dir")
        .arg(node.dir.path())
        .args(["--ingest", &node.ingest.to_string()])
        .args(["--admin", &node.admin.to_string()])
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
    let reg = Registry::new(node.dir.path());
    let app = reg.add_app(name, 0);
    let (server, channel) = reg.add_server("slash-server");
    reg.install(app.id, server, None);
    reg.add_member(server, "alice", &[]);
    let at = Place {
        app: app.id,
        server,
        channel,
    };
    (app, at)
}
