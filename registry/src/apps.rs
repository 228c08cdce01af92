//! Applications: tokens, approved intents, identify limits, written once
//! for both backends (as `crate::ops` is for servers): a backend implements
//! [`AppStore`], one method per statement; the checks, the credentials, the
//! outbox rows a change writes and the order of the steps are here.
//!
//! Rules:
//! - a token is `<base64 app id>.<random>.<random>`; only a salted hash is
//!   stored, and a malformed token is refused before any statement;
//! - a token reset and any change of the approved intents are written to
//!   the revocation outbox in the same transaction (`crate::outbox`), so a
//!   node ends or narrows the sessions they concern;
//! - identifies are counted per minute over a rolling window
//!   (`crate::rules::session_start_limit`).

use crate::model::*;
use crate::outbox::{emit, OutboxStore};
use crate::rules::{
    identify_minute, identify_minutes_cutoff, new_application, new_credentials,
    session_start_limit as limit_of,
};
use crate::validate::{check_concurrency, check_intents};
use crate::{error::RegistryError, error::Result, revocation::Revocation, snowflake, token};

/// An application with its token's salt and hash, as stored.
pub(crate) type WithToken = (Application, Vec<u8>, Vec<u8>);

/// What the identify limit is computed from: (session start total, max
/// concurrency, identifies in the window, the oldest minute of them).
pub(crate) type IdentifyWindow = (u32, u32, i64, Option<i64>);

/// The application statements.
pub(crate) trait AppStore {
    fn application(&mut self, id: u64) -> Result<Option<Application>>;
    /// The oldest application with this name.
    fn application_by_name(&mut self, name: &str) -> Result<Option<Application>>;
    /// Every application, by id.
    fn applications(&mut self) -> Result<Vec<Application>>;
    /// The application with its token's salt and hash (one statement).
    fn application_with_token(&mut self, id: u64) -> Result<Option<WithToken>>;
    fn insert_application(
        &mut self,
        app: &Application,
        salt: &[u8],
        hash: &[u8],
        created_at_ms: u64,
    ) -> Result<()>;
    fn update_token(&mut self, id: u64, salt: &[u8], hash: &[u8]) -> Result<()>;
    fn update_approved_intents(&mut self, id: u64, bits: u64, flags: u64) -> Result<()>;
    fn update_max_concurrency(&mut self, id: u64, n: u32) -> Result<()>;
    fn update_session_start_total(&mut self, id: u64, total: u32) -> Result<()>;
    /// The application row (what references it cascades); false if none.
    fn delete_application_row(&mut self, id: u64) -> Result<bool>;
    /// Drops every application's identify minutes at or before `cutoff`.
    fn prune_identifies(&mut self, cutoff: i64) -> Result<()>;
    /// Counts one identify in `minute` (an upsert: safe from many nodes).
    /// [`RegistryError::NotFound`] if the application is gone.
    fn count_identify(&mut self, app_id: u64, minute: i64) -> Result<()>;
    /// (session start total, max concurrency, identifies in the minutes
    /// after `cutoff`, the oldest of those minutes), or None if there is no
    /// such application.
    fn identify_window(&mut self, app_id: u64, cutoff: i64) -> Result<Option<IdentifyWindow>>;
}

pub(crate) fn require_application<S: AppStore>(s: &mut S, id: u64) -> Result<Application> {
    s.application(id)?.ok_or(RegistryError::NotFound {
        what: "application",
        id,
    })
}

/// `tok` is stripped of `Bot ` and names application `id`.
pub(crate) fn authenticate<S: AppStore>(
    s: &mut S,
    id: u64,
    tok: &str,
) -> Result<Option<Application>> {
    Ok(match s.application_with_token(id)? {
        Some((app, salt, hash)) if token::verify(tok, &salt, &hash) => Some(app),
        _ => None,
    })
}

pub(crate) fn create_application<S: AppStore>(
    s: &mut S,
    name: &str,
    approved: u64,
    max_concurrency: u32,
) -> Result<(Application, String)> {
    let (app, tok, salt, hash) = new_application(name, approved, max_concurrency)?;
    s.insert_application(&app, &salt, &hash, snowflake::unix_ms_now())?;
    Ok((app, tok))
}

pub(crate) fn reset_token<S: AppStore + OutboxStore>(s: &mut S, app_id: u64) -> Result<String> {
    require_application(s, app_id)?;
    let (tok, salt, hash) = new_credentials(app_id)?;
    s.update_token(app_id, &salt, &hash)?;
    emit(
        s,
        Revocation::TokenReset {
            application_id: app_id,
        },
    )?;
    Ok(tok)
}

pub(crate) fn set_approved_intents<S: AppStore + OutboxStore>(
    s: &mut S,
    app_id: u64,
    bits: u64,
) -> Result<Application> {
    check_intents(bits)?;
    let app = require_application(s, app_id)?;
    let flags = (app.flags & !app_flags::GATEWAY_MASK) | app_flags::from_approved_intents(bits);
    s.update_approved_intents(app_id, bits, flags)?;
    let app = require_application(s, app_id)?;
    emit(
        s,
        Revocation::IntentsChanged {
            application_id: app_id,
        },
    )?;
    Ok(app)
}

pub(crate) fn set_max_concurrency<S: AppStore>(
    s: &mut S,
    app_id: u64,
    n: u32,
) -> Result<Application> {
    check_concurrency(n)?;
    require_application(s, app_id)?;
    s.update_max_concurrency(app_id, n)?;
    require_application(s, app_id)
}

pub(crate) fn set_session_start_total<S: AppStore>(
    s: &mut S,
    app_id: u64,
    total: u32,
) -> Result<Application> {
    require_application(s, app_id)?;
    s.update_session_start_total(app_id, total)?;
    require_application(s, app_id)
}

pub(crate) fn record_session_start<S: AppStore>(
    s: &mut S,
    app_id: u64,
    now_ms: u64,
) -> Result<SessionStartLimit> {
    require_application(s, app_id)?;
    // Pruned for every application: the table stays at one day of minutes.
    s.prune_identifies(identify_minutes_cutoff(now_ms))?;
    s.count_identify(app_id, identify_minute(now_ms))?;
    session_start_limit(s, app_id, now_ms)
}

pub(crate) fn session_start_limit<S: AppStore>(
    s: &mut S,
    app_id: u64,
    now_ms: u64,
) -> Result<SessionStartLimit> {
    // A minute counts while any part of it is inside the window.
    let (total, max_concurrency, used, oldest) = s
        .identify_window(app_id, identify_minutes_cutoff(now_ms))?
        .ok_or(RegistryError::NotFound {
            what: "application",
            id: app_id,
        })?;
    Ok(limit_of(total, max_concurrency, used, oldest, now_ms))
}
