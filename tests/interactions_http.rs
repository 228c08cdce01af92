//! Interactions delivered to HTTP interactions endpoints (REST.md
//! "Interactions"): one signed POST through the egress, verified by the
//! endpoint with PyNaCl (an existing Ed25519 library, as a bot author would
//! use it), answered inline; a hanging endpoint beside a fast one costs
//! only its own person the failure at 3 s.

mod support;

use support::python::NaclEndpoint;
use support::registry::kv;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use support::http::json_request;
use support::node::Node;
use support::registry::{App, Registry};

fn cli(node: &Node, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gatewayd"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("gatewayd {args:?}: {e}; node at {}", node.gateway))
}

/// An HTTP bot: its commands registered, its endpoint (PyNaCl) verified
/// and set.
fn http_bot(
    node: &Node,
    reg: &Registry,
    server: u64,
    name: &str,
    mode: &str,
) -> (App, NaclEndpoint) {
    let app = reg.add_app(name, 0);
    reg.install(app.id, server, None);
    let r = json_request(
        node.gateway,
        "PUT",
        &format!("/api/v10/applications/{}/commands", app.id),
        Some(&format!("Bot {}", app.token)),
        Some(&json!([{"name": "ping", "description": "Ping", "type": 1}])),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let dir = node.dir.path().to_str().unwrap().to_string();
    let show = cli(
        node,
        &[
            "registry",
            "--data-dir",
            &dir,
            "show-app",
            "--app",
            &app.id.to_string(),
        ],
    );
    let key = kv(&show, "verify_key").expect("verify_key");
    let ep = NaclEndpoint::start(&key, mode);
    let url = ep.url.clone();
    let out = cli(
        node,
        &[
            "registry",
            "--data-dir",
            &dir,
            "set-endpoint",
            "--app",
            &app.id.to_string(),
            "--url",
            &url,
            "--egress-allow-private-cidrs",
            "127.0.0.0/8",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (app, ep)
}

fn click(node: &Node, app: &App, server: u64, channel: u64) -> (i32, String, Duration) {
    let t = Instant::now();
    let out = cli(
        node,
        &[
            "interact",
            "--data-dir",
            node.dir.path().to_str().unwrap(),
            "--ingest",
            &node.ingest.to_string(),
            "--admin",
            &node.admin.to_string(),
            "--app",
            &app.id.to_string(),
            "--server",
            &server.to_string(),
            "--channel",
            &channel.to_string(),
            "--command",
            "ping",
            "--wait-ms",
            "6000",
        ],
    );
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        t.elapsed(),
    )
}

#[test]
#[ignore = "needs PyNaCl: run scripts/test-all.sh, or set GATEWAYD_PYTHON to a venv with tests/py/requirements.txt"]
fn an_http_bot_answers_inline_and_a_hanging_one_beside_it_fails_alone() {
    // The endpoints are on loopback: the node's egress may reach it (and says so at start).
    let node = Node::start(&["--no-demo", "--egress-allow-private-cidrs", "127.0.0.0/8"]);
    let reg = Registry::new(node.dir.path());
    let (server, general) = reg.add_server("http-server");
    reg.add_member(server, "alice", &[]);
    let (fast, _fast_ep) = http_bot(&node, &reg, server, "fast-http-bot", "pong");
    let (slow, _slow_ep) = http_bot(&node, &reg, server, "hanging-http-bot", "hang");

    let (status, out, _) = click(&node, &fast, server, general);
    assert_eq!(status, 0, "{out}");
    assert!(
        out.contains("content=pong from http (ping)"),
        "what the person sees: {out}"
    );

    // The hanging endpoint and the fast one at the same time.
    let hang = {
        let (node_dir, ingest, admin) = (node.dir.path().to_path_buf(), node.ingest, node.admin);
        let slow = slow.clone();
        std::thread::spawn(move || {
            let t = Instant::now();
            let out = Command::new(env!("CARGO_BIN_EXE_gatewayd"))
                .args(["interact", "--data-dir", node_dir.to_str().unwrap()])
                .args([
                    "--ingest",
                    &ingest.to_string(),
                    "--admin",
                    &admin.to_string(),
                ])
                .args([
                    "--app",
                    &slow.id.to_string(),
                    "--server",
                    &server.to_string(),
                ])
                .args([
                    "--channel",
                    &general.to_string(),
                    "--command",
                    "ping",
                    "--wait-ms",
                    "6000",
                ])
                .output()
                .unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                t.elapsed(),
            )
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..3 {
        let (status, out, took) = click(&node, &fast, server, general);
        assert_eq!(status, 0, "the fast bot beside a hanging one: {out}");
        assert!(
            took < Duration::from_secs(3),
            "the fast bot answered within its window: {took:?}"
        );
    }
    let (status, out, took) = hang.join().unwrap();
    assert_eq!(status, Some(2), "{out}");
    assert!(out.contains("state=failed"), "{out}");
    assert!(
        out.contains("The application did not respond (endpoint:"),
        "the reason is shown: {out}"
    );
    assert!(took >= Duration::from_secs(3), "{took:?}");
    let m = support::metrics::metrics(node.admin);
    assert!(
        support::metrics::metric_sum(
            &m,
            "gatewayd_interactions_endpoint_total",
            &[("outcome", "inline")]
        ) >= 4.0
    );
    assert!(
        support::metrics::metric_sum(
            &m,
            "gatewayd_interactions_endpoint_total",
            &[("outcome", "failed")]
        ) >= 1.0
    );
}
