//! An unmodified discord.py 2.x bot (tests/py/bot.py) against a real `gatewayd`.
//!
//! The Python interpreter is taken from `GATEWAYD_PYTHON` (`.ci/run` points it
//! at a venv with tests/py/requirements.txt installed). Without it, `python3`
//! is used if it can `import discord`. If no interpreter with discord.py 2.x is
//! found, the tests FAIL when `CI` is set and are skipped with a message
//! otherwise. To run them locally:
//!
//! ```sh
//! python3 -m venv ~/.cache/gatewayd-ci/venv
//! ~/.cache/gatewayd-ci/venv/bin/pip install -r tests/py/requirements.txt
//! GATEWAYD_PYTHON=~/.cache/gatewayd-ci/venv/bin/python cargo test --test discord_py
//! ```
//!
//! `GATEWAYD_TRACE=1` makes the bot log every raw gateway frame to stderr,
//! which the failing test prints.

mod support;

use std::time::Duration;
use support::node::Node;
use support::python::{BotRun, Script};

fn run_bot(python: &str, node: &Node, mode: &str) -> BotRun {
    let addr = node.gateway.to_string();
    let args = [
        "--addr",
        &addr,
        "--mode",
        mode,
        "--want",
        "2",
        "--timeout",
        "60",
    ];
    Script::spawn(python, node, "bot.py", &format!("bot-{mode}"), &args).wait()
}

#[test]
#[ignore = "needs discord.py 2.x: run scripts/test-all.sh, or set GATEWAYD_PYTHON to a venv with tests/py/requirements.txt"]
fn discord_py_bot_gets_ready_and_demo_messages() {
    let python = support::python::discord_py_python();
    let node = Node::start(&[
        "--demo-interval-ms",
        "200",
        "--heartbeat-interval-ms",
        "1000",
    ]);
    let run = run_bot(&python, &node, "messages");
    let s = &run.summary;
    assert!(run.status.success(), "{}", run.explain());
    assert_eq!(s["ok"], true, "{}", run.explain());

    // READY / GUILD_CREATE as discord.py's cache saw them at on_ready.
    assert_eq!(
        s["ready_count"],
        1,
        "on_ready must fire exactly once: {}",
        run.explain()
    );
    assert_eq!(s["user"]["bot"], true, "{}", run.explain());
    assert!(
        s["session_id"].as_str().is_some_and(|id| !id.is_empty()),
        "{}",
        run.explain()
    );
    let expected_resume = format!("ws://{}", node.gateway);
    assert!(
        s["resume_gateway_url"]
            .as_str()
            .is_some_and(|u| u.starts_with(&expected_resume)),
        "resume_gateway_url must lead back to this node ({expected_resume}): {}",
        run.explain()
    );
    let guilds = s["guilds"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", run.explain()));
    let demo = guilds
        .iter()
        .find(|g| g["name"] == "Demo Server")
        .unwrap_or_else(|| {
            panic!(
                "discord.py has no Demo Server after on_ready (GUILD_CREATE missing?): {}",
                run.explain()
            )
        });
    assert!(
        demo["text_channels"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c == "general"),
        "Demo Server without #general: {}",
        run.explain()
    );

    // MESSAGE_CREATE with full content (message_content intent approved).
    let messages = s["messages"].as_array().unwrap();
    assert!(messages.len() >= 2, "{}", run.explain());
    for m in messages {
        assert!(
            m["content"].as_str().unwrap().starts_with("demo message "),
            "{m}"
        );
        assert_eq!(
            m["author"], "alice",
            "the demo server owner posts the demo messages: {m}"
        );
        assert_eq!(m["author_bot"], false, "{m}");
        assert_eq!(
            m["channel"], "general",
            "channel not resolved from GUILD_CREATE: {m}"
        );
        assert_eq!(m["guild"], "Demo Server", "{m}");
    }
    // Heartbeat ACK: discord.py measured a finite latency.
    assert!(
        s["latency_ms"].is_number(),
        "no heartbeat ACK: {}",
        run.explain()
    );
    assert!(
        s["logged_errors"].as_array().unwrap().is_empty(),
        "{}",
        run.explain()
    );
    eprintln!("discord.py summary: {s:#}");
}

#[test]
#[ignore = "needs discord.py 2.x: run scripts/test-all.sh, or set GATEWAYD_PYTHON to a venv with tests/py/requirements.txt"]
fn discord_py_bad_token_raises_login_failure() {
    let python = support::python::discord_py_python();
    let node = Node::start(&["--no-demo-traffic"]);
    let run = run_bot(&python, &node, "bad-token");
    assert_eq!(run.summary["outcome"], "LoginFailure", "{}", run.explain());
    assert!(run.status.success(), "{}", run.explain());
}

#[test]
#[ignore = "needs discord.py 2.x: run scripts/test-all.sh, or set GATEWAYD_PYTHON to a venv with tests/py/requirements.txt"]
fn discord_py_unapproved_presences_intent_raises_privileged_intents_required() {
    let python = support::python::discord_py_python();
    let node = Node::start(&["--no-demo-traffic"]);
    let run = run_bot(&python, &node, "privileged-refused");
    assert_eq!(
        run.summary["outcome"],
        "PrivilegedIntentsRequired",
        "{}",
        run.explain()
    );
    assert!(run.status.success(), "{}", run.explain());
}

/// The classic "!ping" bot (tests/py/ping_bot.py), unmodified discord.py but
/// for the base URLs, acting through the REST edge: send, reply, edit,
/// react, delete, a 30-message burst through the 5-per-5-s channel limit
/// with no 429 ever reaching the library, and each action seen coming back
/// as an event. The node runs its demo, and the person writes only once
/// the demo's `/ping` has been refused twice (issue 26); the bot must still
/// hear the demo after its own messages came back.
#[test]
#[ignore = "needs discord.py 2.x: run scripts/test-all.sh, or set GATEWAYD_PYTHON to a venv with tests/py/requirements.txt"]
fn discord_py_ping_bot_acts_through_the_rest_edge() {
    use support::events::{message_event, Producer};
    let python = support::python::discord_py_python();
    // The demo on, at its default pace, as `cargo run --release` runs it.
    let node = Node::start(&[]);
    let probe = support::bot::identify(
        node.gateway,
        "probe",
        &node.token,
        support::BOT_INTENTS,
        None,
    )
    .expect("identify");
    let (server, general) = support::bot::server_and_general(&probe.guild_creates[0]);
    probe.close_politely();

    let addr = node.gateway.to_string();
    let mut bot = Script::spawn(
        &python,
        &node,
        "ping_bot.py",
        "ping-bot",
        &["--addr", &addr, "--timeout", "90"],
    );
    let ready = support::wait_until(Duration::from_secs(30), || bot.stdout().contains("READY"));
    if ready.is_none() {
        let _ = bot.child.kill();
        panic!("ping_bot.py never reached on_ready\n{}", bot.stderr());
    }
    // Past the demo's timers; then a person writes "!ping" in #general,
    // with an id of now (the chat service keeps another source's message
    // only if it is the channel's newest, and the demo posts every second).
    support::interact::refused_first(&node, None);
    let person_message = registry::snowflake::SnowflakeGenerator::new(7).next_id();
    Producer::connect(node.ingest).send(&message_event(
        person_message,
        server,
        general,
        "!ping",
        &[],
    ));
    let run = bot.wait();
    let (status, s) = (run.status, &run.summary);
    let explain = || {
        format!(
            "ping_bot.py exited {status}\n--- summary ---\n{s:#}\n--- stderr ---\n{}",
            run.stderr
        )
    };
    assert!(status.success() && s["ok"] == true, "{}", explain());
    assert_eq!(
        s["gateway_alive"],
        true,
        "discord.py's gateway task ended: {}",
        explain()
    );
    assert_eq!(s["alive_after_actions"], true, "{}", explain());
    assert_eq!(s["pong"]["content"], "pong", "{}", explain());
    assert_eq!(s["pong"]["author_is_me"], true, "{}", explain());
    assert_eq!(s["reply"]["type"], "MessageType.reply", "{}", explain());
    assert_eq!(
        s["reply"]["ref"],
        person_message.to_string(),
        "the reply names the person's message: {}",
        explain()
    );
    assert_eq!(s["edited"]["content"], "pong (edited)", "{}", explain());
    assert_eq!(s["edited"]["edited_at"], true, "{}", explain());
    assert_eq!(s["fetched"]["content"], "pong (edited)", "{}", explain());
    assert_eq!(
        s["fetched"]["reactions"],
        serde_json::json!(["\u{1F44D}"]),
        "{}",
        explain()
    );
    assert_eq!(s["burst_ok"], 30, "{}", explain());
    assert_eq!(
        s["rate_limited_logged"],
        serde_json::json!([]),
        "no 429 may reach the library: {}",
        explain()
    );
    let reactions = s["reactions"].as_array().unwrap();
    assert!(
        reactions
            .iter()
            .any(|r| r["message"] == person_message.to_string().as_str()
                && r["emoji"] == "\u{1F440}"),
        "the bot reacted to the person's message: {}",
        explain()
    );
    assert!(
        reactions.iter().all(|r| r["user_is_me"] == true),
        "{}",
        explain()
    );
    // Every message it sent came back to it as MESSAGE_CREATE (32 = pong, reply, 30).
    let own: Vec<&str> = s["own_created"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    for id in s["sent"].as_array().unwrap() {
        assert!(
            own.contains(&id.as_str().unwrap()),
            "{id} never came back: {}",
            explain()
        );
    }
    assert_eq!(s["sent"].as_array().unwrap().len(), 32, "{}", explain());
}
