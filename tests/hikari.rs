//! An unmodified hikari 2.x `GatewayBot` (tests/py/hikari_bot.py) against
//! a real `gatewayd`: the only change is `rest_url=`; hikari takes the
//! gateway URL from `GET /gateway/bot` and resumes to READY's
//! `resume_gateway_url` (docs/libraries.md, "hikari").
//!
//! The interpreter is found as for tests/discord_py.rs (`GATEWAYD_PYTHON`,
//! a venv with tests/py/requirements.txt, which holds hikari too):
//!
//! ```sh
//! GATEWAYD_PYTHON=/var/cache/gatewayd-ci/venv/bin/python \
//!     cargo test --test hikari -- --include-ignored
//! ```
//!
//! Every run fails on any ERROR hikari logs and on any 429 it reports
//! (its "rate limited" warnings and its TRACE log of each REST status).
//! What the bot saw is its JSON summary, printed with the bot's log when a
//! test fails; `GATEWAYD_TRACE=1` adds hikari's DEBUG log.

mod support;

use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::events::{message_event, Producer};
use support::metrics::metric;
use support::node::Node;
use support::python::{BotRun, Script};

/// What a user object carries only for its own user (`GET /users/@me`,
/// READY), never as another message's author.
const PRIVATE_USER_FIELDS: [&str; 5] =
    ["email", "verified", "mfa_enabled", "locale", "premium_type"];

fn spawn(python: &str, node: &Node, token: &str, tag: &str, args: &[&str]) -> Script {
    let addr = node.gateway.to_string();
    let mut all = vec!["--addr", addr.as_str()];
    all.extend_from_slice(args);
    Script::spawn_as(python, node, token, "hikari_bot.py", tag, &all)
}

/// Waits (up to `limit`) for a stdout line starting with `prefix`; kills
/// the bot and panics with its log if none comes.
fn wait_line(bot: Script, prefix: &str, limit: Duration) -> (Script, String) {
    let found = |b: &Script| {
        b.stdout()
            .lines()
            .find(|l| l.starts_with(prefix))
            .map(str::to_string)
    };
    if support::wait_until(limit, || found(&bot).is_some()).is_none() {
        panic!(
            "hikari_bot.py printed no {prefix:?} in {limit:?}\n{}",
            bot.kill()
        );
    }
    let line = found(&bot).unwrap();
    (bot, line)
}

/// `GET /api/v10/users/@me` with `token`: the bot user's id.
fn rest_user_id(node: &Node, token: &str) -> String {
    let r = support::http::json_request(
        node.gateway,
        "GET",
        "/api/v10/users/@me",
        Some(&format!("Bot {token}")),
        None,
    );
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()["id"].as_str().unwrap().to_string()
}

/// The Demo Server and its #general, from a raw session's GUILD_CREATE.
fn demo_server_and_general(node: &Node) -> (u64, u64) {
    let probe = support::bot::identify(
        node.gateway,
        "probe",
        &node.token,
        support::BOT_INTENTS,
        None,
    )
    .expect("identify");
    let ids = support::bot::server_and_general(&probe.guild_creates[0]);
    probe.close_politely();
    ids
}

/// A person's MESSAGE_CREATE as the chat service commits it
/// (`support::events::message_event`: content, an embed, an attachment, a
/// button row and a poll), its components numbered as the platform numbers
/// them: hikari 2.7 reads every component's `id` (`entity_factory.py`,
/// `_deserialize_button`: `payload["id"]`) and drops the whole event with
/// a KeyError, logged at ERROR, without one.
fn person_message(id: u64, server: u64, channel: u64, content: &str) -> support::events::Event {
    let mut ev = message_event(id, server, channel, content, &[]);
    let mut n = 0;
    for row in ev.d["components"].as_array_mut().unwrap() {
        n += 1;
        row["id"] = n.into();
        for c in row["components"].as_array_mut().unwrap() {
            n += 1;
            c["id"] = n.into();
        }
    }
    ev
}

/// What every run must show: exit 0 with `ok`, no ERROR, no 429, no gap in
/// the dispatch sequence.
fn assert_clean(run: &BotRun) {
    let s = &run.summary;
    let explain = run.explain();
    assert_eq!(
        s["logged_errors"],
        serde_json::json!([]),
        "hikari logged an ERROR: {explain}"
    );
    assert_eq!(
        s["rate_limited_logged"],
        serde_json::json!([]),
        "hikari reported a 429: {explain}"
    );
    assert_eq!(
        s["seq_gaps"],
        serde_json::json!([]),
        "dispatch sequence numbers are not consecutive: {explain}"
    );
    assert!(
        run.status.success() && s["ok"] == true,
        "hikari_bot.py did not hold its expectations: {explain}"
    );
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// READY (the bot user of `GET /users/@me`), Demo Server and #general in
/// hikari's cache, consecutive `demo message N` MESSAGE_CREATEs from
/// alice at consecutive sequence numbers, a heartbeat ACK; and hikari's
/// default transport compression (zlib-stream) served by the node.
#[test]
#[ignore = "needs hikari: run scripts/test-all.sh, or set GATEWAYD_PYTHON to a venv with tests/py/requirements.txt"]
fn hikari_gets_ready_and_consecutive_demo_messages_over_zlib_stream() {
    let python = support::python::hikari_python();
    let node = Node::start(&[
        "--demo-interval-ms",
        "200",
        "--heartbeat-interval-ms",
        "1000",
    ]);
    let me = rest_user_id(&node, &node.token);
    let hold = node.dir.path().join("hikari-hold");
    let hold_arg = hold.to_string_lossy().into_owned();
    let bot = spawn(
        &python,
        &node,
        &node.token,
        "hikari-messages",
        &[
            "--mode",
            "messages",
            "--want",
            "3",
            "--hold-file",
            &hold_arg,
            "--timeout",
            "60",
        ],
    );
    let (bot, _) = wait_line(bot, "HOLDING", Duration::from_secs(90));
    // hikari is the node's only gateway client: the one compressed session
    // is its (the gauge is refreshed by housekeeping: wait for it).
    let compressed = support::wait_until(Duration::from_secs(15), || {
        metric(&node, "gatewayd_compressed_sessions") == 1.0
    });
    let out_bytes = metric(&node, "gatewayd_compression_out_bytes_total");
    let stored = metric(&node, "gatewayd_compression_stored_total");
    std::fs::write(&hold, b"").unwrap();
    let run = bot.wait();
    let explain = run.explain();
    let s = &run.summary;
    assert_clean(&run);

    // READY, as hikari's ShardReadyEvent gave it.
    let ready = s["ready_events"].as_array().unwrap();
    assert_eq!(ready.len(), 1, "one READY: {explain}");
    let r = &ready[0];
    assert_eq!(
        r["user_id"],
        me.as_str(),
        "READY's user is GET /users/@me's: {explain}"
    );
    assert_eq!(r["is_bot"], true, "{explain}");
    assert_eq!(
        s["me"]["id"],
        me.as_str(),
        "hikari's cached own user: {explain}"
    );
    assert_eq!(r["gateway_version"], 10, "{explain}");
    assert!(
        r["session_id"].as_str().is_some_and(|id| !id.is_empty()),
        "{explain}"
    );
    assert!(
        r["resume_gateway_url"]
            .as_str()
            .is_some_and(|u| u.starts_with(&node.ws_url())),
        "resume_gateway_url must lead back to this node ({}): {explain}",
        node.ws_url()
    );

    // The cache GUILD_CREATE filled.
    let demo = s["guilds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "Demo Server")
        .unwrap_or_else(|| panic!("no Demo Server in hikari's cache: {explain}"));
    assert!(
        strs(&demo["text_channels"]).contains(&"general".to_string()),
        "Demo Server without #general in hikari's cache: {explain}"
    );

    // The demo's messages: full content, alice (not a bot), #general
    // resolved from the cache, consecutive numbers at consecutive `s`.
    let messages = s["messages"].as_array().unwrap();
    assert!(messages.len() >= 2, "{explain}");
    let mut prev: Option<(u64, u64)> = None;
    for m in messages {
        let content = m["content"].as_str().unwrap();
        let n: u64 = content
            .strip_prefix("demo message ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("not a demo message: {m}"));
        assert_eq!(m["author"], "alice", "the demo server's owner posts: {m}");
        assert_eq!(m["author_is_bot"], false, "{m}");
        assert_eq!(
            m["channel"], "general",
            "channel not resolved from the cache: {m}"
        );
        assert_eq!(m["guild"], "Demo Server", "{m}");
        let seq = m["seq"].as_u64().unwrap_or_else(|| panic!("no raw s: {m}"));
        if let Some((pn, ps)) = prev {
            assert_eq!(
                (n, seq),
                (pn + 1, ps + 1),
                "consecutive demo messages at consecutive s: {explain}"
            );
        }
        prev = Some((n, seq));
    }
    assert!(
        s["heartbeat_latency_ms"].is_number(),
        "no heartbeat ACK: {explain}"
    );

    // Compression: hikari asked for zlib-stream, parsed every frame through
    // its inflater (its zlib transport fails on a text frame), and the node
    // served it compressed.
    assert_eq!(
        s["compression"],
        serde_json::json!(["transport_zlib_stream"]),
        "{explain}"
    );
    assert_eq!(
        s["held_transport"], "_GatewayZlibStreamTransport",
        "{explain}"
    );
    assert!(
        compressed.is_some(),
        "gatewayd_compressed_sessions never read 1 with hikari connected: {explain}"
    );
    assert!(out_bytes > 0.0, "the node compressed nothing");
    assert_eq!(
        stored, 0.0,
        "served compressing, not stored blocks past the cap"
    );
    eprintln!("hikari summary: {s:#}");
}

/// A node with its demo at the default pace, hikari connected as the demo
/// bot, past the demo's timers (its `/ping` refused twice), and a person's
/// "!ping" in #general: what the act mode did and saw.
struct Acted {
    run: BotRun,
    me: String,
    person: u64,
}

fn act(tag: &str) -> Acted {
    let python = support::python::hikari_python();
    let node = Node::start(&[]);
    let me = rest_user_id(&node, &node.token);
    let (server, general) = demo_server_and_general(&node);
    let bot = spawn(
        &python,
        &node,
        &node.token,
        tag,
        &["--mode", "act", "--timeout", "100"],
    );
    let (bot, _) = wait_line(bot, "READY", Duration::from_secs(60));
    support::interact::refused_first(&node, None);
    let person = registry::snowflake::SnowflakeGenerator::new(7).next_id();
    Producer::connect(node.ingest).send(&person_message(person, server, general, "!ping"));
    let run = bot.wait();
    Acted { run, me, person }
}

/// Every kind of action through the REST edge, with hikari's own model
/// methods (`Message.respond`, `respond(reply=True)`, `edit`,
/// `add_reaction`, `remove_reaction`, `delete`, `rest.fetch_message`),
/// each seen coming back over its gateway session as its event, and the
/// demo still delivered afterwards.
#[test]
#[ignore = "needs hikari: run scripts/test-all.sh, or set GATEWAYD_PYTHON to a venv with tests/py/requirements.txt"]
fn hikari_acts_through_the_rest_edge() {
    let Acted { run, me, person } = act("hikari-act");
    let s = &run.summary;
    let explain = run.explain();
    assert_clean(&run);
    assert_eq!(
        s["gateway_alive"], true,
        "hikari's shard stopped: {explain}"
    );
    let person = person.to_string();
    assert_eq!(s["person"]["id"], person.as_str(), "{explain}");
    assert_eq!(s["person"]["channel"], "general", "{explain}");

    // send
    assert_eq!(s["pong"]["content"], "pong", "{explain}");
    assert_eq!(s["pong"]["author_is_me"], true, "{explain}");
    // reply
    assert_eq!(s["reply"]["type"], "REPLY", "{explain}");
    assert_eq!(
        s["reply"]["ref"],
        person.as_str(),
        "the reply names the person's message: {explain}"
    );
    assert_eq!(s["reply"]["referenced_content"], "!ping", "{explain}");
    // edit
    assert_eq!(s["edited"]["content"], "pong (edited)", "{explain}");
    assert_eq!(s["edited"]["edited_at"], true, "{explain}");
    // fetch, with the reaction, then without it once removed
    assert_eq!(s["fetched"]["content"], "pong (edited)", "{explain}");
    assert_eq!(
        s["fetched"]["reactions"],
        serde_json::json!(["\u{1F44D}"]),
        "{explain}"
    );
    assert_eq!(s["fetched"]["author_is_me"], true, "{explain}");
    assert_eq!(
        s["fetched_after_removal"]["reactions"],
        serde_json::json!([]),
        "{explain}"
    );

    let pong = s["pong"]["id"].as_str().unwrap().to_string();
    let reply = s["reply"]["id"].as_str().unwrap().to_string();
    // Each came back as its event.
    let created: Vec<String> = s["own_created"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    let sent = strs(&s["sent"]);
    assert_eq!(sent.len(), 2, "{explain}");
    for id in &sent {
        assert_eq!(
            created.iter().filter(|c| *c == id).count(),
            1,
            "MESSAGE_CREATE of {id} exactly once: {explain}"
        );
    }
    assert!(
        s["updated"]
            .as_array()
            .unwrap()
            .iter()
            .any(|u| u["id"] == pong.as_str() && u["content"] == "pong (edited)"),
        "MESSAGE_UPDATE of the edit: {explain}"
    );
    let added = s["reactions_added"].as_array().unwrap();
    assert!(
        added.iter().any(|r| r["message"] == person.as_str()
            && r["emoji"] == "\u{1F440}"
            && r["user_is_me"] == true),
        "MESSAGE_REACTION_ADD on the person's message: {explain}"
    );
    assert!(
        added.iter().any(|r| r["message"] == pong.as_str()
            && r["emoji"] == "\u{1F44D}"
            && r["user_is_me"] == true),
        "MESSAGE_REACTION_ADD on the pong: {explain}"
    );
    assert!(
        s["reactions_removed"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["message"] == pong.as_str()
                && r["emoji"] == "\u{1F44D}"
                && r["user_is_me"] == true),
        "MESSAGE_REACTION_REMOVE of its own reaction: {explain}"
    );
    assert!(
        strs(&s["deleted"]).contains(&reply),
        "MESSAGE_DELETE of the reply: {explain}"
    );
    assert_eq!(s["alive_after_actions"], true, "{explain}");
    assert_eq!(s["me"], me.as_str(), "{explain}");
    eprintln!(
        "hikari act: {} s of actions, rest statuses {}",
        s["actions_s"], s["rest_statuses"]
    );
}

/// The bot's own messages, once the demo's timers have fired (its `/ping`
/// refused twice: issue 26 lost the author from then on), come back with
/// the bot as author (`author.id` the bot's, `is_bot`), and the raw author
/// object is a public user: none of the fields only one's own user has.
#[test]
#[ignore = "needs hikari: run scripts/test-all.sh, or set GATEWAYD_PYTHON to a venv with tests/py/requirements.txt"]
fn hikari_own_messages_come_back_with_a_public_author() {
    let Acted { run, me, .. } = act("hikari-author");
    let s = &run.summary;
    let explain = run.explain();
    let own = s["own_created"].as_array().unwrap();
    assert!(own.len() >= 2, "its messages came back: {explain}");
    let updated = s["updated"].as_array().unwrap();
    for m in own {
        assert_eq!(m["author_id"], me.as_str(), "hikari's Message.author: {m}");
        assert_eq!(m["author_is_bot"], true, "{m}");
        let raw = &m["raw_author"];
        assert_eq!(raw["id"], me.as_str(), "raw MESSAGE_CREATE author: {m}");
        assert_eq!(raw["bot"], true, "{m}");
        let private: Vec<&str> = PRIVATE_USER_FIELDS
            .iter()
            .copied()
            .filter(|f| raw.get(f).is_some())
            .collect();
        assert!(
            private.is_empty(),
            "MESSAGE_CREATE's author carries the bot's private fields {private:?}: {raw}"
        );
    }
    for u in updated.iter().filter(|u| u["raw_author"].is_object()) {
        let raw = &u["raw_author"];
        let private: Vec<&str> = PRIVATE_USER_FIELDS
            .iter()
            .copied()
            .filter(|f| raw.get(f).is_some())
            .collect();
        assert!(
            private.is_empty(),
            "MESSAGE_UPDATE's author carries private fields {private:?}: {raw}"
        );
    }
    assert_clean(&run);
}

/// A person uses `/ping`, which hikari registered in the server
/// (`rest.set_application_commands(app, [slash_command_builder], guild=)`)
/// and answers with `create_initial_response`: the person sees "pong".
#[test]
#[ignore = "needs hikari: run scripts/test-all.sh, or set GATEWAYD_PYTHON to a venv with tests/py/requirements.txt"]
fn hikari_answers_a_slash_command() {
    let python = support::python::hikari_python();
    let node = Node::start(&["--no-demo-traffic"]);
    let (app, at) = support::interact::installed(&node, "hikari-slash");
    let guild = at.server.to_string();
    let bot = spawn(
        &python,
        &node,
        &app.token,
        "hikari-slash",
        &["--mode", "slash", "--guild", &guild, "--timeout", "90"],
    );
    let (bot, _) = wait_line(bot, "READY", Duration::from_secs(60));
    assert_eq!(
        support::interact::guild_command_names(&node, &app, at.server),
        ["ping"]
    );
    let (status, seen) = support::interact::click(&node, at, &["--command", "ping"]).wait();
    let run = bot.wait();
    let explain = run.explain();
    let s = &run.summary;
    assert_eq!(
        (
            status,
            seen.get("state").map(String::as_str),
            seen.get("content").map(String::as_str)
        ),
        (0, Some("answered"), Some("pong")),
        "what the person saw: {seen:?}\n{explain}"
    );
    assert_clean(&run);
    assert_eq!(
        s["application_id"],
        app.id.to_string().as_str(),
        "{explain}"
    );
    assert_eq!(s["synced"][0]["name"], "ping", "{explain}");
    assert_eq!(s["synced"][0]["guild_id"], guild.as_str(), "{explain}");
    let h = &s["handled"]["ping"];
    assert_eq!(h["command"], "ping", "{explain}");
    assert_eq!(h["type"], "APPLICATION_COMMAND", "{explain}");
    assert_eq!(h["user"], "alice", "{explain}");
    assert_eq!(h["member"], "alice", "{explain}");
    assert_eq!(h["guild_id"], guild.as_str(), "{explain}");
    assert_eq!(
        h["channel_id"],
        at.channel.to_string().as_str(),
        "{explain}"
    );
    assert_eq!(h["channel_name"], "general", "{explain}");
    assert_eq!(h["registered_guild_id"], guild.as_str(), "{explain}");
    assert_eq!(
        h["original"]["content"], "pong",
        "fetch_initial_response: {explain}"
    );
    if let Some(mid) = seen.get("message_id") {
        assert_eq!(h["original"]["id"], mid.as_str(), "{explain}");
    }
}

/// `rest.fetch_application()` (`GET /oauth2/applications/@me`), a bot's
/// way to its application id and public key (hikari's `InteractionServer`
/// calls it for the key it verifies requests with), parses: hikari reads `approximate_guild_count` and
/// `approximate_user_install_count` among others (`entity_factory.py`,
/// `deserialize_application`), a KeyError without them.
#[test]
#[ignore = "needs hikari: run scripts/test-all.sh, or set GATEWAYD_PYTHON to a venv with tests/py/requirements.txt"]
fn hikari_fetches_its_application() {
    let python = support::python::hikari_python();
    let node = Node::start(&["--no-demo-traffic"]);
    let me = rest_user_id(&node, &node.token);
    let bot = spawn(
        &python,
        &node,
        &node.token,
        "hikari-app",
        &["--mode", "app", "--timeout", "60"],
    );
    let run = bot.wait();
    let explain = run.explain();
    let s = &run.summary;
    assert_clean(&run);
    let app = &s["application"];
    assert_eq!(
        app["id"], s["ready_events"][0]["application_id"],
        "{explain}"
    );
    assert_eq!(
        app["id"],
        me.as_str(),
        "the demo application is its bot user's id: {explain}"
    );
    assert_eq!(
        app["public_key_len"], 32,
        "verify_key is an Ed25519 key: {explain}"
    );
}

/// A bot sends a message with a button row (`rest.create_message(channel,
/// content, component=row)`): hikari parses the REST answer and the
/// message's MESSAGE_CREATE, components included. hikari 2.7 reads every
/// component's `id` (`entity_factory.py`, `_deserialize_action_row_component`
/// and `_deserialize_button`: `payload["id"]`), which the platform numbers
/// from 1 when the bot gives none; without it `create_message` raises
/// KeyError and the echo is dropped with an ERROR.
#[test]
#[ignore = "needs hikari: run scripts/test-all.sh, or set GATEWAYD_PYTHON to a venv with tests/py/requirements.txt"]
fn hikari_sends_a_message_with_a_button() {
    let python = support::python::hikari_python();
    let node = Node::start(&["--no-demo-traffic"]);
    let (_, general) = demo_server_and_general(&node);
    let channel = general.to_string();
    let bot = spawn(
        &python,
        &node,
        &node.token,
        "hikari-button",
        &[
            "--mode",
            "button",
            "--channels",
            &channel,
            "--timeout",
            "60",
        ],
    );
    let run = bot.wait();
    let explain = run.explain();
    let s = &run.summary;
    assert_clean(&run);
    for (what, m) in [("REST answer", &s["rest"]), ("MESSAGE_CREATE", &s["echo"])] {
        let rows = m["components"].as_array().unwrap();
        assert_eq!(rows.len(), 1, "{what}: one row: {explain}");
        assert_eq!(rows[0]["type"], "ACTION_ROW", "{what}: {explain}");
        let buttons = rows[0]["components"].as_array().unwrap();
        assert_eq!(buttons.len(), 1, "{what}: {explain}");
        assert_eq!(buttons[0]["type"], "BUTTON", "{what}: {explain}");
        assert_eq!(buttons[0]["custom_id"], "press", "{what}: {explain}");
        assert_eq!(buttons[0]["label"], "Press", "{what}: {explain}");
        assert!(
            rows[0]["id"].is_u64()
                && buttons[0]["id"].is_u64()
                && rows[0]["id"] != buttons[0]["id"],
            "{what}: every component numbered: {explain}"
        );
    }
}

/// A TCP proxy between hikari and the node (the node's `--public-url`
/// points at it, so `GET /gateway/bot` and READY's `resume_gateway_url`
/// lead through it). `cut` drops every connection without a WebSocket
/// close (both TCP halves shut down) and refuses new ones until `restore`.
struct Proxy {
    addr: SocketAddr,
    target: Arc<Mutex<Option<SocketAddr>>>,
    up: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    live: Arc<Mutex<Vec<(TcpStream, TcpStream)>>>,
    accepted: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
}

impl Proxy {
    fn start() -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let p = Proxy {
            addr: listener.local_addr().unwrap(),
            target: Arc::new(Mutex::new(None)),
            up: Arc::new(AtomicBool::new(true)),
            stop: Arc::new(AtomicBool::new(false)),
            live: Arc::new(Mutex::new(Vec::new())),
            accepted: Arc::new(AtomicUsize::new(0)),
            refused: Arc::new(AtomicUsize::new(0)),
        };
        let (target, up, stop, live, accepted, refused) = (
            p.target.clone(),
            p.up.clone(),
            p.stop.clone(),
            p.live.clone(),
            p.accepted.clone(),
            p.refused.clone(),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let client = match listener.accept() {
                    Ok((c, _)) => c,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                    Err(_) => continue,
                };
                let to = *target.lock().unwrap();
                let Some(to) = to.filter(|_| up.load(Ordering::SeqCst)) else {
                    refused.fetch_add(1, Ordering::Relaxed);
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                let Ok(server) = TcpStream::connect(to) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                client.set_nonblocking(false).unwrap();
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                accepted.fetch_add(1, Ordering::Relaxed);
                let pipe = |mut from: TcpStream, mut to: TcpStream| {
                    std::thread::spawn(move || {
                        let _ = std::io::copy(&mut from, &mut to);
                        let _ = to.shutdown(Shutdown::Write);
                    });
                };
                pipe(client.try_clone().unwrap(), server.try_clone().unwrap());
                pipe(server.try_clone().unwrap(), client.try_clone().unwrap());
                live.lock().unwrap().push((client, server));
            }
        });
        p
    }

    fn forward_to(&self, to: SocketAddr) {
        *self.target.lock().unwrap() = Some(to);
    }

    /// Every live connection dropped (no close frame either way), new ones
    /// refused.
    fn cut(&self) -> usize {
        self.up.store(false, Ordering::SeqCst);
        let mut live = self.live.lock().unwrap();
        let n = live.len();
        for (c, s) in live.drain(..) {
            let _ = c.shutdown(Shutdown::Both);
            let _ = s.shutdown(Shutdown::Both);
        }
        n
    }

    fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.cut();
    }
}

/// hikari's connection drops without a close (a proxy in between cuts
/// it and refuses new connections for a while); the test posts messages
/// meanwhile. hikari must come back with RESUME of the same session
/// (no second Identify), get RESUMED, and every message posted while it
/// was away exactly once, in order, at consecutive sequence numbers.
#[test]
#[ignore = "needs hikari: run scripts/test-all.sh, or set GATEWAYD_PYTHON to a venv with tests/py/requirements.txt"]
fn hikari_resumes_after_a_cut_without_losing_events() {
    const AWAY: usize = 5;
    let python = support::python::hikari_python();
    let proxy = Proxy::start();
    let public = format!("ws://{}", proxy.addr);
    let node = Node::start(&["--no-demo-traffic", "--public-url", &public]);
    proxy.forward_to(node.gateway);
    let (server, general) = demo_server_and_general(&node);
    let bot = spawn(
        &python,
        &node,
        &node.token,
        "hikari-resume",
        &["--mode", "resume", "--until", "after", "--timeout", "100"],
    );
    let (bot, ready_line) = wait_line(bot, "READY session=", Duration::from_secs(60));
    assert!(
        proxy.accepted.load(Ordering::Relaxed) >= 1,
        "hikari did not connect through --public-url: {ready_line}"
    );
    let seq_at_ready: u64 = ready_line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("seq="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{ready_line}"));
    // Let the GUILD_CREATE land too (READY is printed when start() returns).
    std::thread::sleep(Duration::from_millis(500));

    let cut = proxy.cut();
    assert_eq!(cut, 1, "one connection through the proxy");
    let mut producer = Producer::connect(node.ingest);
    let ids = registry::snowflake::SnowflakeGenerator::new(9);
    let mut away_ids = Vec::new();
    for i in 0..AWAY {
        let id = ids.next_id();
        away_ids.push(id.to_string());
        producer.send(&person_message(id, server, general, &format!("away {i}")));
    }
    // Away for a while: hikari's reconnects meet a refusing proxy.
    std::thread::sleep(Duration::from_secs(3));
    proxy.restore();
    let (bot, _) = wait_line(bot, "RESUMED", Duration::from_secs(90));
    producer.send(&person_message(ids.next_id(), server, general, "after"));
    let run = bot.wait();
    let explain = run.explain();
    let s = &run.summary;
    assert_clean(&run);

    let ready = s["ready_events"].as_array().unwrap();
    assert_eq!(
        ready.len(),
        1,
        "hikari identified again instead of resuming: {explain}"
    );
    let session = ready[0]["session_id"].as_str().unwrap();
    let ops: Vec<&Value> = s["sent_ops"].as_array().unwrap().iter().collect();
    assert_eq!(
        ops.iter().filter(|o| o["op"] == 2).count(),
        1,
        "one Identify: {explain}"
    );
    let resumes: Vec<&&Value> = ops.iter().filter(|o| o["op"] == 6).collect();
    assert!(!resumes.is_empty(), "hikari sent no Resume: {explain}");
    for r in &resumes {
        assert_eq!(
            r["session_id"], session,
            "Resume of READY's session: {explain}"
        );
    }
    let resumed = s["resumed"].as_array().unwrap();
    assert_eq!(resumed.len(), 1, "one RESUMED: {explain}");
    assert_eq!(resumed[0]["session_id"], session, "{explain}");

    // Every message posted while away, once each, in order, then "after".
    let contents: Vec<String> = s["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect();
    let mut want: Vec<String> = (0..AWAY).map(|i| format!("away {i}")).collect();
    want.push("after".into());
    assert_eq!(
        contents, want,
        "what hikari dispatched after the cut: {explain}"
    );
    // No gap: the replay starts right after the `seq` hikari's Resume
    // named (what it had when the cut came: READY and GUILD_CREATE).
    let first_away = s["messages"][0]["seq"].as_u64().unwrap();
    let resume_seq = resumes[0]["seq"].as_u64().unwrap();
    assert!(resume_seq >= seq_at_ready, "{explain}");
    assert_eq!(
        first_away,
        resume_seq + 1,
        "the replay follows the Resume's seq: {explain}"
    );
    let got_ids: Vec<String> = s["messages"].as_array().unwrap()[..AWAY]
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(got_ids, away_ids, "{explain}");
    eprintln!(
        "hikari resume: proxy refused {} connection(s) while away; hikari's failed attempts {}, backoffs {}, \
         dispatches {}",
        proxy.refused.load(Ordering::Relaxed),
        s["connect_failures"],
        s["backoffs_s"],
        s["dispatch_log"]
    );
}

/// 30 sends to one channel at once (`asyncio.gather` of
/// `rest.create_message`) under the real limits (5 per 5 s per channel):
/// hikari paces them from the node's rate-limit headers, so none gets a
/// 429 by its own logging, the node answered no 429, and every message
/// comes back over its gateway session exactly once.
#[test]
#[ignore = "needs hikari: run scripts/test-all.sh, or set GATEWAYD_PYTHON to a venv with tests/py/requirements.txt"]
fn hikari_burst_of_30_sends_on_one_channel_meets_no_429() {
    const PER: usize = 30;
    let python = support::python::hikari_python();
    let node = Node::start(&["--no-demo-traffic"]);
    let (_, general) = demo_server_and_general(&node);
    let channel = general.to_string();
    let per = PER.to_string();
    let bot = spawn(
        &python,
        &node,
        &node.token,
        "hikari-burst",
        &[
            "--mode",
            "burst",
            "--channels",
            &channel,
            "--per",
            &per,
            "--timeout",
            "100",
        ],
    );
    let run = bot.wait();
    let explain = run.explain();
    let s = &run.summary;
    assert_eq!(
        s["send_failures"],
        serde_json::json!([]),
        "every send succeeds: {explain}"
    );
    assert_clean(&run);
    let sent = s["sent"].as_array().unwrap();
    assert_eq!(sent.len(), PER, "{explain}");
    let mut ids: Vec<&str> = sent.iter().map(|m| m["id"].as_str().unwrap()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), PER, "unique message ids: {explain}");
    assert!(sent.iter().all(|m| m["channel"] == channel.as_str()));
    assert_eq!(s["missing"], serde_json::json!([]), "{explain}");
    assert_eq!(s["duplicated"], serde_json::json!([]), "{explain}");
    assert_eq!(s["created"].as_array().unwrap().len(), PER, "{explain}");
    assert!(
        s["rest_statuses"].get("429").is_none(),
        "a 429 in hikari's REST log: {explain}"
    );
    assert_eq!(
        metric(&node, "gatewayd_rest_limited_total"),
        0.0,
        "the node answered no 429"
    );
    let mut at: Vec<f64> = sent.iter().filter_map(|m| m["at_s"].as_f64()).collect();
    at.sort_by(f64::total_cmp);
    eprintln!(
        "hikari burst: {PER} sends in {} s, statuses {}, returned at {at:?} s",
        s["burst_s"], s["rest_statuses"]
    );
}

/// A raw session served zlib-stream, holding the node's one compressing
/// place (`--max-compressed-sessions 1`): Hello, Identify (GUILDS only: no
/// message traffic to it), and what follows read for a second, all binary.
fn hold_compressed_slot(node: &Node) -> support::bot::Ws {
    let mut ws =
        support::bot::connect_path(node.gateway, "/?v=10&encoding=json&compress=zlib-stream");
    support::bot::send_json(
        &mut ws,
        &support::bot::identify_payload(
            &format!("Bot {}", node.token),
            support::intent::GUILDS,
            None,
        ),
    );
    let until = Instant::now() + Duration::from_secs(1);
    let mut binary = 0;
    while let Some(left) = until.checked_duration_since(Instant::now()) {
        ws.get_ref()
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match ws.read() {
            Ok(tungstenite::Message::Binary(_)) => binary += 1,
            Ok(tungstenite::Message::Text(t)) => panic!("the holder was served text: {t:.200}"),
            Ok(_) => {}
            Err(_) => break,
        }
    }
    assert!(
        binary >= 2,
        "the holder was served zlib-stream (Hello, READY, ...): {binary} frames"
    );
    ws
}

/// Past `--max-compressed-sessions` (its one place held by another
/// connection) hikari, asking for zlib-stream as always, is served the
/// stream's framing with nothing compressed (stored deflate blocks): its
/// zlib transport reads every frame, so it gets READY at once, with no
/// retry, and the demo's messages; no ERROR (a text frame there would be
/// hikari's "Unexpected message type received TEXT, expected BINARY").
#[test]
#[ignore = "needs hikari: run scripts/test-all.sh, or set GATEWAYD_PYTHON to a venv with tests/py/requirements.txt"]
fn hikari_past_the_compression_cap_reads_stored_blocks() {
    let python = support::python::hikari_python();
    let node = Node::start(&[
        "--demo-interval-ms",
        "200",
        "--max-compressed-sessions",
        "1",
    ]);
    let holder = hold_compressed_slot(&node);
    let stored_before = metric(&node, "gatewayd_compression_stored_total");
    let hold = node.dir.path().join("hikari-hold");
    let hold_arg = hold.to_string_lossy().into_owned();
    let bot = spawn(
        &python,
        &node,
        &node.token,
        "hikari-cap",
        &[
            "--mode",
            "messages",
            "--want",
            "3",
            "--hold-file",
            &hold_arg,
            "--timeout",
            "60",
        ],
    );
    let (bot, _) = wait_line(bot, "HOLDING", Duration::from_secs(90));
    let stored = metric(&node, "gatewayd_compression_stored_total") - stored_before;
    // Housekeeping refreshes the gauge: the holder's stream is the only
    // compressing one (a stored stream is not counted).
    let compressing = support::wait_until(Duration::from_secs(15), || {
        metric(&node, "gatewayd_compressed_sessions") == 1.0
    });
    std::fs::write(&hold, b"").unwrap();
    let run = bot.wait();
    drop(holder);
    let explain = run.explain();
    let s = &run.summary;
    assert_clean(&run);
    assert_eq!(
        stored, 1.0,
        "hikari's connection was served stored blocks: {explain}"
    );
    assert!(
        compressing.is_some(),
        "gatewayd_compressed_sessions is not 1 (the holder's): {explain}"
    );
    assert_eq!(s["ready_events"].as_array().unwrap().len(), 1, "{explain}");
    assert_eq!(
        s["connect_failures"],
        serde_json::json!([]),
        "no retry needed: {explain}"
    );
    assert_eq!(
        s["compression"],
        serde_json::json!(["transport_zlib_stream"]),
        "{explain}"
    );
    assert_eq!(
        s["held_transport"], "_GatewayZlibStreamTransport",
        "{explain}"
    );
    let messages = s["messages"].as_array().unwrap();
    assert!(
        messages.len() >= 3
            && messages.iter().all(|m| m["content"]
                .as_str()
                .is_some_and(|c| c.starts_with("demo message "))),
        "demo messages through the stored stream: {explain}"
    );
}
