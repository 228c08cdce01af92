//! Real servers a test owns outright, so it may freeze (SIGSTOP), thaw,
//! kill -9 and restart them without disturbing the shared ones other tests
//! use: a PostgreSQL cluster, a Tansu broker and a Redis server, started
//! from the binaries scripts/test-all.sh installed (`GATEWAYD_TEST_PG_BIN`,
//! `GATEWAYD_TEST_TANSU`, `GATEWAYD_TEST_REDIS_SERVER`) through the same
//! scripts it uses.
//!
//! Each server's processes are found from the PID of the process the
//! script execs into (the postmaster, the broker) and its descendants; a
//! server is never signalled by name. Drop stops what is still running.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join(name)
}

fn required_env(name: &str, what: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v,
        _ => panic!(
            "{name} is not set: this test runs its own {what}. scripts/test-all.sh installs \
             it and sets {name}"
        ),
    }
}

/// `pid` and every process descending from it, parents first.
pub fn process_tree(pid: u32) -> Vec<u32> {
    let mut all: Vec<(u32, u32)> = Vec::new(); // (pid, ppid)
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(p) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            // /proc/PID/stat: "pid (comm) state ppid ..."; comm may hold spaces.
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
                continue;
            };
            let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
                continue;
            };
            if let Some(ppid) = rest.split_whitespace().nth(1).and_then(|v| v.parse().ok()) {
                all.push((p, ppid));
            }
        }
    }
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let parent = out[i];
        out.extend(all.iter().filter(|(_, pp)| *pp == parent).map(|(p, _)| *p));
        i += 1;
    }
    out
}

fn alive(pid: u32) -> bool {
    // A zombie is gone for our purposes (it holds no port, answers nothing).
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, r)| r.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

fn signal(pids: &[u32], sig: i32) {
    for &p in pids {
        // SAFETY: a plain kill(2) on processes this test started.
        unsafe { libc::kill(p as i32, sig) };
    }
}

/// What a drill does to a server it owns.
pub trait Server {
    /// Its running process, None while killed.
    fn slot(&mut self) -> &mut Option<Proc>;
    /// Start it (again) on the same port and data.
    fn launch(&mut self);

    /// SIGSTOP every process of the server: it keeps its sockets (the kernel
    /// still completes TCP handshakes into its listen queue) and answers
    /// nothing.
    fn freeze(&mut self) {
        self.slot().as_mut().expect("running").freeze();
    }

    fn thaw(&mut self) {
        self.slot().as_mut().expect("running").thaw();
    }

    /// kill -9 of every process of the server, as a crash would; returns
    /// once they are all gone.
    fn kill9(&mut self) {
        self.slot().take().expect("running").kill9();
    }

    fn restart(&mut self) {
        assert!(self.slot().is_none(), "still running");
        self.launch();
    }
}

/// A server process (the root of its tree) the test started.
pub struct Proc {
    child: Child,
    /// The tree as of the last freeze (new processes cannot start while
    /// the parent is stopped).
    frozen: Vec<u32>,
}

impl Proc {
    fn tree(&self) -> Vec<u32> {
        process_tree(self.child.id())
    }

    fn freeze(&mut self) {
        self.frozen = self.tree();
        signal(&self.frozen, libc::SIGSTOP);
    }

    fn thaw(&mut self) {
        signal(&self.frozen, libc::SIGCONT);
        self.frozen.clear();
    }

    fn kill9(&mut self) {
        let tree = self.tree();
        signal(&tree, libc::SIGKILL);
        let _ = self.child.wait();
        let deadline = Instant::now() + Duration::from_secs(30);
        while tree.iter().any(|&p| alive(p)) {
            assert!(
                Instant::now() < deadline,
                "server processes survived SIGKILL"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stop(&mut self, sig: i32) {
        if self.child.try_wait().ok().flatten().is_some() {
            return;
        }
        let tree = self.tree();
        signal(&tree, libc::SIGCONT);
        signal(&[self.child.id()], sig);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        signal(&tree, libc::SIGKILL);
        let _ = self.child.wait();
    }
}

/// A PostgreSQL cluster of the test's own (scripts/pg-test-server.sh: a
/// temp dir, loopback, trust auth).
pub struct PgServer {
    pub port: u16,
    dir: tempfile::TempDir,
    proc: Option<Proc>,
}

impl PgServer {
    pub fn start() -> PgServer {
        Self::start_with(|_| {})
    }

    /// Like [`start`](Self::start), with `prepare` run on the data
    /// directory between initdb and the first start (e.g. TLS files and
    /// settings appended to its postgresql.conf).
    pub fn start_with(prepare: impl FnOnce(&Path)) -> PgServer {
        required_env("GATEWAYD_TEST_PG_BIN", "PostgreSQL server");
        let dir = tempfile::tempdir().unwrap();
        let run = |args: &[&str]| {
            let out = Command::new("bash")
                .arg(script("pg-test-server.sh"))
                .args(args)
                .stdin(Stdio::null())
                .output()
                .expect("run pg-test-server.sh");
            assert!(
                out.status.success(),
                "pg-test-server.sh {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).trim().to_string()
        };
        run(&["init", dir.path().to_str().unwrap()]);
        prepare(&dir.path().join("data"));
        // Below the kernel's ephemeral range (32768-60999 here), so no
        // client connection of a parallel test takes the port between the
        // check and the bind (the drill restarts the server on it too).
        let port: u16 = run(&["free-port", "25100"]).parse().unwrap();
        let mut pg = PgServer {
            port,
            dir,
            proc: None,
        };
        pg.launch();
        pg
    }

    fn launch(&mut self) {
        let log = std::fs::File::create(self.dir.path().join("server.log")).unwrap();
        let child = Command::new("bash")
            .arg(script("pg-test-server.sh"))
            .arg("run")
            .arg(self.dir.path())
            .arg(self.port.to_string())
            // The drills kill -9 it: what the node committed must survive,
            // as with a production server.
            .arg("kill-safe")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start postgres");
        self.proc = Some(Proc {
            child,
            frozen: Vec::new(),
        });
        let deadline = Instant::now() + Duration::from_secs(60);
        while postgres::Client::connect(&self.url("postgres"), postgres::NoTls).is_err() {
            if let Some(st) = self.proc.as_mut().unwrap().child.try_wait().unwrap() {
                panic!("postgres exited ({st}): {}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "postgres not ready: {}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    pub fn url(&self, db: &str) -> String {
        format!("postgres://gatewayd@127.0.0.1:{}/{db}", self.port)
    }

    /// A new database; returns its URL.
    pub fn create_db(&self, name: &str) -> String {
        let mut c = postgres::Client::connect(&self.url("postgres"), postgres::NoTls).unwrap();
        c.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
        self.url(name)
    }

    /// The postmaster and its children.
    pub fn processes(&self) -> Vec<u32> {
        self.proc.as_ref().map(Proc::tree).unwrap_or_default()
    }
}

impl Server for PgServer {
    fn slot(&mut self) -> &mut Option<Proc> {
        &mut self.proc
    }

    /// Start on its data and port (after `kill9`: crash recovery).
    fn launch(&mut self) {
        PgServer::launch(self)
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.stop(libc::SIGINT); // fast shutdown
        }
    }
}

/// A Tansu broker of the test's own (scripts/tansu-test-broker.sh run), with
/// the storage engine given: `memory://tansu/` (gone with the process) or a
/// durable one such as `sqlite://tansu.db` (a file in its directory).
pub struct TansuServer {
    pub port: u16,
    storage: String,
    /// What clients are told to reach it at (None: its own port).
    advertised: Option<String>,
    dir: tempfile::TempDir,
    proc: Option<Proc>,
}

impl TansuServer {
    pub fn start(storage: &str) -> TansuServer {
        Self::start_advertising(storage, None)
    }

    /// A broker whose metadata sends clients to `advertised` (host:port),
    /// e.g. a TLS front of its own (support::tls_front).
    pub fn start_advertising(storage: &str, advertised: Option<&str>) -> TansuServer {
        required_env("GATEWAYD_TEST_TANSU", "Tansu broker");
        // The tests of one binary run in parallel: each looks for a free
        // port from a base of its own, or two would find the same one and
        // the second broker, unable to bind, would pass for the first.
        static NEXT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 64; // 21000..22024: clear of Redis (16500..20596) and PostgreSQL (25100)
        let out = Command::new("bash")
            .arg(script("tansu-test-broker.sh"))
            .args(["free-port", &(21000 + 16 * n).to_string()])
            .output()
            .expect("run tansu-test-broker.sh");
        assert!(out.status.success());
        let port = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        let mut t = TansuServer {
            port,
            storage: storage.to_string(),
            advertised: advertised.map(str::to_string),
            dir: tempfile::tempdir().unwrap(),
            proc: None,
        };
        t.launch();
        t
    }

    pub fn brokers(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn launch(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("broker.log"))
            .unwrap();
        let child = Command::new("bash")
            .arg(script("tansu-test-broker.sh"))
            .arg("run")
            .arg(self.dir.path())
            .arg(self.port.to_string())
            .arg(&self.storage)
            .args(self.advertised.as_deref())
            .env(
                "GATEWAYD_TANSU",
                std::env::var("GATEWAYD_TEST_TANSU").unwrap(),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start tansu");
        let pid = child.id();
        self.proc = Some(Proc {
            child,
            frozen: Vec::new(),
        });
        let out = Command::new("bash")
            .arg(script("tansu-test-broker.sh"))
            .args(["wait-ready", &self.port.to_string(), "60", &pid.to_string()])
            .env(
                "GATEWAYD_TANSU",
                std::env::var("GATEWAYD_TEST_TANSU").unwrap(),
            )
            .output()
            .expect("wait for tansu");
        assert!(
            out.status.success(),
            "tansu not ready: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("broker.log")).unwrap_or_default()
    }
}

impl Server for TansuServer {
    fn slot(&mut self) -> &mut Option<Proc> {
        &mut self.proc
    }

    /// Start on its port and storage.
    fn launch(&mut self) {
        TansuServer::launch(self)
    }
}

impl Drop for TansuServer {
    fn drop(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.stop(libc::SIGTERM);
        }
    }
}

/// A Redis server of the test's own (scripts/redis-test-server.sh run: a
/// temp dir, loopback, no persistence), from `GATEWAYD_TEST_REDIS_SERVER`.
pub struct RedisServer {
    pub port: u16,
    /// With [`start_tls`](Self::start_tls): the TLS port (`port` stays
    /// plaintext, for the readiness check only).
    pub tls_port: Option<u16>,
    tls_args: Vec<String>,
    dir: tempfile::TempDir,
    proc: Option<Proc>,
}

impl RedisServer {
    pub fn start() -> RedisServer {
        Self::start_with_tls(None)
    }

    /// A server that also serves TLS on `tls_port` with these PEM files
    /// (no client certificates asked for).
    pub fn start_tls(cert: &Path, key: &Path, ca: &Path) -> RedisServer {
        Self::start_with_tls(Some((cert, key, ca)))
    }

    fn start_with_tls(tls: Option<(&Path, &Path, &Path)>) -> RedisServer {
        required_env("GATEWAYD_TEST_REDIS_SERVER", "Redis server (redis-server)");
        // The tests of one binary run in parallel: each looks for a free
        // port from a base of its own, and the server that answers must be
        // the one it started (two that picked one port: the second cannot
        // bind, and the first one would answer its PING).
        static NEXT: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
        for _ in 0..8 {
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 256;
            let base = 16500 + 16 * n;
            let dir = tempfile::tempdir().unwrap();
            let out = Command::new("bash")
                .arg(script("redis-test-server.sh"))
                .args(["free-port", &base.to_string()])
                .output()
                .expect("run redis-test-server.sh");
            assert!(out.status.success(), "redis-test-server.sh free-port");
            let port: u16 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
            let (tls_port, tls_args) = match tls {
                None => (None, Vec::new()),
                Some((cert, key, ca)) => {
                    let out = Command::new("bash")
                        .arg(script("redis-test-server.sh"))
                        .args(["free-port", &(port + 1).to_string()])
                        .output()
                        .expect("run redis-test-server.sh");
                    let p: u16 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
                    let args = [
                        "--tls-port".to_string(),
                        p.to_string(),
                        "--tls-cert-file".into(),
                        cert.display().to_string(),
                        "--tls-key-file".into(),
                        key.display().to_string(),
                        "--tls-ca-cert-file".into(),
                        ca.display().to_string(),
                        "--tls-auth-clients".into(),
                        "no".into(),
                    ];
                    (Some(p), args.to_vec())
                }
            };
            let mut r = RedisServer {
                port,
                tls_port,
                tls_args,
                dir,
                proc: None,
            };
            if r.try_launch() && r.answering_pid() == r.proc.as_ref().map(|p| p.child.id()) {
                return r;
            }
            // Dropped: ours is stopped; another port.
        }
        panic!("no Redis server of our own after 8 ports");
    }

    /// The process id of the server answering on our port (`INFO server`).
    fn answering_pid(&self) -> Option<u32> {
        use std::io::{Read, Write};
        let mut c = std::net::TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        c.write_all(b"INFO server\r\n").ok()?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        while buf.len() < 64 << 10 {
            let n = c.read(&mut chunk).ok()?;
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf);
            if let Some(at) = text.find("process_id:") {
                let rest = &text[at + "process_id:".len()..];
                if let Some(end) = rest.find("\r\n") {
                    return rest[..end].trim().parse().ok();
                }
            }
        }
        None
    }

    fn launch(&mut self) {
        assert!(self.try_launch(), "redis not ready:\n{}", self.log());
    }

    /// Start the server on our port and wait until the port answers.
    fn try_launch(&mut self) -> bool {
        let log = std::fs::File::create(self.dir.path().join("server.log")).unwrap();
        // The binary itself (not the script), so the PID is the server's.
        let child = Command::new(required_env("GATEWAYD_TEST_REDIS_SERVER", "Redis server"))
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .arg("--dir")
            .arg(self.dir.path())
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(&self.tls_args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start redis-server");
        let pid = child.id();
        self.proc = Some(Proc {
            child,
            frozen: Vec::new(),
        });
        let out = Command::new("bash")
            .arg(script("redis-test-server.sh"))
            .args(["wait-ready", &self.port.to_string(), "30", &pid.to_string()])
            .output()
            .expect("wait for redis");
        if !out.status.success() {
            eprintln!(
                "redis on port {} not ready: {}",
                self.port,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        out.status.success()
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

impl Server for RedisServer {
    fn slot(&mut self) -> &mut Option<Proc> {
        &mut self.proc
    }

    fn launch(&mut self) {
        RedisServer::launch(self)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.stop(libc::SIGTERM);
        }
    }
}
