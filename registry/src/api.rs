//! The [`Registry`] trait: every question and change the node, its sidecar
//! and the CLI put to a registry, backend-neutral and blocking. Its one
//! implementation is `generic.rs` (`impl<B: Backend> Registry for B`).

use crate::error::Result;
use crate::model::*;
use crate::revocation::{RevocationRecord, StateChange};

/// Registry operations. Ids are snowflakes (u64). All methods block.
pub trait Registry: Send + Sync {
    /// The application whose token this is, or None for any wrong, unknown or
    /// malformed token. An optional `Bot ` prefix is tolerated.
    fn authenticate(&self, token: &str) -> Result<Option<Application>>;
    fn application(&self, id: u64) -> Result<Option<Application>>;
    fn list_applications(&self) -> Result<Vec<Application>>;
    /// Returns the application and its token; the token is shown only here.
    fn create_application(
        &self,
        name: &str,
        approved_privileged_intents: u64,
        max_concurrency: u32,
    ) -> Result<(Application, String)>;
    /// New token; the old one stops authenticating at once.
    fn reset_token(&self, app_id: u64) -> Result<String>;
    /// `bits` must be a subset of [`intents::PRIVILEGED`]; also updates the
    /// `GATEWAY_*` application flags. Approving a request is this call with
    /// `approved_intents | requested_intents`: the request is then no
    /// longer pending (pending = requested & !approved).
    fn set_approved_intents(&self, app_id: u64, bits: u64) -> Result<Application>;
    fn set_max_concurrency(&self, app_id: u64, max_concurrency: u32) -> Result<Application>;
    fn set_session_start_total(&self, app_id: u64, total: u32) -> Result<Application>;
    /// Also removes its installations and their managed roles, and its
    /// developers' ownership of it.
    fn delete_application(&self, app_id: u64) -> Result<bool>;

    /// Also creates the `@everyone` role (id == server id) with
    /// [`permissions::EVERYONE_DEFAULT`].
    fn create_server(&self, name: &str, owner_id: u64) -> Result<Server>;
    /// Removes everything in it, including installations.
    fn delete_server(&self, server_id: u64) -> Result<bool>;
    /// `parent` must be a category of the same server.
    fn create_channel(
        &self,
        server_id: u64,
        name: &str,
        kind: u8,
        parent: Option<u64>,
    ) -> Result<Channel>;
    fn create_role(&self, server_id: u64, name: &str, permissions: u64) -> Result<Role>;
    /// Insert or update; an updated overwrite keeps its place in the order.
    /// A role target must be a role of the channel's server.
    fn set_overwrite(
        &self,
        channel_id: u64,
        target_id: u64,
        target_kind: OverwriteKind,
        allow: u64,
        deny: u64,
    ) -> Result<()>;
    fn delete_overwrite(&self, channel_id: u64, target_id: u64) -> Result<bool>;
    fn list_servers(&self) -> Result<Vec<Server>>;

    /// Installs (or updates the grant of) `app_id` in `server_id`. A managed
    /// role carrying `permissions` is created on first install and kept in
    /// sync on update.
    fn install(&self, app_id: u64, server_id: u64, permissions: u64) -> Result<Installation>;
    /// Removes the installation and its managed role; false if not installed.
    fn uninstall(&self, app_id: u64, server_id: u64) -> Result<bool>;
    /// Gives the bot member an extra role of that server.
    fn add_installation_role(&self, app_id: u64, server_id: u64, role_id: u64) -> Result<()>;
    fn remove_installation_role(&self, app_id: u64, server_id: u64, role_id: u64) -> Result<bool>;
    fn installations_of_app(&self, app_id: u64) -> Result<Vec<Installation>>;
    fn installation(&self, app_id: u64, server_id: u64) -> Result<Option<Installation>>;

    fn server_snapshot(&self, server_id: u64) -> Result<Option<ServerSnapshot>>;
    /// Installed servers of `app_id` with `(id >> 22) % shard_count == shard_id`,
    /// ascending.
    fn servers_for_shard(&self, app_id: u64, shard_id: u32, shard_count: u32) -> Result<Vec<u64>>;

    /// Records one identify and returns the limit after it.
    fn record_session_start(&self, app_id: u64, now_ms: u64) -> Result<SessionStartLimit>;
    /// Over the rolling [`SESSION_START_WINDOW_MS`] ending at `now_ms`.
    fn session_start_remaining(&self, app_id: u64, now_ms: u64) -> Result<SessionStartLimit>;

    /// Increases on every committed change (by any process): poll it to learn
    /// that leases/snapshots must be refreshed (e.g. after a CLI revoke).
    fn revision(&self) -> Result<u64>;

    /// Idempotent demo data: app "demo-bot", server "Demo Server" with a
    /// category and `#general`, the bot installed. The token is only
    /// returned by the call that created the app. None if "demo-bot" exists
    /// but its demo server or `#general` has since been removed.
    fn seed_demo(&self) -> Result<Option<DemoSeed>>;
    /// The demo application ("demo-bot") and its demo server, if there,
    /// read only: a node with the demo off seeds nothing, but says so
    /// while an earlier start's demo application is still in the registry.
    fn find_demo(&self) -> Result<Option<DemoFound>>;

    /// Every installation in a server.
    fn installations_in_server(&self, server_id: u64) -> Result<Vec<Installation>>;
    /// Apply a server change reported by the chat service's event stream.
    fn apply_state(&self, change: &StateChange) -> Result<()>;

    /// Revocations written after outbox id `after`, oldest first, at most `limit`.
    fn revocations_since(&self, after: u64, limit: u32) -> Result<Vec<RevocationRecord>>;
    /// The newest outbox id (0 if none): where a node starts following.
    fn last_revocation_id(&self) -> Result<u64>;
    /// Lease renewal in one round trip: for each (application, server) pair,
    /// whether the installation still exists (same order as `pairs`).
    fn installed(&self, pairs: &[(u64, u64)]) -> Result<Vec<bool>>;

    // People (`crate::members` has the rules).
    fn create_user(&self, username: &str) -> Result<User>;
    fn user(&self, id: u64) -> Result<Option<User>>;
    /// Adds a user to a server (nothing if already a member); refused for
    /// a banned user.
    fn add_member(&self, server_id: u64, user_id: u64) -> Result<Member>;
    fn member(&self, server_id: u64, user_id: u64) -> Result<Option<Member>>;
    /// Members with user id > `after`, ascending, at most `limit`
    /// (clamped to 1..=[`MAX_MEMBERS_PAGE`]).
    fn list_members(&self, server_id: u64, after: u64, limit: u32) -> Result<Vec<Member>>;
    /// Replaces the member's roles (each of the server, not `@everyone`,
    /// not managed).
    fn set_member_roles(&self, server_id: u64, user_id: u64, role_ids: &[u64]) -> Result<Member>;
    /// False if the member already had the role.
    fn add_member_role(&self, server_id: u64, user_id: u64, role_id: u64) -> Result<bool>;
    /// False if the member did not have it.
    fn remove_member_role(&self, server_id: u64, user_id: u64, role_id: u64) -> Result<bool>;
    /// Kick: false if not a member.
    fn remove_member(&self, server_id: u64, user_id: u64) -> Result<bool>;
    /// Bans a known user (member or not) and ends the membership.
    fn ban(&self, server_id: u64, user_id: u64, reason: Option<&str>) -> Result<BanOutcome>;
    /// False if the user was not banned.
    fn unban(&self, server_id: u64, user_id: u64) -> Result<bool>;
    /// The direct-message channel between two users (created on first use).
    fn open_dm(&self, user_a: u64, user_b: u64) -> Result<u64>;
    /// (channel id, the other user) of every DM channel of `user_id`.
    fn dm_channels_of(&self, user_id: u64) -> Result<Vec<(u64, u64)>>;

    /// Claim interaction `id` for `node`: true for exactly one caller
    /// across every node sharing the registry (an insert-if-absent, no
    /// revision bump). Claims older than `CLAIM_KEEP_MS` are pruned now and
    /// then by the claims themselves.
    fn claim_interaction(&self, id: u64, node: &str, now_ms: u64) -> Result<bool>;

    // Open interactions' shared state (`interaction_state`; no revision
    // bump: none of it is in a leased view).
    /// Stores a newly opened interaction; rows whose token expired before
    /// `now_ms` are pruned now and then by the puts themselves.
    fn put_interaction(&self, p: &PendingInteraction, now_ms: u64) -> Result<()>;
    fn interaction(&self, id: u64) -> Result<Option<PendingInteraction>>;
    fn interaction_by_token(&self, digest: &[u8; 32]) -> Result<Option<PendingInteraction>>;
    /// Moves interaction `id` from `WAITING` to `to` if it is still waiting
    /// and was opened at or after `opened_since_ms`: true for exactly one
    /// caller across every node and restart (the first response, or the
    /// miss). With `original`, the winner also records the id of the
    /// message that answers it, in the same statement (one write where a
    /// settle and a `set_interaction_messages` were two).
    fn settle_interaction(
        &self,
        id: u64,
        to: u8,
        opened_since_ms: u64,
        original: Option<u64>,
    ) -> Result<bool>;
    /// Records the original response and the follow-ups.
    fn set_interaction_messages(
        &self,
        id: u64,
        original: Option<u64>,
        followups: &[u64],
    ) -> Result<()>;
    /// The interactions `node` opened that are still waiting (its timers,
    /// after a restart), at most `limit`.
    fn waiting_interactions(&self, node: &str, limit: u32) -> Result<Vec<PendingInteraction>>;

    // Interaction signing (ADR-12; `crate::signing` has the rules).
    /// The application's Ed25519 seed, created on first use.
    fn signing_seed(&self, app_id: u64) -> Result<[u8; 32]>;
    /// Sets (or with None clears) the interactions endpoint URL. The
    /// caller verifies the endpoint first (signed PING, bad signature).
    fn set_interactions_endpoint(&self, app_id: u64, url: Option<&str>) -> Result<()>;
    fn interactions_endpoint(&self, app_id: u64) -> Result<Option<String>>;
    // Application commands (`crate::commands` has the rules). `guild_id`
    // None is the global scope.
    /// The scope's commands, by id.
    fn commands(&self, app_id: u64, guild_id: Option<u64>) -> Result<Vec<Command>>;
    /// None if there is no such command in that scope.
    fn command(&self, app_id: u64, guild_id: Option<u64>, id: u64) -> Result<Option<Command>>;
    /// Bulk overwrite: commands matched by (name, kind) keep their ids, the
    /// others are created, the scope's missing ones deleted. Answers `cmds`'
    /// commands in their order.
    fn put_commands(
        &self,
        app_id: u64,
        guild_id: Option<u64>,
        cmds: &[NewCommand],
    ) -> Result<Vec<Command>>;
    /// Creates, or updates the command of the same name and kind: the
    /// command and whether it was created.
    fn create_command(
        &self,
        app_id: u64,
        guild_id: Option<u64>,
        cmd: &NewCommand,
    ) -> Result<(Command, bool)>;
    /// [`RegistryError::NotFound`] (`what: "command"`) if there is none.
    fn edit_command(
        &self,
        app_id: u64,
        guild_id: Option<u64>,
        id: u64,
        patch: &CommandPatch,
    ) -> Result<Command>;
    /// False if there was no such command in that scope.
    fn delete_command(&self, app_id: u64, guild_id: Option<u64>, id: u64) -> Result<bool>;

    // Developer accounts (`crate::developers` has the rules; issue 29).
    // Passwords are stored as argon2id PHC strings only.
    /// A new developer: the name 1..=[`MAX_DEVELOPER_NAME`] printable
    /// characters with no whitespace at either end, the password at least
    /// [`MIN_PASSWORD_CHARS`] characters and at most [`MAX_PASSWORD_BYTES`]
    /// bytes ([`RegistryError::Invalid`]); [`RegistryError::Taken`] if the
    /// name is in use.
    fn create_developer(&self, name: &str, password: &str) -> Result<Developer>;
    /// The developer if the name exists and the password is theirs, else
    /// None (an unknown name costs one verification all the same, so the
    /// time does not tell which names exist).
    fn developer_sign_in(&self, name: &str, password: &str) -> Result<Option<Developer>>;
    /// A new password (same rules as at creation); false if no such name.
    fn set_developer_password(&self, name: &str, password: &str) -> Result<bool>;
    /// Also ends the developer's ownerships; false if no such name.
    fn delete_developer(&self, name: &str) -> Result<bool>;
    /// Every developer, by id.
    fn list_developers(&self) -> Result<Vec<Developer>>;
    fn developer(&self, id: u64) -> Result<Option<Developer>>;
    /// Makes the developer an owner of the application (idempotent; an
    /// application may have several). [`RegistryError::NotFound`] for an
    /// unknown developer or application.
    fn own_application(&self, developer_id: u64, app_id: u64) -> Result<()>;
    /// False if the developer did not own it.
    fn disown_application(&self, developer_id: u64, app_id: u64) -> Result<bool>;
    /// The developer's applications, by id: only theirs.
    fn applications_of_developer(&self, developer_id: u64) -> Result<Vec<Application>>;
    fn developer_owns(&self, developer_id: u64, app_id: u64) -> Result<bool>;

    // Privileged-intent requests: pending = requested & !approved. An
    // operator approves with `set_approved_intents(approved | requested)`
    // or denies with `request_intents(requested & approved)`.
    /// Replaces the application's request with `bits` (a subset of
    /// [`intents::PRIVILEGED`], else the error `set_approved_intents`
    /// gives; bits already approved are allowed and are not pending).
    fn request_intents(&self, app_id: u64, bits: u64) -> Result<Application>;
    /// Applications with something pending (`requested_intents &
    /// !approved_intents != 0`), by id.
    fn intent_requests(&self) -> Result<Vec<Application>>;

    /// Cluster membership (docs/cluster.md): claim the lowest free node
    /// number for this process (`instance`, random per start), with the
    /// address of its node-to-node link, held until `now_ms + ttl_ms`.
    fn register_node(
        &self,
        instance: &str,
        link_addr: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<u16>;
    /// Renew the claim on `node`: false if another instance holds it now.
    fn heartbeat_node(
        &self,
        node: u16,
        instance: &str,
        link_addr: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<bool>;
    /// (number, link address) of every live node.
    fn live_nodes(&self, now_ms: u64) -> Result<Vec<(u16, String)>>;
    /// Where the link of live node `node` listens (None: no live claim).
    fn node_link(&self, node: u16, now_ms: u64) -> Result<Option<String>>;
    /// Whether process `instance` still holds a live claim (on any
    /// number): false once its claim lapsed, it left, or another process
    /// took its number. A node fences itself when its claim lapses, so
    /// false proves the process no longer delivers (crash recovery).
    fn instance_live(&self, instance: &str, now_ms: u64) -> Result<bool>;
    /// Give up the claim (a clean stop).
    fn leave_node(&self, node: u16, instance: &str) -> Result<()>;
}
