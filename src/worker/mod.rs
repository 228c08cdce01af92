//! One worker: a pinned thread running a glommio executor whose single task
//! drives this worker's io_uring rings. The worker owns its connections,
//! sessions and resumable sessions; other threads reach it only through its
//! inbox (a bounded channel plus an eventfd write).
//!
//! Waiting: every ring signals one blocking eventfd on each completion, and
//! other threads write the same eventfd to wake us; ring 0's 250 ms tick is
//! a completion too. Between turns the worker blocks in `read(2)` on that
//! eventfd (`park`): no timer is armed per park (glommio's park did, and
//! reprogramming the timer is a VM exit here), and a signal can't be lost
//! (a read returns at once while the count is above zero). The rings are
//! COOP_TASKRUN (`net::uring::RingConfig`): a socket's data arriving while
//! we run does not interrupt us; its task work runs at the pass's submit, and
//! a parked read is still woken by it.

use std::collections::HashMap;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod accept;
mod api_state;
pub mod app_stats;
mod close;
mod cluster;
mod conn;
mod handover;
mod housekeeping;
mod inbox;
mod input;
pub mod local_chat;
pub mod mail;
pub mod metrics;
mod op;
mod rest_edge;
mod send;
pub mod session_board;
mod sessions;
mod setup;
pub mod shared;
pub mod start_refusal;
pub mod timeline;
mod upgrade;

use conn::{
    Adoption, Conn, ConnState, DeferredClose, Handover, Lifecycle, Peer, SendState, WsConn,
};
use op::{ud, ud_adopt, ud_parts, Op};

use crossbeam_channel::Receiver;
use net::http::{self, RequestHead};
use net::tls::TlsSession;
use net::uring::{Completion, Ring};
use net::ws::{self, Message, OpCode};
use proto::{AppId, ServerId, SessionIdx};
use shards::SessionId;

use crate::delivery::fanout::{EventIn, FanOut};
use crate::delivery::resume::ResumeRefusal;
use crate::delivery::sendpath::{self, SendPool};
use crate::protocol::compress::{self, Compressor};
use crate::protocol::identify::{self, Resume};
use crate::protocol::rest;
use crate::protocol::session::{Action, Identity, Limits, Phase, Session};
use crate::protocol::upgrade::{upgrade_refusal, ws_error_close};
use crate::protocol::{intents, payload, Close, CloseCode};
use crate::worker::mail::*;
use crate::worker::metrics::WorkerMetrics;
use crate::worker::shared::{home_worker, Shared};
pub use setup::WorkerSetup;

/// An unmatched half of a handover is dropped after this long.
const ADOPT_TIMEOUT_MS: u64 = 5_000;

/// Ring 0's housekeeping tick; also the longest a worker parks.
const TICK: Duration = Duration::from_millis(250);
/// How often the worker's CPU time is read for `gatewayd_worker_busy_seconds_total`.
const BUSY_SAMPLE: Duration = Duration::from_millis(10);
/// A flush submits and reaps its sends every this many: the completions
/// then find their connection, send slot and session still in cache (the
/// kernel's work for a few hundred sends evicts them otherwise).
const REAP_EVERY: usize = 32;
/// How long a closing connection waits for the peer's FIN after ours.
const LINGER_MS: u64 = 2_000;
/// Buffers above this are released when they drain, so idle sessions are small.
const KEEP_BUFFER: usize = 16 * 1024;

thread_local! {
    static IN_TURN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread is a worker inside a turn (completions, inbox,
/// fan-out, sends): the event path, as opposed to parking in the executor
/// or the 250 ms housekeeping tick.
/// Lets an allocation-counting test (tests/no_alloc_worker.rs) attribute
/// what it counts.
#[doc(hidden)]
pub fn in_turn() -> bool {
    IN_TURN.try_with(|t| t.get()).unwrap_or(false)
}

struct RingState {
    ring: Ring,
    listener: TcpListener,
    conns: Vec<Option<Box<Conn>>>,
    gens: Vec<u16>,
    accepting: bool,
    /// The table is (nearly) full: connections are accepted as plain fds
    /// and told 503, so none waits in the listen queue for nothing.
    rejecting: bool,
    cancelling_accept: bool,
    cancelling_reject: bool,
    /// Slots in use in the kernel's fixed table (accepted or adopted, not yet closed).
    used: u32,
    /// Stop accepting into the table at this many: the rest is headroom for
    /// connections handed over from other workers.
    admit_limit: u32,
    /// Per slot, where the kernel writes a REST connection's peer address
    /// (`rest_edge::lookup_peer`): allocated with the table, never moved.
    peer_bufs: Box<[[u8; 28]]>,
    /// Accepted sockets the kernel placed in a slot whose old connection
    /// has not left our table yet (its close or handover completion is
    /// still to come): installed when it leaves (`Worker::slot_freed`).
    /// At most one per slot, so bounded by the table; nearly always empty.
    accepts_waiting: Vec<u32>,
}

pub struct Worker {
    id: usize,
    shared: Arc<Shared>,
    inbox: Receiver<ToWorker>,
    /// This worker's chat service: it commits the message actions of the
    /// servers `api::commit_worker` gives it (None: the chat thread commits
    /// everything, with Kafka or an upstream chat service).
    chat: Option<Box<dyn local_chat::LocalChat>>,
    rings: Vec<RingState>,
    limits: Limits,
    completions: Vec<Completion>,
    /// Completions reaped in the middle of a flush (see `REAP_EVERY`).
    reaped: Vec<Completion>,
    /// Sends pushed since the last reap.
    unreaped: usize,
    scratch: Vec<u8>,
    queue: Vec<ConnKey>,
    /// Sessions, their rings and the event arena.
    fan: FanOut,
    pool: SendPool,
    /// Connections that found the send pool empty; they go first next turn.
    deferred: Vec<ConnKey>,
    /// The connections the running flush works through.
    flushing: Vec<ConnKey>,
    overflow: Vec<(SessionIdx, ConnKey)>,
    gather: Vec<u8>,
    mentions: Vec<u64>,
    /// Buffers (and send slots) of connections closed while their send was
    /// in flight, kept until the kernel is done with them.
    graveyard: HashMap<u64, (Vec<u8>, Option<u16>)>,
    /// Sessions whose resume window passed, remembered for a while so a
    /// late Resume's gap is counted (delivery/reconnect.rs).
    expired: crate::delivery::reconnect::Expired,
    /// Wakeups owed to the workers this pass queued requests to.
    wakes: mail::Wakes,
    open: usize,
    draining_until: Option<u64>,
    /// Drain: when each session gets its op 7 (latest first, popped from the end).
    drain_schedule: Vec<(u64, ConnKey)>,
    started: Instant,
    tick_armed: bool,
    adopting: HashMap<u64, Adoption>,
    handovers: u64,
    /// Wall clock (Unix ms) at the start of the current turn: leases use it.
    unix_ms: u64,
    next_lease_renewal: u64,
    lease_pairs: Vec<(AppId, ServerId)>,
    api: api_state::ApiState,
    /// Sessions arriving from other nodes, and the recent stream they line up on.
    clu: cluster::cut::ClusterState,
}

impl Worker {
    pub fn new(
        id: usize,
        shared: Arc<Shared>,
        inbox: Receiver<ToWorker>,
        setup: WorkerSetup,
        chat: Option<Box<dyn local_chat::LocalChat>>,
    ) -> Worker {
        let send_slots = shared.cfg.events.send_slots;
        let cfg = &shared.cfg;
        let api = api_state::ApiState::new(&shared, id);
        let limits = Limits {
            heartbeat_interval_ms: cfg.limits.heartbeat_interval_ms,
            commands_per_window: cfg.limits.commands_per_window,
            command_window_ms: cfg.limits.command_window_ms,
        };
        let rings: Vec<RingState> = setup
            .rings
            .into_iter()
            .map(|(ring, listener)| {
                let n = ring.fixed_files() as usize;
                RingState {
                    ring,
                    listener,
                    conns: (0..n).map(|_| None).collect(),
                    gens: vec![0; n],
                    accepting: false,
                    rejecting: false,
                    cancelling_accept: false,
                    cancelling_reject: false,
                    used: 0,
                    admit_limit: admit_limit(n as u32),
                    peer_bufs: vec![[0u8; 28]; n].into_boxed_slice(),
                    accepts_waiting: Vec::new(),
                }
            })
            .collect();
        let max_conns: usize = rings.iter().map(|r| r.conns.len()).sum();
        let fan = setup.fan;
        let clustered = shared.cluster.is_some();
        Worker {
            id,
            shared,
            inbox,
            chat,
            rings,
            limits,
            completions: Vec::with_capacity(4096),
            reaped: Vec::with_capacity(REAP_EVERY * 2),
            unreaped: 0,
            scratch: Vec::with_capacity(4096),
            queue: Vec::with_capacity(max_conns),
            fan,
            pool: SendPool::new(send_slots),
            deferred: Vec::with_capacity(max_conns),
            flushing: Vec::with_capacity(max_conns),
            overflow: Vec::with_capacity(1024),
            gather: Vec::with_capacity(64 * 1024),
            mentions: Vec::with_capacity(128),
            graveyard: HashMap::new(),
            expired: crate::delivery::reconnect::Expired::new(),
            wakes: mail::Wakes::default(),
            open: 0,
            draining_until: None,
            drain_schedule: Vec::new(),
            started: Instant::now(),
            tick_armed: false,
            adopting: HashMap::new(),
            handovers: 0,
            unix_ms: registry::snowflake::unix_ms_now(),
            next_lease_renewal: 0,
            lease_pairs: Vec::new(),
            api,
            clu: cluster::cut::ClusterState::new(clustered),
        }
    }

    fn metrics(&self) -> &WorkerMetrics {
        &self.shared.metrics[self.id]
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// The worker's task: runs until drained after a shutdown request.
    pub async fn run(mut self, wake_fd: RawFd) {
        for r in 0..self.rings.len() {
            self.arm_accept(r);
        }
        self.rings[0].ring.tick(TICK, ud(Op::Tick, 0, 0, 0));
        self.tick_armed = true;
        self.shared.ready_workers.fetch_add(1, Ordering::SeqCst);
        tracing::info!(
            worker = self.id,
            rings = self.rings.len(),
            "worker listening"
        );
        // The worker's CPU time (user + system, the kernel's send work done
        // inline in submit included; a blocked park costs none), read at
        // most every BUSY_SAMPLE: reading it is a system call, which two
        // per turn made a visible share of a one-connection request.
        let cpu0 = thread_cpu_ns();
        let mut sampled = Instant::now();
        loop {
            self.turn();
            let now = Instant::now();
            if now.duration_since(sampled) >= BUSY_SAMPLE {
                sampled = now;
                let busy = thread_cpu_ns().saturating_sub(cpu0);
                self.metrics().busy_ns.store(busy, Ordering::Relaxed);
            }
            if self.finished() {
                break;
            }
            for r in &mut self.rings {
                if let Err(e) = r.ring.submit() {
                    tracing::error!(worker = self.id, error = %e, "io_uring submit failed");
                }
            }
            // Nothing owed is left behind a park (every pass flushes; this is the invariant's guard).
            self.wakes.flush(&self.shared.workers);
            if let Err(e) = park(wake_fd) {
                tracing::error!(worker = self.id, error = %e, "waiting on the worker eventfd failed");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        tracing::info!(worker = self.id, "worker stopped");
    }

    fn finished(&self) -> bool {
        match self.draining_until {
            // Clustered, the sessions wait a while for other nodes to take them.
            Some(until) => {
                let keep = self.handoff_grace_ms(until);
                (self.open == 0 && keep == 0) || self.now_ms() > until + LINGER_MS + 1000 + keep
            }
            None => false,
        }
    }

    /// One pass: completions, inbox, then flush what became sendable.
    /// Sends are submitted at the end of every pass: they never wait for
    /// socket space, so they are finished before the next inbox message can
    /// append to (and wrap) the arena they read from.
    fn turn(&mut self) {
        IN_TURN.with(|t| t.set(true));
        self.turn_inner();
        IN_TURN.with(|t| t.set(false));
    }

    fn turn_inner(&mut self) {
        self.unix_ms = registry::snowflake::unix_ms_now();
        loop {
            let mut progressed = false;
            for r in 0..self.rings.len() {
                self.completions.clear();
                let n = self.rings[r].ring.drain(&mut self.completions);
                progressed |= n > 0;
                for i in 0..n {
                    let c = self.completions[i];
                    self.on_completion(r, c);
                }
            }
            // The REST actions this pass committed: their batch to every
            // worker's inbox (ours included), then their answers behind it.
            progressed |= self.end_chat_turn();
            // Send what the completions made sendable (a resumed session's
            // replay) before new events queue behind it.
            progressed |= self.flush_and_submit();
            for _ in 0..64 {
                match self.inbox.try_recv() {
                    Ok(msg) => {
                        progressed = true;
                        self.on_message(msg);
                    }
                    Err(_) => break,
                }
            }
            progressed |= self.end_chat_turn();
            progressed |= self.flush_and_submit();
            if !progressed {
                break;
            }
        }
    }

    fn conn(&mut self, key: ConnKey) -> Option<&mut Conn> {
        conn_in(&mut self.rings, key)
    }

    /// True if this worker's chat service had answers to send (they and
    /// their batch are in inboxes now, ours included: look again).
    fn end_chat_turn(&mut self) -> bool {
        // The requests this pass queued for other workers' chat services.
        self.wakes.flush(&self.shared.workers);
        match self.chat.as_mut() {
            Some(chat) => chat.end_turn(&self.shared.workers),
            None => false,
        }
    }

    /// Returns true if completions were handled on the way (so the turn
    /// must look again: they may have queued more to send).
    fn flush_and_submit(&mut self) -> bool {
        let reaped = self.flush();
        for r in &mut self.rings {
            if let Err(e) = r.ring.submit() {
                tracing::error!(error = %e, "io_uring submit failed");
            }
        }
        self.unreaped = 0;
        reaped || !self.queue.is_empty()
    }

    /// Submit what is pushed and handle the completions that are there
    /// (mostly the sends just submitted, which complete inline).
    fn reap(&mut self) -> bool {
        self.unreaped = 0;
        let mut any = false;
        for r in 0..self.rings.len() {
            if let Err(e) = self.rings[r].ring.submit() {
                tracing::error!(error = %e, "io_uring submit failed");
            }
            loop {
                self.reaped.clear();
                let n = self.rings[r].ring.drain(&mut self.reaped);
                for i in 0..n {
                    let c = self.reaped[i];
                    self.on_completion(r, c);
                }
                any |= n > 0;
                if n < self.reaped.capacity() {
                    break;
                }
            }
        }
        any
    }

    fn on_completion(&mut self, r: usize, c: Completion) {
        let (kind, key) = ud_parts(c.user_data);
        match kind {
            Some(Op::Accept) => self.on_accept(r, c),
            Some(Op::Recv) => self.on_recv(r, key, c),
            Some(Op::Send) => self.on_send(key, c),
            Some(Op::Close) if c.result == -libc::ECANCELED => {
                // A failed handover's close was cancelled: the socket stays ours.
            }
            Some(Op::Close) => {
                // The slot is free in the kernel; free ours, keeping what a
                // still-running send reads until its completion.
                let slot = key.slot as usize;
                self.add_used(r, -1);
                self.admission(r);
                let rs = &mut self.rings[r];
                if let Some(conn) = rs.conns[slot].take_if(|c| c.gen == key.gen) {
                    if let SendState::InFlight(slot) = conn.send {
                        self.graveyard
                            .insert(ud(Op::Send, r as u8, key.gen, key.slot), (conn.wire, slot));
                    }
                }
                self.slot_freed(r, key.slot);
            }
            Some(Op::Reject) => {
                if c.result >= 0 {
                    // Fresh socket, empty send buffer: a small write goes out at once.
                    let fd = c.result;
                    let body = br#"{"message": "this node is at capacity; retry shortly or use another node", "code": 0}"#;
                    let mut resp = Vec::with_capacity(256);
                    http::write_response(
                        503,
                        rest::JSON,
                        body,
                        false,
                        &[("Retry-After", "5")],
                        &mut resp,
                    );
                    // SAFETY: fd was just accepted for us and is closed right after.
                    unsafe {
                        libc::write(fd, resp.as_ptr().cast(), resp.len());
                        libc::close(fd);
                    }
                    WorkerMetrics::inc(&self.metrics().rejected_full);
                }
                let rs = &mut self.rings[r];
                if rs.cancelling_reject
                    || c.result == -libc::ECANCELED
                    || self.draining_until.is_some()
                {
                    rs.rejecting = false;
                    rs.cancelling_reject = false;
                    self.admission(r);
                } else {
                    rs.ring
                        .accept_plain(rs.listener.as_raw_fd(), ud(Op::Reject, r as u8, 0, 0));
                }
            }
            Some(Op::Writable) => {
                if let Some(conn) = self.conn(key) {
                    if conn.send == SendState::WaitingWritable {
                        conn.send = SendState::Idle;
                    }
                }
                self.queue_flush(key);
            }
            Some(Op::Tick) => {
                if !c.more() {
                    self.rings[0].ring.tick(TICK, ud(Op::Tick, 0, 0, 0));
                }
                // Housekeeping every 250 ms, not the event path: it may
                // allocate (the lease renewal list it hands the sidecar).
                let was = IN_TURN.with(|t| t.replace(false));
                self.on_tick();
                IN_TURN.with(|t| t.set(was));
            }
            Some(Op::Shutdown) | Some(Op::Cancel) => {}
            Some(Op::HandoverCancel) => {
                // Nothing to cancel: the receive had already ended.
                if c.result == -libc::ENOENT || c.result == -libc::EALREADY {
                    if let Some(h) = self.conn(key).and_then(|c| c.handover.as_deref_mut()) {
                        h.recv_done = true;
                    }
                    self.try_pass(key);
                }
            }
            Some(Op::Pass) => self.on_passed(r, key, c),
            Some(Op::Adopt) => self.on_adopt(r, c),
            Some(Op::PeerName) => self.on_peer_name(r, key, c),
            None => tracing::error!(kind = c.user_data >> 56, "completion of unknown kind"),
        }
    }
}

/// Slots of a fixed table that accepts and handovers may fill; the rest is
/// headroom for connections in flight when the limit is reached.
pub fn admit_limit(slots: u32) -> u32 {
    slots.saturating_sub((slots / 32).max(4))
}

/// Block until the worker's eventfd is signalled, and take its count. A
/// signal sent at any time since the last read is never lost: the count
/// stays above zero until read.
fn park(fd: RawFd) -> std::io::Result<()> {
    let mut count: u64 = 0;
    loop {
        // SAFETY: 8 bytes into a live u64, from an eventfd this worker owns.
        let n = unsafe { libc::read(fd, (&mut count as *mut u64).cast(), 8) };
        if n == 8 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if n >= 0 || e.kind() != std::io::ErrorKind::Interrupted {
            return Err(if n >= 0 {
                std::io::Error::other(format!("eventfd read returned {n} bytes"))
            } else {
                e
            });
        }
    }
}

/// CPU time consumed by the calling thread, in ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime into a local timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The live connection `key` names, borrowing only the rings (`conn_in`,
/// for reading).
fn conn_ref(rings: &[RingState], key: ConnKey) -> Option<&Conn> {
    let c = rings
        .get(key.ring as usize)?
        .conns
        .get(key.slot as usize)?
        .as_deref()?;
    (c.gen == key.gen).then_some(c)
}

/// The live connection `key` names, borrowing only the rings.
fn conn_in(rings: &mut [RingState], key: ConnKey) -> Option<&mut Conn> {
    let c = rings
        .get_mut(key.ring as usize)?
        .conns
        .get_mut(key.slot as usize)?
        .as_deref_mut()?;
    (c.gen == key.gen).then_some(c)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A signal sent before the park, or while parked, ends it; the park
    /// takes the whole count, so the next one waits for a new signal.
    #[test]
    fn park_returns_on_a_signal_sent_before_or_during_it() {
        // SAFETY: a fresh blocking eventfd, as WorkerSetup::new makes.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        assert!(fd >= 0);
        let signal = move || {
            let one: u64 = 1;
            // SAFETY: 8 bytes from a live u64 to an eventfd.
            let n = unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
            assert_eq!(n, 8);
        };
        signal();
        signal();
        park(fd).expect("a signalled eventfd is read at once");
        let readable = || {
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd on the stack, zero timeout.
            unsafe { libc::poll(&mut p, 1, 0) == 1 }
        };
        assert!(!readable(), "the park took both signals");
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            signal();
        });
        park(fd).expect("the signal from another thread ends the park");
        t.join().unwrap();
        // SAFETY: ours.
        unsafe { libc::close(fd) };
    }
}
