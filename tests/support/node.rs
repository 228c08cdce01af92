//! Starting a real `gatewayd` process for a test: port 0 everywhere (the
//! node binds free ports itself and writes them to `gatewayd.addrs`), a
//! fresh data directory, and a wait until `/readyz` answers 200.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::http::http_get;

/// How long a node may take to bind its listeners and to become ready.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// A `gatewayd run` child process, killed on drop.
pub struct Node {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub gateway: SocketAddr,
    pub admin: SocketAddr,
    pub ingest: SocketAddr,
    /// The demo bot's token; empty with the demo off (`--no-demo`), and
    /// when this node shares a registry whose demo token another node wrote.
    pub token: String,
}

/// What the tests turn off unless they test it: they open many sessions of
/// one bot quickly. Passed before the test's own flags (the last flag wins).
const TEST_DEFAULTS: &[&str] = &["--identify-limits", "off", "--admission-per-second", "0"];

/// A loopback port nothing listens on right now (for "nothing listening"
/// checks only: a node started on it would race other tests).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `gatewayd run` on `data_dir` with every listener on port 0 (the
/// portal's written to gatewayd.portal-addr: support::portal::addr).
pub fn run_command(data_dir: &std::path::Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gatewayd"));
    cmd.arg("run")
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--gateway-addr", "127.0.0.1:0"])
        .args(["--admin-addr", "127.0.0.1:0"])
        .args(["--ingest-addr", "127.0.0.1:0"])
        .args(["--portal-addr", "127.0.0.1:0"]);
    cmd
}

impl Node {
    /// A node with the test defaults (identify limits and admission off)
    /// and then the flags given.
    pub fn start(extra: &[&str]) -> Node {
        let args: Vec<&str> = TEST_DEFAULTS.iter().chain(extra).copied().collect();
        Node::start_exactly(&args)
    }

    /// A node with only the flags given after its data directory and port-0
    /// addresses: e.g. `--config` of a shipped config, unaltered.
    pub fn start_exactly(args: &[&str]) -> Node {
        Node::start_in(tempfile::tempdir().unwrap(), args, Stdio::inherit())
    }

    /// [`Node::start`] with the node's stderr (its log) written to `log`.
    pub fn start_logging(extra: &[&str], log: &Path) -> Node {
        let args: Vec<&str> = TEST_DEFAULTS.iter().chain(extra).copied().collect();
        Node::start_in(tempfile::tempdir().unwrap(), &args, log_file(log))
    }

    /// Kills the node (SIGKILL: a crash, nothing flushed on the way out)
    /// and starts a new one on the same data directory with `extra` after
    /// the test defaults: what a node's state survives.
    pub fn crash_and_restart(self, extra: &[&str]) -> Node {
        self.crash_and_restart_with(extra, Stdio::inherit())
    }

    /// [`Node::crash_and_restart`] with the new node's stderr (its log)
    /// written to `log`.
    pub fn crash_and_restart_logging(self, extra: &[&str], log: &Path) -> Node {
        self.crash_and_restart_with(extra, log_file(log))
    }

    fn crash_and_restart_with(mut self, extra: &[&str], stderr: Stdio) -> Node {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let dir = tempfile::tempdir().unwrap();
        let old = std::mem::replace(&mut self.dir, dir);
        let _ = std::fs::remove_file(old.path().join("gatewayd.addrs"));
        drop(self);
        let args: Vec<&str> = TEST_DEFAULTS.iter().chain(extra).copied().collect();
        Node::start_in(old, &args, stderr)
    }

    /// `start_exactly` with these environment variables set for the node.
    pub fn start_exactly_with_env(args: &[&str], env: &[(&str, &str)]) -> Node {
        Node::start_in_env(tempfile::tempdir().unwrap(), args, env, Stdio::inherit())
    }

    /// `start` with these environment variables set for the node.
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Node {
        let args: Vec<&str> = TEST_DEFAULTS.iter().chain(extra).copied().collect();
        Node::start_in_env(tempfile::tempdir().unwrap(), &args, env, Stdio::inherit())
    }

    fn start_in(dir: tempfile::TempDir, args: &[&str], stderr: Stdio) -> Node {
        Node::start_in_env(dir, args, &[], stderr)
    }

    fn start_in_env(
        dir: tempfile::TempDir,
        args: &[&str],
        env: &[(&str, &str)],
        stderr: Stdio,
    ) -> Node {
        let mut cmd = run_command(dir.path());
        cmd.envs(env.iter().copied());
        cmd.args(args)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(Stdio::null())
            .stderr(stderr);
        let mut child = cmd.spawn().expect("spawn gatewayd");
        let deadline = Instant::now() + START_TIMEOUT;
        let (gateway, admin, ingest) = wait_for_addrs(dir.path(), || {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("gatewayd {args:?} exited early: {status}");
            }
        });
        let mut node = Node {
            child,
            dir,
            gateway,
            admin,
            ingest,
            token: String::new(),
        };
        loop {
            if let Some(status) = node.child.try_wait().unwrap() {
                panic!("gatewayd {args:?} exited before ready: {status}");
            }
            if http_get(node.admin, "/readyz").is_ok_and(|(s, _)| s == 200) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "gatewayd {args:?} not ready in {START_TIMEOUT:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        node.token = std::fs::read_to_string(node.token_path())
            .unwrap_or_default()
            .trim()
            .to_string();
        node
    }

    pub fn token_path(&self) -> PathBuf {
        self.dir.path().join("demo-token")
    }

    pub fn ws_url(&self) -> String {
        format!("ws://{}", self.gateway)
    }

    /// Send SIGTERM and wait for the process to exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        self.sigterm();
        self.child.wait().unwrap()
    }

    /// Send SIGTERM and return at once.
    pub fn sigterm(&self) {
        // SAFETY: kill(2) of our own child, not yet waited for (Drop waits),
        // so its pid cannot have been reused.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A node's stderr into a new file at `log`.
fn log_file(log: &Path) -> Stdio {
    std::fs::File::create(log)
        .unwrap_or_else(|e| panic!("creating {}: {e}", log.display()))
        .into()
}

/// Waits (up to 30 s) for `<dir>/gatewayd.addrs`, which a node started with
/// port 0 writes once its listeners are up, and returns its (gateway, admin,
/// ingest) addresses. `check` runs between polls (it may panic if the node
/// is gone).
/// Starts a node inside this test process (for tests that count its heap
/// with their own global allocator): every listener on port 0, no demo, no
/// identify limits, 2 workers, 256 sessions a worker and an 8 MiB arena
/// (small: such a test holds few sessions), then `adjust`. The node runs
/// until the test process ends; its egress child is this build's gatewayd.
/// Returns (gateway, admin, ingest).
pub fn in_process(
    dir: &Path,
    adjust: impl FnOnce(&mut gatewayd::config::Config),
) -> (SocketAddr, SocketAddr, SocketAddr) {
    let mut cfg = gatewayd::config::Config {
        data_dir: dir.to_path_buf(),
        gateway_addr: "127.0.0.1:0".parse().unwrap(),
        admin_addr: "127.0.0.1:0".parse().unwrap(),
        ..Default::default()
    };
    cfg.events.ingest_addr = "127.0.0.1:0".parse().unwrap();
    cfg.portal.addr = "127.0.0.1:0".parse().unwrap();
    cfg.demo.enabled = false;
    cfg.egress.program = env!("CARGO_BIN_EXE_gatewayd").into();
    cfg.registry.identify_limits = false;
    cfg.registry.admission_per_second = 0;
    cfg.workers = 2;
    cfg.limits.max_sessions_per_worker = 256;
    cfg.events.arena_bytes = 8 << 20;
    adjust(&mut cfg);
    std::thread::Builder::new()
        .name("node".into())
        .spawn(move || {
            if let Err(e) = gatewayd::node::run(cfg) {
                panic!("gatewayd: {e}");
            }
        })
        .unwrap();
    wait_for_addrs(dir, || {})
}

pub fn wait_for_addrs(dir: &Path, mut check: impl FnMut()) -> (SocketAddr, SocketAddr, SocketAddr) {
    let path = dir.join("gatewayd.addrs");
    let deadline = Instant::now() + START_TIMEOUT;
    let text = loop {
        check();
        if let Ok(text) = std::fs::read_to_string(&path) {
            if text.lines().count() >= 3 {
                break text;
            }
        }
        assert!(
            Instant::now() < deadline,
            "gatewayd not up in {START_TIMEOUT:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let addr = |name: &str| -> SocketAddr {
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{name}=")))
            .unwrap();
        line.split_once('=').unwrap().1.parse().unwrap()
    };
    (addr("gateway"), addr("admin"), addr("ingest"))
}
