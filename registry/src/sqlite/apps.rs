//! Applications, tokens and the identify log: the SQLite statements behind
//! [`AppStore`] (the rules are in `crate::apps`).

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::cached::Cached;
use crate::apps::{AppStore, IdentifyWindow, WithToken};
use crate::error::Result;
use crate::model::*;
use crate::rows::{self, to_i, APP_COLS as COLS};

pub(super) fn row(r: &Row<'_>) -> rusqlite::Result<Application> {
    rows::AppRow::try_from(r).map(rows::application)
}

impl AppStore for &Connection {
    fn application(&mut self, id: u64) -> Result<Option<Application>> {
        Ok(self
            .query_row_cached(
                &format!("SELECT {COLS} FROM applications WHERE id = ?1"),
                [to_i(id)],
                row,
            )
            .optional()?)
    }

    fn application_by_name(&mut self, name: &str) -> Result<Option<Application>> {
        Ok(self
            .query_row_cached(
                &format!("SELECT {COLS} FROM applications WHERE name = ?1 ORDER BY id LIMIT 1"),
                [name],
                row,
            )
            .optional()?)
    }

    fn applications(&mut self) -> Result<Vec<Application>> {
        let mut st =
            self.prepare_cached(&format!("SELECT {COLS} FROM applications ORDER BY id"))?;
        let v = st.query_map([], row)?.collect::<rusqlite::Result<_>>()?;
        Ok(v)
    }

    fn application_with_token(&mut self, id: u64) -> Result<Option<WithToken>> {
        Ok(self
            .query_row_cached(
                &format!("SELECT {COLS}, token_salt, token_hash FROM applications WHERE id = ?1"),
                [to_i(id)],
                |r| Ok((row(r)?, r.get(9)?, r.get(10)?)),
            )
            .optional()?)
    }

    fn insert_application(
        &mut self,
        app: &Application,
        salt: &[u8],
        hash: &[u8],
        created_at_ms: u64,
    ) -> Result<()> {
        self.execute_cached(
            "INSERT INTO applications (id, name, bot_user_id, bot_username, approved_intents,
                 max_concurrency, session_start_total, flags, token_salt, token_hash, created_at_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                to_i(app.id),
                app.name,
                to_i(app.bot_user_id),
                app.bot_username,
                to_i(app.approved_intents),
                app.max_concurrency,
                app.session_start_total,
                to_i(app.flags),
                salt,
                hash,
                to_i(created_at_ms),
            ],
        )?;
        Ok(())
    }

    fn update_token(&mut self, id: u64, salt: &[u8], hash: &[u8]) -> Result<()> {
        self.execute_cached(
            "UPDATE applications SET token_salt = ?2, token_hash = ?3 WHERE id = ?1",
            params![to_i(id), salt, hash],
        )?;
        Ok(())
    }

    fn update_approved_intents(&mut self, id: u64, bits: u64, flags: u64) -> Result<()> {
        self.execute_cached(
            "UPDATE applications SET approved_intents = ?2, flags = ?3 WHERE id = ?1",
            params![to_i(id), to_i(bits), to_i(flags)],
        )?;
        Ok(())
    }

    fn update_max_concurrency(&mut self, id: u64, n: u32) -> Result<()> {
        self.execute_cached(
            "UPDATE applications SET max_concurrency = ?2 WHERE id = ?1",
            params![to_i(id), n],
        )?;
        Ok(())
    }

    fn update_session_start_total(&mut self, id: u64, total: u32) -> Result<()> {
        self.execute_cached(
            "UPDATE applications SET session_start_total = ?2 WHERE id = ?1",
            params![to_i(id), total],
        )?;
        Ok(())
    }

    fn delete_application_row(&mut self, id: u64) -> Result<bool> {
        Ok(self.execute_cached("DELETE FROM applications WHERE id = ?1", [to_i(id)])? > 0)
    }

    fn prune_identifies(&mut self, cutoff: i64) -> Result<()> {
        self.execute_cached(
            "DELETE FROM identify_counts WHERE minute_ms <= ?1",
            [cutoff],
        )?;
        Ok(())
    }

    fn count_identify(&mut self, app_id: u64, minute: i64) -> Result<()> {
        // One writer at a time (SQLite's write lock): the rule checked the
        // application in this transaction.
        self.execute_cached(
            "INSERT INTO identify_counts (application_id, minute_ms, count) VALUES (?1, ?2, 1)
             ON CONFLICT (application_id, minute_ms) DO UPDATE SET count = count + 1",
            params![to_i(app_id), minute],
        )?;
        Ok(())
    }

    fn identify_window(&mut self, app_id: u64, cutoff: i64) -> Result<Option<IdentifyWindow>> {
        let Some(app) = self.application(app_id)? else {
            return Ok(None);
        };
        let (used, oldest): (i64, Option<i64>) = self.query_row_cached(
            "SELECT COALESCE(SUM(count), 0), MIN(minute_ms) FROM identify_counts
             WHERE application_id = ?1 AND minute_ms > ?2",
            params![to_i(app_id), cutoff],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        Ok(Some((
            app.session_start_total,
            app.max_concurrency,
            used,
            oldest,
        )))
    }
}
