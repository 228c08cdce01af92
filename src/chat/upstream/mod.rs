//! The chat service's upstream option (contract: docs/chat-upstream.md).
//! The platform's chat service is not ours: with `chat.upstream_url` set,
//! the node runs this instead of the embedded service (`chat::start`) and
//! forwards every validated, permitted action over HTTP to the chat service
//! at that URL, relaying its answer. Same interface as the embedded one:
//! `ChatRequest` in (the bounded `chat::QUEUE`), `ToWorker::RestReply` out.
//!
//! Design: a `Pool` is `connections` threads, each owning ONE keep-alive
//! HTTP/1.1 connection and making one call at a time on it (one `POST <url
//! path>` with the JSON envelope, `envelope`, then its answer), fed by one
//! bounded job queue. Each worker has its own pool (`Forwarder`, the
//! worker's `LocalChat`: "chat-up-wW-N"): an action of a bot the worker
//! serves is stamped with its deadline (`timeout` from that moment) and
//! queued there by the worker itself, with no thread between (issue 27).
//! The chat thread ("chat") keeps a pool of its own ("chat-up-N") for what
//! reaches the chat queue from elsewhere (a person's interaction, a member
//! route's events, from the sidecar).
//! A connection is opened when a call needs one (never one per request),
//! checked before reuse (closed by the peer meanwhile: reopened), and
//! dropped after any failure. Plain http only (no TLS yet). The HTTP
//! client and the reader of answers are in `client.rs`.
//!
//! Bounds: per pool, `JOBS` calls waiting for a connection (beyond: 503 at
//! once) and one call in flight per connection, at most `MAX_CONNECTIONS`
//! (so `chat.upstream_connections` x (workers + 1) connections in all); an answer head
//! of `MAX_HEAD` bytes and a body of `MAX_ANSWER` bytes. The deadline
//! covers waiting for a connection, connecting, sending and reading, so a
//! slow or hung upstream makes requests 503 once it passes; they never pile
//! up behind it. (Neither a worker nor the dispatcher blocks to queue, so
//! a request's time before it is stamped is short.)
//!
//! Failure policy: never a retry (an action is not idempotent; the one
//! exception is a reused connection the peer had closed, which fails before
//! the request was sent), the connection dropped, the answer one of these,
//! each counted in `gatewayd_chat_upstream_failures_total{reason}`:
//! - `unreachable`: no connection (refused, no route, no address), or the
//!   connection closed before a byte of answer: 503 code 0;
//! - `timeout`: the deadline passed: 503 code 0;
//! - `malformed`: not HTTP/1.x, a status outside 200-599, a head or body
//!   over the bounds, a non-empty body that is not JSON, a cut answer: 502
//!   code 0;
//! - `busy`: the job queue is full: 503 code 0.
//!
//! Any other answer is relayed as it came: its status (a 5xx too) and its
//! body bytes. Its headers are not: the node writes its own (the rate-limit
//! headers, `Content-Type: application/json`).
//!
//! Who commits: the upstream. Producing the resulting event into the stream
//! the nodes consume (a node's ingest listener, the Kafka topic) is its job;
//! the node produces nothing for a forwarded action.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use serde_json::{json, Map, Value};

use crate::api::body::MessageDraft;
use crate::api::route::ApiRoute;
use crate::protocol::bot_user::BotUser;
use crate::worker::local_chat::{LocalChat, Takes};
use crate::worker::mail::{ChatAction, ChatRequest, Learnt, ToWorker, WorkerHandle};

pub mod client;
use client::Client;
pub use client::{Failure, Url, MAX_ANSWER, MAX_HEAD};

/// Calls waiting for a free connection; a request beyond is 503 (`busy`).
pub const JOBS: usize = 1024;
pub const MAX_CONNECTIONS: usize = 64;
/// `version` of the envelope (docs/chat-upstream.md).
pub const ENVELOPE_VERSION: u64 = 1;

/// The `reason` labels of the failure counter, by `Failure` discriminant.
pub const REASONS: [&str; 4] = ["unreachable", "timeout", "malformed", "busy"];

#[derive(Default)]
pub struct UpstreamStats {
    /// Answers relayed as the upstream gave them.
    pub relayed: AtomicU64,
    /// Calls failed, by `REASONS`.
    pub failures: [AtomicU64; 4],
}

pub struct Settings {
    pub url: Url,
    /// Connection threads (1..=`MAX_CONNECTIONS`).
    pub connections: usize,
    /// Each call's deadline, from the dispatcher taking the request.
    pub timeout: Duration,
}

struct Job {
    req: ChatRequest,
    deadline: Instant,
}

/// `connections` threads, each with its own connection, sharing one job
/// queue. Dropping the pool lets its threads end once the queue is empty
/// (they also stop on `stop`).
pub struct Pool {
    jobs: crossbeam_channel::Sender<Job>,
    timeout: Duration,
    workers: Arc<[WorkerHandle]>,
    stats: Arc<UpstreamStats>,
}

impl Pool {
    /// Start the pool's threads, named `{name}-{i}`.
    pub fn start(
        settings: &Settings,
        name: &str,
        workers: Arc<[WorkerHandle]>,
        stats: Arc<UpstreamStats>,
        stop: &Arc<AtomicBool>,
    ) -> io::Result<(Pool, Vec<JoinHandle<()>>)> {
        let (jobs, jobs_rx) = crossbeam_channel::bounded::<Job>(JOBS);
        let n = settings.connections.clamp(1, MAX_CONNECTIONS);
        let mut threads = Vec::with_capacity(n);
        for i in 0..n {
            let (jobs, workers, stats, stop) = (
                jobs_rx.clone(),
                workers.clone(),
                stats.clone(),
                stop.clone(),
            );
            let url = settings.url.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("{name}-{i}"))
                    .spawn(move || connection(url, &jobs, &workers, &stats, &stop))?,
            );
        }
        let pool = Pool {
            jobs,
            timeout: settings.timeout,
            workers,
            stats,
        };
        Ok((pool, threads))
    }

    /// Stamp the request's deadline (from now) and queue it; a full queue
    /// answers it 503 (`busy`) at once. Never waits.
    pub fn submit(&self, req: ChatRequest) {
        let job = Job {
            req,
            deadline: Instant::now() + self.timeout,
        };
        if let Err(e) = self.jobs.try_send(job) {
            reply(
                &self.workers,
                &e.into_inner().req,
                Err(Failure::Busy),
                &self.stats,
            );
        }
    }
}

/// A worker's own pool, as its chat service: every action of the bots the
/// worker serves is forwarded from it (the upstream commits and orders
/// them, so no server's worker is asked). Its threads end on `stop`.
pub struct Forwarder(Pool);

impl Forwarder {
    pub fn start(
        settings: &Settings,
        worker: usize,
        workers: Arc<[WorkerHandle]>,
        stats: Arc<UpstreamStats>,
        stop: &Arc<AtomicBool>,
    ) -> io::Result<Forwarder> {
        let name = format!("chat-up-w{worker}");
        let (pool, _detached) = Pool::start(settings, &name, workers, stats, stop)?;
        Ok(Forwarder(pool))
    }
}

impl LocalChat for Forwarder {
    fn takes(&self) -> Takes {
        Takes::Everything
    }

    fn take(&mut self, req: ChatRequest) {
        self.0.submit(req);
    }

    fn learnt(&mut self, _: Box<[Learnt]>) {}

    /// Answers come from the pool's threads as they arrive.
    fn end_turn(&mut self, _: &[WorkerHandle]) -> bool {
        false
    }
}

/// Start the chat thread's dispatcher and its pool (what reaches the chat
/// queue: the sidecar's actions); the handle is the dispatcher's, which
/// joins its pool's threads when `stop` is set.
pub fn start(
    settings: Settings,
    rx: Receiver<ChatRequest>,
    workers: Arc<[WorkerHandle]>,
    stats: Arc<UpstreamStats>,
    stop: Arc<AtomicBool>,
) -> io::Result<JoinHandle<()>> {
    let (pool, threads) = Pool::start(&settings, "chat-up", workers, stats, &stop)?;
    std::thread::Builder::new()
        .name("chat".into())
        .spawn(move || {
            while !stop.load(Relaxed) {
                match rx.recv_timeout(Duration::from_millis(100)) {
                    Ok(req) => pool.submit(req),
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => break,
                }
            }
            drop(pool);
            for t in threads {
                let _ = t.join();
            }
        })
}

fn connection(
    url: Url,
    jobs: &Receiver<Job>,
    workers: &[WorkerHandle],
    stats: &UpstreamStats,
    stop: &AtomicBool,
) {
    let mut client = Client::new(url);
    while !stop.load(Relaxed) {
        let job = match jobs.recv_timeout(Duration::from_millis(100)) {
            Ok(j) => j,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let outcome = if Instant::now() >= job.deadline {
            Err(Failure::Timeout)
        } else {
            let body = serde_json::to_vec(&envelope(&job.req)).expect("json");
            client.call(&body, job.deadline)
        };
        reply(workers, &job.req, outcome, stats);
    }
}

fn reply(
    workers: &[WorkerHandle],
    req: &ChatRequest,
    outcome: Result<(u16, Vec<u8>), Failure>,
    stats: &UpstreamStats,
) {
    let (status, body) = match outcome {
        Ok(a) => {
            stats.relayed.fetch_add(1, Relaxed);
            a
        }
        Err(f) => {
            stats.failures[f as usize].fetch_add(1, Relaxed);
            let e = f.error();
            (e.status, e.to_bytes())
        }
    };
    if let Some(w) = workers.get(req.worker) {
        w.send(ToWorker::RestReply {
            conn: req.conn,
            status,
            body,
        });
    }
}

/// The JSON a call carries (docs/chat-upstream.md, "The envelope"). Keys a
/// route does not have are absent: `message_id` and `emoji` where the path
/// names them, `query` for reads with a query, `body` for routes with one.
pub fn envelope(req: &ChatRequest) -> Value {
    let channel = req.target.channel.0;
    let q_id = |v: Option<u64>| v.map_or(Value::Null, |id| id.to_string().into());
    // Interactions are the chat service's own (docs/chat-upstream.md): the
    // person's interaction and the bot's answers go to it as they are.
    match &req.action {
        ChatAction::Interaction(n) => {
            return json!({"version": ENVELOPE_VERSION, "route": "INTERACTION_CREATE",
                "application_id": req.app.0.to_string(), "interaction": n.d, "refused": n.refused})
        }
        ChatAction::Callback {
            id, token, body, ..
        } => {
            return json!({"version": ENVELOPE_VERSION, "route": "POST /interactions/{id}/{token}/callback",
                "interaction_id": id.to_string(), "token": token,
                "body": serde_json::from_slice::<Value>(body).unwrap_or(Value::Null)})
        }
        ChatAction::Webhook {
            app,
            token,
            method,
            message,
            body,
            ..
        } => {
            return json!({"version": ENVELOPE_VERSION, "route": "webhook", "method": format!("{method:?}").to_uppercase(),
                "application_id": app.to_string(), "token": token, "message_id": message.map(|m| m.to_string()),
                "body": serde_json::from_slice::<Value>(body).unwrap_or(Value::Null)})
        }
        _ => {}
    }
    let (route, message, emoji, query, body) = match &req.action {
        ChatAction::Create(d) => (
            ApiRoute::CreateMessage { channel },
            None,
            None,
            None,
            Some(draft(d)),
        ),
        ChatAction::List {
            limit,
            before,
            after,
            around,
        } => (
            ApiRoute::ListMessages { channel },
            None,
            None,
            Some(
                json!({"limit": limit, "before": q_id(*before), "after": q_id(*after), "around": q_id(*around)}),
            ),
            None,
        ),
        ChatAction::Get(m) => (
            ApiRoute::GetMessage {
                channel,
                message: *m,
            },
            Some(*m),
            None,
            None,
            None,
        ),
        ChatAction::Edit(m, d) => (
            ApiRoute::EditMessage {
                channel,
                message: *m,
            },
            Some(*m),
            None,
            None,
            Some(draft(d)),
        ),
        ChatAction::Delete(m) => (
            ApiRoute::DeleteMessage {
                channel,
                message: *m,
            },
            Some(*m),
            None,
            None,
            None,
        ),
        ChatAction::BulkDelete(ids) => (
            ApiRoute::BulkDelete { channel },
            None,
            None,
            None,
            Some(json!({"messages": ids.iter().map(u64::to_string).collect::<Vec<_>>()})),
        ),
        ChatAction::React(m, e) | ChatAction::Unreact(m, e) => {
            let (message, emoji) = (*m, e.clone());
            let route = if matches!(req.action, ChatAction::React(..)) {
                ApiRoute::AddReaction {
                    channel,
                    message,
                    emoji,
                }
            } else {
                ApiRoute::RemoveOwnReaction {
                    channel,
                    message,
                    emoji,
                }
            };
            (route, Some(message), Some(e), None, None)
        }
        ChatAction::Reactions {
            message,
            emoji,
            limit,
            after,
        } => (
            ApiRoute::ListReactions {
                channel,
                message: *message,
                emoji: emoji.clone(),
            },
            Some(*message),
            Some(emoji),
            Some(json!({"limit": limit, "after": q_id(*after)})),
            None,
        ),
        ChatAction::Typing => (ApiRoute::Typing { channel }, None, None, None, None),
        ChatAction::Interaction(_) | ChatAction::Callback { .. } | ChatAction::Webhook { .. } => {
            unreachable!("answered above")
        }
        // A member route: the node's registry holds the change (it is the
        // record of who is a member); the upstream produces its events.
        ChatAction::Commit { route, events } => (
            route.clone(),
            None,
            None,
            None,
            Some(json!({"events": events.iter().map(|(t, _, d)| json!({
                "t": t,
                "d": serde_json::from_slice::<Value>(d).unwrap_or(Value::Null),
            })).collect::<Vec<_>>()})),
        ),
    };
    let name = route.name();
    let mut e = Map::new();
    e.insert("version".into(), ENVELOPE_VERSION.into());
    e.insert("route".into(), name.into());
    e.insert("method".into(), name.split(' ').next().unwrap_or("").into());
    e.insert("application_id".into(), req.app.0.to_string().into());
    let bot = req.bot.as_ref();
    let bot_id = bot.map_or(0, BotUser::id);
    e.insert("bot_user_id".into(), bot_id.to_string().into());
    e.insert(
        "bot_user".into(),
        bot.map_or(Value::Null, |b| b.public_value().clone()),
    );
    e.insert("guild_id".into(), req.target.server.0.to_string().into());
    e.insert("channel_id".into(), channel.to_string().into());
    e.insert("permissions".into(), req.target.perms.to_string().into());
    if let Some(m) = message {
        e.insert("message_id".into(), m.to_string().into());
    }
    if let Some(em) = emoji {
        e.insert("emoji".into(), em.clone().into());
    }
    if let Some(q) = query {
        e.insert("query".into(), q);
    }
    if let Some(b) = body {
        e.insert("body".into(), b);
    }
    Value::Object(e)
}

/// A validated message draft as JSON: the fields the bot gave, normalised
/// (`embed` became `embeds`; ids are strings).
fn draft(d: &MessageDraft) -> Value {
    let mut o = Map::new();
    if let Some(c) = &d.content {
        o.insert("content".into(), c.clone().into());
    }
    if let Some(e) = &d.embeds {
        o.insert("embeds".into(), e.clone().into());
    }
    if let Some(a) = &d.allowed_mentions {
        o.insert("allowed_mentions".into(), a.clone());
    }
    if let Some((mid, ch)) = d.reference {
        let mut r = Map::new();
        r.insert("message_id".into(), mid.to_string().into());
        if let Some(c) = ch {
            r.insert("channel_id".into(), c.to_string().into());
        }
        r.insert("fail_if_not_exists".into(), d.fail_if_not_exists.into());
        o.insert("message_reference".into(), r.into());
    }
    if let Some(n) = &d.nonce {
        o.insert("nonce".into(), n.clone());
    }
    o.insert("flags".into(), d.flags.into());
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::permit::Target;
    use crate::delivery::ConnKey;
    use proto::{AppId, ChannelId, ServerId};

    fn request(action: ChatAction) -> ChatRequest {
        ChatRequest {
            worker: 0,
            conn: ConnKey {
                ring: 0,
                gen: 0,
                slot: 0,
            },
            app: AppId(11),
            bot: Some(BotUser::new(22, "b")),
            target: Target {
                server: ServerId(33),
                channel: ChannelId(44),
                perms: 3072,
            },
            action,
        }
    }

    #[test]
    fn the_envelope_of_a_reply() {
        let d = MessageDraft {
            content: Some("hi".into()),
            reference: Some((55, None)),
            fail_if_not_exists: true,
            nonce: Some("n".into()),
            ..Default::default()
        };
        let e = envelope(&request(ChatAction::Create(d)));
        assert_eq!(
            e,
            json!({"version": 1, "route": "POST /channels/{id}/messages", "method": "POST",
                   "application_id": "11", "bot_user_id": "22",
                   "bot_user": BotUser::new(22, "b").public_value(),
                   "guild_id": "33", "channel_id": "44", "permissions": "3072",
                   "body": {"content": "hi", "nonce": "n", "flags": 0,
                            "message_reference": {"message_id": "55", "fail_if_not_exists": true}}})
        );
    }

    #[test]
    fn the_envelopes_name_their_routes_ids_and_queries() {
        let e = envelope(&request(ChatAction::Unreact(55, "blob:66".into())));
        assert_eq!(
            e["route"],
            "DELETE /channels/{id}/messages/{id}/reactions/{emoji}/@me"
        );
        assert_eq!(
            (
                e["method"].as_str(),
                e["message_id"].as_str(),
                e["emoji"].as_str()
            ),
            (Some("DELETE"), Some("55"), Some("blob:66"))
        );
        assert!(e.get("body").is_none() && e.get("query").is_none());
        let e = envelope(&request(ChatAction::List {
            limit: 50,
            before: Some(7),
            after: None,
            around: None,
        }));
        assert_eq!(
            e["query"],
            json!({"limit": 50, "before": "7", "after": null, "around": null})
        );
        let e = envelope(&request(ChatAction::BulkDelete(vec![1, 2])));
        assert_eq!(e["body"], json!({"messages": ["1", "2"]}));
        let e = envelope(&request(ChatAction::Typing));
        assert_eq!(e["route"], "POST /channels/{id}/typing");
        // Every route name is one of the metrics' names (api::route::ROUTE_NAMES).
        for a in [
            ChatAction::Get(1),
            ChatAction::Delete(1),
            ChatAction::React(1, "x".into()),
        ] {
            let n = envelope(&request(a))["route"].as_str().unwrap().to_string();
            assert!(crate::api::route::ROUTE_NAMES.contains(&n.as_str()), "{n}");
        }
    }

    #[test]
    fn every_failure_has_a_reason_label() {
        for f in [
            Failure::Unreachable,
            Failure::Timeout,
            Failure::Malformed,
            Failure::Busy,
        ] {
            assert!(!REASONS[f as usize].is_empty());
        }
        assert_eq!(REASONS.len(), 4);
    }
}
