//! Every event and answer the REST edge builds, checked against the field
//! lists of docs/rest.md (`support::fields`), past the node's timers and
//! under concurrency (issue 26: a bot's own messages lost their `author`
//! five seconds after the node started, when the demo's first `/ping` was
//! refused; every test acted before then).
//!
//! - `a_bots_message_posted_after_the_demo_pings_has_its_author`: the
//!   regression, as a new user meets it (`cargo run`, the demo token).
//! - `every_event_and_answer_holds_its_field_list_past_every_timer`: many
//!   bots, many channels, a minute or more (`GATEWAYD_FIELDS_SECS`), with
//!   the timers shortened so each fires many times (docs/rest.md says
//!   which and how long).
//! - `the_connect_time_routes_carry_the_rate_limit_headers` and
//!   `users_me_guilds_pages_as_the_platform_does`.

mod support;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::bot::{self, Next, Session};
use support::fields;
use support::http::{json_request, request_with_body, Resp};
use support::intent;
use support::interact::{self, Place};
use support::metrics::metric;
use support::node::Node;
use support::perm::*;
use support::registry::{App, Registry};
use support::rest::SIX;

/// What the bots here ask for: every event the REST edge produces.
const INTENTS: u64 = intent::GUILDS
    | intent::GUILD_MEMBERS
    | intent::GUILD_MODERATION
    | intent::GUILD_MESSAGES
    | intent::GUILD_MESSAGE_REACTIONS
    | intent::GUILD_MESSAGE_TYPING
    | intent::MESSAGE_CONTENT;

/// What the bots are granted: everything their actions need.
const GRANT: u64 = VIEW_CHANNEL
    | SEND_MESSAGES
    | READ_MESSAGE_HISTORY
    | ADD_REACTIONS
    | MANAGE_MESSAGES
    | EMBED_LINKS;

fn auth(token: &str) -> String {
    format!("Bot {token}")
}

fn id_of(v: &Value) -> u64 {
    v.as_str().and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// The demo source's `/ping`s refused so far (the demo bot registered no
/// command): each one is what made the chat service keep `{}` as the demo
/// bot's user object before the fix.
fn demo_pings_refused(node: &Node) -> f64 {
    metric(node, "gatewayd_interactions_refused_total")
}

#[test]
fn a_bots_message_posted_after_the_demo_pings_has_its_author() {
    // The node as `cargo run --release` starts it: the demo on, a message
    // every second and alice's `/ping` every fifth.
    let node = Node::start(&[]);
    let mut s = bot::identify(node.gateway, "demo", &node.token, INTENTS, None).expect("identify");
    let me = s.ready["d"]["user"].clone();
    let (_, general) = bot::server_and_general(&s.guild_creates[0]);
    // Past the demo's timers, twice (at 5 s and 10 s).
    let waited = support::wait_until(Duration::from_secs(60), || demo_pings_refused(&node) >= 2.0);
    assert!(waited.is_some(), "the demo's /ping was never refused twice");
    let r = json_request(
        node.gateway,
        "POST",
        &format!("/api/v10/channels/{general}/messages"),
        Some(&auth(&node.token)),
        Some(&json!({"content": "after the pings", "nonce": "n-1"})),
    );
    assert_eq!(r.status, 200, "{}", r.body);
    let m = r.json();
    assert_eq!(m["author"]["id"], me["id"], "the answer's author: {m}");
    // READY's user is the bot's own, whole; its messages' author is the
    // partial user: the same without the private fields (issue 40: it
    // carried `email`, `verified`, `mfa_enabled`).
    let problems = fields::ready(&s.ready["d"], "READY");
    assert!(problems.is_empty(), "{problems:?}\n{}", s.ready);
    let mut public = me.clone();
    for k in fields::PRIVATE_USER {
        public.as_object_mut().unwrap().remove(*k);
    }
    assert_eq!(
        m["author"], public,
        "the author is READY's user, partial: {m}"
    );
    let problems = fields::message(&m, "answer", false);
    assert!(problems.is_empty(), "{problems:?}\n{m}");
    // Its MESSAGE_CREATE, among the demo's.
    let deadline = Instant::now() + Duration::from_secs(20);
    let ev = loop {
        assert!(
            Instant::now() < deadline,
            "no MESSAGE_CREATE for {}",
            m["id"]
        );
        let v = s.next_dispatch(Duration::from_secs(10));
        if v["t"] == "MESSAGE_CREATE" && v["d"]["id"] == m["id"] {
            break v["d"].clone();
        }
    };
    assert_eq!(ev["author"], public, "the event's author: {ev}");
    let problems = fields::message(&ev, "MESSAGE_CREATE", true);
    assert!(problems.is_empty(), "{problems:?}\n{ev}");

    // The person who posts the demo messages is a member of the server.
    let demo = loop {
        let v = s.next_dispatch(Duration::from_secs(10));
        if v["t"] == "MESSAGE_CREATE" && v["d"]["author"]["bot"] != true {
            break v["d"].clone();
        }
    };
    let server = id_of(&demo["guild_id"]);
    let r = json_request(
        node.gateway,
        "GET",
        &format!(
            "/api/v10/guilds/{server}/members/{}",
            id_of(&demo["author"]["id"])
        ),
        Some(&auth(&node.token)),
        None,
    );
    assert_eq!(r.status, 200, "the demo author as a member: {}", r.body);
    assert_eq!(r.json()["user"]["id"], demo["author"]["id"]);
    let problems = fields::member(&r.json(), "member");
    assert!(problems.is_empty(), "{problems:?}\n{}", r.body);
}

#[test]
fn the_connect_time_routes_carry_the_rate_limit_headers() {
    let node = Node::start(&["--no-demo-traffic"]);
    let a = auth(&node.token);
    let mut buckets = HashSet::new();
    for path in [
        "/gateway/bot",
        "/users/@me",
        "/users/@me/guilds",
        "/oauth2/applications/@me",
    ] {
        let r = json_request(
            node.gateway,
            "GET",
            &format!("/api/v10{path}"),
            Some(&a),
            None,
        );
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        for h in SIX {
            assert!(r.header(h).is_some(), "{path}: no {h}\n{}", r.head);
        }
        assert_eq!(r.header("X-RateLimit-Scope").as_deref(), Some("user"));
        assert!(
            r.header("X-RateLimit-Global").is_none(),
            "{path}: X-RateLimit-Global on a plain answer (REST.md)"
        );
        buckets.insert(r.header("X-RateLimit-Bucket").unwrap());
    }
    assert_eq!(buckets.len(), 4, "a bucket per route: {buckets:?}");
    // `/gateway` needs no token and names no bucket.
    let r = json_request(node.gateway, "GET", "/api/v10/gateway", None, None);
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.header("X-RateLimit-Bucket").is_none(), "{}", r.head);
    // Past the limit: the 429 of REST.md, not a silent pass.
    let limited = (0..20)
        .map(|_| json_request(node.gateway, "GET", "/api/v10/users/@me", Some(&a), None))
        .find(|r| r.status == 429)
        .expect("GET /users/@me is limited");
    assert!(limited.header("Via").is_some(), "{}", limited.head);
    let retry: u64 = limited
        .header("Retry-After")
        .and_then(|v| v.parse().ok())
        .expect("an integer Retry-After");
    assert!(retry >= 1, "{}", limited.head);
    assert!(limited.json()["retry_after"].is_f64() || limited.json()["retry_after"].is_u64());
}

#[test]
fn users_me_guilds_pages_as_the_platform_does() {
    let node = Node::start(&["--no-demo-traffic", "--rest-limit-scale", "100"]);
    let reg = Registry::new(node.dir.path());
    let app = reg.add_app("pager", 0);
    let mut servers: Vec<u64> = (0..5)
        .map(|i| {
            let (s, _) = reg.add_server(&format!("pager-{i}"));
            reg.install(app.id, s, Some(GRANT));
            s
        })
        .collect();
    servers.sort_unstable();
    let a = auth(&app.token);
    let page = |q: &str| {
        let r = json_request(
            node.gateway,
            "GET",
            &format!("/api/v10/users/@me/guilds{q}"),
            Some(&a),
            None,
        );
        assert_eq!(r.status, 200, "{q}: {}", r.body);
        let v = r.json();
        for (i, g) in v.as_array().unwrap().iter().enumerate() {
            let problems = fields::lacks(g, &format!("guilds[{i}]"), fields::PARTIAL_GUILD);
            assert!(problems.is_empty(), "{problems:?}\n{g}");
            assert_eq!(
                g["permissions"]
                    .as_str()
                    .and_then(|p| p.parse::<u64>().ok()),
                Some(GRANT),
                "the bot's permissions in the server, as a string: {g}"
            );
        }
        v.as_array()
            .unwrap()
            .iter()
            .map(|g| id_of(&g["id"]))
            .collect::<Vec<u64>>()
    };
    assert_eq!(page(""), servers, "every server, ascending");
    assert_eq!(page("?limit=2"), servers[..2]);
    assert_eq!(page(&format!("?after={}", servers[1])), servers[2..]);
    assert_eq!(
        page(&format!("?before={}&limit=2", servers[4])),
        servers[2..4]
    );
    let r = json_request(
        node.gateway,
        "GET",
        "/api/v10/users/@me/guilds?with_counts=true&limit=1",
        Some(&a),
        None,
    );
    assert!(
        r.json()[0]["approximate_member_count"].is_u64(),
        "{}",
        r.body
    );
    let r = json_request(
        node.gateway,
        "GET",
        "/api/v10/users/@me/guilds?limit=201",
        Some(&a),
        None,
    );
    support::rest::assert_error(&r, 400, 50035, "limit above 200");
}

// ------------------------------------------------------------- the long run

/// How long the long run acts (seconds; `GATEWAYD_FIELDS_SECS`).
fn run_secs() -> u64 {
    std::env::var("GATEWAYD_FIELDS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60)
}

/// What every thread of the long run reports into.
#[derive(Default)]
struct Findings {
    problems: Mutex<Vec<String>>,
    /// Messages a bot posted: message id -> the poster's bot user id.
    posted: Mutex<HashMap<u64, u64>>,
    /// MESSAGE_CREATEs a bot saw of its own: (bot user id, message id).
    seen_own: Mutex<HashSet<(u64, u64)>>,
    checked_events: AtomicU64,
    checked_answers: AtomicU64,
    limited: AtomicU64,
    interactions_answered: AtomicU64,
}

impl Findings {
    fn report(&self, what: &str, problems: Vec<String>, whole: &impl std::fmt::Display) {
        if problems.is_empty() {
            return;
        }
        let mut p = self.problems.lock().unwrap();
        if p.len() < 200 {
            p.push(format!("{what}: {problems:?}\n    in {whole:.600}"));
        }
    }
}

/// One bot of the long run.
#[derive(Clone)]
struct Bot {
    name: String,
    app: u64,
    user_id: u64,
    token: String,
    /// (server, channels) where it acts.
    places: Vec<(u64, Vec<u64>)>,
    /// Granted MANAGE_MESSAGES (the demo bot's grant has not: it deletes
    /// its own messages one by one).
    bulk: bool,
}

/// A REST call as the bot, waiting out a 429 (its shape checked) as a
/// library would, at most a few times.
fn call(node: &Node, f: &Findings, b: &Bot, method: &str, path: &str, body: Option<Value>) -> Resp {
    let a = auth(&b.token);
    for _ in 0..20 {
        let r = json_request(
            node.gateway,
            method,
            &format!("/api/v10{path}"),
            Some(&a),
            body.as_ref(),
        );
        if r.status != 429 {
            f.checked_answers.fetch_add(1, Relaxed);
            if r.status < 300 {
                let missing: Vec<String> = SIX
                    .iter()
                    .filter(|h| r.header(h).is_none())
                    .map(|h| format!("{h} missing"))
                    .collect();
                f.report(&format!("{method} {path} headers"), missing, &r.head);
            }
            return r;
        }
        f.limited.fetch_add(1, Relaxed);
        let mut e = Vec::new();
        if r.header("Via").is_none() {
            e.push("429 without Via".to_string());
        }
        let retry = r.json()["retry_after"].as_f64();
        if retry.is_none()
            || r.header("Retry-After")
                .and_then(|v| v.parse::<u64>().ok())
                .is_none()
        {
            e.push("429 without retry_after or an integer Retry-After".to_string());
        }
        f.report(&format!("{method} {path} 429"), e, &r.head);
        std::thread::sleep(Duration::from_secs_f64(
            retry.unwrap_or(1.0).clamp(0.01, 5.0),
        ));
    }
    panic!("{method} {path}: limited 20 times in a row");
}

fn expect(f: &Findings, what: &str, r: &Resp, status: u16) -> bool {
    if r.status == status {
        return true;
    }
    f.report(
        what,
        vec![format!("status {} (want {status})", r.status)],
        &r.body,
    );
    false
}

/// A message answer: whole, and authored by the bot that acted.
fn check_message(f: &Findings, what: &str, m: &Value, bot: u64) {
    let mut p = fields::message(m, what, false);
    if id_of(&m["author"]["id"]) != bot {
        p.push(format!("author is {} (want {bot})", m["author"]["id"]));
    }
    f.report(what, p, m);
}

/// The acting thread of one bot: every REST action in turn, over its
/// channels, until `until`.
fn act(node: &Node, f: &Findings, b: &Bot, until: Instant) {
    let mut round = 0u64;
    let mut mine: Vec<(u64, u64)> = Vec::new(); // (channel, message) still there
    while Instant::now() < until {
        round += 1;
        for (server, channels) in &b.places {
            for &ch in channels {
                if Instant::now() >= until {
                    return;
                }
                let msgs = format!("/channels/{ch}/messages");
                let r = call(
                    node,
                    f,
                    b,
                    "POST",
                    &msgs,
                    Some(
                        json!({"content": format!("{} round {round}", b.name), "nonce": format!("{}-{round}", b.app)}),
                    ),
                );
                if !expect(f, "create", &r, 200) {
                    continue;
                }
                let m = r.json();
                check_message(f, "create", &m, b.user_id);
                let id = id_of(&m["id"]);
                f.posted.lock().unwrap().insert(id, b.user_id);
                let r = call(
                    node,
                    f,
                    b,
                    "POST",
                    &msgs,
                    Some(
                        json!({"content": "a reply", "message_reference": {"message_id": id.to_string()},
                               "components": [{"type": 1, "components": [
                                   {"type": 2, "style": 1, "label": "Press", "custom_id": "press"}]}]}),
                    ),
                );
                if expect(f, "reply", &r, 200) {
                    let reply = r.json();
                    check_message(f, "reply", &reply, b.user_id);
                    f.posted
                        .lock()
                        .unwrap()
                        .insert(id_of(&reply["id"]), b.user_id);
                    mine.push((ch, id_of(&reply["id"])));
                }
                let r = call(
                    node,
                    f,
                    b,
                    "PATCH",
                    &format!("{msgs}/{id}"),
                    Some(json!({"content": format!("{} round {round} (edited)", b.name)})),
                );
                if expect(f, "edit", &r, 200) {
                    check_message(f, "edit", &r.json(), b.user_id);
                }
                let react = format!("{msgs}/{id}/reactions/%F0%9F%91%8D");
                let r = call(node, f, b, "PUT", &format!("{react}/@me"), None);
                expect(f, "react", &r, 204);
                let r = call(node, f, b, "GET", &react, None);
                if expect(f, "reactions", &r, 200) {
                    for (i, u) in r.json().as_array().into_iter().flatten().enumerate() {
                        f.report("reactions", fields::user(u, &format!("[{i}]")), u);
                    }
                }
                let r = call(node, f, b, "GET", &format!("{msgs}/{id}"), None);
                if expect(f, "get", &r, 200) {
                    check_message(f, "get", &r.json(), b.user_id);
                }
                let r = call(node, f, b, "DELETE", &format!("{react}/@me"), None);
                expect(f, "unreact", &r, 204);
                let r = call(node, f, b, "POST", &format!("/channels/{ch}/typing"), None);
                expect(f, "typing", &r, 204);
                let r = call(node, f, b, "GET", &format!("{msgs}?limit=10"), None);
                if expect(f, "list", &r, 200) {
                    for (i, m) in r.json().as_array().into_iter().flatten().enumerate() {
                        f.report("list", fields::message(m, &format!("[{i}]"), false), m);
                    }
                }
                // Every third round delete one of its replies, else
                // bulk-delete two once there are two.
                let two: Vec<u64> = mine
                    .iter()
                    .filter(|(c, _)| *c == ch)
                    .take(2)
                    .map(|(_, m)| *m)
                    .collect();
                if (round.is_multiple_of(3) || !b.bulk) && !two.is_empty() {
                    mine.retain(|(_, m)| *m != two[0]);
                    let r = call(node, f, b, "DELETE", &format!("{msgs}/{}", two[0]), None);
                    expect(f, "delete", &r, 204);
                } else if b.bulk && two.len() == 2 {
                    mine.retain(|(_, m)| !two.contains(m));
                    let ids: Vec<String> = two.iter().map(u64::to_string).collect();
                    let r = call(
                        node,
                        f,
                        b,
                        "POST",
                        &format!("{msgs}/bulk-delete"),
                        Some(json!({ "messages": ids })),
                    );
                    expect(f, "bulk delete", &r, 204);
                }
            }
            // The server's members, the bot among them.
            let r = call(
                node,
                f,
                b,
                "GET",
                &format!("/guilds/{server}/members?limit=10"),
                None,
            );
            if expect(f, "members", &r, 200) {
                for (i, m) in r.json().as_array().into_iter().flatten().enumerate() {
                    f.report("members", fields::member(m, &format!("[{i}]")), m);
                }
            }
            let r = call(
                node,
                f,
                b,
                "GET",
                &format!("/guilds/{server}/members/{}", b.user_id),
                None,
            );
            if expect(f, "member (the bot)", &r, 200) {
                f.report(
                    "member (the bot)",
                    fields::member(&r.json(), "member"),
                    &r.body,
                );
            }
        }
        // The bot itself.
        let r = call(node, f, b, "GET", "/users/@me", None);
        if expect(f, "users/@me", &r, 200) {
            f.report("users/@me", fields::own_user(&r.json(), "user"), &r.body);
            if id_of(&r.json()["id"]) != b.user_id {
                f.report("users/@me", vec!["another user".into()], &r.body);
            }
        }
        let r = call(node, f, b, "GET", "/users/@me/guilds", None);
        if expect(f, "users/@me/guilds", &r, 200) {
            for (i, g) in r.json().as_array().into_iter().flatten().enumerate() {
                f.report(
                    "users/@me/guilds",
                    fields::lacks(g, &format!("[{i}]"), fields::PARTIAL_GUILD),
                    g,
                );
            }
        }
        let r = call(node, f, b, "GET", "/oauth2/applications/@me", None);
        if expect(f, "applications/@me", &r, 200) {
            let mut p = fields::lacks(&r.json(), "application", fields::APPLICATION);
            p.extend(fields::user(&r.json()["bot"], "application.bot"));
            p.extend(fields::user(&r.json()["owner"], "application.owner"));
            f.report("applications/@me", p, &r.body);
        }
        let r = call(node, f, b, "GET", "/gateway/bot", None);
        expect(f, "gateway/bot", &r, 200);
    }
}

/// The gateway half of one bot: every dispatch checked against its field
/// list, its own messages' events noted, heartbeats kept, and its
/// interactions answered (a message with `?with_response=true`, or a
/// deferral, a follow-up and an edit of the original, in turn).
fn listen(node: &Node, f: &Findings, b: &Bot, mut s: Session, stop: &AtomicBool) {
    // Its member objects (op 8): GUILD_MEMBERS_CHUNK, checked below.
    let servers: Vec<String> = b.places.iter().map(|(g, _)| g.to_string()).collect();
    bot::send_json(
        &mut s.ws,
        &json!({"op": 8, "d": {"guild_id": servers, "query": "", "limit": 0, "nonce": "fields"}}),
    );
    let mut beat = Instant::now();
    let mut answered = 0u64;
    while !stop.load(Relaxed) {
        if beat.elapsed() > Duration::from_secs(10) {
            bot::send_json(&mut s.ws, &json!({"op": 1, "d": s.seq}));
            beat = Instant::now();
        }
        let v = match bot::read_next(&mut s.ws, Duration::from_millis(300)) {
            Next::Json(v) => v,
            Next::Timeout => continue,
            other => {
                f.report(&b.name, vec![format!("the session ended: {other:?}")], &"");
                return;
            }
        };
        match v["op"].as_u64() {
            Some(1) => {
                bot::send_json(&mut s.ws, &json!({"op": 1, "d": s.seq}));
                continue;
            }
            Some(0) => {}
            _ => continue,
        }
        s.seq = v["s"].as_u64().unwrap_or(s.seq);
        let (t, d) = (v["t"].as_str().unwrap_or(""), &v["d"]);
        if let Some(p) = fields::dispatch(t, d) {
            f.checked_events.fetch_add(1, Relaxed);
            f.report(&format!("{} {t}", b.name), p, d);
        }
        if t == "MESSAGE_CREATE" && id_of(&d["author"]["id"]) == b.user_id {
            f.seen_own
                .lock()
                .unwrap()
                .insert((b.user_id, id_of(&d["id"])));
        }
        if t == "INTERACTION_CREATE" && id_of(&d["application_id"]) == b.app {
            answered += 1;
            answer(node, f, b, d, answered.is_multiple_of(2));
        }
    }
}

fn answer(node: &Node, f: &Findings, b: &Bot, i: &Value, defer: bool) {
    let (id, token) = (
        i["id"].as_str().unwrap_or(""),
        i["token"].as_str().unwrap_or(""),
    );
    let callback = |body: Value, q: &str| {
        let bytes = serde_json::to_vec(&body).unwrap();
        request_with_body(
            node.gateway,
            "POST",
            &format!("/api/v10/interactions/{id}/{token}/callback{q}"),
            &[("Content-Type", "application/json")],
            Some(&bytes),
        )
        .unwrap()
    };
    let webhook = |method: &str, tail: &str, body: Option<Value>| {
        json_request(
            node.gateway,
            method,
            &format!("/api/v10/webhooks/{}/{token}{tail}", b.app),
            None,
            body.as_ref(),
        )
    };
    if !defer {
        let r = callback(
            json!({"type": 4, "data": {"content": "pong"}}),
            "?with_response=true",
        );
        if expect(f, "callback", &r, 200) {
            let v = r.json();
            let mut p = fields::lacks(
                &v["interaction"],
                "interaction",
                fields::CALLBACK_INTERACTION,
            );
            p.extend(fields::lacks(
                &v["resource"],
                "resource",
                &["type", "message"],
            ));
            f.report("callback", p, &v);
            check_message(f, "callback resource", &v["resource"]["message"], b.user_id);
            f.interactions_answered.fetch_add(1, Relaxed);
        }
        return;
    }
    let r = callback(json!({"type": 5}), "");
    if !expect(f, "deferral", &r, 204) {
        return;
    }
    let r = webhook("POST", "", Some(json!({"content": "a follow-up"})));
    if expect(f, "follow-up", &r, 200) {
        check_message(f, "follow-up", &r.json(), b.user_id);
        f.posted
            .lock()
            .unwrap()
            .insert(id_of(&r.json()["id"]), b.user_id);
    }
    let r = webhook(
        "PATCH",
        "/messages/@original",
        Some(json!({"content": "the answer"})),
    );
    if expect(f, "edit @original", &r, 200) {
        check_message(f, "edit @original", &r.json(), b.user_id);
    }
    let r = webhook("GET", "/messages/@original", None);
    if expect(f, "get @original", &r, 200) {
        check_message(f, "get @original", &r.json(), b.user_id);
        f.interactions_answered.fetch_add(1, Relaxed);
    }
}

#[test]
fn every_event_and_answer_holds_its_field_list_past_every_timer() {
    let secs = run_secs();
    // The timers, shortened so that each fires many times in the run:
    // the demo's `/ping` (every 5th tick: every second), the API views'
    // refresh, the registry leases behind them, the interaction tokens.
    let node = Node::start(&[
        "--demo-interval-ms",
        "200",
        "--rest-view-refresh-ms",
        "5000",
        "--lease-ttl-ms",
        "4000",
        "--interaction-token-ttl-ms",
        "20000",
        "--rest-limit-scale",
        "10",
    ]);
    let reg = Registry::new(node.dir.path());
    // Two servers, three channels each, alice a member of both; three
    // bots installed in both, each with a `/ping`.
    let mut servers = Vec::new();
    for i in 0..2 {
        let (s, general) = reg.add_server(&format!("fields-{i}"));
        let a = reg.add_channel(s, "alpha");
        let b = reg.add_channel(s, "beta");
        reg.add_member(s, "alice", &[]);
        servers.push((s, vec![general, a, b]));
    }
    let apps: Vec<App> = (0..3)
        .map(|i| {
            reg.add_app(
                &format!("fields-bot-{i}"),
                intent::GUILD_MEMBERS | intent::MESSAGE_CONTENT,
            )
        })
        .collect();
    for app in &apps {
        for (s, _) in &servers {
            reg.install(app.id, *s, Some(GRANT));
        }
        let r = json_request(
            node.gateway,
            "PUT",
            &format!("/api/v10/applications/{}/commands", app.id),
            Some(&auth(&app.token)),
            Some(&json!([{"name": "ping", "description": "Ping", "type": 1}])),
        );
        assert_eq!(r.status, 200, "{}", r.body);
    }
    // The demo bot acts too, in the demo server, where its pings are refused.
    let demo = bot::identify(node.gateway, "demo", &node.token, INTENTS, None).expect("identify");
    let (demo_server, demo_general) = bot::server_and_general(&demo.guild_creates[0]);
    let mut bots = vec![(
        Bot {
            name: "demo-bot".into(),
            app: demo.app_id(),
            user_id: id_of(&demo.ready["d"]["user"]["id"]),
            token: node.token.clone(),
            places: vec![(demo_server, vec![demo_general])],
            bulk: false,
        },
        demo,
    )];
    for app in &apps {
        let s =
            bot::identify(node.gateway, &app.name, &app.token, INTENTS, None).expect("identify");
        bots.push((
            Bot {
                name: app.name.clone(),
                app: app.id,
                user_id: id_of(&s.ready["d"]["user"]["id"]),
                token: app.token.clone(),
                places: servers.clone(),
                bulk: true,
            },
            s,
        ));
    }

    let node = Arc::new(node);
    let f = Arc::new(Findings::default());
    // What each bot got at connect: READY (its own whole user) and its
    // GUILD_CREATEs (its member's user partial).
    for (b, s) in &bots {
        let d = &s.ready["d"];
        f.report(&format!("{} READY", b.name), fields::ready(d, "READY"), d);
        for d in &s.guild_creates {
            let p = fields::guild_create(d, "GUILD_CREATE");
            f.report(&format!("{} GUILD_CREATE", b.name), p, d);
        }
        f.checked_events
            .fetch_add(1 + s.guild_creates.len() as u64, Relaxed);
    }
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let until = started + Duration::from_secs(secs);
    let mut listeners = Vec::new();
    let mut actors = Vec::new();
    let n_bots = bots.len();
    for (b, s) in bots {
        let (node2, f2, stop2, b2) = (node.clone(), f.clone(), stop.clone(), b.clone());
        listeners.push(std::thread::spawn(move || {
            listen(&node2, &f2, &b2, s, &stop2)
        }));
        let (node2, f2) = (node.clone(), f.clone());
        actors.push(std::thread::spawn(move || act(&node2, &f2, &b, until)));
    }
    // alice uses the bots' `/ping` (answered) and a command none of them
    // registered (refused at once, as the demo's `/ping` is), in turn.
    let clicker = {
        let (node, apps, servers) = (node.clone(), apps.clone(), servers.clone());
        std::thread::spawn(move || {
            let (mut clicks, mut n) = (Vec::new(), 0usize);
            while Instant::now() < until {
                let app = &apps[n % apps.len()];
                let (server, channels) = &servers[n % servers.len()];
                let at = Place {
                    app: app.id,
                    server: *server,
                    channel: channels[n % channels.len()],
                };
                let command = if n % 4 == 3 {
                    "never-registered"
                } else {
                    "ping"
                };
                clicks.push((
                    command,
                    interact::click(&node, at, &["--command", command]).wait(),
                ));
                n += 1;
            }
            clicks
        })
    };
    let mut panics = Vec::new();
    for a in actors {
        if let Err(e) = a.join() {
            panics.push(format!("an acting thread panicked: {e:?}"));
        }
    }
    let clicks = clicker.join().expect("the clicker");
    // The last events of the last actions.
    std::thread::sleep(Duration::from_secs(3));
    stop.store(true, Relaxed);
    for l in listeners {
        if let Err(e) = l.join() {
            panics.push(format!("a listening thread panicked: {e:?}"));
        }
    }
    let ran = started.elapsed();

    let problems = f.problems.lock().unwrap();
    assert!(
        panics.is_empty() && problems.is_empty(),
        "{} problems in {ran:?} ({} events, {} answers checked):\n{}\n{}",
        problems.len(),
        f.checked_events.load(Relaxed),
        f.checked_answers.load(Relaxed),
        panics.join("\n"),
        problems.join("\n")
    );
    // Every message a bot posted came back to it, as its own.
    let posted = f.posted.lock().unwrap();
    let seen = f.seen_own.lock().unwrap();
    let missing: Vec<_> = posted
        .iter()
        .filter(|(m, b)| !seen.contains(&(**b, **m)))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} posted messages never came back to their bot as its own: {:?}",
        missing.len(),
        posted.len(),
        &missing[..missing.len().min(10)]
    );
    // The run did what it says: the timers fired, every kind of thing ran.
    let refused = demo_pings_refused(&node);
    let answered = clicks
        .iter()
        .filter(|(c, (_, seen))| {
            *c == "ping" && seen.get("state").map(String::as_str) == Some("answered")
        })
        .count();
    let failed = clicks
        .iter()
        .filter(|(c, (_, seen))| {
            *c == "never-registered" && seen.get("state").map(String::as_str) == Some("failed")
        })
        .count();
    eprintln!(
        "field lists: {ran:?}, {} bots, {} events and {} answers checked, {} messages posted, \
         {} interactions answered ({answered} seen answered by alice), {failed} refused by command, \
         {refused} refused in all, {} 429s waited out",
        n_bots,
        f.checked_events.load(Relaxed),
        f.checked_answers.load(Relaxed),
        posted.len(),
        f.interactions_answered.load(Relaxed),
        f.limited.load(Relaxed),
    );
    assert!(ran >= Duration::from_secs(secs), "{ran:?}");
    assert!(
        refused >= (secs / 5) as f64,
        "the demo's /ping is refused every second: {refused} in {secs} s"
    );
    assert!(answered >= 2 && failed >= 1, "clicks: {clicks:?}");
    assert!(posted.len() >= 40, "{} messages posted", posted.len());
}
