//! Black-box tests of the REST endpoints client libraries call before connecting.

mod support;

use std::net::SocketAddr;

use serde_json::json;
use support::http::Resp;
use support::node::Node;
use support::raw::Ws;
use support::registry::Registry;
use support::BOT_INTENTS;

/// A GET to the gateway port (so headers can be checked); panics if it fails.
fn request(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Resp {
    support::http::request(addr, "GET", path, headers).unwrap_or_else(|e| panic!("GET {path}: {e}"))
}

fn bot(node: &Node) -> String {
    format!("Bot {}", node.token)
}

fn assert_unauthorized(r: &Resp, what: &str) {
    assert_eq!(r.status, 401, "{what}: {}\n{}", r.head, r.body);
    r.assert_json_type(what);
    assert_eq!(
        r.json(),
        json!({"message": "401: Unauthorized", "code": 0}),
        "{what}"
    );
}

fn node() -> Node {
    Node::start(&["--no-demo-traffic"])
}

#[test]
fn gateway_url_on_all_prefixes() {
    let node = node();
    for path in ["/api/v10/gateway", "/api/v9/gateway", "/api/gateway"] {
        let r = request(node.gateway, path, &[]);
        assert_eq!(r.status, 200, "{path}: {}\n{}", r.head, r.body);
        r.assert_json_type(path);
        let v = r.json();
        let url = v["url"]
            .as_str()
            .unwrap_or_else(|| panic!("{path}: no url string: {v}"));
        assert!(
            url.starts_with("ws://") || url.starts_with("wss://"),
            "{path}: url {url:?}"
        );
    }
}

#[test]
fn gateway_bot_with_token() {
    let node = node();
    for path in [
        "/api/v10/gateway/bot",
        "/api/v9/gateway/bot",
        "/api/gateway/bot",
    ] {
        let r = request(node.gateway, path, &[("Authorization", &bot(&node))]);
        assert_eq!(r.status, 200, "{path}: {}\n{}", r.head, r.body);
        r.assert_json_type(path);
        let v = r.json();
        let url = v["url"]
            .as_str()
            .unwrap_or_else(|| panic!("{path}: no url: {v}"));
        assert!(
            url.starts_with("ws://") || url.starts_with("wss://"),
            "{path}: url {url:?}"
        );
        assert!(
            v["shards"].as_u64().is_some_and(|s| s >= 1),
            "{path}: shards: {v}"
        );
        let ssl = &v["session_start_limit"];
        let total = ssl["total"]
            .as_u64()
            .unwrap_or_else(|| panic!("{path}: total: {v}"));
        let remaining = ssl["remaining"]
            .as_u64()
            .unwrap_or_else(|| panic!("{path}: remaining: {v}"));
        assert!(
            ssl["reset_after"].as_u64().is_some(),
            "{path}: reset_after must be an integer (ms): {v}"
        );
        assert!(
            ssl["max_concurrency"].as_u64().is_some_and(|m| m >= 1),
            "{path}: max_concurrency: {v}"
        );
        assert!(total >= 1 && remaining <= total, "{path}: {v}");
        assert!(
            remaining >= v["shards"].as_u64().unwrap(),
            "{path}: remaining below shard count on a fresh node: {v}"
        );
    }
}

#[test]
fn gateway_bot_token_without_bot_prefix() {
    let node = node();
    let r = request(
        node.gateway,
        "/api/v10/gateway/bot",
        &[("Authorization", &node.token)],
    );
    assert_eq!(r.status, 200, "{}\n{}", r.head, r.body);
    r.assert_json_type("gateway/bot without Bot prefix");
    assert!(r.json()["session_start_limit"]["total"].is_u64());
}

#[test]
fn session_start_limit_counts_identifies() {
    let node = node();
    let get = || {
        request(
            node.gateway,
            "/api/v10/gateway/bot",
            &[("Authorization", &bot(&node))],
        )
        .json()
    };
    let before = get();
    let total = before["session_start_limit"]["total"].as_u64().unwrap();
    assert_eq!(
        before["session_start_limit"]["remaining"], total,
        "fresh node: {before}"
    );
    let mut ws = Ws::connect(node.gateway, "/?v=10&encoding=json");
    ws.login(&node.token, BOT_INTENTS);
    let after = get();
    assert_eq!(
        after["session_start_limit"]["remaining"],
        total - 1,
        "after one identify: {after}"
    );
}

#[test]
fn unauthorized_without_or_with_bad_token() {
    let node = node();
    for path in [
        "/api/v10/gateway/bot",
        "/api/v10/users/@me",
        "/api/v10/oauth2/applications/@me",
    ] {
        assert_unauthorized(
            &request(node.gateway, path, &[]),
            &format!("{path} without Authorization"),
        );
        assert_unauthorized(
            &request(
                node.gateway,
                path,
                &[("Authorization", "Bot nope.nope.nope")],
            ),
            &format!("{path} bad token"),
        );
        assert_unauthorized(
            &request(node.gateway, path, &[("Authorization", "Bot ")]),
            &format!("{path} empty token"),
        );
        let mut t = node.token.clone();
        let last = t.pop().unwrap();
        t.push(if last == 'A' { 'B' } else { 'A' });
        assert_unauthorized(
            &request(
                node.gateway,
                path,
                &[("Authorization", &format!("Bot {t}"))],
            ),
            &format!("{path} token with one character changed"),
        );
    }
}

#[test]
fn users_me() {
    let node = node();
    let r = request(
        node.gateway,
        "/api/v10/users/@me",
        &[("Authorization", &bot(&node))],
    );
    assert_eq!(r.status, 200, "{}\n{}", r.head, r.body);
    r.assert_json_type("users/@me");
    let v = r.json();
    assert!(
        v["id"].as_str().is_some_and(|s| s.parse::<u64>().is_ok()),
        "id must be a snowflake string: {v}"
    );
    assert!(v["username"].is_string(), "username: {v}");
    assert!(v["discriminator"].is_string(), "discriminator: {v}");
    assert!(
        v.get("avatar")
            .is_some_and(|a| a.is_null() || a.is_string()),
        "avatar: {v}"
    );
    assert_eq!(v["bot"], true, "bot: {v}");
    assert!(v["flags"].is_u64(), "flags: {v}");
    // Same user as in READY.
    let mut ws = Ws::connect(node.gateway, "/?v=10&encoding=json");
    let ready = ws.login(&node.token, BOT_INTENTS);
    assert_eq!(ready["d"]["user"]["id"], v["id"], "READY user vs users/@me");
    // Also under v9 and the bare prefix, and without the Bot prefix.
    for (path, auth) in [
        ("/api/v9/users/@me", bot(&node)),
        ("/api/users/@me", bot(&node)),
        ("/api/v10/users/@me", node.token.clone()),
    ] {
        let r = request(node.gateway, path, &[("Authorization", &auth)]);
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        assert_eq!(r.json()["id"], v["id"], "{path}");
    }
}

#[test]
fn oauth2_application_me() {
    let node = node();
    let r = request(
        node.gateway,
        "/api/v10/oauth2/applications/@me",
        &[("Authorization", &bot(&node))],
    );
    assert_eq!(r.status, 200, "{}\n{}", r.head, r.body);
    r.assert_json_type("oauth2/applications/@me");
    let v = r.json();
    assert!(
        v["id"].as_str().is_some_and(|s| s.parse::<u64>().is_ok()),
        "id: {v}"
    );
    assert!(v["name"].is_string(), "name: {v}");
    assert!(v["description"].is_string(), "description: {v}");
    assert!(
        v.get("icon").is_some_and(|a| a.is_null() || a.is_string()),
        "icon: {v}"
    );
    assert!(v["bot_public"].is_boolean(), "bot_public: {v}");
    assert!(
        v["bot_require_code_grant"].is_boolean(),
        "bot_require_code_grant: {v}"
    );
    assert!(v["owner"].is_object(), "owner: {v}");
    assert!(
        v["owner"]["id"].is_string() && v["owner"]["username"].is_string(),
        "owner user fields: {v}"
    );
    assert!(v["verify_key"].is_string(), "verify_key: {v}");
    assert!(v["flags"].is_u64(), "flags: {v}");
    let mut ws = Ws::connect(node.gateway, "/?v=10&encoding=json");
    let ready = ws.login(&node.token, BOT_INTENTS);
    assert_eq!(
        ready["d"]["application"]["id"], v["id"],
        "READY application vs oauth2/applications/@me"
    );
}

#[test]
fn unknown_api_path_is_404_json() {
    let node = node();
    for path in [
        "/api/v10/nope",
        "/api/v10/gateway/nope",
        "/api/v10/users/@me/nope",
        "/api/",
    ] {
        let r = request(node.gateway, path, &[("Authorization", &bot(&node))]);
        assert_eq!(r.status, 404, "{path}: {}\n{}", r.head, r.body);
        r.assert_json_type(path);
        let v = r.json();
        assert!(v.is_object(), "{path}: {v}");
    }
}

#[test]
fn second_app_from_registry_cli_authenticates() {
    let node = node();
    let out = Registry::new(node.dir.path()).run(&["add-app", "--name", "Second"]);
    let field = |k: &str| {
        out.get(k)
            .unwrap_or_else(|| panic!("no {k}= in {out:?}"))
            .clone()
    };
    let (token, app_id) = (field("token"), field("application_id"));
    let r = request(
        node.gateway,
        "/api/v10/oauth2/applications/@me",
        &[("Authorization", &format!("Bot {token}"))],
    );
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["id"], app_id.as_str());
    let demo = request(
        node.gateway,
        "/api/v10/oauth2/applications/@me",
        &[("Authorization", &bot(&node))],
    )
    .json();
    assert_ne!(demo["id"], app_id.as_str(), "two apps with one id");
}
