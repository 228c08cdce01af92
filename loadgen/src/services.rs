//! Servers a scenario starts for itself besides gatewayd: a Redis (the
//! session store of crash recovery) and a Kafka-protocol broker (Tansu, the
//! one scripts/test-all.sh builds into its cache), both on free loopback
//! ports, dying with loadgen, their logs in the run's `logs/`.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child server process, killed (and waited for) on drop.
pub struct Service {
    pub name: &'static str,
    pub port: u16,
    child: Option<Child>,
    log: PathBuf,
}

impl Service {
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.id())
    }

    /// The last lines of its log, for an error message.
    pub fn log_tail(&self) -> String {
        log_tail(&self.log, 15)
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: kill(2) of our own child, not yet waited for.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn log_tail(path: &Path, lines: usize) -> String {
    let t = std::fs::read_to_string(path).unwrap_or_default();
    let v: Vec<&str> = t.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

/// A loopback port nobody listens on now.
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn spawn(name: &'static str, mut cmd: Command, port: u16, log: &Path) -> Result<Service, String> {
    let f = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let f2 = f.try_clone().map_err(|e| e.to_string())?;
    cmd.stdin(Stdio::null()).stdout(f).stderr(f2);
    // SAFETY: the pre_exec closure runs in the forked child and only calls prctl(2).
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|e| format!("starting {name}: {e}"))?;
    Ok(Service {
        name,
        port,
        child: Some(child),
        log: log.to_path_buf(),
    })
}

fn wait_until(
    s: &mut Service,
    secs: u64,
    mut ready: impl FnMut(&Service) -> bool,
) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if ready(s) {
            return Ok(());
        }
        if let Some(c) = s.child.as_mut() {
            if let Ok(Some(st)) = c.try_wait() {
                return Err(format!(
                    "{} exited at start ({st}):\n{}",
                    s.name,
                    s.log_tail()
                ));
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "{} not ready after {secs} s:\n{}",
                s.name,
                s.log_tail()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The redis-server binary: `LOADGEN_REDIS_SERVER`,
/// `GATEWAYD_TEST_REDIS_SERVER` (what scripts/test-all.sh exports), else
/// `redis-server` on PATH.
pub fn redis_bin() -> Option<PathBuf> {
    for v in ["LOADGEN_REDIS_SERVER", "GATEWAYD_TEST_REDIS_SERVER"] {
        if let Some(p) = std::env::var_os(v).filter(|p| !p.is_empty()) {
            return Some(PathBuf::from(p));
        }
    }
    std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("redis-server"))
            .find(|p| p.exists())
    })
}

/// A Redis on a free loopback port, no persistence (as
/// scripts/redis-test-server.sh runs it).
pub fn start_redis(dir: &Path, log: &Path) -> Result<Service, String> {
    let bin = redis_bin().ok_or(
        "redis-server not found (apt-get install redis-server, or set LOADGEN_REDIS_SERVER)",
    )?;
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let port = free_port().map_err(|e| e.to_string())?;
    let mut cmd = Command::new(&bin);
    cmd.args(["--bind", "127.0.0.1", "--port", &port.to_string()])
        .arg("--dir")
        .arg(dir)
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"]);
    let mut s = spawn("redis-server", cmd, port, log)?;
    wait_until(&mut s, 30, |s| redis_ping(s.port))?;
    Ok(s)
}

fn redis_ping(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut c) = TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(300),
    ) else {
        return false;
    };
    let _ = c.set_read_timeout(Some(Duration::from_millis(500)));
    let mut b = [0u8; 7];
    c.write_all(b"PING\r\n").is_ok() && c.read_exact(&mut b).is_ok() && &b == b"+PONG\r\n"
}

/// The Tansu binary: `LOADGEN_TANSU`, `GATEWAYD_TANSU`,
/// `GATEWAYD_TEST_TANSU`, else where scripts/tansu-test-broker.sh installs
/// it (`/var/cache/gatewayd-ci/tansu-0.6.0-libsql/bin/tansu`).
pub fn tansu_bin() -> Option<PathBuf> {
    for v in ["LOADGEN_TANSU", "GATEWAYD_TANSU", "GATEWAYD_TEST_TANSU"] {
        if let Some(p) = std::env::var_os(v).filter(|p| !p.is_empty()) {
            return Some(PathBuf::from(p));
        }
    }
    let cache = std::env::var_os("GATEWAYD_CI_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/gatewayd-ci"));
    let p = cache.join("tansu-0.6.0-libsql/bin/tansu");
    p.exists().then_some(p)
}

/// A Tansu broker on a free loopback port with in-memory storage (as
/// scripts/tansu-test-broker.sh runs it).
pub fn start_tansu(dir: &Path, log: &Path) -> Result<Service, String> {
    let bin = tansu_bin().ok_or(
        "Tansu not found: scripts/tansu-test-broker.sh install builds it into \
         /var/cache/gatewayd-ci (or set LOADGEN_TANSU)",
    )?;
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let port = free_port().map_err(|e| e.to_string())?;
    let url = format!("tcp://127.0.0.1:{port}");
    let mut cmd = Command::new(&bin);
    cmd.current_dir(dir)
        .env_remove("SCHEMA_REGISTRY")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("STORAGE_ENGINE")
        .env_remove("LISTENER_URL")
        .env_remove("ADVERTISED_LISTENER_URL")
        .env_remove("CLUSTER_ID")
        .args(["broker", "--cluster-id", "loadgen"])
        .args(["--listener-url", &url, "--advertised-listener-url", &url])
        .args(["--storage-engine", "memory://tansu/"]);
    let mut s = spawn("tansu", cmd, port, log)?;
    let b = bin.clone();
    wait_until(&mut s, 60, move |s| {
        let Ok(mut c) = Command::new(&b)
            .args(["topic", "list", "--broker"])
            .arg(format!("tcp://127.0.0.1:{}", s.port))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
        else {
            return false;
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match c.try_wait() {
                Ok(Some(st)) => return st.success(),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                _ => {
                    let _ = c.kill();
                    let _ = c.wait();
                    return false;
                }
            }
        }
    })?;
    Ok(s)
}

/// Waits for a future driven by another thread (rdkafka's admin client
/// polls on its own thread), without an async runtime.
fn block_on<F: std::future::Future>(f: F, timeout: Duration) -> Option<F::Output> {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let deadline = Instant::now() + timeout;
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Creates `topic` with `partitions` partitions on the broker.
pub fn create_topic(brokers: &str, topic: &str, partitions: i32) -> Result<(), String> {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    use rdkafka::client::DefaultClientContext;
    use rdkafka::config::ClientConfig;
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .map_err(|e| format!("Kafka admin client: {e}"))?;
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(20)));
    let topics = [NewTopic::new(topic, partitions, TopicReplication::Fixed(1))];
    let res = block_on(admin.create_topics(&topics, &opts), Duration::from_secs(30))
        .ok_or("creating the topic: no answer in 30 s")?
        .map_err(|e| format!("creating the topic: {e}"))?;
    for r in res {
        r.map_err(|(t, e)| format!("creating topic {t}: {e}"))?;
    }
    Ok(())
}
