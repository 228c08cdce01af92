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
pub mod history;
pub mod interactions;
pub mod objects;
mod open;
pub mod sink;
pub mod store;
mod tap;
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
use crate::worker::mail::{ChatAction, ChatRequest, ToWorker, WorkerHandle};
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
    /// The upstream option's calls (`upstream.rs`).
    pub upstream: Arc<upstream::UpstreamStats>,
}

struct Chat {
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
    /// Open interactions (`interactions.rs`).
    ix: interactions::Interactions,
    /// The next commit is for the bots in its mentions only.
    addressed: bool,
}

type Answer = Result<(u16, Vec<u8>), ApiError>;

pub fn start(
    sink: Sink,
    rx: Receiver<ChatRequest>,
    mut tap: Receiver<Arc<Batch>>,
    workers: Arc<[WorkerHandle]>,
    stats: Arc<ChatStats>,
    ix: interactions::Interactions,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name("chat".into())
        .spawn(move || {
            let mut chat = Chat {
                actor: 0,
                ix,
                addressed: false,
                ids: registry::snowflake::SnowflakeGenerator::new(1023),
                history: History::new(),
                sink,
                index: 0,
                frame: Vec::with_capacity(64 * 1024),
                reader: ingest::FrameReader::new(),
                stats,
            };
            let mut answers = Vec::with_capacity(BATCH);
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
                    let (worker, conn) = (req.worker, req.conn);
                    chat.index = answers.len();
                    let (status, body) = match chat.handle(req) {
                        Ok(a) => a,
                        Err(e) => (e.status, e.to_bytes()),
                    };
                    answers.push((worker, conn, status, body));
                    if answers.len() < BATCH {
                        next = rx.try_recv().ok();
                    }
                }
                // The events first, then the answers: a bot never hears "done"
                // before the stream has its event.
                for i in chat.sink.finish() {
                    let e = ApiError::new(
                        503,
                        0,
                        "the chat service could not commit the action in time; try again",
                    );
                    chat.stats.commit_failed.fetch_add(1, Relaxed);
                    chat.stats.committed.fetch_sub(1, Relaxed);
                    let a = &mut answers[i];
                    (a.2, a.3) = (e.status, e.to_bytes());
                }
                chat.publish_stats();
                for (worker, conn, status, body) in answers.drain(..) {
                    if let Some(w) = workers.get(worker) {
                        w.send(ToWorker::RestReply { conn, status, body });
                    }
                }
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
    fn publish_stats(&self) {
        self.stats
            .history_messages
            .store(self.history.len() as u64, Relaxed);
        self.stats
            .history_bytes
            .store(self.history.bytes() as u64, Relaxed);
        self.stats
            .history_evicted
            .store(self.history.evicted, Relaxed);
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
        // Checked like any producer's record (it is ours, so a refusal is a bug).
        self.reader.push(&self.frame);
        let outcome = self.reader.next().map(|r| r.map(|_| ()));
        match outcome {
            Some(Ok(())) => {
                let body = self.reader.last_body();
                if !self.sink.commit(server, &self.frame, body, self.index) {
                    self.stats.commit_failed.fetch_add(1, Relaxed);
                    return Err(ApiError::new(
                        503,
                        0,
                        "the chat service could not commit the action; try again",
                    ));
                }
                self.stats.committed.fetch_add(1, Relaxed);
                Ok(())
            }
            other => {
                self.reader.reset();
                let other = other.map(|r| r.map_err(|e| e.reason()));
                self.stats.commit_failed.fetch_add(1, Relaxed);
                tracing::error!(
                    ?other,
                    event = t,
                    "chat service: its own record was refused by the ingest decoder"
                );
                Err(ApiError::new(
                    500,
                    0,
                    "the chat service could not commit the action",
                ))
            }
        }
    }

    fn handle(&mut self, req: ChatRequest) -> Answer {
        let t = req.target;
        let (server, channel) = (t.server.0, t.channel.0);
        // The acting bot, as the registry records it (`BotUser`): the
        // author, reactor and typer of what follows. A request without one
        // (an interaction token's) acts as its interaction's bot, below.
        let bot = req.bot.clone();
        let me = bot.as_ref().map_or(0, BotUser::id);
        self.actor = me;
        let now = now_ms();
        let acting = || bot.as_ref().ok_or_else(no_bot);
        match req.action {
            ChatAction::Create(draft) => {
                let author = acting()?.value();
                // A reply to a message this service did not commit (a person's,
                // from another producer) or that left the window is still a
                // reply: `referenced_message` is then null, as for a deleted one.
                let reply_to = match draft.reference {
                    Some((mid, ch)) if ch.is_none_or(|c| c == channel) => Some((
                        mid,
                        self.history
                            .get(channel, mid)
                            .map_or(Value::Null, Stored::value),
                    )),
                    Some(_) => {
                        return Err(ApiError::form(
                            "message_reference",
                            "REPLIES_CANNOT_REFERENCE_OTHER_CHANNEL",
                            "Cannot reply to a message in another channel",
                        ))
                    }
                    None => None,
                };
                let content = draft.content.as_deref().unwrap_or("");
                let mentions = objects::allowed_users(content, draft.allowed_mentions.as_ref());
                let id = self.ids.next_id();
                let m = objects::message(&objects::NewMessage {
                    id,
                    channel,
                    author,
                    draft: &draft,
                    now_ms: now,
                    mentions: &mentions,
                    reply_to: reply_to.as_ref().map(|(i, v)| (*i, v)),
                    guild: server,
                });
                let body = serde_json::to_vec(&m).expect("json");
                let d = objects::message_event(&body, server, now);
                // The author sees its own message's content (as on the
                // platform), like those it mentions.
                let mut full = mentions;
                full.push(me);
                self.commit(
                    "MESSAGE_CREATE",
                    t,
                    intents::GUILD_MESSAGES,
                    true,
                    &full,
                    &d,
                )?;
                self.history.push(
                    channel,
                    Stored {
                        id,
                        author_id: me,
                        bytes: body.len(),
                        message: m,
                        raw: None,
                        reactions: Vec::new(),
                    },
                );
                Ok((200, body))
            }
            ChatAction::List {
                limit,
                before,
                after,
                around,
            } => {
                let list: Vec<Value> = self
                    .history
                    .list(channel, limit, before, after, around)
                    .into_iter()
                    .map(|s| objects::with_reactions(&s.value(), &s.reactions, me))
                    .collect();
                Ok((200, serde_json::to_vec(&list).expect("json")))
            }
            ChatAction::Get(mid) => {
                let s = self.history.get(channel, mid).ok_or_else(unknown_message)?;
                Ok((
                    200,
                    serde_json::to_vec(&objects::with_reactions(&s.value(), &s.reactions, me))
                        .expect("json"),
                ))
            }
            ChatAction::Edit(mid, draft) => {
                let s = self.history.get(channel, mid).ok_or_else(unknown_message)?;
                if s.author_id != me {
                    return Err(ApiError::new(
                        403,
                        codes::CANNOT_EDIT_OTHERS,
                        "Cannot edit a message authored by another user",
                    ));
                }
                let mut m = s.value();
                if let Some(c) = &draft.content {
                    m["content"] = c.clone().into();
                }
                if let Some(e) = &draft.embeds {
                    m["embeds"] = e.clone().into();
                }
                if let Some(c) = &draft.components {
                    m["components"] = c.clone().into();
                }
                // An edit answers a deferral: the message is no longer loading.
                if let Some(f) = m["flags"].as_u64().filter(|f| f & LOADING != 0) {
                    m["flags"] = (f & !LOADING).into();
                }
                m["edited_timestamp"] = crate::protocol::payload::iso8601(now).into();
                let empty = m["content"].as_str().is_none_or(str::is_empty)
                    && m["embeds"].as_array().is_none_or(Vec::is_empty)
                    && m["components"].as_array().is_none_or(Vec::is_empty);
                if empty {
                    return Err(ApiError::new(
                        400,
                        codes::EMPTY_MESSAGE,
                        "Cannot send an empty message",
                    ));
                }
                let content = m["content"].as_str().unwrap_or("").to_string();
                let mentions = objects::allowed_users(&content, draft.allowed_mentions.as_ref());
                let body = serde_json::to_vec(&m).expect("json");
                let d = objects::message_event(&body, server, now);
                self.commit(
                    "MESSAGE_UPDATE",
                    t,
                    intents::GUILD_MESSAGES,
                    true,
                    &mentions,
                    &d,
                )?;
                let s = self.history.get_mut(channel, mid).expect("checked");
                let old = s.bytes;
                s.message = m;
                s.raw = None;
                s.bytes = body.len();
                let reactions = s.reactions.clone();
                self.history.resize(old, body.len());
                let out = objects::with_reactions(
                    &serde_json::from_slice(&body).expect("json"),
                    &reactions,
                    me,
                );
                Ok((200, serde_json::to_vec(&out).expect("json")))
            }
            ChatAction::Delete(mid) => {
                let s = self.history.get(channel, mid).ok_or_else(unknown_message)?;
                may_delete(t.perms, s.author_id == me)?;
                let d = json!({"id": mid.to_string(), "channel_id": channel.to_string(), "guild_id": server.to_string()});
                self.commit(
                    "MESSAGE_DELETE",
                    t,
                    intents::GUILD_MESSAGES,
                    false,
                    &[],
                    &json_bytes(&d),
                )?;
                self.history.remove(channel, mid);
                Ok((204, Vec::new()))
            }
            ChatAction::BulkDelete(ids) => {
                let oldest = now.saturating_sub(BULK_MAX_AGE_MS);
                if ids
                    .iter()
                    .any(|&id| registry::snowflake::timestamp_ms(id) < oldest)
                {
                    return Err(ApiError::new(
                        400,
                        codes::BULK_DELETE_TOO_OLD,
                        "You can only bulk delete messages that are under 14 days old.",
                    ));
                }
                let found: Vec<u64> = ids
                    .into_iter()
                    .filter(|&id| self.history.get(channel, id).is_some())
                    .collect();
                if !found.is_empty() {
                    let d = json!({"ids": found.iter().map(u64::to_string).collect::<Vec<_>>(), "channel_id": channel.to_string(), "guild_id": server.to_string()});
                    self.commit(
                        "MESSAGE_DELETE_BULK",
                        t,
                        intents::GUILD_MESSAGES,
                        false,
                        &[],
                        &json_bytes(&d),
                    )?;
                    for id in found {
                        self.history.remove(channel, id);
                    }
                }
                Ok((204, Vec::new()))
            }
            ChatAction::React(mid, emoji) => {
                let s = self.history.get(channel, mid).ok_or_else(unknown_message)?;
                let author = s.author_id;
                match s.reactions.iter().find(|r| r.emoji == emoji) {
                    Some(r) if r.users.contains(&me) => return Ok((204, Vec::new())),
                    Some(r) if r.users.len() >= MAX_REACTORS => {
                        return Err(ApiError::new(
                            400,
                            30010,
                            "Maximum number of reactions reached (1000)",
                        ))
                    }
                    None if s.reactions.len() >= MAX_REACTIONS => {
                        return Err(ApiError::new(
                            400,
                            30010,
                            "Maximum number of reactions reached (20)",
                        ))
                    }
                    _ => {}
                }
                let d = objects::reaction_event(
                    me,
                    acting()?.value(),
                    channel,
                    mid,
                    server,
                    &emoji,
                    Some(author),
                    true,
                    now,
                );
                self.commit(
                    "MESSAGE_REACTION_ADD",
                    t,
                    intents::GUILD_MESSAGE_REACTIONS,
                    false,
                    &[],
                    &json_bytes(&d),
                )?;
                let s = self.history.get_mut(channel, mid).expect("checked");
                match s.reactions.iter_mut().find(|r| r.emoji == emoji) {
                    Some(r) => r.users.push(me),
                    None => s.reactions.push(Reaction {
                        emoji,
                        users: vec![me],
                    }),
                }
                Ok((204, Vec::new()))
            }
            ChatAction::Unreact(mid, emoji) => {
                let s = self.history.get(channel, mid).ok_or_else(unknown_message)?;
                let had = s
                    .reactions
                    .iter()
                    .any(|r| r.emoji == emoji && r.users.contains(&me));
                if had {
                    let d = objects::reaction_event(
                        me,
                        acting()?.value(),
                        channel,
                        mid,
                        server,
                        &emoji,
                        None,
                        false,
                        now,
                    );
                    self.commit(
                        "MESSAGE_REACTION_REMOVE",
                        t,
                        intents::GUILD_MESSAGE_REACTIONS,
                        false,
                        &[],
                        &json_bytes(&d),
                    )?;
                    let s = self.history.get_mut(channel, mid).expect("checked");
                    if let Some(r) = s.reactions.iter_mut().find(|r| r.emoji == emoji) {
                        r.users.retain(|&u| u != me);
                    }
                    s.reactions.retain(|r| !r.users.is_empty());
                }
                Ok((204, Vec::new()))
            }
            ChatAction::Reactions {
                message,
                emoji,
                limit,
                after,
            } => {
                let s = self
                    .history
                    .get(channel, message)
                    .ok_or_else(unknown_message)?;
                let Some(r) = s.reactions.iter().find(|r| r.emoji == emoji) else {
                    return Err(ApiError::new(404, codes::UNKNOWN_EMOJI, "Unknown Emoji"));
                };
                let mut users: Vec<u64> = r
                    .users
                    .iter()
                    .copied()
                    .filter(|&u| after.is_none_or(|a| u > a))
                    .collect();
                users.sort_unstable();
                let list: Vec<Value> = users
                    .into_iter()
                    .take(limit)
                    .map(|u| match &bot {
                        Some(b) if u == me => b.value().clone(),
                        _ => objects::user_stub(u),
                    })
                    .collect();
                Ok((200, serde_json::to_vec(&list).expect("json")))
            }
            ChatAction::Interaction(n) => {
                let a = self.open_interaction(req.app, bot, t, *n, now);
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
                now,
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
                now,
            ),
            ChatAction::Commit { events, .. } => {
                for (name, intent, d) in &events {
                    self.commit(name, t, *intent, false, &[], d)?;
                }
                Ok((204, Vec::new()))
            }
            ChatAction::Typing => {
                let d = objects::typing_event(me, acting()?.value(), channel, server, now);
                self.commit(
                    "TYPING_START",
                    t,
                    intents::GUILD_MESSAGE_TYPING,
                    false,
                    &[],
                    &json_bytes(&d),
                )?;
                Ok((204, Vec::new()))
            }
        }
    }
}
