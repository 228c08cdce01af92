//! Starts a real `gatewayd` process on free loopback ports for a test.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Node {
    pub child: Child,
    pub dir: tempfile::TempDir,
    pub gateway: SocketAddr,
    pub admin: SocketAddr,
    pub ingest: SocketAddr,
    pub token: String,
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Node {
    /// Start a node with the demo source posting every `demo_ms` and the extra flags given.
    pub fn start(extra: &[&str]) -> Node {
        let dir = tempfile::tempdir().unwrap();
        // Port 0 everywhere: the node binds free ports itself and writes them
        // to gatewayd.addrs (picking free ports here would race other tests).
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gatewayd"));
        cmd.arg("run")
            .arg("--data-dir")
            .arg(dir.path())
            .arg("--gateway-addr")
            .arg("127.0.0.1:0")
            .arg("--admin-addr")
            .arg("127.0.0.1:0")
            .arg("--ingest-addr")
            .arg("127.0.0.1:0")
            // Tests open many sessions of one bot quickly; the tests of the
            // limits themselves turn them back on (the last flag wins).
            .arg("--identify-limits")
            .arg("off")
            .arg("--admission-per-second")
            .arg("0")
            .args(extra)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        let mut child = cmd.spawn().expect("spawn gatewayd");
        let deadline = Instant::now() + Duration::from_secs(30);
        let (gateway, admin, ingest) = wait_for_addrs(dir.path(), || {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("gatewayd exited early: {status}");
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
                panic!("gatewayd exited early: {status}");
            }
            if http_get(node.admin, "/readyz")
                .map(|(s, _)| s == 200)
                .unwrap_or(false)
            {
                break;
            }
            assert!(Instant::now() < deadline, "gatewayd not ready in 30 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        // Empty when this node shares a registry whose demo token another node wrote.
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
        // SAFETY: kill(2) of our own child, not yet waited for, so its pid cannot have been reused.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        self.child.wait().unwrap()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits (up to 30 s) for `<dir>/gatewayd.addrs`, which a node started with
/// port 0 writes once its listeners are up, and returns its (gateway, admin,
/// ingest) addresses. `check` runs between polls (it may panic if the node
/// is gone).
pub fn wait_for_addrs(
    dir: &std::path::Path,
    mut check: impl FnMut(),
) -> (SocketAddr, SocketAddr, SocketAddr) {
    let path = dir.join("gatewayd.addrs");
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        check();
        if let Ok(text) = std::fs::read_to_string(&path) {
            if text.lines().count() == 3 {
                break text;
            }
        }
        assert!(Instant::now() < deadline, "gatewayd not up in 30 s");
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

/// A one-shot HTTP/1.1 GET; returns (status, body).
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    http_request(addr, "GET", path, &[])
}

pub fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf).to_string();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// The Python interpreter with discord.py 2.x for the library tests:
/// `GATEWAYD_PYTHON`, else `python3` if it has discord.py. Those tests are
/// `#[ignore]`d (plain `cargo test` lists them, with the reason); run with
/// `--include-ignored` (scripts/test-all.sh makes the venv) they fail here
/// without one.
pub fn discord_py_python() -> String {
    let check = |p: &str| -> Result<(), String> {
        let out = Command::new(p)
            .args([
                "-c",
                "import discord, sys; sys.exit(0 if discord.version_info.major == 2 else 3)",
            ])
            .output()
            .map_err(|e| format!("cannot run {p}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{p} has no discord.py 2.x ({}): {}",
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
            "this test needs discord.py 2.x: {e}\n  scripts/test-all.sh makes a venv; by hand: \
             python3 -m venv /tmp/venv && /tmp/venv/bin/pip install -r tests/py/requirements.txt \
             && export GATEWAYD_PYTHON=/tmp/venv/bin/python"
        ),
    }
}
