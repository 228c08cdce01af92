//! An unmodified discord.py 2.x slash-command bot (tests/py/slash_bot.py:
//! `app_commands.CommandTree`, `tree.sync`, `interaction.response`,
//! `interaction.followup`, a `discord.ui.View` button) against a real
//! node, used by a person through `gatewayd interact`; the test asserts what
//! the person sees. The interpreter is found as for tests/discord_py.rs
//! (`GATEWAYD_PYTHON`); without discord.py the test is ignored:
//!
//! ```sh
//! GATEWAYD_PYTHON=/var/cache/gatewayd-ci/venv/bin/python \
//!     cargo test --test discord_py_slash -- --include-ignored
//! ```

mod support;

use std::time::Duration;

use support::node::Node;
use support::python::Script;

#[test]
#[ignore = "needs discord.py 2.x: run scripts/test-all.sh, or set GATEWAYD_PYTHON to a venv with tests/py/requirements.txt"]
fn discord_py_slash_commands_defer_follow_up_and_buttons() {
    let python = support::python::discord_py_python();
    let node = Node::start(&["--no-demo-traffic"]);
    let (app, at) = support::interact::installed(&node, "slash-bot");
    let server = at.server;

    let addr = node.gateway.to_string();
    let guild = server.to_string();
    let bot = Script::spawn_as(
        &python,
        &node,
        &app.token,
        "slash_bot.py",
        "slash-bot",
        &["--addr", &addr, "--guild", &guild, "--timeout", "90"],
    );
    if support::wait_until(Duration::from_secs(60), || bot.stdout().contains("READY")).is_none() {
        panic!("slash_bot.py never reached on_ready\n{}", bot.kill());
    }
    // tree.sync(guild=...) registered the three commands in the server's scope.
    let names = support::interact::guild_command_names(&node, &app, server);
    assert_eq!(names, ["menu", "ping", "slow"]);
    // /ping: send_message("pong"); /slow: defer(), 5 s later followup.send("done");
    // /menu: a message with a View whose button the person clicks.
    let t = support::interact::tour(&node, at);
    let (ping, slow, slow_seen, menu, mid, button) = (
        t.ping,
        t.slow,
        t.slow_seen,
        t.menu,
        t.menu_message,
        t.button,
    );
    let run = bot.wait();
    let explain = run.explain();
    let s = &run.summary;
    let some = |v: &str| Some(v.to_string());
    assert_eq!(
        ping,
        (0, some("answered"), some("pong")),
        "/ping\n{explain}"
    );
    assert_eq!(
        slow,
        (0, some("deferred"), some("done")),
        "/slow\n{explain}"
    );
    assert_eq!(
        slow_seen["response_type"], 5,
        "the person saw the deferral first: {slow_seen}"
    );
    assert_eq!(menu, (0, some("Pick one")), "/menu\n{explain}");
    assert_eq!(
        button,
        (0, some("answered"), some("clicked"), Some(mid.clone())),
        "the button edits the /menu message\n{explain}"
    );
    assert!(run.status.success() && s["ok"] == true, "{explain}");

    // What discord.py made of the node's payloads.
    let synced = s["synced"].as_array().unwrap();
    assert_eq!(synced.len(), 3, "{explain}");
    assert!(
        synced.iter().all(|c| c["guild_id"] == guild.as_str()),
        "{explain}"
    );
    let h = &s["handled"];
    for name in ["ping", "slow", "menu"] {
        assert_eq!(h[name]["command"], name, "{explain}");
        assert_eq!(h[name]["type"], "InteractionType.application_command");
        assert_eq!(h[name]["user"], "alice", "{explain}");
        assert_eq!(h[name]["user_is_member"], true, "{explain}");
        assert_eq!(h[name]["guild_id"], guild.as_str(), "{explain}");
        assert_eq!(h[name]["channel"], "general", "{explain}");
    }
    assert_eq!(h["slow"]["followup"]["content"], "done", "{explain}");
    assert_eq!(h["menu"]["original"]["id"], mid.as_str(), "{explain}");
    assert_eq!(h["menu"]["original"]["components"], 1, "{explain}");
    assert_eq!(h["click"]["type"], "InteractionType.component");
    assert_eq!(h["click"]["custom_id"], "menu:click", "{explain}");
    assert_eq!(
        h["click"]["message_id"],
        mid.as_str(),
        "discord.py parsed the message the button is on: {explain}"
    );
}
