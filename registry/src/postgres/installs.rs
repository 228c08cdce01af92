//! Installations (an application's grant in a server): the PostgreSQL
//! statements behind [`InstallStore`] (the operations are in `crate::ops`).

use std::collections::HashMap;

use tokio_postgres::types::Type;

use super::conn::{col, Tx};
use crate::error::Result;
use crate::model::*;
use crate::ops::InstallStore;
use crate::rows::{self, to_i, to_u};

/// Installation rows plus their roles, two statements for any number of
/// installations. `filter` is `application_id` or `server_id`.
fn load(t: &mut Tx<'_>, filter: &str, id: u64, order: &str) -> Result<Vec<Installation>> {
    let found = t.query(
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
    found
        .iter()
        .map(|r| {
            let (app, server) = (to_u(col(r, 0)?), to_u(col(r, 1)?));
            let row = (col(r, 2)?, col(r, 3)?, col(r, 4)?);
            let role_ids = roles.remove(&(app, server)).unwrap_or_default();
            Ok(rows::installation(app, server, row, role_ids))
        })
        .collect()
}

fn get(t: &mut Tx<'_>, app_id: u64, server_id: u64) -> Result<Option<Installation>> {
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
    let row = (col(&r, 0)?, col(&r, 1)?, col(&r, 2)?);
    Ok(Some(rows::installation(app_id, server_id, row, role_ids)))
}

impl InstallStore for Tx<'_> {
    fn installation(&mut self, app_id: u64, server_id: u64) -> Result<Option<Installation>> {
        get(self, app_id, server_id)
    }

    /// Ascending by server id (SQLite orders the same: by its u64-as-i64
    /// key; both only ever hold positive snowflakes).
    fn installations_of_app(&mut self, app_id: u64) -> Result<Vec<Installation>> {
        load(self, "application_id", app_id, "server_id")
    }

    fn installations_in_server(&mut self, server_id: u64) -> Result<Vec<Installation>> {
        load(self, "server_id", server_id, "application_id")
    }

    /// One statement, sent without a prepare step: exactly one round trip
    /// for the whole batch, on any connection. The pairs travel as two
    /// BIGINT arrays, are unnested with their ordinal, and each is answered
    /// with an EXISTS probe of the installations primary key.
    fn installed(&mut self, pairs: &[(u64, u64)]) -> Result<Vec<bool>> {
        let apps: Vec<i64> = pairs.iter().map(|&(a, _)| to_i(a)).collect();
        let servers: Vec<i64> = pairs.iter().map(|&(_, s)| to_i(s)).collect();
        let rows = self.query_typed(
            "SELECT EXISTS (SELECT 1 FROM installations i
                            WHERE i.application_id = p.a AND i.server_id = p.s)
             FROM unnest($1::BIGINT[], $2::BIGINT[]) WITH ORDINALITY AS p(a, s, n)
             ORDER BY p.n",
            &[(&apps, Type::INT8_ARRAY), (&servers, Type::INT8_ARRAY)],
        )?;
        rows.iter().map(|r| col::<bool>(r, 0)).collect()
    }

    fn insert_installation(
        &mut self,
        app_id: u64,
        server_id: u64,
        perms: u64,
        managed: u64,
        at_ms: u64,
    ) -> Result<()> {
        self.execute(
            "INSERT INTO installations
                 (application_id, server_id, permissions, managed_role_id, installed_at_ms)
             VALUES ($1, $2, $3, $4, $5)",
            &[
                &to_i(app_id),
                &to_i(server_id),
                &to_i(perms),
                &to_i(managed),
                &to_i(at_ms),
            ],
        )?;
        Ok(())
    }

    fn update_installation(
        &mut self,
        app_id: u64,
        server_id: u64,
        perms: u64,
        managed: u64,
    ) -> Result<()> {
        self.execute(
            "UPDATE installations SET permissions = $3, managed_role_id = $4
             WHERE application_id = $1 AND server_id = $2",
            &[
                &to_i(app_id),
                &to_i(server_id),
                &to_i(perms),
                &to_i(managed),
            ],
        )?;
        Ok(())
    }

    fn delete_installation(&mut self, app_id: u64, server_id: u64) -> Result<()> {
        self.execute(
            "DELETE FROM installations WHERE application_id = $1 AND server_id = $2",
            &[&to_i(app_id), &to_i(server_id)],
        )?;
        Ok(())
    }

    fn add_installation_role(&mut self, app_id: u64, server_id: u64, role_id: u64) -> Result<()> {
        self.execute(
            "INSERT INTO installation_roles (application_id, server_id, role_id)
             VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            &[&to_i(app_id), &to_i(server_id), &to_i(role_id)],
        )?;
        Ok(())
    }

    fn remove_installation_role(
        &mut self,
        app_id: u64,
        server_id: u64,
        role_id: u64,
    ) -> Result<bool> {
        Ok(self.execute(
            "DELETE FROM installation_roles
             WHERE application_id = $1 AND server_id = $2 AND role_id = $3",
            &[&to_i(app_id), &to_i(server_id), &to_i(role_id)],
        )? > 0)
    }

    fn delete_member_overwrites(&mut self, server_id: u64, user_id: u64) -> Result<()> {
        self.execute(
            "DELETE FROM overwrites WHERE target_kind = 1 AND target_id = $1
             AND channel_id IN (SELECT id FROM channels WHERE server_id = $2)",
            &[&to_i(user_id), &to_i(server_id)],
        )?;
        Ok(())
    }

    fn installed_server_ids(&mut self, app_id: u64) -> Result<Vec<u64>> {
        self.query(
            "SELECT server_id FROM installations WHERE application_id = $1 ORDER BY server_id",
            &[&to_i(app_id)],
        )?
        .iter()
        .map(|r| col::<i64>(r, 0).map(to_u))
        .collect()
    }

    fn installed_server_named(&mut self, app_id: u64, name: &str) -> Result<Option<u64>> {
        self.query_opt(
            "SELECT s.id FROM installations i JOIN servers s ON s.id = i.server_id
             WHERE i.application_id = $1 AND s.name = $2 ORDER BY s.id LIMIT 1",
            &[&to_i(app_id), &name],
        )?
        .map(|r| col::<i64>(&r, 0).map(to_u))
        .transpose()
    }
}
