//! Rules both registry backends apply the same way: what a new application
//! is, how credentials are made, what the demo data is called (input checks:
//! `crate::validate`).

use crate::model::{app_flags, Application, DEFAULT_SESSION_START_TOTAL};
use crate::validate::{check_concurrency, check_intents, validate_name};
use crate::{snowflake, token, Result};

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
        max_concurrency,
        session_start_total: DEFAULT_SESSION_START_TOTAL,
        flags: app_flags::from_approved_intents(approved),
    };
    Ok((app, tok, salt, hash))
}

pub const DEMO_APP: &str = "demo-bot";
pub const DEMO_SERVER: &str = "Demo Server";
pub const DEMO_CATEGORY: &str = "Text Channels";
pub const DEMO_CHANNEL: &str = "general";
