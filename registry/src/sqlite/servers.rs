//! Servers, roles, channels and permission overwrites.

use std::collections::HashMap;

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::{to_i, to_u};
use crate::model::*;
use crate::validate::validate_name;
use crate::{snowflake, RegistryError, Result, StateChange};

fn server_row(r: &Row<'_>) -> rusqlite::Result<Server> {
    Ok(Server {
        id: to_u(r.get(0)?),
        name: r.get(1)?,
        owner_id: to_u(r.get(2)?),
        created_at_ms: to_u(r.get(3)?),
    })
}

const ROLE_COLS: &str =
    "id, server_id, name, permissions, position, color, hoist, mentionable, managed";

fn role_row(r: &Row<'_>) -> rusqlite::Result<Role> {
    Ok(Role {
        id: to_u(r.get(0)?),
        server_id: to_u(r.get(1)?),
        name: r.get(2)?,
        permissions: to_u(r.get(3)?),
        position: r.get(4)?,
        color: r.get(5)?,
        hoist: r.get(6)?,
        mentionable: r.get(7)?,
        managed: r.get(8)?,
    })
}

const CHANNEL_COLS: &str = "id, server_id, name, kind, position, parent_id, topic";

fn channel_row(r: &Row<'_>) -> rusqlite::Result<Channel> {
    Ok(Channel {
        id: to_u(r.get(0)?),
        server_id: to_u(r.get(1)?),
        name: r.get(2)?,
        kind: r.get(3)?,
        position: r.get(4)?,
        parent_id: r.get::<_, Option<i64>>(5)?.map(to_u),
        topic: r.get(6)?,
    })
}

pub fn get(c: &Connection, id: u64) -> Result<Option<Server>> {
    Ok(c.query_row(
        "SELECT id, name, owner_id, created_at_ms FROM servers WHERE id = ?1",
        [to_i(id)],
        server_row,
    )
    .optional()?)
}

pub fn require(c: &Connection, id: u64) -> Result<Server> {
    get(c, id)?.ok_or(RegistryError::NotFound { what: "server", id })
}

pub fn list(c: &Connection) -> Result<Vec<Server>> {
    let mut st = c.prepare("SELECT id, name, owner_id, created_at_ms FROM servers ORDER BY id")?;
    let v = st
        .query_map([], server_row)?
        .collect::<rusqlite::Result<_>>()?;
    Ok(v)
}

pub fn create(c: &Connection, name: &str, owner_id: u64) -> Result<Server> {
    // Fresh millisecond per server: bulk-created servers spread over shards.
    create_with_id(c, snowflake::global().next_id_fresh_ms(), name, owner_id)
}

pub fn create_with_id(c: &Connection, id: u64, name: &str, owner_id: u64) -> Result<Server> {
    validate_name("server", name)?;
    if id == 0 || get(c, id)?.is_some() {
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
    c.execute(
        "INSERT INTO servers (id, name, owner_id, created_at_ms) VALUES (?1, ?2, ?3, ?4)",
        params![
            to_i(id),
            server.name,
            to_i(owner_id),
            to_i(server.created_at_ms)
        ],
    )?;
    // @everyone shares the server's id, as on Discord.
    c.execute(
        "INSERT INTO roles (id, server_id, name, permissions, position) VALUES (?1, ?1, '@everyone', ?2, 0)",
        params![to_i(id), to_i(permissions::EVERYONE_DEFAULT)],
    )?;
    Ok(server)
}

pub fn delete(c: &Connection, server_id: u64) -> Result<bool> {
    // Cascades: roles, channels, overwrites, installations, installation roles.
    Ok(c.execute("DELETE FROM servers WHERE id = ?1", [to_i(server_id)])? > 0)
}

pub fn get_role(c: &Connection, id: u64) -> Result<Option<Role>> {
    Ok(c.query_row(
        &format!("SELECT {ROLE_COLS} FROM roles WHERE id = ?1"),
        [to_i(id)],
        role_row,
    )
    .optional()?)
}

pub fn create_role(
    c: &Connection,
    server_id: u64,
    name: &str,
    perms: u64,
    managed: bool,
) -> Result<Role> {
    validate_name("role", name)?;
    require(c, server_id)?;
    let position: i32 = c.query_row(
        "SELECT COALESCE(MAX(position), 0) + 1 FROM roles WHERE server_id = ?1",
        [to_i(server_id)],
        |r| r.get(0),
    )?;
    let id = snowflake::global().next_id();
    c.execute(
        "INSERT INTO roles (id, server_id, name, permissions, position, managed)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            to_i(id),
            to_i(server_id),
            name,
            to_i(perms),
            position,
            managed
        ],
    )?;
    Ok(Role {
        id,
        server_id,
        name: name.to_owned(),
        permissions: perms,
        position,
        color: 0,
        hoist: false,
        mentionable: false,
        managed,
    })
}

pub fn set_role_permissions(c: &Connection, role_id: u64, perms: u64) -> Result<()> {
    c.execute(
        "UPDATE roles SET permissions = ?2 WHERE id = ?1",
        params![to_i(role_id), to_i(perms)],
    )?;
    Ok(())
}

/// Deletes a role and every overwrite that targets it.
pub fn delete_role(c: &Connection, role_id: u64) -> Result<()> {
    c.execute(
        "DELETE FROM overwrites WHERE target_id = ?1 AND target_kind = 0",
        [to_i(role_id)],
    )?;
    c.execute("DELETE FROM roles WHERE id = ?1", [to_i(role_id)])?;
    Ok(())
}

fn get_channel(c: &Connection, id: u64) -> Result<Option<Channel>> {
    Ok(c.query_row(
        &format!("SELECT {CHANNEL_COLS} FROM channels WHERE id = ?1"),
        [to_i(id)],
        channel_row,
    )
    .optional()?)
}

pub fn create_channel(
    c: &Connection,
    server_id: u64,
    name: &str,
    kind: u8,
    parent: Option<u64>,
) -> Result<Channel> {
    validate_name("channel", name)?;
    require(c, server_id)?;
    if let Some(pid) = parent {
        let p = get_channel(c, pid)?.ok_or(RegistryError::NotFound {
            what: "channel",
            id: pid,
        })?;
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
    let position: i32 = c.query_row(
        "SELECT COALESCE(MAX(position), -1) + 1 FROM channels WHERE server_id = ?1",
        [to_i(server_id)],
        |r| r.get(0),
    )?;
    let id = snowflake::global().next_id();
    c.execute(
        "INSERT INTO channels (id, server_id, name, kind, position, parent_id)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            to_i(id),
            to_i(server_id),
            name,
            kind,
            position,
            parent.map(to_i)
        ],
    )?;
    Ok(Channel {
        id,
        server_id,
        name: name.to_owned(),
        kind,
        position,
        parent_id: parent,
        topic: None,
    })
}

pub fn set_overwrite(
    c: &Connection,
    channel_id: u64,
    target_id: u64,
    kind: OverwriteKind,
    allow: u64,
    deny: u64,
) -> Result<()> {
    let ch = get_channel(c, channel_id)?.ok_or(RegistryError::NotFound {
        what: "channel",
        id: channel_id,
    })?;
    if kind == OverwriteKind::Role {
        match get_role(c, target_id)? {
            Some(r) if r.server_id == ch.server_id => {}
            _ => {
                return Err(RegistryError::NotFound {
                    what: "role",
                    id: target_id,
                })
            }
        }
    }
    // New overwrites go last; an update keeps its `ord`.
    c.execute(
        "INSERT INTO overwrites (channel_id, target_id, target_kind, allow, deny, ord)
         VALUES (?1, ?2, ?3, ?4, ?5,
                 (SELECT COALESCE(MAX(ord), -1) + 1 FROM overwrites WHERE channel_id = ?1))
         ON CONFLICT (channel_id, target_id) DO UPDATE
         SET target_kind = excluded.target_kind, allow = excluded.allow, deny = excluded.deny",
        params![
            to_i(channel_id),
            to_i(target_id),
            kind.as_u8(),
            to_i(allow),
            to_i(deny)
        ],
    )?;
    Ok(())
}

pub fn delete_overwrite(c: &Connection, channel_id: u64, target_id: u64) -> Result<bool> {
    Ok(c.execute(
        "DELETE FROM overwrites WHERE channel_id = ?1 AND target_id = ?2",
        params![to_i(channel_id), to_i(target_id)],
    )? > 0)
}

pub fn snapshot(c: &Connection, server_id: u64) -> Result<Option<ServerSnapshot>> {
    let Some(server) = get(c, server_id)? else {
        return Ok(None);
    };
    let sid = to_i(server_id);
    let roles = c
        .prepare(&format!(
            "SELECT {ROLE_COLS} FROM roles WHERE server_id = ?1 ORDER BY position, id"
        ))?
        .query_map([sid], role_row)?
        .collect::<rusqlite::Result<Vec<_>>>()?;

    let mut overwrites: HashMap<u64, Vec<Overwrite>> = HashMap::new();
    let mut st = c.prepare(
        "SELECT o.channel_id, o.target_id, o.target_kind, o.allow, o.deny
         FROM overwrites o JOIN channels ch ON ch.id = o.channel_id
         WHERE ch.server_id = ?1 ORDER BY o.channel_id, o.ord",
    )?;
    let mut rows = st.query([sid])?;
    while let Some(r) = rows.next()? {
        let kind: u8 = r.get(2)?;
        let ow = Overwrite {
            target_id: to_u(r.get(1)?),
            // Only 0/1 are ever written; anything else is treated as a member.
            kind: OverwriteKind::from_u8(kind).unwrap_or(OverwriteKind::Member),
            allow: to_u(r.get(3)?),
            deny: to_u(r.get(4)?),
        };
        overwrites.entry(to_u(r.get(0)?)).or_default().push(ow);
    }

    let channels = c
        .prepare(&format!(
            "SELECT {CHANNEL_COLS} FROM channels WHERE server_id = ?1 ORDER BY position, id"
        ))?
        .query_map([sid], channel_row)?
        .map(|ch| {
            ch.map(|channel| ChannelWithOverwrites {
                overwrites: overwrites.remove(&channel.id).unwrap_or_default(),
                channel,
            })
        })
        .collect::<rusqlite::Result<Vec<_>>>()?;

    Ok(Some(ServerSnapshot {
        server,
        roles,
        channels,
    }))
}

/// First channel of `server_id` with this name and kind.
pub fn find_channel(c: &Connection, server_id: u64, name: &str, kind: u8) -> Result<Option<u64>> {
    Ok(c.query_row(
        "SELECT id FROM channels WHERE server_id = ?1 AND name = ?2 AND kind = ?3
         ORDER BY position, id LIMIT 1",
        params![to_i(server_id), name, kind],
        |r| r.get::<_, i64>(0),
    )
    .optional()?
    .map(to_u))
}

/// Apply a change the chat service reported (ids are the chat service's).
pub fn apply_state(c: &Connection, change: &StateChange) -> Result<()> {
    match change {
        StateChange::ServerName { server_id, name } => {
            validate_name("server", name)?;
            c.execute(
                "UPDATE servers SET name = ?2 WHERE id = ?1",
                params![to_i(*server_id), name],
            )?;
        }
        StateChange::UpsertChannel {
            channel: ch,
            overwrites,
        } => {
            validate_name("channel", &ch.name)?;
            require(c, ch.server_id)?;
            c.execute(
                "INSERT INTO channels (id, server_id, name, kind, position, parent_id, topic)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
                 ON CONFLICT (id) DO UPDATE SET name = excluded.name, kind = excluded.kind,
                   position = excluded.position, parent_id = excluded.parent_id, topic = excluded.topic",
                params![
                    to_i(ch.id),
                    to_i(ch.server_id),
                    ch.name,
                    ch.kind,
                    ch.position,
                    ch.parent_id.filter(|p| *p != ch.id).map(to_i),
                    ch.topic
                ],
            )?;
            c.execute(
                "DELETE FROM overwrites WHERE channel_id = ?1",
                [to_i(ch.id)],
            )?;
            for (ord, o) in overwrites.iter().enumerate() {
                c.execute(
                    "INSERT INTO overwrites (channel_id, target_id, target_kind, allow, deny, ord)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                     ON CONFLICT (channel_id, target_id) DO UPDATE
                     SET target_kind = excluded.target_kind, allow = excluded.allow, deny = excluded.deny",
                    params![to_i(ch.id), to_i(o.target_id), o.kind.as_u8(), to_i(o.allow), to_i(o.deny), ord as i64],
                )?;
            }
        }
        StateChange::DeleteChannel { channel_id } => {
            c.execute("DELETE FROM channels WHERE id = ?1", [to_i(*channel_id)])?;
        }
        StateChange::UpsertRole { role } => {
            validate_name("role", &role.name)?;
            require(c, role.server_id)?;
            c.execute(
                "INSERT INTO roles (id, server_id, name, permissions, position, color, hoist, mentionable, managed)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 0)
                 ON CONFLICT (id) DO UPDATE SET name = excluded.name, permissions = excluded.permissions,
                   position = excluded.position, color = excluded.color, hoist = excluded.hoist,
                   mentionable = excluded.mentionable",
                params![
                    to_i(role.id),
                    to_i(role.server_id),
                    role.name,
                    to_i(role.permissions),
                    role.position,
                    role.color,
                    role.hoist,
                    role.mentionable
                ],
            )?;
        }
        StateChange::DeleteRole { role_id, .. } => delete_role(c, *role_id)?,
    }
    Ok(())
}
