//! A node with one bot connected, acting through the REST edge: what the
//! REST tests start from (the node's own bot token, its server and
//! `#general`, a gateway session to see the events come back).

use std::time::Duration;

use serde_json::Value;

use super::bot::{self, Session};
use super::http::{json_request, Resp};
use super::node::Node;

/// The six rate-limit headers every response of a limited route carries.
pub const SIX: [&str; 6] = [
    "X-RateLimit-Limit",
    "X-RateLimit-Remaining",
    "X-RateLimit-Reset",
    "X-RateLimit-Reset-After",
    "X-RateLimit-Bucket",
    "X-RateLimit-Scope",
];

pub struct Fixture {
    pub node: Node,
    /// `Bot <token>` of the node's bot.
    pub auth: String,
    pub server: u64,
    pub general: u64,
    pub session: Session,
}

impl Fixture {
    /// A node started with `args` (no demo traffic) and the bot identified
    /// with `intents`.
    pub fn start(args: &[&str], intents: u64) -> Fixture {
        let mut all = vec!["--no-demo-traffic"];
        all.extend_from_slice(args);
        let node = Node::start(&all);
        let session =
            bot::identify(node.gateway, "bot", &node.token, intents, None).expect("identify");
        let (server, general) = bot::server_and_general(&session.guild_creates[0]);
        Fixture {
            auth: format!("Bot {}", node.token),
            node,
            server,
            general,
            session,
        }
    }

    /// `METHOD /api/v10{path}` as the bot, with a JSON body.
    pub fn call(&self, method: &str, path: &str, body: Option<Value>) -> Resp {
        json_request(
            self.node.gateway,
            method,
            &format!("/api/v10{path}"),
            Some(&self.auth),
            body.as_ref(),
        )
    }

    /// The next dispatch of type `t`, skipping others (demo traffic is off).
    pub fn expect_event(&mut self, t: &str) -> Value {
        for _ in 0..20 {
            let v = self.session.next_dispatch(Duration::from_secs(10));
            if v["t"] == t {
                return v["d"].clone();
            }
        }
        panic!("no {t} within 20 dispatches");
    }
}

/// An error answer: `status`, JSON, an integer `code`, a `message`.
pub fn assert_error(r: &Resp, status: u16, code: u64, what: &str) {
    assert_eq!(r.status, status, "{what}: {}\n{}", r.head, r.body);
    r.assert_json_type(what);
    let v = r.json();
    assert_eq!(
        v["code"].as_u64(),
        Some(code),
        "{what}: an integer code: {v}"
    );
    assert!(v["message"].is_string(), "{what}: {v}");
}
