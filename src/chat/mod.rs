//! The chat service behind the REST edge: where a permitted request is
//! COMMITTED. The platform's chat service is not ours; this is the embedded
//! stand-in, on its own thread, behind one interface (`ChatRequest` in,
//! `ToWorker::RestReply` out):
//!
//! - it assigns snowflake ids, keeps a bounded recent history per channel
//!   (`history.rs`) for reads, edits, deletes and reactions;
//! - it commits by producing the resulting event (MESSAGE_CREATE/UPDATE/
//!   DELETE/DELETE_BULK, MESSAGE_REACTION_ADD/REMOVE, TYPING_START) into the
//!   node's event stream: it is a source of the ingest pipeline like a
//!   producer connection (`ingest::pipeline::Pipeline`), so the author bot
//!   sees its own message come back like every entitled bot;
//! - it works in batches: every request waiting is handled, their events
//!   go to the workers as one batch, then the answers go out. An answer is
//!   sent only after its event was handed to the workers (each worker's
//!   event precedes the answer in its inbox).
//!
//! Bounds: the request queue holds `QUEUE` requests (a full queue is 503 at
//! the worker); at most `BATCH` requests per turn; the history's bounds are
//! in `history.rs`.
//!
//! With `chat.upstream_url` set, `upstream::start` serves the same queue
//! instead: each action is forwarded to that chat service, which commits.

mod adopt;
pub mod board;
pub mod endpoint;
mod fairq;
mod forward;
pub mod history;
pub mod interactions;
mod messages;
pub mod objects;
mod open;
mod reactions;
pub mod sink;
pub mod store;
mod table;
mod tap;
pub use forward::Forward;
pub mod upstream;
mod webhooks;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Receiver;
use proto::intents;
use serde_json::{json, Value};

use crate::api::body::{codes, ApiError};
use crate::api::permit::{may_delete, Target};
use crate::delivery::batch::Batch;
use crate::protocol::bot_user::BotUser;
use crate::worker::local_chat::{LocalChat, Takes};
use crate::worker::mail::{
    ChatAction, ChatRequest, ConnKey, Learnt, ToWorker, Wakes, WorkerHandle,
};
use history::{History, Reaction, Stored, MAX_REACTIONS, MAX_REACTORS};
pub use sink::Sink;

pub const QUEUE: usize = 4096;
/// Requests handled per turn before their events are flushed and answered.
pub const BATCH: usize = 256;
/// Batches of other sources waiting to be read into the history; past it
/// the pipeline skips the tap (`gatewayd_chat_tap_skipped_total`).
pub const TAP_QUEUE: usize = 16;
/// A deferred answer's "thinking" message (MESSAGE_FLAGS bit 7).
const LOADING: u64 = 1 << 7;
/// Bulk delete refuses messages older than this (the platform's 14 days).
const BULK_MAX_AGE_MS: u64 = 14 * 24 * 3600 * 1000;

/// The direct-message intent of a server event's intent.
fn dm_intent(intent: u64) -> u64 {
    match intent {
        intents::GUILD_MESSAGES => intents::DIRECT_MESSAGES,
        intents::GUILD_MESSAGE_REACTIONS => intents::DIRECT_MESSAGE_REACTIONS,
        intents::GUILD_MESSAGE_TYPING => intents::DIRECT_MESSAGE_TYPING,
        other => other,
    }
}

#[derive(Default)]
pub struct ChatStats {
    pub committed: AtomicU64,
    pub commit_failed: AtomicU64,
    pub history_messages: AtomicU64,
    pub history_bytes: AtomicU64,
    pub history_evicted: AtomicU64,
    /// Learnt messages a worker's full inbox did not take (`tap.rs`).
    pub learn_dropped: AtomicU64,
    /// The upstream option's calls (`upstream.rs`).
    pub upstream: Arc<upstream::UpstreamStats>,
}

/// One chat service: the chat thread's (interactions, member routes'
/// commits, and everything with Kafka or upstream) or a worker's
/// (`for_worker`: the message actions of the servers `api::commit_worker`
/// gives that worker).
pub struct Chat {
    ids: registry::snowflake::SnowflakeGenerator,
    history: History,
    /// Where the commits go (`sink.rs`): this node's pipeline, or Kafka.
    sink: Sink,
    /// The index in this turn of the request being handled.
    index: usize,
    frame: Vec<u8>,
    reader: ingest::FrameReader,
    stats: Arc<ChatStats>,
    /// The bot whose request is being handled.
    actor: u64,
    /// Open interactions (`interactions.rs`); a worker's stays empty.
    ix: table::Interactions,
    /// The next commit is for the bots in its mentions only.
    addressed: bool,
    /// This turn's answers: (worker, connection, status, body), sent once
    /// the turn's events are in the stream.
    answers: Vec<(usize, ConnKey, u16, Vec<u8>)>,
    /// The workers this turn's answers owe a wakeup.
    wakes: Wakes,
    /// A worker's: (its index, the number of workers); None: the chat thread.
    worker: Option<(usize, usize)>,
    /// The history figures this instance last added to `stats`.
    published: (u64, u64, u64),
    /// The `d` being committed (reused).
    event: Vec<u8>,
    /// The chat thread's, with per-worker chat services: where what it
    /// learns goes (`tap.rs`).
    forward: Option<Forward>,
}

impl Chat {
    fn new(
        sink: Sink,
        ix: table::Interactions,
        stats: Arc<ChatStats>,
        id: u16,
        max_bytes: usize,
    ) -> Chat {
        Chat {
            actor: 0,
            ix,
            addressed: false,
            ids: registry::snowflake::SnowflakeGenerator::new(id),
            history: History::with_max_bytes(max_bytes),
            sink,
            index: 0,
            frame: Vec::with_capacity(64 * 1024),
            reader: ingest::FrameReader::new(),
            stats,
            answers: Vec::with_capacity(BATCH),
            wakes: Wakes::default(),
            worker: None,
            published: (0, 0, 0),
            event: Vec::with_capacity(4096),
            forward: None,
        }
    }

    /// Worker `me`'s chat service: it commits through the worker's own
    /// pipeline (`Pipeline::for_worker`), keeps its servers' window
    /// (`MAX_BYTES / workers`), and never serves an interaction action
    /// (the REST edge sends those to the chat thread). `generator`: its
    /// snowflake generator (`ids.rs`).
    pub fn for_worker(
        pipeline: crate::ingest::pipeline::Pipeline,
        ix: table::Interactions,
        stats: Arc<ChatStats>,
        (me, workers): (usize, usize),
        generator: u16,
    ) -> Chat {
        let mut c = Chat::new(
            Sink::Local(pipeline),
            ix,
            stats,
            generator,
            history::MAX_BYTES / workers.max(1),
        );
        c.worker = Some((me, workers));
        c
    }

    /// Commits would have to wait for workers to let go of batches: the
    /// worker answers 503 instead (`Pipeline::busy`).
    pub fn busy(&self) -> bool {
        match &self.sink {
            Sink::Local(p) => p.busy() || self.answers.len() >= QUEUE,
            Sink::Kafka(_) => false,
        }
    }
}

/// A worker's chat service, as its worker drives it; the chat thread drives
/// its own the same way.
impl LocalChat for Chat {
    fn takes(&self) -> Takes {
        Takes::ServersMessages
    }

    /// Handle one request of this turn; its answer waits for `end_turn`.
    /// A worker's refuses it (503) while `busy`.
    fn take(&mut self, req: ChatRequest) {
        let (worker, conn) = (req.worker, req.conn);
        self.index = self.answers.len();
        let answer = if self.worker.is_some() && self.busy() {
            Err(ApiError::new(503, 0, "the chat service is busy: try again"))
        } else {
            self.handle(req)
        };
        let (status, body) = match answer {
            Ok(a) => a,
            Err(e) => (e.status, e.to_bytes()),
        };
        self.answers.push((worker, conn, status, body));
    }

    /// The end of a turn: the events first, then the answers (a bot never
    /// hears "done" before the stream has its event: every worker's inbox
    /// has the batch ahead of the answer). False if there was nothing.
    fn end_turn(&mut self, workers: &[WorkerHandle]) -> bool {
        if self.answers.is_empty() {
            return false;
        }
        for i in self.sink.finish() {
            let e = ApiError::new(
                503,
                0,
                "the chat service could not commit the action in time; try again",
            );
            self.stats.commit_failed.fetch_add(1, Relaxed);
            self.stats.committed.fetch_sub(1, Relaxed);
            let a = &mut self.answers[i];
            (a.2, a.3) = (e.status, e.to_bytes());
        }
        self.publish_stats();
        let me = self.worker.map(|(w, _)| w);
        for (worker, conn, status, body) in self.answers.drain(..) {
            let Some(w) = workers.get(worker) else {
                continue;
            };
            let msg = ToWorker::RestReply { conn, status, body };
            if Some(worker) == me {
                // Our own inbox, in our turn: behind the batch, no wakeup.
                let _ = w.push_quiet(msg);
            } else {
                // One wakeup per worker for all of this turn's answers.
                let _ = self.wakes.push(worker, workers, msg);
            }
        }
        self.wakes.flush(workers);
        true
    }

    /// Apply what the chat thread learnt for this worker's servers.
    fn learnt(&mut self, changes: Box<[Learnt]>) {
        for l in changes.into_vec() {
            self.history.apply(l);
        }
        self.publish_stats();
    }
}

type Answer = Result<(u16, Vec<u8>), ApiError>;

// Each argument is one of the thread's distinct inputs or outputs; a
// struct of them would only rename the list.
#[allow(clippy::too_many_arguments)]
pub fn start(
    sink: Sink,
    rx: Receiver<ChatRequest>,
    mut tap: Receiver<Arc<Batch>>,
    workers: Arc<[WorkerHandle]>,
    stats: Arc<ChatStats>,
    ix: table::Interactions,
    forward: Option<Forward>,
    generator: u16,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("chat".into())
        .spawn(move || {
            let mut chat = Chat::new(sink, ix, stats, generator, history::MAX_BYTES);
            chat.forward = forward;
            chat.ix.restore(now_ms());
            while !stop.load(Relaxed) {
                let now = now_ms();
                chat.ix.tick(now);
                // Wake for the next interaction deadline, at least every 100 ms.
                let wait = chat
                    .ix
                    .next_deadline()
                    .map_or(100, |d| d.saturating_sub(now).clamp(1, 100));
                let first = crossbeam_channel::select! {
                    recv(rx) -> r => match r {
                        Ok(r) => r,
                        Err(_) => break,
                    },
                    recv(tap) -> b => {
                        match b {
                            Ok(b) => chat.learn(&b),
                            // Every source has stopped: stop listening to them.
                            Err(_) => tap = crossbeam_channel::never(),
                        }
                        continue;
                    }
                    default(Duration::from_millis(wait)) => continue,
                };
                let mut next = Some(first);
                while let Some(req) = next.take() {
                    chat.take(req);
                    if chat.answers.len() < BATCH {
                        next = rx.try_recv().ok();
                    }
                }
                chat.end_turn(&workers);
            }
        })
}

fn json_bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).expect("json")
}

/// A bot action reached the chat service without its bot: a bug of the
/// node's, answered as one (never committed with an empty author).
fn no_bot() -> ApiError {
    ApiError::new(500, 0, "the action names no bot user")
}

fn unknown_message() -> ApiError {
    ApiError::new(404, codes::UNKNOWN_MESSAGE, "Unknown Message")
}

fn now_ms() -> u64 {
    registry::snowflake::unix_ms_now()
}

impl Chat {
    /// Add this instance's change of its window's figures to `stats`
    /// (several instances share them: the chat thread and each worker's).
    fn publish_stats(&mut self) {
        let now = (
            self.history.len() as u64,
            self.history.bytes() as u64,
            self.history.evicted,
        );
        let was = std::mem::replace(&mut self.published, now);
        let add = |a: &AtomicU64, new: u64, old: u64| {
            a.fetch_add(new.wrapping_sub(old), Relaxed);
        };
        add(&self.stats.history_messages, now.0, was.0);
        add(&self.stats.history_bytes, now.1, was.1);
        add(&self.stats.history_evicted, now.2, was.2);
    }

    /// Produce one event; `Err` is the 503 the bot gets.
    fn commit(
        &mut self,
        t: &str,
        at: Target,
        intent: u64,
        has_content: bool,
        mentions: &[u64],
        d: &[u8],
    ) -> Result<(), ApiError> {
        let (server, channel) = (at.server.0, at.channel.0);
        // A direct message's events carry the DM intents and name their
        // recipient bot (the acting one) in `mentions`, as the fan-out
        // delivers DMs (`FanOut::deliver`).
        let dm = [self.actor];
        let (intent, mentions) = if server == 0 {
            (dm_intent(intent), &dm[..])
        } else {
            (intent, mentions)
        };
        self.frame.clear();
        let ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let flags = if has_content {
            ingest::FLAG_HAS_CONTENT
        } else {
            0
        } | if self.addressed {
            ingest::FLAG_ADDRESSED
        } else {
            0
        };
        ingest::encode_parts(
            t,
            server,
            channel,
            intent,
            0,
            ns,
            flags,
            mentions,
            d,
            &mut self.frame,
        );
        // Our own record: its `d` is JSON we wrote. Debug builds (every
        // test) check it as the ingest decoder checks a producer's, so a
        // refusal is a bug found there; release builds commit the encoded
        // body as it is (the check was ~4 % of a request's CPU).
        if cfg!(debug_assertions) {
            self.reader.push(&self.frame);
            let outcome = self.reader.next().map(|r| r.map(|_| ()));
            if !matches!(outcome, Some(Ok(()))) {
                self.reader.reset();
                let other = outcome.map(|r| r.map_err(|e| e.reason()));
                self.stats.commit_failed.fetch_add(1, Relaxed);
                tracing::error!(
                    ?other,
                    event = t,
                    "chat service: its own record was refused by the ingest decoder"
                );
                return Err(ApiError::new(
                    500,
                    0,
                    "the chat service could not commit the action",
                ));
            }
            debug_assert_eq!(self.reader.last_body(), &self.frame[ingest::HEADER_LEN..]);
        }
        let body = &self.frame[ingest::HEADER_LEN..];
        if !self.sink.commit(server, &self.frame, body, self.index) {
            self.stats.commit_failed.fetch_add(1, Relaxed);
            return Err(ApiError::new(
                503,
                0,
                "the chat service could not commit the action; try again",
            ));
        }
        self.stats.committed.fetch_add(1, Relaxed);
        // A worker's edits and deletes reach the chat thread too: its
        // interactions act on the messages it knows (`tap.rs`).
        if self.worker.is_some()
            && matches!(
                t,
                "MESSAGE_UPDATE" | "MESSAGE_DELETE" | "MESSAGE_DELETE_BULK"
            )
        {
            self.sink.tap_this();
        }
        Ok(())
    }

    /// One request: who acts, where, then its family's handler, each of
    /// which ends in the one `commit` (or answers from the window).
    fn handle(&mut self, req: ChatRequest) -> Answer {
        let t = req.target;
        // The acting bot, as the registry records it (`BotUser`): the
        // author, reactor and typer of what follows. A request without one
        // (an interaction token's) acts as its interaction's bot, below.
        let me = req.bot.as_ref().map_or(0, BotUser::id);
        self.actor = me;
        let act = Act {
            t,
            server: t.server.0,
            channel: t.channel.0,
            me,
            bot: req.bot,
            now: now_ms(),
        };
        if self.worker.is_some() && !req.action.commits_on_worker() {
            // The REST edge sends these to the chat thread.
            return Err(ApiError::new(
                500,
                0,
                "an interaction action reached a worker's chat service",
            ));
        }
        match req.action {
            ChatAction::Create(draft) => self.create(&act, draft),
            ChatAction::List {
                limit,
                before,
                after,
                around,
            } => self.list(&act, limit, before, after, around),
            ChatAction::Get(mid) => self.get(&act, mid),
            ChatAction::Edit(mid, draft) => self.edit(&act, mid, draft),
            ChatAction::Delete(mid) => self.delete(&act, mid),
            ChatAction::BulkDelete(ids) => self.bulk_delete(&act, ids),
            ChatAction::Typing => self.typing(&act),
            ChatAction::React(mid, emoji) => self.react(&act, mid, emoji),
            ChatAction::Unreact(mid, emoji) => self.unreact(&act, mid, emoji),
            ChatAction::Reactions {
                message,
                emoji,
                limit,
                after,
            } => self.reactions(&act, message, &emoji, limit, after),
            ChatAction::Interaction(n) => {
                let a = self.open_interaction(req.app, act.bot, t, *n, act.now);
                self.actor = me;
                a
            }
            ChatAction::Callback {
                id,
                token,
                with_response,
                body,
                content_type,
            } => self.callback(
                id,
                &token,
                with_response,
                &body,
                content_type.as_deref(),
                act.now,
            ),
            ChatAction::Webhook {
                app,
                token,
                method,
                message,
                body,
                content_type,
            } => self.webhook(
                app,
                &token,
                method,
                message,
                &body,
                content_type.as_deref(),
                act.now,
            ),
            ChatAction::Commit { events, .. } => {
                for (name, intent, d) in &events {
                    self.commit(name, t, *intent, false, &[], d)?;
                }
                Ok((204, Vec::new()))
            }
        }
    }
}

/// Who acts, where and when: what every action of one request needs.
pub(crate) struct Act {
    t: Target,
    server: u64,
    channel: u64,
    /// The acting bot's user id (0: none).
    me: u64,
    bot: Option<BotUser>,
    now: u64,
}

impl Act {
    /// The acting bot; an action that must have one and has none is a bug
    /// of the node's, answered as one.
    fn acting(&self) -> Result<&BotUser, ApiError> {
        self.bot.as_ref().ok_or_else(no_bot)
    }
}
