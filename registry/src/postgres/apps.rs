//! Applications, tokens and identify counting: the PostgreSQL statements
//! behind [`AppStore`] (the rules are in `crate::apps`).

use tokio_postgres::Row;

use super::conn::{col, col_u32, Tx};
use crate::apps::{AppStore, IdentifyWindow, WithToken};
use crate::model::*;
use crate::rows::{self, to_i, APP_COLS as COLS};
use crate::{error::RegistryError, error::Result};

pub(super) fn row(r: &Row) -> Result<Application> {
    Ok(rows::application((
        col(r, 0)?,
        col(r, 1)?,
        col(r, 2)?,
        col(r, 3)?,
        col(r, 4)?,
        col_u32(r, 5)?,
        col_u32(r, 6)?,
        col(r, 7)?,
        col(r, 8)?,
    )))
}

impl AppStore for Tx<'_> {
    fn application(&mut self, id: u64) -> Result<Option<Application>> {
        self.query_opt(
            &format!("SELECT {COLS} FROM applications WHERE id = $1"),
            &[&to_i(id)],
        )?
        .map(|r| row(&r))
        .transpose()
    }

    fn application_by_name(&mut self, name: &str) -> Result<Option<Application>> {
        self.query_opt(
            &format!("SELECT {COLS} FROM applications WHERE name = $1 ORDER BY id LIMIT 1"),
            &[&name],
        )?
        .map(|r| row(&r))
        .transpose()
    }

    fn applications(&mut self) -> Result<Vec<Application>> {
        self.query(&format!("SELECT {COLS} FROM applications ORDER BY id"), &[])?
            .iter()
            .map(row)
            .collect()
    }

    fn application_with_token(&mut self, id: u64) -> Result<Option<WithToken>> {
        let Some(r) = self.query_opt(
            &format!("SELECT {COLS}, token_salt, token_hash FROM applications WHERE id = $1"),
            &[&to_i(id)],
        )?
        else {
            return Ok(None);
        };
        Ok(Some((row(&r)?, col(&r, 9)?, col(&r, 10)?)))
    }

    fn insert_application(
        &mut self,
        app: &Application,
        salt: &[u8],
        hash: &[u8],
        created_at_ms: u64,
    ) -> Result<()> {
        self.execute(
            "INSERT INTO applications (id, name, bot_user_id, bot_username, approved_intents,
                 max_concurrency, session_start_total, flags, token_salt, token_hash, created_at_ms)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            &[
                &to_i(app.id),
                &app.name,
                &to_i(app.bot_user_id),
                &app.bot_username,
                &to_i(app.approved_intents),
                &i64::from(app.max_concurrency),
                &i64::from(app.session_start_total),
                &to_i(app.flags),
                &salt,
                &hash,
                &to_i(created_at_ms),
            ],
        )?;
        Ok(())
    }

    fn update_token(&mut self, id: u64, salt: &[u8], hash: &[u8]) -> Result<()> {
        self.execute(
            "UPDATE applications SET token_salt = $2, token_hash = $3 WHERE id = $1",
            &[&to_i(id), &salt, &hash],
        )?;
        Ok(())
    }

    fn update_approved_intents(&mut self, id: u64, bits: u64, flags: u64) -> Result<()> {
        self.execute(
            "UPDATE applications SET approved_intents = $2, flags = $3 WHERE id = $1",
            &[&to_i(id), &to_i(bits), &to_i(flags)],
        )?;
        Ok(())
    }

    fn update_max_concurrency(&mut self, id: u64, n: u32) -> Result<()> {
        self.execute(
            "UPDATE applications SET max_concurrency = $2 WHERE id = $1",
            &[&to_i(id), &i64::from(n)],
        )?;
        Ok(())
    }

    fn update_session_start_total(&mut self, id: u64, total: u32) -> Result<()> {
        self.execute(
            "UPDATE applications SET session_start_total = $2 WHERE id = $1",
            &[&to_i(id), &i64::from(total)],
        )?;
        Ok(())
    }

    fn delete_application_row(&mut self, id: u64) -> Result<bool> {
        Ok(self.execute("DELETE FROM applications WHERE id = $1", &[&to_i(id)])? > 0)
    }

    fn prune_identifies(&mut self, cutoff: i64) -> Result<()> {
        self.execute(
            "DELETE FROM identify_counts WHERE minute_ms <= $1",
            &[&cutoff],
        )?;
        Ok(())
    }

    /// Safe from many nodes at once (no global lock): the minute's row is
    /// upserted atomically, and the application's existence is checked by
    /// the foreign key as well (an application deleted concurrently is
    /// `NotFound`, as in SQLite).
    fn count_identify(&mut self, app_id: u64, minute: i64) -> Result<()> {
        let upsert = self.execute(
            "INSERT INTO identify_counts (application_id, minute_ms, count) VALUES ($1, $2, 1)
             ON CONFLICT (application_id, minute_ms)
             DO UPDATE SET count = identify_counts.count + 1",
            &[&to_i(app_id), &minute],
        );
        match upsert {
            Err(RegistryError::Storage(e))
                if e.downcast_ref::<tokio_postgres::Error>()
                    .and_then(|e| e.code())
                    .is_some_and(|c| {
                        *c == tokio_postgres::error::SqlState::FOREIGN_KEY_VIOLATION
                    }) =>
            {
                Err(RegistryError::NotFound {
                    what: "application",
                    id: app_id,
                })
            }
            r => r.map(|_| ()),
        }
    }

    /// One statement: the application's limits and its identifies in the
    /// window.
    fn identify_window(&mut self, app_id: u64, cutoff: i64) -> Result<Option<IdentifyWindow>> {
        let Some(r) = self.query_opt(
            "SELECT a.session_start_total, a.max_concurrency,
                    COALESCE(SUM(c.count), 0)::BIGINT, MIN(c.minute_ms)
             FROM applications a
             LEFT JOIN identify_counts c ON c.application_id = a.id AND c.minute_ms > $2
             WHERE a.id = $1
             GROUP BY a.id",
            &[&to_i(app_id), &cutoff],
        )?
        else {
            return Ok(None);
        };
        Ok(Some((
            col_u32(&r, 0)?,
            col_u32(&r, 1)?,
            col(&r, 2)?,
            col(&r, 3)?,
        )))
    }
}
