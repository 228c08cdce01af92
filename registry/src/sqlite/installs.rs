//! Installations (an application's grant in a server): the SQLite statements
//! behind [`InstallStore`] (the operations are in `crate::ops`).

use rusqlite::{params, Connection, OptionalExtension};

use super::cached::Cached;
use crate::error::Result;
use crate::model::*;
use crate::ops::InstallStore;
use crate::rows::{self, to_i, to_u};

fn role_ids(c: &Connection, app_id: u64, server_id: u64) -> Result<Vec<u64>> {
    let mut st = c.prepare_cached(
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

fn get(c: &Connection, app_id: u64, server_id: u64) -> Result<Option<Installation>> {
    let row = c
        .query_row_cached(
            "SELECT permissions, managed_role_id, installed_at_ms FROM installations
             WHERE application_id = ?1 AND server_id = ?2",
            params![to_i(app_id), to_i(server_id)],
            |r| r.try_into(),
        )
        .optional()?;
    let Some(row) = row else {
        return Ok(None);
    };
    let role_ids = role_ids(c, app_id, server_id)?;
    Ok(Some(rows::installation(app_id, server_id, row, role_ids)))
}

fn server_ids(c: &Connection, app_id: u64) -> Result<Vec<u64>> {
    let mut st = c.prepare_cached(
        "SELECT server_id FROM installations WHERE application_id = ?1 ORDER BY server_id",
    )?;
    let v = st
        .query_map([to_i(app_id)], |r| r.get::<_, i64>(0).map(to_u))?
        .collect::<rusqlite::Result<_>>()?;
    Ok(v)
}

impl InstallStore for &Connection {
    fn installation(&mut self, app_id: u64, server_id: u64) -> Result<Option<Installation>> {
        get(self, app_id, server_id)
    }

    fn installations_of_app(&mut self, app_id: u64) -> Result<Vec<Installation>> {
        let ids = server_ids(self, app_id)?;
        let mut out = Vec::with_capacity(ids.len());
        for sid in ids {
            out.extend(get(self, app_id, sid)?);
        }
        Ok(out)
    }

    fn installations_in_server(&mut self, server_id: u64) -> Result<Vec<Installation>> {
        let mut st = self.prepare_cached(
            "SELECT application_id FROM installations WHERE server_id = ?1 ORDER BY application_id",
        )?;
        let apps: Vec<u64> = st
            .query_map([to_i(server_id)], |r| r.get::<_, i64>(0).map(to_u))?
            .collect::<rusqlite::Result<_>>()?;
        let mut out = Vec::with_capacity(apps.len());
        for app in apps {
            out.extend(get(self, app, server_id)?);
        }
        Ok(out)
    }

    fn installed(&mut self, pairs: &[(u64, u64)]) -> Result<Vec<bool>> {
        let mut st = self.prepare_cached(
            "SELECT 1 FROM installations WHERE application_id = ?1 AND server_id = ?2",
        )?;
        pairs
            .iter()
            .map(|&(a, s)| Ok(st.exists(params![to_i(a), to_i(s)])?))
            .collect()
    }

    fn insert_installation(
        &mut self,
        app_id: u64,
        server_id: u64,
        perms: u64,
        managed: u64,
        at_ms: u64,
    ) -> Result<()> {
        self.execute_cached(
            "INSERT INTO installations
                 (application_id, server_id, permissions, managed_role_id, installed_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                to_i(app_id),
                to_i(server_id),
                to_i(perms),
                to_i(managed),
                to_i(at_ms)
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
        self.execute_cached(
            "UPDATE installations SET permissions = ?3, managed_role_id = ?4
             WHERE application_id = ?1 AND server_id = ?2",
            params![to_i(app_id), to_i(server_id), to_i(perms), to_i(managed)],
        )?;
        Ok(())
    }

    fn delete_installation(&mut self, app_id: u64, server_id: u64) -> Result<()> {
        self.execute_cached(
            "DELETE FROM installations WHERE application_id = ?1 AND server_id = ?2",
            params![to_i(app_id), to_i(server_id)],
        )?;
        Ok(())
    }

    fn add_installation_role(&mut self, app_id: u64, server_id: u64, role_id: u64) -> Result<()> {
        self.execute_cached(
            "INSERT OR IGNORE INTO installation_roles (application_id, server_id, role_id)
             VALUES (?1, ?2, ?3)",
            params![to_i(app_id), to_i(server_id), to_i(role_id)],
        )?;
        Ok(())
    }

    fn remove_installation_role(
        &mut self,
        app_id: u64,
        server_id: u64,
        role_id: u64,
    ) -> Result<bool> {
        Ok(self.execute_cached(
            "DELETE FROM installation_roles
             WHERE application_id = ?1 AND server_id = ?2 AND role_id = ?3",
            params![to_i(app_id), to_i(server_id), to_i(role_id)],
        )? > 0)
    }

    fn delete_member_overwrites(&mut self, server_id: u64, user_id: u64) -> Result<()> {
        self.execute_cached(
            "DELETE FROM overwrites WHERE target_kind = 1 AND target_id = ?1
             AND channel_id IN (SELECT id FROM channels WHERE server_id = ?2)",
            params![to_i(user_id), to_i(server_id)],
        )?;
        Ok(())
    }

    fn installed_server_ids(&mut self, app_id: u64) -> Result<Vec<u64>> {
        server_ids(self, app_id)
    }

    fn installed_server_named(&mut self, app_id: u64, name: &str) -> Result<Option<u64>> {
        Ok(self
            .query_row_cached(
                "SELECT s.id FROM installations i JOIN servers s ON s.id = i.server_id
                 WHERE i.application_id = ?1 AND s.name = ?2 ORDER BY s.id LIMIT 1",
                params![to_i(app_id), name],
                |r| r.get::<_, i64>(0),
            )
            .optional()?
            .map(to_u))
    }
}
