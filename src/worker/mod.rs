//! One worker: a pinned thread running a glommio executor whose single task
//! drives this worker's io_uring rings. The worker owns its connections,
//! sessions and resumable sessions; other threads reach it only through its
//! inbox (a bounded channel plus an eventfd write).
//!
//! Waiting: every ring signals one blocking eventfd on each completion, and
//! other threads write the same eventfd to wake us. glommio awaits it with a
//! `BufferedFile` read on its own ring, so the executor parks in the kernel
//! until there is work.

use std::collections::HashMap;
use std::net::TcpListener;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub mod mail;
pub mod metrics;
pub mod shared;

use crossbeam_channel::Receiver;
use net::http::{self, RequestHead};
use net::tls::TlsSession;
use net::uring::{Completion, Ring, RingConfig};
use net::ws::{self, Message, OpCode};
use shards::SessionId;

use crate::delivery::fanout::{EventIn, FanOut, FanOutConfig};
use crate::delivery::sendpath::{self, SendPool};
use crate::protocol::compress::{self, Compressor};
use crate::protocol::identify::{self, Resume};
use crate::protocol::rest;
use crate::protocol::session::{Action, Identity, Limits, Phase, Session};
use crate::protocol::{intents, payload, Close, CloseCode};
use crate::worker::mail::*;
use crate::worker::metrics::WorkerMetrics;
use crate::worker::shared::Shared;

// Operation kinds carried in the top byte of user_data.
const OP_ACCEPT: u8 = 1;
const OP_RECV: u8 = 2;
const OP_SEND: u8 = 3;
const OP_CLOSE: u8 = 4;
const OP_SHUTDOWN: u8 = 5;
const OP_TICK: u8 = 6;
const OP_CANCEL: u8 = 7;
/// The receive of a connection being handed over was asked to stop.
const OP_HANDOVER_CANCEL: u8 = 8;
/// Our half of a MSG_RING socket pass.
const OP_PASS: u8 = 9;
/// A socket passed to us; the low 48 bits carry the handover token.
const OP_ADOPT: u8 = 10;
/// A socket that took a short or refused send became writable again.
const OP_WRITABLE: u8 = 11;
/// A connection accepted (as an ordinary fd) only to be turned away: the
/// ring's fixed table is full.
const OP_REJECT: u8 = 12;
/// Ring entries beyond `max_unsent` a session may hold (see FanOutConfig).
const RING_HEADROOM: u32 = 64;
/// An unmatched half of a handover is dropped after this long.
const ADOPT_TIMEOUT_MS: u64 = 5_000;

const TICK: Duration = Duration::from_millis(250);
/// The longest a worker parks on its eventfd before it looks at its rings
/// and inbox anyway. The read parked on the eventfd (an io_uring READ on
/// glommio's ring, completed through an internal poll of the eventfd) has
/// been seen to stay pending with the eventfd's count far above zero: the
/// worker then slept for good while its rings and inbox filled (new
/// Identifies and handed-over connections unanswered). Bounding the park
/// turns such a lost wakeup into at most this much delay.
const PARK_MAX: Duration = Duration::from_millis(50);
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

fn ud(kind: u8, ring: u8, gen: u16, slot: u32) -> u64 {
    (kind as u64) << 56 | (ring as u64) << 48 | (gen as u64) << 32 | slot as u64
}

fn ud_parts(u: u64) -> (u8, ConnKey) {
    (
        (u >> 56) as u8,
        ConnKey {
            ring: (u >> 48) as u8,
            gen: (u >> 32) as u16,
            slot: u as u32,
        },
    )
}

enum ConnState {
    /// Reading an HTTP request head (REST, or the WebSocket upgrade).
    Http,
    /// With the fan-out session it serves after READY or RESUMED, kept
    /// here rather than in `WsConn` so a send finds it in the connection's
    /// own cache lines.
    WebSocket(Box<WsConn>, Option<u32>),
    /// Our FIN is sent (or about to be); waiting for the peer's until `deadline`.
    Closing,
}

struct WsConn {
    decoder: ws::Decoder,
    session: Session,
    /// Set when the session must not be kept for Resume after this connection.
    end_session: bool,
}

/// A connection: its socket slot's state, buffers, TLS and gateway session.
/// Moves between workers whole (see `Handover`).
pub struct Conn {
    gen: u16,
    state: ConnState,
    tls: Option<Box<TlsSession>>,
    /// Received plaintext not yet parsed.
    inbuf: Vec<u8>,
    /// Plaintext queued for the socket; every frame of one batch coalesces here.
    out: Vec<u8>,
    /// Bytes handed to the kernel (ciphertext under TLS); immutable while `sending`.
    wire: Vec<u8>,
    wire_off: usize,
    sending: bool,
    /// The send slot of the plain-text send in flight.
    send_slot: Option<u16>,
    /// Bytes of the first unsent ring entry's frame a short write already sent.
    partial: usize,
    /// A send came back short or refused: wait for POLLOUT before the next.
    waiting_writable: bool,
    queued: bool,
    /// Shut down writing once `out` and `wire` are flushed.
    close_after_flush: bool,
    write_shut: bool,
    /// Handshake deadline (Http) or linger deadline (Closing), in ms.
    deadline_ms: u64,
    /// A REST answer is awaited from the sidecar; later requests wait.
    rest_pending: bool,
    keep_alive: bool,
    /// The Close op has been submitted; the slot is being freed.
    closed: bool,
    /// Set while this connection is being moved to its session's worker.
    handover: Option<Box<Handover>>,
    /// A close that waits for the send in flight (see `begin_close`).
    close_pending: Option<Option<Close>>,
    /// Transport compression (`compress=zlib-stream`/`zstd-stream`): the
    /// connection's stream, held until the connection is gone (a close frame
    /// after the session ended still follows compressed messages). Its
    /// messages are built into `wire` and sent from there, like TLS.
    compress: Option<Box<Compressor>>,
    /// With `compress`: bytes at the front of `out` already in wire form
    /// (the 101 response); the frames after them are compressed at flush.
    out_raw: usize,
}

/// Moving a connection to the worker that owns its session (a Resume) or
/// its `(application, shard)` placement (an Identify): stop receiving here,
/// pass the socket with MSG_RING, send the state by message.
struct Handover {
    to: usize,
    action: Option<Action>,
    recv_done: bool,
    passed: bool,
    /// Pairs our message with the socket's arrival on the new owner's ring.
    token: u64,
}

/// The two halves of an incoming handover, which arrive in either order.
#[derive(Default)]
struct Adoption {
    slot: Option<(usize, Result<u32, i32>)>,
    conn: Option<(Box<Conn>, Action)>,
    since_ms: u64,
}

impl Conn {
    fn new(gen: u16, tls: Option<Box<TlsSession>>, deadline_ms: u64) -> Conn {
        Conn {
            gen,
            state: ConnState::Http,
            tls,
            inbuf: Vec::new(),
            out: Vec::new(),
            wire: Vec::new(),
            wire_off: 0,
            sending: false,
            send_slot: None,
            partial: 0,
            waiting_writable: false,
            queued: false,
            close_after_flush: false,
            write_shut: false,
            deadline_ms,
            rest_pending: false,
            keep_alive: true,
            closed: false,
            handover: None,
            close_pending: None,
            compress: None,
            out_raw: 0,
        }
    }
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
}

pub struct Worker {
    id: usize,
    shared: Arc<Shared>,
    inbox: Receiver<ToWorker>,
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
    overflow: Vec<(u32, ConnKey)>,
    gather: Vec<u8>,
    mentions: Vec<u64>,
    /// Buffers (and send slots) of connections closed while their send was
    /// in flight, kept until the kernel is done with them.
    graveyard: HashMap<u64, (Vec<u8>, Option<u16>)>,
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
    lease_pairs: Vec<(u64, u64)>,
    /// Parks that timed out with the eventfd signalled (see PARK_MAX).
    lost_wakeups: u64,
}

/// Everything a worker needs, built on the main thread so setup errors
/// (bind, ring limits) are reported before the node says it is ready.
pub struct WorkerSetup {
    pub rings: Vec<(Ring, TcpListener)>,
    pub wake_fd: RawFd,
    pub fan: FanOut,
}

impl WorkerSetup {
    pub fn new(
        shared_cfg: &crate::config::Config,
        rings: usize,
        slots_per_ring: u32,
    ) -> std::io::Result<WorkerSetup> {
        // SAFETY: a plain eventfd; blocking on purpose (glommio reads it).
        let wake_fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if wake_fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let mut out = Vec::new();
        for _ in 0..rings {
            let ring = Ring::new(&RingConfig {
                sq_entries: shared_cfg.ring.sq_entries,
                cq_entries: shared_cfg.ring.cq_entries,
                fixed_files: slots_per_ring,
                recv_buffers: shared_cfg.ring.recv_buffers,
                recv_buffer_size: shared_cfg.ring.recv_buffer_size,
            })?;
            ring.register_eventfd(wake_fd)?;
            let listener = net::uring::listen_reuseport(shared_cfg.gateway_addr, 4096)?;
            if shared_cfg.limits.socket_send_buffer_bytes > 0 {
                net::uring::set_send_buffer(&listener, shared_cfg.limits.socket_send_buffer_bytes)?;
            }
            out.push((ring, listener));
        }
        let ev = &shared_cfg.events;
        let fan = FanOut::new(
            FanOutConfig {
                arena_bytes: ev.arena_bytes,
                // Auto: every session may hold two chunks (its READY and
                // recent history) plus room for backlogs.
                ring_chunks: if ev.ring_chunks > 0 {
                    ev.ring_chunks
                } else {
                    shared_cfg
                        .limits
                        .max_sessions_per_worker
                        .saturating_mul(2)
                        .saturating_add(16_384)
                },
                ring: ringbuf::RingConfig {
                    max_unsent: ev.max_unsent,
                    // Headroom past the unsent bound for the event that finds
                    // it reached and for RESUMED after a full replay.
                    max_held: ev.max_held.max(ev.max_unsent + RING_HEADROOM),
                    max_unsent_bytes: ev.max_unsent_bytes,
                },
                resume_window_ms: shared_cfg.limits.resume_window_ms,
            },
            shared_cfg.limits.max_sessions_per_worker as usize,
        )
        .map_err(std::io::Error::other)?;
        Ok(WorkerSetup {
            rings: out,
            wake_fd,
            fan,
        })
    }
}

impl Worker {
    pub fn new(
        id: usize,
        shared: Arc<Shared>,
        inbox: Receiver<ToWorker>,
        setup: WorkerSetup,
    ) -> Worker {
        let send_slots = shared.cfg.events.send_slots;
        let cfg = &shared.cfg;
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
                }
            })
            .collect();
        let max_conns: usize = rings.iter().map(|r| r.conns.len()).sum();
        let fan = setup.fan;
        Worker {
            id,
            shared,
            inbox,
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
            lost_wakeups: 0,
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
        // SAFETY: dup gives glommio its own descriptor of the eventfd to own and close.
        let waiter = unsafe { glommio::io::BufferedFile::from_raw_fd(libc::dup(wake_fd)) };
        let mut reading = None;
        for r in 0..self.rings.len() {
            self.arm_accept(r);
        }
        self.rings[0].ring.tick(TICK, ud(OP_TICK, 0, 0, 0));
        self.tick_armed = true;
        self.shared.ready_workers.fetch_add(1, Ordering::SeqCst);
        tracing::info!(
            worker = self.id,
            rings = self.rings.len(),
            "worker listening"
        );
        loop {
            // CPU time of this thread (user + system, including the kernel's
            // send work done inline in submit), not wall time.
            let t0 = thread_cpu_ns();
            self.turn();
            WorkerMetrics::add(&self.metrics().busy_ns, thread_cpu_ns().saturating_sub(t0));
            if self.finished() {
                break;
            }
            for r in &mut self.rings {
                if let Err(e) = r.ring.submit() {
                    tracing::error!(worker = self.id, error = %e, "io_uring submit failed");
                }
            }
            // The read stays pending across parks that end by the bound
            // (a dropped read could still take the next signal); it is only
            // replaced once it completed, or when it is plainly stuck.
            let read = reading.get_or_insert_with(|| Box::pin(waiter.read_at(0, 8)));
            match park(read.as_mut(), PARK_MAX).await {
                Some(r) => {
                    reading = None;
                    if let Err(e) = r {
                        tracing::error!(worker = self.id, error = %e, "waiting on the worker eventfd failed");
                        glommio::timer::sleep(Duration::from_millis(1)).await;
                    }
                }
                None if eventfd_readable(wake_fd) => {
                    // Signalled, yet the read parked on it did not complete:
                    // without the bound we would sleep here for good. Drop
                    // (cancel) it; the next park reads afresh. (A signal
                    // landing just at the bound counts here too; harmless.)
                    reading = None;
                    self.lost_wakeups += 1;
                    if self.lost_wakeups.is_power_of_two() {
                        tracing::warn!(
                            worker = self.id,
                            lost = self.lost_wakeups,
                            "eventfd wakeup lost; recovered by the park bound"
                        );
                    }
                }
                None => {}
            }
        }
        tracing::info!(worker = self.id, "worker stopped");
    }

    fn finished(&self) -> bool {
        match self.draining_until {
            Some(until) => self.open == 0 || self.now_ms() > until + LINGER_MS + 1000,
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
            progressed |= self.flush_and_submit();
            if !progressed {
                break;
            }
        }
    }

    fn conn(&mut self, key: ConnKey) -> Option<&mut Conn> {
        conn_in(&mut self.rings, key)
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

    /// Accept into the fixed table while it has room below the admission
    /// limit; past it, turn connections away with a 503 instead of leaving
    /// them in the listen queue (an accept into a full table fails only
    /// after taking the connection off the queue, losing it silently).
    fn admission(&mut self, r: usize) {
        if self.draining_until.is_some() {
            return;
        }
        let ud_accept = ud(OP_ACCEPT, r as u8, 0, 0);
        let ud_reject = ud(OP_REJECT, r as u8, 0, 0);
        let rs = &mut self.rings[r];
        if rs.used >= rs.admit_limit {
            if rs.accepting && !rs.cancelling_accept {
                rs.cancelling_accept = true;
                rs.ring
                    .cancel_user_data(ud_accept, ud(OP_CANCEL, r as u8, 0, 0));
            }
            if !rs.accepting && !rs.rejecting {
                rs.rejecting = true;
                rs.ring.accept_plain(rs.listener.as_raw_fd(), ud_reject);
            }
        } else {
            if rs.rejecting && !rs.cancelling_reject {
                rs.cancelling_reject = true;
                rs.ring
                    .cancel_user_data(ud_reject, ud(OP_CANCEL, r as u8, 0, 0));
            }
            if !rs.rejecting && !rs.accepting {
                self.arm_accept(r);
            }
        }
    }

    /// Track the slots in use in ring `r`'s table, and publish it so other
    /// workers do not hand connections to a full ring.
    fn add_used(&mut self, r: usize, delta: i32) {
        let rs = &mut self.rings[r];
        rs.used = rs.used.checked_add_signed(delta).expect("slot accounting");
        self.shared.ring_load[self.id][r].store(rs.used, Ordering::Relaxed);
    }

    fn arm_accept(&mut self, r: usize) {
        let rs = &mut self.rings[r];
        if rs.accepting || self.draining_until.is_some() {
            return;
        }
        rs.accepting = true;
        rs.ring
            .accept_multi(rs.listener.as_raw_fd(), ud(OP_ACCEPT, r as u8, 0, 0));
    }

    fn on_completion(&mut self, r: usize, c: Completion) {
        let (kind, key) = ud_parts(c.user_data);
        match kind {
            OP_ACCEPT => self.on_accept(r, c),
            OP_RECV => self.on_recv(r, key, c),
            OP_SEND => self.on_send(key, c),
            OP_CLOSE if c.result == -libc::ECANCELED => {
                // A failed handover's close was cancelled: the socket stays ours.
            }
            OP_CLOSE => {
                // The slot is free in the kernel; free ours, keeping what a
                // still-running send reads until its completion.
                let slot = key.slot as usize;
                self.add_used(r, -1);
                self.admission(r);
                let rs = &mut self.rings[r];
                if let Some(conn) = rs.conns[slot].take_if(|c| c.gen == key.gen) {
                    if conn.sending {
                        self.graveyard.insert(
                            ud(OP_SEND, r as u8, key.gen, key.slot),
                            (conn.wire, conn.send_slot),
                        );
                    }
                }
            }
            OP_REJECT => {
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
                        .accept_plain(rs.listener.as_raw_fd(), ud(OP_REJECT, r as u8, 0, 0));
                }
            }
            OP_WRITABLE => {
                if let Some(conn) = self.conn(key) {
                    conn.waiting_writable = false;
                }
                self.queue_flush(key);
            }
            OP_TICK => {
                if !c.more() {
                    self.rings[0].ring.tick(TICK, ud(OP_TICK, 0, 0, 0));
                }
                // Housekeeping every 250 ms, not the event path: it may
                // allocate (the lease renewal list it hands the sidecar).
                let was = IN_TURN.with(|t| t.replace(false));
                self.on_tick();
                IN_TURN.with(|t| t.set(was));
            }
            OP_SHUTDOWN | OP_CANCEL => {}
            OP_HANDOVER_CANCEL => {
                // Nothing to cancel: the receive had already ended.
                if c.result == -libc::ENOENT || c.result == -libc::EALREADY {
                    if let Some(h) = self.conn(key).and_then(|c| c.handover.as_deref_mut()) {
                        h.recv_done = true;
                    }
                    self.try_pass(key);
                }
            }
            OP_PASS => self.on_passed(r, key, c),
            OP_ADOPT => {
                let token = c.user_data & 0xFFFF_FFFF_FFFF;
                let now = self.now_ms();
                if c.result >= 0 {
                    self.add_used(r, 1);
                    self.admission(r);
                }
                let a = self.adopting.entry(token).or_insert_with(|| Adoption {
                    since_ms: now,
                    ..Default::default()
                });
                a.slot = Some((
                    r,
                    if c.result >= 0 {
                        Ok(c.result as u32)
                    } else {
                        Err(c.result)
                    },
                ));
                self.try_adopt(token);
            }
            _ => tracing::error!(kind, "completion of unknown kind"),
        }
    }

    fn on_accept(&mut self, r: usize, c: Completion) {
        if !c.more() {
            self.rings[r].accepting = false;
            self.rings[r].cancelling_accept = false;
        }
        if c.result >= 0 {
            self.add_used(r, 1);
        }
        if c.result < 0 {
            WorkerMetrics::inc(&self.metrics().accept_errors);
            let err = c.error().expect("negative");
            if c.result == -libc::ENFILE || c.result == -libc::EMFILE {
                tracing::warn!(
                    worker = self.id,
                    ring = r,
                    "fixed file table full: answering 503 on this ring until a slot frees"
                );
                // Adoptions took the headroom: turn connections away until slots free.
                self.admission(r);
            } else if c.result != -libc::ECANCELED {
                tracing::warn!(worker = self.id, ring = r, error = %err, "accept failed");
            }
            self.admission(r);
            return;
        }
        self.admission(r);
        let slot = c.result as u32;
        let now = self.now_ms();
        let tls = match &self.shared.tls {
            Some(cfg) => match TlsSession::new(cfg.clone()) {
                Ok(t) => Some(Box::new(t)),
                Err(e) => {
                    tracing::error!(error = %e, "TLS session setup failed");
                    self.rings[r]
                        .ring
                        .close(slot, ud(OP_CLOSE, r as u8, 0, slot));
                    return;
                }
            },
            None => None,
        };
        let rs = &mut self.rings[r];
        let gen = rs.gens[slot as usize].wrapping_add(1);
        rs.gens[slot as usize] = gen;
        debug_assert!(
            rs.conns[slot as usize].is_none(),
            "kernel gave a slot we still hold"
        );
        rs.conns[slot as usize] = Some(Box::new(Conn::new(
            gen,
            tls,
            now + self.shared.cfg.limits.handshake_timeout_ms,
        )));
        rs.ring.recv_multi(slot, ud(OP_RECV, r as u8, gen, slot));
        self.open += 1;
        WorkerMetrics::inc(&self.metrics().connections_accepted);
        WorkerMetrics::inc(&self.metrics().connections_open);
        if self.draining_until.is_some() {
            self.begin_close(
                ConnKey {
                    ring: r as u8,
                    gen,
                    slot,
                },
                None,
            );
        }
    }

    fn on_recv(&mut self, r: usize, key: ConnKey, c: Completion) {
        let bid = c.buffer_id();
        if !c.more() {
            let handing_over = match self.conn(key).and_then(|c| c.handover.as_deref_mut()) {
                Some(h) => {
                    h.recv_done = true;
                    true
                }
                None => false,
            };
            if handing_over {
                if c.result > 0 {
                    let b = bid.expect("a receive with data has a buffer");
                    let data = self.rings[r].ring.buffer(b, c.result as usize).to_vec();
                    if let Some(conn) = self.conn(key) {
                        conn.inbuf.extend_from_slice(&data);
                    }
                    self.rings[r].ring.recycle(b);
                }
                self.try_pass(key);
                return;
            }
        }
        let alive = self.conn(key).map(|c| !c.closed).unwrap_or(false);
        if !alive {
            if let Some(b) = bid {
                self.rings[r].ring.recycle(b);
            }
            return;
        }
        if c.result > 0 {
            let b = bid.expect("a receive with data has a buffer");
            // Copy out of the provided buffer so it goes straight back to the kernel.
            let max_in = http::MAX_HEAD.max(self.shared.cfg.limits.inbound_message_bytes + 14) * 2;
            let (rs_ring, conns) = {
                let rs = &mut self.rings[r];
                (&mut rs.ring, &mut rs.conns)
            };
            let conn = conns[key.slot as usize].as_deref_mut().expect("alive");
            let data = rs_ring.buffer(b, c.result as usize);
            let mut fail = None;
            match conn.tls.as_deref_mut() {
                Some(tls) => {
                    if let Err(e) = tls.receive(data, &mut conn.inbuf, max_in) {
                        tracing::debug!(error = %e, "TLS error");
                        fail = Some(());
                    }
                }
                None => {
                    if matches!(conn.state, ConnState::Closing) {
                        // Draining the peer's leftovers while we linger.
                    } else if conn.inbuf.len() + data.len() > max_in {
                        fail = Some(());
                    } else {
                        conn.inbuf.extend_from_slice(data);
                    }
                }
            }
            rs_ring.recycle(b);
            if fail.is_some() {
                self.begin_close(
                    key,
                    Some(Close::new(
                        CloseCode::DecodeError,
                        "decode error: input exceeds limits",
                    )),
                );
            } else {
                self.queue_flush(key);
                self.process_input(key);
            }
            if !c.more() {
                if let Some(conn) = self.conn(key) {
                    if !conn.closed && conn.handover.is_none() {
                        self.rings[r].ring.recv_multi(key.slot, c.user_data);
                    }
                }
            }
            return;
        }
        if c.result == -libc::ENOBUFS {
            // Every provided buffer was in use; ask again.
            self.rings[r].ring.recv_multi(key.slot, c.user_data);
            return;
        }
        // EOF or error: the peer is gone (resumable unless it said otherwise).
        self.finish(key);
    }

    fn on_send(&mut self, key: ConnKey, c: Completion) {
        if !self.graveyard.is_empty() {
            if let Some((_buf, slot)) = self.graveyard.remove(&c.user_data) {
                // The kernel is done with a dead connection's buffers.
                if let Some(id) = slot {
                    self.pool.put(id);
                }
                return;
            }
        }
        let oldest = self.fan.arena.oldest();
        let metrics = &self.shared.metrics[self.id];
        let Some(conn) = conn_in(&mut self.rings, key) else {
            return;
        };
        conn.sending = false;
        let slot_id = conn.send_slot.take();
        if c.result == -libc::EAGAIN {
            // Socket buffer full: nothing went; wait until it drains.
            if let Some(id) = slot_id {
                self.pool.put(id);
            }
            self.wait_writable(key);
            return;
        }
        if c.result < 0 {
            if let Some(id) = slot_id {
                self.pool.put(id);
            }
            self.finish(key);
            return;
        }
        let sent = c.result as usize;
        WorkerMetrics::add(&metrics.bytes_out, sent as u64);
        let short;
        // Ring entries still unsent after this send (u32::MAX: not known).
        let mut unsent = u32::MAX;
        match slot_id {
            None => {
                // TLS: ciphertext from `wire`.
                conn.wire_off += sent;
                short = conn.wire_off < conn.wire.len();
                if !short {
                    conn.wire.clear();
                    conn.wire_off = 0;
                }
            }
            Some(id) => {
                let slot = self.pool.slot(id);
                let (control, entries, partial) = sendpath::account(slot, sent, conn.partial);
                let torn = slot.entries > 0 && slot.min_pos < oldest;
                let total_entries = slot.entries;
                let wanted = slot.msg.msg_iovlen;
                self.pool.put(id);
                conn.wire_off += control;
                if conn.wire_off >= conn.wire.len() {
                    conn.wire.clear();
                    conn.wire_off = 0;
                }
                conn.partial = partial;
                short = entries < total_entries || conn.wire_off > 0 || (wanted > 0 && sent == 0);
                let sid = match &conn.state {
                    ConnState::WebSocket(_, sid) => *sid,
                    _ => None,
                };
                unsent = match sid {
                    Some(sid) => self.fan.mark_sent(sid, entries),
                    None => 0,
                };
                if torn {
                    // The arena wrapped while the kernel read from it: what
                    // went out may be corrupt. The session can Resume.
                    self.begin_close(
                        key,
                        Some(Close::new(
                            CloseCode::UnknownError,
                            "send raced an arena wrap: resume",
                        )),
                    );
                    return;
                }
            }
        }
        let Some(conn) = conn_in(&mut self.rings, key) else {
            return;
        };
        if conn.wire.capacity() > KEEP_BUFFER && conn.wire.is_empty() {
            conn.wire = Vec::new();
        }
        if let Some(close) = conn.close_pending.take() {
            self.begin_close(key, close);
            return;
        }
        if conn.handover.is_some() {
            self.try_pass(key);
        } else if short {
            self.wait_writable(key);
        } else if unsent > 0
            || !conn.out.is_empty()
            || !conn.wire.is_empty()
            || conn.close_after_flush
        {
            self.queue_flush(key);
        }
        // Else nothing is left to send: the next delivery queues the connection.
    }

    fn wait_writable(&mut self, key: ConnKey) {
        let Some(conn) = self.conn(key) else { return };
        if conn.waiting_writable || conn.closed {
            return;
        }
        conn.waiting_writable = true;
        self.rings[key.ring as usize]
            .ring
            .poll_writable(key.slot, ud(OP_WRITABLE, key.ring, key.gen, key.slot));
    }

    /// Note that a connection has something to send; sends go out at the end of the turn.
    fn queue_flush(&mut self, key: ConnKey) {
        if let Some(conn) = self.conn(key) {
            if !conn.queued {
                conn.queued = true;
                self.queue.push(key);
            }
        }
    }

    /// One send per connection per turn: its control frames, then a batch of
    /// its ring's unsent entries, in one vectored send (plain) or one
    /// encrypted buffer (TLS).
    fn flush(&mut self) -> bool {
        // Connections deferred for lack of a send slot go first. The three
        // lists keep their capacity (every connection fits in each), so
        // queueing never allocates; completions reaped below queue into
        // `queue` for the next flush.
        debug_assert!(self.flushing.is_empty());
        std::mem::swap(&mut self.flushing, &mut self.deferred);
        self.flushing.append(&mut self.queue);
        let mut reaped = false;
        for i in 0..self.flushing.len() {
            let key = self.flushing[i];
            if self.unreaped >= REAP_EVERY {
                reaped |= self.reap();
            }
            let Some(conn) = conn_in(&mut self.rings, key) else {
                continue;
            };
            conn.queued = false;
            if conn.sending || conn.closed || conn.handover.is_some() || conn.waiting_writable {
                continue;
            }
            // Most visits from here push a send.
            self.unreaped += 1;
            let ud_send = ud(OP_SEND, key.ring, key.gen, key.slot);
            if (conn.tls.is_some() || conn.compress.is_some()) && !conn.wire.is_empty() {
                // A short send left bytes that are already in wire form
                // (ciphertext, compressed frames): they go first, as they are.
                conn.sending = true;
                let rest = &conn.wire[conn.wire_off..];
                let (ptr, len) = (rest.as_ptr(), rest.len() as u32);
                // SAFETY: `wire` is untouched until the completion (or the graveyard holds it).
                unsafe {
                    self.rings[key.ring as usize]
                        .ring
                        .send(key.slot, ptr, len, ud_send)
                };
                continue;
            }
            if conn.compress.is_some() {
                self.flush_compressed(key);
                continue;
            }
            if conn.wire.is_empty() && !conn.out.is_empty() {
                std::mem::swap(&mut conn.out, &mut conn.wire);
                conn.wire_off = 0;
            }
            let sid = match &conn.state {
                ConnState::WebSocket(_, sid) => *sid,
                _ => None,
            };
            let ring = sid
                .and_then(|sid| self.fan.get(sid))
                .map(|s| (&s.ring, &self.fan.slab));
            let has_entries = ring.map(|(r, _)| r.len_unsent() > 0).unwrap_or(false);
            if conn.wire.is_empty()
                && !has_entries
                && conn.tls.as_ref().map(|t| !t.wants_write()).unwrap_or(true)
            {
                if conn.close_after_flush && !conn.write_shut {
                    conn.write_shut = true;
                    let r = &mut self.rings[key.ring as usize].ring;
                    r.shutdown(
                        key.slot,
                        libc::SHUT_WR,
                        ud(OP_SHUTDOWN, key.ring, key.gen, key.slot),
                    );
                }
                continue;
            }
            let Some(id) = self.pool.take() else {
                // Every slot is in the kernel: try again next turn.
                conn.queued = true;
                self.deferred.extend_from_slice(&self.flushing[i..]);
                break;
            };
            let slot = self.pool.slot(id);
            let built = sendpath::build(
                slot,
                &conn.wire[conn.wire_off..],
                ring,
                &self.fan.arena,
                conn.partial,
            );
            let total = match built {
                Ok(t) => t,
                Err(sendpath::Lost) => {
                    self.pool.put(id);
                    self.begin_close(
                        key,
                        Some(Close::new(
                            CloseCode::UnknownError,
                            "events were overwritten before they could be sent: resume",
                        )),
                    );
                    continue;
                }
            };
            match conn.tls.as_deref_mut() {
                Some(tls) => {
                    // TLS encrypts a copy: everything in the batch counts as sent now.
                    self.gather.clear();
                    sendpath::gather(slot, &mut self.gather);
                    let (_, entries, _) = sendpath::account(slot, total, conn.partial);
                    self.pool.put(id);
                    conn.wire.clear();
                    conn.wire_off = 0;
                    conn.partial = 0;
                    if !self.gather.is_empty() && tls.write_plaintext(&[&self.gather]).is_err() {
                        self.begin_close(key, None);
                        continue;
                    }
                    tls.take_ciphertext(&mut conn.wire);
                    if let Some(sid) = sid {
                        self.fan.mark_sent(sid, entries);
                    }
                    if conn.wire.is_empty() {
                        continue;
                    }
                    conn.sending = true;
                    let (ptr, len) = (conn.wire.as_ptr(), conn.wire.len() as u32);
                    // SAFETY: `wire` is untouched until the completion (or the graveyard holds it).
                    unsafe {
                        self.rings[key.ring as usize]
                            .ring
                            .send(key.slot, ptr, len, ud_send)
                    };
                }
                None => {
                    if total == 0 {
                        self.pool.put(id);
                        continue;
                    }
                    conn.sending = true;
                    conn.send_slot = Some(id);
                    let msg = &slot.msg as *const libc::msghdr;
                    // SAFETY: the slot, `wire` and the arena bytes stay valid until the
                    // completion: the slot is held, `wire` is not touched while sending,
                    // and a non-waiting send finishes before the arena can move on.
                    unsafe {
                        self.rings[key.ring as usize]
                            .ring
                            .sendmsg_nowait(key.slot, msg, ud_send)
                    };
                }
            }
        }
        self.flushing.clear();
        reaped
    }

    /// `flush` for a connection with transport compression (its `wire` is
    /// empty): its control frames, then a batch of its ring's unsent entries,
    /// each compressed into one binary frame in `wire` (or, under TLS, in
    /// the worker's scratch and then encrypted into `wire`), sent in one send.
    fn flush_compressed(&mut self, key: ConnKey) {
        let Some(conn) = conn_in(&mut self.rings, key) else {
            return;
        };
        let sid = match &conn.state {
            ConnState::WebSocket(_, sid) => *sid,
            _ => None,
        };
        let tls = conn.tls.is_some();
        let dst = if tls {
            self.gather.clear();
            &mut self.gather
        } else {
            &mut conn.wire
        };
        let comp = conn
            .compress
            .as_deref_mut()
            .expect("a compressed connection");
        let raw = conn.out_raw.min(conn.out.len());
        dst.extend_from_slice(&conn.out[..raw]);
        let mut failed = false;
        let (mut bytes_in, mut bytes_out) = (0, 0);
        match compress::reframe(comp, &conn.out[raw..], dst) {
            Ok((i, o)) => (bytes_in, bytes_out) = (i, o),
            Err(e) => {
                tracing::warn!(error = %e, "compressing control frames");
                failed = true;
            }
        }
        conn.out.clear();
        conn.out_raw = 0;
        let mut done = sendpath::Compressed::default();
        if !failed {
            if let Some(s) = sid.and_then(|sid| self.fan.get(sid)) {
                match sendpath::build_compressed(
                    comp,
                    &s.ring,
                    &self.fan.slab,
                    &self.fan.arena,
                    dst,
                ) {
                    Ok(d) => done = d,
                    Err(e) => {
                        tracing::warn!(error = %e, "compressing dispatches");
                        failed = true;
                    }
                }
            }
        }
        let m = &self.shared.metrics[self.id];
        WorkerMetrics::add(&m.compress_bytes_in, bytes_in + done.bytes_in);
        WorkerMetrics::add(&m.compress_bytes_out, bytes_out + done.bytes_out);
        if let (Some(sid), true) = (sid, done.entries > 0) {
            self.fan.mark_sent(sid, done.entries);
        }
        let conn = conn_in(&mut self.rings, key).expect("live");
        if let Some(tls) = conn.tls.as_deref_mut() {
            if !self.gather.is_empty() && tls.write_plaintext(&[&self.gather]).is_err() {
                self.begin_close(key, None);
                return;
            }
            tls.take_ciphertext(&mut conn.wire);
        }
        conn.wire_off = 0;
        if conn.wire.is_empty() {
            if failed || done.lost {
                self.compressed_failed(key, failed);
            } else if conn.close_after_flush && !conn.write_shut {
                conn.write_shut = true;
                self.rings[key.ring as usize].ring.shutdown(
                    key.slot,
                    libc::SHUT_WR,
                    ud(OP_SHUTDOWN, key.ring, key.gen, key.slot),
                );
            }
            return;
        }
        conn.sending = true;
        let (ptr, len) = (conn.wire.as_ptr(), conn.wire.len() as u32);
        // SAFETY: `wire` is untouched until the completion (or the graveyard holds it).
        unsafe {
            self.rings[key.ring as usize].ring.send(
                key.slot,
                ptr,
                len,
                ud(OP_SEND, key.ring, key.gen, key.slot),
            )
        };
        if failed || done.lost {
            // Closes once this send completes (begin_close waits for it).
            self.compressed_failed(key, failed);
        }
    }

    fn compressed_failed(&mut self, key: ConnKey, failed: bool) {
        self.begin_close(
            key,
            Some(Close::new(
                CloseCode::UnknownError,
                if failed {
                    "compression failed: resume"
                } else {
                    "events were overwritten before they could be sent: resume"
                },
            )),
        );
    }

    /// Parse everything buffered for a connection.
    fn process_input(&mut self, key: ConnKey) {
        loop {
            let now = self.now_ms();
            let Some(conn) = conn_in(&mut self.rings, key) else {
                return;
            };
            if conn.closed || conn.close_after_flush || conn.handover.is_some() {
                return;
            }
            match &mut conn.state {
                ConnState::Closing => {
                    conn.inbuf.clear();
                    return;
                }
                ConnState::Http => {
                    if conn.rest_pending || conn.inbuf.is_empty() {
                        return;
                    }
                    match http::parse_head(&conn.inbuf) {
                        Ok(None) => return,
                        Err(e) => {
                            let status = e.status();
                            http::write_response(
                                status,
                                rest::JSON,
                                br#"{"message": "bad request", "code": 0}"#,
                                false,
                                &[],
                                &mut conn.out,
                            );
                            conn.inbuf.clear();
                            self.close_after_flush(key);
                            return;
                        }
                        Ok(Some((n, head))) => {
                            conn.inbuf.drain(..n);
                            self.on_http_request(key, head, now);
                        }
                    }
                }
                ConnState::WebSocket(wsc, _) => {
                    let step = {
                        let WsConn {
                            decoder, session, ..
                        } = &mut **wsc;
                        match decoder.decode(&mut conn.inbuf) {
                            Ok(None) => return,
                            Err(e) => Step::Close(ws_error_close(e), 0),
                            Ok(Some((n, None))) => Step::Consumed(n),
                            Ok(Some((n, Some(msg)))) => match msg {
                                Message::Text(t) => match identify::parse(t.as_bytes(), &mut self.scratch) {
                                    Err(close) => Step::Close(close, n),
                                    Ok(p) => match session.on_payload(p, now, &mut conn.out) {
                                        Ok(Action::None) => Step::Consumed(n),
                                        Ok(a) => Step::Act(a, n),
                                        Err(close) => Step::Close(close, n),
                                    },
                                },
                                Message::Binary(_) => Step::Close(
                                    Close::new(CloseCode::DecodeError, "decode error: binary payloads are not supported (encoding=json)"),
                                    n,
                                ),
                                Message::Ping(p) => {
                                    ws::encode_frame(OpCode::Pong, p, &mut conn.out);
                                    Step::Consumed(n)
                                }
                                Message::Pong(_) => Step::Consumed(n),
                                Message::Close(code, _) => Step::PeerClose(code, n),
                            },
                        }
                    };
                    let n = match &step {
                        Step::Consumed(n)
                        | Step::Act(_, n)
                        | Step::Close(_, n)
                        | Step::PeerClose(_, n) => *n,
                    };
                    conn.inbuf.drain(..n.min(conn.inbuf.len()));
                    if conn.inbuf.capacity() > KEEP_BUFFER && conn.inbuf.is_empty() {
                        conn.inbuf = Vec::new();
                    }
                    self.queue_flush(key);
                    match step {
                        Step::Consumed(_) => {}
                        Step::Act(a, _) => self.on_action(key, a),
                        Step::Close(close, _) => {
                            self.begin_close(key, Some(close));
                            return;
                        }
                        Step::PeerClose(code, _) => {
                            self.on_peer_close(key, code);
                            return;
                        }
                    }
                }
            }
        }
    }

    fn on_http_request(&mut self, key: ConnKey, head: RequestHead, now: u64) {
        let gateway_url = self.shared.gateway_url.clone();
        let worker = self.id;
        let max_message = self.shared.cfg.limits.inbound_message_bytes;
        let limits = self.limits;
        let Some(conn) = self.conn(key) else { return };
        conn.keep_alive = head.keep_alive;
        if rest::is_api(&head.path) {
            WorkerMetrics::inc(&self.shared.metrics[worker].rest_requests);
            let conn = self.conn(key).expect("live");
            match rest::route(&head.method, &head.path) {
                rest::Route::Gateway => http::write_response(
                    200,
                    rest::JSON,
                    &rest::gateway_body(&gateway_url),
                    head.keep_alive,
                    &[],
                    &mut conn.out,
                ),
                rest::Route::NotFound => http::write_response(
                    404,
                    rest::JSON,
                    rest::NOT_FOUND,
                    head.keep_alive,
                    &[],
                    &mut conn.out,
                ),
                rest::Route::MethodNotAllowed => http::write_response(
                    405,
                    rest::JSON,
                    rest::METHOD_NOT_ALLOWED,
                    head.keep_alive,
                    &[],
                    &mut conn.out,
                ),
                rest::Route::Authed(route) => {
                    conn.rest_pending = true;
                    let token = rest::bearer(head.authorization.as_deref());
                    let req = SidecarRequest::Rest {
                        worker,
                        conn: key,
                        route,
                        token,
                    };
                    if self.shared.sidecar.try_send(req).is_err() {
                        let conn = self.conn(key).expect("live");
                        conn.rest_pending = false;
                        http::write_response(
                            503,
                            rest::JSON,
                            br#"{"message": "busy", "code": 0}"#,
                            false,
                            &[],
                            &mut conn.out,
                        );
                        self.close_after_flush(key);
                        return;
                    }
                }
            }
            if head.content_length > 0 {
                // We serve no request bodies; rather than skip one, end the connection.
                self.close_after_flush(key);
            } else if !head.keep_alive {
                let pending = self.conn(key).map(|c| c.rest_pending).unwrap_or(false);
                if !pending {
                    self.close_after_flush(key);
                }
            }
            return;
        }
        if !head.is_websocket_upgrade || head.websocket_key.is_none() {
            let status = if head.is_websocket_upgrade
                || !head.websocket_version_ok && head.websocket_key.is_some()
            {
                400
            } else {
                426
            };
            http::write_response(
                status,
                rest::JSON,
                rest::UPGRADE_REQUIRED,
                false,
                &[("Upgrade", "websocket")],
                &mut conn.out,
            );
            self.close_after_flush(key);
            return;
        }
        // Transport compression, if asked for and the node-wide cap allows;
        // beyond it the connection gets plain text frames.
        let compressor = match compress::Kind::from_query(http::query_param(
            &head.query,
            "compress",
        )) {
            None => None,
            Some(kind) => match self.shared.compress_budget.try_take() {
                Some(permit) => match Compressor::new(kind, Some(permit)) {
                    Ok(c) => Some(Box::new(c)),
                    Err(e) => {
                        tracing::warn!(error = %e, "compression stream not created: serving plain text");
                        None
                    }
                },
                None => {
                    WorkerMetrics::inc(&self.shared.metrics[worker].compression_refused);
                    None
                }
            },
        };
        let conn = self.conn(key).expect("live");
        http::write_upgrade_response(
            head.websocket_key.as_deref().expect("checked"),
            &mut conn.out,
        );
        if compressor.is_some() {
            conn.out_raw = conn.out.len();
            conn.compress = compressor;
        }
        let mut wsc = Box::new(WsConn {
            decoder: ws::Decoder::new(max_message),
            session: Session::new(limits, now, &mut conn.out),
            end_session: false,
        });
        let refusal = upgrade_refusal(&head.query);
        wsc.end_session = refusal.is_some();
        conn.state = ConnState::WebSocket(wsc, None);
        conn.deadline_ms = u64::MAX;
        self.queue_flush(key);
        if let Some(close) = refusal {
            self.begin_close(key, Some(close));
        }
    }

    fn on_action(&mut self, key: ConnKey, action: Action) {
        match action {
            Action::None => {}
            Action::Identify(identify) => {
                // The session belongs on the worker its (application, shard) is placed on.
                let workers = self.shared.workers.len() as u32;
                if let Some(app) = registry::token::parse_app_id(&identify.token) {
                    let to = shards::worker_for(app, identify.shard.0, workers) as usize;
                    if to != self.id {
                        self.start_handover(key, to, Action::Identify(identify));
                        return;
                    }
                }
                self.send_identify(key, identify);
            }
            Action::Resume(r) => self.on_resume(key, r),
            Action::Ack(seq) => {
                let Some(sid) = self.session_of(key) else {
                    return;
                };
                self.fan.ack(sid, seq);
            }
            Action::MembersChunk { guild_ids, nonce } => {
                let Some(sid) = self.session_of(key) else {
                    return;
                };
                let Some(id) = self.fan.get(sid).map(|s| s.identity.clone()) else {
                    return;
                };
                let now = self.now_ms();
                for g in guild_ids {
                    if id.guild(g).is_none() {
                        continue;
                    }
                    let d = serde_json::json!({
                        "guild_id": g.to_string(),
                        "members": [{"user": serde_json::from_str::<serde_json::Value>(&id.user_json).unwrap_or_default(),
                                     "roles": [], "joined_at": payload::iso8601(0), "deaf": false, "mute": false, "flags": 0, "pending": false}],
                        "chunk_index": 0,
                        "chunk_count": 1,
                        "not_found": [],
                        "nonce": nonce,
                    });
                    let d = serde_json::to_vec(&d).expect("json");
                    if self
                        .fan
                        .dispatch(sid, "GUILD_MEMBERS_CHUNK", &d, now)
                        .is_err()
                    {
                        self.overflowed(sid, key);
                        return;
                    }
                }
                self.queue_flush(key);
            }
        }
    }

    /// The fan-out session a connection serves, if it is READY.
    fn session_of(&mut self, key: ConnKey) -> Option<u32> {
        match &self.conn(key)?.state {
            ConnState::WebSocket(_, sid) => *sid,
            _ => None,
        }
    }

    /// A session's queue hit its bound: close its connection resumably; the
    /// session keeps what it holds for a Resume.
    fn overflowed(&mut self, _sid: u32, key: ConnKey) {
        WorkerMetrics::inc(&self.metrics().slow_consumer_closes);
        self.begin_close(
            key,
            Some(Close::new(
                CloseCode::UnknownError,
                "send queue full: the client is not reading fast enough; resume to continue",
            )),
        );
    }

    fn on_resume(&mut self, key: ConnKey, r: Resume) {
        let now = self.now_ms();
        let sid = SessionId::parse(&r.session_id);
        // The session lives on the worker its id names: move the connection there.
        if let Some(to) = sid.map(|s| s.worker() as usize) {
            if to != self.id && to < self.shared.workers.len() {
                self.start_handover(key, to, Action::Resume(r));
                return;
            }
        }
        let idx = sid.and_then(|s| self.fan.lookup(&s));
        let outcome: Result<u32, &str> = match idx {
            None => Err("unknown session"),
            Some(idx) => {
                let s = self.fan.get(idx).expect("indexed");
                if s.identity.token_digest != identify::token_digest(&r.token) {
                    // A wrong token must not end, or even disturb, someone's session.
                    Err("token does not match the session")
                } else {
                    // A connection still holding the session (the client saw the
                    // drop before we did) is ended; the session is not.
                    if let Some(old) = s.conn.filter(|c| *c != key) {
                        self.detach_conn(old);
                        self.begin_close(
                            old,
                            Some(Close::new(
                                CloseCode::UnknownError,
                                "session resumed on another connection",
                            )),
                        );
                    }
                    self.fan.rewind_for_resume(idx, r.seq).map(|()| idx)
                }
            }
        };
        match outcome {
            Ok(idx) => {
                let attached = self.fan.get_mut(idx).map(|s| {
                    s.conn = Some(key);
                    s.expires_ms = u64::MAX;
                });
                debug_assert!(attached.is_some());
                let resumed = self
                    .fan
                    .dispatch(idx, "RESUMED", br#"{"_trace":["gatewayd"]}"#, now);
                let Some(conn) = self.conn(key) else { return };
                let ConnState::WebSocket(w, sid) = &mut conn.state else {
                    return;
                };
                *sid = Some(idx);
                w.session.authenticated();
                conn.partial = 0;
                WorkerMetrics::inc(&self.metrics().resumes);
                WorkerMetrics::inc(&self.metrics().sessions_ready);
                if resumed.is_err() {
                    self.overflowed(idx, key);
                }
            }
            Err(why) => {
                tracing::debug!(worker = self.id, why, "resume refused");
                let Some(conn) = self.conn(key) else { return };
                let ConnState::WebSocket(w, _) = &mut conn.state else {
                    return;
                };
                w.session.authentication_failed();
                payload::invalid_session(&mut conn.out, false);
                WorkerMetrics::inc(&self.metrics().resumes_refused);
            }
        }
        self.queue_flush(key);
    }

    /// Unhook a connection from its session (the session stays).
    fn detach_conn(&mut self, key: ConnKey) {
        if let Some(conn) = self.conn(key) {
            if let ConnState::WebSocket(_, sid) = &mut conn.state {
                if sid.take().is_some() {
                    WorkerMetrics::dec(&self.metrics().sessions_ready);
                }
            }
        }
    }

    fn on_identified(&mut self, key: ConnKey, result: Result<Box<IdentifyOk>, IdentifyRefusal>) {
        let worker = self.id;
        let gateway_url = self.shared.gateway_url.clone();
        let now = self.now_ms();
        let Some(conn) = self.conn(key) else { return };
        let ConnState::WebSocket(w, _) = &mut conn.state else {
            return;
        };
        if w.session.phase() != Phase::Authenticating {
            return;
        }
        let ok = match result {
            Err(IdentifyRefusal::Close(close)) => {
                WorkerMetrics::inc(&self.metrics().identifies_refused);
                WorkerMetrics::inc(&self.metrics().identifies_refused_closed);
                self.begin_close(key, Some(close));
                return;
            }
            Err(IdentifyRefusal::InvalidSession) => {
                w.session.authentication_failed();
                payload::invalid_session(&mut conn.out, false);
                WorkerMetrics::inc(&self.metrics().identifies_refused);
                self.queue_flush(key);
                return;
            }
            Ok(ok) => ok,
        };
        w.session.authenticated();
        let mut random = [0u8; 16];
        let _ = getrandom::fill(&mut random);
        let session_id = SessionId::new(worker as u8, u128::from_le_bytes(random));
        let ready_d = serde_json::json!({
            "v": 10,
            "user": serde_json::from_str::<serde_json::Value>(&ok.user_json).unwrap_or_default(),
            "guilds": ok.guilds.iter().map(|g| serde_json::json!({"id": g.0.id.to_string(), "unavailable": true})).collect::<Vec<_>>(),
            "session_id": session_id.as_str(),
            "session_type": "normal",
            "resume_gateway_url": gateway_url,
            "shard": [ok.shard.0, ok.shard.1],
            "application": {"id": ok.application_id.to_string(), "flags": ok.application_flags},
            "private_channels": [],
            "relationships": [],
            "presences": [],
            "guild_join_requests": [],
            "geo_ordered_rtc_regions": [],
            "user_settings": {},
            "auth": {},
            "_trace": ["gatewayd"],
        });
        let ready_d = serde_json::to_vec(&ready_d).expect("json");
        let identity = Box::new(Identity {
            session_id,
            application_id: ok.application_id,
            bot_user_id: ok.bot_user_id,
            intents: ok.intents,
            shard: ok.shard,
            token_digest: ok.token_digest,
            guilds: ok.guilds.iter().map(|g| g.0.clone()).collect(),
            user_json: ok.user_json.clone(),
        });
        let idx = self.fan.create(identity, key);
        if let Some(ConnState::WebSocket(_, sid)) = self.conn(key).map(|c| &mut c.state) {
            *sid = Some(idx);
        }
        WorkerMetrics::inc(&self.metrics().identifies);
        WorkerMetrics::inc(&self.metrics().sessions_ready);
        // READY (s = 1), then one GUILD_CREATE per server: dispatches like any
        // other, so a Resume can replay them too.
        let mut pushed = self.fan.dispatch(idx, "READY", &ready_d, now);
        for g in &ok.guilds {
            if pushed.is_ok() {
                pushed = self.fan.dispatch(idx, "GUILD_CREATE", &g.1, now);
            }
        }
        match pushed {
            Ok(_) => {}
            Err(ringbuf::PushError::NoChunks) => {
                // The worker's ring storage is used up: this is capacity, not
                // the client's fault. Undo the session and ask it to retry.
                tracing::warn!(
                    worker = self.id,
                    "ring storage exhausted (events.ring_chunks): identify refused"
                );
                WorkerMetrics::inc(&self.metrics().ring_exhausted);
                self.detach_conn(key);
                self.fan.remove(idx);
                self.refuse_identify(key);
                return;
            }
            Err(ringbuf::PushError::Full) => self.overflowed(idx, key),
        }
        self.queue_flush(key);
    }

    fn on_message(&mut self, msg: ToWorker) {
        match msg {
            ToWorker::Identified { conn, result } => self.on_identified(conn, result),
            ToWorker::RestReply {
                conn: key,
                status,
                body,
            } => {
                let Some(conn) = self.conn(key) else { return };
                conn.rest_pending = false;
                http::write_response(
                    status,
                    rest::JSON,
                    &body,
                    conn.keep_alive,
                    &[],
                    &mut conn.out,
                );
                let keep = conn.keep_alive;
                self.queue_flush(key);
                if keep {
                    self.process_input(key);
                } else {
                    self.close_after_flush(key);
                }
            }
            ToWorker::Batch(batch) => self.deliver_batch(&batch),
            ToWorker::Leases { pairs, until_ms } => self.fan.renew_leases(&pairs, until_ms),
            ToWorker::Revoke(msg) => self.revoke(&msg),
            ToWorker::Access(update) => self.fan.update_access(update.server_id, &update.by_app),
            ToWorker::Adopt {
                token,
                conn,
                action,
            } => {
                let now = self.now_ms();
                let a = self.adopting.entry(token).or_insert_with(|| Adoption {
                    since_ms: now,
                    ..Default::default()
                });
                a.conn = Some((conn, action));
                self.try_adopt(token);
            }
            ToWorker::Shutdown { spread_ms } => self.drain(spread_ms),
        }
    }

    /// Fan one event out (src/fanout.rs decides and appends; here the
    /// recipients' connections are scheduled for a send).
    fn deliver(&mut self, ev: &EventIn) {
        let now = self.now_ms();
        let unix = self.unix_ms;
        let Worker {
            fan,
            rings,
            queue,
            overflow,
            ..
        } = self;
        let d = fan.deliver(
            ev,
            now,
            unix,
            |key| {
                if let Some(conn) = conn_in(rings, key) {
                    if !conn.queued {
                        conn.queued = true;
                        queue.push(key);
                    }
                }
            },
            |sid, key| overflow.push((sid, key)),
        );
        let m = &self.shared.metrics[self.id];
        WorkerMetrics::inc(&m.events_in);
        WorkerMetrics::add(&m.deliveries, d.recipients as u64);
        WorkerMetrics::add(&m.deliveries_redacted, d.redacted as u64);
        WorkerMetrics::add(&m.arena_records, d.appended_records as u64);
        WorkerMetrics::add(&m.history_reclaims, d.history_reclaims as u64);
        while let Some((sid, key)) = self.overflow.pop() {
            self.overflowed(sid, key);
        }
    }

    /// A batch of ingest records, validated by the ingest thread.
    fn deliver_batch(&mut self, batch: &crate::delivery::batch::Batch) {
        for body in batch.bodies() {
            // SAFETY: the ingest thread accepted exactly these bytes.
            let rec = unsafe { ingest::access_trusted(body) };
            let mut mentions = std::mem::take(&mut self.mentions);
            mentions.clear();
            mentions.extend(
                rec.mentions()
                    .iter()
                    .take(mentions.capacity().max(1))
                    .map(|m| m.to_native()),
            );
            let ev = EventIn {
                t: rec.event_type(),
                server_id: rec.server_id(),
                channel_id: rec.channel_id(),
                intent: rec.intent(),
                permissions: rec.permissions(),
                has_content: rec.has_content(),
                mentions: &mentions,
                d: rec.d(),
            };
            self.deliver(&ev);
            self.mentions = mentions;
        }
    }

    /// Apply a revocation pushed by the registry sidecar, then acknowledge
    /// it (the sidecar measures write-to-applied across all workers).
    fn revoke(&mut self, msg: &RevokeMsg) {
        use registry::Revocation as R;
        let close = |code, reason| Close::new(code, reason);
        match msg.revocation {
            R::Uninstalled {
                application_id,
                server_id,
            } => {
                self.fan.revoke_server(application_id, server_id);
            }
            R::PermissionsChanged {
                application_id,
                server_id,
            } => match &msg.access {
                Some(access) => {
                    self.fan.set_access(application_id, access);
                }
                None => {
                    self.fan.revoke_server(application_id, server_id);
                }
            },
            R::TokenReset { application_id } => {
                let c = close(
                    CloseCode::AuthenticationFailed,
                    "authentication failed: the token was reset",
                );
                self.end_sessions(application_id, None, c);
            }
            R::IntentsChanged { application_id } => {
                // Sessions using a privileged intent that is no longer approved end.
                let withdrawn = intents::PRIVILEGED & !msg.approved_intents;
                if withdrawn != 0 {
                    let c = close(
                        CloseCode::DisallowedIntents,
                        "disallowed intents: a privileged intent was withdrawn",
                    );
                    self.end_sessions(application_id, Some(withdrawn), c);
                }
            }
        }
        let _ = self
            .shared
            .sidecar
            .try_send(SidecarRequest::RevocationApplied {
                id: msg.id,
                applied_ms: registry::snowflake::unix_ms_now(),
            });
    }

    /// End an application's sessions for good (not resumable), closing
    /// their connections with `close`.
    fn end_sessions(&mut self, app: u64, using: Option<u64>, close: Close) {
        for (sid, conn) in self.fan.sessions_of(app, using) {
            // Unhook first, so the close below does not touch the session
            // (whose slot may be reused once removed).
            if let Some(key) = conn {
                self.detach_conn(key);
            }
            self.fan.remove(sid);
            if let Some(key) = conn {
                self.begin_close(key, Some(close));
            }
        }
    }

    fn on_tick(&mut self) {
        if self.unix_ms >= self.next_lease_renewal {
            // Renew well before expiry: a third of the TTL.
            self.next_lease_renewal = self.unix_ms + self.shared.cfg.registry.lease_ttl_ms / 3;
            let mut pairs = std::mem::take(&mut self.lease_pairs);
            self.fan.lease_pairs(&mut pairs);
            let (held, lapsed) = self.fan.lease_counts(self.unix_ms);
            self.metrics().leases_held.store(held, Ordering::Relaxed);
            self.metrics()
                .leases_lapsed
                .store(lapsed, Ordering::Relaxed);
            if !pairs.is_empty() {
                let req = SidecarRequest::RenewLeases {
                    worker: self.id,
                    pairs: pairs.clone(),
                };
                let _ = self.shared.sidecar.try_send(req);
            }
            self.lease_pairs = pairs;
        }
        let now = self.now_ms();
        let mut to_close: Vec<(ConnKey, Option<Close>, bool)> = Vec::new();
        let mut handshaking = 0u64;
        let mut compressed = 0u64;
        for r in 0..self.rings.len() {
            let rs = &mut self.rings[r];
            for slot in 0..rs.conns.len() {
                let Some(conn) = rs.conns[slot].as_deref_mut() else {
                    continue;
                };
                if conn.closed {
                    continue;
                }
                let key = ConnKey {
                    ring: r as u8,
                    gen: conn.gen,
                    slot: slot as u32,
                };
                match &mut conn.state {
                    ConnState::Http => {
                        if now > conn.deadline_ms && !conn.rest_pending {
                            to_close.push((key, None, true));
                        }
                    }
                    ConnState::WebSocket(w, sid) => {
                        handshaking += sid.is_none() as u64;
                        compressed += conn.compress.is_some() as u64;
                        if conn.close_after_flush {
                            continue;
                        }
                        match w.session.on_tick(now, &mut conn.out) {
                            Ok(()) => {
                                if !conn.out.is_empty() && !conn.queued {
                                    conn.queued = true;
                                    self.queue.push(key);
                                }
                            }
                            Err(close) => to_close.push((key, Some(close), false)),
                        }
                    }
                    ConnState::Closing => {
                        if now > conn.deadline_ms {
                            to_close.push((key, None, false));
                        }
                    }
                }
            }
            if !rs.accepting && self.draining_until.is_none() {
                // A full table stopped the multishot accept; retry now that slots may be free.
                self.arm_accept(r);
            }
        }
        for (key, close, handshake) in to_close {
            let closing = matches!(self.conn(key).map(|c| &c.state), Some(ConnState::Closing));
            if handshake {
                WorkerMetrics::inc(&self.metrics().handshake_timeouts);
                if let Some(conn) = self.conn(key) {
                    http::write_response(
                        408,
                        rest::JSON,
                        br#"{"message": "request timeout", "code": 0}"#,
                        false,
                        &[],
                        &mut conn.out,
                    );
                }
                self.close_after_flush(key);
            } else if closing {
                self.finish(key);
            } else {
                self.begin_close(key, close);
            }
        }
        let (_, degraded) = self.fan.tick(now, |_| {});
        let m = &self.shared.metrics[self.id];
        m.sessions_degraded
            .store(degraded as u64, Ordering::Relaxed);
        m.sessions_detached
            .store(self.fan.detached() as u64, Ordering::Relaxed);
        let st = self.fan.arena.stats();
        m.arena_wraps.store(st.wraps, Ordering::Relaxed);
        m.arena_lost_reads.store(st.lost_reads, Ordering::Relaxed);
        m.ring_chunks_free
            .store(self.fan.slab.free_count() as u64, Ordering::Relaxed);
        m.ring_chunks_capacity
            .store(self.fan.slab.capacity() as u64, Ordering::Relaxed);
        m.sessions_handshaking.store(handshaking, Ordering::Relaxed);
        m.compressed_sessions.store(compressed, Ordering::Relaxed);
        let stale: Vec<u64> = self
            .adopting
            .iter()
            .filter(|(_, a)| now > a.since_ms + ADOPT_TIMEOUT_MS)
            .map(|(t, _)| *t)
            .collect();
        for token in stale {
            let a = self.adopting.remove(&token).expect("listed");
            tracing::warn!(
                worker = self.id,
                token,
                "handover half never arrived: dropped"
            );
            if let Some((r, Ok(slot))) = a.slot {
                self.rings[r]
                    .ring
                    .close(slot, ud(OP_CLOSE, r as u8, 0, slot));
            }
        }
        if let Some(until) = self.draining_until {
            self.send_due_reconnects(now);
            if now > until {
                let keys: Vec<ConnKey> = self.all_keys();
                for key in keys {
                    let is_closing =
                        matches!(self.conn(key).map(|c| &c.state), Some(ConnState::Closing));
                    if is_closing {
                        if now > until + LINGER_MS {
                            self.finish(key);
                        }
                    } else {
                        self.begin_close(
                            key,
                            Some(Close::new(
                                CloseCode::UnknownError,
                                "node shutting down: resume elsewhere",
                            )),
                        );
                    }
                }
            }
        }
    }

    /// Begin moving a connection to worker `to`; `action` runs there.
    fn start_handover(&mut self, key: ConnKey, to: usize, action: Action) {
        let Some(conn) = self.conn(key) else { return };
        conn.handover = Some(Box::new(Handover {
            to,
            action: Some(action),
            recv_done: false,
            passed: false,
            token: 0,
        }));
        let ring = &mut self.rings[key.ring as usize].ring;
        ring.cancel_user_data(
            ud(OP_RECV, key.ring, key.gen, key.slot),
            ud(OP_HANDOVER_CANCEL, key.ring, key.gen, key.slot),
        );
    }

    /// Pass the socket once its receive has stopped and no send is running.
    fn try_pass(&mut self, key: ConnKey) {
        let token = (self.id as u64) << 40 | (self.handovers & 0xFF_FFFF_FFFF);
        let Some(conn) = conn_in(&mut self.rings, key) else {
            return;
        };
        let ready = !conn.sending && !conn.closed;
        let Some(h) = conn.handover.as_deref_mut() else {
            return;
        };
        if !ready || !h.recv_done || h.passed {
            return;
        }
        h.passed = true;
        h.token = token;
        let to = h.to;
        self.handovers += 1;
        // The target worker's emptiest ring, unless all are at their limit.
        let load = &self.shared.ring_load[to];
        let ri = (0..load.len())
            .min_by_key(|&i| load[i].load(Ordering::Relaxed))
            .unwrap_or(0);
        if load[ri].load(Ordering::Relaxed) >= self.shared.ring_limits[to][ri] {
            self.handover_refused(key.ring as usize, key);
            return;
        }
        let target_rings = &self.shared.ring_fds[to];
        self.rings[key.ring as usize].ring.pass_and_close(
            key.slot,
            target_rings[ri],
            (OP_ADOPT as u64) << 56 | (ri as u64) << 48 | token,
            ud(OP_PASS, key.ring, key.gen, key.slot),
            ud(OP_CLOSE, key.ring, key.gen, key.slot),
        );
    }

    /// Our half of the pass finished: send the state to the new owner, or,
    /// if the owner's table was full, keep serving the connection here.
    fn on_passed(&mut self, r: usize, key: ConnKey, c: Completion) {
        if c.result < 0 {
            tracing::debug!(worker = self.id, error = %c.error().expect("negative"), "handover refused");
            self.handover_refused(r, key);
            return;
        }
        let rs = &mut self.rings[r];
        let Some(mut conn) = rs.conns[key.slot as usize].take_if(|c| c.gen == key.gen) else {
            return;
        };
        self.open -= 1;
        WorkerMetrics::dec(&self.metrics().connections_open);
        let Some(mut h) = conn.handover.take() else {
            return;
        };
        let token = h.token;
        let action = h.action.take().expect("set at start");
        WorkerMetrics::inc(&self.metrics().handovers_out);
        if !self.shared.workers[h.to].send(ToWorker::Adopt {
            token,
            conn,
            action,
        }) {
            WorkerMetrics::inc(&self.metrics().inbox_full_drops);
        }
    }

    /// The owner worker has no room: serve the connection here after all.
    fn handover_refused(&mut self, r: usize, key: ConnKey) {
        {
            let Some(conn) = self.conn(key) else { return };
            let Some(mut h) = conn.handover.take() else {
                return;
            };
            WorkerMetrics::inc(&self.metrics().handover_fallbacks);
            self.rings[r]
                .ring
                .recv_multi(key.slot, ud(OP_RECV, r as u8, key.gen, key.slot));
            match h.action.take().expect("set at start") {
                // Placement is a preference: a session can live on any worker
                // (its id names the one it is on).
                Action::Identify(identify) => self.send_identify(key, identify),
                // The session is on the other worker and cannot come here.
                Action::Resume(_) => {
                    if let Some(conn) = self.conn(key) {
                        if let ConnState::WebSocket(w, _) = &mut conn.state {
                            w.session.authentication_failed();
                        }
                        payload::invalid_session(&mut conn.out, false);
                    }
                    WorkerMetrics::inc(&self.metrics().resumes_refused);
                }
                other => self.on_action(key, other),
            }
        }
        self.queue_flush(key);
        self.process_input(key);
    }

    /// Hand an Identify to the registry sidecar, unless its queue is at the
    /// node's admission bound: then op 9 at once, so a storm queues nowhere.
    fn send_identify(&mut self, key: ConnKey, identify: crate::protocol::identify::Identify) {
        if self.shared.sidecar.len() >= self.shared.cfg.registry.admission_queue {
            WorkerMetrics::inc(&self.metrics().identifies_refused_admission);
            self.refuse_identify(key);
            return;
        }
        let req = SidecarRequest::Identify {
            worker: self.id,
            conn: key,
            identify,
        };
        if self.shared.sidecar.try_send(req).is_err() {
            self.refuse_identify(key);
        }
    }

    /// The registry link is saturated: tell the client to back off (op 9).
    fn refuse_identify(&mut self, key: ConnKey) {
        if let Some(conn) = self.conn(key) {
            if let ConnState::WebSocket(w, _) = &mut conn.state {
                w.session.authentication_failed();
                payload::invalid_session(&mut conn.out, false);
            }
        }
        WorkerMetrics::inc(&self.metrics().identifies_refused);
        self.queue_flush(key);
    }

    /// Install an adopted connection once both halves are here.
    fn try_adopt(&mut self, token: u64) {
        let ready =
            matches!(self.adopting.get(&token), Some(a) if a.slot.is_some() && a.conn.is_some());
        let failed = matches!(
            self.adopting.get(&token),
            Some(Adoption {
                slot: Some((_, Err(_))),
                ..
            })
        );
        if failed {
            self.adopting.remove(&token);
            return;
        }
        if !ready {
            return;
        }
        let a = self.adopting.remove(&token).expect("checked");
        let (r, Ok(slot)) = a.slot.expect("checked") else {
            return;
        };
        let (mut conn, action) = a.conn.expect("checked");
        let rs = &mut self.rings[r];
        let gen = rs.gens[slot as usize].wrapping_add(1);
        rs.gens[slot as usize] = gen;
        conn.gen = gen;
        conn.queued = false;
        debug_assert!(rs.conns[slot as usize].is_none());
        rs.conns[slot as usize] = Some(conn);
        rs.ring.recv_multi(slot, ud(OP_RECV, r as u8, gen, slot));
        self.open += 1;
        WorkerMetrics::inc(&self.metrics().connections_open);
        WorkerMetrics::inc(&self.metrics().handovers_in);
        let key = ConnKey {
            ring: r as u8,
            gen,
            slot,
        };
        self.on_action(key, action);
        self.queue_flush(key);
        self.process_input(key);
    }

    fn all_keys(&self) -> Vec<ConnKey> {
        let mut keys = Vec::new();
        for (r, rs) in self.rings.iter().enumerate() {
            for (slot, c) in rs.conns.iter().enumerate() {
                if let Some(c) = c.as_deref() {
                    if !c.closed {
                        keys.push(ConnKey {
                            ring: r as u8,
                            gen: c.gen,
                            slot: slot as u32,
                        });
                    }
                }
            }
        }
        keys
    }

    /// Drain: stop accepting, then op 7 to every session at a random moment
    /// within `spread_ms` (so a fleet's reconnects do not arrive at once),
    /// then close what is left after the grace period.
    fn drain(&mut self, spread_ms: u64) {
        if self.draining_until.is_some() {
            return;
        }
        let now = self.now_ms();
        self.draining_until = Some(now + spread_ms + self.shared.cfg.limits.shutdown_grace_ms);
        for r in 0..self.rings.len() {
            let rs = &mut self.rings[r];
            rs.ring
                .cancel_user_data(ud(OP_ACCEPT, r as u8, 0, 0), ud(OP_CANCEL, r as u8, 0, 0));
        }
        let mut seed = [0u8; 8];
        let _ = getrandom::fill(&mut seed);
        let mut x = u64::from_le_bytes(seed) | 1;
        for key in self.all_keys() {
            let Some(conn) = self.conn(key) else { continue };
            match &mut conn.state {
                ConnState::WebSocket(..) => {
                    // xorshift: a cheap, good-enough spread.
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let due = now + if spread_ms == 0 { 0 } else { x % spread_ms };
                    self.drain_schedule.push((due, key));
                }
                ConnState::Http => {
                    if !conn.rest_pending {
                        self.close_after_flush(key);
                    }
                }
                ConnState::Closing => {}
            }
        }
        self.drain_schedule
            .sort_unstable_by_key(|(due, _)| std::cmp::Reverse(*due));
        self.send_due_reconnects(now);
    }

    /// Op 7 to every session whose moment in the drain has come.
    fn send_due_reconnects(&mut self, now: u64) {
        while let Some(&(due, key)) = self.drain_schedule.last() {
            if due > now {
                break;
            }
            self.drain_schedule.pop();
            if let Some(conn) = self.conn(key) {
                if matches!(conn.state, ConnState::WebSocket(..)) {
                    payload::reconnect(&mut conn.out);
                    WorkerMetrics::inc(&self.metrics().reconnects_sent);
                    self.queue_flush(key);
                }
            }
        }
    }

    fn close_after_flush(&mut self, key: ConnKey) {
        let now = self.now_ms();
        let Some(conn) = self.conn(key) else { return };
        conn.close_after_flush = true;
        if !matches!(conn.state, ConnState::WebSocket(..)) {
            conn.state = ConnState::Closing;
        }
        conn.deadline_ms = now + LINGER_MS;
        self.queue_flush(key);
    }

    /// Start closing: a WebSocket close frame (if any), then FIN after the
    /// flush, then wait for the peer's FIN (bounded by LINGER_MS). The
    /// connection stops serving its session first, so nothing follows the
    /// close frame.
    fn begin_close(&mut self, key: ConnKey, close: Option<Close>) {
        let now = self.now_ms();
        let id = self.id;
        let Some(conn) = conn_in(&mut self.rings, key) else {
            return;
        };
        if conn.closed || matches!(conn.state, ConnState::Closing) {
            return;
        }
        if conn.sending {
            // Let the send in flight finish first: it may end mid-frame, and
            // the close frame must start on a frame boundary.
            conn.close_pending = Some(close);
            return;
        }
        let state = std::mem::replace(&mut conn.state, ConnState::Closing);
        let partial = std::mem::take(&mut conn.partial);
        if let ConnState::WebSocket(w, sid) = state {
            if let (Some(sid), true) = (sid, partial > 0) {
                // A short write left a frame half sent: finish it, then close.
                let done = match self.fan.get(sid) {
                    Some(s) => sendpath::finish_frame(
                        &s.ring,
                        &self.fan.slab,
                        &self.fan.arena,
                        partial,
                        &mut conn.out,
                    ),
                    None => false,
                };
                if done {
                    self.fan.mark_sent(sid, 1);
                }
            }
            let keep = match close {
                Some(c) => {
                    ws::encode_close(c.code, c.reason, &mut conn.out);
                    self.shared.metrics[id].close_sent(c.code);
                    c.resumable() && !w.end_session
                }
                None => !w.end_session,
            };
            self.end_session(sid, keep, now);
        }
        let Some(conn) = self.conn(key) else { return };
        conn.close_after_flush = true;
        conn.deadline_ms = now + LINGER_MS;
        conn.inbuf = Vec::new();
        self.queue_flush(key);
    }

    fn on_peer_close(&mut self, key: ConnKey, code: Option<u16>) {
        let now = self.now_ms();
        let Some(conn) = self.conn(key) else { return };
        let state = std::mem::replace(&mut conn.state, ConnState::Closing);
        // Echo the close (RFC 6455 handshake).
        let echo = code.unwrap_or(1000);
        ws::encode_close(
            if ws::is_valid_close_code(echo) {
                echo
            } else {
                1000
            },
            "",
            &mut conn.out,
        );
        conn.close_after_flush = true;
        conn.deadline_ms = now + LINGER_MS;
        if let ConnState::WebSocket(w, sid) = state {
            // 1000/1001, or a close without a code (a deliberate close by the
            // library), end the session; anything else keeps it resumable.
            let keep = !matches!(code, None | Some(1000) | Some(1001)) && !w.end_session;
            self.end_session(sid, keep, now);
        }
        self.queue_flush(key);
    }

    /// A connection stops serving its session: keep the session for Resume
    /// when allowed (it goes on collecting events into its ring), else end it.
    fn end_session(&mut self, sid: Option<u32>, resumable: bool, now: u64) {
        let Some(sid) = sid else { return };
        WorkerMetrics::dec(&self.metrics().sessions_ready);
        if resumable && self.draining_until.is_none() {
            self.fan.detach(sid, now);
        } else {
            self.fan.remove(sid);
        }
    }

    /// Tear the socket down now: RDWR shutdown wakes the pending receive,
    /// then the slot is closed; the Conn is freed on the close completion.
    fn finish(&mut self, key: ConnKey) {
        let now = self.now_ms();
        let Some(conn) = self.conn(key) else { return };
        if conn.closed {
            return;
        }
        conn.closed = true;
        let state = std::mem::replace(&mut conn.state, ConnState::Closing);
        if let ConnState::WebSocket(w, sid) = state {
            let keep = !w.end_session;
            self.end_session(sid, keep, now);
        }
        self.open -= 1;
        WorkerMetrics::dec(&self.metrics().connections_open);
        let ring = &mut self.rings[key.ring as usize].ring;
        ring.shutdown_and_close(
            key.slot,
            ud(OP_SHUTDOWN, key.ring, key.gen, key.slot),
            ud(OP_CLOSE, key.ring, key.gen, key.slot),
        );
    }
}

/// Slots of a fixed table that accepts and handovers may fill; the rest is
/// headroom for connections in flight when the limit is reached.
pub fn admit_limit(slots: u32) -> u32 {
    slots.saturating_sub((slots / 32).max(4))
}

/// Poll `read` (the eventfd read) until it completes, or until `max` has
/// passed (None); a timed-out read is left pending for the next park.
async fn park<F: std::future::Future>(
    mut read: std::pin::Pin<&mut F>,
    max: Duration,
) -> Option<F::Output> {
    use std::future::Future;
    use std::task::Poll;
    let mut timer = std::pin::pin!(glommio::timer::sleep(max));
    std::future::poll_fn(|cx| {
        if let Poll::Ready(r) = read.as_mut().poll(cx) {
            return Poll::Ready(Some(r));
        }
        if timer.as_mut().poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        Poll::Pending
    })
    .await
}

/// Whether the eventfd's count is above zero (a read would not block); it
/// is not consumed.
fn eventfd_readable(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd on the stack, zero timeout.
    unsafe { libc::poll(&mut p, 1, 0) == 1 && p.revents & libc::POLLIN != 0 }
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

/// The live connection `key` names, borrowing only the rings.
fn conn_in(rings: &mut [RingState], key: ConnKey) -> Option<&mut Conn> {
    let c = rings
        .get_mut(key.ring as usize)?
        .conns
        .get_mut(key.slot as usize)?
        .as_deref_mut()?;
    (c.gen == key.gen).then_some(c)
}

enum Step {
    Consumed(usize),
    Act(Action, usize),
    Close(Close, usize),
    PeerClose(Option<u16>, usize),
}

/// The close an upgrade's query earns right after Hello (`v` other than
/// 10 or 9, `encoding` other than json), or None to go on.
pub fn upgrade_refusal(query: &str) -> Option<Close> {
    let version = http::query_param(query, "v");
    let encoding = http::query_param(query, "encoding");
    if !matches!(version, None | Some("10") | Some("9")) {
        Some(Close::new(
            CloseCode::InvalidApiVersion,
            "invalid API version: use v=10 (v=9 is accepted)",
        ))
    } else if matches!(encoding, Some(e) if e != "json") {
        Some(Close::new(
            CloseCode::DecodeError,
            "encoding not supported: encoding=etf is refused, use encoding=json",
        ))
    } else {
        None
    }
}

/// The close a WebSocket decoding error earns (the worker's, exposed for the
/// fuzz oracles).
#[doc(hidden)]
pub fn ws_error_close(e: ws::WsError) -> Close {
    match e {
        ws::WsError::MessageTooBig => Close::new(
            CloseCode::DecodeError,
            "decode error: message larger than 4096 bytes",
        ),
        ws::WsError::InvalidUtf8 => Close::new(
            CloseCode::DecodeError,
            "decode error: text is not valid UTF-8",
        ),
        ws::WsError::Protocol(_) => Close::websocket(1002, "websocket protocol error"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signal(fd: RawFd) {
        let one: u64 = 1;
        assert_eq!(
            // SAFETY: 8 bytes from a live u64 to an eventfd.
            unsafe { libc::write(fd, (&one as *const u64).cast(), 8) },
            8
        );
    }

    /// A worker whose eventfd wakeup never arrives (lost, or work queued
    /// without one) must still come back to look at its rings and inbox:
    /// the park is bounded and a worker never sleeps for good. A park that
    /// ends by its bound keeps its read, which still takes the next signal.
    #[test]
    fn park_is_bounded_and_keeps_its_read() {
        glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .spawn(|| async move {
                // SAFETY: a fresh blocking eventfd, as Worker::new makes.
                let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
                assert!(fd >= 0);
                // SAFETY: a dup for glommio to own, as Worker::run does.
                let waiter = unsafe { glommio::io::BufferedFile::from_raw_fd(libc::dup(fd)) };

                // Nothing signalled: the park ends by its bound.
                let mut read = Box::pin(waiter.read_at(0, 8));
                let t0 = Instant::now();
                assert!(park(read.as_mut(), Duration::from_millis(50))
                    .await
                    .is_none());
                let took = t0.elapsed();
                assert!(
                    took >= Duration::from_millis(40),
                    "returned early: {took:?}"
                );
                assert!(took < Duration::from_secs(5), "park not bounded: {took:?}");
                assert!(!eventfd_readable(fd));

                // The same read, parked again, completes on a signal.
                assert!(park(read.as_mut(), Duration::from_millis(10))
                    .await
                    .is_none());
                signal(fd);
                let r = park(read.as_mut(), Duration::from_secs(30)).await;
                assert!(matches!(r, Some(Ok(_))), "the signal ends the park");
                assert!(!eventfd_readable(fd), "the read consumed the count");

                // A signal before the park: a fresh read returns at once.
                signal(fd);
                assert!(eventfd_readable(fd));
                let mut read = Box::pin(waiter.read_at(0, 8));
                let t0 = Instant::now();
                assert!(matches!(
                    park(read.as_mut(), Duration::from_secs(30)).await,
                    Some(Ok(_))
                ));
                assert!(t0.elapsed() < Duration::from_secs(5));
                // SAFETY: ours (glommio closes its dup).
                unsafe { libc::close(fd) };
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
