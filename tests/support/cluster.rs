//! Two real nodes on one fresh PostgreSQL registry (docs/cluster.md), as
//! tests/cluster.rs and tests/portal_cluster.rs start them, and what a bot
//! does against a cluster: Identify on a shard, Resume on another node,
//! and the refusals a node counts. Node "a" starts first (it creates the
//! demo bot, whose token both share); dropping the pair wakes, kills and
//! reaps both processes and drops the database.

use std::time::Duration;

use serde_json::json;

use super::metrics::{metric_sum, metrics};
use super::node::Node;
use super::raw::Ws;

/// Nodes "a" and "b" on the database `url` (made on the test server).
pub struct Cluster {
    pub admin_url: String,
    pub url: String,
    pub a: Node,
    pub b: Node,
}

impl Cluster {
    /// Both nodes with `--registry-url URL --no-demo-traffic` and `extra`.
    pub fn start(extra: &[&str]) -> Cluster {
        Cluster::start_with(|_| extra.iter().map(|s| s.to_string()).collect())
    }

    /// `extra(name)`: the flags after those for node "a" or "b".
    pub fn start_with(extra: impl Fn(&str) -> Vec<String>) -> Cluster {
        let (admin_url, url) = super::registry::pg_database();
        let node = |name: &str| {
            let mut flags = vec![
                "--registry-url".to_string(),
                url.clone(),
                "--no-demo-traffic".into(),
            ];
            flags.extend(extra(name));
            Node::start(&flags.iter().map(String::as_str).collect::<Vec<_>>())
        };
        let a = node("a");
        let b = node("b");
        assert!(!a.token.is_empty(), "the first node created the demo bot");
        Cluster {
            admin_url,
            url,
            a,
            b,
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in [&mut self.a, &mut self.b] {
            // SAFETY: kill(2) of our own child (a test may have stopped it).
            unsafe { libc::kill(n.child.id() as i32, libc::SIGCONT) };
            let _ = n.child.kill();
        }
        let _ = self.a.child.wait();
        let _ = self.b.child.wait();
        if let Ok(mut c) = postgres::Client::connect(&self.admin_url, postgres::NoTls) {
            let db = self.url.rsplit('/').next().unwrap_or_default();
            let _ = c.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"));
        }
    }
}

/// A Resume (op 6) of session `sid` from `seq` on a new connection to
/// `node`; what comes back is the caller's to read.
pub fn resume(node: &Node, token: &str, sid: &str, seq: u64) -> Ws {
    let mut ws = Ws::connect(node.gateway, "/?v=10&encoding=json");
    ws.expect_hello();
    ws.send_json(
        &json!({"op": 6, "d": {"token": format!("Bot {token}"), "session_id": sid, "seq": seq}}),
    )
    .unwrap();
    ws
}

/// The demo bot's Identify on `node` with `intents`, on `shard` ([index,
/// count]) or unsharded, read up to READY: (connection, session id,
/// READY's seq).
pub fn identify_on_shard(
    node: &Node,
    token: &str,
    intents: u64,
    shard: Option<[u64; 2]>,
) -> (Ws, String, u64) {
    let mut ws = Ws::connect(node.gateway, "/?v=10&encoding=json");
    ws.expect_hello();
    ws.send_json(&super::bot::identify_payload(
        &format!("Bot {token}"),
        intents,
        shard,
    ))
    .unwrap();
    let ready = ws.read_until(0, Some("READY"), Duration::from_secs(10));
    let sid = ready["d"]["session_id"].as_str().unwrap().to_string();
    (ws, sid, ready["s"].as_u64().unwrap())
}

/// Resumes `node` refused for `reason` (`gatewayd_resume_refusals_total`).
pub fn refusals(node: &Node, reason: &str) -> f64 {
    metric_sum(
        &metrics(node.admin),
        "gatewayd_resume_refusals_total",
        &[("reason", reason)],
    )
}
