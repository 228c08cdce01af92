//! Rules both registry backends apply the same way: what a new application
//! is, how credentials are made, what the demo data is called (input checks:
//! `crate::validate`).

use crate::model::{
    app_flags, Application, SessionStartLimit, DEFAULT_SESSION_START_TOTAL, SESSION_START_WINDOW_MS,
};
use crate::rows::to_i;
use crate::validate::{check_concurrency, check_intents, validate_name};
use crate::{error::Result, snowflake, token};

/// New salt + hash for a fresh token of `app_id`; returns the token.
pub(crate) fn new_credentials(
    app_id: u64,
) -> Result<(String, [u8; token::SALT_LEN], [u8; token::HASH_LEN])> {
    let tok = token::generate(app_id)?;
    let salt = token::random_bytes::<{ token::SALT_LEN }>()?;
    let hash = token::hash(&salt, &tok);
    Ok((tok, salt, hash))
}
/// A new application (validated, with a fresh id and credentials) before
/// either backend stores it: (application, token, salt, hash).
pub(crate) type NewApplication = (
    Application,
    String,
    [u8; token::SALT_LEN],
    [u8; token::HASH_LEN],
);

pub(crate) fn new_application(
    name: &str,
    approved: u64,
    max_concurrency: u32,
) -> Result<NewApplication> {
    validate_name("application", name)?;
    check_intents(approved)?;
    check_concurrency(max_concurrency)?;
    let id = snowflake::global().next_id();
    let (tok, salt, hash) = new_credentials(id)?;
    let app = Application {
        id,
        name: name.to_owned(),
        bot_user_id: id,
        bot_username: name.to_owned(),
        approved_intents: approved,
        requested_intents: 0,
        max_concurrency,
        session_start_total: DEFAULT_SESSION_START_TOTAL,
        flags: app_flags::from_approved_intents(approved),
    };
    Ok((app, tok, salt, hash))
}

/// Identifies are counted per minute: the window is rolling at minute
/// granularity.
const MINUTE_MS: u64 = 60_000;

/// The `identify_counts` minute an identify at `now_ms` is counted in.
pub(crate) fn identify_minute(now_ms: u64) -> i64 {
    to_i(now_ms - now_ms % MINUTE_MS)
}

/// Minutes at or before this no longer count (and are pruned): a minute
/// counts while any part of it is inside the window ending at `now_ms`.
pub(crate) fn identify_minutes_cutoff(now_ms: u64) -> i64 {
    // Identifies at or before `now - window` no longer count.
    to_i(now_ms).saturating_sub(SESSION_START_WINDOW_MS as i64) - MINUTE_MS as i64
}

/// The limit of an application with these settings that made `used`
/// identifies in the minutes after the cutoff, the `oldest` of them first.
pub(crate) fn session_start_limit(
    total: u32,
    max_concurrency: u32,
    used: i64,
    oldest: Option<i64>,
    now_ms: u64,
) -> SessionStartLimit {
    // Rolling window: the next slots free when the oldest minute ages out.
    let reset_after_ms = oldest.map_or(0, |m| {
        (m.saturating_add((SESSION_START_WINDOW_MS + MINUTE_MS) as i64) - to_i(now_ms))
            .clamp(0, (SESSION_START_WINDOW_MS + MINUTE_MS) as i64) as u64
    });
    let used = u32::try_from(used).unwrap_or(u32::MAX);
    SessionStartLimit {
        total,
        remaining: total.saturating_sub(used),
        reset_after_ms,
        max_concurrency,
    }
}

pub const DEMO_APP: &str = "demo-bot";
pub const DEMO_SERVER: &str = "Demo Server";
pub const DEMO_CATEGORY: &str = "Text Channels";
pub const DEMO_CHANNEL: &str = "general";
/// The demo server's roles for people: below the bot, and above it.
pub const DEMO_MEMBER_ROLE: &str = "Member";
pub const DEMO_MODERATOR_ROLE: &str = "Moderator";
/// What the demo bot is granted in the demo server.
pub const DEMO_GRANT: u64 = {
    use crate::model::permissions::*;
    VIEW_CHANNEL
        | SEND_MESSAGES
        | READ_MESSAGE_HISTORY
        | EMBED_LINKS
        | ADD_REACTIONS
        | MANAGE_ROLES
        | KICK_MEMBERS
        | BAN_MEMBERS
};
