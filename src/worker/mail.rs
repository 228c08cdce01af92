//! Messages between threads. Workers own their sessions; everything that
//! crosses a thread boundary is one of these, through a bounded channel.

use std::os::fd::RawFd;
use std::sync::Arc;

use crate::protocol::bot_user::BotUser;
use crate::protocol::identify::Identify;
use crate::protocol::session::GuildAccess;
use crate::protocol::Close;
use proto::{AppId, ChannelId, ServerId};

pub use crate::api::action::{ChatAction, ChatRequest, NewInteraction};
use crate::api::permit::Target;
use crate::api::route::ApiRoute;
use crate::api::view::AppView;
pub use crate::delivery::batch::Batch;
pub use crate::delivery::moved::{Moved, Take};
pub use crate::delivery::resume::ResumeRefusal;
pub use crate::delivery::ConnKey;
pub use crate::protocol::rest::RestRoute;

/// What a worker asks of the registry sidecar.
pub enum SidecarRequest {
    /// Whose token is this (a refused start's): answered with
    /// `ToWorker::Attributed` if it is an application's, else not at all.
    Attribute {
        worker: usize,
        token: Box<str>,
        why: crate::worker::app_stats::StartRefusal,
        detail: u64,
    },
    Identify {
        worker: usize,
        conn: ConnKey,
        identify: Identify,
    },
    /// A connect-time route of a bot the worker knows (its token found,
    /// limited, permitted).
    Rest {
        worker: usize,
        conn: ConnKey,
        app: AppId,
        route: RestRoute,
    },
    /// Who holds this bot token, and its leased view (REST edge). Answered
    /// with `ToWorker::ApiAuthed`.
    ApiAuth {
        worker: usize,
        digest: [u8; 32],
        token: String,
    },
    /// Rebuild an application's REST view (every `api::view::REFRESH_MS`):
    /// answered with `ToWorker::ApiRefreshed`.
    ApiRefresh { worker: usize, app: AppId },
    /// A permitted read of server data (channel, server, channels, roles),
    /// answered from the registry with `ToWorker::RestReply`.
    ApiRead {
        worker: usize,
        conn: ConnKey,
        app: AppId,
        route: ApiRoute,
        target: Target,
    },
    /// A permitted member, moderation route (`link::members`): answered
    /// from the registry, or committed through the chat service.
    ApiMember(Box<MemberRequest>),
    /// A permitted application command route (`link::commands`): answered
    /// from the registry with `ToWorker::RestReply`.
    ApiCommands(Box<CommandsRequest>),
    /// `POST /users/@me/channels`: answered with `ToWorker::DmOpened`.
    ApiDm {
        worker: usize,
        conn: ConnKey,
        app: AppId,
        bot_user_id: u64,
        recipient: u64,
    },
    /// A person's interaction from the event stream (`link::interactions`
    /// checks and enriches it, then hands it to the chat service).
    Interaction(Box<RawInteraction>),
    /// A server changed (from the event stream): apply it and answer with
    /// the bots' recomputed permissions, before later events are delivered.
    /// Confirm these (application, server) leases in one registry call.
    RenewLeases {
        worker: usize,
        pairs: Vec<(AppId, ServerId)>,
    },
    /// A revocation was pushed (PostgreSQL NOTIFY): read the outbox now.
    PollRevocations,
    /// A worker applied revocation `id` at `applied_ms` (Unix ms).
    RevocationApplied { id: u64, applied_ms: u64 },
    ApplyState {
        server_id: u64,
        change: registry::StateChange,
        reply: crossbeam_channel::Sender<Option<AccessUpdate>>,
    },
}

/// A revocation for workers to apply, with what they need to apply it.
pub struct RevokeMsg {
    pub id: u64,
    pub revocation: registry::Revocation,
    /// For a changed grant: the new access (None: no longer installed).
    pub access: Option<GuildAccess>,
    /// For changed intents: what is approved now.
    pub approved_intents: u64,
}

/// Recomputed per-channel permissions of every bot installed in a server.
pub struct AccessUpdate {
    pub server_id: ServerId,
    /// (application id, its access), sorted by application id.
    pub by_app: Vec<(AppId, GuildAccess)>,
}

/// The registry's answer to an Identify, ready to render READY from.
pub struct IdentifyOk {
    pub application_id: AppId,
    pub application_flags: u64,
    pub bot_user_id: u64,
    /// The bot user object as JSON.
    pub user_json: Arc<str>,
    pub intents: u64,
    pub shard: (u32, u32),
    pub token_digest: [u8; 32],
    /// Sorted by server id, each with its GUILD_CREATE `d`.
    pub guilds: Vec<(GuildAccess, Vec<u8>)>,
}

pub enum IdentifyRefusal {
    /// Close with this code (bad token 4004, 4011, 4014...); with the
    /// application and why, when the token named one (the portal counts it).
    Close(Close, Option<Attributed>),
    /// Op 9 `d:false` (e.g. the registry is unavailable): retry later; the
    /// application and why, as above.
    InvalidSession(Option<Attributed>),
}

/// A refused Identify's application, why, and the intents it asked for.
pub type Attributed = (u64, crate::worker::app_stats::StartRefusal, u64);

pub enum ToWorker {
    /// A refused start's application (`SidecarRequest::Attribute`).
    Attributed(Attributed),
    Identified {
        conn: ConnKey,
        result: Result<Box<IdentifyOk>, IdentifyRefusal>,
    },
    RestReply {
        conn: ConnKey,
        status: u16,
        body: Vec<u8>,
    },
    /// A message action of a server this worker commits for
    /// (`api::commit_worker`), from the worker its bot's token is served
    /// on; answered with `RestReply` there after its event's batch.
    Chat(Box<ChatRequest>),
    /// Messages of this worker's servers committed elsewhere (people,
    /// producers, interaction responses), learnt by the chat thread.
    Learn(Box<[Learnt]>),
    /// The answer to `SidecarRequest::ApiDm` (the view learns the channel).
    DmOpened {
        conn: ConnKey,
        app: AppId,
        opened: DmOpened,
    },
    /// The registry's answer to `ApiAuth`: `Ok(None)` is a bad token,
    /// `Err(())` the registry could not answer.
    ApiAuthed {
        digest: [u8; 32],
        view: Result<Option<Box<AppView>>, ()>,
    },
    /// A rebuilt view (`Ok(None)`: the application is gone; `Err`: the
    /// registry could not answer, keep the old one).
    ApiRefreshed {
        app: AppId,
        view: Result<Option<Box<AppView>>, ()>,
    },
    /// These leases (sorted pairs) are valid until `until_ms` (Unix ms).
    Leases {
        pairs: Vec<(AppId, ServerId)>,
        until_ms: u64,
    },
    Revoke(Arc<RevokeMsg>),
    /// New permissions after a server change; ordered before the events that follow it.
    Access(Arc<AccessUpdate>),
    /// Ingest records (validated by the ingest thread), in stream order.
    Batch(Arc<Batch>),
    /// A connection handed over by another worker (its socket arrives on one
    /// of our rings through MSG_RING, tagged with the same token).
    Adopt {
        token: u64,
        conn: Box<crate::worker::conn::Conn>,
        action: crate::protocol::session::Action,
    },
    /// A round of the counters thread (Redis): the node's sharing mode
    /// and the other nodes' counts of this worker's windows.
    RestCounters(Box<crate::api::shared::Answer>),
    /// A drill (`POST /fault/worker-panic` with `--fault-injection`): the
    /// worker panics as a bug would make it, to prove the node stops
    /// (src/node/panic.rs) instead of going on a worker short.
    PanicDrill,
    /// Drain: op 7 to every session, spread over `spread_ms`, then close.
    Shutdown {
        spread_ms: u64,
    },
    /// Another node asks for a session of ours (`link::cluster`): answer
    /// with `moved::encode_answer`'s bytes; let go of the session only if
    /// the answer was taken.
    HandOut {
        take: Take,
        reply: crossbeam_channel::Sender<Vec<u8>>,
    },
    /// The answer to a `TakeJob`: the session, to rebuild here, or why not.
    HandedIn {
        conn: ConnKey,
        result: Result<Box<Moved>, ResumeRefusal>,
    },
    /// Sessions of a dead node, reconstructed by a recovery thread from
    /// Redis and the topic (`link::recovery`): every one of them recovered
    /// from the same checkpoint, so the worker replays the records once.
    Recovered {
        replay: Arc<crate::delivery::recovery::Replay>,
        sessions: Vec<crate::delivery::recovery::Recovering>,
    },
    /// A Resume a recovery thread could not serve: op 9 for this reason.
    NotRecovered {
        conn: ConnKey,
        why: ResumeRefusal,
    },
    /// The answer to a Request Guild Members (op 8), once the session's
    /// taint is in the session store (`RecoveryWrite::Taint`).
    MembersChunk {
        conn: ConnKey,
        session_id: shards::SessionId,
        guild_ids: Vec<u64>,
        nonce: Option<String>,
    },
}

/// What workers hand the recovery writer thread (`link::recovery`); never
/// waited for (a full queue skips the write, counted).
pub enum RecoveryWrite {
    /// A worker's checkpoint blob (the buffer goes back to its pool).
    Checkpoint { worker: usize, blob: Vec<u8> },
    /// A session's summary (`delivery::recovery::Summary` bytes).
    Summary {
        session_id: shards::SessionId,
        bytes: Vec<u8>,
    },
    /// A session's summary marked never to be recovered (its version with
    /// `TAINTED`), written ahead of a dispatch a survivor could not
    /// reproduce: `then` goes back to `worker` once the write is done (or
    /// failed), and that dispatch goes out only then.
    Taint {
        session_id: shards::SessionId,
        bytes: Vec<u8>,
        worker: usize,
        then: ToWorker,
    },
}

/// A Resume whose holder is gone: a recovery thread rebuilds the session
/// from Redis and the topic, or answers why not.
pub struct RecoverJob {
    pub worker: usize,
    pub conn: ConnKey,
    pub take: Take,
    /// When the Resume arrived (the recovery budget counts from here).
    pub since: std::time::Instant,
    /// The processes (instances) that answered the hand-off that they do
    /// not hold the session: alive, and without it. If the summary names
    /// one of them, the session ended there (op 9 at once).
    pub said_unknown: Vec<String>,
}

/// A Resume for a session another node holds: a hand-off thread asks that
/// node (`link::cluster`) and answers with `ToWorker::HandedIn`.
pub struct TakeJob {
    pub worker: usize,
    pub conn: ConnKey,
    pub node: u16,
    pub take: Take,
    /// When the Resume arrived: the hand-off deadline counts from here.
    pub since: std::time::Instant,
}

/// Wakeups owed to other workers, coalesced over a turn: a worker (or a
/// chat service ending its turn) that queues many messages to one inbox
/// writes that inbox's eventfd once (`flush`), not once a message. A write
/// is a system call, and each one that finds the other worker parked
/// starts a turn there for one message instead of a batch. Fixed size: the
/// node has at most 255 workers (config).
#[derive(Default)]
pub struct Wakes([u64; 4]);

impl Wakes {
    /// Queue `msg` to `to` and owe it a wakeup; hand `msg` back if the inbox is full.
    pub fn push(
        &mut self,
        to: usize,
        workers: &[WorkerHandle],
        msg: ToWorker,
    ) -> Result<(), ToWorker> {
        debug_assert!(to < 256, "at most 255 workers");
        workers[to].push_quiet(msg)?;
        self.0[to / 64] |= 1 << (to % 64);
        Ok(())
    }

    /// Wake every worker owed one, once.
    pub fn flush(&mut self, workers: &[WorkerHandle]) {
        for (i, word) in self.0.iter_mut().enumerate() {
            let mut bits = std::mem::take(word);
            while bits != 0 {
                let w = i * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if let Some(h) = workers.get(w) {
                    h.wake();
                }
            }
        }
    }
}

/// The sending half of a worker's inbox. Writing the eventfd wakes the
/// worker, whose loop waits on it together with its rings' completions.
#[derive(Clone)]
pub struct WorkerHandle {
    pub tx: crossbeam_channel::Sender<ToWorker>,
    pub wake_fd: RawFd,
    /// Which servers the worker has sessions in (`delivery::interest`).
    pub interest: Arc<crate::delivery::interest::Interest>,
}

impl WorkerHandle {
    /// Hand back the message if the inbox is full.
    pub fn try_send(&self, msg: ToWorker) -> Result<(), ToWorker> {
        self.tx.try_send(msg).map_err(|e| e.into_inner())?;
        self.wake();
        Ok(())
    }

    /// `try_send` without the wakeup: for a worker queueing to its own
    /// inbox during its turn (it drains the inbox before it parks).
    pub fn push_quiet(&self, msg: ToWorker) -> Result<(), ToWorker> {
        self.tx.try_send(msg).map_err(|e| e.into_inner())
    }

    /// Wake the worker without a message (it looks at its inbox).
    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writing 8 bytes to an eventfd we own for the process lifetime.
        unsafe { libc::write(self.wake_fd, (&one as *const u64).cast(), 8) };
    }

    /// Like `send`, but says why a message was dropped: `Full`, or
    /// `Disconnected` (the worker has stopped and dropped its inbox).
    pub fn deliver(&self, msg: ToWorker) -> Result<(), crossbeam_channel::TrySendError<ToWorker>> {
        let r = self.tx.try_send(msg);
        if !matches!(r, Err(crossbeam_channel::TrySendError::Disconnected(_))) {
            self.wake();
        }
        r
    }

    /// False if the inbox is full (the message is dropped, never blocks).
    pub fn send(&self, msg: ToWorker) -> bool {
        let ok = self.tx.try_send(msg).is_ok();
        let one: u64 = 1;
        // SAFETY: writing 8 bytes to an eventfd we own for the process lifetime.
        unsafe { libc::write(self.wake_fd, (&one as *const u64).cast(), 8) };
        ok
    }
}

/// A member route the worker permitted (the bot is installed in
/// `target.server` and its lease holds).
pub struct MemberRequest {
    pub worker: usize,
    pub conn: ConnKey,
    pub app: AppId,
    pub bot: BotUser,
    pub route: ApiRoute,
    pub target: Target,
    /// `GET .../members`: (limit, after).
    pub page: (u32, u64),
}

/// An interaction record as the chat service produced it
/// (`ingest::FLAG_INTERACTION`): the bot it is for, where, and `d`.
#[derive(Debug)]
pub struct RawInteraction {
    pub server: u64,
    pub channel: u64,
    pub app_user: u64,
    /// The bot's permissions in the channel, if the producer computed them.
    pub permissions: u64,
    pub d: Vec<u8>,
}

pub use crate::api::route::WebhookMethod;

/// A command route the worker permitted (the path's application is the
/// token's; a server's commands only where the bot is installed).
pub struct CommandsRequest {
    pub worker: usize,
    pub conn: ConnKey,
    pub call: crate::api::commands::CommandCall,
}

/// The answer to `SidecarRequest::ApiDm`.
#[derive(Debug)]
pub struct DmOpened {
    pub status: u16,
    pub body: Vec<u8>,
    /// The channel and the person, for the application's view.
    pub channel: Option<(ChannelId, u64)>,
}

/// One change to a worker's chat window (`chat::history`), learnt from
/// the stream by the chat thread (`ToWorker::Learn`): the copies are made
/// there, so the worker only moves them in.
#[derive(Debug, Clone)]
pub enum Learnt {
    /// A message created elsewhere, kept as its event carried it.
    Keep {
        channel: u64,
        id: u64,
        author_id: u64,
        raw: Box<[u8]>,
    },
    /// A message edited elsewhere: its new JSON.
    Update {
        channel: u64,
        id: u64,
        raw: Box<[u8]>,
    },
    /// A message deleted elsewhere.
    Forget { channel: u64, id: u64 },
}
