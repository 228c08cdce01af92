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

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use support::node::Node;

/// The bot gives up after 60 s by itself; this only guards against a hang.
const PROCESS_TIMEOUT: Duration = Duration::from_secs(120);

struct BotRun {
    status: std::process::ExitStatus,
    summary: serde_json::Value,
    stdout: String,
    stderr: String,
}

impl BotRun {
    fn explain(&self) -> String {
        format!(
            "bot.py exited {}\n--- summary ---\n{:#}\n--- stdout ---\n{}\n--- stderr (discord.py log) ---\n{}",
            self.status, self.summary, self.stdout, self.stderr
        )
    }
}

fn run_bot(python: &str, node: &Node, mode: &str) -> BotRun {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/py/bot.py");
    let out_path: PathBuf = node.dir.path().join(format!("bot-{mode}.stdout"));
    let err_path: PathBuf = node.dir.path().join(format!("bot-{mode}.stderr"));
    let mut child = Command::new(python)
        .arg(&script)
        .args([
            "--addr",
            &node.gateway.to_string(),
            "--mode",
            mode,
            "--want",
            "2",
            "--timeout",
            "60",
        ])
        .env("GATEWAYD_TOKEN", &node.token)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {python} {}: {e}", script.display()));
    let deadline = Instant::now() + PROCESS_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "bot.py still running after {PROCESS_TIMEOUT:?}\n--- stderr ---\n{}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stdout = std::fs::read_to_string(&out_path).unwrap_or_default();
    let stderr = std::fs::read_to_string(&err_path).unwrap_or_default();
    let summary = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or(serde_json::Value::Null);
    BotRun {
        status,
        summary,
        stdout,
        stderr,
    }
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
        assert_eq!(m["author"], "demo-user", "{m}");
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
    let node = Node::start(&["--no-demo"]);
    let run = run_bot(&python, &node, "bad-token");
    assert_eq!(run.summary["outcome"], "LoginFailure", "{}", run.explain());
    assert!(run.status.success(), "{}", run.explain());
}

#[test]
#[ignore = "needs discord.py 2.x: run scripts/test-all.sh, or set GATEWAYD_PYTHON to a venv with tests/py/requirements.txt"]
fn discord_py_unapproved_presences_intent_raises_privileged_intents_required() {
    let python = support::python::discord_py_python();
    let node = Node::start(&["--no-demo"]);
    let run = run_bot(&python, &node, "privileged-refused");
    assert_eq!(
        run.summary["outcome"],
        "PrivilegedIntentsRequired",
        "{}",
        run.explain()
    );
    assert!(run.status.success(), "{}", run.explain());
}
