//! Application command bodies and answers (REST.md "Interactions": command
//! registration). A body is validated as the platform does, every failure
//! a 400 code 50035 whose `errors` tree names the field (`0.options.1.name`
//! in a bulk overwrite); unknown fields are ignored. What passes is
//! normalised (only the fields this platform keeps, in one order) into the
//! registry's `NewCommand` / `CommandPatch`, whose name and description
//! rules (`registry::commands`) are the ones checked here, field by field.
//!
//! The options rules: at most 25 options per level; types 1-11;
//! SUB_COMMAND_GROUP (2) only at the top level and holding only
//! SUB_COMMANDs (1); a SUB_COMMAND holds no subcommands; subcommands and
//! other options never mix in one level; required options before optional
//! ones; choices (at most 25) only for STRING, INTEGER and NUMBER, never
//! with autocomplete; no name twice in one level.

use registry::commands::{check_chat_name, check_description, check_kind, check_name, RuleError};
use registry::model::{command_kind, Command, CommandPatch, NewCommand};
use serde_json::{json, Map, Value};

use super::body::{codes, ApiError};

pub const MAX_OPTIONS: usize = 25;
pub const MAX_CHOICES: usize = 25;
/// Commands in one bulk overwrite, at most (100 + 5 + 5).
pub const MAX_BULK: usize = 110;
/// The platform's code for "Maximum number of application commands reached".
pub const MAX_COMMANDS_REACHED: u32 = 30032;
/// The platform's code for the 200 daily creates.
pub const MAX_DAILY_CREATES: u32 = 30034;
pub const UNKNOWN_COMMAND: u32 = 10063;

const SUB_COMMAND: u64 = 1;
const SUB_COMMAND_GROUP: u64 = 2;
const STRING: u64 = 3;
const INTEGER: u64 = 4;
const CHANNEL: u64 = 7;
const NUMBER: u64 = 10;
/// Integer values are those a double holds exactly (as on the platform).
const MAX_SAFE: i64 = (1 << 53) - 1;

/// The scope of a command route: (the application in the path, the server;
/// None global) and what is asked.
#[derive(Debug, Clone, PartialEq)]
pub struct CommandCall {
    pub app: u64,
    pub guild: Option<u64>,
    pub op: CommandOp,
}

#[derive(Debug, Clone, PartialEq)]
pub enum CommandOp {
    List,
    Get(u64),
    Put(Vec<NewCommand>),
    Create(NewCommand),
    /// The body, parsed: validated against the command's kind once it is read.
    Edit(u64, Map<String, Value>),
    Delete(u64),
}

fn form(path: &str, e: RuleError) -> ApiError {
    ApiError::form(path, e.code, &e.message)
}

fn at(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_owned()
    } else {
        format!("{path}.{field}")
    }
}

fn required(path: &str) -> ApiError {
    ApiError::form(path, "BASE_TYPE_REQUIRED", "This field is required")
}

fn string<'a>(v: &'a Value, path: &str) -> Result<&'a str, ApiError> {
    v.as_str().ok_or_else(|| {
        ApiError::form(
            path,
            "BASE_TYPE_STRING",
            "Could not interpret value as string.",
        )
    })
}

fn boolean(v: Option<&Value>, path: &str) -> Result<Option<bool>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(_) => Err(ApiError::form(
            path,
            "BASE_TYPE_BOOLEAN",
            "Must be either true or false.",
        )),
    }
}

fn integer(v: &Value, path: &str, lo: i64, hi: i64) -> Result<i64, ApiError> {
    match v.as_i64() {
        Some(n) if (lo..=hi).contains(&n) => Ok(n),
        _ => Err(ApiError::form(
            path,
            "NUMBER_TYPE_COERCE",
            &format!("Value must be an integer between {lo} and {hi}."),
        )),
    }
}

/// The JSON value of a command body (JSON only: no files here).
pub fn parse(content_type: Option<&str>, body: &[u8]) -> Result<Value, ApiError> {
    let main = content_type
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim();
    let json = main.eq_ignore_ascii_case("application/json");
    if !(json || (main.is_empty() && body.is_empty())) {
        return Err(ApiError::form(
            "_body",
            "CONTENT_TYPE_INVALID",
            "Expected Content-Type application/json",
        ));
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Object(Map::new()));
    }
    serde_json::from_slice(body).map_err(|_| {
        ApiError::new(
            400,
            codes::INVALID_FORM_BODY,
            "The request body contains invalid JSON.",
        )
    })
}

fn object<'a>(v: &'a Value, path: &str) -> Result<&'a Map<String, Value>, ApiError> {
    v.as_object().ok_or_else(|| {
        ApiError::form(
            path,
            "DICT_TYPE_CONVERT",
            "Only dictionaries may be used in a DictType",
        )
    })
}

/// `default_member_permissions`: null, or a bitset as a string (or number).
fn permissions(v: Option<&Value>, path: &str) -> Result<Option<Option<u64>>, ApiError> {
    let bad = || {
        ApiError::form(
            path,
            "NUMBER_TYPE_COERCE",
            "Value is not a valid permission bitset.",
        )
    };
    Ok(Some(match v {
        None => return Ok(None),
        Some(Value::Null) => None,
        Some(Value::String(s)) if !s.is_empty() && s.len() <= 20 => {
            Some(s.parse::<u64>().map_err(|_| bad())?)
        }
        Some(Value::Number(n)) => Some(n.as_u64().ok_or_else(bad)?),
        Some(_) => return Err(bad()),
    }))
}

/// One command of a POST body, or of a bulk overwrite at `path` (`"3"`).
pub fn new_command(v: &Value, path: &str) -> Result<NewCommand, ApiError> {
    let m = object(v, if path.is_empty() { "_body" } else { path })?;
    let kind = match m.get("type") {
        None | Some(Value::Null) => command_kind::CHAT_INPUT,
        Some(t) => {
            let p = at(path, "type");
            let k = integer(t, &p, 0, 255)? as u8;
            check_kind(k).map_err(|e| form(&p, e))?;
            k
        }
    };
    let name_path = at(path, "name");
    let name = string(
        m.get("name").ok_or_else(|| required(&name_path))?,
        &name_path,
    )?;
    check_name(kind, name).map_err(|e| form(&name_path, e))?;
    let desc_path = at(path, "description");
    let description = match m.get("description") {
        None | Some(Value::Null) if kind == command_kind::CHAT_INPUT => {
            return Err(required(&desc_path))
        }
        None | Some(Value::Null) => "",
        Some(d) => string(d, &desc_path)?,
    };
    check_description(kind, description).map_err(|e| form(&desc_path, e))?;
    let options_json = command_options(m.get("options"), kind, &at(path, "options"))?;
    let perms_path = at(path, "default_member_permissions");
    Ok(NewCommand {
        name: name.to_owned(),
        description: description.to_owned(),
        kind,
        options_json,
        default_member_permissions: permissions(m.get("default_member_permissions"), &perms_path)?
            .flatten(),
        nsfw: boolean(m.get("nsfw"), &at(path, "nsfw"))?.unwrap_or(false),
    })
}

/// A bulk overwrite's body: an array of commands, no (name, type) twice.
pub fn bulk(v: &Value) -> Result<Vec<NewCommand>, ApiError> {
    let list = v.as_array().ok_or_else(|| {
        ApiError::form(
            "_body",
            "LIST_TYPE_CONVERT",
            "Only iterables may be used in a ListType",
        )
    })?;
    if list.len() > MAX_BULK {
        return Err(ApiError::form(
            "_body",
            "BASE_TYPE_MAX_LENGTH",
            &format!("Must be {MAX_BULK} or fewer in length."),
        ));
    }
    let mut out: Vec<NewCommand> = Vec::with_capacity(list.len());
    for (i, v) in list.iter().enumerate() {
        let c = new_command(v, &i.to_string())?;
        if out.iter().any(|d| d.kind == c.kind && d.name == c.name) {
            return Err(ApiError::form(
                &format!("{i}.name"),
                "APPLICATION_COMMANDS_DUPLICATE_NAME",
                "Application command names must be unique",
            ));
        }
        out.push(c);
    }
    Ok(out)
}

/// A PATCH body for a command of `kind` (the type itself cannot change).
pub fn patch(m: &Map<String, Value>, kind: u8) -> Result<CommandPatch, ApiError> {
    let mut p = CommandPatch::default();
    if let Some(v) = m.get("name").filter(|v| !v.is_null()) {
        let name = string(v, "name")?;
        check_name(kind, name).map_err(|e| form("name", e))?;
        p.name = Some(name.to_owned());
    }
    if let Some(v) = m.get("description").filter(|v| !v.is_null()) {
        let d = string(v, "description")?;
        check_description(kind, d).map_err(|e| form("description", e))?;
        p.description = Some(d.to_owned());
    }
    if m.contains_key("options") {
        p.options_json = Some(command_options(m.get("options"), kind, "options")?);
    }
    p.default_member_permissions = permissions(
        m.get("default_member_permissions"),
        "default_member_permissions",
    )?;
    p.nsfw = boolean(m.get("nsfw"), "nsfw")?;
    Ok(p)
}

/// A command's `options` (absent or null: none), normalised to JSON.
fn command_options(v: Option<&Value>, kind: u8, path: &str) -> Result<String, ApiError> {
    let list = match v {
        None | Some(Value::Null) => return Ok("[]".to_owned()),
        Some(v) => v.as_array().ok_or_else(|| {
            ApiError::form(
                path,
                "LIST_TYPE_CONVERT",
                "Only iterables may be used in a ListType",
            )
        })?,
    };
    if kind != command_kind::CHAT_INPUT && !list.is_empty() {
        return Err(ApiError::form(
            path,
            "APPLICATION_COMMAND_OPTIONS_NOT_ALLOWED",
            "Only CHAT_INPUT commands may have options",
        ));
    }
    let out = options(list, path, Level::Top)?;
    Ok(Value::Array(out).to_string())
}

/// Where a list of options is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    /// The command's own options.
    Top,
    /// A SUB_COMMAND_GROUP's: SUB_COMMANDs only.
    Group,
    /// A SUB_COMMAND's: no subcommands.
    Sub,
}

fn options(list: &[Value], path: &str, level: Level) -> Result<Vec<Value>, ApiError> {
    if list.len() > MAX_OPTIONS {
        return Err(ApiError::form(
            path,
            "BASE_TYPE_MAX_LENGTH",
            &format!("Must be {MAX_OPTIONS} or fewer in length."),
        ));
    }
    let mut out: Vec<Value> = Vec::with_capacity(list.len());
    let (mut subs, mut values, mut optional_seen) = (false, false, false);
    for (i, v) in list.iter().enumerate() {
        let p = format!("{path}.{i}");
        let o = option(v, &p, level)?;
        let t = o["type"].as_u64().unwrap_or(0);
        if t == SUB_COMMAND || t == SUB_COMMAND_GROUP {
            subs = true;
        } else {
            values = true;
            let req = o.get("required") == Some(&Value::Bool(true));
            if req && optional_seen {
                return Err(ApiError::form(
                    &format!("{p}.required"),
                    "APPLICATION_COMMAND_OPTIONS_REQUIRED_INVALID",
                    "Required options must be placed before non-required options",
                ));
            }
            optional_seen |= !req;
        }
        if subs && values {
            return Err(ApiError::form(
                path,
                "APPLICATION_COMMAND_OPTIONS_TYPE_INVALID",
                "Sub-command and sub-command group option types are mutually exclusive to all other types",
            ));
        }
        if out.iter().any(|d| d["name"] == o["name"]) {
            return Err(ApiError::form(
                &format!("{p}.name"),
                "APPLICATION_COMMAND_OPTIONS_DUPLICATE_NAME",
                "Option names must be unique",
            ));
        }
        out.push(o);
    }
    Ok(out)
}

fn option(v: &Value, p: &str, level: Level) -> Result<Value, ApiError> {
    let m = object(v, p)?;
    let tp = at(p, "type");
    let t = integer(m.get("type").ok_or_else(|| required(&tp))?, &tp, 1, 11)? as u64;
    let nesting = |msg: &str| ApiError::form(&tp, "APPLICATION_COMMAND_OPTION_TYPE_INVALID", msg);
    match (level, t) {
        (Level::Group, t) if t != SUB_COMMAND => {
            return Err(nesting("A sub-command group may only contain sub-commands"))
        }
        (Level::Sub, SUB_COMMAND | SUB_COMMAND_GROUP) => {
            return Err(nesting("A sub-command cannot contain sub-commands"))
        }
        _ => {}
    }
    let np = at(p, "name");
    let name = string(m.get("name").ok_or_else(|| required(&np))?, &np)?;
    check_chat_name(name).map_err(|e| form(&np, e))?;
    let dp = at(p, "description");
    let desc = string(m.get("description").ok_or_else(|| required(&dp))?, &dp)?;
    check_description(command_kind::CHAT_INPUT, desc).map_err(|e| form(&dp, e))?;
    let mut o = Map::new();
    o.insert("type".into(), t.into());
    o.insert("name".into(), name.into());
    o.insert("description".into(), desc.into());
    if t == SUB_COMMAND || t == SUB_COMMAND_GROUP {
        let inner = match m.get("options") {
            None | Some(Value::Null) => Vec::new(),
            Some(v) => {
                let op = at(p, "options");
                let list = v.as_array().ok_or_else(|| {
                    ApiError::form(
                        &op,
                        "LIST_TYPE_CONVERT",
                        "Only iterables may be used in a ListType",
                    )
                })?;
                let next = if t == SUB_COMMAND_GROUP {
                    Level::Group
                } else {
                    Level::Sub
                };
                options(list, &op, next)?
            }
        };
        o.insert("options".into(), Value::Array(inner));
        return Ok(Value::Object(o));
    }
    if boolean(m.get("required"), &at(p, "required"))? == Some(true) {
        o.insert("required".into(), true.into());
    }
    let valued = matches!(t, STRING | INTEGER | NUMBER);
    let autocomplete = boolean(m.get("autocomplete"), &at(p, "autocomplete"))? == Some(true);
    let choices = match m.get("choices") {
        None | Some(Value::Null) => Vec::new(),
        Some(_) if !valued => {
            return Err(ApiError::form(
                &at(p, "choices"),
                "APPLICATION_COMMAND_OPTION_CHOICES_INVALID",
                "Only STRING, INTEGER and NUMBER options may have choices or autocomplete",
            ))
        }
        Some(v) => choices(v, &at(p, "choices"), t)?,
    };
    if !valued && autocomplete {
        return Err(ApiError::form(
            &at(p, "autocomplete"),
            "APPLICATION_COMMAND_OPTION_CHOICES_INVALID",
            "Only STRING, INTEGER and NUMBER options may have choices or autocomplete",
        ));
    }
    if autocomplete && !choices.is_empty() {
        return Err(ApiError::form(
            &at(p, "autocomplete"),
            "APPLICATION_COMMAND_AUTOCOMPLETE_AND_CHOICES",
            "Autocomplete and choices are mutually exclusive",
        ));
    }
    if autocomplete {
        o.insert("autocomplete".into(), true.into());
    }
    if !choices.is_empty() {
        o.insert("choices".into(), Value::Array(choices));
    }
    bounds(m, p, t, &mut o)?;
    Ok(Value::Object(o))
}

fn choices(v: &Value, path: &str, t: u64) -> Result<Vec<Value>, ApiError> {
    let list = v.as_array().ok_or_else(|| {
        ApiError::form(
            path,
            "LIST_TYPE_CONVERT",
            "Only iterables may be used in a ListType",
        )
    })?;
    if list.len() > MAX_CHOICES {
        return Err(ApiError::form(
            path,
            "BASE_TYPE_MAX_LENGTH",
            &format!("Must be {MAX_CHOICES} or fewer in length."),
        ));
    }
    let mut out = Vec::with_capacity(list.len());
    for (j, c) in list.iter().enumerate() {
        let cp = format!("{path}.{j}");
        let m = object(c, &cp)?;
        let np = at(&cp, "name");
        let name = string(m.get("name").ok_or_else(|| required(&np))?, &np)?;
        if !(1..=100).contains(&name.chars().count()) {
            return Err(ApiError::form(
                &np,
                "BASE_TYPE_BAD_LENGTH",
                "Must be between 1 and 100 in length.",
            ));
        }
        let vp = at(&cp, "value");
        let v = m.get("value").ok_or_else(|| required(&vp))?;
        let value = match t {
            STRING => {
                let s = string(v, &vp)?;
                if !(1..=100).contains(&s.chars().count()) {
                    return Err(ApiError::form(
                        &vp,
                        "BASE_TYPE_BAD_LENGTH",
                        "Must be between 1 and 100 in length.",
                    ));
                }
                Value::from(s)
            }
            INTEGER => integer(v, &vp, -MAX_SAFE, MAX_SAFE)?.into(),
            _ => number(v, &vp)?,
        };
        out.push(json!({ "name": name, "value": value }));
    }
    Ok(out)
}

fn number(v: &Value, path: &str) -> Result<Value, ApiError> {
    match v.as_f64() {
        Some(f) if f.is_finite() && f.abs() <= MAX_SAFE as f64 => Ok(v.clone()),
        _ => Err(ApiError::form(
            path,
            "NUMBER_TYPE_COERCE",
            "Value is not a valid number.",
        )),
    }
}

/// min/max value (INTEGER, NUMBER), min/max length (STRING), channel types
/// (CHANNEL); the others ignore them.
fn bounds(
    m: &Map<String, Value>,
    p: &str,
    t: u64,
    o: &mut Map<String, Value>,
) -> Result<(), ApiError> {
    let get = |k: &str| m.get(k).filter(|v| !v.is_null());
    let pair = |lo: &str,
                hi: &str,
                o: &mut Map<String, Value>,
                f: &dyn Fn(&Value, &str) -> Result<Value, ApiError>| {
        let a = get(lo).map(|v| f(v, &at(p, lo))).transpose()?;
        let b = get(hi).map(|v| f(v, &at(p, hi))).transpose()?;
        if let (Some(a), Some(b)) = (&a, &b) {
            if a.as_f64() > b.as_f64() {
                return Err(ApiError::form(
                    &at(p, lo),
                    "NUMBER_TYPE_MAX",
                    &format!("{lo} must not be greater than {hi}."),
                ));
            }
        }
        for (k, v) in [(lo, a), (hi, b)] {
            if let Some(v) = v {
                o.insert(k.into(), v);
            }
        }
        Ok(())
    };
    match t {
        INTEGER => pair("min_value", "max_value", o, &|v, path| {
            integer(v, path, -MAX_SAFE, MAX_SAFE).map(Value::from)
        }),
        NUMBER => pair("min_value", "max_value", o, &number),
        STRING => {
            pair("min_length", "max_length", o, &|v, path| {
                integer(v, path, 0, 6000).map(Value::from)
            })?;
            match o.get("max_length") {
                Some(Value::Number(n)) if n.as_i64() == Some(0) => Err(ApiError::form(
                    &at(p, "max_length"),
                    "NUMBER_TYPE_MIN",
                    "int value should be greater than or equal to 1.",
                )),
                _ => Ok(()),
            }
        }
        CHANNEL => {
            if let Some(v) = get("channel_types") {
                let cp = at(p, "channel_types");
                let list = v.as_array().filter(|l| l.len() <= 32).ok_or_else(|| {
                    ApiError::form(
                        &cp,
                        "LIST_TYPE_CONVERT",
                        "Must be a list of at most 32 channel types",
                    )
                })?;
                let mut types = Vec::with_capacity(list.len());
                for (k, c) in list.iter().enumerate() {
                    types.push(Value::from(integer(c, &format!("{cp}.{k}"), 0, 255)?));
                }
                o.insert("channel_types".into(), Value::Array(types));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// What a command route asks, its body validated (PATCH: parsed only).
pub fn call(
    route: &super::route::ApiRoute,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<CommandCall, ApiError> {
    use super::route::ApiRoute::*;
    let json = || parse(content_type, body);
    let (app, guild, op) = match route {
        ListCommands { app, guild } => (*app, *guild, CommandOp::List),
        GetCommand {
            app,
            guild,
            command,
        } => (*app, *guild, CommandOp::Get(*command)),
        DeleteCommand {
            app,
            guild,
            command,
        } => (*app, *guild, CommandOp::Delete(*command)),
        PutCommands { app, guild } => (*app, *guild, CommandOp::Put(bulk(&json()?)?)),
        CreateCommand { app, guild } => {
            (*app, *guild, CommandOp::Create(new_command(&json()?, "")?))
        }
        EditCommand {
            app,
            guild,
            command,
        } => {
            let v = json()?;
            let m = object(&v, "_body")?.clone();
            (*app, *guild, CommandOp::Edit(*command, m))
        }
        _ => return Err(ApiError::new(500, 0, "not a command route")),
    };
    Ok(CommandCall {
        app,
        guild: (guild != 0).then_some(guild),
        op,
    })
}

/// A command as the platform answers it.
pub fn command_json(c: &Command) -> Value {
    let mut v = json!({
        "id": c.id.to_string(),
        "application_id": c.application_id.to_string(),
        "version": c.version.to_string(),
        "type": c.kind,
        "name": c.name,
        "name_localizations": null,
        "description": c.description,
        "description_localizations": null,
        "default_member_permissions": c.default_member_permissions.map(|p| p.to_string()),
        "dm_permission": null,
        "contexts": null,
        "integration_types": [0],
        "nsfw": c.nsfw,
    });
    if let Some(g) = c.guild_id {
        v["guild_id"] = g.to_string().into();
    }
    match serde_json::from_str::<Value>(&c.options_json) {
        Ok(Value::Array(o)) if !o.is_empty() => v["options"] = Value::Array(o),
        _ => {}
    }
    v
}

#[cfg(test)]
mod tests;
