//! Applications, tokens and the identify log.

use rusqlite::{params, Connection, OptionalExtension, Row};

use super::Cached;
use crate::model::*;
use crate::ops::AppStore;
use crate::rows::{self, to_i, APP_COLS as COLS};
use crate::rules::{
    self, identify_minute, identify_minutes_cutoff, new_application, new_credentials,
};
use crate::validate::{check_concurrency, check_intents};
use crate::{snowflake, token, RegistryError, Result};

pub(super) fn row(r: &Row<'_>) -> rusqlite::Result<Application> {
    rows::AppRow::try_from(r).map(rows::application)
}

pub fn get(c: &Connection, id: u64) -> Result<Option<Application>> {
    Ok(c.query_row_cached(
        &format!("SELECT {COLS} FROM applications WHERE id = ?1"),
        [to_i(id)],
        row,
    )
    .optional()?)
}

pub fn require(c: &Connection, id: u64) -> Result<Application> {
    get(c, id)?.ok_or(RegistryError::NotFound {
        what: "application",
        id,
    })
}

pub fn by_name(c: &Connection, name: &str) -> Result<Option<Application>> {
    Ok(c.query_row_cached(
        &format!("SELECT {COLS} FROM applications WHERE name = ?1 ORDER BY id LIMIT 1"),
        [name],
        row,
    )
    .optional()?)
}

pub fn list(c: &Connection) -> Result<Vec<Application>> {
    let mut st = c.prepare_cached(&format!("SELECT {COLS} FROM applications ORDER BY id"))?;
    let v = st.query_map([], row)?.collect::<rusqlite::Result<_>>()?;
    Ok(v)
}

pub fn authenticate(c: &Connection, raw: &str) -> Result<Option<Application>> {
    let tok = token::strip_prefix(raw);
    let Some(id) = token::parse_app_id(tok) else {
        return Ok(None);
    };
    let found: Option<(Vec<u8>, Vec<u8>)> = c
        .query_row_cached(
            "SELECT token_salt, token_hash FROM applications WHERE id = ?1",
            [to_i(id)],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    match found {
        Some((salt, hash)) if token::verify(tok, &salt, &hash) => get(c, id),
        _ => Ok(None),
    }
}

pub fn create(
    c: &Connection,
    name: &str,
    approved: u64,
    max_concurrency: u32,
) -> Result<(Application, String)> {
    let (app, tok, salt, hash) = new_application(name, approved, max_concurrency)?;
    c.execute_cached(
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
            &salt[..],
            &hash[..],
            to_i(snowflake::unix_ms_now()),
        ],
    )?;
    Ok((app, tok))
}

pub fn reset_token(c: &Connection, app_id: u64) -> Result<String> {
    require(c, app_id)?;
    let (tok, salt, hash) = new_credentials(app_id)?;
    c.execute_cached(
        "UPDATE applications SET token_salt = ?2, token_hash = ?3 WHERE id = ?1",
        params![to_i(app_id), &salt[..], &hash[..]],
    )?;
    Ok(tok)
}

pub fn set_approved_intents(c: &Connection, app_id: u64, bits: u64) -> Result<Application> {
    check_intents(bits)?;
    let app = require(c, app_id)?;
    let flags = (app.flags & !app_flags::GATEWAY_MASK) | app_flags::from_approved_intents(bits);
    c.execute_cached(
        "UPDATE applications SET approved_intents = ?2, flags = ?3 WHERE id = ?1",
        params![to_i(app_id), to_i(bits), to_i(flags)],
    )?;
    require(c, app_id)
}

pub fn set_max_concurrency(c: &Connection, app_id: u64, n: u32) -> Result<Application> {
    check_concurrency(n)?;
    require(c, app_id)?;
    c.execute_cached(
        "UPDATE applications SET max_concurrency = ?2 WHERE id = ?1",
        params![to_i(app_id), n],
    )?;
    require(c, app_id)
}

pub fn set_session_start_total(c: &Connection, app_id: u64, total: u32) -> Result<Application> {
    require(c, app_id)?;
    c.execute_cached(
        "UPDATE applications SET session_start_total = ?2 WHERE id = ?1",
        params![to_i(app_id), total],
    )?;
    require(c, app_id)
}

pub fn delete(c: &Connection, app_id: u64) -> Result<bool> {
    Ok(c.execute_cached("DELETE FROM applications WHERE id = ?1", [to_i(app_id)])? > 0)
}

pub fn record_session_start(c: &Connection, app_id: u64, now_ms: u64) -> Result<SessionStartLimit> {
    require(c, app_id)?;
    // Prune for every application: the table stays at one day of minutes.
    c.execute_cached(
        "DELETE FROM identify_counts WHERE minute_ms <= ?1",
        [identify_minutes_cutoff(now_ms)],
    )?;
    c.execute_cached(
        "INSERT INTO identify_counts (application_id, minute_ms, count) VALUES (?1, ?2, 1)
         ON CONFLICT (application_id, minute_ms) DO UPDATE SET count = count + 1",
        params![to_i(app_id), identify_minute(now_ms)],
    )?;
    session_start_limit(c, app_id, now_ms)
}

pub fn session_start_limit(c: &Connection, app_id: u64, now_ms: u64) -> Result<SessionStartLimit> {
    let app = require(c, app_id)?;
    // A minute counts while any part of it is inside the window.
    let (used, oldest): (i64, Option<i64>) = c.query_row_cached(
        "SELECT COALESCE(SUM(count), 0), MIN(minute_ms) FROM identify_counts
         WHERE application_id = ?1 AND minute_ms > ?2",
        params![to_i(app_id), identify_minutes_cutoff(now_ms)],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    Ok(rules::session_start_limit(
        app.session_start_total,
        app.max_concurrency,
        used,
        oldest,
        now_ms,
    ))
}

impl AppStore for &Connection {
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
