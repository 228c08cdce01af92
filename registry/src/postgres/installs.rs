//! Installations, shard lookups and the demo seed (PostgreSQL).

pub use crate::rules::{DEMO_APP, DEMO_CATEGORY, DEMO_CHANNEL, DEMO_SERVER};
use std::collections::HashMap;

use super::{apps, col, servers, to_i, to_u, Tx};
use crate::model::*;
use crate::validate::check_shard;
use crate::{snowflake, RegistryError, Result};

/// Installation rows plus their roles, two statements for any number of
/// installations. `filter` is `application_id` or `server_id`.
fn load(t: &mut Tx<'_>, filter: &str, id: u64, order: &str) -> Result<Vec<Installation>> {
    let rows = t.query(
        &format!(
            "SELECT application_id, server_id, permissions, managed_role_id, installed_at_ms
             FROM installations WHERE {filter} = $1 ORDER BY {order}"
        ),
        &[&to_i(id)],
    )?;
    let mut roles: HashMap<(u64, u64), Vec<u64>> = HashMap::new();
    for r in t.query(
        &format!(
            "SELECT application_id, server_id, role_id FROM installation_roles
             WHERE {filter} = $1 ORDER BY role_id"
        ),
        &[&to_i(id)],
    )? {
        let key = (to_u(col(&r, 0)?), to_u(col(&r, 1)?));
        roles.entry(key).or_default().push(to_u(col(&r, 2)?));
    }
    rows.iter()
        .map(|r| {
            let (application_id, server_id) = (to_u(col(r, 0)?), to_u(col(r, 1)?));
            Ok(Installation {
                application_id,
                server_id,
                permissions: to_u(col(r, 2)?),
                role_ids: roles
                    .remove(&(application_id, server_id))
                    .unwrap_or_default(),
                managed_role_id: col::<Option<i64>>(r, 3)?.map(to_u),
                installed_at_ms: to_u(col(r, 4)?),
            })
        })
        .collect()
}

pub fn get(t: &mut Tx<'_>, app_id: u64, server_id: u64) -> Result<Option<Installation>> {
    let Some(r) = t.query_opt(
        "SELECT permissions, managed_role_id, installed_at_ms FROM installations
         WHERE application_id = $1 AND server_id = $2",
        &[&to_i(app_id), &to_i(server_id)],
    )?
    else {
        return Ok(None);
    };
    let role_ids = t
        .query(
            "SELECT role_id FROM installation_roles
             WHERE application_id = $1 AND server_id = $2 ORDER BY role_id",
            &[&to_i(app_id), &to_i(server_id)],
        )?
        .iter()
        .map(|r| col::<i64>(r, 0).map(to_u))
        .collect::<Result<Vec<_>>>()?;
    Ok(Some(Installation {
        application_id: app_id,
        server_id,
        permissions: to_u(col(&r, 0)?),
        role_ids,
        managed_role_id: col::<Option<i64>>(&r, 1)?.map(to_u),
        installed_at_ms: to_u(col(&r, 2)?),
    }))
}

fn require(t: &mut Tx<'_>, app_id: u64, server_id: u64) -> Result<Installation> {
    get(t, app_id, server_id)?.ok_or(RegistryError::NotFound {
        what: "installation in server",
        id: server_id,
    })
}

/// Ascending by server id (SQLite orders the same: by its u64-as-i64 key;
/// both only ever hold positive snowflakes).
pub fn of_app(t: &mut Tx<'_>, app_id: u64) -> Result<Vec<Installation>> {
    load(t, "application_id", app_id, "server_id")
}

/// Every installation in one server (the bots a server change affects).
pub fn in_server(t: &mut Tx<'_>, server_id: u64) -> Result<Vec<Installation>> {
    load(t, "server_id", server_id, "application_id")
}

pub fn install(t: &mut Tx<'_>, app_id: u64, server_id: u64, perms: u64) -> Result<Installation> {
    let app = apps::require(t, app_id)?;
    servers::require(t, server_id)?;
    let existing = get(t, app_id, server_id)?;
    // The managed role may have been deleted by hand: recreate it.
    let managed = match existing.as_ref().and_then(|i| i.managed_role_id) {
        Some(role_id) => {
            servers::set_role_permissions(t, role_id, perms)?;
            role_id
        }
        None => servers::create_role(t, server_id, &app.bot_username, perms, true)?.id,
    };
    if existing.is_some() {
        t.execute(
            "UPDATE installations SET permissions = $3, managed_role_id = $4
             WHERE application_id = $1 AND server_id = $2",
            &[
                &to_i(app_id),
                &to_i(server_id),
                &to_i(perms),
                &to_i(managed),
            ],
        )?;
    } else {
        t.execute(
            "INSERT INTO installations
                 (application_id, server_id, permissions, managed_role_id, installed_at_ms)
             VALUES ($1, $2, $3, $4, $5)",
            &[
                &to_i(app_id),
                &to_i(server_id),
                &to_i(perms),
                &to_i(managed),
                &to_i(snowflake::unix_ms_now()),
            ],
        )?;
    }
    t.execute(
        "INSERT INTO installation_roles (application_id, server_id, role_id)
         VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
        &[&to_i(app_id), &to_i(server_id), &to_i(managed)],
    )?;
    require(t, app_id, server_id)
}

pub fn uninstall(t: &mut Tx<'_>, app_id: u64, server_id: u64) -> Result<bool> {
    let Some(inst) = get(t, app_id, server_id)? else {
        return Ok(false);
    };
    if let Some(role_id) = inst.managed_role_id {
        servers::delete_role(t, role_id)?;
    }
    // Member overwrites for the bot user go with it.
    if let Some(app) = apps::get(t, app_id)? {
        t.execute(
            "DELETE FROM overwrites WHERE target_kind = 1 AND target_id = $1
             AND channel_id IN (SELECT id FROM channels WHERE server_id = $2)",
            &[&to_i(app.bot_user_id), &to_i(server_id)],
        )?;
    }
    t.execute(
        "DELETE FROM installations WHERE application_id = $1 AND server_id = $2",
        &[&to_i(app_id), &to_i(server_id)],
    )?;
    Ok(true)
}

pub fn add_role(t: &mut Tx<'_>, app_id: u64, server_id: u64, role_id: u64) -> Result<()> {
    require(t, app_id, server_id)?;
    match servers::get_role(t, role_id)? {
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
    t.execute(
        "INSERT INTO installation_roles (application_id, server_id, role_id)
         VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
        &[&to_i(app_id), &to_i(server_id), &to_i(role_id)],
    )?;
    Ok(())
}

pub fn remove_role(t: &mut Tx<'_>, app_id: u64, server_id: u64, role_id: u64) -> Result<bool> {
    Ok(t.execute(
        "DELETE FROM installation_roles
         WHERE application_id = $1 AND server_id = $2 AND role_id = $3",
        &[&to_i(app_id), &to_i(server_id), &to_i(role_id)],
    )? > 0)
}

pub fn servers_for_shard(
    t: &mut Tx<'_>,
    app_id: u64,
    shard_id: u32,
    shard_count: u32,
) -> Result<Vec<u64>> {
    check_shard(shard_id, shard_count)?;
    // Filtered here, not in SQL: the ids are u64 bit patterns in signed
    // BIGINTs, and the shard math must be unsigned (as in SQLite).
    let mut ids = t
        .query(
            "SELECT server_id FROM installations WHERE application_id = $1 ORDER BY server_id",
            &[&to_i(app_id)],
        )?
        .iter()
        .map(|r| col::<i64>(r, 0).map(to_u))
        .collect::<Result<Vec<_>>>()?;
    ids.retain(|id| (id >> 22) % u64::from(shard_count) == u64::from(shard_id));
    Ok(ids)
}

// The same names as the SQLite seed, so either backend finds the other's demo.

pub fn seed_demo(t: &mut Tx<'_>) -> Result<Option<DemoSeed>> {
    if let Some(app) = apps::by_name(t, DEMO_APP)? {
        let server = t.query_opt(
            "SELECT s.id FROM installations i JOIN servers s ON s.id = i.server_id
             WHERE i.application_id = $1 AND s.name = $2 ORDER BY s.id LIMIT 1",
            &[&to_i(app.id), &DEMO_SERVER],
        )?;
        let Some(server_id) = server.map(|r| col::<i64>(&r, 0).map(to_u)).transpose()? else {
            return Ok(None);
        };
        let general = servers::find_channel(t, server_id, DEMO_CHANNEL, channel_kind::TEXT)?;
        return Ok(general.map(|general_channel_id| DemoSeed {
            app,
            token: None,
            server_id,
            general_channel_id,
        }));
    }
    let (app, token) = apps::create(
        t,
        DEMO_APP,
        intents::MESSAGE_CONTENT | intents::GUILD_MEMBERS,
        DEFAULT_MAX_CONCURRENCY,
    )?;
    let owner = snowflake::global().next_id();
    let server = servers::create(t, DEMO_SERVER, owner)?;
    let category =
        servers::create_channel(t, server.id, DEMO_CATEGORY, channel_kind::CATEGORY, None)?;
    let general = servers::create_channel(
        t,
        server.id,
        DEMO_CHANNEL,
        channel_kind::TEXT,
        Some(category.id),
    )?;
    use permissions::*;
    install(
        t,
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
