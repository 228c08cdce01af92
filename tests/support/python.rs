//! The Python interpreter for the library tests (discord.py 2.x, hikari
//! 2.x), and the scripts of tests/py run with it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::node::Node;

/// The Python interpreter with discord.py 2.x for the library tests:
/// `GATEWAYD_PYTHON`, else `python3` if it has discord.py. Those tests are
/// `#[ignore]`d (plain `cargo test` lists them, with the reason); run with
/// `--include-ignored` (scripts/test-all.sh makes the venv) they fail here
/// without one.
pub fn discord_py_python() -> String {
    python_with(
        "discord.py 2.x",
        "import discord, sys; sys.exit(0 if discord.version_info.major == 2 else 3)",
    )
}

/// The Python interpreter with hikari 2.x (tests/hikari.rs), found as
/// [`discord_py_python`] finds discord.py: the same venv holds both
/// (tests/py/requirements.txt).
pub fn hikari_python() -> String {
    python_with(
        "hikari 2.x",
        "import hikari, sys; sys.exit(0 if hikari.__version__.split('.')[0] == '2' else 3)",
    )
}

/// `GATEWAYD_PYTHON` (which must pass `check`), else `python3` if it
/// passes; panics with how to make the venv otherwise.
fn python_with(what: &str, check_code: &str) -> String {
    let check = |p: &str| -> Result<(), String> {
        let out = Command::new(p)
            .args(["-c", check_code])
            .output()
            .map_err(|e| format!("cannot run {p}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{p} has no {what} ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    };
    if let Some(p) = std::env::var_os("GATEWAYD_PYTHON") {
        let p = p.to_string_lossy().into_owned();
        check(&p).unwrap_or_else(|e| panic!("GATEWAYD_PYTHON is set but unusable: {e}"));
        return p;
    }
    match check("python3") {
        Ok(()) => "python3".into(),
        Err(e) => panic!(
            "this test needs {what}: {e}\n  scripts/test-all.sh makes a venv; by hand: \
             python3 -m venv /tmp/venv && /tmp/venv/bin/pip install -r tests/py/requirements.txt \
             && export GATEWAYD_PYTHON=/tmp/venv/bin/python"
        ),
    }
}

/// A script of tests/py exits by itself; this only guards against a hang.
const PROCESS_TIMEOUT: Duration = Duration::from_secs(120);

/// A finished script: its status, stdout, stderr and summary (the last
/// non-empty stdout line, as JSON).
pub struct BotRun {
    pub name: String,
    pub status: std::process::ExitStatus,
    pub summary: serde_json::Value,
    pub stdout: String,
    pub stderr: String,
}

impl BotRun {
    pub fn explain(&self) -> String {
        format!(
            "{} exited {}\n--- summary ---\n{:#}\n--- stdout ---\n{}\n--- stderr (the library's log) ---\n{}",
            self.name, self.status, self.summary, self.stdout, self.stderr
        )
    }
}

/// A script of tests/py running against `node` (a bot token in
/// GATEWAYD_TOKEN), stdout and stderr into the node's directory.
pub struct Script {
    pub name: String,
    pub child: std::process::Child,
    out_path: PathBuf,
    err_path: PathBuf,
}

impl Script {
    /// As the node's demo bot.
    pub fn spawn(python: &str, node: &Node, file: &str, tag: &str, args: &[&str]) -> Script {
        Script::spawn_as(python, node, &node.token, file, tag, args)
    }

    /// As the bot whose token is `token`.
    pub fn spawn_as(
        python: &str,
        node: &Node,
        token: &str,
        file: &str,
        tag: &str,
        args: &[&str],
    ) -> Script {
        let script = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/py")
            .join(file);
        let mut cmd = Command::new(python);
        cmd.arg(&script)
            .args(args)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONUNBUFFERED", "1");
        Script::spawn_command(cmd, node, token, file, tag)
    }

    /// `cmd` (an interpreter and its script) as the bot whose token is
    /// `token` (in GATEWAYD_TOKEN), stdout and stderr into the node's
    /// directory as `{tag}.stdout` and `{tag}.stderr`.
    pub fn spawn_command(
        mut cmd: Command,
        node: &Node,
        token: &str,
        file: &str,
        tag: &str,
    ) -> Script {
        let out_path: PathBuf = node.dir.path().join(format!("{tag}.stdout"));
        let err_path: PathBuf = node.dir.path().join(format!("{tag}.stderr"));
        let child = cmd
            .env("GATEWAYD_TOKEN", token)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out_path).unwrap())
            .stderr(std::fs::File::create(&err_path).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        Script {
            name: file.to_string(),
            child,
            out_path,
            err_path,
        }
    }

    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.out_path).unwrap_or_default()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err_path).unwrap_or_default()
    }

    /// Wait for it to exit (at most PROCESS_TIMEOUT).
    pub fn wait(mut self) -> BotRun {
        let deadline = Instant::now() + PROCESS_TIMEOUT;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "{} still running after {PROCESS_TIMEOUT:?}\n--- stderr ---\n{}",
                    self.name,
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let (stdout, stderr) = (self.stdout(), self.stderr());
        let summary = stdout
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .and_then(|l| serde_json::from_str(l).ok())
            .unwrap_or(serde_json::Value::Null);
        BotRun {
            name: self.name,
            status,
            summary,
            stdout,
            stderr,
        }
    }

    /// Kill it now (a test that gives up on it).
    pub fn kill(mut self) -> String {
        let _ = self.child.kill();
        let _ = self.child.wait();
        format!(
            "--- {} stdout ---\n{}\n--- stderr ---\n{}",
            self.name,
            self.stdout(),
            self.stderr()
        )
    }
}

/// The interpreter of the venv, checked to have PyNaCl (the interactions
/// endpoint scripts verify signatures with it).
pub fn python_with_nacl() -> String {
    let p = std::env::var("GATEWAYD_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = std::process::Command::new(&p)
        .args(["-c", "import nacl.signing"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "{p} has no PyNaCl: pip install -r tests/py/requirements.txt into a venv and set GATEWAYD_PYTHON");
    p
}

/// `tests/py/interactions_endpoint.py` verifying with `verify_key` (`mode`:
/// `pong`, or `hang` for an endpoint too slow for the 3-second rule),
/// listening on loopback; killed on drop.
pub struct NaclEndpoint {
    child: std::process::Child,
    /// `http://127.0.0.1:PORT/interactions`.
    pub url: String,
}

impl NaclEndpoint {
    pub fn start(verify_key: &str, mode: &str) -> NaclEndpoint {
        use std::io::BufRead;
        let mut child = std::process::Command::new(python_with_nacl())
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/py/interactions_endpoint.py"
            ))
            .args([verify_key, mode])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("start the interactions endpoint");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .strip_prefix("port=")
            .expect("port=N")
            .to_string();
        NaclEndpoint {
            child,
            url: format!("http://127.0.0.1:{port}/interactions"),
        }
    }
}

impl Drop for NaclEndpoint {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
