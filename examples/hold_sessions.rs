//! Opens and holds many gateway sessions from one process, for load tests.
//!
//! ```text
//! hold_sessions --gateway 127.0.0.1:PORT --token TOKEN --count 10000 \
//!     [--source 127.0.0.2] [--threads 2] [--window 128] [--intents 513] [--hold-secs N] [--stall-secs 30]
//!     [--shards N --first-index I]
//! ```
//!
//! Each session connects from `--source` (so several processes can spread over
//! 127.0.0.2, 127.0.0.3, ... and not run out of ephemeral ports), upgrades,
//! waits for Hello, identifies, waits for READY, then heartbeats on time until
//! stdin is closed (or `--hold-secs` pass, or a signal kills the process).
//! Sockets are nonblocking, driven by one epoll loop per thread; at most
//! `--window` sessions per thread are between connect and READY at a time; one
//! that is not READY `--stall-secs` after its connect counts as failed.
//!
//! Without `--shards` every session identifies as shard `[0, 1]`. The node
//! places all sessions of one (application, shard) on one worker, so a load
//! meant to spread over workers passes `--shards N`: session number `k`
//! (counted from `--first-index` across processes) identifies as `[k % N, N]`.
//!
//! Progress goes to stdout as `KEY N` lines (`opened`, `ready`, `failed`,
//! `lost`, `acks`), then `all_ready N MS` once every session is READY;
//! failure reasons (first few) go to stderr.

#[path = "../tests/ws_client/mod.rs"]
mod ws_client;

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use ws_client::{
    encode_frame, parse_close_payload, parse_frame, Rng, OP_CLOSE, OP_PING, OP_PONG, OP_TEXT,
};

#[derive(Clone)]
struct Args {
    gateway: SocketAddrV4,
    token: String,
    count: usize,
    source: Option<Ipv4Addr>,
    threads: usize,
    window: usize,
    intents: u64,
    hold_secs: Option<u64>,
    stall_secs: u64,
    shards: Option<u64>,
    first_index: usize,
}

fn parse_args() -> Args {
    let mut a = Args {
        gateway: "127.0.0.1:8080".parse().unwrap(),
        token: String::new(),
        count: 1000,
        source: None,
        threads: 2,
        window: 128,
        intents: 1 | (1 << 9),
        hold_secs: None,
        stall_secs: 30,
        shards: None,
        first_index: 0,
    };
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < argv.len() {
        let v = argv
            .get(i + 1)
            .cloned()
            .unwrap_or_else(|| usage(&format!("{} needs a value", argv[i])));
        match argv[i].as_str() {
            "--gateway" => a.gateway = v.parse().unwrap_or_else(|_| usage("bad --gateway")),
            "--token" => a.token = v,
            "--count" => a.count = v.parse().unwrap_or_else(|_| usage("bad --count")),
            "--source" => a.source = Some(v.parse().unwrap_or_else(|_| usage("bad --source"))),
            "--threads" => a.threads = v.parse().unwrap_or_else(|_| usage("bad --threads")),
            "--window" => a.window = v.parse().unwrap_or_else(|_| usage("bad --window")),
            "--intents" => a.intents = v.parse().unwrap_or_else(|_| usage("bad --intents")),
            "--shards" => a.shards = Some(v.parse().unwrap_or_else(|_| usage("bad --shards"))),
            "--first-index" => {
                a.first_index = v.parse().unwrap_or_else(|_| usage("bad --first-index"))
            }
            "--stall-secs" => {
                a.stall_secs = v.parse().unwrap_or_else(|_| usage("bad --stall-secs"))
            }
            "--hold-secs" => {
                a.hold_secs = Some(v.parse().unwrap_or_else(|_| usage("bad --hold-secs")))
            }
            other => usage(&format!("unknown argument {other}")),
        }
        i += 2;
    }
    if a.token.is_empty() {
        usage("--token is required");
    }
    a.threads = a.threads.max(1);
    a.window = a.window.max(1);
    a
}

fn usage(msg: &str) -> ! {
    eprintln!("hold_sessions: {msg}\nusage: hold_sessions --gateway ADDR --token T --count N [--source IP] [--threads N] [--window N] [--intents N] [--hold-secs N] [--stall-secs N] [--shards N --first-index I]");
    std::process::exit(2)
}

#[derive(Default)]
struct Counters {
    opened: AtomicUsize,
    ready: AtomicUsize,
    failed: AtomicUsize,
    lost: AtomicUsize,
    acks: AtomicUsize,
    reasons: Mutex<Vec<String>>,
}

impl Counters {
    fn fail(&self, what: String) {
        self.failed.fetch_add(1, Ordering::SeqCst);
        self.note(what);
    }
    fn note(&self, what: String) {
        let mut r = self.reasons.lock().unwrap();
        if r.len() < 20 {
            eprintln!("hold_sessions: {what}");
            r.push(what);
        }
    }
}

#[derive(PartialEq, Eq, Clone, Copy, Debug)]
enum St {
    Connecting,
    Handshake,
    Hello,
    Identifying,
    Ready,
    Done,
}

struct Conn {
    sock: TcpStream,
    st: St,
    key: String,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
    hb: Duration,
    next_hb: Option<Instant>,
    seq: Option<u64>,
    born: Instant,
}

fn new_socket(src: Option<Ipv4Addr>, dst: SocketAddrV4) -> io::Result<TcpStream> {
    // SAFETY: a new socket from socket(2), set up with pointers to locals that outlive each call, then owned by the returned TcpStream (from_raw_fd) exactly once.
    unsafe {
        let fd = libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        );
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let sock = TcpStream::from_raw_fd(fd);
        let one: libc::c_int = 1;
        let sz = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            &one as *const _ as *const libc::c_void,
            sz,
        );
        if let Some(ip) = src {
            libc::setsockopt(
                fd,
                libc::IPPROTO_IP,
                libc::IP_BIND_ADDRESS_NO_PORT,
                &one as *const _ as *const libc::c_void,
                sz,
            );
            let sa = sockaddr(SocketAddrV4::new(ip, 0));
            if libc::bind(
                fd,
                &sa as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
        }
        let sa = sockaddr(dst);
        if libc::connect(
            fd,
            &sa as *const _ as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        ) != 0
        {
            let e = io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINPROGRESS) {
                return Err(e);
            }
        }
        Ok(sock)
    }
}

fn sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    // SAFETY: sockaddr_in is a plain C struct for which all-zero bytes are a valid value.
    let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    sa.sin_family = libc::AF_INET as libc::sa_family_t;
    sa.sin_port = a.port().to_be();
    sa.sin_addr = libc::in_addr {
        s_addr: u32::from_ne_bytes(a.ip().octets()),
    };
    sa
}

fn so_error(sock: &TcpStream) -> i32 {
    let mut err: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `err`, on a socket `sock` keeps open.
    unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            &mut err as *mut _ as *mut libc::c_void,
            &mut len,
        );
    }
    err
}

struct Worker {
    id: usize,
    args: Args,
    ep: i32,
    conns: Vec<Conn>,
    rng: Rng,
    c: Arc<Counters>,
    in_flight: usize,
    started: usize,
    /// Global number of this thread's first session.
    base: usize,
}

impl Worker {
    fn start_one(&mut self) {
        self.started += 1;
        let idx = self.conns.len();
        match new_socket(self.args.source, self.args.gateway) {
            Ok(sock) => {
                let mut ev = libc::epoll_event {
                    events: (libc::EPOLLIN | libc::EPOLLOUT | libc::EPOLLRDHUP | libc::EPOLLET)
                        as u32,
                    u64: idx as u64,
                };
                // SAFETY: `self.ep` is our epoll fd, the socket is open and `ev` lives across the call.
                let r = unsafe {
                    libc::epoll_ctl(self.ep, libc::EPOLL_CTL_ADD, sock.as_raw_fd(), &mut ev)
                };
                assert_eq!(r, 0, "epoll_ctl: {}", io::Error::last_os_error());
                let key = self.rng.key();
                self.conns.push(Conn {
                    sock,
                    st: St::Connecting,
                    key,
                    rbuf: Vec::new(),
                    wbuf: Vec::new(),
                    hb: Duration::from_secs(41),
                    next_hb: None,
                    seq: None,
                    born: Instant::now(),
                });
                self.in_flight += 1;
            }
            Err(e) => self.c.fail(format!(
                "thread {} conn {idx}: socket/connect: {e}",
                self.id
            )),
        }
    }

    fn end(&mut self, idx: usize, why: String) {
        let conn = &mut self.conns[idx];
        let was = conn.st;
        conn.st = St::Done;
        conn.rbuf = Vec::new();
        conn.wbuf = Vec::new();
        let _ = conn.sock.shutdown(std::net::Shutdown::Both);
        if was == St::Ready {
            self.c.lost.fetch_add(1, Ordering::SeqCst);
            self.c.note(format!(
                "thread {} conn {idx} lost after READY: {why}",
                self.id
            ));
        } else {
            self.in_flight -= 1;
            self.c.fail(format!(
                "thread {} conn {idx} failed in state {was:?}: {why}",
                self.id
            ));
        }
    }

    fn send_text(&mut self, idx: usize, text: &str) {
        let mask = self.rng.mask();
        let frame = encode_frame(OP_TEXT, true, Some(mask), text.as_bytes());
        self.conns[idx].wbuf.extend_from_slice(&frame);
    }

    fn flush(&mut self, idx: usize) -> Result<(), String> {
        let conn = &mut self.conns[idx];
        while !conn.wbuf.is_empty() {
            match conn.sock.write(&conn.wbuf) {
                Ok(0) => return Err("write returned 0".into()),
                Ok(n) => {
                    conn.wbuf.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("write: {e}")),
            }
        }
        Ok(())
    }

    fn on_event(&mut self, idx: usize, events: u32) {
        if self.conns[idx].st == St::Done {
            return;
        }
        if self.conns[idx].st == St::Connecting {
            if events & (libc::EPOLLOUT | libc::EPOLLERR | libc::EPOLLHUP) as u32 == 0 {
                return;
            }
            let err = so_error(&self.conns[idx].sock);
            if err != 0 {
                return self.end(
                    idx,
                    format!("connect: {}", io::Error::from_raw_os_error(err)),
                );
            }
            let req = ws_client::handshake_request(
                &self.args.gateway.to_string(),
                "/?v=10&encoding=json",
                &self.conns[idx].key,
                &[],
            );
            self.conns[idx].wbuf.extend_from_slice(req.as_bytes());
            self.conns[idx].st = St::Handshake;
        }
        // Read everything available (edge-triggered).
        let mut tmp = [0u8; 16384];
        let mut eof = false;
        loop {
            match self.conns[idx].sock.read(&mut tmp) {
                Ok(0) => {
                    eof = true;
                    break;
                }
                Ok(n) => self.conns[idx].rbuf.extend_from_slice(&tmp[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return self.end(idx, format!("read: {e}")),
            }
        }
        if let Err(e) = self.process(idx) {
            return self.end(idx, e);
        }
        if self.conns[idx].st == St::Done {
            return;
        }
        if let Err(e) = self.flush(idx) {
            return self.end(idx, e);
        }
        if eof {
            self.end(idx, "EOF from server".into());
        }
    }

    fn process(&mut self, idx: usize) -> Result<(), String> {
        if self.conns[idx].st == St::Handshake {
            let Some(end) = ws_client::head_end(&self.conns[idx].rbuf) else {
                return Ok(());
            };
            let head = String::from_utf8_lossy(&self.conns[idx].rbuf[..end]).into_owned();
            ws_client::check_handshake_response(&head, &self.conns[idx].key)?;
            self.conns[idx].rbuf.drain(..end);
            self.conns[idx].st = St::Hello;
            self.c.opened.fetch_add(1, Ordering::SeqCst);
        }
        loop {
            let parsed = parse_frame(&self.conns[idx].rbuf)?;
            let Some((frame, used)) = parsed else { break };
            self.conns[idx].rbuf.drain(..used);
            match frame.opcode {
                OP_CLOSE => {
                    let (code, reason) = parse_close_payload(&frame.payload);
                    return Err(format!("server Close {code:?} {reason:?}"));
                }
                OP_PING => {
                    let mask = self.rng.mask();
                    let f = encode_frame(OP_PONG, true, Some(mask), &frame.payload);
                    self.conns[idx].wbuf.extend_from_slice(&f);
                }
                OP_PONG => {}
                OP_TEXT if frame.fin => self.on_json(idx, &frame.payload)?,
                op => return Err(format!("unexpected frame opcode {op:#x} fin {}", frame.fin)),
            }
            if self.conns[idx].st == St::Done {
                break;
            }
        }
        if self.conns[idx].st == St::Ready
            && self.conns[idx].rbuf.capacity() > 4096
            && self.conns[idx].rbuf.is_empty()
        {
            self.conns[idx].rbuf = Vec::new();
        }
        Ok(())
    }

    fn on_json(&mut self, idx: usize, payload: &[u8]) -> Result<(), String> {
        let v: Value =
            serde_json::from_slice(payload).map_err(|e| format!("bad JSON from server: {e}"))?;
        if let Some(s) = v["s"].as_u64() {
            self.conns[idx].seq = Some(s);
        }
        let op = v["op"].as_u64().unwrap_or(u64::MAX);
        match (self.conns[idx].st, op) {
            (St::Hello, 10) => {
                let hb = v["d"]["heartbeat_interval"]
                    .as_u64()
                    .ok_or("Hello without heartbeat_interval")?;
                self.conns[idx].hb = Duration::from_millis(hb);
                let shard = self
                    .args
                    .shards
                    .map(|n| [((self.base + idx) as u64) % n, n]);
                let ident = ws_client::identify_payload(&self.args.token, self.args.intents, shard);
                self.send_text(idx, &ident.to_string());
                self.conns[idx].st = St::Identifying;
            }
            (St::Identifying, 0) if v["t"] == "READY" => {
                let conn = &mut self.conns[idx];
                conn.st = St::Ready;
                // First heartbeat at a random point in the first interval, like real clients.
                let jitter = (self.rng.next_u64() % 1000) as u32;
                conn.next_hb = Some(Instant::now() + conn.hb * jitter / 1000);
                self.in_flight -= 1;
                self.c.ready.fetch_add(1, Ordering::SeqCst);
            }
            (_, 9) => {
                return Err(format!(
                    "Invalid Session (op 9) d={} in state {:?}",
                    v["d"], self.conns[idx].st
                ))
            }
            (_, 1) => {
                let d = self.conns[idx].seq.map(Value::from).unwrap_or(Value::Null);
                self.send_text(idx, &json!({"op": 1, "d": d}).to_string());
            }
            (_, 11) => {
                self.c.acks.fetch_add(1, Ordering::Relaxed);
            }
            (_, 7) => return Err("server asked to reconnect (op 7)".into()),
            (_, 0) => {}
            (st, op) => return Err(format!("unexpected op {op} in state {st:?}: {v}")),
        }
        Ok(())
    }

    fn heartbeats(&mut self) {
        let now = Instant::now();
        let stall = Duration::from_secs(self.args.stall_secs);
        for idx in 0..self.conns.len() {
            let st = self.conns[idx].st;
            if st != St::Ready && st != St::Done && now.duration_since(self.conns[idx].born) > stall
            {
                self.end(
                    idx,
                    format!("no READY within {stall:?} of connect (stuck in state {st:?})"),
                );
                continue;
            }
            let due = matches!(self.conns[idx].next_hb, Some(t) if t <= now)
                && self.conns[idx].st == St::Ready;
            if due {
                let d = self.conns[idx].seq.map(Value::from).unwrap_or(Value::Null);
                self.send_text(idx, &json!({"op": 1, "d": d}).to_string());
                let hb = self.conns[idx].hb;
                self.conns[idx].next_hb = Some(now + hb);
                if let Err(e) = self.flush(idx) {
                    self.end(idx, e);
                }
            }
        }
    }
}

fn run_worker(
    id: usize,
    base: usize,
    n: usize,
    args: Args,
    c: Arc<Counters>,
    stop: Arc<AtomicBool>,
) {
    // SAFETY: epoll_create1 takes no pointers; the result is checked.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(ep >= 0, "epoll_create1: {}", io::Error::last_os_error());
    let mut w = Worker {
        id,
        args,
        ep,
        conns: Vec::with_capacity(n),
        rng: Rng::new(),
        c,
        in_flight: 0,
        started: 0,
        base,
    };
    // Decorrelate the generators of the threads.
    for _ in 0..id * 7 + 1 {
        w.rng.next_u64();
    }
    let mut events: Vec<libc::epoll_event> = vec![libc::epoll_event { events: 0, u64: 0 }; 1024];
    let mut next_scan = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        while w.started < n && w.in_flight < w.args.window {
            w.start_one();
        }
        // SAFETY: epoll_wait writes at most `events.len()` entries into the vector it is given.
        let got = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), events.len() as i32, 50) };
        if got < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            panic!("epoll_wait: {e}");
        }
        for ev in &events[..got as usize] {
            let (idx, flags) = (ev.u64 as usize, ev.events);
            w.on_event(idx, flags);
        }
        if Instant::now() >= next_scan {
            w.heartbeats();
            next_scan = Instant::now() + Duration::from_millis(250);
        }
    }
    // SAFETY: closes our own epoll fd, once; nothing uses it after.
    unsafe { libc::close(ep) };
    drop(w);
}

fn main() {
    let args = parse_args();
    let c = Arc::new(Counters::default());
    let stop = Arc::new(AtomicBool::new(false));
    {
        // Stop when stdin is closed.
        let stop = stop.clone();
        thread::spawn(move || {
            let mut sink = [0u8; 256];
            let mut stdin = io::stdin();
            while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
            stop.store(true, Ordering::SeqCst);
        });
    }
    let t0 = Instant::now();
    let mut handles = Vec::new();
    let mut base = args.first_index;
    for t in 0..args.threads {
        let n = args.count / args.threads + usize::from(t < args.count % args.threads);
        let (a, c, s) = (args.clone(), c.clone(), stop.clone());
        handles.push(
            thread::Builder::new()
                .name(format!("hold-{t}"))
                .spawn(move || run_worker(t, base, n, a, c, s))
                .unwrap(),
        );
        base += n;
    }
    let mut last = [usize::MAX; 5];
    let mut all_ready_printed = false;
    let out = io::stdout();
    loop {
        let now = [
            c.opened.load(Ordering::SeqCst),
            c.ready.load(Ordering::SeqCst),
            c.failed.load(Ordering::SeqCst),
            c.lost.load(Ordering::SeqCst),
            c.acks.load(Ordering::SeqCst),
        ];
        {
            let mut o = out.lock();
            for (i, key) in ["opened", "ready", "failed", "lost", "acks"]
                .iter()
                .enumerate()
            {
                if now[i] != last[i] {
                    let _ = writeln!(o, "{key} {}", now[i]);
                }
            }
            if !all_ready_printed && now[1] == args.count {
                let _ = writeln!(o, "all_ready {} {}", now[1], t0.elapsed().as_millis());
                all_ready_printed = true;
            }
            let _ = o.flush();
        }
        last = now;
        if stop.load(Ordering::SeqCst) {
            break;
        }
        if args
            .hold_secs
            .is_some_and(|s| t0.elapsed() >= Duration::from_secs(s))
        {
            stop.store(true, Ordering::SeqCst);
            break;
        }
        thread::sleep(Duration::from_millis(200));
    }
    for h in handles {
        let _ = h.join();
    }
    let _ = writeln!(io::stdout(), "stopped");
}
