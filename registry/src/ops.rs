//! Servers and installations, written once for both backends.
//!
//! A backend implements the store traits below: one method per statement
//! (or fixed group of statements) in its own SQL dialect, run in the
//! caller's transaction. Everything else (validation, existence and
//! ownership checks, ids, positions, what a new row holds, the order of the
//! steps, the outbox rows an install, an uninstall or an application's
//! deletion writes) is here, so the backends cannot drift apart.

use std::collections::HashMap;

use crate::apps::{require_application, AppStore};
use crate::developers::DeveloperStore;
use crate::model::*;
use crate::outbox::{emit, OutboxStore};
use crate::validate::{check_shard, validate_name};
use crate::{
    error::RegistryError, error::Result, revocation::Revocation, revocation::StateChange, snowflake,
};

/// Servers, roles, channels and overwrites.
pub(crate) trait ServerStore {
    fn server(&mut self, id: u64) -> Result<Option<Server>>;
    /// Every server, by id.
    fn servers(&mut self) -> Result<Vec<Server>>;
    fn insert_server(&mut self, server: &Server) -> Result<()>;
    fn rename_server(&mut self, id: u64, name: &str) -> Result<()>;
    /// The server with everything in it (by cascade) and its commands;
    /// false if there was none.
    fn delete_server(&mut self, id: u64) -> Result<bool>;

    fn role(&mut self, id: u64) -> Result<Option<Role>>;
    /// The server's roles by (position, id).
    fn roles_of(&mut self, server_id: u64) -> Result<Vec<Role>>;
    /// One past the highest role position (1 when only `@everyone` exists).
    fn next_role_position(&mut self, server_id: u64) -> Result<i32>;
    /// Writes id, server, name, permissions, position and `managed`; the
    /// other columns keep their defaults.
    fn insert_role(&mut self, role: &Role) -> Result<()>;
    /// Insert, or update all but `managed`, from the chat service's role.
    fn upsert_role(&mut self, role: &Role) -> Result<()>;
    fn set_role_permissions(&mut self, role_id: u64, permissions: u64) -> Result<()>;
    /// The role and every overwrite that targets it.
    fn delete_role(&mut self, role_id: u64) -> Result<()>;

    fn channel(&mut self, id: u64) -> Result<Option<Channel>>;
    /// The server's channels by (position, id).
    fn channels_of(&mut self, server_id: u64) -> Result<Vec<Channel>>;
    /// One past the highest channel position (0 for the first).
    fn next_channel_position(&mut self, server_id: u64) -> Result<i32>;
    /// Everything but the topic.
    fn insert_channel(&mut self, channel: &Channel) -> Result<()>;
    /// Insert or update the channel (a parent equal to itself is stored as
    /// none) and replace its overwrites with `overwrites`, in that order.
    fn replace_channel(&mut self, channel: &Channel, overwrites: &[Overwrite]) -> Result<()>;
    fn delete_channel(&mut self, id: u64) -> Result<()>;
    /// First channel of the server with this name and kind.
    fn find_channel(&mut self, server_id: u64, name: &str, kind: u8) -> Result<Option<u64>>;

    /// Insert (last in the channel's order) or update (keeping its place).
    fn set_overwrite(&mut self, channel_id: u64, overwrite: &Overwrite) -> Result<()>;
    /// False if there was none.
    fn delete_overwrite(&mut self, channel_id: u64, target_id: u64) -> Result<bool>;
    /// The overwrites of the server's channels as (channel id, overwrite),
    /// by channel, each channel's in their order.
    fn overwrites_of(&mut self, server_id: u64) -> Result<Vec<(u64, Overwrite)>>;
}

/// Installations.
pub(crate) trait InstallStore: AppStore + ServerStore {
    fn installation(&mut self, app_id: u64, server_id: u64) -> Result<Option<Installation>>;
    /// The application's installations, ascending by server id.
    fn installations_of_app(&mut self, app_id: u64) -> Result<Vec<Installation>>;
    /// The server's installations, ascending by application id.
    fn installations_in_server(&mut self, server_id: u64) -> Result<Vec<Installation>>;
    /// For each (application, server) pair, whether it is installed, in
    /// the same order.
    fn installed(&mut self, pairs: &[(u64, u64)]) -> Result<Vec<bool>>;
    fn insert_installation(
        &mut self,
        app_id: u64,
        server_id: u64,
        permissions: u64,
        managed_role_id: u64,
        installed_at_ms: u64,
    ) -> Result<()>;
    fn update_installation(
        &mut self,
        app_id: u64,
        server_id: u64,
        permissions: u64,
        managed_role_id: u64,
    ) -> Result<()>;
    fn delete_installation(&mut self, app_id: u64, server_id: u64) -> Result<()>;
    /// Gives the bot member a role; nothing if it already has it.
    fn add_installation_role(&mut self, app_id: u64, server_id: u64, role_id: u64) -> Result<()>;
    /// False if the bot member did not have it.
    fn remove_installation_role(
        &mut self,
        app_id: u64,
        server_id: u64,
        role_id: u64,
    ) -> Result<bool>;
    /// Member overwrites for `user_id` on the server's channels.
    fn delete_member_overwrites(&mut self, server_id: u64, user_id: u64) -> Result<()>;
    /// The servers `app_id` is installed in, ascending.
    fn installed_server_ids(&mut self, app_id: u64) -> Result<Vec<u64>>;
    /// The lowest-id server named `name` that `app_id` is installed in.
    fn installed_server_named(&mut self, app_id: u64, name: &str) -> Result<Option<u64>>;
}

pub(crate) fn require_server<S: ServerStore>(s: &mut S, id: u64) -> Result<Server> {
    s.server(id)?
        .ok_or(RegistryError::NotFound { what: "server", id })
}

fn require_channel<S: ServerStore>(s: &mut S, id: u64) -> Result<Channel> {
    s.channel(id)?.ok_or(RegistryError::NotFound {
        what: "channel",
        id,
    })
}

fn require_installation<S: InstallStore>(
    s: &mut S,
    app_id: u64,
    server_id: u64,
) -> Result<Installation> {
    s.installation(app_id, server_id)?
        .ok_or(RegistryError::NotFound {
            what: "installation in server",
            id: server_id,
        })
}

pub(crate) fn create_server<S: ServerStore>(
    s: &mut S,
    name: &str,
    owner_id: u64,
) -> Result<Server> {
    // Fresh millisecond per server: bulk-created servers spread over shards.
    create_server_with_id(s, snowflake::global().next_id_fresh_ms(), name, owner_id)
}

pub(crate) fn create_server_with_id<S: ServerStore>(
    s: &mut S,
    id: u64,
    name: &str,
    owner_id: u64,
) -> Result<Server> {
    validate_name("server", name)?;
    if id == 0 || s.server(id)?.is_some() {
        return Err(RegistryError::Invalid(format!(
            "server id {id} is 0 or taken"
        )));
    }
    let server = Server {
        id,
        name: name.to_owned(),
        owner_id,
        created_at_ms: snowflake::unix_ms_now(),
    };
    s.insert_server(&server)?;
    // @everyone shares the server's id, as on Discord.
    s.insert_role(&Role {
        id,
        server_id: id,
        name: "@everyone".to_owned(),
        permissions: permissions::EVERYONE_DEFAULT,
        position: 0,
        color: 0,
        hoist: false,
        mentionable: false,
        managed: false,
    })?;
    Ok(server)
}

pub(crate) fn create_role<S: ServerStore>(
    s: &mut S,
    server_id: u64,
    name: &str,
    perms: u64,
    managed: bool,
) -> Result<Role> {
    validate_name("role", name)?;
    require_server(s, server_id)?;
    let position = s.next_role_position(server_id)?;
    let role = Role {
        id: snowflake::global().next_id(),
        server_id,
        name: name.to_owned(),
        permissions: perms,
        position,
        color: 0,
        hoist: false,
        mentionable: false,
        managed,
    };
    s.insert_role(&role)?;
    Ok(role)
}

pub(crate) fn create_channel<S: ServerStore>(
    s: &mut S,
    server_id: u64,
    name: &str,
    kind: u8,
    parent: Option<u64>,
) -> Result<Channel> {
    validate_name("channel", name)?;
    require_server(s, server_id)?;
    if let Some(pid) = parent {
        let p = require_channel(s, pid)?;
        if p.server_id != server_id || p.kind != channel_kind::CATEGORY {
            return Err(RegistryError::Invalid(format!(
                "parent {pid} is not a category of server {server_id}"
            )));
        }
        if kind == channel_kind::CATEGORY {
            return Err(RegistryError::Invalid(
                "a category cannot have a parent".into(),
            ));
        }
    }
    let position = s.next_channel_position(server_id)?;
    let channel = Channel {
        id: snowflake::global().next_id(),
        server_id,
        name: name.to_owned(),
        kind,
        position,
        parent_id: parent,
        topic: None,
    };
    s.insert_channel(&channel)?;
    Ok(channel)
}

pub(crate) fn set_overwrite<S: ServerStore>(
    s: &mut S,
    channel_id: u64,
    target_id: u64,
    kind: OverwriteKind,
    allow: u64,
    deny: u64,
) -> Result<()> {
    let ch = require_channel(s, channel_id)?;
    if kind == OverwriteKind::Role {
        match s.role(target_id)? {
            Some(r) if r.server_id == ch.server_id => {}
            _ => {
                return Err(RegistryError::NotFound {
                    what: "role",
                    id: target_id,
                })
            }
        }
    }
    let overwrite = Overwrite {
        target_id,
        kind,
        allow,
        deny,
    };
    s.set_overwrite(channel_id, &overwrite)
}

pub(crate) fn snapshot<S: ServerStore>(
    s: &mut S,
    server_id: u64,
) -> Result<Option<ServerSnapshot>> {
    let Some(server) = s.server(server_id)? else {
        return Ok(None);
    };
    let roles = s.roles_of(server_id)?;
    let mut overwrites: HashMap<u64, Vec<Overwrite>> = HashMap::new();
    for (channel_id, ow) in s.overwrites_of(server_id)? {
        overwrites.entry(channel_id).or_default().push(ow);
    }
    let channels = s
        .channels_of(server_id)?
        .into_iter()
        .map(|channel| ChannelWithOverwrites {
            overwrites: overwrites.remove(&channel.id).unwrap_or_default(),
            channel,
        })
        .collect();
    Ok(Some(ServerSnapshot {
        server,
        roles,
        channels,
    }))
}

/// Apply a change the chat service reported (ids are the chat service's).
pub(crate) fn apply_state<S: ServerStore>(s: &mut S, change: &StateChange) -> Result<()> {
    match change {
        StateChange::ServerName { server_id, name } => {
            validate_name("server", name)?;
            s.rename_server(*server_id, name)
        }
        StateChange::UpsertChannel {
            channel,
            overwrites,
        } => {
            validate_name("channel", &channel.name)?;
            require_server(s, channel.server_id)?;
            s.replace_channel(channel, overwrites)
        }
        StateChange::DeleteChannel { channel_id } => s.delete_channel(*channel_id),
        StateChange::UpsertRole { role } => {
            validate_name("role", &role.name)?;
            require_server(s, role.server_id)?;
            s.upsert_role(role)
        }
        StateChange::DeleteRole { role_id, .. } => s.delete_role(*role_id),
    }
}

/// Writes [`Revocation::PermissionsChanged`] if an installation's grant
/// changed.
pub(crate) fn install<S: InstallStore + OutboxStore>(
    s: &mut S,
    app_id: u64,
    server_id: u64,
    perms: u64,
) -> Result<Installation> {
    let app = require_application(s, app_id)?;
    require_server(s, server_id)?;
    let existing = s.installation(app_id, server_id)?;
    // The managed role may have been deleted by hand: recreate it.
    let managed = match existing.as_ref().and_then(|i| i.managed_role_id) {
        Some(role_id) => {
            s.set_role_permissions(role_id, perms)?;
            role_id
        }
        None => create_role(s, server_id, &app.bot_username, perms, true)?.id,
    };
    if existing.is_some() {
        s.update_installation(app_id, server_id, perms, managed)?;
    } else {
        s.insert_installation(app_id, server_id, perms, managed, snowflake::unix_ms_now())?;
    }
    s.add_installation_role(app_id, server_id, managed)?;
    let installation = require_installation(s, app_id, server_id)?;
    // A changed grant narrows or widens what the bot's sessions may see.
    if existing.is_some_and(|e| e.permissions != perms) {
        emit(
            s,
            Revocation::PermissionsChanged {
                application_id: app_id,
                server_id,
            },
        )?;
    }
    Ok(installation)
}

/// Writes [`Revocation::Uninstalled`] if it was installed.
pub(crate) fn uninstall<S: InstallStore + OutboxStore>(
    s: &mut S,
    app_id: u64,
    server_id: u64,
) -> Result<bool> {
    let Some(inst) = s.installation(app_id, server_id)? else {
        return Ok(false);
    };
    if let Some(role_id) = inst.managed_role_id {
        s.delete_role(role_id)?;
    }
    // Member overwrites for the bot user go with it.
    if let Some(app) = s.application(app_id)? {
        s.delete_member_overwrites(server_id, app.bot_user_id)?;
    }
    s.delete_installation(app_id, server_id)?;
    emit(
        s,
        Revocation::Uninstalled {
            application_id: app_id,
            server_id,
        },
    )?;
    Ok(true)
}

/// Uninstalls the application everywhere (each written to the outbox, in
/// server order), ends its developers' ownership of it, then deletes it.
pub(crate) fn delete_application<S: InstallStore + DeveloperStore + OutboxStore>(
    s: &mut S,
    app_id: u64,
) -> Result<bool> {
    for server_id in s.installed_server_ids(app_id)? {
        uninstall(s, app_id, server_id)?;
    }
    s.delete_ownerships_of_app(app_id)?;
    s.delete_application_row(app_id)
}

pub(crate) fn add_installation_role<S: InstallStore>(
    s: &mut S,
    app_id: u64,
    server_id: u64,
    role_id: u64,
) -> Result<()> {
    require_installation(s, app_id, server_id)?;
    match s.role(role_id)? {
        Some(r) if r.server_id == server_id && r.id != server_id => {}
        Some(_) => {
            return Err(RegistryError::Invalid(format!(
                "role {role_id} is @everyone or not of server {server_id}"
            )))
        }
        None => {
            return Err(RegistryError::NotFound {
                what: "role",
                id: role_id,
            })
        }
    }
    s.add_installation_role(app_id, server_id, role_id)
}

pub(crate) fn servers_for_shard<S: InstallStore>(
    s: &mut S,
    app_id: u64,
    shard_id: u32,
    shard_count: u32,
) -> Result<Vec<u64>> {
    check_shard(shard_id, shard_count)?;
    // Filtered here, not in SQL: the ids are u64 bit patterns in signed
    // columns (SQLite's >> on a negative i64 is arithmetic), and the shard
    // math must be unsigned.
    let mut ids = s.installed_server_ids(app_id)?;
    ids.retain(|id| (id >> 22) % u64::from(shard_count) == u64::from(shard_id));
    Ok(ids)
}
