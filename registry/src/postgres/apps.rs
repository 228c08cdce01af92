//! Applications, tokens and identify counting (PostgreSQL).

use tokio_postgres::Row;

use super::{col, col_u32, Tx};
use crate::model::*;
use crate::ops::AppStore;
use crate::rows::{self, to_i, APP_COLS as COLS};
use crate::rules::{
    self, identify_minute, identify_minutes_cutoff, new_application, new_credentials,
};
use crate::validate::{check_concurrency, check_intents};
use crate::{snowflake, token, RegistryError, Result};

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

pub fn get(t: &mut Tx<'_>, id: u64) -> Result<Option<Application>> {
    t.query_opt(
        &format!("SELECT {COLS} FROM applications WHERE id = $1"),
        &[&to_i(id)],
    )?
    .map(|r| row(&r))
    .transpose()
}

pub fn require(t: &mut Tx<'_>, id: u64) -> Result<Application> {
    get(t, id)?.ok_or(RegistryError::NotFound {
        what: "application",
        id,
    })
}

pub fn by_name(t: &mut Tx<'_>, name: &str) -> Result<Option<Application>> {
    t.query_opt(
        &format!("SELECT {COLS} FROM applications WHERE name = $1 ORDER BY id LIMIT 1"),
        &[&name],
    )?
    .map(|r| row(&r))
    .transpose()
}

pub fn list(t: &mut Tx<'_>) -> Result<Vec<Application>> {
    t.query(&format!("SELECT {COLS} FROM applications ORDER BY id"), &[])?
        .iter()
        .map(row)
        .collect()
}

/// `tok` is already stripped of `Bot ` and claims application `id`: one
/// statement reads the row and its salt and hash.
pub fn authenticate(t: &mut Tx<'_>, id: u64, tok: &str) -> Result<Option<Application>> {
    let Some(r) = t.query_opt(
        &format!("SELECT {COLS}, token_salt, token_hash FROM applications WHERE id = $1"),
        &[&to_i(id)],
    )?
    else {
        return Ok(None);
    };
    let salt: &[u8] = col(&r, 9)?;
    let hash: &[u8] = col(&r, 10)?;
    if token::verify(tok, salt, hash) {
        Ok(Some(row(&r)?))
    } else {
        Ok(None)
    }
}

pub fn create(
    t: &mut Tx<'_>,
    name: &str,
    approved: u64,
    max_concurrency: u32,
) -> Result<(Application, String)> {
    let (app, tok, salt, hash) = new_application(name, approved, max_concurrency)?;
    t.execute(
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
            &&salt[..],
            &&hash[..],
            &to_i(snowflake::unix_ms_now()),
        ],
    )?;
    Ok((app, tok))
}

pub fn reset_token(t: &mut Tx<'_>, app_id: u64) -> Result<String> {
    require(t, app_id)?;
    let (tok, salt, hash) = new_credentials(app_id)?;
    t.execute(
        "UPDATE applications SET token_salt = $2, token_hash = $3 WHERE id = $1",
        &[&to_i(app_id), &&salt[..], &&hash[..]],
    )?;
    Ok(tok)
}

pub fn set_approved_intents(t: &mut Tx<'_>, app_id: u64, bits: u64) -> Result<Application> {
    check_intents(bits)?;
    let app = require(t, app_id)?;
    let flags = (app.flags & !app_flags::GATEWAY_MASK) | app_flags::from_approved_intents(bits);
    t.execute(
        "UPDATE applications SET approved_intents = $2, flags = $3 WHERE id = $1",
        &[&to_i(app_id), &to_i(bits), &to_i(flags)],
    )?;
    require(t, app_id)
}

pub fn set_max_concurrency(t: &mut Tx<'_>, app_id: u64, n: u32) -> Result<Application> {
    check_concurrency(n)?;
    require(t, app_id)?;
    t.execute(
        "UPDATE applications SET max_concurrency = $2 WHERE id = $1",
        &[&to_i(app_id), &i64::from(n)],
    )?;
    require(t, app_id)
}

pub fn set_session_start_total(t: &mut Tx<'_>, app_id: u64, total: u32) -> Result<Application> {
    require(t, app_id)?;
    t.execute(
        "UPDATE applications SET session_start_total = $2 WHERE id = $1",
        &[&to_i(app_id), &i64::from(total)],
    )?;
    require(t, app_id)
}

pub fn delete(t: &mut Tx<'_>, app_id: u64) -> Result<bool> {
    Ok(t.execute("DELETE FROM applications WHERE id = $1", &[&to_i(app_id)])? > 0)
}

/// Safe from many nodes at once: the minute's row is upserted atomically,
/// and the application's existence is checked by the foreign key as well
/// (an application deleted concurrently is `NotFound`, as in SQLite).
pub fn record_session_start(t: &mut Tx<'_>, app_id: u64, now_ms: u64) -> Result<SessionStartLimit> {
    require(t, app_id)?;
    // Prune for every application: the table stays at one day of minutes.
    t.execute(
        "DELETE FROM identify_counts WHERE minute_ms <= $1",
        &[&(identify_minutes_cutoff(now_ms))],
    )?;
    let upsert = t.execute(
        "INSERT INTO identify_counts (application_id, minute_ms, count) VALUES ($1, $2, 1)
         ON CONFLICT (application_id, minute_ms)
         DO UPDATE SET count = identify_counts.count + 1",
        &[&to_i(app_id), &identify_minute(now_ms)],
    );
    match upsert {
        Err(RegistryError::Storage(e))
            if e.downcast_ref::<tokio_postgres::Error>()
                .and_then(|e| e.code())
                .is_some_and(|c| *c == tokio_postgres::error::SqlState::FOREIGN_KEY_VIOLATION) =>
        {
            return Err(RegistryError::NotFound {
                what: "application",
                id: app_id,
            })
        }
        r => r?,
    };
    session_start_limit(t, app_id, now_ms)
}

/// One statement: the application's limits and its identifies in the window.
pub fn session_start_limit(t: &mut Tx<'_>, app_id: u64, now_ms: u64) -> Result<SessionStartLimit> {
    // A minute counts while any part of it is inside the window.
    let r = t
        .query_opt(
            "SELECT a.session_start_total, a.max_concurrency,
                    COALESCE(SUM(c.count), 0)::BIGINT, MIN(c.minute_ms)
             FROM applications a
             LEFT JOIN identify_counts c ON c.application_id = a.id AND c.minute_ms > $2
             WHERE a.id = $1
             GROUP BY a.id",
            &[&to_i(app_id), &(identify_minutes_cutoff(now_ms))],
        )?
        .ok_or(RegistryError::NotFound {
            what: "application",
            id: app_id,
        })?;
    let total = col_u32(&r, 0)?;
    let max_concurrency = col_u32(&r, 1)?;
    let used: i64 = col(&r, 2)?;
    let oldest: Option<i64> = col(&r, 3)?;
    Ok(rules::session_start_limit(
        total,
        max_concurrency,
        used,
        oldest,
        now_ms,
    ))
}

impl AppStore for Tx<'_> {
    fn application(&mut self, id: u64) -> Result<Option<Application>> {
        get(self, id)
    }

    fn application_by_name(&mut self, name: &str) -> Result<Option<Application>> {
        by_name(self, name)
    }

    fn create_application(
        &mut self,
        name: &str,
        approved: u64,
        max_concurrency: u32,
    ) -> Result<(Application, String)> {
        create(self, name, approved, max_concurrency)
    }
}
