//! A fault-injecting TCP proxy, used between gatewayd and its registry
//! (PostgreSQL) to script a brownout: added latency, stalled connections,
//! dropped connections.
//!
//! Design: std threads. One accept thread; per connection four threads (a
//! reader and a writer per direction) around a FIFO of chunks per
//! direction. Readers stamp each chunk with its arrival time; writers
//! forward it when the current [`Fault`] allows:
//!
//! - [`Fault::Pass`]: at once.
//! - [`Fault::Latency`]`(d)`: at arrival + `d` (both directions, order kept).
//! - [`Fault::Stall`]: never, until the fault changes. Connections stay
//!   open; new ones are accepted but not connected upstream.
//! - [`Fault::Drop`]: every open connection is reset (RST on both sides),
//!   new ones are reset at once.
//!
//! Bounded: at most `max_connections` connections (more are closed at
//! once), and a reader stops reading while its direction holds more than
//! `max_pending` bytes (so a stall pushes back on the sender through TCP).
//! I/O errors close the connection concerned; nothing panics on them.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// Default limit on concurrent proxied connections.
pub const MAX_CONNECTIONS: usize = 256;
/// Default limit on bytes read but not yet forwarded, per direction of a
/// connection.
pub const MAX_PENDING: usize = 1 << 20;
/// Timeout of the upstream connect.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

const CHUNK: usize = 16 * 1024;
/// Blocking reads and writes wake up this often to notice a closed connection.
const POLL: Duration = Duration::from_millis(200);
const THREAD_STACK: usize = 128 * 1024;

/// What the proxy does to traffic.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Fault {
    /// Forward at once.
    #[default]
    Pass,
    /// Forward each chunk this long after it arrived, both directions,
    /// order kept.
    Latency(Duration),
    /// Keep connections open and forward nothing; accept new connections but
    /// forward nothing on them either.
    Stall,
    /// Reset all open connections and reset new ones at once.
    Drop,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Pass => f.write_str("pass"),
            Fault::Latency(d) => write!(f, "latency={}", fmt_duration(*d)),
            Fault::Stall => f.write_str("stall"),
            Fault::Drop => f.write_str("drop"),
        }
    }
}

/// One step of a fault script: at `at` after the script starts, apply `fault`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub at: Duration,
    pub fault: Fault,
}

/// Parses a script such as `"0s:pass,5s:latency=200ms,10s:stall,20s:drop,25s:pass"`.
///
/// Steps are `TIME:FAULT` separated by commas; TIME and the latency are a
/// number (decimals allowed) with unit `ms` or `s`; FAULT is `pass`,
/// `latency=DURATION`, `stall` or `drop`. Times must not decrease.
pub fn parse_script(s: &str) -> Result<Vec<Step>, String> {
    if s.trim().is_empty() {
        return Err(
            "empty fault script (expected e.g. \"0s:pass,5s:latency=200ms,10s:stall\")".into(),
        );
    }
    let mut steps: Vec<Step> = Vec::new();
    for (i, item) in s.split(',').enumerate() {
        let n = i + 1;
        let item = item.trim();
        let ctx = |msg: String| format!("fault script step {n} ({item:?}): {msg}");
        if item.is_empty() {
            return Err(ctx("empty step (stray comma?)".into()));
        }
        let (time, fault) = item
            .split_once(':')
            .ok_or_else(|| ctx("expected TIME:FAULT, e.g. 5s:stall".into()))?;
        let at = parse_duration(time.trim()).map_err(|e| ctx(format!("bad time: {e}")))?;
        let fault = parse_fault(fault.trim()).map_err(ctx)?;
        if let Some(prev) = steps.last() {
            if at < prev.at {
                return Err(ctx(format!(
                    "time {} is before the previous step's {}; steps must be in time order",
                    fmt_duration(at),
                    fmt_duration(prev.at)
                )));
            }
        }
        steps.push(Step { at, fault });
    }
    Ok(steps)
}

fn parse_fault(s: &str) -> Result<Fault, String> {
    let lower = s.to_ascii_lowercase();
    match lower.as_str() {
        "pass" => return Ok(Fault::Pass),
        "stall" => return Ok(Fault::Stall),
        "drop" => return Ok(Fault::Drop),
        "latency" => return Err("latency needs a delay, e.g. latency=200ms".into()),
        _ => {}
    }
    if let Some((name, d)) = lower.split_once('=') {
        if name.trim() == "latency" {
            return parse_duration(d.trim())
                .map(Fault::Latency)
                .map_err(|e| format!("bad latency: {e}"));
        }
    }
    Err(format!(
        "unknown fault {s:?} (expected pass, latency=DURATION, stall or drop)"
    ))
}

/// `"200ms"`, `"5s"`, `"1.5s"`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, scale) = if let Some(n) = s.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1.0)
    } else {
        return Err(format!("{s:?} needs a unit: ms or s (e.g. 200ms, 5s)"));
    };
    let num = num.trim();
    if num.is_empty() || !num.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!(
            "{s:?} is not a non-negative number followed by ms or s"
        ));
    }
    let v: f64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a non-negative number followed by ms or s"))?;
    let secs = v * scale;
    if !secs.is_finite() || secs > 1e9 {
        return Err(format!("{s:?} is too large"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn fmt_duration(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1000.0;
    if ms >= 1000.0 && (ms / 1000.0).fract() == 0.0 {
        format!("{}s", ms as u64 / 1000)
    } else if ms.fract() == 0.0 {
        format!("{}ms", ms as u64)
    } else {
        format!("{ms:.3}ms")
    }
}

/// Counters since the proxy started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Connections accepted from clients (including ones closed at once).
    pub accepted: u64,
    /// Connections currently open (being proxied or waiting out a stall).
    pub open: u64,
    /// Connections closed at once because `max_connections` were open.
    pub refused: u64,
    /// Connections reset by [`Fault::Drop`] (open ones and new ones).
    pub dropped: u64,
    /// Upstream connects that failed (the client was then closed).
    pub upstream_failures: u64,
    /// Bytes forwarded client -> upstream.
    pub bytes_up: u64,
    /// Bytes forwarded upstream -> client.
    pub bytes_down: u64,
    /// Bytes read but not yet forwarded, all connections and directions.
    pub pending: u64,
}

#[derive(Default)]
struct Counters {
    accepted: AtomicU64,
    refused: AtomicU64,
    dropped: AtomicU64,
    upstream_failures: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    pending: AtomicU64,
}

struct Shared {
    upstream: SocketAddr,
    max_connections: usize,
    max_pending: usize,
    fault: Mutex<Fault>,
    /// Signalled on every fault change and on stop.
    changed: Condvar,
    stopping: AtomicBool,
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    next_id: AtomicU64,
    counters: Counters,
}

impl Shared {
    fn fault(&self) -> Fault {
        lock(&self.fault).clone()
    }
}

enum Item {
    Data(Instant, Vec<u8>),
    Eof,
}

#[derive(Default)]
struct DirState {
    queue: VecDeque<Item>,
    pending: usize,
}

#[derive(Default)]
struct Dir {
    state: Mutex<DirState>,
    cv: Condvar,
}

struct Conn {
    id: u64,
    client: TcpStream,
    upstream: Mutex<Option<TcpStream>>,
    dead: AtomicBool,
    /// [0] client -> upstream, [1] upstream -> client.
    dirs: [Dir; 2],
    /// Worker threads still running; the last one out unregisters the connection.
    running: AtomicUsize,
}

impl Conn {
    fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    fn wake(&self) {
        for d in &self.dirs {
            let _g = lock(&d.state);
            d.cv.notify_all();
        }
    }

    /// Closes both sides with a reset (SO_LINGER 0) and wakes every thread
    /// of the connection. Returns false if it was already closed.
    fn abort(&self) -> bool {
        if self.dead.swap(true, Ordering::AcqRel) {
            return false;
        }
        reset_and_wake(&self.client);
        if let Some(u) = lock(&self.upstream).as_ref() {
            reset_and_wake(u);
        }
        self.wake();
        true
    }
}

/// SO_LINGER 0 makes the final close send RST; SHUT_RD wakes blocked readers
/// without sending anything.
fn reset_and_wake(s: &TcpStream) {
    set_linger_zero(s);
    let _ = s.shutdown(Shutdown::Read);
}

fn set_linger_zero(s: &TcpStream) {
    use std::os::fd::AsRawFd;
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: valid fd owned by `s`, a correctly sized linger struct.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &l as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A running proxy. Dropping it stops it, like [`Proxy::stop`].
pub struct Proxy {
    shared: Arc<Shared>,
    local: SocketAddr,
    accept: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Listens on `listen` (port 0 picks a free port) and forwards each
    /// connection to `upstream`, with the default limits.
    pub fn start(listen: SocketAddr, upstream: SocketAddr) -> io::Result<Proxy> {
        Proxy::start_with_limits(listen, upstream, MAX_CONNECTIONS, MAX_PENDING)
    }

    /// [`Proxy::start`] with explicit limits: concurrent connections, and
    /// bytes buffered per direction of a connection.
    pub fn start_with_limits(
        listen: SocketAddr,
        upstream: SocketAddr,
        max_connections: usize,
        max_pending: usize,
    ) -> io::Result<Proxy> {
        let listener = TcpListener::bind(listen)?;
        let local = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            max_connections: max_connections.max(1),
            max_pending: max_pending.max(1),
            fault: Mutex::new(Fault::Pass),
            changed: Condvar::new(),
            stopping: AtomicBool::new(false),
            conns: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            counters: Counters::default(),
        });
        let sh = shared.clone();
        let accept = thread::Builder::new()
            .name("proxy-accept".into())
            .spawn(move || accept_loop(listener, sh))?;
        Ok(Proxy {
            shared,
            local,
            accept: Some(accept),
        })
    }

    /// The address clients connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The current fault.
    pub fn fault(&self) -> Fault {
        self.shared.fault()
    }

    /// Applies a fault now. [`Fault::Drop`] resets every open connection.
    pub fn set(&self, f: Fault) {
        set_fault(&self.shared, f);
    }

    /// Applies each step at its time from now, in a new thread; the thread
    /// ends after the last step or when the proxy stops.
    pub fn run_script(&self, steps: Vec<Step>) -> JoinHandle<()> {
        let sh = self.shared.clone();
        let start = Instant::now();
        thread::spawn(move || {
            for step in steps {
                let due = start + step.at;
                let mut g = lock(&sh.fault);
                loop {
                    if sh.stopping.load(Ordering::Acquire) {
                        return;
                    }
                    let now = Instant::now();
                    if now >= due {
                        break;
                    }
                    g = sh
                        .changed
                        .wait_timeout(g, due - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                drop(g);
                set_fault(&sh, step.fault);
            }
        })
    }

    /// Counters since the start.
    pub fn stats(&self) -> ProxyStats {
        let c = &self.shared.counters;
        ProxyStats {
            accepted: c.accepted.load(Ordering::Relaxed),
            open: lock(&self.shared.conns).len() as u64,
            refused: c.refused.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            upstream_failures: c.upstream_failures.load(Ordering::Relaxed),
            bytes_up: c.bytes_up.load(Ordering::Relaxed),
            bytes_down: c.bytes_down.load(Ordering::Relaxed),
            pending: c.pending.load(Ordering::Relaxed),
        }
    }

    /// Stops accepting, resets every open connection and waits (up to a
    /// second) for the connection threads to finish.
    pub fn stop(self) {
        // Drop does the work.
    }

    fn shutdown(&mut self) {
        let sh = &self.shared;
        if sh.stopping.swap(true, Ordering::AcqRel) {
            return;
        }
        {
            let _g = lock(&sh.fault);
            sh.changed.notify_all();
        }
        let conns: Vec<Arc<Conn>> = lock(&sh.conns).values().cloned().collect();
        for c in conns {
            c.abort();
        }
        // Wake the accept thread with a connection of our own.
        let mut wake = self.local;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let woke = TcpStream::connect_timeout(&wake, Duration::from_secs(1)).is_ok();
        if let Some(h) = self.accept.take() {
            if woke {
                let _ = h.join();
            }
        }
        let deadline = Instant::now() + Duration::from_secs(1);
        while !lock(&sh.conns).is_empty() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn set_fault(sh: &Arc<Shared>, f: Fault) {
    let is_drop = f == Fault::Drop;
    {
        let mut g = lock(&sh.fault);
        *g = f;
        sh.changed.notify_all();
    }
    let conns: Vec<Arc<Conn>> = lock(&sh.conns).values().cloned().collect();
    for c in conns {
        if is_drop {
            if c.abort() {
                sh.counters.dropped.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            c.wake();
        }
    }
}

fn accept_loop(listener: TcpListener, sh: Arc<Shared>) {
    loop {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) => {
                if sh.stopping.load(Ordering::Acquire) {
                    return;
                }
                // EMFILE and friends: back off instead of spinning.
                if e.kind() != ErrorKind::Interrupted && e.kind() != ErrorKind::ConnectionAborted {
                    thread::sleep(Duration::from_millis(20));
                }
                continue;
            }
        };
        if sh.stopping.load(Ordering::Acquire) {
            return;
        }
        let c = &sh.counters;
        c.accepted.fetch_add(1, Ordering::Relaxed);
        if sh.fault() == Fault::Drop {
            set_linger_zero(&stream);
            c.dropped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let client_clone = match stream.try_clone() {
            Ok(s) => s,
            Err(_) => continue,
        };
        let id = sh.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            id,
            client: client_clone,
            upstream: Mutex::new(None),
            dead: AtomicBool::new(false),
            dirs: [Dir::default(), Dir::default()],
            running: AtomicUsize::new(1),
        });
        {
            let mut conns = lock(&sh.conns);
            if conns.len() >= sh.max_connections {
                drop(conns);
                c.refused.fetch_add(1, Ordering::Relaxed);
                continue; // both handles close here
            }
            conns.insert(id, conn.clone());
        }
        let sh2 = sh.clone();
        let conn2 = conn.clone();
        let spawned = thread::Builder::new()
            .name("proxy-conn".into())
            .stack_size(THREAD_STACK)
            .spawn(move || connection(sh2, conn2, stream));
        if spawned.is_err() {
            conn.abort();
            lock(&sh.conns).remove(&id);
        }
    }
}

/// Called by each connection thread as it ends.
fn thread_done(sh: &Shared, conn: &Conn) {
    if conn.running.fetch_sub(1, Ordering::AcqRel) == 1 {
        // Forget what was never forwarded.
        for d in &conn.dirs {
            let mut st = lock(&d.state);
            sh.counters
                .pending
                .fetch_sub(st.pending as u64, Ordering::Relaxed);
            st.pending = 0;
            st.queue.clear();
        }
        lock(&sh.conns).remove(&conn.id);
    }
}

fn connection(sh: Arc<Shared>, conn: Arc<Conn>, client: TcpStream) {
    let upstream = match open_upstream(&sh, &conn) {
        Some(u) => u,
        None => {
            conn.abort();
            drop(client);
            thread_done(&sh, &conn);
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    for s in [&client, &upstream] {
        let _ = s.set_read_timeout(Some(POLL));
        let _ = s.set_write_timeout(Some(POLL));
    }
    // Handles: each thread owns clones of the sockets it uses.
    let clones = (|| -> io::Result<_> {
        Ok((
            client.try_clone()?,
            upstream.try_clone()?,
            upstream.try_clone()?,
        ))
    })();
    let (client_r, upstream_w, upstream_r) = match clones {
        Ok(c) => c,
        Err(_) => {
            conn.abort();
            thread_done(&sh, &conn);
            return;
        }
    };
    conn.running.fetch_add(3, Ordering::AcqRel);
    let mut spawn_failed = false;
    let jobs: Vec<Box<dyn FnOnce() + Send>> = {
        let (s1, c1) = (sh.clone(), conn.clone());
        let (s2, c2) = (sh.clone(), conn.clone());
        let (s3, c3) = (sh.clone(), conn.clone());
        vec![
            Box::new(move || reader(&s1, &c1, 0, client_r)),
            Box::new(move || writer(&s2, &c2, 0, upstream_w)),
            Box::new(move || reader(&s3, &c3, 1, upstream_r)),
        ]
    };
    for job in jobs {
        let (sh2, conn2) = (sh.clone(), conn.clone());
        let r = thread::Builder::new()
            .name("proxy-io".into())
            .stack_size(THREAD_STACK)
            .spawn(job);
        if r.is_err() {
            // The job (and its socket clone) was dropped; account for it.
            spawn_failed = true;
            conn2.abort();
            thread_done(&sh2, &conn2);
        }
    }
    if spawn_failed {
        conn.abort();
    }
    writer(&sh, &conn, 1, client);
}

/// Waits out a stall, then connects upstream. None: the connection is to
/// be closed (drop, stop, or connect failure).
fn open_upstream(sh: &Shared, conn: &Conn) -> Option<TcpStream> {
    {
        let mut g = lock(&sh.fault);
        loop {
            if conn.is_dead() || sh.stopping.load(Ordering::Acquire) {
                return None;
            }
            match *g {
                Fault::Stall => {
                    g = sh
                        .changed
                        .wait_timeout(g, POLL)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                Fault::Drop => {
                    drop(g);
                    if conn.abort() {
                        sh.counters.dropped.fetch_add(1, Ordering::Relaxed);
                    }
                    return None;
                }
                _ => break,
            }
        }
    }
    let up = match TcpStream::connect_timeout(&sh.upstream, CONNECT_TIMEOUT) {
        Ok(u) => u,
        Err(_) => {
            sh.counters
                .upstream_failures
                .fetch_add(1, Ordering::Relaxed);
            return None;
        }
    };
    let clone = up.try_clone().ok()?;
    *lock(&conn.upstream) = Some(clone);
    // An abort between the connect and the line above missed this socket.
    if conn.is_dead() {
        reset_and_wake(&up);
        return None;
    }
    Some(up)
}

fn reader(sh: &Shared, conn: &Conn, dir: usize, mut src: TcpStream) {
    let d = &conn.dirs[dir];
    let mut buf = vec![0u8; CHUNK];
    loop {
        {
            let mut st = lock(&d.state);
            while st.pending >= sh.max_pending && !conn.is_dead() {
                st =
                    d.cv.wait_timeout(st, POLL)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
            }
        }
        if conn.is_dead() {
            break;
        }
        match src.read(&mut buf) {
            Ok(0) => {
                if !conn.is_dead() {
                    let mut st = lock(&d.state);
                    st.queue.push_back(Item::Eof);
                    d.cv.notify_all();
                }
                break;
            }
            Ok(n) => {
                let mut st = lock(&d.state);
                st.queue
                    .push_back(Item::Data(Instant::now(), buf[..n].to_vec()));
                st.pending += n;
                sh.counters.pending.fetch_add(n as u64, Ordering::Relaxed);
                d.cv.notify_all();
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) => {
                conn.abort();
                break;
            }
        }
    }
    thread_done(sh, conn);
}

fn writer(sh: &Shared, conn: &Conn, dir: usize, mut dst: TcpStream) {
    let d = &conn.dirs[dir];
    let bytes = if dir == 0 {
        &sh.counters.bytes_up
    } else {
        &sh.counters.bytes_down
    };
    'outer: loop {
        // Wait until the head of the queue may go.
        let item = {
            let mut st = lock(&d.state);
            loop {
                if conn.is_dead() {
                    break 'outer;
                }
                let delay = match sh.fault() {
                    Fault::Pass => Duration::ZERO,
                    Fault::Latency(l) => l,
                    Fault::Stall => {
                        st =
                            d.cv.wait_timeout(st, POLL)
                                .unwrap_or_else(|e| e.into_inner())
                                .0;
                        continue;
                    }
                    Fault::Drop => {
                        drop(st);
                        if conn.abort() {
                            sh.counters.dropped.fetch_add(1, Ordering::Relaxed);
                        }
                        break 'outer;
                    }
                };
                let due = match st.queue.front() {
                    None => {
                        st =
                            d.cv.wait_timeout(st, POLL)
                                .unwrap_or_else(|e| e.into_inner())
                                .0;
                        continue;
                    }
                    Some(Item::Eof) => None,
                    Some(Item::Data(t, _)) => Some(*t + delay),
                };
                if let Some(due) = due {
                    let now = Instant::now();
                    if now < due {
                        st =
                            d.cv.wait_timeout(st, due - now)
                                .unwrap_or_else(|e| e.into_inner())
                                .0;
                        continue;
                    }
                }
                break st.queue.pop_front();
            }
        };
        match item {
            None => continue,
            Some(Item::Eof) => {
                let _ = dst.shutdown(Shutdown::Write);
                break;
            }
            Some(Item::Data(_, data)) => {
                let ok = write_all(conn, &mut dst, &data);
                {
                    let mut st = lock(&d.state);
                    st.pending = st.pending.saturating_sub(data.len());
                    d.cv.notify_all();
                }
                sh.counters
                    .pending
                    .fetch_sub(data.len() as u64, Ordering::Relaxed);
                if !ok {
                    conn.abort();
                    break;
                }
                bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
            }
        }
    }
    thread_done(sh, conn);
}

/// Writes everything unless the connection dies or the peer fails.
fn write_all(conn: &Conn, dst: &mut TcpStream, mut data: &[u8]) -> bool {
    while !data.is_empty() {
        if conn.is_dead() {
            return false;
        }
        match dst.write(data) {
            Ok(0) => return false,
            Ok(n) => data = &data[n..],
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn any() -> SocketAddr {
        (Ipv4Addr::LOCALHOST, 0).into()
    }

    /// An echo server; returns its address.
    fn echo_server() -> SocketAddr {
        let l = TcpListener::bind(any()).unwrap();
        let addr = l.local_addr().unwrap();
        thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { continue };
                thread::spawn(move || {
                    let mut r = match s.try_clone() {
                        Ok(r) => r,
                        Err(_) => return,
                    };
                    let _ = io::copy(&mut r, &mut s);
                    let _ = s.shutdown(Shutdown::Write);
                });
            }
        });
        addr
    }

    fn client(p: &Proxy) -> TcpStream {
        let s = TcpStream::connect(p.local_addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.set_nodelay(true).unwrap();
        s
    }

    fn round_trip(s: &mut TcpStream, msg: &[u8]) -> Vec<u8> {
        s.write_all(msg).unwrap();
        let mut got = vec![0u8; msg.len()];
        s.read_exact(&mut got).unwrap();
        got
    }

    /// True if the read returns EOF or an error (closed) within the timeout.
    fn closed_within(s: &mut TcpStream, t: Duration) -> bool {
        s.set_read_timeout(Some(t)).unwrap();
        let mut b = [0u8; 64];
        loop {
            match s.read(&mut b) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return false
                }
                Err(_) => return true,
            }
        }
    }

    fn wait_for(mut f: impl FnMut() -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if f() {
                return true;
            }
            thread::sleep(Duration::from_millis(5));
        }
        false
    }

    #[test]
    fn pass_through_echo() {
        let p = Proxy::start(any(), echo_server()).unwrap();
        assert_ne!(p.local_addr().port(), 0);
        let mut c = client(&p);
        assert_eq!(round_trip(&mut c, b"hello"), b"hello");
        // A larger transfer, written and read concurrently.
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let mut w = c.try_clone().unwrap();
        let d2 = data.clone();
        let t = thread::spawn(move || w.write_all(&d2).unwrap());
        let mut got = vec![0u8; data.len()];
        c.read_exact(&mut got).unwrap();
        t.join().unwrap();
        assert!(got == data);
        // Half-close propagates: EOF comes back after the echo.
        c.shutdown(Shutdown::Write).unwrap();
        assert!(closed_within(&mut c, Duration::from_secs(5)));
        let st = p.stats();
        assert_eq!(st.accepted, 1);
        assert_eq!(st.bytes_up, 5 + 3_000_000);
        assert_eq!(st.bytes_down, 5 + 3_000_000);
        assert!(wait_for(|| p.stats().open == 0), "{:?}", p.stats());
        assert_eq!(p.stats().pending, 0);
        p.stop();
    }

    #[test]
    fn latency_adds_at_least_the_delay() {
        let p = Proxy::start(any(), echo_server()).unwrap();
        let mut c = client(&p);
        round_trip(&mut c, b"warm");
        p.set(Fault::Latency(Duration::from_millis(150)));
        assert_eq!(p.fault(), Fault::Latency(Duration::from_millis(150)));
        let t = Instant::now();
        assert_eq!(round_trip(&mut c, b"x"), b"x");
        // Delayed in both directions.
        assert!(
            t.elapsed() >= Duration::from_millis(300),
            "{:?}",
            t.elapsed()
        );
        // Order is kept across several chunks.
        for i in 0..20u8 {
            c.write_all(&[i]).unwrap();
            thread::sleep(Duration::from_millis(2));
        }
        let mut got = [0u8; 20];
        c.read_exact(&mut got).unwrap();
        assert_eq!(got.to_vec(), (0..20u8).collect::<Vec<_>>());
        p.set(Fault::Pass);
        let t = Instant::now();
        round_trip(&mut c, b"y");
        assert!(
            t.elapsed() < Duration::from_millis(300),
            "{:?}",
            t.elapsed()
        );
    }

    #[test]
    fn stall_forwards_nothing_then_resumes() {
        let p = Proxy::start(any(), echo_server()).unwrap();
        let mut c = client(&p);
        round_trip(&mut c, b"before");
        p.set(Fault::Stall);
        c.write_all(b"during").unwrap();
        // A new connection during the stall is accepted but gets nothing.
        let mut c2 = client(&p);
        c2.write_all(b"new").unwrap();
        for s in [&mut c, &mut c2] {
            s.set_read_timeout(Some(Duration::from_millis(300)))
                .unwrap();
            let mut b = [0u8; 16];
            match s.read(&mut b) {
                Err(e) => assert!(matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut
                )),
                Ok(n) => panic!("stalled proxy forwarded {n} bytes"),
            }
        }
        let before = p.stats();
        assert_eq!(before.bytes_up, 6);
        assert_eq!(before.open, 2);
        p.set(Fault::Pass);
        for (s, msg) in [(&mut c, &b"during"[..]), (&mut c2, &b"new"[..])] {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut got = vec![0u8; msg.len()];
            s.read_exact(&mut got).unwrap();
            assert_eq!(got, msg);
        }
        assert_eq!(round_trip(&mut c, b"after"), b"after");
    }

    #[test]
    fn stall_buffers_a_bounded_amount() {
        let max = 64 * 1024;
        let p = Proxy::start_with_limits(any(), echo_server(), 8, max).unwrap();
        let mut c = client(&p);
        round_trip(&mut c, b"x");
        p.set(Fault::Stall);
        let total = 8 << 20;
        let mut w = c.try_clone().unwrap();
        let writer = thread::spawn(move || {
            let data = vec![7u8; total];
            w.write_all(&data).unwrap();
        });
        thread::sleep(Duration::from_millis(500));
        let st = p.stats();
        assert!(st.pending as usize <= max + CHUNK, "pending {}", st.pending);
        assert!(st.pending > 0);
        assert_eq!(st.bytes_up, 1);
        // Resume: everything arrives.
        p.set(Fault::Pass);
        let mut got = vec![0u8; total];
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.read_exact(&mut got).unwrap();
        writer.join().unwrap();
        assert!(got.iter().all(|b| *b == 7));
    }

    #[test]
    fn drop_closes_existing_and_new_connections() {
        let p = Proxy::start(any(), echo_server()).unwrap();
        let mut a = client(&p);
        let mut b = client(&p);
        round_trip(&mut a, b"a");
        round_trip(&mut b, b"b");
        let t = Instant::now();
        p.set(Fault::Drop);
        assert!(closed_within(&mut a, Duration::from_secs(2)));
        assert!(closed_within(&mut b, Duration::from_secs(2)));
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        // New connections are closed at once (the connect itself may succeed).
        if let Ok(mut n) = TcpStream::connect(p.local_addr()) {
            assert!(closed_within(&mut n, Duration::from_secs(2)));
        }
        assert!(wait_for(|| p.stats().open == 0));
        let st = p.stats();
        assert!(st.dropped >= 3, "{st:?}");
        // Back to pass: works again.
        p.set(Fault::Pass);
        let mut c = client(&p);
        assert_eq!(round_trip(&mut c, b"again"), b"again");
    }

    #[test]
    fn drop_during_stall_closes_waiting_connections() {
        let p = Proxy::start(any(), echo_server()).unwrap();
        p.set(Fault::Stall);
        let mut c = client(&p);
        assert!(wait_for(|| p.stats().open == 1));
        p.set(Fault::Drop);
        assert!(closed_within(&mut c, Duration::from_secs(2)));
        assert!(wait_for(|| p.stats().open == 0));
    }

    #[test]
    fn connection_limit() {
        let p = Proxy::start_with_limits(any(), echo_server(), 2, MAX_PENDING).unwrap();
        let mut a = client(&p);
        let mut b = client(&p);
        round_trip(&mut a, b"a");
        round_trip(&mut b, b"b");
        let mut c = client(&p);
        assert!(closed_within(&mut c, Duration::from_secs(2)));
        assert_eq!(p.stats().refused, 1);
        drop(a);
        assert!(wait_for(|| p.stats().open == 1));
        let mut d = client(&p);
        assert_eq!(round_trip(&mut d, b"d"), b"d");
    }

    #[test]
    fn upstream_down_closes_client() {
        // A port nobody listens on.
        let dead = TcpListener::bind(any()).unwrap().local_addr().unwrap();
        let p = Proxy::start(any(), dead).unwrap();
        let mut c = client(&p);
        assert!(closed_within(&mut c, Duration::from_secs(6)));
        assert!(wait_for(|| p.stats().upstream_failures == 1));
        assert!(wait_for(|| p.stats().open == 0));
    }

    #[test]
    fn script_runs_in_order() {
        let p = Proxy::start(any(), echo_server()).unwrap();
        let steps = parse_script("0ms:latency=50ms, 100ms:stall, 200ms:pass").unwrap();
        let h = p.run_script(steps);
        assert!(wait_for(
            || p.fault() == Fault::Latency(Duration::from_millis(50))
        ));
        assert!(wait_for(|| p.fault() == Fault::Stall));
        h.join().unwrap();
        assert_eq!(p.fault(), Fault::Pass);
        // Stopping ends a script that is still waiting.
        let h = p.run_script(parse_script("60s:drop").unwrap());
        let t = Instant::now();
        p.stop();
        h.join().unwrap();
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn stop_closes_connections() {
        let p = Proxy::start(any(), echo_server()).unwrap();
        let mut c = client(&p);
        round_trip(&mut c, b"x");
        let addr = p.local_addr();
        p.stop();
        assert!(closed_within(&mut c, Duration::from_secs(2)));
        // The listener is gone.
        assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err());
    }

    #[test]
    fn script_parses() {
        let s = parse_script("0s:pass,5s:latency=200ms,10s:stall,20s:drop,25s:pass").unwrap();
        assert_eq!(
            s,
            vec![
                Step {
                    at: Duration::ZERO,
                    fault: Fault::Pass
                },
                Step {
                    at: Duration::from_secs(5),
                    fault: Fault::Latency(Duration::from_millis(200))
                },
                Step {
                    at: Duration::from_secs(10),
                    fault: Fault::Stall
                },
                Step {
                    at: Duration::from_secs(20),
                    fault: Fault::Drop
                },
                Step {
                    at: Duration::from_secs(25),
                    fault: Fault::Pass
                },
            ]
        );
        let s = parse_script(" 1.5s : latency = 0.5s , 1500ms:PASS ").unwrap();
        assert_eq!(s[0].at, Duration::from_millis(1500));
        assert_eq!(s[0].fault, Fault::Latency(Duration::from_millis(500)));
        assert_eq!(s[1].fault, Fault::Pass);
        assert_eq!(
            Fault::Latency(Duration::from_millis(200)).to_string(),
            "latency=200ms"
        );
        assert_eq!(
            Fault::Latency(Duration::from_secs(2)).to_string(),
            "latency=2s"
        );
    }

    #[test]
    fn script_errors_are_clear() {
        let cases = [
            ("", "empty fault script"),
            ("5s:pass,", "step 2"),
            ("5s:pass,,6s:stall", "empty step"),
            ("5:pass", "needs a unit: ms or s"),
            ("5m:pass", "needs a unit"),
            ("5s", "expected TIME:FAULT"),
            ("0s:pass,5s:latncy=200ms", "unknown fault \"latncy=200ms\""),
            ("0s:latency", "latency needs a delay"),
            ("0s:latency=fast", "bad latency"),
            ("-1s:pass", "bad time"),
            ("10s:pass,5s:stall", "before the previous step"),
        ];
        for (input, want) in cases {
            let e = parse_script(input).unwrap_err();
            assert!(e.contains(want), "{input:?}: {e:?} lacks {want:?}");
        }
        let e = parse_script("0s:pass,5s:latncy=200ms").unwrap_err();
        assert!(
            e.starts_with("fault script step 2 (\"5s:latncy=200ms\")"),
            "{e}"
        );
        assert!(
            e.contains("expected pass, latency=DURATION, stall or drop"),
            "{e}"
        );
    }
}
