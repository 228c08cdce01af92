//! Rules both registry backends apply the same way: what may be approved,
//! how credentials are made, what the demo data is called.

use crate::model::intents;
use crate::{token, RegistryError, Result};

pub(crate) fn check_intents(bits: u64) -> Result<()> {
    if bits & !intents::PRIVILEGED != 0 {
        return Err(RegistryError::Invalid(format!(
            "approved intents {bits:#x} include non-privileged bits (allowed mask {:#x})",
            intents::PRIVILEGED
        )));
    }
    Ok(())
}

pub(crate) fn check_concurrency(n: u32) -> Result<()> {
    if n == 0 {
        return Err(RegistryError::Invalid(
            "max_concurrency must be >= 1".into(),
        ));
    }
    Ok(())
}

/// New salt + hash for a fresh token of `app_id`; returns the token.
pub(crate) fn new_credentials(
    app_id: u64,
) -> Result<(String, [u8; token::SALT_LEN], [u8; token::HASH_LEN])> {
    let tok = token::generate(app_id)?;
    let salt = token::random_bytes::<{ token::SALT_LEN }>()?;
    let hash = token::hash(&salt, &tok);
    Ok((tok, salt, hash))
}

pub const DEMO_APP: &str = "demo-bot";
pub const DEMO_SERVER: &str = "Demo Server";
pub const DEMO_CATEGORY: &str = "Text Channels";
pub const DEMO_CHANNEL: &str = "general";
