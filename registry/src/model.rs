//! Plain data types shared by every registry backend, and the wire constants
//! the registry itself relies on (privileged intents, default permissions).

/// Privileged gateway intents: the only intents an application must be
/// approved for.
/// Intent bits (the registry approves the privileged ones) and the
/// permission bits it uses when creating servers and installs: the `proto`
/// crate's.
pub use proto::intents;
pub use proto::permissions;

/// Application flags as Discord reports them in READY and
/// `/oauth2/applications/@me`. The registry derives the `GATEWAY_*` bits
/// from the approved privileged intents, so `Application::flags` is ready to
/// be put on the wire.
pub mod app_flags {
    pub const GATEWAY_PRESENCE: u64 = 1 << 12;
    pub const GATEWAY_GUILD_MEMBERS: u64 = 1 << 14;
    pub const GATEWAY_MESSAGE_CONTENT: u64 = 1 << 18;
    pub const GATEWAY_MASK: u64 =
        GATEWAY_PRESENCE | GATEWAY_GUILD_MEMBERS | GATEWAY_MESSAGE_CONTENT;

    /// The `GATEWAY_*` flags matching a set of approved privileged intents.
    pub fn from_approved_intents(bits: u64) -> u64 {
        use super::intents::*;
        let mut f = 0;
        if bits & GUILD_PRESENCES != 0 {
            f |= GATEWAY_PRESENCE;
        }
        if bits & GUILD_MEMBERS != 0 {
            f |= GATEWAY_GUILD_MEMBERS;
        }
        if bits & MESSAGE_CONTENT != 0 {
            f |= GATEWAY_MESSAGE_CONTENT;
        }
        f
    }
}

/// Discord channel types (the `type` field of a channel).
pub mod channel_kind {
    pub const TEXT: u8 = 0;
    pub const VOICE: u8 = 2;
    pub const CATEGORY: u8 = 4;
    pub const ANNOUNCEMENT: u8 = 5;
    pub const STAGE: u8 = 13;
    pub const FORUM: u8 = 15;
}

/// Defaults for new applications (Discord's values for a small bot).
pub const DEFAULT_MAX_CONCURRENCY: u32 = 1;
pub const DEFAULT_SESSION_START_TOTAL: u32 = 1000;
/// `session_start_limit` is counted over a rolling window of this length.
pub const SESSION_START_WINDOW_MS: u64 = 24 * 60 * 60 * 1000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Application {
    pub id: u64,
    pub name: String,
    /// Equals `id` for applications created here (as for newer Discord apps).
    pub bot_user_id: u64,
    pub bot_username: String,
    /// Approved privileged intents (subset of [`intents::PRIVILEGED`]).
    pub approved_intents: u64,
    /// Privileged intents the application's developer asked for (subset of
    /// [`intents::PRIVILEGED`], 0 if none): pending are
    /// `requested_intents & !approved_intents`, until an operator approves
    /// them (`Registry::set_approved_intents`) or denies them.
    pub requested_intents: u64,
    pub max_concurrency: u32,
    pub session_start_total: u32,
    pub flags: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Server {
    pub id: u64,
    pub name: String,
    pub owner_id: u64,
    pub created_at_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Role {
    /// The `@everyone` role has `id == server_id`.
    pub id: u64,
    pub server_id: u64,
    pub name: String,
    pub permissions: u64,
    pub position: i32,
    pub color: u32,
    pub hoist: bool,
    pub mentionable: bool,
    /// True for the role an installation creates for its bot.
    pub managed: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Channel {
    pub id: u64,
    pub server_id: u64,
    pub name: String,
    /// See [`channel_kind`].
    pub kind: u8,
    pub position: i32,
    pub parent_id: Option<u64>,
    pub topic: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OverwriteKind {
    Role = 0,
    Member = 1,
}

impl OverwriteKind {
    pub fn as_u8(self) -> u8 {
        self as u8
    }
    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(Self::Role),
            1 => Some(Self::Member),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overwrite {
    pub target_id: u64,
    pub kind: OverwriteKind,
    pub allow: u64,
    pub deny: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelWithOverwrites {
    pub channel: Channel,
    /// In the order they were first set.
    pub overwrites: Vec<Overwrite>,
}

/// Everything needed for a GUILD_CREATE and for computing channel permissions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerSnapshot {
    pub server: Server,
    /// Ordered by (position, id); `@everyone` first.
    pub roles: Vec<Role>,
    /// Ordered by (position, id).
    pub channels: Vec<ChannelWithOverwrites>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Installation {
    pub application_id: u64,
    pub server_id: u64,
    /// Granted bitset: bounds the bot's effective permissions in the server.
    pub permissions: u64,
    /// Roles the bot member holds (ascending ids); includes the managed role.
    pub role_ids: Vec<u64>,
    /// The role created by the install, removed by uninstall.
    pub managed_role_id: Option<u64>,
    pub installed_at_ms: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SessionStartLimit {
    pub total: u32,
    pub remaining: u32,
    /// Until the oldest identify in the window leaves it (0 if none).
    pub reset_after_ms: u64,
    pub max_concurrency: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DemoSeed {
    pub app: Application,
    /// Only when this call created the application: tokens are not stored.
    pub token: Option<String>,
    pub server_id: u64,
    pub general_channel_id: u64,
}

/// The demo application found in a registry (by name, `demo-bot`), and its
/// demo server if that is still installed: what a node started with the
/// demo off warns about. Nothing is created to find it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DemoFound {
    pub app: Application,
    pub server_id: Option<u64>,
}

/// A developer account: a person who signs in to the portal with a name and
/// a password (stored as an argon2id hash, never as given) and sees the
/// applications they own (`Registry::applications_of_developer`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Developer {
    pub id: u64,
    pub name: String,
    pub created_at_ms: u64,
}

/// A person (or any non-bot account) of the chat service. Bots are not
/// users here: a bot's user is its application's (`bot_user_id`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub id: u64,
    pub username: String,
    pub global_name: Option<String>,
}

/// A user's membership of a server (bots are members through their
/// installation, not here).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub server_id: u64,
    pub user: User,
    pub nick: Option<String>,
    /// Ascending; never `@everyone` (every member has it).
    pub role_ids: Vec<u64>,
    pub joined_at_ms: u64,
}

/// What a ban changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BanOutcome {
    /// False if the user was already banned (nothing changed).
    pub new: bool,
    /// The user was a member, and is no longer.
    pub was_member: bool,
}

/// Members answered per `list_members` call, at most (the platform's).
pub const MAX_MEMBERS_PAGE: u32 = 1000;

/// Application command types (the `type` field of a command).
pub mod command_kind {
    /// A slash command.
    pub const CHAT_INPUT: u8 = 1;
    /// A command in a user's context menu.
    pub const USER: u8 = 2;
    /// A command in a message's context menu.
    pub const MESSAGE: u8 = 3;
}

/// Commands of one kind an application may have in one scope (global, or
/// one server), the platform's: 100 CHAT_INPUT, 5 USER, 5 MESSAGE.
pub fn max_commands(kind: u8) -> u32 {
    match kind {
        command_kind::CHAT_INPUT => 100,
        _ => 5,
    }
}

/// Commands an application may create per scope per UTC day (an update of
/// an existing one is no create).
pub const MAX_DAILY_COMMAND_CREATES: u32 = 200;
/// The days the daily create counter is kept by (UTC days since 1970).
pub const COMMAND_DAY_MS: u64 = 24 * 60 * 60 * 1000;

/// An application command as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    pub id: u64,
    pub application_id: u64,
    /// None for a global command.
    pub guild_id: Option<u64>,
    pub name: String,
    pub description: String,
    /// See [`command_kind`].
    pub kind: u8,
    /// The options array as normalised JSON (`[]` for none): validated by
    /// the REST edge, stored as given.
    pub options_json: String,
    pub default_member_permissions: Option<u64>,
    pub nsfw: bool,
    /// A snowflake, new on every change.
    pub version: u64,
}

/// A command to create (or to upsert by name and kind).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NewCommand {
    pub name: String,
    pub description: String,
    pub kind: u8,
    /// Normalised JSON of the options array (`[]` for none).
    pub options_json: String,
    pub default_member_permissions: Option<u64>,
    pub nsfw: bool,
}

/// The fields a command edit changes (None: kept).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommandPatch {
    pub name: Option<String>,
    pub description: Option<String>,
    pub options_json: Option<String>,
    /// `Some(None)` clears it.
    pub default_member_permissions: Option<Option<u64>>,
    pub nsfw: Option<bool>,
}

/// An open interaction's shared state (docs/interactions.md): enough for
/// any node sharing the registry, or this one after a restart, to answer
/// it, follow it up, or declare its miss.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingInteraction {
    pub id: u64,
    pub application_id: u64,
    /// SHA-256 of the token (the token itself is never stored).
    pub token_digest: [u8; 32],
    /// One of [`interaction_state`].
    pub state: u8,
    pub opened_at_ms: u64,
    /// The token's end: after it follow-ups are 401 50027 and the row goes.
    pub expires_at_ms: u64,
    /// The node that opened it (the one holding its 3-second timer).
    pub node: String,
    /// The opener's description (JSON: bot, target, kind, name, user, the
    /// component's message); the registry stores it as given.
    pub detail: String,
    /// The original response message, once there is one.
    pub original_id: Option<u64>,
    /// Follow-up message ids, in order.
    pub followups: Vec<u64>,
}

/// [`PendingInteraction::state`]. Only `WAITING` moves, to any other, once.
pub mod interaction_state {
    pub const WAITING: u8 = 0;
    pub const ANSWERED: u8 = 1;
    pub const DEFERRED: u8 = 2;
    pub const FAILED: u8 = 3;
}
