//! An open interaction as the chat thread holds it (`interactions.rs`) and
//! as its shared state rebuilds it (`store.rs`).

use std::collections::HashMap;

use serde_json::Value;

use crate::api::permit::Target;
use crate::protocol::bot_user::BotUser;

/// Where an interaction is: only `Waiting` moves, to one of the others, once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::chat) enum State {
    Waiting,
    Answered,
    Deferred,
    Failed,
}

pub(in crate::chat) struct Open {
    pub(in crate::chat) app: u64,
    /// The bot it is for, as the registry recorded it when it opened.
    pub(in crate::chat) bot: BotUser,
    pub(in crate::chat) target: Target,
    pub(in crate::chat) kind: u8,
    pub(in crate::chat) name: String,
    pub(in crate::chat) user: Value,
    pub(in crate::chat) opened_ms: u64,
    pub(in crate::chat) state: State,
    pub(in crate::chat) digest: [u8; 32],
    /// The message a component is on (type 3).
    pub(in crate::chat) message: Option<u64>,
    /// The original response: in the history, or held here if ephemeral.
    pub(in crate::chat) original: Option<u64>,
    pub(in crate::chat) ephemeral: HashMap<u64, Value>,
    pub(in crate::chat) followups: Vec<u64>,
    /// Opened by this node (its timer is here); false: adopted from the
    /// shared state for a callback or a follow-up.
    pub(in crate::chat) here: bool,
}
