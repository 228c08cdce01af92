//! Servers, roles, channels and permission overwrites (PostgreSQL).

use std::collections::HashMap;

use tokio_postgres::Row;

use super::{col, to_i, to_u, Tx};
use crate::model::*;
use crate::validate::validate_name;
use crate::{snowflake, RegistryError, Result, StateChange};

const SERVER_COLS: &str = "id, name, owner_id, created_at_ms";

fn server_row(r: &Row) -> Result<Server> {
    Ok(Server {
        id: to_u(col(r, 0)?),
        name: col(r, 1)?,
        owner_id: to_u(col(r, 2)?),
        created_at_ms: to_u(col(r, 3)?),
    })
}

const ROLE_COLS: &str =
    "id, server_id, name, permissions, position, color, hoist, mentionable, managed";

fn role_row(r: &Row) -> Result<Role> {
    Ok(Role {
        id: to_u(col(r, 0)?),
        server_id: to_u(col(r, 1)?),
        name: col(r, 2)?,
        permissions: to_u(col(r, 3)?),
        position: col(r, 4)?,
        color: col::<i64>(r, 5)? as u32,
        hoist: col(r, 6)?,
        mentionable: col(r, 7)?,
        managed: col(r, 8)?,
    })
}

const CHANNEL_COLS: &str = "id, server_id, name, kind, position, parent_id, topic";

fn channel_row(r: &Row) -> Result<Channel> {
    Ok(Channel {
        id: to_u(col(r, 0)?),
        server_id: to_u(col(r, 1)?),
        name: col(r, 2)?,
        kind: col::<i16>(r, 3)? as u8,
        position: col(r, 4)?,
        parent_id: col::<Option<i64>>(r, 5)?.map(to_u),
        topic: col(r, 6)?,
    })
}

pub fn get(t: &mut Tx<'_>, id: u64) -> Result<Option<Server>> {
    t.query_opt(
        &format!("SELECT {SERVER_COLS} FROM servers WHERE id = $1"),
        &[&to_i(id)],
    )?
    .map(|r| server_row(&r))
    .transpose()
}

pub fn require(t: &mut Tx<'_>, id: u64) -> Result<Server> {
    get(t, id)?.ok_or(RegistryError::NotFound { what: "server", id })
}

pub fn list(t: &mut Tx<'_>) -> Result<Vec<Server>> {
    t.query(
        &format!("SELECT {SERVER_COLS} FROM servers ORDER BY id"),
        &[],
    )?
    .iter()
    .map(server_row)
    .collect()
}

pub fn create(t: &mut Tx<'_>, name: &str, owner_id: u64) -> Result<Server> {
    // Fresh millisecond per server: bulk-created servers spread over shards.
    create_with_id(t, snowflake::global().next_id_fresh_ms(), name, owner_id)
}

pub fn create_with_id(t: &mut Tx<'_>, id: u64, name: &str, owner_id: u64) -> Result<Server> {
    validate_name("server", name)?;
    if id == 0 || get(t, id)?.is_some() {
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
    t.execute(
        "INSERT INTO servers (id, name, owner_id, created_at_ms) VALUES ($1, $2, $3, $4)",
        &[
            &to_i(id),
            &server.name,
            &to_i(owner_id),
            &to_i(server.created_at_ms),
        ],
    )?;
    // @everyone shares the server's id, as on Discord.
    t.execute(
        "INSERT INTO roles (id, server_id, name, permissions, position)
         VALUES ($1, $1, '@everyone', $2, 0)",
        &[&to_i(id), &to_i(permissions::EVERYONE_DEFAULT)],
    )?;
    Ok(server)
}

pub fn delete(t: &mut Tx<'_>, server_id: u64) -> Result<bool> {
    // Cascades: roles, channels, overwrites, installations, installation roles.
    Ok(t.execute("DELETE FROM servers WHERE id = $1", &[&to_i(server_id)])? > 0)
}

pub fn get_role(t: &mut Tx<'_>, id: u64) -> Result<Option<Role>> {
    t.query_opt(
        &format!("SELECT {ROLE_COLS} FROM roles WHERE id = $1"),
        &[&to_i(id)],
    )?
    .map(|r| role_row(&r))
    .transpose()
}

pub fn create_role(
    t: &mut Tx<'_>,
    server_id: u64,
    name: &str,
    perms: u64,
    managed: bool,
) -> Result<Role> {
    validate_name("role", name)?;
    require(t, server_id)?;
    let r = t.query_one(
        "SELECT COALESCE(MAX(position), 0) + 1 FROM roles WHERE server_id = $1",
        &[&to_i(server_id)],
    )?;
    let position: i32 = col(&r, 0)?;
    let id = snowflake::global().next_id();
    t.execute(
        "INSERT INTO roles (id, server_id, name, permissions, position, managed)
         VALUES ($1, $2, $3, $4, $5, $6)",
        &[
            &to_i(id),
            &to_i(server_id),
            &name,
            &to_i(perms),
            &position,
            &managed,
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

pub fn set_role_permissions(t: &mut Tx<'_>, role_id: u64, perms: u64) -> Result<()> {
    t.execute(
        "UPDATE roles SET permissions = $2 WHERE id = $1",
        &[&to_i(role_id), &to_i(perms)],
    )?;
    Ok(())
}

/// Deletes a role and every overwrite that targets it.
pub fn delete_role(t: &mut Tx<'_>, role_id: u64) -> Result<()> {
    t.execute(
        "DELETE FROM overwrites WHERE target_id = $1 AND target_kind = 0",
        &[&to_i(role_id)],
    )?;
    t.execute("DELETE FROM roles WHERE id = $1", &[&to_i(role_id)])?;
    Ok(())
}

fn get_channel(t: &mut Tx<'_>, id: u64) -> Result<Option<Channel>> {
    t.query_opt(
        &format!("SELECT {CHANNEL_COLS} FROM channels WHERE id = $1"),
        &[&to_i(id)],
    )?
    .map(|r| channel_row(&r))
    .transpose()
}

pub fn create_channel(
    t: &mut Tx<'_>,
    server_id: u64,
    name: &str,
    kind: u8,
    parent: Option<u64>,
) -> Result<Channel> {
    validate_name("channel", name)?;
    require(t, server_id)?;
    if let Some(pid) = parent {
        let p = get_channel(t, pid)?.ok_or(RegistryError::NotFound {
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
    let r = t.query_one(
        "SELECT COALESCE(MAX(position), -1) + 1 FROM channels WHERE server_id = $1",
        &[&to_i(server_id)],
    )?;
    let position: i32 = col(&r, 0)?;
    let id = snowflake::global().next_id();
    t.execute(
        "INSERT INTO channels (id, server_id, name, kind, position, parent_id)
         VALUES ($1, $2, $3, $4, $5, $6)",
        &[
            &to_i(id),
            &to_i(server_id),
            &name,
            &i16::from(kind),
            &position,
            &parent.map(to_i),
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
    t: &mut Tx<'_>,
    channel_id: u64,
    target_id: u64,
    kind: OverwriteKind,
    allow: u64,
    deny: u64,
) -> Result<()> {
    let ch = get_channel(t, channel_id)?.ok_or(RegistryError::NotFound {
        what: "channel",
        id: channel_id,
    })?;
    if kind == OverwriteKind::Role {
        match get_role(t, target_id)? {
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
    t.execute(
        "INSERT INTO overwrites (channel_id, target_id, target_kind, allow, deny, ord)
         VALUES ($1, $2, $3, $4, $5,
                 (SELECT COALESCE(MAX(ord), -1) + 1 FROM overwrites WHERE channel_id = $1))
         ON CONFLICT (channel_id, target_id) DO UPDATE
         SET target_kind = EXCLUDED.target_kind, allow = EXCLUDED.allow, deny = EXCLUDED.deny",
        &[
            &to_i(channel_id),
            &to_i(target_id),
            &i16::from(kind.as_u8()),
            &to_i(allow),
            &to_i(deny),
        ],
    )?;
    Ok(())
}

pub fn delete_overwrite(t: &mut Tx<'_>, channel_id: u64, target_id: u64) -> Result<bool> {
    Ok(t.execute(
        "DELETE FROM overwrites WHERE channel_id = $1 AND target_id = $2",
        &[&to_i(channel_id), &to_i(target_id)],
    )? > 0)
}

pub fn snapshot(t: &mut Tx<'_>, server_id: u64) -> Result<Option<ServerSnapshot>> {
    let Some(server) = get(t, server_id)? else {
        return Ok(None);
    };
    let sid = to_i(server_id);
    let roles = t
        .query(
            &format!("SELECT {ROLE_COLS} FROM roles WHERE server_id = $1 ORDER BY position, id"),
            &[&sid],
        )?
        .iter()
        .map(role_row)
        .collect::<Result<Vec<_>>>()?;

    let mut overwrites: HashMap<u64, Vec<Overwrite>> = HashMap::new();
    for r in t.query(
        "SELECT o.channel_id, o.target_id, o.target_kind, o.allow, o.deny
         FROM overwrites o JOIN channels ch ON ch.id = o.channel_id
         WHERE ch.server_id = $1 ORDER BY o.channel_id, o.ord",
        &[&sid],
    )? {
        let kind: i16 = col(&r, 2)?;
        let ow = Overwrite {
            target_id: to_u(col(&r, 1)?),
            // Only 0/1 are ever written; anything else is treated as a member.
            kind: OverwriteKind::from_u8(kind as u8).unwrap_or(OverwriteKind::Member),
            allow: to_u(col(&r, 3)?),
            deny: to_u(col(&r, 4)?),
        };
        overwrites.entry(to_u(col(&r, 0)?)).or_default().push(ow);
    }

    let channels = t
        .query(
            &format!(
                "SELECT {CHANNEL_COLS} FROM channels WHERE server_id = $1 ORDER BY position, id"
            ),
            &[&sid],
        )?
        .iter()
        .map(|r| {
            channel_row(r).map(|channel| ChannelWithOverwrites {
                overwrites: overwrites.remove(&channel.id).unwrap_or_default(),
                channel,
            })
        })
        .collect::<Result<Vec<_>>>()?;

    Ok(Some(ServerSnapshot {
        server,
        roles,
        channels,
    }))
}

/// First channel of `server_id` with this name and kind.
pub fn find_channel(t: &mut Tx<'_>, server_id: u64, name: &str, kind: u8) -> Result<Option<u64>> {
    t.query_opt(
        "SELECT id FROM channels WHERE server_id = $1 AND name = $2 AND kind = $3
         ORDER BY position, id LIMIT 1",
        &[&to_i(server_id), &name, &i16::from(kind)],
    )?
    .map(|r| col::<i64>(&r, 0).map(to_u))
    .transpose()
}

/// Apply a change the chat service reported (ids are the chat service's).
pub fn apply_state(t: &mut Tx<'_>, change: &StateChange) -> Result<()> {
    match change {
        StateChange::ServerName { server_id, name } => {
            validate_name("server", name)?;
            t.execute(
                "UPDATE servers SET name = $2 WHERE id = $1",
                &[&to_i(*server_id), name],
            )?;
        }
        StateChange::UpsertChannel {
            channel: ch,
            overwrites,
        } => {
            validate_name("channel", &ch.name)?;
            require(t, ch.server_id)?;
            t.execute(
                "INSERT INTO channels (id, server_id, name, kind, position, parent_id, topic)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)
                 ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name, kind = EXCLUDED.kind,
                   position = EXCLUDED.position, parent_id = EXCLUDED.parent_id,
                   topic = EXCLUDED.topic",
                &[
                    &to_i(ch.id),
                    &to_i(ch.server_id),
                    &ch.name,
                    &i16::from(ch.kind),
                    &ch.position,
                    &ch.parent_id.filter(|p| *p != ch.id).map(to_i),
                    &ch.topic,
                ],
            )?;
            t.execute(
                "DELETE FROM overwrites WHERE channel_id = $1",
                &[&to_i(ch.id)],
            )?;
            for (ord, o) in overwrites.iter().enumerate() {
                t.execute(
                    "INSERT INTO overwrites (channel_id, target_id, target_kind, allow, deny, ord)
                     VALUES ($1, $2, $3, $4, $5, $6)
                     ON CONFLICT (channel_id, target_id) DO UPDATE
                     SET target_kind = EXCLUDED.target_kind, allow = EXCLUDED.allow,
                         deny = EXCLUDED.deny",
                    &[
                        &to_i(ch.id),
                        &to_i(o.target_id),
                        &i16::from(o.kind.as_u8()),
                        &to_i(o.allow),
                        &to_i(o.deny),
                        &i32::try_from(ord).unwrap_or(i32::MAX),
                    ],
                )?;
            }
        }
        StateChange::DeleteChannel { channel_id } => {
            t.execute("DELETE FROM channels WHERE id = $1", &[&to_i(*channel_id)])?;
        }
        StateChange::UpsertRole { role } => {
            validate_name("role", &role.name)?;
            require(t, role.server_id)?;
            t.execute(
                "INSERT INTO roles (id, server_id, name, permissions, position, color, hoist,
                                    mentionable, managed)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, FALSE)
                 ON CONFLICT (id) DO UPDATE SET name = EXCLUDED.name,
                   permissions = EXCLUDED.permissions, position = EXCLUDED.position,
                   color = EXCLUDED.color, hoist = EXCLUDED.hoist,
                   mentionable = EXCLUDED.mentionable",
                &[
                    &to_i(role.id),
                    &to_i(role.server_id),
                    &role.name,
                    &to_i(role.permissions),
                    &role.position,
                    &i64::from(role.color),
                    &role.hoist,
                    &role.mentionable,
                ],
            )?;
        }
        StateChange::DeleteRole { role_id, .. } => delete_role(t, *role_id)?,
    }
    Ok(())
}
