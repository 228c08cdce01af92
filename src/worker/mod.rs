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

mod accept;
pub mod app_stats;
mod close;
mod cluster;
mod conn;
mod handover;
mod housekeeping;
mod inbox;
mod input;
pub mod mail;
pub mod metrics;
mod op;
mod rest_edge;
mod send;
mod sessions;
pub mod shared;
mod upgrade;

use conn::{
    Adoption, Conn, ConnState, DeferredClose, Handover, Lifecycle, Peer, SendState, WsConn,
};
use op::{ud, ud_adopt, ud_parts, Op};

use crossbeam_channel::Receiver;
use net::http::{self, RequestHead};
use net::tls::TlsSession;
use net::uring::{Completion, Ring, RingConfig};
use net::ws::{self, Message, OpCode};
use proto::{AppId, ServerId, SessionIdx};
use shards::SessionId;

use crate::delivery::fanout::{EventIn, FanOut, FanOutConfig};
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
    overflow: Vec<(SessionIdx, ConnKey)>,
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
    lease_pairs: Vec<(AppId, ServerId)>,
    /// Parks that timed out with the eventfd signalled (see PARK_MAX).
    lost_wakeups: u64,
    api: rest_edge::ApiState,
    /// Sessions arriving from other nodes, and the recent stream they line up on.
    clu: cluster::ClusterState,
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
        let api = rest_edge::ApiState::new(&shared, id);
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
            api,
            clu: cluster::ClusterState::new(clustered),
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
        self.rings[0].ring.tick(TICK, ud(Op::Tick, 0, 0, 0));
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
