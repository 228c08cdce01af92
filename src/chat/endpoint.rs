//! Interactions delivered to an application's HTTP interactions endpoint
//! (REST.md "Interactions"; ADR-11, ADR-12) instead of its gateway session:
//! one signed POST through the egress process, with one retry inside the
//! 3-second window.
//!
//! - `DELIVERERS` threads take jobs from a per-application fair queue
//!   (`fairq`): round-robin between the applications with work, at most
//!   `PER_APP_IN_FLIGHT` calls of one application at once, at most
//!   `PER_APP_QUEUE` jobs queued per application and `QUEUE` in all (a
//!   full queue refuses the interaction: the person sees the failure at
//!   once; counted). The egress calls block; the chat thread never waits
//!   for them (it only pushes under the queue's mutex, O(1)).
//! - A job whose window has all but passed (less than `MIN_CALL_MS` to its
//!   deadline) is not called: dropped, counted, its reason noted for the
//!   person (who sees the failure at 3 s). The `deliver-sweep` thread
//!   drops such jobs from the queue every `SWEEP_MS` while any is queued
//!   (one waiting behind its application's cap would otherwise be reached
//!   only after the 3 s and show no reason); a deliverer checks again
//!   when it takes one.
//! - An answer 200 `{type, data}` is the first response, handed to the chat
//!   thread as a callback (so the 3-second rule and every response rule are
//!   the callback route's). 202 or 204: the endpoint will use the callback
//!   route. Anything else (another status, a body that is no response, a
//!   refusal or a timeout in the egress) is retried once if at least
//!   `RETRY_MARGIN_MS` of the window is left; then the failure is recorded
//!   for the person (who sees it at 3 s) and counted by reason.
//!
//! Why these numbers: a hanging endpoint holds a deliverer for at most the
//! window (~2.7 s, retry included), and one application holds at most
//! `PER_APP_IN_FLIGHT` (4, what the old 4 shared deliverers gave any one
//! application, so no application's throughput shrinks). It takes
//! `DELIVERERS / PER_APP_IN_FLIGHT` = 16 applications hanging at once to
//! hold every deliverer; with fewer, the others share the
//! `DELIVERERS - 4 * hanging` left, served round-robin. 64 threads mostly
//! blocked in the egress client cost little memory (their stacks are
//! mapped, barely touched) and stay well under `egress.max_in_flight`
//! (256 by default). Bounds: at most `QUEUE` jobs queued (~1,024 bodies of
//! an interaction, a few KiB each) plus `DELIVERERS` in flight; the queue's
//! storage is allocated at start (`fairq`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use super::board::Board;
use super::fairq::{FairQ, Limits, Refused};
use crate::egress::EgressClient;
use crate::worker::mail::{ChatAction, ChatRequest};

pub const DELIVERERS: usize = 64;
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

const _: () = assert!(PER_APP_IN_FLIGHT <= DELIVERERS && PER_APP_QUEUE <= QUEUE);
const _: () = assert!(
    DELIVERERS / PER_APP_IN_FLIGHT >= 16,
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
    work: Condvar,
    closed: AtomicBool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, FairQ<Job>> {
        self.q.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The chat thread's side of the deliverers: `try_send` queues a job or
/// refuses it at once. Dropping it stops the deliverers (after their
/// current call).
pub struct Deliveries {
    shared: Arc<Shared>,
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
                self.shared.work.notify_one();
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
        // Under the lock: a deliverer between its check and its wait
        // would miss the wake-up.
        let _q = self.shared.lock();
        self.shared.closed.store(true, Relaxed);
        self.shared.work.notify_all();
    }
}

/// Start the deliverers; the queue they read.
pub fn start(
    egress: Arc<EgressClient>,
    chat: Sender<ChatRequest>,
    board: Arc<Board>,
    stats: Arc<EndpointStats>,
) -> Deliveries {
    let shared = Arc::new(Shared {
        q: Mutex::new(FairQ::new(Limits {
            per_app_queued: PER_APP_QUEUE,
            total_queued: QUEUE,
            per_app_in_flight: PER_APP_IN_FLIGHT,
            max_in_flight: DELIVERERS,
        })),
        work: Condvar::new(),
        closed: AtomicBool::new(false),
    });
    for n in 0..DELIVERERS {
        let (shared, egress, chat, board, stats) = (
            shared.clone(),
            egress.clone(),
            chat.clone(),
            board.clone(),
            stats.clone(),
        );
        std::thread::Builder::new()
            .name(format!("deliver-{n}"))
            .spawn(move || {
                while let Some(taken) = next(&shared, &stats) {
                    if too_late(taken.job.deadline, Instant::now()) {
                        stats.expired.fetch_add(1, Relaxed);
                        board.note_failure(taken.job.id, NOT_CALLED);
                        board.endpoint_failed(taken.job.app, NOT_CALLED_REASON);
                    } else {
                        deliver(&egress, &chat, &board, &stats, &taken.job);
                    }
                }
            })
            .expect("spawn an interaction deliverer");
    }
    {
        let (shared, board, stats) = (shared.clone(), board.clone(), stats.clone());
        std::thread::Builder::new()
            .name("deliver-sweep".into())
            .spawn(move || sweep(&shared, &board, &stats))
            .expect("spawn the interaction queue sweeper");
    }
    Deliveries { shared, stats }
}

/// `chat::board::FAILURE_REASONS`: not called in time, no response, other.
const NOT_CALLED_REASON: usize = 11;
const NOT_CALLED: &str = "endpoint: not called: the window passed while it waited in the queue";

/// Drops the queued jobs past calling, every `SWEEP_MS`, until closed.
fn sweep(shared: &Shared, board: &Board, stats: &EndpointStats) {
    let mut out: Vec<Job> = Vec::with_capacity(QUEUE);
    while !shared.closed.load(Relaxed) {
        std::thread::sleep(Duration::from_millis(SWEEP_MS));
        if stats.queued.load(Relaxed) == 0 {
            continue;
        }
        {
            let mut q = shared.lock();
            let now = Instant::now();
            q.drop_expired(|j| too_late(j.deadline, now), &mut out);
            stats.gauge(&q);
        }
        for job in out.drain(..) {
            stats.expired.fetch_add(1, Relaxed);
            board.note_failure(job.id, NOT_CALLED);
            board.endpoint_failed(job.app, NOT_CALLED_REASON);
        }
    }
}

/// A job a deliverer took; dropping it tells the queue it is done (also
/// if the delivery panicked), which may free a turn for another deliverer.
struct Taken<'a> {
    shared: &'a Shared,
    stats: &'a EndpointStats,
    app: u64,
    job: Job,
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        let more = {
            let mut q = self.shared.lock();
            let more = q.done(self.app);
            self.stats.gauge(&q);
            more
        };
        if more {
            self.shared.work.notify_one();
        }
    }
}

/// The next job for this deliverer (waiting for one); `None` once closed.
fn next<'a>(shared: &'a Shared, stats: &'a EndpointStats) -> Option<Taken<'a>> {
    let mut q = shared.lock();
    loop {
        if shared.closed.load(Relaxed) {
            return None;
        }
        if let Some((app, job)) = q.take() {
            stats.gauge(&q);
            return Some(Taken {
                shared,
                stats,
                app,
                job,
            });
        }
        q = shared.work.wait(q).unwrap_or_else(|p| p.into_inner());
    }
}

/// Whether a job taken `now` is past calling: too little of its window
/// is left for any endpoint to answer in.
fn too_late(deadline: Instant, now: Instant) -> bool {
    deadline.saturating_duration_since(now) < Duration::from_millis(MIN_CALL_MS)
}

fn deliver(
    egress: &EgressClient,
    chat: &Sender<ChatRequest>,
    board: &Board,
    stats: &EndpointStats,
    job: &Job,
) {
    let mut why = String::new();
    let mut reason = 12;
    for attempt in 0..2 {
        if attempt == 1 {
            let left = job.deadline.saturating_duration_since(Instant::now());
            if left < Duration::from_millis(RETRY_MARGIN_MS) {
                break;
            }
            stats.retries.fetch_add(1, Relaxed);
        }
        match egress.deliver(&job.url, &job.seed, &job.body, job.deadline) {
            Ok((200, answer)) if is_response(&answer) => {
                stats.inline.fetch_add(1, Relaxed);
                let req = callback(job, answer);
                if chat.send_timeout(req, Duration::from_secs(1)).is_err() {
                    why = "the chat service was busy".into();
                    reason = 12;
                    break;
                }
                return;
            }
            Ok((202 | 204, _)) => {
                stats.deferred_to_callback.fetch_add(1, Relaxed);
                return;
            }
            Ok((status, _)) => {
                why = format!("the endpoint answered {status} without a response");
                reason = 10;
            }
            Err(e) => {
                why = e.to_string();
                reason = crate::egress::Reason::ALL
                    .iter()
                    .position(|r| *r == e.reason)
                    .unwrap_or(12);
            }
        }
    }
    stats.failed.fetch_add(1, Relaxed);
    board.note_failure(job.id, &format!("endpoint: {why}"));
    board.endpoint_failed(job.app, reason);
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

    /// The chat thread's side alone (no deliverers): refusals are counted
    /// by which bound refused.
    #[test]
    fn refusals_are_counted_by_the_bound_that_refused() {
        let stats = Arc::new(EndpointStats::default());
        let d = Deliveries {
            shared: Arc::new(Shared {
                q: Mutex::new(FairQ::new(Limits {
                    per_app_queued: PER_APP_QUEUE,
                    total_queued: QUEUE,
                    per_app_in_flight: PER_APP_IN_FLIGHT,
                    max_in_flight: DELIVERERS,
                })),
                work: Condvar::new(),
                closed: AtomicBool::new(false),
            }),
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
