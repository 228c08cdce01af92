//! Where an open interaction outlives this node's memory: the registry's
//! `interaction_state` (docs/interactions.md, "Across nodes and restarts").
//!
//! ```text
//!  opened ──put (one row: token digest, waiting, what answering needs)──► INTERACTION_CREATE / the POST
//!  callback (any node) ──settle waiting→answered|deferred──► won: applied │ lost: 40060 or 10062
//!  3.0 s (the opener) ───settle waiting→failed─────────────► won: the miss │ lost: answered elsewhere
//!  follow-up (any node) ──read the row (state, original, follow-ups)──► applied ──write the ids back
//!  start ──the rows this node opened that are still waiting──► their timers again
//! ```
//!
//! - The chat thread's table (`interactions.rs`) is a cache of these rows:
//!   an interaction not in it (opened on another node, or before a restart)
//!   is adopted from its row on first use. `State` only ever leaves
//!   `Waiting`, once, so a cached non-waiting state is final; a cached
//!   `Waiting` is confirmed by the settle itself.
//! - One exception stays in memory: an ephemeral message's content (the
//!   person's copy) lives on the node that made it; elsewhere its GET,
//!   PATCH and DELETE are 404 Unknown Message.
//! - Every call is bounded by the registry's timeout (PostgreSQL: the
//!   client deadline; SQLite: the busy timeout) and made on the chat thread
//!   on its own registry connection. An unavailable store: a new
//!   interaction is refused (the person sees the failure at once, as for
//!   any registry failure); a callback or a follow-up of an interaction
//!   this node opened is decided from memory (counted in
//!   `gatewayd_interactions_store_failures_total`: across nodes
//!   exactly-once then rests on the callback reaching the opener); one for
//!   an interaction not in memory is 503.
//! - Without a store (unit tests), memory is the whole truth.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use registry::{interaction_state as st, PendingInteraction, Registry};
use serde_json::{json, Value};

use super::open::{Open, State};
use crate::api::permit::Target;
use crate::protocol::bot_user::BotUser;
use proto::{ChannelId, ServerId};

/// Interactions whose timers a restart restores at most.
pub const MAX_RESTORE: u32 = 65_536;

/// The outcome of a settle (a move out of waiting).
pub(in crate::chat) enum Settled {
    /// This call moved it (or there is no store).
    Won,
    /// Someone else did first: the row's state now (None: the row is gone).
    Lost(Option<State>),
    /// The store could not answer.
    Unavailable,
}

pub struct Store {
    reg: Option<Box<dyn Registry>>,
    /// This node's name in the rows (stable across restarts).
    pub node: String,
    pub failures: Arc<AtomicU64>,
}

impl Store {
    pub fn none() -> Store {
        Store {
            reg: None,
            node: String::new(),
            failures: Arc::default(),
        }
    }

    pub fn new(reg: Box<dyn Registry>, node: String, failures: Arc<AtomicU64>) -> Store {
        Store {
            reg: Some(reg),
            node,
            failures,
        }
    }

    pub fn enabled(&self) -> bool {
        self.reg.is_some()
    }

    fn call<T>(&self, f: impl FnOnce(&dyn Registry) -> registry::Result<T>) -> Result<T, ()> {
        let Some(reg) = self.reg.as_deref() else {
            return Err(());
        };
        f(reg).map_err(|e| {
            self.failures.fetch_add(1, Relaxed);
            tracing::warn!(error = %e, "interaction state: registry call failed");
        })
    }

    /// Records a newly opened interaction (true without a store).
    pub(in crate::chat) fn put(&self, id: u64, o: &Open, expires_at_ms: u64, now: u64) -> bool {
        if !self.enabled() {
            return true;
        }
        let p = PendingInteraction {
            id,
            application_id: o.app,
            token_digest: o.digest,
            state: st::WAITING,
            opened_at_ms: o.opened_ms,
            expires_at_ms,
            node: self.node.clone(),
            detail: detail(o).to_string(),
            original_id: None,
            followups: Vec::new(),
        };
        self.call(|r| r.put_interaction(&p, now)).is_ok()
    }

    /// Moves `id` out of waiting to `to`, if opened at or after `since_ms`;
    /// the winner records `original`, the id its answer's message will
    /// have, in the same write.
    pub(in crate::chat) fn settle(
        &self,
        id: u64,
        to: State,
        since_ms: u64,
        original: Option<u64>,
    ) -> Settled {
        if !self.enabled() {
            return Settled::Won;
        }
        match self.call(|r| r.settle_interaction(id, code(to), since_ms, original)) {
            Ok(true) => Settled::Won,
            Ok(false) => match self.call(|r| r.interaction(id)) {
                Ok(row) => Settled::Lost(row.map(|p| state(p.state))),
                Err(()) => Settled::Unavailable,
            },
            Err(()) => Settled::Unavailable,
        }
    }

    pub(in crate::chat) fn by_id(&self, id: u64) -> Result<Option<PendingInteraction>, ()> {
        self.call(|r| r.interaction(id))
    }

    pub(in crate::chat) fn by_token(
        &self,
        digest: &[u8; 32],
    ) -> Result<Option<PendingInteraction>, ()> {
        self.call(|r| r.interaction_by_token(digest))
    }

    pub(in crate::chat) fn save_messages(&self, id: u64, o: &Open) {
        if self.enabled() {
            let _ = self.call(|r| r.set_interaction_messages(id, o.original, &o.followups));
        }
    }

    /// This node's interactions still waiting (after a restart).
    pub(in crate::chat) fn waiting(&self) -> Vec<PendingInteraction> {
        if !self.enabled() {
            return Vec::new();
        }
        self.call(|r| r.waiting_interactions(&self.node, MAX_RESTORE))
            .unwrap_or_default()
    }
}

fn code(s: State) -> u8 {
    match s {
        State::Waiting => st::WAITING,
        State::Answered => st::ANSWERED,
        State::Deferred => st::DEFERRED,
        State::Failed => st::FAILED,
    }
}

pub(in crate::chat) fn state(c: u8) -> State {
    match c {
        st::WAITING => State::Waiting,
        st::ANSWERED => State::Answered,
        st::DEFERRED => State::Deferred,
        _ => State::Failed,
    }
}

/// What a row keeps of an `Open` besides its columns.
fn detail(o: &Open) -> Value {
    json!({
        "bot": o.bot.id().to_string(),
        "bot_json": o.bot.own_json(),
        "server": o.target.server.0.to_string(),
        "channel": o.target.channel.0.to_string(),
        "perms": o.target.perms.to_string(),
        "kind": o.kind,
        "name": o.name,
        "user": o.user,
        "message": o.message.map(|m| m.to_string()),
    })
}

/// An `Open` rebuilt from its row (None: a row this build cannot read).
pub(in crate::chat) fn open_of(p: &PendingInteraction) -> Option<Open> {
    let d: Value = serde_json::from_str(&p.detail).ok()?;
    let num = |k: &str| d[k].as_str().and_then(|s| s.parse::<u64>().ok());
    // The bot user the opening node wrote, checked (`BotUser::parse`): a
    // row without a whole one is a row this build cannot read.
    let bot = BotUser::parse(d["bot_json"].as_str()?).ok()?;
    if Some(bot.id()) != num("bot") {
        return None;
    }
    Some(Open {
        app: p.application_id,
        bot,
        target: Target {
            server: ServerId(num("server")?),
            channel: ChannelId(num("channel")?),
            perms: num("perms")?,
        },
        kind: d["kind"].as_u64()? as u8,
        name: d["name"].as_str()?.to_owned(),
        user: d["user"].clone(),
        opened_ms: p.opened_at_ms,
        state: state(p.state),
        digest: p.token_digest,
        message: num("message"),
        original: p.original_id,
        ephemeral: Default::default(),
        followups: p.followups.clone(),
        here: false,
    })
}
