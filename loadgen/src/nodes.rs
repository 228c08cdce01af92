//! gatewayd processes a scenario starts (or attaches to), and what loadgen
//! reads from them: /proc (RSS, CPU) and the admin port's /metrics.

use std::io::{Read, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use promtext::SampleSet;

/// Where the registry lives for the nodes of a run.
#[derive(Clone, Debug)]
pub enum RegistryLoc {
    /// The embedded SQLite file (shared by every node of the run).
    Sqlite(PathBuf),
    /// A PostgreSQL URL.
    Postgres(String),
}

pub struct NodeProc {
    pub child: Option<Child>,
    pub pid: u32,
    pub gateway: SocketAddrV4,
    pub admin: SocketAddr,
    pub ingest: SocketAddr,
    pub dir: PathBuf,
}

/// The gatewayd binary: `--gatewayd`, else next to this executable.
pub fn gatewayd_bin(explicit: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(p) = explicit {
        return Ok(p.to_path_buf());
    }
    let me = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = me.parent().ok_or("no exe dir")?;
    for cand in [dir.join("gatewayd"), dir.join("../gatewayd")] {
        if cand.exists() {
            return Ok(cand);
        }
    }
    Err(format!(
        "gatewayd not found next to {} (build it: cargo build --release; or pass --gatewayd PATH)",
        me.display()
    ))
}

impl NodeProc {
    /// Starts gatewayd on free loopback ports with `dir` as its data dir.
    pub fn start(
        bin: &Path,
        dir: &Path,
        registry: &RegistryLoc,
        extra: &[String],
        log: &Path,
    ) -> Result<NodeProc, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let addrs_path = dir.join("gatewayd.addrs");
        let _ = std::fs::remove_file(&addrs_path);
        let mut cmd = Command::new(bin);
        cmd.arg("run")
            .arg("--data-dir")
            .arg(dir)
            .args([
                "--gateway-addr",
                "127.0.0.1:0",
                "--admin-addr",
                "127.0.0.1:0",
            ])
            // No demo at all: the world is loadgen's own (World::generate
            // wants an empty registry) and needs no demo bot.
            .args(["--ingest-addr", "127.0.0.1:0", "--no-demo"])
            .args(["--portal-addr", "127.0.0.1:0"]);
        match registry {
            RegistryLoc::Sqlite(p) => {
                cmd.arg("--registry-path").arg(p);
            }
            RegistryLoc::Postgres(url) => {
                cmd.arg("--registry-url").arg(url);
            }
        }
        cmd.args(extra);
        // The node dies with loadgen (even if loadgen is killed): a run never
        // leaves a gatewayd behind.
        // SAFETY: the pre_exec closure runs in the forked child and only calls prctl(2), which is async-signal-safe.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let logf = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
        cmd.stdout(Stdio::null()).stderr(logf);
        cmd.env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        );
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("starting {}: {e}", bin.display()))?;
        let deadline = Instant::now() + Duration::from_secs(60);
        let text = loop {
            if let Ok(Some(st)) = child.try_wait() {
                return Err(format!(
                    "gatewayd exited at start ({st}); see {}",
                    log.display()
                ));
            }
            if let Ok(t) = std::fs::read_to_string(&addrs_path) {
                if t.lines().count() >= 3 {
                    break t;
                }
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return Err(format!(
                    "gatewayd did not start in 60 s; see {}",
                    log.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let get = |name: &str| -> Result<SocketAddr, String> {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("{name}=")))
                .and_then(|v| v.trim().parse().ok())
                .ok_or_else(|| format!("no {name} address in {}", addrs_path.display()))
        };
        let gateway = match get("gateway")? {
            SocketAddr::V4(a) => a,
            a => return Err(format!("gateway address {a} is not IPv4")),
        };
        let node = NodeProc {
            pid: child.id(),
            child: Some(child),
            gateway,
            admin: get("admin")?,
            ingest: get("ingest")?,
            dir: dir.to_path_buf(),
        };
        while http_get(node.admin, "/readyz")
            .map(|(s, _)| s != 200)
            .unwrap_or(true)
        {
            if Instant::now() > deadline {
                return Err("gatewayd not ready in 60 s".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(node)
    }

    /// Attach to a running node by address (nothing is started or stopped).
    pub fn attach(
        gateway: SocketAddrV4,
        admin: SocketAddr,
        ingest: SocketAddr,
        pid: Option<u32>,
    ) -> NodeProc {
        NodeProc {
            child: None,
            pid: pid.unwrap_or(0),
            gateway,
            admin,
            ingest,
            dir: PathBuf::new(),
        }
    }

    pub fn kill9(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.child = None;
    }

    pub fn stop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            // SIGINT: drain at once (nothing to wait for at the end of a run).
            // SAFETY: kill(2) of our own child, not yet waited for, so its pid cannot have been reused.
            unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        self.child = None;
    }

    pub fn alive(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => self.pid != 0 && Path::new(&format!("/proc/{}", self.pid)).exists(),
        }
    }

    pub fn rss_bytes(&self) -> Option<u64> {
        rss_bytes(self.pid)
    }

    pub fn cpu_seconds(&self) -> Option<f64> {
        cpu_seconds(self.pid)
    }

    pub fn metrics(&self) -> Option<Metrics> {
        http_get(self.admin, "/metrics")
            .ok()
            .map(|(_, b)| Metrics::parse(&b))
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        self.stop();
    }
}

pub fn rss_bytes(pid: u32) -> Option<u64> {
    if pid == 0 {
        return None;
    }
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

pub fn cpu_seconds(pid: u32) -> Option<f64> {
    if pid == 0 {
        return None;
    }
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf takes no pointers.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    Some(ticks / if hz > 0 { hz as f64 } else { 100.0 })
}

pub fn self_cpu_seconds() -> f64 {
    cpu_seconds(std::process::id()).unwrap_or(0.0)
}

/// Run time of the kernel's softirq threads (ksoftirqd/N), in seconds. A
/// sender that hands the kernel many loopback sends in one call leaves part
/// of the receive work to ksoftirqd, which is not in the sender's own CPU
/// time; counting it keeps a comparison with a send-per-syscall node fair.
pub fn ksoftirqd_seconds() -> f64 {
    static PIDS: std::sync::OnceLock<Vec<u32>> = std::sync::OnceLock::new();
    let pids = PIDS.get_or_init(|| {
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return Vec::new();
        };
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|c| c.starts_with("ksoftirqd/"))
            })
            .collect()
    });
    pids.iter()
        .filter_map(|pid| {
            let s = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).ok()?;
            s.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum::<u64>() as f64
        / 1e9
}

/// The 1, 5 and 15 minute load averages, as /proc/loadavg writes them.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Kernel memory in TCP socket buffers, pages (/proc/net/sockstat "TCP: ... mem").
pub fn tcp_mem_pages() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/net/sockstat").ok()?;
    let l = s.lines().find(|l| l.starts_with("TCP:"))?;
    let f: Vec<&str> = l.split_whitespace().collect();
    let p = f.iter().position(|x| *x == "mem")?;
    f.get(p + 1)?.parse().ok()
}

/// A bare HTTP/1.1 GET (or POST with `post`); returns (status, body).
pub fn http_request(addr: SocketAddr, method: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    )?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String)> {
    http_request(addr, "GET", path)
}

/// A node's /metrics page, parsed by `promtext` (lines it cannot read are
/// left out: a scrape never fails on one odd line).
#[derive(Clone, Debug, Default)]
pub struct Metrics(pub Vec<promtext::Sample>);

impl Metrics {
    pub fn parse(text: &str) -> Metrics {
        Metrics(promtext::parse_lossy(text))
    }

    /// Every registry call the node reports: the sidecar's and the
    /// cluster threads'.
    pub fn registry_calls(&self) -> f64 {
        self.sidecar_calls() + self.cluster_reads()
    }

    /// The registry calls the sidecar made (timed).
    pub fn sidecar_calls(&self) -> f64 {
        self.sum("gatewayd_registry_call_seconds_count")
    }

    /// The hand-off and survivor threads' direct registry reads (counted).
    pub fn cluster_reads(&self) -> f64 {
        self.sum("gatewayd_cluster_registry_reads_total")
            + self.sum("gatewayd_recovery_registry_reads_total")
    }

    /// Sum of every series of family `name` (any labels).
    pub fn sum(&self, name: &str) -> f64 {
        self.0.sum(name)
    }

    /// Sum of the series of `name` that have all of `labels`.
    pub fn sum_with(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.0.sum_with(name, labels)
    }

    /// Sums of `name` per value of `label`.
    pub fn by_label(&self, name: &str, label: &str) -> std::collections::BTreeMap<String, f64> {
        self.0.by_label(name, label)
    }

    /// `name{worker="i"}` values in worker order (workers 0, 1, ...).
    pub fn by_worker(&self, name: &str) -> Vec<f64> {
        let mut v: Vec<(u32, f64)> = self
            .by_label(name, "worker")
            .into_iter()
            .filter_map(|(w, x)| Some((w.parse().ok()?, x)))
            .collect();
        v.sort_by_key(|x| x.0);
        v.into_iter().map(|x| x.1).collect()
    }

    /// Cumulative histogram buckets of `name` as (upper bound s, count).
    pub fn buckets(&self, name: &str) -> Vec<(f64, f64)> {
        self.0.buckets(name)
    }

    /// The same, summed over the series that have all of `labels` (e.g.
    /// every worker's `stage="read_to_inbox"`).
    pub fn buckets_with(&self, name: &str, labels: &[(&str, &str)]) -> Vec<(f64, f64)> {
        let bucket = format!("{name}_bucket");
        let mut out: Vec<(f64, f64)> = Vec::new();
        for s in self.0.iter().filter(|s| s.matches(&bucket, labels)) {
            let Some(le) = s.label("le").and_then(|v| {
                if v == "+Inf" {
                    Some(f64::INFINITY)
                } else {
                    v.parse().ok()
                }
            }) else {
                continue;
            };
            match out.iter_mut().find(|x| x.0 == le) {
                Some(x) => x.1 += s.value,
                None => out.push((le, s.value)),
            }
        }
        out.sort_by(|x, y| x.0.total_cmp(&y.0));
        out
    }
}

/// The `q` quantile (0..1) of the observations between two scrapes of a
/// cumulative histogram, as the upper bound of the bucket it falls in
/// (seconds; the buckets limit the resolution). None if nothing was observed.
pub fn quantile_between(before: &[(f64, f64)], after: &[(f64, f64)], q: f64) -> Option<(f64, u64)> {
    let delta: Vec<(f64, f64)> = after
        .iter()
        .map(|&(b, c)| {
            let was = before.iter().find(|x| x.0 == b).map(|x| x.1).unwrap_or(0.0);
            (b, c - was)
        })
        .collect();
    let total = delta.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let want = q * total;
    delta
        .iter()
        .find(|(_, c)| *c >= want)
        .map(|&(b, _)| (b, total as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_and_quantiles() {
        let m = Metrics::parse(
            "# HELP x y\nx_total{worker=\"0\"} 3\nx_total{worker=\"1\"} 4\nh_bucket{le=\"0.001\"} 5\nh_bucket{le=\"0.05\"} 9\nh_bucket{le=\"+Inf\"} 10\n",
        );
        assert_eq!(m.sum("x_total"), 7.0);
        assert_eq!(m.sum_with("x_total", &[("worker", "1")]), 4.0);
        assert_eq!(m.by_worker("x_total"), vec![3.0, 4.0]);
        let b = m.buckets("h");
        assert_eq!(b.len(), 3);
        assert_eq!(quantile_between(&[], &b, 0.5), Some((0.001, 10)));
        assert_eq!(quantile_between(&[], &b, 0.99).unwrap().0, f64::INFINITY);
        let before = vec![(0.001, 5.0), (0.05, 5.0), (f64::INFINITY, 5.0)];
        assert_eq!(quantile_between(&before, &b, 0.5), Some((0.05, 5)));
        let m = Metrics::parse(
            "h_bucket{worker=\"0\",stage=\"a\",le=\"0.001\"} 1\nh_bucket{worker=\"0\",stage=\"a\",le=\"+Inf\"} 2\nh_bucket{worker=\"1\",stage=\"a\",le=\"0.001\"} 3\nh_bucket{worker=\"1\",stage=\"a\",le=\"+Inf\"} 3\nh_bucket{worker=\"0\",stage=\"b\",le=\"+Inf\"} 9\n",
        );
        assert_eq!(
            m.buckets_with("h", &[("stage", "a")]),
            vec![(0.001, 4.0), (f64::INFINITY, 5.0)]
        );
    }
}
