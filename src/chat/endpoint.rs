//! Interactions delivered to an application's HTTP interactions endpoint
//! (REST.md "Interactions"; ADR-11, ADR-12) instead of its gateway session:
//! one signed POST through the egress process, with one retry inside the
//! 3-second window.
//!
//! - `DELIVERERS` threads take jobs from one queue of `QUEUE` (a full queue
//!   refuses the interaction: the person sees the failure at once). The
//!   egress calls block; the chat thread never waits for them.
//! - An answer 200 `{type, data}` is the first response, handed to the chat
//!   thread as a callback (so the 3-second rule and every response rule are
//!   the callback route's). 202 or 204: the endpoint will use the callback
//!   route. Anything else (another status, a body that is no response, a
//!   refusal or a timeout in the egress) is retried once if at least
//!   `RETRY_MARGIN_MS` of the window is left; then the failure is recorded
//!   for the person (who sees it at 3 s) and counted by reason.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::board::Board;
use crate::egress::EgressClient;
use crate::worker::mail::{ChatAction, ChatRequest};

pub const DELIVERERS: usize = 4;
pub const QUEUE: usize = 1024;
/// A retry is made only with at least this much of the window left.
const RETRY_MARGIN_MS: u64 = 300;

/// One interaction to POST.
pub struct Job {
    pub id: u64,
    pub token: String,
    pub url: String,
    pub seed: [u8; 32],
    pub body: Vec<u8>,
    /// The end of the 3-second window.
    pub deadline: Instant,
}

/// Deliveries by outcome: answered inline, left to the callback route,
/// failed (after the retry).
#[derive(Default)]
pub struct EndpointStats {
    pub inline: AtomicU64,
    pub deferred_to_callback: AtomicU64,
    pub retries: AtomicU64,
    pub failed: AtomicU64,
}

/// Start the deliverers; the queue they read.
pub fn start(
    egress: Arc<EgressClient>,
    chat: Sender<ChatRequest>,
    board: Arc<Board>,
    stats: Arc<EndpointStats>,
) -> Sender<Job> {
    let (tx, rx) = crossbeam_channel::bounded(QUEUE);
    for n in 0..DELIVERERS {
        let (rx, egress, chat, board, stats): (Receiver<Job>, _, _, _, _) = (
            rx.clone(),
            egress.clone(),
            chat.clone(),
            board.clone(),
            stats.clone(),
        );
        std::thread::Builder::new()
            .name(format!("deliver-{n}"))
            .spawn(move || {
                for job in rx {
                    deliver(&egress, &chat, &board, &stats, job);
                }
            })
            .expect("spawn an interaction deliverer");
    }
    tx
}

fn deliver(
    egress: &EgressClient,
    chat: &Sender<ChatRequest>,
    board: &Board,
    stats: &EndpointStats,
    job: Job,
) {
    let mut why = String::new();
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
                let req = callback(&job, answer);
                if chat.send_timeout(req, Duration::from_secs(1)).is_err() {
                    why = "the chat service was busy".into();
                    break;
                }
                return;
            }
            Ok((202 | 204, _)) => {
                stats.deferred_to_callback.fetch_add(1, Relaxed);
                return;
            }
            Ok((status, _)) => why = format!("the endpoint answered {status} without a response"),
            Err(e) => why = e.to_string(),
        }
    }
    stats.failed.fetch_add(1, Relaxed);
    board.note_failure(job.id, &format!("endpoint: {why}"));
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
        0,
        Arc::from(""),
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
