//! Measurement tool for a running gatewayd: memory of idle sessions and
//! fan-out throughput / latency. Loopback only; std + libc epoll, a minimal
//! hand-rolled WebSocket client over nonblocking sockets.
//!
//! ```text
//! measure idle   --addr 127.0.0.1:P --token-file F --sessions N --node-pid PID
//!                [--admin 127.0.0.1:Q] [--bind-base 127.0.0.2] [--threads 2] [--window 128]
//!                [--settle-secs 3] [--hold-secs 0] [--timeout-secs 240]
//! measure fanout --addr 127.0.0.1:P --ingest 127.0.0.1:R --tokens-file F --sessions N
//!                --rate EVENTS_PER_S --seconds S --payload BYTES --node-pid PID --admin 127.0.0.1:Q
//!                [--stall K] [--stall-rcvbuf BYTES] [--ack-seq 1] [--drain-secs 5] [--bind-base IP] [--threads 2]
//!                [--window 128] [--timeout-secs 240] [--server ID --channel ID]
//! ```
//!
//! Every session: TCP connect (optionally bound to `--bind-base`, +1 address
//! per 25,000 sessions), HTTP upgrade, Hello, Identify (intents
//! 1|512|32768 = GUILDS, GUILD_MESSAGES, MESSAGE_CONTENT), READY, then one
//! GUILD_CREATE (the apps are expected to be installed in exactly one
//! server). Heartbeats go out at the Hello interval (first one jittered), with
//! `d` = the last `s` seen (`--ack-seq 0` sends `null`, which releases nothing
//! on the node). At most `--window` sessions per thread are between connect
//! and GUILD_CREATE at a time.
//!
//! `idle` prints node RSS (VmRSS of `--node-pid`) before opening and once all
//! are READY (after `--settle-secs`), and the delta per 1,000 sessions and per
//! session; then closes every session with a 1000 close (which ends it on the
//! node, so nothing is left detached) and exits.
//!
//! `fanout` opens the sessions, then a producer thread writes MESSAGE_CREATE
//! records to the ingest port open-loop at `--rate` events/s for `--seconds`;
//! each `d` is about `--payload` bytes and starts with `"ts_ns":T`, T being
//! the event's *scheduled* send time on this process's monotonic clock (so a
//! producer that falls behind shows up as latency, not as a lower rate).
//! Clients count every dispatch, check that `s` is contiguous per session
//! (gaps and reorders counted) and record latency = receive time − T. After
//! the producer stops, it waits up to `--drain-secs` for the rest. `--stall K`
//! makes the first K sessions stop reading once they are READY (they still
//! heartbeat with the last `s` they read): they are left out of the latency
//! and gap figures, and show what unread events cost the node.
//! `--stall-rcvbuf BYTES` sets SO_RCVBUF on their sockets (with the default,
//! loopback socket buffers absorb a lot of unread data, so the node's sends
//! keep succeeding long after the client stopped reading).
//!
//! Output: `key value` lines (grep-able), plus a few notes on stderr.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------- clock

static BASE: OnceLock<Instant> = OnceLock::new();

/// Nanoseconds on this process's monotonic clock.
fn now_ns() -> u64 {
    BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

fn realtime_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

// ---------------------------------------------------------------- args

struct Args {
    map: HashMap<String, String>,
}

impl Args {
    fn parse(argv: &[String]) -> Args {
        let mut map = HashMap::new();
        let mut i = 0;
        while i < argv.len() {
            let k = argv[i]
                .strip_prefix("--")
                .unwrap_or_else(|| die(&format!("unexpected argument {}", argv[i])));
            let v = argv
                .get(i + 1)
                .unwrap_or_else(|| die(&format!("--{k} needs a value")));
            map.insert(k.to_string(), v.clone());
            i += 2;
        }
        Args { map }
    }

    fn opt<T: FromStr>(&self, k: &str) -> Option<T> {
        self.map.get(k).map(|v| {
            v.parse()
                .unwrap_or_else(|_| die(&format!("bad value for --{k}: {v}")))
        })
    }

    fn get<T: FromStr>(&self, k: &str, default: T) -> T {
        self.opt(k).unwrap_or(default)
    }

    fn req<T: FromStr>(&self, k: &str) -> T {
        self.opt(k)
            .unwrap_or_else(|| die(&format!("--{k} is required")))
    }
}

fn die(msg: &str) -> ! {
    eprintln!("measure: {msg}\n{USAGE}");
    std::process::exit(2)
}

const USAGE: &str = "usage:
  measure idle   --addr A --token-file F --sessions N [--node-pid PID] [--admin A] [--bind-base IP]
                 [--threads 2] [--window 128] [--settle-secs 3] [--hold-secs 0] [--timeout-secs 240]
  measure fanout --addr A --ingest I --tokens-file F --sessions N --rate R --seconds S --payload BYTES
                 [--node-pid PID] [--admin A] [--stall K] [--stall-rcvbuf BYTES] [--ack-seq 1] [--drain-secs 5] [--bind-base IP]
                 [--threads 2] [--window 128] [--timeout-secs 240] [--server ID --channel ID]";

// ---------------------------------------------------------------- histogram

/// Log-linear histogram of microseconds: exact below 2,048 µs, then 1,024
/// sub-buckets per power of two (< 0.1 % error).
#[derive(Clone)]
struct Hist {
    b: Vec<u64>,
    n: u64,
    max: u64,
    sum: u128,
}

impl Hist {
    fn new() -> Hist {
        Hist {
            b: vec![0; 2048 + 53 * 1024],
            n: 0,
            max: 0,
            sum: 0,
        }
    }
    fn idx(v: u64) -> usize {
        if v < 2048 {
            v as usize
        } else {
            let e = 63 - v.leading_zeros() as u64; // >= 11
            (2048 + (e - 11) * 1024 + ((v >> (e - 10)) & 1023)) as usize
        }
    }
    fn val(i: usize) -> u64 {
        if i < 2048 {
            i as u64
        } else {
            let j = (i - 2048) as u64;
            let e = j / 1024 + 11;
            (1024 + j % 1024) << (e - 10)
        }
    }
    fn record(&mut self, us: u64) {
        self.b[Self::idx(us)] += 1;
        self.n += 1;
        self.sum += us as u128;
        self.max = self.max.max(us);
    }
    fn merge(&mut self, o: &Hist) {
        for (a, b) in self.b.iter_mut().zip(&o.b) {
            *a += b;
        }
        self.n += o.n;
        self.sum += o.sum;
        self.max = self.max.max(o.max);
    }
    fn pct(&self, p: f64) -> u64 {
        if self.n == 0 {
            return 0;
        }
        let target = ((p / 100.0) * self.n as f64).ceil().max(1.0) as u64;
        let mut c = 0;
        for (i, &k) in self.b.iter().enumerate() {
            c += k;
            if c >= target {
                return Self::val(i);
            }
        }
        self.max
    }
}

// ---------------------------------------------------------------- /proc and metrics

fn rss_kb(pid: Option<u32>) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{}/status", pid?)).ok()?;
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// utime + stime of the whole process, in seconds.
fn cpu_secs(pid: Option<u32>) -> Option<f64> {
    let s = std::fs::read_to_string(format!("/proc/{}/stat", pid?)).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf takes no pointers.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks as f64 / hz)
}

/// Run time of the kernel's softirq threads (ksoftirqd/N), in seconds. A
/// sender that hands the kernel many loopback sends in one call leaves part
/// of the receive work to ksoftirqd, which is not in the sender's own CPU
/// time; counting it keeps the comparison with a send-per-syscall node fair.
fn ksoftirqd_secs() -> f64 {
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

fn self_cpu_secs() -> f64 {
    // SAFETY: rusage is a plain C struct for which all-zero bytes are a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes one rusage into `ru`, which lives across the call.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Kernel memory in TCP socket buffers (pages, /proc/net/sockstat "TCP: ... mem").
fn tcp_mem_pages() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/net/sockstat").ok()?;
    let l = s.lines().find(|l| l.starts_with("TCP:"))?;
    let f: Vec<&str> = l.split_whitespace().collect();
    let p = f.iter().position(|x| *x == "mem")?;
    f.get(p + 1)?.parse().ok()
}

#[derive(Default, Clone)]
struct Metrics(Vec<(String, f64)>);

impl Metrics {
    fn scrape(admin: Option<&str>) -> Metrics {
        let Some(admin) = admin else {
            return Metrics::default();
        };
        let get = || -> std::io::Result<String> {
            let mut s = TcpStream::connect(admin)?;
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            write!(
                s,
                "GET /metrics HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n"
            )?;
            let mut body = String::new();
            s.read_to_string(&mut body)?;
            Ok(body)
        };
        match get() {
            Ok(body) => Metrics(
                body.lines()
                    .filter(|l| !l.starts_with('#') && !l.is_empty())
                    .filter_map(|l| {
                        let (k, v) = l.rsplit_once(' ')?;
                        Some((k.to_string(), v.parse().ok()?))
                    })
                    .collect(),
            ),
            Err(e) => {
                eprintln!("measure: scraping {admin}/metrics: {e}");
                Metrics::default()
            }
        }
    }
    fn sum(&self, name: &str) -> f64 {
        self.0
            .iter()
            .filter(|(k, _)| k == name || (k.starts_with(name) && k[name.len()..].starts_with('{')))
            .map(|(_, v)| v)
            .sum()
    }
    /// `name{worker="i"}` values in worker order.
    fn by_worker(&self, name: &str) -> Vec<f64> {
        let mut v: Vec<(u32, f64)> = self
            .0
            .iter()
            .filter_map(|(k, val)| {
                let rest = k.strip_prefix(name)?.strip_prefix("{worker=\"")?;
                let (w, tail) = rest.split_once('"')?;
                (tail == "}")
                    .then(|| (w.parse().ok(), *val))
                    .and_then(|(w, v)| Some((w?, v)))
            })
            .collect();
        v.sort_by_key(|x| x.0);
        v.into_iter().map(|x| x.1).collect()
    }
    /// Sum of `gatewayd_closes_total` by code.
    fn closes(&self) -> BTreeMap<String, f64> {
        let mut m = BTreeMap::new();
        for (k, v) in &self.0 {
            if let Some(rest) = k.strip_prefix("gatewayd_closes_total{") {
                if let Some(i) = rest.find("code=\"") {
                    let code = rest[i + 6..].split('"').next().unwrap_or("").to_string();
                    *m.entry(code).or_insert(0.0) += v;
                }
            }
        }
        m
    }
}

fn fmt_list(v: &[f64]) -> String {
    v.iter()
        .map(|x| format!("{x:.0}"))
        .collect::<Vec<_>>()
        .join(",")
}

// ---------------------------------------------------------------- client

#[derive(Clone)]
struct ClientCfg {
    addr: SocketAddrV4,
    intents: u64,
    window: usize,
    ack_seq: bool,
    timeout_ns: u64,
    /// SO_RCVBUF of stalled sessions' sockets (None: the kernel's default, autotuned).
    stall_rcvbuf: Option<i32>,
}

#[derive(Clone)]
struct Spec {
    token: Arc<str>,
    bind: Option<Ipv4Addr>,
    stall: bool,
}

#[derive(Default)]
struct Shared {
    opened: AtomicUsize,
    ready: AtomicUsize,
    failed: AtomicUsize,
    /// READY sessions that were closed or lost afterwards.
    lost: AtomicUsize,
    identify_retries: AtomicUsize,
    /// MESSAGE_CREATE dispatches read by reading sessions.
    deliveries: AtomicU64,
    /// ... by stalled sessions (before they stopped reading).
    stalled_deliveries: AtomicU64,
    other_dispatches: AtomicU64,
    gaps: AtomicU64,
    reorders: AtomicU64,
    hb_acks: AtomicU64,
    bytes_rx: AtomicU64,
    measuring: AtomicBool,
    stop: AtomicBool,
    notes: Mutex<Vec<String>>,
    guild: Mutex<Option<(u64, u64)>>,
    close_codes: Mutex<BTreeMap<u16, u64>>,
    /// Bytes of READY + GUILD_CREATE payloads (what identify puts in the arena).
    handshake_dispatch_bytes: AtomicU64,
}

impl Shared {
    fn note(&self, s: String) {
        let mut n = self.notes.lock().unwrap();
        if n.len() < 20 {
            eprintln!("measure: {s}");
            n.push(s);
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum St {
    Pending,
    Connecting,
    Upgrading,
    Hello,
    Identifying,
    AwaitGuild,
    Ready,
    Dead,
}

struct Conn {
    sock: Option<TcpStream>,
    st: St,
    spec: Spec,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
    last_s: u64,
    hb_ms: u64,
    next_hb: u64,
    started: u64,
    retry_at: u64,
    retries: u32,
    reading: bool,
    hs_done: bool,
    idx: u64,
}

/// Per-thread state: counters flushed to `Shared` once per loop turn.
struct Ctx<'a> {
    cfg: &'a ClientCfg,
    sh: &'a Shared,
    ep: RawFd,
    hist: Hist,
    rng: u64,
    hs_finished: usize,
    deliveries: u64,
    stalled_deliveries: u64,
    gaps: u64,
    reorders: u64,
    bytes: u64,
    measuring: bool,
}

impl Ctx<'_> {
    fn rand(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }
    fn flush(&mut self) {
        let sh = self.sh;
        for (a, v) in [
            (&sh.deliveries, &mut self.deliveries),
            (&sh.stalled_deliveries, &mut self.stalled_deliveries),
            (&sh.gaps, &mut self.gaps),
            (&sh.reorders, &mut self.reorders),
            (&sh.bytes_rx, &mut self.bytes),
        ] {
            if *v > 0 {
                a.fetch_add(*v, Relaxed);
                *v = 0;
            }
        }
    }
}

fn epoll_ctl(ep: RawFd, op: i32, fd: RawFd, events: u32, data: u64) {
    let mut ev = libc::epoll_event { events, u64: data };
    // SAFETY: `ev` lives across the call; a bad fd is an error return, not UB.
    unsafe { libc::epoll_ctl(ep, op, fd, &mut ev) };
}

const EV_ALL: u32 = (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLET | libc::EPOLLRDHUP) as u32;

fn open_socket(
    addr: SocketAddrV4,
    bind: Option<Ipv4Addr>,
    rcvbuf: Option<i32>,
) -> std::io::Result<TcpStream> {
    // SAFETY: a new socket from socket(2), set up with pointers to locals that outlive each call, then owned by the returned TcpStream (from_raw_fd) exactly once.
    unsafe {
        let fd = libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        );
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let sock = TcpStream::from_raw_fd(fd);
        let one: libc::c_int = 1;
        let sz = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            &one as *const _ as *const _,
            sz,
        );
        if let Some(b) = rcvbuf {
            // Before connect, so the window scale is chosen for it.
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                &b as *const _ as *const _,
                sz,
            );
        }
        let sin = |ip: Ipv4Addr, port: u16| libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: port.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from(ip).to_be(),
            },
            sin_zero: [0; 8],
        };
        let slen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        if let Some(ip) = bind {
            libc::setsockopt(
                fd,
                libc::IPPROTO_IP,
                libc::IP_BIND_ADDRESS_NO_PORT,
                &one as *const _ as *const _,
                sz,
            );
            let a = sin(ip, 0);
            if libc::bind(fd, &a as *const _ as *const libc::sockaddr, slen) < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
        let a = sin(*addr.ip(), addr.port());
        if libc::connect(fd, &a as *const _ as *const libc::sockaddr, slen) < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINPROGRESS) {
                return Err(e);
            }
        }
        Ok(sock)
    }
}

/// A masked client frame.
fn ws_frame(op: u8, payload: &[u8], mask: u32, out: &mut Vec<u8>) {
    out.push(0x80 | op);
    let n = payload.len();
    if n < 126 {
        out.push(0x80 | n as u8);
    } else if n < 65536 {
        out.push(0x80 | 126);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0x80 | 127);
        out.extend_from_slice(&(n as u64).to_be_bytes());
    }
    let m = mask.to_be_bytes();
    out.extend_from_slice(&m);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ m[i & 3]));
}

fn parse_u64(b: &[u8]) -> (u64, usize) {
    let mut v = 0u64;
    let mut i = 0;
    while i < b.len() && b[i].is_ascii_digit() {
        v = v * 10 + (b[i] - b'0') as u64;
        i += 1;
    }
    (v, i)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

impl Conn {
    fn new(idx: usize, spec: Spec) -> Conn {
        Conn {
            idx: idx as u64,
            sock: None,
            st: St::Pending,
            spec,
            rbuf: Vec::new(),
            wbuf: Vec::new(),
            last_s: 0,
            hb_ms: 0,
            next_hb: u64::MAX,
            started: 0,
            retry_at: 0,
            retries: 0,
            reading: true,
            hs_done: false,
        }
    }

    fn send(&mut self, ctx: &mut Ctx, op: u8, payload: &[u8]) {
        let mask = ctx.rand() as u32;
        let was_empty = self.wbuf.is_empty();
        ws_frame(op, payload, mask, &mut self.wbuf);
        if was_empty {
            self.flush(ctx);
        }
    }

    fn flush(&mut self, ctx: &mut Ctx) {
        let Some(sock) = self.sock.as_mut() else {
            return;
        };
        while !self.wbuf.is_empty() {
            match sock.write(&self.wbuf) {
                Ok(0) => break,
                Ok(n) => {
                    self.wbuf.drain(..n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.die(ctx, format!("write: {e}"));
                    break;
                }
            }
        }
    }

    fn finish_handshake(&mut self, ctx: &mut Ctx) {
        if !self.hs_done {
            self.hs_done = true;
            ctx.hs_finished += 1;
        }
    }

    fn die(&mut self, ctx: &mut Ctx, why: String) {
        if self.st == St::Dead {
            return;
        }
        if self.st == St::Ready {
            ctx.sh.lost.fetch_add(1, Relaxed);
        } else {
            ctx.sh.failed.fetch_add(1, Relaxed);
        }
        ctx.sh.note(format!("session {:?}: {why}", self.st));
        self.finish_handshake(ctx);
        self.st = St::Dead;
        self.sock = None; // closes the fd (and removes it from epoll)
        self.rbuf = Vec::new();
        self.wbuf = Vec::new();
    }

    fn identify(&mut self, ctx: &mut Ctx) {
        let msg = format!(
            r#"{{"op":2,"d":{{"token":"{}","intents":{},"properties":{{"os":"linux","browser":"measure","device":"measure"}}}}}}"#,
            self.spec.token, ctx.cfg.intents
        );
        self.send(ctx, 1, msg.as_bytes());
        self.st = St::Identifying;
    }

    fn heartbeat(&mut self, ctx: &mut Ctx) {
        let msg = if ctx.cfg.ack_seq && self.last_s > 0 {
            format!(r#"{{"op":1,"d":{}}}"#, self.last_s)
        } else {
            r#"{"op":1,"d":null}"#.to_string()
        };
        self.send(ctx, 1, msg.as_bytes());
    }

    fn on_readable(&mut self, ctx: &mut Ctx, scratch: &mut [u8]) {
        while self.st != St::Dead && self.reading {
            let Some(sock) = self.sock.as_mut() else {
                return;
            };
            match sock.read(scratch) {
                Ok(0) => {
                    self.die(ctx, "connection closed by the node (EOF)".into());
                    return;
                }
                Ok(n) => {
                    ctx.bytes += n as u64;
                    let now = now_ns();
                    self.ingest(ctx, &scratch[..n], now);
                    if n < scratch.len() {
                        return; // drained; edge-triggered epoll reports new data
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.die(ctx, format!("read: {e}"));
                    return;
                }
            }
        }
    }

    fn ingest(&mut self, ctx: &mut Ctx, data: &[u8], now: u64) {
        if self.rbuf.is_empty() {
            let used = self.parse(ctx, data, now);
            if self.st != St::Dead && used < data.len() {
                self.rbuf.extend_from_slice(&data[used..]);
            }
        } else {
            let mut buf = std::mem::take(&mut self.rbuf);
            buf.extend_from_slice(data);
            let used = self.parse(ctx, &buf, now);
            if self.st != St::Dead {
                buf.drain(..used);
                self.rbuf = buf;
            }
        }
    }

    /// Consumes whole frames (and the HTTP response); returns bytes used.
    fn parse(&mut self, ctx: &mut Ctx, buf: &[u8], now: u64) -> usize {
        let mut off = 0;
        if self.st == St::Upgrading {
            let Some(end) = find(buf, b"\r\n\r\n") else {
                if buf.len() > 16 * 1024 {
                    self.die(ctx, "HTTP response head too large".into());
                }
                return 0;
            };
            if !buf.starts_with(b"HTTP/1.1 101") {
                let head = String::from_utf8_lossy(&buf[..end.min(200)]).to_string();
                self.die(ctx, format!("upgrade refused: {head}"));
                return 0;
            }
            off = end + 4;
            self.st = St::Hello;
        }
        while self.st != St::Dead {
            let b = &buf[off..];
            if b.len() < 2 {
                break;
            }
            let op = b[0] & 0x0f;
            let fin = b[0] & 0x80 != 0;
            let masked = b[1] & 0x80 != 0;
            let (len, mut hdr) = match b[1] & 0x7f {
                126 => {
                    if b.len() < 4 {
                        break;
                    }
                    (u16::from_be_bytes([b[2], b[3]]) as usize, 4)
                }
                127 => {
                    if b.len() < 10 {
                        break;
                    }
                    (
                        u64::from_be_bytes(b[2..10].try_into().unwrap()) as usize,
                        10,
                    )
                }
                n => (n as usize, 2),
            };
            if masked {
                hdr += 4;
            }
            if b.len() < hdr + len {
                break;
            }
            let payload = &b[hdr..hdr + len];
            if masked || !fin || op == 0 {
                self.die(
                    ctx,
                    format!("unexpected frame (op {op}, fin {fin}, masked {masked})"),
                );
                return off;
            }
            match op {
                1 => self.on_text(ctx, payload, now),
                8 => {
                    let code = if payload.len() >= 2 {
                        u16::from_be_bytes([payload[0], payload[1]])
                    } else {
                        0
                    };
                    *ctx.sh.close_codes.lock().unwrap().entry(code).or_insert(0) += 1;
                    let reason =
                        String::from_utf8_lossy(payload.get(2..).unwrap_or(&[])).to_string();
                    self.die(ctx, format!("closed by the node: {code} {reason}"));
                    return off + hdr + len;
                }
                9 => {
                    let p = payload.to_vec();
                    self.send(ctx, 10, &p);
                }
                _ => {}
            }
            off += hdr + len;
        }
        off
    }

    fn on_text(&mut self, ctx: &mut Ctx, p: &[u8], now: u64) {
        const DISPATCH: &[u8] = b"{\"op\":0,\"t\":\"";
        if let Some(rest) = p.strip_prefix(DISPATCH) {
            let Some(q) = rest.iter().position(|&c| c == b'"') else {
                return;
            };
            let t = &rest[..q];
            let Some(after_t) = rest[q..].strip_prefix(b"\",\"s\":") else {
                ctx.sh.note("dispatch without s after t".into());
                return;
            };
            let (s, j) = parse_u64(after_t);
            if self.last_s != 0 {
                if s > self.last_s + 1 {
                    ctx.gaps += s - self.last_s - 1;
                } else if s <= self.last_s {
                    ctx.reorders += 1;
                }
            }
            self.last_s = self.last_s.max(s);
            if t == b"MESSAGE_CREATE" {
                if self.spec.stall {
                    ctx.stalled_deliveries += 1;
                    return;
                }
                ctx.deliveries += 1;
                if let Some(d) = after_t[j..].strip_prefix(b",\"d\":{\"ts_ns\":") {
                    let (ts, k) = parse_u64(d);
                    if k > 0 && ctx.measuring {
                        ctx.hist.record(now.saturating_sub(ts) / 1000);
                    }
                }
                return;
            }
            match t {
                b"READY" => {
                    ctx.sh
                        .handshake_dispatch_bytes
                        .fetch_add(p.len() as u64, Relaxed);
                    self.st = St::AwaitGuild;
                }
                b"GUILD_CREATE" => {
                    ctx.sh
                        .handshake_dispatch_bytes
                        .fetch_add(p.len() as u64, Relaxed);
                    {
                        let mut g = ctx.sh.guild.lock().unwrap();
                        if g.is_none() {
                            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(p) {
                                let d = &v["d"];
                                let id = d["id"].as_str().and_then(|s| s.parse().ok());
                                let ch = d["channels"].as_array().and_then(|a| {
                                    a.iter()
                                        .find(|c| c["name"] == "general")
                                        .and_then(|c| c["id"].as_str()?.parse().ok())
                                });
                                if let (Some(id), Some(ch)) = (id, ch) {
                                    *g = Some((id, ch));
                                }
                            }
                        }
                    }
                    if self.st == St::AwaitGuild {
                        self.st = St::Ready;
                        ctx.sh.ready.fetch_add(1, Relaxed);
                        self.finish_handshake(ctx);
                        if self.spec.stall {
                            // Stop reading: no EPOLLIN any more, the node's sends back up.
                            self.reading = false;
                            if let Some(s) = &self.sock {
                                epoll_ctl(
                                    ctx.ep,
                                    libc::EPOLL_CTL_MOD,
                                    s.as_raw_fd(),
                                    (libc::EPOLLOUT | libc::EPOLLET) as u32,
                                    self.idx,
                                );
                            }
                        }
                    }
                }
                _ => {
                    ctx.sh.other_dispatches.fetch_add(1, Relaxed);
                }
            }
            return;
        }
        let v: serde_json::Value = match serde_json::from_slice(p) {
            Ok(v) => v,
            Err(_) => {
                ctx.sh.note(format!(
                    "non-JSON text: {}",
                    String::from_utf8_lossy(&p[..p.len().min(100)])
                ));
                return;
            }
        };
        match v["op"].as_u64() {
            Some(10) => {
                self.hb_ms = v["d"]["heartbeat_interval"].as_u64().unwrap_or(41_250);
                let jitter = (ctx.rand() % 1000) * self.hb_ms * 1_000;
                self.next_hb = now + jitter;
                if self.st == St::Hello {
                    self.identify(ctx);
                }
            }
            Some(11) => {
                ctx.sh.hb_acks.fetch_add(1, Relaxed);
            }
            Some(1) => self.heartbeat(ctx),
            Some(7) => ctx.sh.note("op 7 reconnect received".into()),
            Some(9) => {
                if self.st != St::Ready && self.retries < 5 {
                    // Registry link busy (or similar): identify again a little later.
                    self.retries += 1;
                    ctx.sh.identify_retries.fetch_add(1, Relaxed);
                    self.retry_at = now + 1_000_000_000 + (ctx.rand() % 2_000_000_000);
                    self.st = St::Hello;
                } else {
                    self.die(ctx, format!("op 9 invalid session: {}", v["d"]));
                }
            }
            _ => {}
        }
    }
}

fn client_thread(tid: usize, specs: Vec<Spec>, cfg: ClientCfg, sh: Arc<Shared>) -> Hist {
    // SAFETY: epoll_create1 takes no pointers; the result is checked.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(ep >= 0, "epoll_create1");
    let mut conns: Vec<Conn> = specs
        .into_iter()
        .enumerate()
        .map(|(i, s)| Conn::new(i, s))
        .collect();
    let mut ctx = Ctx {
        cfg: &cfg,
        sh: &sh,
        ep,
        hist: Hist::new(),
        rng: 0x9E37_79B9_7F4A_7C15 ^ ((tid as u64 + 1) * 0x1234_5678_9abc_def1) ^ realtime_ns(),
        hs_finished: 0,
        deliveries: 0,
        stalled_deliveries: 0,
        gaps: 0,
        reorders: 0,
        bytes: 0,
        measuring: false,
    };
    let mut scratch = vec![0u8; 256 * 1024];
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 1024];
    let mut next_start = 0;
    let mut in_flight = 0usize;
    let mut next_timer = 0u64;
    while !sh.stop.load(Relaxed) {
        ctx.measuring = sh.measuring.load(Relaxed);
        while in_flight < cfg.window && next_start < conns.len() {
            let i = next_start;
            next_start += 1;
            let c = &mut conns[i];
            c.started = now_ns();
            match open_socket(
                cfg.addr,
                c.spec.bind,
                if c.spec.stall { cfg.stall_rcvbuf } else { None },
            ) {
                Ok(s) => {
                    epoll_ctl(ep, libc::EPOLL_CTL_ADD, s.as_raw_fd(), EV_ALL, i as u64);
                    c.sock = Some(s);
                    c.st = St::Connecting;
                    in_flight += 1;
                }
                Err(e) => {
                    c.st = St::Connecting;
                    c.die(&mut ctx, format!("connect: {e}"));
                    ctx.hs_finished -= 1; // never counted in flight
                }
            }
        }
        // SAFETY: epoll_wait writes at most `events.len()` entries into the vector it is given.
        let n = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), events.len() as i32, 20) };
        for ev in &events[..n.max(0) as usize] {
            let (flags, i) = (ev.events, ev.u64 as usize);
            let c = &mut conns[i];
            if c.st == St::Dead {
                continue;
            }
            if c.st == St::Connecting {
                let mut err: libc::c_int = 0;
                let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
                let fd = c.sock.as_ref().map(|s| s.as_raw_fd()).unwrap_or(-1);
                // SAFETY: getsockopt writes at most `len` bytes into `err`; a closed fd (-1) is an error return.
                unsafe {
                    libc::getsockopt(
                        fd,
                        libc::SOL_SOCKET,
                        libc::SO_ERROR,
                        &mut err as *mut _ as *mut _,
                        &mut len,
                    )
                };
                if err != 0 {
                    c.die(
                        &mut ctx,
                        format!("connect: {}", std::io::Error::from_raw_os_error(err)),
                    );
                    continue;
                }
                if flags & libc::EPOLLOUT as u32 == 0 {
                    continue;
                }
                sh.opened.fetch_add(1, Relaxed);
                c.st = St::Upgrading;
                let req = format!(
                    "GET /?v=10&encoding=json HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
                    cfg.addr
                );
                c.wbuf.extend_from_slice(req.as_bytes());
                c.flush(&mut ctx);
            }
            if flags & (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32
                != 0
            {
                c.on_readable(&mut ctx, &mut scratch);
            }
            if flags & libc::EPOLLOUT as u32 != 0 && !c.wbuf.is_empty() {
                c.flush(&mut ctx);
            }
        }
        let now = now_ns();
        if now >= next_timer {
            next_timer = now + 50_000_000;
            for c in conns.iter_mut() {
                match c.st {
                    St::Pending | St::Dead => continue,
                    _ => {}
                }
                if c.hb_ms > 0 && now >= c.next_hb {
                    c.heartbeat(&mut ctx);
                    c.next_hb = now + c.hb_ms * 1_000_000;
                }
                if c.st == St::Hello && c.retry_at != 0 && now >= c.retry_at {
                    c.retry_at = 0;
                    c.identify(&mut ctx);
                }
                if !c.hs_done && now.saturating_sub(c.started) > cfg.timeout_ns {
                    c.die(&mut ctx, "not READY in time".into());
                }
            }
        }
        in_flight -= ctx.hs_finished.min(in_flight);
        ctx.hs_finished = 0;
        ctx.flush();
    }
    // Close every live session normally (1000 ends it on the node: not left resumable).
    for c in conns.iter_mut() {
        if c.sock.is_some() && c.st != St::Dead {
            c.send(&mut ctx, 8, &1000u16.to_be_bytes());
        }
    }
    std::thread::sleep(Duration::from_millis(200));
    for c in conns.iter_mut() {
        c.flush(&mut ctx);
        c.sock = None;
    }
    // SAFETY: closes our own epoll fd, once; nothing uses it after.
    unsafe { libc::close(ep) };
    ctx.hist
}

struct Fleet {
    sh: Arc<Shared>,
    threads: Vec<std::thread::JoinHandle<Hist>>,
    n: usize,
}

impl Fleet {
    fn start(a: &Args, tokens: &[String], n: usize, stall: usize) -> Fleet {
        let addr: SocketAddrV4 = a.req("addr");
        let threads: usize = a.get("threads", 2usize).max(1);
        let bind_base: Option<Ipv4Addr> = a.opt("bind-base");
        let cfg = ClientCfg {
            addr,
            intents: a.get("intents", 1 | (1 << 9) | (1 << 15)),
            window: a.get("window", 128usize).max(1),
            ack_seq: a.get::<u8>("ack-seq", 1) != 0,
            timeout_ns: a.get("ready-timeout-secs", 60u64) * 1_000_000_000,
            stall_rcvbuf: a.opt("stall-rcvbuf"),
        };
        let toks: Vec<Arc<str>> = tokens.iter().map(|t| Arc::from(t.as_str())).collect();
        let sh = Arc::new(Shared::default());
        let mut per: Vec<Vec<Spec>> = vec![Vec::new(); threads];
        for i in 0..n {
            let bind = bind_base.map(|b| Ipv4Addr::from(u32::from(b) + (i / 25_000) as u32));
            per[i % threads].push(Spec {
                token: toks[i % toks.len()].clone(),
                bind,
                stall: i < stall,
            });
        }
        let threads = per
            .into_iter()
            .enumerate()
            .map(|(t, specs)| {
                let (cfg, sh) = (cfg.clone(), sh.clone());
                std::thread::Builder::new()
                    .name(format!("client-{t}"))
                    .spawn(move || client_thread(t, specs, cfg, sh))
                    .expect("spawn client thread")
            })
            .collect();
        Fleet { sh, threads, n }
    }

    /// Waits until every session is READY or failed (or the timeout);
    /// prints progress once a second. Returns the seconds it took.
    fn wait_ready(&self, timeout: Duration) -> f64 {
        let t0 = Instant::now();
        let mut last_print = Instant::now();
        loop {
            let (r, f) = (self.sh.ready.load(Relaxed), self.sh.failed.load(Relaxed));
            if r + f >= self.n || t0.elapsed() > timeout {
                let secs = t0.elapsed().as_secs_f64();
                println!(
                    "progress opened={} ready={} failed={} identify_retries={} t={:.1}s",
                    self.sh.opened.load(Relaxed),
                    r,
                    f,
                    self.sh.identify_retries.load(Relaxed),
                    secs
                );
                return secs;
            }
            if last_print.elapsed() >= Duration::from_secs(1) {
                last_print = Instant::now();
                println!(
                    "progress opened={} ready={} failed={} t={:.0}s",
                    self.sh.opened.load(Relaxed),
                    r,
                    f,
                    t0.elapsed().as_secs_f64()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn stop(self) -> Hist {
        self.sh.stop.store(true, Relaxed);
        let mut h = Hist::new();
        for t in self.threads {
            if let Ok(th) = t.join() {
                h.merge(&th);
            }
        }
        h
    }
}

fn read_tokens(path: &str) -> Vec<String> {
    let t: Vec<String> = std::fs::read_to_string(path)
        .unwrap_or_else(|e| die(&format!("reading {path}: {e}")))
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    if t.is_empty() {
        die(&format!("{path} holds no token"));
    }
    t
}

// ---------------------------------------------------------------- idle

fn idle(a: Args) {
    let tokens = read_tokens(
        &a.opt::<String>("token-file")
            .or(a.opt("tokens-file"))
            .unwrap_or_else(|| die("--token-file is required")),
    );
    let n: usize = a.req("sessions");
    let pid: Option<u32> = a.opt("node-pid");
    let admin: Option<String> = a.opt("admin");
    let settle = a.get("settle-secs", 3u64);
    println!("load_before {}", loadavg());
    let rss0 = rss_kb(pid);
    let m0 = Metrics::scrape(admin.as_deref());
    println!(
        "node_rss_before_kb {}",
        rss0.map_or("?".into(), |v| v.to_string())
    );
    let fleet = Fleet::start(&a, &tokens, n, 0);
    let secs = fleet.wait_ready(Duration::from_secs(a.get("timeout-secs", 240)));
    let ready = fleet.sh.ready.load(Relaxed);
    println!(
        "all_ready {} of {} in {:.1}s ({:.0} identifies/s)",
        ready,
        n,
        secs,
        ready as f64 / secs.max(1e-9)
    );
    std::thread::sleep(Duration::from_secs(settle));
    let rss1 = rss_kb(pid);
    let m1 = Metrics::scrape(admin.as_deref());
    println!(
        "node_rss_after_kb {}",
        rss1.map_or("?".into(), |v| v.to_string())
    );
    if let (Some(r0), Some(r1)) = (rss0, rss1) {
        let delta = (r1 as f64 - r0 as f64) * 1024.0;
        println!("node_rss_delta_bytes {delta:.0}");
        if ready > 0 {
            println!(
                "node_rss_per_1000_sessions_bytes {:.0}",
                delta / ready as f64 * 1000.0
            );
            println!("node_rss_per_session_bytes {:.0}", delta / ready as f64);
        }
    }
    let hb = fleet.sh.handshake_dispatch_bytes.load(Relaxed);
    if ready > 0 {
        println!(
            "ready_plus_guild_create_bytes_per_session {:.0}",
            hb as f64 / ready as f64
        );
    }
    if admin.is_some() {
        println!(
            "node_sessions_by_worker {}",
            fmt_list(&m1.by_worker("gatewayd_sessions"))
        );
        println!(
            "node_ring_chunks_free_by_worker {} -> {}",
            fmt_list(&m0.by_worker("gatewayd_ring_chunks_free")),
            fmt_list(&m1.by_worker("gatewayd_ring_chunks_free"))
        );
    }
    let hold = a.get("hold-secs", 0u64);
    if hold > 0 {
        std::thread::sleep(Duration::from_secs(hold));
        println!(
            "after_hold_secs {hold} ready={} lost={} heartbeat_acks={} node_rss_kb={}",
            fleet.sh.ready.load(Relaxed),
            fleet.sh.lost.load(Relaxed),
            fleet.sh.hb_acks.load(Relaxed),
            rss_kb(pid).map_or("?".into(), |v| v.to_string())
        );
    }
    println!("load_after {}", loadavg());
    let lost = fleet.sh.lost.load(Relaxed);
    let failed = fleet.sh.failed.load(Relaxed);
    fleet.stop();
    println!("sessions_failed {failed} sessions_lost {lost}");
}

// ---------------------------------------------------------------- fanout

struct ProducerStats {
    sent: u64,
    max_lag_ns: u64,
    bytes: u64,
    d_len: usize,
}

fn producer(
    ingest: SocketAddrV4,
    server: u64,
    channel: u64,
    rate: f64,
    secs: f64,
    payload: usize,
    start_ns: u64,
) -> std::io::Result<ProducerStats> {
    let mut sock = TcpStream::connect(ingest)?;
    sock.set_nodelay(true)?;
    let total = (rate * secs).round() as u64;
    let period = 1e9 / rate;
    let head_len = {
        let mut probe = Vec::new();
        write_d(&mut probe, start_ns + 1_000_000_000, 1, server, channel, 0);
        probe.len()
    };
    let pad = payload.saturating_sub(head_len);
    let mut d = Vec::with_capacity(payload + 256);
    let mut out = Vec::with_capacity(1 << 20);
    let mut st = ProducerStats {
        sent: 0,
        max_lag_ns: 0,
        bytes: 0,
        d_len: 0,
    };
    while st.sent < total {
        let now = now_ns();
        let due = (((now.saturating_sub(start_ns)) as f64 / period) as u64 + 1).min(total);
        while st.sent < due {
            let sched = start_ns + (st.sent as f64 * period) as u64;
            d.clear();
            write_d(&mut d, sched, st.sent + 1, server, channel, pad);
            st.d_len = d.len();
            ingest::encode_parts(
                "MESSAGE_CREATE",
                server,
                channel,
                1 << 9,
                0,
                realtime_ns(),
                ingest::FLAG_HAS_CONTENT,
                &[],
                &d,
                &mut out,
            );
            st.max_lag_ns = st.max_lag_ns.max(now.saturating_sub(sched));
            st.sent += 1;
        }
        if !out.is_empty() {
            sock.write_all(&out)?;
            st.bytes += out.len() as u64;
            out.clear();
        }
        if st.sent >= total {
            break;
        }
        let next = start_ns + (st.sent as f64 * period) as u64;
        let now = now_ns();
        if next > now {
            std::thread::sleep(Duration::from_nanos((next - now).min(1_000_000)));
        }
    }
    sock.flush()?;
    // Keep the connection until the node has read everything (closing early is fine too).
    Ok(st)
}

fn write_d(d: &mut Vec<u8>, ts: u64, id: u64, server: u64, channel: u64, pad: usize) {
    let _ = write!(
        d,
        r#"{{"ts_ns":{ts},"id":"{id}","type":0,"channel_id":"{channel}","guild_id":"{server}","author":{{"id":"5","username":"producer","discriminator":"0","avatar":null,"bot":false}},"content":""#
    );
    d.extend(std::iter::repeat_n(b'x', pad));
    d.extend_from_slice(br#"","timestamp":"2026-01-01T00:00:00.000000+00:00","tts":false,"mention_everyone":false,"mentions":[],"mention_roles":[],"attachments":[],"embeds":[],"pinned":false}"#);
}

struct Snap {
    t: Instant,
    m: Metrics,
    cpu: Option<f64>,
    rss: Option<u64>,
    self_cpu: f64,
    softirqd: f64,
    deliveries: u64,
    stalled: u64,
    gaps: u64,
    bytes: u64,
    tcp_mem: Option<u64>,
}

fn snap(sh: &Shared, pid: Option<u32>, admin: Option<&str>) -> Snap {
    Snap {
        t: Instant::now(),
        m: Metrics::scrape(admin),
        cpu: cpu_secs(pid),
        rss: rss_kb(pid),
        self_cpu: self_cpu_secs(),
        softirqd: ksoftirqd_secs(),
        deliveries: sh.deliveries.load(Relaxed),
        stalled: sh.stalled_deliveries.load(Relaxed),
        gaps: sh.gaps.load(Relaxed),
        bytes: sh.bytes_rx.load(Relaxed),
        tcp_mem: tcp_mem_pages(),
    }
}

fn fanout(a: Args) {
    let tokens = read_tokens(
        &a.opt::<String>("tokens-file")
            .or(a.opt("token-file"))
            .unwrap_or_else(|| die("--tokens-file is required")),
    );
    let n: usize = a.req("sessions");
    let ingest_addr: SocketAddrV4 = a.req("ingest");
    let rate: f64 = a.req("rate");
    let secs: f64 = a.req("seconds");
    let payload: usize = a.get("payload", 600);
    let stall: usize = a.get("stall", 0usize).min(n);
    let pid: Option<u32> = a.opt("node-pid");
    let admin: Option<String> = a.opt("admin");
    let drain = Duration::from_secs_f64(a.get("drain-secs", 5.0));
    println!("load_before {}", loadavg());
    let rss_start = rss_kb(pid);
    let fleet = Fleet::start(&a, &tokens, n, stall);
    let ready_secs = fleet.wait_ready(Duration::from_secs(a.get("timeout-secs", 240)));
    let ready = fleet.sh.ready.load(Relaxed);
    println!("all_ready {ready} of {n} in {ready_secs:.1}s");
    if ready == 0 {
        fleet.stop();
        die("no session became READY");
    }
    let (server, channel) = match (a.opt::<u64>("server"), a.opt::<u64>("channel")) {
        (Some(s), Some(c)) => (s, c),
        _ => fleet
            .sh
            .guild
            .lock()
            .unwrap()
            .unwrap_or_else(|| die("no GUILD_CREATE with #general seen")),
    };
    std::thread::sleep(Duration::from_secs(1));
    let readers = ready.saturating_sub(stall) as u64;
    let sh = fleet.sh.clone();
    let s0 = snap(&sh, pid, admin.as_deref());
    sh.measuring.store(true, Relaxed);
    let start_ns = now_ns() + 5_000_000;
    let prod = std::thread::spawn(move || {
        producer(ingest_addr, server, channel, rate, secs, payload, start_ns)
    });
    let pst = match prod.join().expect("producer thread") {
        Ok(p) => p,
        Err(e) => {
            fleet.stop();
            die(&format!("producer: {e}"));
        }
    };
    let s1 = snap(&sh, pid, admin.as_deref());
    let expected = pst.sent * readers;
    let dl = Instant::now() + drain;
    while sh.deliveries.load(Relaxed) < expected && Instant::now() < dl {
        std::thread::sleep(Duration::from_millis(10));
    }
    let drained_after = s1.t.elapsed().as_secs_f64();
    let s2 = snap(&sh, pid, admin.as_deref());
    let lost = sh.lost.load(Relaxed);
    let hb_acks = sh.hb_acks.load(Relaxed);
    let hist = fleet.stop();

    let win = s1.t.duration_since(s0.t).as_secs_f64();
    let all = s2.t.duration_since(s0.t).as_secs_f64();
    let recv_win = s1.deliveries - s0.deliveries;
    let recv_all = s2.deliveries - s0.deliveries;
    let node_del = s2.m.sum("gatewayd_deliveries_total") - s0.m.sum("gatewayd_deliveries_total");
    let node_del_win =
        s1.m.sum("gatewayd_deliveries_total") - s0.m.sum("gatewayd_deliveries_total");
    let node_sent_bytes =
        s2.m.sum("gatewayd_sent_bytes_total") - s0.m.sum("gatewayd_sent_bytes_total");
    let cpu = match (s0.cpu, s2.cpu) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    let busy0 = s0.m.by_worker("gatewayd_worker_busy_seconds_total");
    let busy2 = s2.m.by_worker("gatewayd_worker_busy_seconds_total");
    let busy: Vec<f64> = busy2.iter().zip(&busy0).map(|(b, a)| b - a).collect();
    let del_w: Vec<f64> =
        s2.m.by_worker("gatewayd_deliveries_total")
            .iter()
            .zip(s0.m.by_worker("gatewayd_deliveries_total"))
            .map(|(b, a)| b - a)
            .collect();

    println!("server {server} channel {channel}");
    println!(
        "sessions {n} ready {ready} stalled {stall} readers {readers} tokens {}",
        tokens.len()
    );
    println!(
        "node_sessions_by_worker {}",
        fmt_list(&s0.m.by_worker("gatewayd_sessions"))
    );
    println!("rate_offered_events_per_s {rate}");
    println!("seconds {secs}");
    println!("payload_d_bytes {}", pst.d_len);
    println!(
        "events_sent {} producer_max_lag_ms {:.1} producer_bytes {}",
        pst.sent,
        pst.max_lag_ns as f64 / 1e6,
        pst.bytes
    );
    println!("offered_deliveries_per_s {:.0}", rate * readers as f64);
    println!("expected_deliveries {expected}");
    println!(
        "received_deliveries {recv_all} missing {}",
        expected as i64 - recv_all as i64
    );
    println!(
        "received_within_send_window {recv_win} ({:.0}/s over {win:.2}s)",
        recv_win as f64 / win
    );
    println!(
        "received_deliveries_per_s {:.0} (all received / send window)",
        recv_all as f64 / win
    );
    println!("drained_secs_after_producer {drained_after:.2}");
    println!(
        "client_rx_mbytes_per_s {:.1}",
        (s2.bytes - s0.bytes) as f64 / all / 1e6
    );
    println!("node_deliveries_delta {node_del:.0} ({:.0}/s over send window+drain {all:.2}s; {node_del_win:.0} within send window = {:.0}/s)", node_del / all, node_del_win / win);
    println!("node_deliveries_by_worker {}", fmt_list(&del_w));
    println!("node_sent_mbytes {:.1}", node_sent_bytes / 1e6);
    println!(
        "gaps {} reorders {}",
        s2.gaps - s0.gaps,
        sh.reorders.load(Relaxed)
    );
    println!("sessions_lost_during_run {lost}");
    if let Some(c) = cpu {
        println!(
            "node_cpu_secs {c:.2} (over {all:.2}s = {:.2} cores)",
            c / all
        );
        println!(
            "deliveries_per_node_cpu_second {:.0}",
            node_del / c.max(1e-9)
        );
        let k = s2.softirqd - s0.softirqd;
        println!("ksoftirqd_cpu_secs {k:.2}");
        println!(
            "deliveries_per_node_and_ksoftirqd_cpu_second {:.0}",
            node_del / (c + k).max(1e-9)
        );
    }
    println!(
        "worker_busy_secs {}",
        busy.iter()
            .map(|b| format!("{b:.2}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    println!("client_cpu_secs {:.2}", s2.self_cpu - s0.self_cpu);
    println!(
        "latency_ms p50 {:.2} p90 {:.2} p99 {:.2} p99.9 {:.2} max {:.2} (n={})",
        hist.pct(50.0) as f64 / 1e3,
        hist.pct(90.0) as f64 / 1e3,
        hist.pct(99.0) as f64 / 1e3,
        hist.pct(99.9) as f64 / 1e3,
        hist.max as f64 / 1e3,
        hist.n
    );
    let kb = |v: Option<u64>| v.map_or("?".to_string(), |v| v.to_string());
    println!(
        "node_rss_kb before_connect {} before_send {} after_send {} after_drain {}",
        kb(rss_start),
        kb(s0.rss),
        kb(s1.rss),
        kb(s2.rss)
    );
    println!(
        "tcp_mem_pages before_send {} after_send {} after_drain {}",
        kb(s0.tcp_mem),
        kb(s1.tcp_mem),
        kb(s2.tcp_mem)
    );
    println!(
        "ring_chunks_free_by_worker before {} after_send {} after_drain {}",
        fmt_list(&s0.m.by_worker("gatewayd_ring_chunks_free")),
        fmt_list(&s1.m.by_worker("gatewayd_ring_chunks_free")),
        fmt_list(&s2.m.by_worker("gatewayd_ring_chunks_free"))
    );
    for name in [
        "gatewayd_slow_consumer_closes_total",
        "gatewayd_arena_wraps_total",
        "gatewayd_arena_lost_reads_total",
        "gatewayd_worker_inbox_drops_total",
        "gatewayd_sessions_degraded",
        "gatewayd_arena_records_total",
    ] {
        println!(
            "{name} {:.0}",
            s2.m.sum(name)
                - if name.ends_with("_total") {
                    s0.m.sum(name)
                } else {
                    0.0
                }
        );
    }
    let dropped = s2.m.sum("gatewayd_ingest_dropped_batches_total")
        - s0.m.sum("gatewayd_ingest_dropped_batches_total");
    println!("ingest_dropped_batches {dropped:.0}");
    let c0 = s0.m.closes();
    let c2 = s2.m.closes();
    let closes: Vec<String> = c2
        .iter()
        .map(|(k, v)| (k, v - c0.get(k).copied().unwrap_or(0.0)))
        .filter(|(_, v)| *v > 0.0)
        .map(|(k, v)| format!("{k}:{v:.0}"))
        .collect();
    println!("node_closes_during_run {}", closes.join(" "));
    println!("client_close_codes {:?}", sh.close_codes.lock().unwrap());
    if stall > 0 {
        let stalled_read = s2.stalled - s0.stalled;
        println!(
            "stalled_sessions_read {stalled_read} of {} offered to them",
            pst.sent * stall as u64
        );
    }
    println!("heartbeat_acks {hb_acks}");
    println!("load_after {}", loadavg());
}

fn main() {
    let _ = now_ns();
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = argv.first() else {
        die("missing subcommand")
    };
    let args = Args::parse(&argv[1..]);
    match cmd.as_str() {
        "idle" => idle(args),
        "fanout" => fanout(args),
        "-h" | "--help" | "help" => println!("{USAGE}"),
        other => die(&format!("unknown subcommand {other}")),
    }
}
