//! Input checks both backends make before they write: one rule and one
//! message, whichever database is behind the registry.

use crate::model::intents;
use crate::{error::RegistryError, error::Result};

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
    check_intents_of("approved", bits)
}

/// `what` names the set in the message ("approved", "requested").
pub(crate) fn check_intents_of(what: &str, bits: u64) -> Result<()> {
    if bits & !intents::PRIVILEGED != 0 {
        return Err(RegistryError::Invalid(format!(
            "{what} intents {bits:#x} include non-privileged bits (allowed mask {:#x})",
            intents::PRIVILEGED
        )));
    }
    Ok(())
}

/// Longest developer name, in characters.
pub const MAX_DEVELOPER_NAME: usize = 64;
/// Shortest developer password, in characters.
pub const MIN_PASSWORD_CHARS: usize = 12;
/// Longest developer password, in bytes (bounds the work a sign-in costs).
pub const MAX_PASSWORD_BYTES: usize = 1024;

/// 1..=64 characters, none of them a control character, no whitespace at
/// either end (names are compared exactly, so none is trimmed silently).
pub(crate) fn check_developer_name(name: &str) -> Result<()> {
    let n = name.chars().count();
    if n == 0 || n > MAX_DEVELOPER_NAME {
        return Err(RegistryError::Invalid(format!(
            "developer name must be 1..={MAX_DEVELOPER_NAME} characters (it has {n})"
        )));
    }
    if name.trim() != name {
        return Err(RegistryError::Invalid(
            "developer name must not begin or end with whitespace".into(),
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(RegistryError::Invalid(
            "developer name must be printable (no control characters)".into(),
        ));
    }
    Ok(())
}

/// At least 12 characters, at most 1024 bytes. The message never holds
/// the password.
pub(crate) fn check_password(password: &str) -> Result<()> {
    if password.len() > MAX_PASSWORD_BYTES {
        return Err(RegistryError::Invalid(format!(
            "password must be at most {MAX_PASSWORD_BYTES} bytes"
        )));
    }
    if password.chars().count() < MIN_PASSWORD_CHARS {
        return Err(RegistryError::Invalid(format!(
            "password must be at least {MIN_PASSWORD_CHARS} characters"
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
