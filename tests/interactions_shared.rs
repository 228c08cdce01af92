//! An interaction outlives the memory of the node that opened it
//! (docs/interactions.md, "Across nodes and restarts"): its token, its
//! state and its timer are in the registry, so
//! - after a crash and a restart, a deferred interaction is followed up with
//!   its token, a second first response is still 40060, and one left
//!   waiting through the crash is a miss (shown, counted, late callback
//!   10062);
//! - with two nodes sharing PostgreSQL, a callback or a follow-up may land
//!   on the node that did not open the interaction: exactly one first
//!   response wins across both, and the opener does not declare a miss for
//!   an interaction answered elsewhere.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::bot::{self, Session};
use support::http::{http_get, json_request, request_with_body, Resp};
use support::intent;
use support::interact::{Click, Place};
use support::node::Node;
use support::registry::Registry;

fn code(r: &Resp) -> (u16, u64) {
    (r.status, r.json()["code"].as_u64().unwrap_or(0))
}

fn register_commands(gateway: SocketAddr, app: &support::registry::App) {
    let commands = json!([
        {"name": "ping", "description": "Ping", "type": 1},
        {"name": "think", "description": "Defers", "type": 1},
    ]);
    let r = json_request(
        gateway,
        "PUT",
        &format!("/api/v10/applications/{}/commands", app.id),
        Some(&format!("Bot {}", app.token)),
        Some(&commands),
    );
    assert_eq!(r.status, 200, "registering the commands: {}", r.body);
}

fn session(gateway: SocketAddr, token: &str) -> Session {
    bot::identify(
        gateway,
        "slash-bot",
        token,
        intent::GUILDS | intent::GUILD_MESSAGES,
        None,
    )
    .expect("identify")
}

/// The next dispatch of type `t` the bot gets.
fn next_of(s: &mut Session, t: &str) -> Value {
    for _ in 0..100 {
        let v = s.next_dispatch(Duration::from_secs(10));
        if v["t"] == t {
            return v["d"].clone();
        }
    }
    panic!("no {t}");
}

fn callback(gateway: SocketAddr, id: &str, token: &str, body: Value, query: &str) -> Resp {
    let bytes = serde_json::to_vec(&body).unwrap();
    request_with_body(
        gateway,
        "POST",
        &format!("/api/v10/interactions/{id}/{token}/callback{query}"),
        &[("Content-Type", "application/json")],
        Some(&bytes),
    )
    .unwrap()
}

fn answer(gateway: SocketAddr, i: &Value, body: Value) -> Resp {
    callback(
        gateway,
        i["id"].as_str().unwrap(),
        i["token"].as_str().unwrap(),
        body,
        "",
    )
}

fn webhook(
    gateway: SocketAddr,
    app: u64,
    token: &str,
    method: &str,
    tail: &str,
    body: Option<Value>,
) -> Resp {
    json_request(
        gateway,
        method,
        &format!("/api/v10/webhooks/{app}/{token}{tail}"),
        None,
        body.as_ref(),
    )
}

/// What the person sees of interaction `id` on `node`'s admin port.
fn seen(admin: SocketAddr, id: &str) -> Value {
    match http_get(admin, &format!("/interactions/{id}")) {
        Ok((200, body)) => serde_json::from_str(&body).unwrap_or(Value::Null),
        _ => Value::Null,
    }
}

/// Polls what the person sees until `done` holds (at most 10 s).
fn seen_until(admin: SocketAddr, id: &str, done: impl Fn(&Value) -> bool) -> Value {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let v = seen(admin, id);
        if done(&v) || Instant::now() > until {
            return v;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn click(node: &Node, at: Place, user: u64, what: &[&str]) -> Click {
    let user = user.to_string();
    let mut args = vec!["--user", user.as_str()];
    args.extend_from_slice(what);
    support::interact::click(node, at, &args)
}

#[test]
fn an_interaction_outlives_a_crash_of_its_node() {
    let node = Node::start(&["--no-demo-traffic"]);
    let (app, at, alice) =
        support::interact::installed_in(&Registry::new(node.dir.path()), "slash-bot");
    register_commands(node.gateway, &app);
    let mut s = session(node.gateway, &app.token);

    // One deferred, one left waiting, then the node is killed.
    let _c1 = click(
        &node,
        at,
        alice,
        &["--command", "think", "--wait-ms", "1000"],
    );
    let deferred = next_of(&mut s, "INTERACTION_CREATE");
    assert_eq!(
        answer(node.gateway, &deferred, json!({"type": 5})).status,
        204
    );
    let _c2 = click(&node, at, alice, &["--command", "ping", "--wait-ms", "500"]);
    let waiting = next_of(&mut s, "INTERACTION_CREATE");
    let waiting_opened = Instant::now();
    drop(s);
    let node = node.crash_and_restart(&["--no-demo-traffic"]);
    let mut s = session(node.gateway, &app.token);

    // The deferred one: a second first response is still refused, and the
    // token still works for the follow-up (a message the bots see).
    let (id, token) = (
        deferred["id"].as_str().unwrap(),
        deferred["token"].as_str().unwrap(),
    );
    assert_eq!(
        code(&answer(
            node.gateway,
            &deferred,
            json!({"type": 4, "data": {"content": "again"}})
        )),
        (400, 40060),
        "the first response survived the crash"
    );
    let r = webhook(
        node.gateway,
        app.id,
        token,
        "POST",
        "",
        Some(json!({"content": "done after the crash"})),
    );
    assert_eq!(r.status, 200, "the follow-up after the restart: {}", r.body);
    let m = next_of(&mut s, "MESSAGE_CREATE");
    assert_eq!(m["content"], "done after the crash");
    assert_eq!(
        m["interaction_metadata"]["id"], id,
        "it answers that interaction"
    );
    let r = webhook(
        node.gateway,
        app.id,
        token,
        "GET",
        &format!("/messages/{}", m["id"].as_str().unwrap()),
        None,
    );
    assert_eq!(
        r.status, 200,
        "the follow-up is one of the interaction's: {}",
        r.body
    );
    // Forged tokens are still nothing.
    let forged = "0".repeat(64);
    assert_eq!(
        code(&callback(
            node.gateway,
            id,
            &forged,
            json!({"type": 4, "data": {"content": "x"}}),
            ""
        )),
        (404, 10062)
    );
    assert_eq!(
        code(&webhook(
            node.gateway,
            app.id,
            &forged,
            "POST",
            "",
            Some(json!({"content": "x"}))
        )),
        (401, 50027)
    );
    assert_eq!(
        code(&webhook(
            node.gateway,
            app.id + 1,
            token,
            "POST",
            "",
            Some(json!({"content": "x"}))
        )),
        (401, 50027),
        "another application's path with this token"
    );

    // The waiting one got its timer back: the person sees the failure, it
    // is counted, and a callback after 3 s is late.
    let wid = waiting["id"].as_str().unwrap();
    let v = seen_until(node.admin, wid, |v| v["state"] == "failed");
    assert_eq!(
        v["state"], "failed",
        "what the person sees after the restart: {v}"
    );
    std::thread::sleep(Duration::from_millis(3200).saturating_sub(waiting_opened.elapsed()));
    assert_eq!(
        code(&answer(
            node.gateway,
            &waiting,
            json!({"type": 4, "data": {"content": "late"}})
        )),
        (404, 10062)
    );
    assert_eq!(
        support::metrics::metric(&node, "gatewayd_interactions_misses_total"),
        1.0
    );
}

#[test]
#[ignore = "needs PostgreSQL: run scripts/test-all.sh, or set GATEWAYD_TEST_DATABASE_URL"]
fn a_callback_and_a_follow_up_may_land_on_either_node() {
    let (_admin, url) = support::registry::pg_database();
    let flags = ["--registry-url", url.as_str(), "--no-demo-traffic"];
    let a = Node::start(&flags);
    let b = Node::start(&flags);
    let reg = Registry::with_url(a.dir.path(), Some(&url));
    let (app, at, alice) = support::interact::installed_in(&reg, "slash-bot");
    register_commands(a.gateway, &app);
    // The bot's session is on A; the person's interactions arrive at A.
    let mut s = session(a.gateway, &app.token);

    // Answered on B: shown, and A neither takes a second response nor
    // declares a miss at 3 s.
    let c = click(&a, at, alice, &["--command", "ping"]);
    let i = next_of(&mut s, "INTERACTION_CREATE");
    let (id, token) = (i["id"].as_str().unwrap(), i["token"].as_str().unwrap());
    let r = callback(
        b.gateway,
        id,
        token,
        json!({"type": 4, "data": {"content": "pong from b"}}),
        "?with_response=true",
    );
    assert_eq!(r.status, 200, "the callback on the other node: {}", r.body);
    assert_eq!(r.json()["resource"]["message"]["content"], "pong from b");
    assert_eq!(
        code(&answer(
            a.gateway,
            &i,
            json!({"type": 4, "data": {"content": "pong from a"}})
        )),
        (400, 40060),
        "one first response across the nodes"
    );
    assert_eq!(
        code(&answer(
            b.gateway,
            &i,
            json!({"type": 4, "data": {"content": "again"}})
        )),
        (400, 40060)
    );
    let (status, shown) = c.wait();
    assert_eq!(status, 0, "the person saw no failure: {shown:?}");
    assert_eq!(shown["state"], "answered");
    let after = seen_until(a.admin, id, |v| v.get("answered_by").is_some());
    assert_eq!(after["state"], "answered", "the opener after 3 s: {after}");
    assert_eq!(
        support::metrics::metric(&a, "gatewayd_interactions_misses_total"),
        0.0
    );
    assert_eq!(
        support::metrics::metric(&a, "gatewayd_interactions_answered_elsewhere_total"),
        1.0
    );

    // Deferred on A, followed up on B, the original edited on A.
    let _c = click(&a, at, alice, &["--command", "think", "--wait-ms", "1000"]);
    let i = next_of(&mut s, "INTERACTION_CREATE");
    let token = i["token"].as_str().unwrap();
    assert_eq!(answer(a.gateway, &i, json!({"type": 5})).status, 204);
    let r = webhook(
        b.gateway,
        app.id,
        token,
        "POST",
        "",
        Some(json!({"content": "followed up on b"})),
    );
    assert_eq!(r.status, 200, "the follow-up on the other node: {}", r.body);
    assert_eq!(r.json()["interaction_metadata"]["id"], i["id"]);
    let r = webhook(
        a.gateway,
        app.id,
        token,
        "PATCH",
        "/messages/@original",
        Some(json!({"content": "edited on a"})),
    );
    assert_eq!(r.status, 200, "the original on the opener: {}", r.body);
    assert_eq!(r.json()["content"], "edited on a");

    // Not answered anywhere: a miss on A, late on B.
    let c = click(&a, at, alice, &["--command", "ping"]);
    let i = next_of(&mut s, "INTERACTION_CREATE");
    let (status, shown) = c.wait();
    assert_eq!(
        (status, shown["state"].as_str()),
        (2, "failed"),
        "{shown:?}"
    );
    assert_eq!(
        code(&answer(
            b.gateway,
            &i,
            json!({"type": 4, "data": {"content": "late"}})
        )),
        (404, 10062)
    );
    assert_eq!(
        support::metrics::metric(&a, "gatewayd_interactions_misses_total"),
        1.0
    );
}
