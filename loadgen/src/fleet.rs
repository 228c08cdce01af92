//! The bot fleet: N sessions over real WebSockets from one process, every
//! socket an io_uring direct descriptor (Socket + Bind + Connect on fixed
//! slots, never in the fd table), so one process holds more sessions than
//! RLIMIT_NOFILE allows. One thread per ring; a ring's fixed table is capped
//! by the soft RLIMIT_NOFILE, so 40,000 sessions take three rings here.
//!
//! Each thread owns its sessions outright (slot index == session index in
//! the thread) and shares only counters and histograms with the rest.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use hdrhistogram::Histogram;
use net::uring::{cap_fixed_files, Completion, Ring, RingConfig};

use crate::clock::now_ns;
use crate::servers::ServerSet;
use crate::session::{Action, Counters, Phase, Recorder, Session};
use crate::world::World;

#[derive(Clone, Debug)]
pub struct FleetConfig {
    /// Gateway addresses; sessions start on `nodes[start_node]` (or spread
    /// over all with `spread`) and move to the next one when a connect fails.
    pub nodes: Vec<SocketAddrV4>,
    pub spread: bool,
    /// Source addresses to bind, round robin (each gives ~28,000 ports).
    pub sources: Vec<Ipv4Addr>,
    /// Threads (rings); 0: enough for the fixed-table limit, at least 2.
    pub threads: usize,
    /// Sessions per thread between connect and READY at a time.
    pub window: usize,
    /// The same bound for sessions that reconnect to Resume (default: the
    /// same as `window`). Real bots resume on their own, at once, after
    /// op 7; a fleet that queues them behind a window measures itself.
    pub resume_window: usize,
    /// A handshake not done in this long is abandoned and retried.
    pub handshake_timeout: Duration,
    /// Paced readers: (bot, MESSAGE_CREATE per second it reads).
    pub slow: Vec<(u32, f64)>,
    /// Fleet coordinator (`loadgen coordinator`): every Identify waits for
    /// its `identify_acquire` grant (keyed by application).
    pub coordinator: Option<std::net::SocketAddr>,
    /// The sessions to open as (bot, shard); None: every shard of every
    /// bot of the world once. A bot may appear more than once (several
    /// sessions on one token, as against a node loadgen did not provision).
    pub sessions: Option<Vec<(u32, u32)>>,
    /// The first `stall` sessions stop reading once streaming (they still
    /// heartbeat): what unread events cost the node.
    pub stall: usize,
    /// SO_RCVBUF of the stalled sessions' sockets, set before connect (None:
    /// the kernel's default, autotuned; loopback buffers then absorb a lot).
    pub stall_rcvbuf: Option<i32>,
    /// Heartbeats carry the last `s` (false: `null`, acknowledging nothing).
    pub ack_seq: bool,
    /// Identify says `shard` (false: left out, as one-shard bots often do).
    pub send_shard: bool,
    /// Sessions reconnect after a loss (false: they stop, counted in
    /// `Counters::lost` / `failed`: what a measurement wants to see).
    pub reconnect: bool,
    /// Every GUILD_CREATE read is parsed into `Shared::servers` (the
    /// many-servers workload of `measure fanout --servers`).
    pub collect_servers: bool,
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            nodes: Vec::new(),
            spread: false,
            sources: Vec::new(),
            threads: 0,
            window: 256,
            resume_window: 256,
            handshake_timeout: Duration::from_secs(30),
            slow: Vec::new(),
            coordinator: None,
            sessions: None,
            stall: 0,
            stall_rcvbuf: None,
            ack_seq: true,
            send_shard: true,
            reconnect: true,
            collect_servers: false,
        }
    }
}

/// Source addresses from `base` on, one per `per_source` sessions
/// (`base`, `base`+1, ...): each address has ~28,000 ports.
pub fn spread_sources(base: Ipv4Addr, sessions: usize, per_source: usize) -> Vec<Ipv4Addr> {
    let n = sessions.div_ceil(per_source.max(1)).max(1);
    (0..n as u32)
        .map(|i| Ipv4Addr::from(u32::from(base).wrapping_add(i)))
        .collect()
}

/// What all threads share.
pub struct Shared {
    pub world: Arc<World>,
    pub stop: AtomicBool,
    pub measuring: AtomicBool,
    /// Per thread: sessions streaming / in a handshake / idle, last tick.
    pub streaming: Vec<AtomicU64>,
    pub handshaking: Vec<AtomicU64>,
    pub stopped: Vec<AtomicU64>,
    totals: Mutex<Counters>,
    /// Histogram hand-in: bump `collect`, each thread adds its histograms
    /// into `collected` and bumps `collected_n`.
    collect: AtomicU64,
    collected_n: AtomicU64,
    collected: Mutex<(Histogram<u64>, Histogram<u64>)>,
    pub watch: Mutex<Option<(u32, u32)>>,
    pub watch_last_ns: AtomicU64,
    pub watch_count: AtomicU64,
    pub latency_exclude_bot: Mutex<Option<u32>>,
    pub latency_only_bots: Mutex<Option<Arc<Vec<bool>>>>,
    pub first_violation: Mutex<Option<String>>,
    /// First time (process clock, ns) a paced reader lost its connection,
    /// and the close code it had read by then (0: none; the close frame was
    /// still behind unread data).
    pub slow_lost_ns: AtomicU64,
    pub slow_lost_code: AtomicU64,
    /// The first GUILD_CREATE's (server id, `#general` channel id).
    pub guild: Mutex<Option<(u64, u64)>>,
    /// With `FleetConfig::collect_servers`: every server seen in a
    /// GUILD_CREATE, its `#general` and its reading sessions (bounded).
    pub servers: Mutex<ServerSet>,
    /// Non-zero: every thread sends a Close with this code on each open
    /// session and retires it; `closed_n` counts the threads done.
    close_code: AtomicU64,
    closed_n: AtomicU64,
    pub sessions: usize,
    pub threads: usize,
}

pub struct Fleet {
    pub shared: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
}

impl Fleet {
    /// Starts the threads; sessions begin connecting at once.
    pub fn start(world: Arc<World>, cfg: FleetConfig) -> std::io::Result<Fleet> {
        if cfg.nodes.is_empty() {
            return Err(std::io::Error::other("no gateway address"));
        }
        let all = cfg.sessions.clone().unwrap_or_else(|| world.sessions());
        if let Some(&(b, _)) = all.iter().find(|(b, _)| *b as usize >= world.bots.len()) {
            return Err(std::io::Error::other(format!(
                "session of bot {b}: no such bot"
            )));
        }
        let per_ring = cap_fixed_files(20_000).saturating_sub(64).max(64) as usize;
        let threads = if cfg.threads > 0 {
            cfg.threads
        } else {
            all.len().div_ceil(per_ring).max(2)
        };
        if all.len().div_ceil(threads) > per_ring {
            return Err(std::io::Error::other(format!(
                "{} sessions over {threads} rings is more than {per_ring} per ring \
                 (the fixed table is capped by RLIMIT_NOFILE); use more threads",
                all.len()
            )));
        }
        let mk = |n: usize| (0..n).map(|_| AtomicU64::new(0)).collect::<Vec<_>>();
        let hist = || Histogram::new_with_bounds(1, 3_600_000_000, 3).unwrap();
        let shared = Arc::new(Shared {
            world: world.clone(),
            stop: AtomicBool::new(false),
            measuring: AtomicBool::new(false),
            streaming: mk(threads),
            handshaking: mk(threads),
            stopped: mk(threads),
            totals: Mutex::new(Counters::default()),
            collect: AtomicU64::new(0),
            collected_n: AtomicU64::new(0),
            collected: Mutex::new((hist(), hist())),
            watch: Mutex::new(None),
            watch_last_ns: AtomicU64::new(0),
            watch_count: AtomicU64::new(0),
            latency_exclude_bot: Mutex::new(None),
            latency_only_bots: Mutex::new(None),
            first_violation: Mutex::new(None),
            slow_lost_ns: AtomicU64::new(0),
            slow_lost_code: AtomicU64::new(0),
            guild: Mutex::new(None),
            servers: Mutex::new(ServerSet::default()),
            close_code: AtomicU64::new(0),
            closed_n: AtomicU64::new(0),
            sessions: all.len(),
            threads,
        });
        let mut parts: Vec<Vec<(u32, u32, usize)>> = vec![Vec::new(); threads];
        for (k, &(b, sh)) in all.iter().enumerate() {
            parts[k % threads].push((b, sh, k));
        }
        let gate = match cfg.coordinator {
            Some(addr) => Some(crate::gate::Gate::start(addr, 32, threads)?),
            None => None,
        };
        let mut handles = Vec::new();
        for (t, part) in parts.into_iter().enumerate() {
            let (sh, cfg, gate) = (shared.clone(), cfg.clone(), gate.clone());
            let ring = Ring::new(&RingConfig {
                sq_entries: 4096,
                cq_entries: 32768,
                fixed_files: (part.len() as u32 + 8).min(per_ring as u32 + 64),
                recv_buffers: 4096,
                recv_buffer_size: 4096,
            })?;
            handles.push(
                std::thread::Builder::new()
                    .name(format!("fleet-{t}"))
                    .spawn(move || Driver::new(t, ring, part, cfg, sh, gate).run())?,
            );
        }
        Ok(Fleet { shared, handles })
    }

    pub fn streaming(&self) -> u64 {
        self.shared.streaming.iter().map(|a| a.load(Relaxed)).sum()
    }
    pub fn handshaking(&self) -> u64 {
        self.shared
            .handshaking
            .iter()
            .map(|a| a.load(Relaxed))
            .sum()
    }
    pub fn stopped(&self) -> u64 {
        self.shared.stopped.iter().map(|a| a.load(Relaxed)).sum()
    }

    /// Counters summed over threads (as of their last tick, <= 50 ms old).
    pub fn counters(&self) -> Counters {
        self.shared.totals.lock().unwrap().clone()
    }

    pub fn set_measuring(&self, on: bool) {
        self.shared.measuring.store(on, Relaxed);
    }

    /// Everything recorded since the last call: (latency, recovery), in us.
    pub fn take_histograms(&self) -> (Histogram<u64>, Histogram<u64>) {
        let before = self.shared.collected_n.load(Relaxed);
        self.shared.collect.fetch_add(1, Relaxed);
        let want = before + self.shared.threads as u64;
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while self.shared.collected_n.load(Relaxed) < want && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut g = self.shared.collected.lock().unwrap();
        let out = (g.0.clone(), g.1.clone());
        g.0.reset();
        g.1.reset();
        out
    }

    /// Waits until `n` sessions stream, or `timeout`; returns the count.
    pub fn wait_streaming(&self, n: u64, timeout: Duration, mut progress: impl FnMut(u64)) -> u64 {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let s = self.streaming();
            progress(s);
            if s >= n || std::time::Instant::now() >= deadline {
                return s;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sends a Close with `code` on every open session (1000 ends a
    /// session on the node instead of leaving it resumable), gives the
    /// frames `linger` to go out, then stops.
    pub fn stop_closing(self, code: u16, linger: Duration) -> Counters {
        self.shared.close_code.store(code.max(1) as u64, Relaxed);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while self.shared.closed_n.load(Relaxed) < self.shared.threads as u64
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(linger);
        self.stop()
    }

    pub fn stop(self) -> Counters {
        self.shared.stop.store(true, Relaxed);
        for h in self.handles {
            let _ = h.join();
        }
        let c = self.shared.totals.lock().unwrap().clone();
        c
    }
}

const K_SOCKET: u64 = 1;
const K_BIND: u64 = 2;
const K_CONNECT: u64 = 3;
const K_SEND: u64 = 4;
const K_RECV: u64 = 5;
const K_RECV1: u64 = 6;
const K_SHUT: u64 = 7;
const K_CLOSE: u64 = 8;
const K_TICK: u64 = 9;
const K_SOCKOPT: u64 = 10;

fn ud(kind: u64, gen: u32, idx: usize) -> u64 {
    kind << 56 | ((gen as u64) & 0xff_ffff) << 32 | idx as u64
}
fn ud_parts(u: u64) -> (u64, u32, usize) {
    (
        u >> 56,
        ((u >> 32) & 0xff_ffff) as u32,
        (u & 0xffff_ffff) as usize,
    )
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Sock {
    /// Slot free.
    None,
    /// Socket/bind/connect chain in flight.
    Opening,
    Open,
    /// Shutdown + close in flight: the slot is not reusable yet.
    Closing,
}

struct Slot {
    s: Session,
    gen: u32,
    sock: Sock,
    bind: libc::sockaddr_in,
    dst: libc::sockaddr_in,
    send_buf: Vec<u8>,
    send_off: usize,
    sending: bool,
    recv_armed: bool,
    /// Own receive buffer of a paced reader.
    slow_buf: Option<Box<[u8]>>,
    phase_since: u64,
    /// SO_RCVBUF set before connect (the kernel reads it from here).
    rcvbuf: Option<i32>,
}

fn sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as u16,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

struct Driver {
    t: usize,
    ring: Ring,
    /// Boxed so the addresses given to the kernel never move.
    slots: Box<[Slot]>,
    cfg: FleetConfig,
    sh: Arc<Shared>,
    rec: Recorder,
    hosts: Vec<String>,
    collect_seen: u64,
    reported_socket_error: bool,
    reported_refusal: bool,
    gate: Option<Arc<crate::gate::Gate>>,
    scratch: Vec<u8>,
    closed_all: bool,
}

impl Driver {
    fn new(
        t: usize,
        ring: Ring,
        part: Vec<(u32, u32, usize)>,
        cfg: FleetConfig,
        sh: Arc<Shared>,
        gate: Option<Arc<crate::gate::Gate>>,
    ) -> Driver {
        let world = &sh.world;
        let slots: Vec<Slot> = part
            .iter()
            .map(|&(b, shard, k)| {
                let mut s = Session::new(
                    b,
                    shard,
                    world.bots[b as usize].shards,
                    0x9e37_79b9 ^ (k as u64) << 17,
                );
                s.node = if cfg.spread { k % cfg.nodes.len() } else { 0 };
                s.read_rate = cfg.slow.iter().find(|(sb, _)| *sb == b).map(|&(_, r)| r);
                let stalled = k < cfg.stall;
                if stalled {
                    s.read_rate = Some(0.0);
                }
                s.gated = gate.is_some();
                s.ack_seq = cfg.ack_seq;
                s.send_shard = cfg.send_shard;
                s.reconnect = cfg.reconnect;
                let src = if cfg.sources.is_empty() {
                    Ipv4Addr::UNSPECIFIED
                } else {
                    cfg.sources[k % cfg.sources.len()]
                };
                Slot {
                    slow_buf: s.read_rate.map(|_| vec![0u8; 1024].into_boxed_slice()),
                    s,
                    gen: 0,
                    sock: Sock::None,
                    bind: sockaddr(SocketAddrV4::new(src, 0)),
                    dst: sockaddr(cfg.nodes[0]),
                    send_buf: Vec::new(),
                    send_off: 0,
                    sending: false,
                    recv_armed: false,
                    phase_since: 0,
                    rcvbuf: cfg.stall_rcvbuf.filter(|_| stalled),
                }
            })
            .collect();
        let hosts = cfg.nodes.iter().map(|a| a.to_string()).collect();
        let collect_guilds = cfg.collect_servers;
        Driver {
            t,
            ring,
            slots: slots.into_boxed_slice(),
            cfg,
            sh,
            rec: Recorder {
                collect_guilds,
                ..Recorder::new()
            },
            hosts,
            collect_seen: 0,
            reported_socket_error: false,
            reported_refusal: false,
            gate,
            scratch: Vec::with_capacity(4096),
            closed_all: false,
        }
    }

    fn run(mut self) {
        self.ring.tick(Duration::from_millis(20), ud(K_TICK, 0, 0));
        let mut cqes: Vec<Completion> = Vec::with_capacity(8192);
        self.on_tick();
        while !self.sh.stop.load(Relaxed) {
            if let Err(e) = self.ring.submit_and_wait(1) {
                if e.raw_os_error() != Some(libc::EINTR) && e.raw_os_error() != Some(libc::EBUSY) {
                    eprintln!("loadgen: fleet thread {}: ring: {e}", self.t);
                    break;
                }
            }
            loop {
                cqes.clear();
                if self.ring.drain(&mut cqes) == 0 {
                    break;
                }
                for c in &cqes {
                    self.on_completion(*c);
                }
            }
        }
        self.flush_counters();
        // Dropping the ring closes every fixed socket.
    }

    fn on_completion(&mut self, c: Completion) {
        let (kind, gen, i) = ud_parts(c.user_data);
        if kind == K_TICK {
            self.on_tick();
            return;
        }
        let now = now_ns();
        if kind == K_RECV {
            let current = i < self.slots.len() && self.slots[i].gen & 0xff_ffff == gen;
            if let Some(bid) = c.buffer_id() {
                if current && c.result > 0 && self.slots[i].sock == Sock::Open {
                    let n = c.result as usize;
                    // Copy out (into a reused scratch buffer) so the
                    // provided buffer goes back before parsing.
                    let mut data = std::mem::take(&mut self.scratch);
                    data.clear();
                    data.extend_from_slice(self.ring.buffer(bid, n));
                    self.ring.recycle(bid);
                    self.feed(i, &data, now);
                    self.scratch = data;
                } else {
                    self.ring.recycle(bid);
                }
            }
            if !current || self.slots[i].sock != Sock::Open {
                return;
            }
            if !c.more() {
                self.slots[i].recv_armed = false;
                // EOF, or an error other than running out of buffers: gone.
                if c.result == 0 || (c.result < 0 && c.result != -libc::ENOBUFS) {
                    self.close(i, now, false);
                } else {
                    self.arm_recv(i);
                }
            }
            return;
        }
        if i >= self.slots.len() {
            return;
        }
        if kind == K_CLOSE {
            if self.slots[i].gen & 0xff_ffff == gen && self.slots[i].sock == Sock::Closing {
                self.slots[i].sock = Sock::None;
            }
            return;
        }
        if self.slots[i].gen & 0xff_ffff != gen {
            return; // an operation of an earlier connection
        }
        match kind {
            K_SOCKET | K_BIND | K_SOCKOPT
                if c.result < 0 && c.result != -libc::ECANCELED && !self.reported_socket_error =>
            {
                // Reported once per thread; the connect completes with -ECANCELED.
                self.reported_socket_error = true;
                let what = match kind {
                    K_SOCKET => "socket",
                    K_BIND => "bind",
                    _ => "setsockopt(SO_RCVBUF)",
                };
                let e = std::io::Error::from_raw_os_error(-c.result);
                eprintln!("loadgen: fleet thread {}: {what} failed: {e}", self.t);
            }
            K_CONNECT => {
                if c.result < 0 {
                    self.close(i, now, true);
                } else if self.slots[i].s.phase == Phase::Stopped {
                    // Retired while connecting (the end of a run).
                    self.close(i, now, false);
                } else {
                    let slot = &mut self.slots[i];
                    slot.sock = Sock::Open;
                    let host = &self.hosts[slot.s.node % self.hosts.len()];
                    slot.s.on_connected(host, &mut self.rec);
                    self.arm_recv(i);
                    self.flush_out(i);
                }
            }
            K_SEND => {
                let slot = &mut self.slots[i];
                slot.sending = false;
                if c.result < 0 {
                    self.close(i, now, false);
                    return;
                }
                slot.send_off += c.result as usize;
                if slot.send_off < slot.send_buf.len() {
                    self.submit_send(i);
                } else {
                    slot.send_buf.clear();
                    slot.send_off = 0;
                    self.flush_out(i);
                }
            }
            K_RECV1 => {
                self.slots[i].recv_armed = false;
                if self.slots[i].sock != Sock::Open {
                    return;
                }
                if c.result <= 0 {
                    self.close(i, now, false);
                    return;
                }
                let buf = self.slots[i].slow_buf.take().unwrap();
                self.feed(i, &buf[..c.result as usize], now);
                self.slots[i].slow_buf = Some(buf);
                if self.slots[i].sock == Sock::Open && self.slots[i].s.may_read(now) {
                    self.arm_recv(i);
                }
            }
            _ => {}
        }
    }

    fn feed(&mut self, i: usize, data: &[u8], now: u64) {
        let world = self.sh.world.clone();
        let slot = &mut self.slots[i];
        let before = slot.s.phase;
        let act = slot.s.feed(data, now, &world, &mut self.rec);
        if slot.s.phase != before {
            slot.phase_since = now;
        }
        if act == Action::Close {
            self.close(i, now, false);
        } else {
            self.flush_out(i);
        }
    }

    fn arm_recv(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        if slot.recv_armed || slot.sock != Sock::Open {
            return;
        }
        slot.recv_armed = true;
        let gen = slot.gen;
        if let Some(buf) = slot.slow_buf.as_mut() {
            // SAFETY: the buffer is owned by the slot, which lives in a boxed
            // slice for the life of the ring.
            unsafe {
                self.ring.recv(
                    i as u32,
                    buf.as_mut_ptr(),
                    buf.len() as u32,
                    ud(K_RECV1, gen, i),
                )
            };
        } else {
            self.ring.recv_multi(i as u32, ud(K_RECV, gen, i));
        }
    }

    fn flush_out(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        if slot.sending || slot.sock != Sock::Open || slot.s.out.is_empty() {
            return;
        }
        std::mem::swap(&mut slot.send_buf, &mut slot.s.out);
        slot.s.out.clear();
        slot.send_off = 0;
        self.submit_send(i);
    }

    fn submit_send(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        slot.sending = true;
        let rest = &slot.send_buf[slot.send_off..];
        // SAFETY: send_buf is not touched until the completion (sending).
        unsafe {
            self.ring.send(
                i as u32,
                rest.as_ptr(),
                rest.len() as u32,
                ud(K_SEND, slot.gen, i),
            )
        };
    }

    fn open(&mut self, i: usize, now: u64) {
        let slot = &mut self.slots[i];
        slot.gen = slot.gen.wrapping_add(1) & 0xff_ffff;
        slot.sock = Sock::Opening;
        slot.recv_armed = false;
        slot.sending = false;
        slot.send_buf.clear();
        slot.send_off = 0;
        slot.phase_since = now;
        slot.dst = sockaddr(self.cfg.nodes[slot.s.node % self.cfg.nodes.len()]);
        slot.s.on_connecting();
        let bind = (!self.cfg.sources.is_empty()).then_some(&slot.bind as *const libc::sockaddr_in);
        let rcvbuf = slot.rcvbuf.as_ref().map(|v| v as *const i32);
        let gen = slot.gen;
        // SAFETY: the addresses and the option value live in the boxed slot slice.
        unsafe {
            self.ring.socket_connect_with(
                i as u32,
                bind,
                rcvbuf,
                &slot.dst,
                [
                    ud(K_SOCKET, gen, i),
                    ud(K_BIND, gen, i),
                    ud(K_SOCKOPT, gen, i),
                    ud(K_CONNECT, gen, i),
                ],
            )
        };
    }

    fn close(&mut self, i: usize, now: u64, connect_failed: bool) {
        let nodes = self.cfg.nodes.len();
        let slot = &mut self.slots[i];
        if matches!(slot.sock, Sock::None | Sock::Closing) {
            return;
        }
        let gen = slot.gen;
        self.ring
            .shutdown_and_close(i as u32, ud(K_SHUT, gen, i), ud(K_CLOSE, gen, i));
        slot.sock = Sock::Closing;
        slot.recv_armed = false;
        if slot.slow_buf.is_some()
            && slot.s.streaming()
            && self
                .sh
                .slow_lost_ns
                .compare_exchange(0, now, Relaxed, Relaxed)
                .is_ok()
        {
            self.sh
                .slow_lost_code
                .store(slot.s.last_close_code as u64, Relaxed);
        }
        if connect_failed || slot.s.phase == Phase::Connecting || slot.s.phase == Phase::Upgrading {
            // Count a refused upgrade (e.g. 503) like a failed connect.
            slot.s.on_lost(now, connect_failed, nodes, &mut self.rec);
        } else {
            slot.s.on_lost(now, false, nodes, &mut self.rec);
        }
    }

    fn on_tick(&mut self) {
        let now = now_ns();
        self.rec.measuring = self.sh.measuring.load(Relaxed);
        self.rec.latency_exclude_bot = *self.sh.latency_exclude_bot.lock().unwrap();
        self.rec.latency_only_bots = self.sh.latency_only_bots.lock().unwrap().clone();
        self.rec.want_guild = self.sh.guild.lock().unwrap().is_none();
        let close_code = self.sh.close_code.load(Relaxed) as u16;
        if close_code != 0 && !self.closed_all {
            self.closed_all = true;
            for i in 0..self.slots.len() {
                let slot = &mut self.slots[i];
                if slot.sock == Sock::Open && slot.s.phase != Phase::Stopped {
                    slot.s.close_and_retire(close_code);
                    self.flush_out(i);
                } else if slot.s.phase != Phase::Stopped {
                    slot.s.close_and_retire(close_code); // never connects again
                    slot.s.out.clear();
                }
            }
            self.sh.closed_n.fetch_add(1, Relaxed);
        }
        let watch = *self.sh.watch.lock().unwrap();
        if watch != self.rec.watch {
            self.rec.watch = watch;
            self.rec.watch_count = 0;
            self.rec.watch_last_ns = 0;
        }
        if let Some(g) = self.gate.clone() {
            let granted = std::mem::take(&mut *g.grants[self.t].lock().unwrap());
            for (i, gen) in granted {
                let slot = &mut self.slots[i];
                if slot.gen == gen {
                    slot.s.grant_requested = false;
                    slot.s.has_grant = true;
                }
            }
        }
        let hs_timeout = self.cfg.handshake_timeout.as_nanos() as u64;
        let mut handshaking = 0usize;
        for slot in self.slots.iter() {
            if slot.sock != Sock::None && !slot.s.streaming() {
                handshaking += 1;
            }
        }
        let (mut streaming, mut stopped) = (0u64, 0u64);
        for i in 0..self.slots.len() {
            let phase = self.slots[i].s.phase;
            match phase {
                Phase::Stopped => {
                    stopped += 1;
                    continue;
                }
                Phase::Idle => {
                    let slot = &mut self.slots[i];
                    let cap = if slot.s.needs_identify() {
                        self.cfg.window
                    } else {
                        self.cfg.resume_window
                    };
                    if slot.sock == Sock::None && now >= slot.s.reconnect_at && handshaking < cap {
                        if slot.s.gated && slot.s.needs_identify() && !slot.s.has_grant {
                            // Ask the coordinator first; connect once granted.
                            if !slot.s.grant_requested {
                                let app = self.sh.world.bots[slot.s.bot as usize].app_id;
                                let req = (self.t, i, slot.gen, app, slot.s.shard);
                                if self.gate.as_ref().is_some_and(|g| g.request(req)) {
                                    slot.s.grant_requested = true;
                                }
                            }
                            continue;
                        }
                        handshaking += 1;
                        self.open(i, now);
                    }
                    continue;
                }
                Phase::Streaming => streaming += 1,
                _ => {
                    if now.saturating_sub(self.slots[i].phase_since) > hs_timeout {
                        self.close(i, now, false);
                        continue;
                    }
                }
            }
            if self.slots[i].sock != Sock::Open {
                continue;
            }
            if self.slots[i].s.tick(now, &mut self.rec) == Action::Close {
                self.close(i, now, false);
                continue;
            }
            if self.slots[i].slow_buf.is_some()
                && !self.slots[i].recv_armed
                && self.slots[i].s.may_read(now)
            {
                self.arm_recv(i);
            }
            self.flush_out(i);
        }
        self.sh.streaming[self.t].store(streaming, Relaxed);
        self.sh.handshaking[self.t].store(handshaking as u64, Relaxed);
        self.sh.stopped[self.t].store(stopped, Relaxed);
        self.flush_counters();
        let want = self.sh.collect.load(Relaxed);
        if want != self.collect_seen {
            self.collect_seen = want;
            let mut g = self.sh.collected.lock().unwrap();
            let _ = g.0.add(&self.rec.latency);
            let _ = g.1.add(&self.rec.recovery);
            drop(g);
            self.rec.latency.reset();
            self.rec.recovery.reset();
            self.sh.collected_n.fetch_add(1, Relaxed);
        }
        if let Some(w) = watch {
            let _ = w;
            self.sh
                .watch_last_ns
                .fetch_max(self.rec.watch_last_ns, Relaxed);
            self.sh
                .watch_count
                .fetch_add(std::mem::take(&mut self.rec.watch_count), Relaxed);
        }
    }

    fn flush_counters(&mut self) {
        let c = std::mem::take(&mut self.rec.c);
        let mut t = self.sh.totals.lock().unwrap();
        add_counters(&mut t, &c);
        drop(t);
        if let Some(r) = self.rec.first_refusal.take() {
            if !self.reported_refusal {
                self.reported_refusal = true;
                eprintln!("loadgen: fleet thread {}: upgrade refused: {r}", self.t);
            }
        }
        if let Some(v) = self.rec.first_violation.take() {
            let mut f = self.sh.first_violation.lock().unwrap();
            if f.is_none() {
                *f = Some(v);
            }
        }
        if let Some(g) = self.rec.guild.take() {
            self.sh.guild.lock().unwrap().get_or_insert(g);
        }
        if !self.rec.guilds.is_empty() {
            let mut set = self.sh.servers.lock().unwrap();
            for (server, channel, reader) in self.rec.guilds.drain(..) {
                set.add(server, channel, reader);
            }
        }
    }
}

pub fn add_counters(t: &mut Counters, c: &Counters) {
    macro_rules! add {
        ($($f:ident),*) => { $( t.$f += c.$f; )* };
    }
    add!(
        connects,
        connect_errors,
        identifies,
        readies,
        resumes_sent,
        resumed,
        invalid_resumable,
        invalid_new_session,
        deliveries,
        other_dispatches,
        duplicates,
        gaps,
        entitlement_violations,
        content_violations,
        hb_acks,
        zombies,
        reconnects_asked,
        fatal,
        protocol_errors,
        bytes_in,
        upgrades,
        lost,
        failed,
        paced_deliveries,
        handshake_bytes,
        guild_creates,
        event_repeats
    );
    for k in 0..t.closes.len() {
        t.closes[k] += c.closes[k];
    }
}
