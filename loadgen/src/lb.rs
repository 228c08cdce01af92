//! A TCP load balancer in front of several gatewayd nodes, for the
//! `rolling-release` scenario: the bots connect (and reconnect after op 7)
//! to ONE address that is not a node, and each new connection goes to a
//! node that is up and not draining, as a production load balancer does
//! with its health checks. Existing connections stay where they are until
//! either side closes them.
//!
//! Built for 40,000 and more connections on a machine whose RLIMIT_NOFILE is
//! 20,000: every socket (accepted and upstream) is an io_uring direct
//! descriptor in a ring's fixed table, never in the fd table. Each thread
//! owns one ring and one SO_REUSEPORT listener on the shared port (the
//! kernel spreads new connections over them); a pair (client, upstream)
//! takes two slots of its ring's table. Upstream sockets bind to source
//! addresses of their own (127.0.1.x by default), since one address has
//! about 28,000 ports and every moved session leaves one in TIME_WAIT.
//!
//! A node is used for new connections while it is `enabled` (the operator:
//! the scenario turns a node off before it drains it, as an orchestrator
//! takes a node out of the load balancer) and its `/readyz` answers 200
//! (checked every 200 ms: 503 while draining, refused when gone).

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use net::uring::{cap_fixed_files, Completion, Ring, RingConfig};

/// Unsent bytes one direction of a pair may hold before the pair is closed
/// (a client that stopped reading must not grow the balancer without bound).
pub const MAX_QUEUED: usize = 8 << 20;

/// A node behind the balancer.
#[derive(Clone, Debug)]
pub struct Backend {
    pub gateway: SocketAddrV4,
    /// Admin address whose `/readyz` is checked (None: always healthy).
    pub admin: Option<SocketAddr>,
    /// The operator's switch: new connections only while on.
    pub enabled: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LbStats {
    pub accepted: u64,
    pub open: u64,
    /// Connections closed at once: no node was usable.
    pub no_backend: u64,
    /// Connections closed at once: the ring's table was full.
    pub refused_full: u64,
    pub upstream_failures: u64,
    /// Pairs closed because one direction queued more than MAX_QUEUED.
    pub overflows: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// New connections sent to each backend.
    pub per_backend: Vec<u64>,
}

struct BackendState {
    b: Backend,
    healthy: bool,
}

struct Shared {
    stop: AtomicBool,
    backends: Mutex<Vec<BackendState>>,
    version: AtomicU64,
    accepted: AtomicU64,
    open: AtomicU64,
    no_backend: AtomicU64,
    refused_full: AtomicU64,
    upstream_failures: AtomicU64,
    overflows: AtomicU64,
    bytes_up: AtomicU64,
    bytes_down: AtomicU64,
    per_backend: Vec<AtomicU64>,
}

pub struct Lb {
    addr: SocketAddrV4,
    sh: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
}

/// Most backends a balancer holds (the per-backend counters are fixed).
pub const MAX_BACKENDS: usize = 16;

impl Lb {
    /// Listens on `listen` (port 0: a free port) with enough rings for
    /// `connections` pairs (at least 2), upstream sockets bound round robin
    /// to `sources` (empty: the kernel's choice).
    pub fn start(
        listen: SocketAddrV4,
        backends: Vec<Backend>,
        connections: usize,
        sources: Vec<Ipv4Addr>,
    ) -> std::io::Result<Lb> {
        if backends.len() > MAX_BACKENDS {
            return Err(std::io::Error::other("too many backends"));
        }
        let table = cap_fixed_files(20_000).saturating_sub(64).max(64);
        let pairs_per_ring = (table / 2) as usize;
        // Head room: SO_REUSEPORT spreads by hash, not evenly, and a moved
        // session's old pair may still be closing when its new one opens.
        let rings = (connections * 3 / 2).div_ceil(pairs_per_ring).max(2);
        let sh = Arc::new(Shared {
            stop: AtomicBool::new(false),
            backends: Mutex::new(
                backends
                    .into_iter()
                    .map(|b| BackendState { b, healthy: true })
                    .collect(),
            ),
            version: AtomicU64::new(1),
            accepted: AtomicU64::new(0),
            open: AtomicU64::new(0),
            no_backend: AtomicU64::new(0),
            refused_full: AtomicU64::new(0),
            upstream_failures: AtomicU64::new(0),
            overflows: AtomicU64::new(0),
            bytes_up: AtomicU64::new(0),
            bytes_down: AtomicU64::new(0),
            per_backend: (0..MAX_BACKENDS).map(|_| AtomicU64::new(0)).collect(),
        });
        let first = net::uring::listen_reuseport(SocketAddr::V4(listen), 4096)?;
        let addr = match first.local_addr()? {
            SocketAddr::V4(a) => a,
            a => return Err(std::io::Error::other(format!("{a} is not IPv4"))),
        };
        let mut listeners = vec![first];
        for _ in 1..rings {
            listeners.push(net::uring::listen_reuseport(SocketAddr::V4(addr), 4096)?);
        }
        let mut handles = Vec::new();
        for (t, l) in listeners.into_iter().enumerate() {
            let ring = Ring::new(&RingConfig {
                sq_entries: 4096,
                cq_entries: 32768,
                fixed_files: table,
                recv_buffers: 2048,
                recv_buffer_size: 4096,
            })?;
            let (sh, sources) = (sh.clone(), sources.clone());
            handles.push(
                std::thread::Builder::new()
                    .name(format!("lb-{t}"))
                    .spawn(move || Driver::new(t, ring, l, pairs_per_ring, sources, sh).run())?,
            );
        }
        let hsh = sh.clone();
        handles.push(
            std::thread::Builder::new()
                .name("lb-health".into())
                .spawn(move || health(hsh))?,
        );
        Ok(Lb { addr, sh, handles })
    }

    pub fn local_addr(&self) -> SocketAddrV4 {
        self.addr
    }

    /// `ws://ADDR`: what the nodes' `public_url` must say.
    pub fn url(&self) -> String {
        format!("ws://{}", self.addr)
    }

    /// Turn backend `i` on or off for new connections.
    pub fn set_enabled(&self, i: usize, on: bool) {
        if let Some(b) = self.sh.backends.lock().unwrap().get_mut(i) {
            b.b.enabled = on;
        }
        self.sh.version.fetch_add(1, Relaxed);
    }

    /// Replace backend `i` (a node restarted on new ports); it starts
    /// healthy if enabled, until its first check says otherwise.
    pub fn set_backend(&self, i: usize, b: Backend) {
        let mut g = self.sh.backends.lock().unwrap();
        if let Some(x) = g.get_mut(i) {
            *x = BackendState { b, healthy: true };
        }
        drop(g);
        self.sh.version.fetch_add(1, Relaxed);
    }

    pub fn stats(&self) -> LbStats {
        let s = &self.sh;
        let n = s.backends.lock().unwrap().len();
        LbStats {
            accepted: s.accepted.load(Relaxed),
            open: s.open.load(Relaxed),
            no_backend: s.no_backend.load(Relaxed),
            refused_full: s.refused_full.load(Relaxed),
            upstream_failures: s.upstream_failures.load(Relaxed),
            overflows: s.overflows.load(Relaxed),
            bytes_up: s.bytes_up.load(Relaxed),
            bytes_down: s.bytes_down.load(Relaxed),
            per_backend: s.per_backend[..n].iter().map(|a| a.load(Relaxed)).collect(),
        }
    }

    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.sh.stop.store(true, Relaxed);
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

impl Drop for Lb {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Health checks: each backend's `/readyz` every 200 ms.
fn health(sh: Arc<Shared>) {
    while !sh.stop.load(Relaxed) {
        let admins: Vec<Option<SocketAddr>> = sh
            .backends
            .lock()
            .unwrap()
            .iter()
            .map(|b| b.b.admin)
            .collect();
        for (i, a) in admins.into_iter().enumerate() {
            let Some(a) = a else { continue };
            let ok = crate::nodes::http_get(a, "/readyz").is_ok_and(|(s, _)| s == 200);
            let mut g = sh.backends.lock().unwrap();
            if let Some(b) = g.get_mut(i) {
                // A backend replaced meanwhile is checked next round.
                if b.b.admin == Some(a) && b.healthy != ok {
                    b.healthy = ok;
                    sh.version.fetch_add(1, Relaxed);
                }
            }
        }
        for _ in 0..4 {
            if sh.stop.load(Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

const K_ACCEPT: u64 = 1;
const K_SOCKET: u64 = 2;
const K_BIND: u64 = 3;
const K_CONNECT: u64 = 4;
const K_RECV: u64 = 5; // + side
const K_SEND: u64 = 7; // + side
const K_SHUT: u64 = 9;
const K_CLOSE: u64 = 10;
const K_CLOSE_RAW: u64 = 11;
const K_TICK: u64 = 12;

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

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum St {
    Free,
    Connecting,
    Open,
    Closing,
}

/// Side 0: the client (a bot); side 1: the upstream (a node).
struct Pair {
    gen: u32,
    st: St,
    slot: [Option<u32>; 2],
    bind: libc::sockaddr_in,
    dst: libc::sockaddr_in,
    /// Bytes waiting to go to side s, and the bytes of the send in flight
    /// to it (never touched while `sending[s]`).
    queue: [Vec<u8>; 2],
    inflight: [Vec<u8>; 2],
    off: [usize; 2],
    sending: [bool; 2],
    /// Side s has closed its sending half (EOF) or failed.
    eof: [bool; 2],
    socket_inflight: bool,
    connect_inflight: bool,
    closes: u8,
}

impl Pair {
    fn new() -> Pair {
        Pair {
            gen: 0,
            st: St::Free,
            slot: [None; 2],
            bind: sockaddr(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)),
            dst: sockaddr(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)),
            queue: [Vec::new(), Vec::new()],
            inflight: [Vec::new(), Vec::new()],
            off: [0; 2],
            sending: [false; 2],
            eof: [false; 2],
            socket_inflight: false,
            connect_inflight: false,
            closes: 0,
        }
    }
    fn busy(&self) -> bool {
        self.closes > 0
            || self.sending[0]
            || self.sending[1]
            || self.socket_inflight
            || self.connect_inflight
    }
}

struct Driver {
    ring: Ring,
    listener: std::net::TcpListener,
    accept_armed: bool,
    /// Boxed: the kernel holds pointers to `bind`, `dst` and the buffers.
    pairs: Box<[Pair]>,
    free: Vec<usize>,
    sources: Vec<Ipv4Addr>,
    next_source: usize,
    next_backend: usize,
    sh: Arc<Shared>,
    version: u64,
    usable: Vec<(usize, SocketAddrV4)>,
}

impl Driver {
    fn new(
        t: usize,
        ring: Ring,
        listener: std::net::TcpListener,
        pairs: usize,
        sources: Vec<Ipv4Addr>,
        sh: Arc<Shared>,
    ) -> Driver {
        Driver {
            ring,
            listener,
            accept_armed: false,
            pairs: (0..pairs).map(|_| Pair::new()).collect(),
            free: (0..pairs).rev().collect(),
            sources,
            next_source: t,
            next_backend: t,
            sh,
            version: 0,
            usable: Vec::new(),
        }
    }

    fn run(mut self) {
        self.ring.tick(Duration::from_millis(50), ud(K_TICK, 0, 0));
        self.arm_accept();
        let mut cqes: Vec<Completion> = Vec::with_capacity(4096);
        loop {
            if self.ring.submit_and_wait(1).is_err() {
                std::thread::sleep(Duration::from_millis(1));
            }
            cqes.clear();
            self.ring.drain(&mut cqes);
            for &c in &cqes {
                self.on_completion(c);
            }
            if self.sh.stop.load(Relaxed) {
                // The ring's drop closes every socket in its table.
                let open = self.pairs.iter().filter(|p| p.st != St::Free).count() as u64;
                self.sh
                    .open
                    .fetch_sub(open.min(self.sh.open.load(Relaxed)), Relaxed);
                return;
            }
        }
    }

    fn arm_accept(&mut self) {
        if !self.accept_armed {
            self.accept_armed = true;
            self.ring
                .accept_multi(self.listener.as_raw_fd(), ud(K_ACCEPT, 0, 0));
        }
    }

    fn refresh(&mut self) {
        let v = self.sh.version.load(Relaxed);
        if v == self.version {
            return;
        }
        self.version = v;
        self.usable = self
            .sh
            .backends
            .lock()
            .unwrap()
            .iter()
            .enumerate()
            .filter(|(_, b)| b.b.enabled && b.healthy)
            .map(|(i, b)| (i, b.b.gateway))
            .collect();
    }

    fn on_completion(&mut self, c: Completion) {
        let (kind, gen, i) = ud_parts(c.user_data);
        match kind {
            K_TICK => {
                self.refresh();
                if !self.accept_armed && !self.free.is_empty() {
                    self.arm_accept();
                }
            }
            K_ACCEPT => {
                if !c.more() {
                    self.accept_armed = false;
                    // ENFILE (table full) waits for the next tick.
                    if c.result != -libc::ENFILE {
                        self.arm_accept();
                    }
                }
                if c.result >= 0 {
                    self.on_accept(c.result as u32);
                }
            }
            K_CLOSE_RAW | K_SHUT => {}
            _ => {
                if i >= self.pairs.len() || self.pairs[i].gen != gen {
                    if kind == K_SOCKET && c.result >= 0 {
                        self.ring.close(c.result as u32, ud(K_CLOSE_RAW, 0, 0));
                    }
                    return;
                }
                self.on_pair(kind, i, c);
            }
        }
    }

    fn on_accept(&mut self, slot: u32) {
        self.sh.accepted.fetch_add(1, Relaxed);
        self.refresh();
        let Some(i) = self.free.pop() else {
            self.sh.refused_full.fetch_add(1, Relaxed);
            self.ring.close(slot, ud(K_CLOSE_RAW, 0, 0));
            return;
        };
        if self.usable.is_empty() {
            self.free.push(i);
            self.sh.no_backend.fetch_add(1, Relaxed);
            self.ring.close(slot, ud(K_CLOSE_RAW, 0, 0));
            return;
        }
        let (b, dst) = self.usable[self.next_backend % self.usable.len()];
        self.next_backend = self.next_backend.wrapping_add(1);
        self.sh.per_backend[b].fetch_add(1, Relaxed);
        self.sh.open.fetch_add(1, Relaxed);
        let src = if self.sources.is_empty() {
            Ipv4Addr::UNSPECIFIED
        } else {
            self.next_source = self.next_source.wrapping_add(1);
            self.sources[self.next_source % self.sources.len()]
        };
        let p = &mut self.pairs[i];
        debug_assert_eq!(p.st, St::Free);
        p.st = St::Connecting;
        p.slot = [Some(slot), None];
        p.bind = sockaddr(SocketAddrV4::new(src, 0));
        p.dst = sockaddr(dst);
        for s in 0..2 {
            p.queue[s].clear();
            p.inflight[s].clear();
            p.off[s] = 0;
            p.sending[s] = false;
            p.eof[s] = false;
        }
        p.socket_inflight = true;
        p.connect_inflight = false;
        p.closes = 0;
        let gen = p.gen;
        self.ring.recv_multi(slot, ud(K_RECV, gen, i));
        self.ring.socket_alloc(ud(K_SOCKET, gen, i));
    }

    fn on_pair(&mut self, kind: u64, i: usize, c: Completion) {
        let gen = self.pairs[i].gen;
        match kind {
            K_SOCKET => {
                self.pairs[i].socket_inflight = false;
                if c.result < 0 {
                    self.sh.upstream_failures.fetch_add(1, Relaxed);
                    self.teardown(i);
                    return;
                }
                let slot = c.result as u32;
                let p = &mut self.pairs[i];
                if p.st != St::Connecting {
                    self.ring.close(slot, ud(K_CLOSE, gen, i));
                    self.pairs[i].closes += 1;
                    return;
                }
                p.slot[1] = Some(slot);
                p.connect_inflight = true;
                let bind =
                    (!self.sources.is_empty()).then_some(&p.bind as *const libc::sockaddr_in);
                // SAFETY: bind and dst live in the boxed pair slice, which is
                // not reused until the connect has completed (busy()).
                unsafe {
                    self.ring.bind_connect(
                        slot,
                        bind,
                        &p.dst,
                        [ud(K_BIND, gen, i), ud(K_CONNECT, gen, i)],
                    )
                };
            }
            K_BIND => {}
            K_CONNECT => {
                self.pairs[i].connect_inflight = false;
                if self.pairs[i].st != St::Connecting {
                    self.maybe_free(i);
                    return;
                }
                if c.result < 0 {
                    self.sh.upstream_failures.fetch_add(1, Relaxed);
                    self.teardown(i);
                    return;
                }
                self.pairs[i].st = St::Open;
                let slot = self.pairs[i].slot[1].expect("connected");
                self.ring.recv_multi(slot, ud(K_RECV + 1, gen, i));
                self.flush(i, 1);
                self.maybe_finish(i);
            }
            k if k == K_RECV || k == K_RECV + 1 => {
                let side = (k - K_RECV) as usize;
                if let Some(bid) = c.buffer_id() {
                    if c.result > 0 && matches!(self.pairs[i].st, St::Connecting | St::Open) {
                        let n = c.result as usize;
                        let data = self.ring.buffer(bid, n).to_vec();
                        self.ring.recycle(bid);
                        if side == 0 {
                            self.sh.bytes_up.fetch_add(n as u64, Relaxed);
                        } else {
                            self.sh.bytes_down.fetch_add(n as u64, Relaxed);
                        }
                        let p = &mut self.pairs[i];
                        p.queue[1 - side].extend_from_slice(&data);
                        if p.queue[1 - side].len() > MAX_QUEUED {
                            self.sh.overflows.fetch_add(1, Relaxed);
                            self.teardown(i);
                            return;
                        }
                        self.flush(i, 1 - side);
                    } else {
                        self.ring.recycle(bid);
                    }
                }
                if !c.more() && matches!(self.pairs[i].st, St::Connecting | St::Open) {
                    if c.result == -libc::ENOBUFS {
                        if let Some(slot) = self.pairs[i].slot[side] {
                            self.ring.recv_multi(slot, ud(K_RECV + side as u64, gen, i));
                        }
                    } else {
                        self.pairs[i].eof[side] = true;
                        self.maybe_finish(i);
                    }
                }
            }
            k if k == K_SEND || k == K_SEND + 1 => {
                let side = (k - K_SEND) as usize;
                self.pairs[i].sending[side] = false;
                if self.pairs[i].st == St::Closing {
                    self.maybe_free(i);
                    return;
                }
                if c.result < 0 {
                    self.teardown(i);
                    return;
                }
                let p = &mut self.pairs[i];
                p.off[side] += c.result as usize;
                if p.off[side] < p.inflight[side].len() {
                    self.submit_send(i, side);
                } else {
                    p.inflight[side].clear();
                    p.off[side] = 0;
                    self.flush(i, side);
                    self.maybe_finish(i);
                }
            }
            K_CLOSE => {
                let p = &mut self.pairs[i];
                p.closes = p.closes.saturating_sub(1);
                self.maybe_free(i);
            }
            _ => {}
        }
    }

    /// Start sending what is queued for `side`, if nothing is in flight.
    fn flush(&mut self, i: usize, side: usize) {
        let p = &mut self.pairs[i];
        if p.sending[side] || p.queue[side].is_empty() || p.slot[side].is_none() {
            return;
        }
        if side == 1 && p.st != St::Open {
            return; // the upstream is not connected yet
        }
        std::mem::swap(&mut p.queue[side], &mut p.inflight[side]);
        p.off[side] = 0;
        self.submit_send(i, side);
    }

    fn submit_send(&mut self, i: usize, side: usize) {
        let p = &mut self.pairs[i];
        let Some(slot) = p.slot[side] else { return };
        p.sending[side] = true;
        let rest = &p.inflight[side][p.off[side]..];
        // SAFETY: `inflight[side]` is not touched until the completion
        // (`sending`), and the pair is not reused while a send is in flight.
        unsafe {
            self.ring.send(
                slot,
                rest.as_ptr(),
                rest.len() as u32,
                ud(K_SEND + side as u64, p.gen, i),
            )
        };
    }

    /// A side that closed: once what it sent has reached the other side,
    /// the pair is done.
    fn maybe_finish(&mut self, i: usize) {
        let p = &self.pairs[i];
        let drained = |s: usize| !p.sending[s] && p.queue[s].is_empty();
        let done = (p.eof[0] && (p.st != St::Open || drained(1))) || (p.eof[1] && drained(0));
        if done {
            self.teardown(i);
        }
    }

    fn teardown(&mut self, i: usize) {
        let p = &mut self.pairs[i];
        if matches!(p.st, St::Closing | St::Free) {
            return;
        }
        p.st = St::Closing;
        let gen = p.gen;
        for s in 0..2 {
            if let Some(slot) = p.slot[s].take() {
                p.closes += 1;
                self.ring
                    .shutdown_and_close(slot, ud(K_SHUT, gen, i), ud(K_CLOSE, gen, i));
            }
        }
        self.sh.open.fetch_sub(1, Relaxed);
        self.maybe_free(i);
    }

    fn maybe_free(&mut self, i: usize) {
        let p = &mut self.pairs[i];
        if p.st == St::Closing && !p.busy() {
            p.st = St::Free;
            p.gen = p.gen.wrapping_add(1) & 0xff_ffff;
            p.queue[0] = Vec::new();
            p.queue[1] = Vec::new();
            p.inflight[0] = Vec::new();
            p.inflight[1] = Vec::new();
            self.free.push(i);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    fn echo() -> (SocketAddrV4, Arc<AtomicU64>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let SocketAddr::V4(a) = l.local_addr().unwrap() else {
            unreachable!()
        };
        let n = Arc::new(AtomicU64::new(0));
        let n2 = n.clone();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { return };
                n2.fetch_add(1, Relaxed);
                std::thread::spawn(move || {
                    let mut b = [0u8; 4096];
                    while let Ok(k) = s.read(&mut b) {
                        if k == 0 || s.write_all(&b[..k]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (a, n)
    }

    fn round_trip(lb: &Lb, msg: &[u8]) -> Vec<u8> {
        let mut s = TcpStream::connect(lb.local_addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(msg).unwrap();
        let mut got = vec![0u8; msg.len()];
        s.read_exact(&mut got).unwrap();
        got
    }

    #[test]
    fn forwards_and_sends_new_connections_only_to_enabled_backends() {
        let (a, na) = echo();
        let (b, nb) = echo();
        let lb = Lb::start(
            "127.0.0.1:0".parse().unwrap(),
            vec![
                Backend {
                    gateway: a,
                    admin: None,
                    enabled: true,
                },
                Backend {
                    gateway: b,
                    admin: None,
                    enabled: true,
                },
            ],
            100,
            vec![],
        )
        .unwrap();
        for k in 0..10u8 {
            let msg = vec![k; 100_000];
            assert_eq!(round_trip(&lb, &msg), msg);
        }
        assert!(na.load(Relaxed) > 0 && nb.load(Relaxed) > 0);
        lb.set_enabled(0, false);
        std::thread::sleep(Duration::from_millis(150));
        let before = na.load(Relaxed);
        for _ in 0..10 {
            assert_eq!(round_trip(&lb, b"x"), b"x");
        }
        assert_eq!(
            na.load(Relaxed),
            before,
            "a disabled backend gets nothing new"
        );
        lb.set_enabled(1, false);
        std::thread::sleep(Duration::from_millis(150));
        let mut s = TcpStream::connect(lb.local_addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 1];
        assert_eq!(s.read(&mut b).unwrap_or(0), 0, "no backend: closed");
        let st = lb.stats();
        assert!(st.no_backend >= 1, "{st:?}");
        assert_eq!(st.per_backend.iter().sum::<u64>(), 20);
        lb.stop();
    }

    #[test]
    fn a_closed_upstream_closes_the_client() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let SocketAddr::V4(a) = l.local_addr().unwrap() else {
            unreachable!()
        };
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(mut s) = s else { return };
                let _ = s.write_all(b"bye");
            }
        });
        let lb = Lb::start(
            "127.0.0.1:0".parse().unwrap(),
            vec![Backend {
                gateway: a,
                admin: None,
                enabled: true,
            }],
            10,
            vec![],
        )
        .unwrap();
        let mut s = TcpStream::connect(lb.local_addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut got = Vec::new();
        s.read_to_end(&mut got).unwrap();
        assert_eq!(got, b"bye");
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(lb.stats().open, 0);
        lb.stop();
    }
}
