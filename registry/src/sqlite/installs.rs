//! Installations (an application's grant in a server), shard lookups and the
//! demo seed.

pub use crate::rules::{DEMO_APP, DEMO_CATEGORY, DEMO_CHANNEL, DEMO_SERVER};
use rusqlite::{params, Connection, OptionalExtension};

use super::{apps, servers, to_i, to_u};
use crate::model::*;
use crate::validate::check_shard;
use crate::{snowflake, RegistryError, Result};

fn role_ids(c: &Connection, app_id: u64, server_id: u64) -> Result<Vec<u64>> {
    let mut st = c.prepare(
        "SELECT role_id FROM installation_roles
         WHERE application_id = ?1 AND server_id = ?2 ORDER BY role_id",
    )?;
    let v = st
        .query_map(params![to_i(app_id), to_i(server_id)], |r| {
            r.get::<_, i64>(0).map(to_u)
        })?
        .collect::<rusqlite::Result<_>>()?;
    Ok(v)
}

pub fn get(c: &Connection, app_id: u64, server_id: u64) -> Result<Option<Installation>> {
    let row: Option<(i64, Option<i64>, i64)> = c
        .query_row(
            "SELECT permissions, managed_role_id, installed_at_ms FROM installations
             WHERE application_id = ?1 AND server_id = ?2",
            params![to_i(app_id), to_i(server_id)],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    let Some((perms, managed, at)) = row else {
        return Ok(None);
    };
    Ok(Some(Installation {
        application_id: app_id,
        server_id,
        permissions: to_u(perms),
        role_ids: role_ids(c, app_id, server_id)?,
        managed_role_id: managed.map(to_u),
        installed_at_ms: to_u(at),
    }))
}

fn require(c: &Connection, app_id: u64, server_id: u64) -> Result<Installation> {
    get(c, app_id, server_id)?.ok_or(RegistryError::NotFound {
        what: "installation in server",
        id: server_id,
    })
}

pub fn of_app(c: &Connection, app_id: u64) -> Result<Vec<Installation>> {
    let ids = server_ids(c, app_id)?;
    let mut out = Vec::with_capacity(ids.len());
    for sid in ids {
        out.extend(get(c, app_id, sid)?);
    }
    Ok(out)
}

/// Every installation in one server (the bots a server change affects).
pub fn in_server(c: &Connection, server_id: u64) -> Result<Vec<Installation>> {
    let mut st = c.prepare(
        "SELECT application_id FROM installations WHERE server_id = ?1 ORDER BY application_id",
    )?;
    let apps: Vec<u64> = st
        .query_map([to_i(server_id)], |r| r.get::<_, i64>(0).map(to_u))?
        .collect::<rusqlite::Result<_>>()?;
    let mut out = Vec::with_capacity(apps.len());
    for app in apps {
        out.extend(get(c, app, server_id)?);
    }
    Ok(out)
}

fn server_ids(c: &Connection, app_id: u64) -> Result<Vec<u64>> {
    let mut st = c.prepare(
        "SELECT server_id FROM installations WHERE application_id = ?1 ORDER BY server_id",
    )?;
    let v = st
        .query_map([to_i(app_id)], |r| r.get::<_, i64>(0).map(to_u))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(v)
}

pub fn install(c: &Connection, app_id: u64, server_id: u64, perms: u64) -> Result<Installation> {
    let app = apps::require(c, app_id)?;
    servers::require(c, server_id)?;
    let existing = get(c, app_id, server_id)?;
    // The managed role may have been deleted by hand: recreate it.
    let managed = match existing.as_ref().and_then(|i| i.managed_role_id) {
        Some(role_id) => {
            servers::set_role_permissions(c, role_id, perms)?;
            role_id
        }
        None => servers::create_role(c, server_id, &app.bot_username, perms, true)?.id,
    };
    if existing.is_some() {
        c.execute(
            "UPDATE installations SET permissions = ?3, managed_role_id = ?4
             WHERE application_id = ?1 AND server_id = ?2",
            params![to_i(app_id), to_i(server_id), to_i(perms), to_i(managed)],
        )?;
    } else {
        c.execute(
            "INSERT INTO installations
                 (application_id, server_id, permissions, managed_role_id, installed_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                to_i(app_id),
                to_i(server_id),
                to_i(perms),
                to_i(managed),
                to_i(snowflake::unix_ms_now())
            ],
        )?;
    }
    c.execute(
        "INSERT OR IGNORE INTO installation_roles (application_id, server_id, role_id)
         VALUES (?1, ?2, ?3)",
        params![to_i(app_id), to_i(server_id), to_i(managed)],
    )?;
    require(c, app_id, server_id)
}

pub fn uninstall(c: &Connection, app_id: u64, server_id: u64) -> Result<bool> {
    let Some(inst) = get(c, app_id, server_id)? else {
        return Ok(false);
    };
    if let Some(role_id) = inst.managed_role_id {
        servers::delete_role(c, role_id)?;
    }
    // Member overwrites for the bot user go with it.
    if let Some(app) = apps::get(c, app_id)? {
        c.execute(
            "DELETE FROM overwrites WHERE target_kind = 1 AND target_id = ?1
             AND channel_id IN (SELECT id FROM channels WHERE server_id = ?2)",
            params![to_i(app.bot_user_id), to_i(server_id)],
        )?;
    }
    c.execute(
        "DELETE FROM installations WHERE application_id = ?1 AND server_id = ?2",
        params![to_i(app_id), to_i(server_id)],
    )?;
    Ok(true)
}

pub fn add_role(c: &Connection, app_id: u64, server_id: u64, role_id: u64) -> Result<()> {
    require(c, app_id, server_id)?;
    match servers::get_role(c, role_id)? {
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
    c.execute(
        "INSERT OR IGNORE INTO installation_roles (application_id, server_id, role_id)
         VALUES (?1, ?2, ?3)",
        params![to_i(app_id), to_i(server_id), to_i(role_id)],
    )?;
    Ok(())
}

pub fn remove_role(c: &Connection, app_id: u64, server_id: u64, role_id: u64) -> Result<bool> {
    Ok(c.execute(
        "DELETE FROM installation_roles WHERE application_id = ?1 AND server_id = ?2 AND role_id = ?3",
        params![to_i(app_id), to_i(server_id), to_i(role_id)],
    )? > 0)
}

pub fn servers_for_shard(
    c: &Connection,
    app_id: u64,
    shard_id: u32,
    shard_count: u32,
) -> Result<Vec<u64>> {
    check_shard(shard_id, shard_count)?;
    // Filtered here, not in SQL: SQLite's >> on negative i64 is arithmetic.
    let mut ids = server_ids(c, app_id)?;
    ids.retain(|id| (id >> 22) % u64::from(shard_count) == u64::from(shard_id));
    Ok(ids)
}

pub fn seed_demo(c: &Connection) -> Result<Option<DemoSeed>> {
    if let Some(app) = apps::by_name(c, DEMO_APP)? {
        let server: Option<i64> = c
            .query_row(
                "SELECT s.id FROM installations i JOIN servers s ON s.id = i.server_id
                 WHERE i.application_id = ?1 AND s.name = ?2 ORDER BY s.id LIMIT 1",
                params![to_i(app.id), DEMO_SERVER],
                |r| r.get(0),
            )
            .optional()?;
        let Some(server_id) = server.map(to_u) else {
            return Ok(None);
        };
        let general = servers::find_channel(c, server_id, DEMO_CHANNEL, channel_kind::TEXT)?;
        return Ok(general.map(|general_channel_id| DemoSeed {
            app,
            token: None,
            server_id,
            general_channel_id,
        }));
    }
    let (app, token) = apps::create(
        c,
        DEMO_APP,
        intents::MESSAGE_CONTENT | intents::GUILD_MEMBERS,
        DEFAULT_MAX_CONCURRENCY,
    )?;
    let owner = snowflake::global().next_id();
    let server = servers::create(c, DEMO_SERVER, owner)?;
    let category =
        servers::create_channel(c, server.id, DEMO_CATEGORY, channel_kind::CATEGORY, None)?;
    let general = servers::create_channel(
        c,
        server.id,
        DEMO_CHANNEL,
        channel_kind::TEXT,
        Some(category.id),
    )?;
    use permissions::*;
    install(
        c,
        app.id,
        server.id,
        VIEW_CHANNEL | SEND_MESSAGES | READ_MESSAGE_HISTORY | EMBED_LINKS,
    )?;
    Ok(Some(DemoSeed {
        app,
        token: Some(token),
        server_id: server.id,
        general_channel_id: general.id,
    }))
}
