//! Developer accounts, their applications and intent requests: the
//! PostgreSQL statements behind [`DeveloperStore`] (the operations are in
//! `crate::developers`).

use tokio_postgres::Row;

use super::apps;
use super::conn::{col, Tx};
use crate::developers::DeveloperStore;
use crate::error::Result;
use crate::model::*;
use crate::rows::{self, to_i, APP_COLS, DEVELOPER_COLS};

fn developer_row(r: &Row) -> Result<Developer> {
    Ok(rows::developer((col(r, 0)?, col(r, 1)?, col(r, 2)?)))
}

impl DeveloperStore for Tx<'_> {
    fn developer(&mut self, id: u64) -> Result<Option<Developer>> {
        self.query_opt(
            &format!("SELECT {DEVELOPER_COLS} FROM developers WHERE id = $1"),
            &[&to_i(id)],
        )?
        .map(|r| developer_row(&r))
        .transpose()
    }

    fn credentials(&mut self, name: &str) -> Result<Option<(Developer, String)>> {
        self.query_opt(
            &format!("SELECT {DEVELOPER_COLS}, password_hash FROM developers WHERE name = $1"),
            &[&name],
        )?
        .map(|r| Ok((developer_row(&r)?, col(&r, 3)?)))
        .transpose()
    }

    fn insert_developer(&mut self, d: &Developer, password_hash: &str) -> Result<()> {
        self.execute(
            "INSERT INTO developers (id, name, password_hash, created_at_ms)
             VALUES ($1, $2, $3, $4)",
            &[&to_i(d.id), &d.name, &password_hash, &to_i(d.created_at_ms)],
        )?;
        Ok(())
    }

    fn set_password_hash(&mut self, name: &str, password_hash: &str) -> Result<bool> {
        Ok(self.execute(
            "UPDATE developers SET password_hash = $2 WHERE name = $1",
            &[&name, &password_hash],
        )? > 0)
    }

    fn delete_developer(&mut self, name: &str) -> Result<bool> {
        self.execute(
            "DELETE FROM developer_apps
             WHERE developer_id IN (SELECT id FROM developers WHERE name = $1)",
            &[&name],
        )?;
        Ok(self.execute("DELETE FROM developers WHERE name = $1", &[&name])? > 0)
    }

    fn developers(&mut self) -> Result<Vec<Developer>> {
        self.query(
            &format!("SELECT {DEVELOPER_COLS} FROM developers ORDER BY id"),
            &[],
        )?
        .iter()
        .map(developer_row)
        .collect()
    }

    fn insert_ownership(&mut self, developer_id: u64, app_id: u64) -> Result<()> {
        self.execute(
            "INSERT INTO developer_apps (developer_id, application_id) VALUES ($1, $2)
             ON CONFLICT DO NOTHING",
            &[&to_i(developer_id), &to_i(app_id)],
        )?;
        Ok(())
    }

    fn delete_ownership(&mut self, developer_id: u64, app_id: u64) -> Result<bool> {
        Ok(self.execute(
            "DELETE FROM developer_apps WHERE developer_id = $1 AND application_id = $2",
            &[&to_i(developer_id), &to_i(app_id)],
        )? > 0)
    }

    fn owns(&mut self, developer_id: u64, app_id: u64) -> Result<bool> {
        Ok(self
            .query_opt(
                "SELECT 1 FROM developer_apps WHERE developer_id = $1 AND application_id = $2",
                &[&to_i(developer_id), &to_i(app_id)],
            )?
            .is_some())
    }

    fn owned_applications(&mut self, developer_id: u64) -> Result<Vec<Application>> {
        self.query(
            &format!(
                "SELECT {APP_COLS} FROM applications WHERE id IN
                 (SELECT application_id FROM developer_apps WHERE developer_id = $1)
                 ORDER BY id"
            ),
            &[&to_i(developer_id)],
        )?
        .iter()
        .map(apps::row)
        .collect()
    }

    fn delete_ownerships_of_app(&mut self, app_id: u64) -> Result<()> {
        self.execute(
            "DELETE FROM developer_apps WHERE application_id = $1",
            &[&to_i(app_id)],
        )?;
        Ok(())
    }

    fn set_requested_intents(&mut self, app_id: u64, bits: u64) -> Result<()> {
        self.execute(
            "UPDATE applications SET requested_intents = $2 WHERE id = $1",
            &[&to_i(app_id), &to_i(bits)],
        )?;
        Ok(())
    }

    fn pending_intent_requests(&mut self) -> Result<Vec<Application>> {
        self.query(
            &format!(
                "SELECT {APP_COLS} FROM applications
                 WHERE (requested_intents & ~approved_intents) <> 0 ORDER BY id"
            ),
            &[],
        )?
        .iter()
        .map(apps::row)
        .collect()
    }
}
