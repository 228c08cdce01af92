//! Developer accounts, their applications and intent requests: the SQLite
//! statements behind [`DeveloperStore`] (the operations are in
//! `crate::developers`).

use rusqlite::{params, Connection, OptionalExtension};

use super::apps;
use super::cached::Cached;
use crate::developers::DeveloperStore;
use crate::error::Result;
use crate::model::*;
use crate::rows::{self, to_i, APP_COLS, DEVELOPER_COLS};

fn developer_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Developer> {
    Ok(rows::developer((r.get(0)?, r.get(1)?, r.get(2)?)))
}

fn applications(c: &Connection, sql: &str, p: impl rusqlite::Params) -> Result<Vec<Application>> {
    let mut st = c.prepare_cached(sql)?;
    let v = st
        .query_map(p, apps::row)?
        .collect::<rusqlite::Result<_>>()?;
    Ok(v)
}

impl DeveloperStore for &Connection {
    fn developer(&mut self, id: u64) -> Result<Option<Developer>> {
        Ok(self
            .query_row_cached(
                &format!("SELECT {DEVELOPER_COLS} FROM developers WHERE id = ?1"),
                [to_i(id)],
                developer_row,
            )
            .optional()?)
    }

    fn credentials(&mut self, name: &str) -> Result<Option<(Developer, String)>> {
        Ok(self
            .query_row_cached(
                &format!("SELECT {DEVELOPER_COLS}, password_hash FROM developers WHERE name = ?1"),
                [name],
                |r| Ok((developer_row(r)?, r.get(3)?)),
            )
            .optional()?)
    }

    fn insert_developer(&mut self, d: &Developer, password_hash: &str) -> Result<()> {
        self.execute_cached(
            "INSERT INTO developers (id, name, password_hash, created_at_ms)
             VALUES (?1, ?2, ?3, ?4)",
            params![to_i(d.id), d.name, password_hash, to_i(d.created_at_ms)],
        )?;
        Ok(())
    }

    fn set_password_hash(&mut self, name: &str, password_hash: &str) -> Result<bool> {
        Ok(self.execute_cached(
            "UPDATE developers SET password_hash = ?2 WHERE name = ?1",
            params![name, password_hash],
        )? > 0)
    }

    fn delete_developer(&mut self, name: &str) -> Result<bool> {
        self.execute_cached(
            "DELETE FROM developer_apps
             WHERE developer_id IN (SELECT id FROM developers WHERE name = ?1)",
            [name],
        )?;
        Ok(self.execute_cached("DELETE FROM developers WHERE name = ?1", [name])? > 0)
    }

    fn developers(&mut self) -> Result<Vec<Developer>> {
        let mut st = self.prepare_cached(&format!(
            "SELECT {DEVELOPER_COLS} FROM developers ORDER BY id"
        ))?;
        let v = st
            .query_map([], developer_row)?
            .collect::<rusqlite::Result<_>>()?;
        Ok(v)
    }

    fn insert_ownership(&mut self, developer_id: u64, app_id: u64) -> Result<()> {
        self.execute_cached(
            "INSERT INTO developer_apps (developer_id, application_id) VALUES (?1, ?2)
             ON CONFLICT DO NOTHING",
            params![to_i(developer_id), to_i(app_id)],
        )?;
        Ok(())
    }

    fn delete_ownership(&mut self, developer_id: u64, app_id: u64) -> Result<bool> {
        Ok(self.execute_cached(
            "DELETE FROM developer_apps WHERE developer_id = ?1 AND application_id = ?2",
            params![to_i(developer_id), to_i(app_id)],
        )? > 0)
    }

    fn owns(&mut self, developer_id: u64, app_id: u64) -> Result<bool> {
        Ok(self
            .query_row_cached(
                "SELECT 1 FROM developer_apps WHERE developer_id = ?1 AND application_id = ?2",
                params![to_i(developer_id), to_i(app_id)],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    }

    fn owned_applications(&mut self, developer_id: u64) -> Result<Vec<Application>> {
        applications(
            self,
            &format!(
                "SELECT {APP_COLS} FROM applications WHERE id IN
                 (SELECT application_id FROM developer_apps WHERE developer_id = ?1)
                 ORDER BY id"
            ),
            [to_i(developer_id)],
        )
    }

    fn delete_ownerships_of_app(&mut self, app_id: u64) -> Result<()> {
        self.execute_cached(
            "DELETE FROM developer_apps WHERE application_id = ?1",
            [to_i(app_id)],
        )?;
        Ok(())
    }

    fn set_requested_intents(&mut self, app_id: u64, bits: u64) -> Result<()> {
        self.execute_cached(
            "UPDATE applications SET requested_intents = ?2 WHERE id = ?1",
            params![to_i(app_id), to_i(bits)],
        )?;
        Ok(())
    }

    fn pending_intent_requests(&mut self) -> Result<Vec<Application>> {
        applications(
            self,
            &format!(
                "SELECT {APP_COLS} FROM applications
                 WHERE (requested_intents & ~approved_intents) <> 0 ORDER BY id"
            ),
            [],
        )
    }
}
