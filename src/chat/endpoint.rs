//! Interactions delivered to an application's HTTP interactions endpoint
//! (REST.md "Interactions"; ADR-11, ADR-12) instead of its gateway session:
//! one signed POST through the egress process, with one retry inside the
//! 3-second window.
//!
//! - One thread, `deliver`, takes jobs from a per-application fair queue
//!   (`fairq`): round-robin between the applications with work, at most
//!   `PER_APP_IN_FLIGHT` calls of one application at once and
//!   `MAX_IN_FLIGHT` in all, at most `PER_APP_QUEUE` jobs queued per
//!   application and `QUEUE` in all (a full queue refuses the interaction:
//!   the person sees the failure at once; counted). The chat thread never
//!   waits for it (it only pushes under the queue's mutex, O(1), and wakes
//!   it through a channel of one).
//! - It never waits for an endpoint: it starts each call
//!   (`EgressClient::start`, the request frame written to the egress
//!   connection) and takes the answers as they arrive on its `Calls`
//!   queue, beside the queue's wake-ups; a call with no answer by its
//!   deadline and the client's grace (100 ms) is given up (`timeout`), and
//!   its answer, if it comes later, is dropped. Its only waits are the
//!   egress client's own: connecting (a Unix socket at once; over TCP by
//!   the call's deadline) and writing a frame into the socket.
//! - A job whose window has all but passed (less than `MIN_CALL_MS` to its
//!   deadline) is not called: dropped, counted, its reason noted for the
//!   person (who sees the failure at 3 s). The queue is swept for such
//!   jobs every `SWEEP_MS` while any is queued (one waiting behind its
//!   application's cap would otherwise be reached only after the 3 s and
//!   show no reason), and each is checked again when it is taken.
//! - An answer 200 `{type, data}` is the first response, handed to the chat
//!   thread as a callback (so the 3-second rule and every response rule are
//!   the callback route's); if the chat queue is full it waits beside the
//!   other calls, at most `CHAT_WAIT`, then fails ("the chat service was
//!   busy"). 202 or 204: the endpoint will use the callback route.
//!   Anything else (another status, a body that is no response, a refusal
//!   or a timeout in the egress) is retried once if at least
//!   `RETRY_MARGIN_MS` of the window is left; then the failure is recorded
//!   for the person (who sees it at 3 s) and counted by reason.
//!
//! Why these numbers: one application holds at most `PER_APP_IN_FLIGHT`
//! calls (4, what the old 4 shared deliverers gave any one application, so
//! no application's throughput shrinks), and a hanging one holds them for
//! at most the window (~2.7 s, retry included). `MAX_IN_FLIGHT` (64) is
//! the 64 deliverer threads of before, kept as the bound on calls: it
//! takes `MAX_IN_FLIGHT / PER_APP_IN_FLIGHT` = 16 applications hanging at
//! once to hold every call; with fewer, the others share the
//! `MAX_IN_FLIGHT - 4 * hanging` left, served round-robin. It is no longer
//! a thread count (a call in flight costs its job, a pending entry and a
//! timer, not a stack), but it stays 64 because each call holds a thread
//! in the egress process, whose `egress.max_in_flight` (256 by default) is
//! shared with the portal's and the CLI's endpoint checks: a burst of the
//! node's deliveries must not make the egress answer `busy`. One thread
//! (`DELIVERERS`; 64 and a sweeper before) is enough because it never
//! waits on I/O: per call it signs, writes one frame and reads one answer.
//! tests/interactions_deliver.rs prints its CPU: 60 ms for 252 calls in a
//! debug build (every crate unoptimized), ~0.24 ms a call and as much as
//! the egress process spent on them; so ~4,000 calls a second at least,
//! more than the bound lets through (64 in flight / an endpoint's latency)
//! for any endpoint slower than 16 ms.
//! Bounds: at most `QUEUE` jobs queued (~1,024 bodies of an interaction,
//! a few KiB each) plus `MAX_IN_FLIGHT` in flight; the queue's storage is
//! allocated at start (`fairq`).

use std::collections::{HashMap, VecDeque};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select, Sender, TrySendError};

use super::board::Board;
use super::fairq::{FairQ, Limits, Refused};
use crate::egress::client::{Calls, Outcome};
use crate::egress::EgressClient;
use crate::worker::mail::{ChatAction, ChatRequest};

/// Threads that make the calls.
pub const DELIVERERS: usize = 1;
/// Calls in flight at once, in all.
pub const MAX_IN_FLIGHT: usize = 64;
/// Calls of one application in flight at once.
pub const PER_APP_IN_FLIGHT: usize = 4;
/// Jobs queued for one application (beyond those in flight): at 4 calls
/// in flight and ~50 ms an answer, 64 drain in ~0.8 s, inside the window.
pub const PER_APP_QUEUE: usize = 64;
/// Jobs queued in all.
pub const QUEUE: usize = 1024;
/// A retry is made only with at least this much of the window left.
const RETRY_MARGIN_MS: u64 = 300;
/// A job with less than this left to its deadline is not called.
const MIN_CALL_MS: u64 = 100;
/// How often queued jobs are checked for that (while any is queued).
const SWEEP_MS: u64 = 50;
/// How long an inline answer may wait for room in the chat queue.
const CHAT_WAIT: Duration = Duration::from_secs(1);

const _: () = assert!(PER_APP_IN_FLIGHT <= MAX_IN_FLIGHT && PER_APP_QUEUE <= QUEUE);
const _: () = assert!(
    MAX_IN_FLIGHT / PER_APP_IN_FLIGHT >= 16,
    "16 hanging applications to stall the rest"
);

/// One interaction to POST.
pub struct Job {
    /// The application (fairness is per application).
    pub app: u64,
    pub id: u64,
    pub token: String,
    pub url: String,
    pub seed: [u8; 32],
    pub body: Vec<u8>,
    /// The end of the 3-second window.
    pub deadline: Instant,
}

/// Deliveries by outcome: answered inline, left to the callback route,
/// failed (after the retry); refused at the queue (the application's own
/// or the whole queue full); dropped uncalled because the window passed
/// while queued.
#[derive(Default)]
pub struct EndpointStats {
    pub inline: AtomicU64,
    pub deferred_to_callback: AtomicU64,
    pub retries: AtomicU64,
    pub failed: AtomicU64,
    pub refused_app_queue_full: AtomicU64,
    pub refused_queue_full: AtomicU64,
    pub expired: AtomicU64,
    /// Gauges, as of the last change: jobs queued; calls in flight.
    pub queued: AtomicU64,
    pub in_flight: AtomicU64,
}

impl EndpointStats {
    fn gauge(&self, q: &FairQ<Job>) {
        self.queued.store(q.queued() as u64, Relaxed);
        self.in_flight.store(q.in_flight() as u64, Relaxed);
    }
}

struct Shared {
    q: Mutex<FairQ<Job>>,
    closed: AtomicBool,
}

impl Shared {
    fn new() -> Shared {
        Shared {
            q: Mutex::new(FairQ::new(Limits {
                per_app_queued: PER_APP_QUEUE,
                total_queued: QUEUE,
                per_app_in_flight: PER_APP_IN_FLIGHT,
                max_in_flight: MAX_IN_FLIGHT,
            })),
            closed: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, FairQ<Job>> {
        self.q.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The chat thread's side of the deliverer: `try_send` queues a job or
/// refuses it at once. Dropping it stops the deliverer (its calls in
/// flight are abandoned).
pub struct Deliveries {
    shared: Arc<Shared>,
    /// Wakes the deliverer (a channel of one: a wake-up pending is enough).
    wake: Sender<()>,
    stats: Arc<EndpointStats>,
}

impl Deliveries {
    /// Queue `job` behind its application's earlier ones, or refuse it
    /// (counted): the application's queue or the whole queue is full.
    pub fn try_send(&self, job: Job) -> Result<(), Refused> {
        let pushed = {
            let mut q = self.shared.lock();
            let r = q.push(job.app, job);
            self.stats.gauge(&q);
            r
        };
        match pushed {
            Ok(()) => {
                let _ = self.wake.try_send(());
                Ok(())
            }
            Err((why, _job)) => {
                let c = match why {
                    Refused::AppFull => &self.stats.refused_app_queue_full,
                    Refused::Full => &self.stats.refused_queue_full,
                };
                c.fetch_add(1, Relaxed);
                Err(why)
            }
        }
    }
}

impl Drop for Deliveries {
    fn drop(&mut self) {
        // The wake channel's end (this sender dropped) wakes the deliverer,
        // which then sees `closed`.
        self.shared.closed.store(true, Relaxed);
        let _ = self.wake.try_send(());
    }
}

/// Start the deliverer; the queue it reads.
pub fn start(
    egress: Arc<EgressClient>,
    chat: Sender<ChatRequest>,
    board: Arc<Board>,
    stats: Arc<EndpointStats>,
) -> Deliveries {
    let shared = Arc::new(Shared::new());
    let (wake, woken) = crossbeam_channel::bounded(1);
    let mut d = Deliverer {
        shared: shared.clone(),
        calls: egress.calls(),
        egress,
        chat,
        board,
        stats: stats.clone(),
        woken,
        flights: HashMap::with_capacity(MAX_IN_FLIGHT),
        next_tag: 0,
        to_chat: VecDeque::with_capacity(MAX_IN_FLIGHT),
        next_sweep: Instant::now(),
        taken: Vec::with_capacity(MAX_IN_FLIGHT),
        expired: Vec::with_capacity(QUEUE),
    };
    std::thread::Builder::new()
        .name("deliver".into())
        .spawn(move || {
            // A panic loses the job being handled (its queue turn is given
            // back as it unwinds: `Flight`), never the calls in flight.
            while catch_unwind(AssertUnwindSafe(|| d.run())).is_err() {
                tracing::error!("interaction deliverer: a delivery panicked; going on");
                std::thread::sleep(Duration::from_millis(10));
            }
        })
        .expect("spawn the interaction deliverer");
    Deliveries {
        shared,
        wake,
        stats,
    }
}

/// `chat::board::FAILURE_REASONS`: not called in time, no response, other.
const NOT_CALLED_REASON: usize = 11;
const NO_RESPONSE_REASON: usize = 10;
const OTHER_REASON: usize = 12;
const NOT_CALLED: &str = "endpoint: not called: the window passed while it waited in the queue";

/// A job taken from the queue; dropping it tells the queue it is done
/// (also if its handling panicked), which may free a turn.
struct Flight {
    shared: Arc<Shared>,
    stats: Arc<EndpointStats>,
    job: Job,
    /// Calls made for it (2 after the retry).
    calls: u8,
    /// The last failure, and its `FAILURE_REASONS` index.
    why: String,
    reason: usize,
}

impl Drop for Flight {
    fn drop(&mut self) {
        let mut q = self.shared.lock();
        q.done(self.job.app);
        self.stats.gauge(&q);
    }
}

/// The deliverer thread's state.
struct Deliverer {
    shared: Arc<Shared>,
    egress: Arc<EgressClient>,
    chat: Sender<ChatRequest>,
    board: Arc<Board>,
    stats: Arc<EndpointStats>,
    woken: Receiver<()>,
    calls: Calls,
    /// The jobs whose call is in flight, by the call's tag.
    flights: HashMap<u64, Flight>,
    next_tag: u64,
    /// Inline answers waiting for room in the chat queue, oldest first,
    /// each with when it gives up.
    to_chat: VecDeque<(Flight, ChatRequest, Instant)>,
    next_sweep: Instant,
    /// Scratch, kept for its capacity.
    taken: Vec<Flight>,
    expired: Vec<Job>,
}

impl Deliverer {
    /// Until the queue is closed: answers in, deadlines, sweeps, new calls;
    /// then waits for the next of them.
    fn run(&mut self) {
        while !self.shared.closed.load(Relaxed) {
            while self.woken.try_recv().is_ok() {}
            // One outcome at a time, its flight out of the map only to be
            // settled: a panic in between cannot strand a queue turn.
            while let Some((tag, r)) = self.next_outcome() {
                if let Some(f) = self.flights.remove(&tag) {
                    self.answered(f, r.map(|rep| (rep.status, rep.body)));
                }
            }
            self.flush_to_chat(Instant::now());
            self.sweep(Instant::now());
            self.take_and_call();
            self.wait(self.stats.queued.load(Relaxed) > 0);
        }
    }

    /// An answer that arrived, or a call given up at its deadline.
    fn next_outcome(&mut self) -> Option<Outcome> {
        while let Ok(a) = self.calls.receiver().try_recv() {
            if let Some(o) = self.calls.finish(a) {
                return Some(o);
            }
        }
        self.calls.expire(Instant::now())
    }

    /// Waits for an answer, a wake-up, room in the chat queue (if an
    /// answer waits for it), or the next deadline, sweep or give-up.
    fn wait(&self, queued: bool) {
        let until = [
            self.calls.next_due(),
            queued.then_some(self.next_sweep),
            self.to_chat.front().map(|e| e.2),
        ]
        .into_iter()
        .flatten()
        .min();
        let mut sel = Select::new();
        sel.recv(self.calls.receiver());
        sel.recv(&self.woken);
        if !self.to_chat.is_empty() {
            sel.send(&self.chat);
        }
        match until {
            Some(t) => {
                let _ = sel.ready_deadline(t);
            }
            None => {
                sel.ready();
            }
        }
    }

    /// Drops the queued jobs past calling, every `SWEEP_MS` while any is
    /// queued (the next sweep is due at `next_sweep`).
    fn sweep(&mut self, now: Instant) {
        if self.stats.queued.load(Relaxed) == 0 || now < self.next_sweep {
            return;
        }
        self.next_sweep = now + Duration::from_millis(SWEEP_MS);
        {
            let mut q = self.shared.lock();
            q.drop_expired(|j| too_late(j.deadline, now), &mut self.expired);
            self.stats.gauge(&q);
        }
        for job in self.expired.drain(..) {
            self.stats.expired.fetch_add(1, Relaxed);
            self.board.note_failure(job.id, NOT_CALLED);
            self.board.endpoint_failed(job.app, NOT_CALLED_REASON);
        }
    }

    /// Takes every job the queue gives now (fair, under the caps) and
    /// starts its call.
    fn take_and_call(&mut self) {
        {
            let mut q = self.shared.lock();
            while let Some((_, job)) = q.take() {
                self.taken.push(Flight {
                    shared: self.shared.clone(),
                    stats: self.stats.clone(),
                    job,
                    calls: 0,
                    why: String::new(),
                    reason: OTHER_REASON,
                });
            }
            self.stats.gauge(&q);
        }
        let mut taken = std::mem::take(&mut self.taken);
        for f in taken.drain(..) {
            if too_late(f.job.deadline, Instant::now()) {
                self.stats.expired.fetch_add(1, Relaxed);
                self.board.note_failure(f.job.id, NOT_CALLED);
                self.board.endpoint_failed(f.job.app, NOT_CALLED_REASON);
            } else {
                self.call(f);
            }
        }
        self.taken = taken;
    }

    /// Starts a call for `f` (its outcome comes through `calls`), or
    /// settles it at once if the call could not start.
    fn call(&mut self, mut f: Flight) {
        f.calls += 1;
        let tag = self.next_tag;
        self.next_tag += 1;
        let j = &f.job;
        match self
            .egress
            .start_delivery(&mut self.calls, tag, &j.url, &j.seed, &j.body, j.deadline)
        {
            Ok(()) => {
                self.flights.insert(tag, f);
            }
            Err(e) => self.answered(f, Err(e)),
        }
    }

    /// A call of `f` ended: delivered, left to the callback route, retried
    /// or failed.
    fn answered(&mut self, mut f: Flight, r: Result<(u16, Vec<u8>), crate::egress::EgressError>) {
        match r {
            Ok((200, answer)) if is_response(&answer) => {
                self.stats.inline.fetch_add(1, Relaxed);
                let req = callback(&f.job, answer);
                if self.to_chat.is_empty() {
                    match self.chat.try_send(req) {
                        Ok(()) => {}
                        Err(TrySendError::Full(req)) => {
                            self.to_chat.push_back((f, req, Instant::now() + CHAT_WAIT));
                        }
                        Err(TrySendError::Disconnected(_)) => self.chat_busy(f),
                    }
                } else {
                    self.to_chat.push_back((f, req, Instant::now() + CHAT_WAIT));
                }
                return;
            }
            Ok((202 | 204, _)) => {
                self.stats.deferred_to_callback.fetch_add(1, Relaxed);
                return;
            }
            Ok((status, _)) => {
                f.why = format!("the endpoint answered {status} without a response");
                f.reason = NO_RESPONSE_REASON;
            }
            Err(e) => {
                f.why = e.to_string();
                f.reason = crate::egress::Reason::ALL
                    .iter()
                    .position(|r| *r == e.reason)
                    .unwrap_or(OTHER_REASON);
            }
        }
        let left = f.job.deadline.saturating_duration_since(Instant::now());
        if f.calls < 2 && left >= Duration::from_millis(RETRY_MARGIN_MS) {
            self.stats.retries.fetch_add(1, Relaxed);
            self.call(f);
        } else {
            self.failed(f);
        }
    }

    /// Hands the waiting inline answers to the chat thread while it has
    /// room; fails those that waited `CHAT_WAIT`.
    fn flush_to_chat(&mut self, now: Instant) {
        while let Some((f, req, until)) = self.to_chat.pop_front() {
            match self.chat.try_send(req) {
                Ok(()) => {}
                Err(TrySendError::Full(req)) if until > now => {
                    self.to_chat.push_front((f, req, until));
                    break;
                }
                Err(_) => self.chat_busy(f),
            }
        }
        while self.to_chat.front().is_some_and(|e| e.2 <= now) {
            let (f, _, _) = self.to_chat.pop_front().expect("checked");
            self.chat_busy(f);
        }
    }

    fn chat_busy(&mut self, mut f: Flight) {
        f.why = "the chat service was busy".into();
        f.reason = OTHER_REASON;
        self.failed(f);
    }

    /// Records `f`'s failure for its person and its application.
    fn failed(&mut self, f: Flight) {
        self.stats.failed.fetch_add(1, Relaxed);
        self.board
            .note_failure(f.job.id, &format!("endpoint: {}", f.why));
        self.board.endpoint_failed(f.job.app, f.reason);
    }
}

/// Whether a job taken `now` is past calling: too little of its window
/// is left for any endpoint to answer in.
fn too_late(deadline: Instant, now: Instant) -> bool {
    deadline.saturating_duration_since(now) < Duration::from_millis(MIN_CALL_MS)
}

fn is_response(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("type").and_then(|t| t.as_u64()))
        .is_some_and(|t| (4..=9).contains(&t))
}

/// The endpoint's inline answer as the callback it stands for.
fn callback(job: &Job, answer: Vec<u8>) -> ChatRequest {
    ChatRequest::internal(
        proto::AppId(0),
        None,
        crate::api::permit::Target::NONE,
        ChatAction::Callback {
            id: job.id,
            token: job.token.clone(),
            with_response: false,
            body: answer,
            content_type: Some("application/json".into()),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(app: u64, id: u64) -> Job {
        Job {
            app,
            id,
            token: String::new(),
            url: String::new(),
            seed: [0; 32],
            body: Vec::new(),
            deadline: Instant::now() + Duration::from_secs(3),
        }
    }

    /// The chat thread's side alone (no deliverer): refusals are counted
    /// by which bound refused.
    #[test]
    fn refusals_are_counted_by_the_bound_that_refused() {
        let stats = Arc::new(EndpointStats::default());
        let d = Deliveries {
            shared: Arc::new(Shared::new()),
            wake: crossbeam_channel::bounded(1).0,
            stats: stats.clone(),
        };
        for id in 0..PER_APP_QUEUE as u64 {
            d.try_send(job(1, id)).unwrap();
        }
        assert_eq!(d.try_send(job(1, 999)), Err(Refused::AppFull));
        let mut app = 2;
        while d.shared.lock().queued() < QUEUE {
            for id in 0..PER_APP_QUEUE as u64 {
                if d.shared.lock().queued() < QUEUE {
                    d.try_send(job(app, id)).unwrap();
                }
            }
            app += 1;
        }
        assert_eq!(d.try_send(job(app, 0)), Err(Refused::Full));
        assert_eq!(stats.refused_app_queue_full.load(Relaxed), 1);
        assert_eq!(stats.refused_queue_full.load(Relaxed), 1);
        assert_eq!(stats.queued.load(Relaxed), QUEUE as u64);
    }

    #[test]
    fn a_job_with_its_window_all_but_passed_is_not_called() {
        let now = Instant::now();
        assert!(too_late(now, now));
        assert!(too_late(now, now + Duration::from_secs(1)), "passed");
        assert!(too_late(now + Duration::from_millis(MIN_CALL_MS - 1), now));
        assert!(!too_late(now + Duration::from_millis(MIN_CALL_MS), now));
        assert!(!too_late(now + Duration::from_millis(2_800), now));
    }
}
