//! An unmodified discord.js 14 slash-command bot (tests/js/slash_bot.js:
//! `application.commands.set`, `reply`, `deferReply` + `editReply` +
//! `followUp`, a button answered with `update`) against a real node, used
//! by a person through `gatewayd interact`; the test asserts what the
//! person sees. discord.js comes from `GATEWAYD_NODE_MODULES` (test-all
//! installs tests/js/package-lock.json outside the clone); without it the
//! test is ignored:
//!
//! ```sh
//! GATEWAYD_NODE_MODULES=/var/cache/gatewayd-ci/js/node_modules \
//!     cargo test --test discord_js_slash -- --include-ignored
//! ```

mod support;

use std::time::Duration;

use support::node::Node;

#[test]
#[ignore = "needs discord.js 14: run scripts/test-all.sh, or set GATEWAYD_NODE_MODULES (npm ci in tests/js)"]
fn discord_js_slash_commands_defer_edit_follow_up_and_buttons() {
    let modules = support::js::discord_js_modules();
    // The demo on: the tour starts once the demo's `/ping` and two
    // commands this bot never registered have been refused (issue 26).
    let node = Node::start(&[]);
    let (app, at) = support::interact::installed(&node, "js-slash-bot");
    let server = at.server;
    let (addr, guild) = (node.gateway.to_string(), server.to_string());
    let bot = support::js::spawn(
        &modules,
        &node,
        &app.token,
        "slash_bot.js",
        "js-slash-bot",
        &["--addr", &addr, "--guild", &guild, "--timeout", "90"],
    );
    if support::wait_until(Duration::from_secs(60), || bot.stdout().contains("READY")).is_none() {
        panic!("slash_bot.js never became ready\n{}", bot.kill());
    }
    let names = support::interact::guild_command_names(&node, &app, server);
    assert_eq!(names, ["menu", "ping", "slow"], "commands.set(guild)");
    let some = |v: &str| Some(v.to_string());
    support::interact::refused_first(&node, Some(at));
    // deferReply, then editReply("done") 2 s later, then followUp("and more").
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
    assert_eq!(
        ping,
        (0, some("answered"), some("pong")),
        "/ping\n{explain}"
    );
    assert_eq!(slow.0, 0, "/slow\n{explain}");
    assert_eq!(
        slow_seen["response_type"], 5,
        "the person saw the deferral first: {slow_seen}\n{explain}"
    );
    assert_eq!(
        slow_seen["message"]["content"], "done",
        "editReply edited the thinking message: {slow_seen}\n{explain}"
    );
    assert_eq!(menu, (0, some("Pick one")), "/menu\n{explain}");
    assert_eq!(
        button,
        (0, some("answered"), some("clicked"), Some(mid.clone())),
        "the button's update edits the /menu message\n{explain}"
    );
    let s = &run.summary;
    assert!(run.status.success() && s["ok"] == true, "{explain}");
    let synced = s["synced"].as_array().unwrap();
    assert_eq!(synced.len(), 3, "{explain}");
    assert!(
        synced.iter().all(|c| c["guild_id"] == guild.as_str()),
        "{explain}"
    );
    let h = &s["handled"];
    for name in ["ping", "slow", "menu"] {
        assert_eq!(h[name]["command"], name, "{explain}");
        assert_eq!(h[name]["type"], 2, "{explain}");
        assert_eq!(h[name]["member"], "alice", "{explain}");
        assert_eq!(h[name]["guild_id"], guild.as_str(), "{explain}");
        assert_eq!(h[name]["channel_id"], at.channel.to_string(), "{explain}");
    }
    let me = app.id.to_string();
    assert_eq!(h["ping"]["me"], me.as_str(), "{explain}");
    assert_eq!(
        (&h["ping"]["said_author"], &h["ping"]["replied_author"]),
        (&serde_json::json!(me), &serde_json::json!(me)),
        "channel.send and reply, authored by the bot: {explain}"
    );
    assert_eq!(h["ping"]["replied_to"], h["ping"]["said_id"], "{explain}");
    assert_eq!(h["slow"]["edited"], "done", "{explain}");
    assert_eq!(h["slow"]["followup"], "and more", "{explain}");
    assert_eq!(h["menu"]["original"]["id"], mid.as_str(), "{explain}");
    assert_eq!(h["menu"]["original"]["components"], 1, "{explain}");
    assert_eq!(h["click"]["type"], 3, "{explain}");
    assert_eq!(h["click"]["custom_id"], "menu:click", "{explain}");
    assert_eq!(
        h["click"]["message_id"],
        mid.as_str(),
        "discord.js parsed the button's message: {explain}"
    );
}
