//! Input checks both backends make before they write: one rule and one
//! message, whichever database is behind the registry.

use crate::model::intents;
use crate::{RegistryError, Result};

pub(crate) fn validate_name(what: &str, name: &str) -> Result<()> {
    let n = name.chars().count();
    if n == 0 || n > 100 || name.trim().is_empty() {
        return Err(RegistryError::Invalid(format!(
            "{what} name must be 1..=100 characters and not blank"
        )));
    }
    Ok(())
}

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

pub(crate) fn check_shard(shard_id: u32, shard_count: u32) -> Result<()> {
    if shard_count == 0 || shard_id >= shard_count {
        return Err(RegistryError::Invalid(format!(
            "shard [{shard_id}, {shard_count}] is out of range"
        )));
    }
    Ok(())
}
