//! Application commands, written once for both backends (as `crate::ops`
//! is for servers): a backend implements [`CommandStore`], one method per
//! statement; the rules, the limits and the order of the steps are here.
//!
//! Rules (the platform's):
//! - a command lives in a scope: global (`guild_id` None, stored as 0) or
//!   one server; within a scope (name, kind) is unique;
//! - CHAT_INPUT names match `^[-_\p{L}\p{N}]{1,32}$` and are lowercase,
//!   USER and MESSAGE names are 1-32 characters of any case (spaces too);
//!   a CHAT_INPUT description is 1-100 characters, a USER or MESSAGE one is
//!   empty, and only CHAT_INPUT commands have options;
//! - at most [`max_commands`] of each kind per scope, and at most
//!   [`MAX_DAILY_COMMAND_CREATES`] creates per scope per UTC day;
//! - creating by name and kind upserts (the id stays), a bulk overwrite
//!   keeps the ids of the commands it matches by (name, kind), creates the
//!   others and deletes the missing; every change is a new `version`.
//!
//! The options array is JSON the REST edge validated and normalised (this
//! crate parses no JSON): here it is only checked to be an array and
//! bounded.
//!
//! The check functions ([`check_kind`], [`check_name`],
//! [`check_description`]) are public so the REST edge names the same rule
//! field by field in its 400 tree.

use crate::apps::{require_application, AppStore};
use crate::model::*;
use crate::ops::{require_server, ServerStore};
use crate::{error::RegistryError, error::Result, snowflake};

/// Largest stored options JSON (bytes); the REST edge's body limit is lower.
pub const MAX_OPTIONS_JSON: usize = 64 * 1024;

/// The `what` of the [`RegistryError::LimitReached`] of the daily creates.
pub const DAILY_CREATES: &str = "daily command creates";

/// A broken rule: the platform's error code for the field, and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuleError {
    pub code: &'static str,
    pub message: String,
}

fn rule(code: &'static str, message: impl Into<String>) -> RuleError {
    RuleError {
        code,
        message: message.into(),
    }
}

/// A command `type` this platform knows (1-3).
pub fn check_kind(kind: u8) -> std::result::Result<(), RuleError> {
    match kind {
        command_kind::CHAT_INPUT | command_kind::USER | command_kind::MESSAGE => Ok(()),
        _ => Err(rule("BASE_TYPE_CHOICES", "Value must be one of {1, 2, 3}.")),
    }
}

/// A CHAT_INPUT command's (or any option's) name: `^[-_\p{L}\p{N}]{1,32}$`,
/// lowercase where a character has a lowercase form.
pub fn check_chat_name(name: &str) -> std::result::Result<(), RuleError> {
    let n = name.chars().count();
    if !(1..=32).contains(&n) {
        return Err(rule(
            "BASE_TYPE_BAD_LENGTH",
            "Must be between 1 and 32 in length.",
        ));
    }
    let ok = name.chars().all(|c| {
        (c == '-' || c == '_' || c.is_alphabetic() || c.is_numeric())
            && c.to_lowercase().eq(std::iter::once(c))
    });
    if !ok {
        return Err(rule(
            "APPLICATION_COMMAND_INVALID_NAME",
            "Command name is invalid",
        ));
    }
    Ok(())
}

/// A command's name, by its kind.
pub fn check_name(kind: u8, name: &str) -> std::result::Result<(), RuleError> {
    if kind == command_kind::CHAT_INPUT {
        return check_chat_name(name);
    }
    let n = name.chars().count();
    if !(1..=32).contains(&n) {
        return Err(rule(
            "BASE_TYPE_BAD_LENGTH",
            "Must be between 1 and 32 in length.",
        ));
    }
    if name.trim().is_empty() || name.chars().any(char::is_control) {
        return Err(rule(
            "APPLICATION_COMMAND_INVALID_NAME",
            "Command name is invalid",
        ));
    }
    Ok(())
}

/// A command's description, by its kind (also an option's: CHAT_INPUT).
pub fn check_description(kind: u8, description: &str) -> std::result::Result<(), RuleError> {
    let n = description.chars().count();
    if kind == command_kind::CHAT_INPUT {
        if !(1..=100).contains(&n) {
            return Err(rule(
                "BASE_TYPE_BAD_LENGTH",
                "Must be between 1 and 100 in length.",
            ));
        }
    } else if n != 0 {
        return Err(rule(
            "BASE_TYPE_MAX_LENGTH",
            "Must be 0 or fewer in length.",
        ));
    }
    Ok(())
}

fn invalid(field: &str, e: RuleError) -> RegistryError {
    RegistryError::Invalid(format!("command {field}: {}", e.message))
}

/// Every rule a stored command must satisfy (the REST edge checked them
/// already; the CLI and other callers meet them here).
pub(crate) fn validate(c: &NewCommand) -> Result<()> {
    check_kind(c.kind).map_err(|e| invalid("type", e))?;
    check_name(c.kind, &c.name).map_err(|e| invalid("name", e))?;
    check_description(c.kind, &c.description).map_err(|e| invalid("description", e))?;
    let options = c.options_json.trim();
    if !options.starts_with('[') || !options.ends_with(']') || options.len() > MAX_OPTIONS_JSON {
        return Err(RegistryError::Invalid(
            "command options must be a JSON array of at most 64 KiB".into(),
        ));
    }
    if c.kind != command_kind::CHAT_INPUT && options != "[]" {
        return Err(RegistryError::Invalid(
            "command options: only CHAT_INPUT commands have options".into(),
        ));
    }
    Ok(())
}

/// The statements behind the command operations. A scope is the server id,
/// 0 for global commands.
pub(crate) trait CommandStore: AppStore + ServerStore {
    /// The scope's commands, by id.
    fn commands_in(&mut self, app_id: u64, scope: u64) -> Result<Vec<Command>>;
    fn command_by_id(&mut self, id: u64) -> Result<Option<Command>>;
    fn insert_command(&mut self, c: &Command) -> Result<()>;
    /// Writes everything but id, application, scope and kind.
    fn update_command(&mut self, c: &Command) -> Result<()>;
    fn delete_command(&mut self, id: u64) -> Result<bool>;
    /// Commands created in the scope on UTC day `day`.
    fn creates_on(&mut self, app_id: u64, scope: u64, day: i64) -> Result<u32>;
    /// Counts `n` more creates on `day`, forgetting the scope's earlier days.
    fn add_creates(&mut self, app_id: u64, scope: u64, day: i64, n: u32) -> Result<()>;
}

fn scope(guild_id: Option<u64>) -> u64 {
    guild_id.unwrap_or(0)
}

fn today() -> i64 {
    (snowflake::unix_ms_now() / COMMAND_DAY_MS) as i64
}

fn require_scope<S: CommandStore>(s: &mut S, app_id: u64, guild_id: Option<u64>) -> Result<()> {
    require_application(s, app_id)?;
    match guild_id {
        Some(0) => Err(RegistryError::NotFound {
            what: "server",
            id: 0,
        }),
        Some(g) => require_server(s, g).map(drop),
        None => Ok(()),
    }
}

fn unknown(id: u64) -> RegistryError {
    RegistryError::NotFound {
        what: "command",
        id,
    }
}

/// The command as stored from `new` in a scope (`id`, `version` chosen).
fn stored(app_id: u64, guild_id: Option<u64>, id: u64, new: &NewCommand) -> Command {
    Command {
        id,
        application_id: app_id,
        guild_id,
        name: new.name.clone(),
        description: new.description.clone(),
        kind: new.kind,
        options_json: new.options_json.trim().to_owned(),
        default_member_permissions: new.default_member_permissions,
        nsfw: new.nsfw,
        version: snowflake::global().next_id(),
    }
}

/// The same content (what a bulk overwrite need not rewrite).
fn same(c: &Command, new: &NewCommand) -> bool {
    c.name == new.name
        && c.description == new.description
        && c.kind == new.kind
        && c.options_json == new.options_json.trim()
        && c.default_member_permissions == new.default_member_permissions
        && c.nsfw == new.nsfw
}

fn limit(what: &'static str, max: u32) -> RegistryError {
    RegistryError::LimitReached { what, max }
}

fn check_daily<S: CommandStore>(s: &mut S, app_id: u64, sc: u64, day: i64, n: u32) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let used = s.creates_on(app_id, sc, day)?;
    if used.saturating_add(n) > MAX_DAILY_COMMAND_CREATES {
        return Err(limit(DAILY_CREATES, MAX_DAILY_COMMAND_CREATES));
    }
    Ok(())
}

pub(crate) fn commands<S: CommandStore>(
    s: &mut S,
    app_id: u64,
    guild_id: Option<u64>,
) -> Result<Vec<Command>> {
    s.commands_in(app_id, scope(guild_id))
}

pub(crate) fn command<S: CommandStore>(
    s: &mut S,
    app_id: u64,
    guild_id: Option<u64>,
    id: u64,
) -> Result<Option<Command>> {
    Ok(s.command_by_id(id)?
        .filter(|c| c.application_id == app_id && c.guild_id == guild_id))
}

fn require_command<S: CommandStore>(
    s: &mut S,
    app_id: u64,
    guild_id: Option<u64>,
    id: u64,
) -> Result<Command> {
    command(s, app_id, guild_id, id)?.ok_or_else(|| unknown(id))
}

/// Create, or update the command of the same name and kind: (command,
/// created).
pub(crate) fn create_command<S: CommandStore>(
    s: &mut S,
    app_id: u64,
    guild_id: Option<u64>,
    new: &NewCommand,
) -> Result<(Command, bool)> {
    validate(new)?;
    require_scope(s, app_id, guild_id)?;
    let sc = scope(guild_id);
    let existing = s.commands_in(app_id, sc)?;
    if let Some(old) = existing
        .iter()
        .find(|c| c.kind == new.kind && c.name == new.name)
    {
        if same(old, new) {
            return Ok((old.clone(), false));
        }
        let c = stored(app_id, guild_id, old.id, new);
        s.update_command(&c)?;
        return Ok((c, false));
    }
    let max = max_commands(new.kind);
    if existing.iter().filter(|c| c.kind == new.kind).count() >= max as usize {
        return Err(limit("application commands", max));
    }
    let day = today();
    check_daily(s, app_id, sc, day, 1)?;
    let c = stored(app_id, guild_id, snowflake::global().next_id(), new);
    s.insert_command(&c)?;
    s.add_creates(app_id, sc, day, 1)?;
    Ok((c, true))
}

/// Replace the scope's commands with `cmds` (in that order in the answer).
pub(crate) fn put_commands<S: CommandStore>(
    s: &mut S,
    app_id: u64,
    guild_id: Option<u64>,
    cmds: &[NewCommand],
) -> Result<Vec<Command>> {
    for (i, c) in cmds.iter().enumerate() {
        validate(c)?;
        if cmds[..i]
            .iter()
            .any(|d| d.kind == c.kind && d.name == c.name)
        {
            return Err(RegistryError::Invalid(format!(
                "command {i}: the name {:?} is used twice for one type",
                c.name
            )));
        }
    }
    for kind in [
        command_kind::CHAT_INPUT,
        command_kind::USER,
        command_kind::MESSAGE,
    ] {
        let max = max_commands(kind);
        if cmds.iter().filter(|c| c.kind == kind).count() > max as usize {
            return Err(limit("application commands", max));
        }
    }
    require_scope(s, app_id, guild_id)?;
    let sc = scope(guild_id);
    let existing = s.commands_in(app_id, sc)?;
    let matched = |new: &NewCommand| {
        existing
            .iter()
            .find(|c| c.kind == new.kind && c.name == new.name)
    };
    let creates = cmds.iter().filter(|c| matched(c).is_none()).count() as u32;
    let day = today();
    check_daily(s, app_id, sc, day, creates)?;
    for old in &existing {
        if !cmds
            .iter()
            .any(|c| c.kind == old.kind && c.name == old.name)
        {
            s.delete_command(old.id)?;
        }
    }
    let mut out = Vec::with_capacity(cmds.len());
    for new in cmds {
        let c = match matched(new) {
            Some(old) if same(old, new) => old.clone(),
            Some(old) => {
                let c = stored(app_id, guild_id, old.id, new);
                s.update_command(&c)?;
                c
            }
            None => {
                let c = stored(app_id, guild_id, snowflake::global().next_id(), new);
                s.insert_command(&c)?;
                c
            }
        };
        out.push(c);
    }
    if creates > 0 {
        s.add_creates(app_id, sc, day, creates)?;
    }
    Ok(out)
}

pub(crate) fn edit_command<S: CommandStore>(
    s: &mut S,
    app_id: u64,
    guild_id: Option<u64>,
    id: u64,
    patch: &CommandPatch,
) -> Result<Command> {
    let old = require_command(s, app_id, guild_id, id)?;
    let new = NewCommand {
        name: patch.name.clone().unwrap_or_else(|| old.name.clone()),
        description: patch
            .description
            .clone()
            .unwrap_or_else(|| old.description.clone()),
        kind: old.kind,
        options_json: patch
            .options_json
            .clone()
            .unwrap_or_else(|| old.options_json.clone()),
        default_member_permissions: patch
            .default_member_permissions
            .unwrap_or(old.default_member_permissions),
        nsfw: patch.nsfw.unwrap_or(old.nsfw),
    };
    validate(&new)?;
    if same(&old, &new) {
        return Ok(old);
    }
    let taken = s
        .commands_in(app_id, scope(guild_id))?
        .iter()
        .any(|c| c.id != id && c.kind == new.kind && c.name == new.name);
    if taken {
        return Err(RegistryError::Invalid(format!(
            "command name: a command named {:?} of this type exists",
            new.name
        )));
    }
    let c = stored(app_id, guild_id, id, &new);
    s.update_command(&c)?;
    Ok(c)
}

pub(crate) fn delete_command<S: CommandStore>(
    s: &mut S,
    app_id: u64,
    guild_id: Option<u64>,
    id: u64,
) -> Result<bool> {
    if command(s, app_id, guild_id, id)?.is_none() {
        return Ok(false);
    }
    s.delete_command(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_by_kind() {
        for ok in ["ping", "a", "do-it_2", "тест", "日本語", &"x".repeat(32)] {
            assert_eq!(check_name(command_kind::CHAT_INPUT, ok), Ok(()), "{ok}");
        }
        for bad in ["", "Ping", "two words", "a.b", "emoji😀", &"x".repeat(33)] {
            assert!(check_name(command_kind::CHAT_INPUT, bad).is_err(), "{bad}");
        }
        for ok in ["Report User", "x", "Ping"] {
            assert_eq!(check_name(command_kind::USER, ok), Ok(()), "{ok}");
        }
        for bad in ["", "   ", "a\nb", &"x".repeat(33)] {
            assert!(check_name(command_kind::MESSAGE, bad).is_err(), "{bad:?}");
        }
        assert!(check_description(command_kind::CHAT_INPUT, "").is_err());
        assert!(check_description(command_kind::CHAT_INPUT, &"d".repeat(101)).is_err());
        assert!(check_description(command_kind::USER, "no").is_err());
        assert_eq!(check_description(command_kind::USER, ""), Ok(()));
        assert!(check_kind(0).is_err() && check_kind(4).is_err());
    }
}
