//! The field lists of docs/rest.md ("Field lists"): what discord.py,
//! serenity, discord.js and twilight-model require of every object the
//! node sends, as checks over JSON. Each check returns what is wrong, by
//! path (`author.id missing`), empty when the object is whole; a test
//! collects them and fails naming every one.
//!
//! The lists follow REST.md ("Fields the libraries require on an
//! interaction object", "`user` objects with `id`, `username`,
//! `discriminator`, `avatar`") and, for messages, members, reactions and
//! typing, the fields those libraries' models deserialize without a
//! default (serenity and twilight-model fail the whole event on one).

use serde_json::Value;

/// A user object: REST.md's four, and `global_name` (serenity and
/// discord.js read it; null is fine).
pub const USER: &[&str] = &["id", "username", "discriminator", "global_name", "avatar"];
/// What only a user's owner sees of it: in READY's `user` and
/// `GET /users/@me`, never in a partial user (an `author`, `mentions[]`, a
/// `member.user`, a reactor, `application.bot`), as on Discord.
pub const PRIVATE_USER: &[&str] = &[
    "email",
    "verified",
    "mfa_enabled",
    "locale",
    "premium_type",
    "flags",
];
/// READY's `user`, the bot's own (PROTOCOL.md "READY"), and `/users/@me`.
pub const OWN_USER: &[&str] = &[
    "id",
    "username",
    "discriminator",
    "avatar",
    "bot",
    "mfa_enabled",
    "flags",
];
/// READY's `d` (PROTOCOL.md).
pub const READY: &[&str] = &[
    "v",
    "user",
    "guilds",
    "session_id",
    "resume_gateway_url",
    "shard",
    "application",
];
/// GUILD_CREATE's `d`: what twilight-model and discord.py need of a server.
pub const GUILD_CREATE: &[&str] = &["id", "name", "channels", "roles", "members"];
/// A message object, as REST answers it.
pub const MESSAGE: &[&str] = &[
    "id",
    "channel_id",
    "author",
    "content",
    "timestamp",
    "edited_timestamp",
    "tts",
    "mention_everyone",
    "mentions",
    "mention_roles",
    "attachments",
    "embeds",
    "pinned",
    "type",
    "flags",
    "components",
];
/// A guild member object (REST, and member events with `guild_id`).
pub const MEMBER: &[&str] = &[
    "user",
    "roles",
    "joined_at",
    "deaf",
    "mute",
    "flags",
    "pending",
];
/// The `member` of a server's MESSAGE_CREATE/UPDATE (the author is the user).
pub const EVENT_MEMBER: &[&str] = &["roles", "joined_at", "deaf", "mute", "flags"];
pub const MESSAGE_DELETE: &[&str] = &["id", "channel_id", "guild_id"];
pub const MESSAGE_DELETE_BULK: &[&str] = &["ids", "channel_id", "guild_id"];
pub const REACTION_ADD: &[&str] = &[
    "user_id",
    "channel_id",
    "message_id",
    "guild_id",
    "emoji",
    "member",
    "burst",
    "type",
];
pub const REACTION_REMOVE: &[&str] = &[
    "user_id",
    "channel_id",
    "message_id",
    "guild_id",
    "emoji",
    "burst",
    "type",
];
pub const TYPING_START: &[&str] = &["user_id", "channel_id", "guild_id", "timestamp", "member"];
/// REST.md "Fields the libraries require on an interaction object".
pub const INTERACTION: &[&str] = &[
    "id",
    "type",
    "token",
    "version",
    "application_id",
    "attachment_size_limit",
    "entitlements",
    "authorizing_integration_owners",
    "locale",
    "channel_id",
    "channel",
    "guild_id",
    "data",
    "member",
    "app_permissions",
];
/// `member` of an interaction (REST.md).
pub const INTERACTION_MEMBER: &[&str] = &[
    "user",
    "roles",
    "flags",
    "joined_at",
    "deaf",
    "mute",
    "permissions",
];
/// A callback's `?with_response=true` answer (REST.md).
pub const CALLBACK_INTERACTION: &[&str] = &[
    "id",
    "type",
    "response_message_id",
    "response_message_loading",
    "response_message_ephemeral",
];
/// `GET /oauth2/applications/@me` (PROTOCOL.md's list, and the two counts
/// hikari's `fetch_application` reads).
pub const APPLICATION: &[&str] = &[
    "id",
    "name",
    "description",
    "icon",
    "bot_public",
    "bot_require_code_grant",
    "owner",
    "verify_key",
    "flags",
    "approximate_guild_count",
    "approximate_user_install_count",
];
/// A partial guild of `GET /users/@me/guilds`.
pub const PARTIAL_GUILD: &[&str] = &[
    "id",
    "name",
    "icon",
    "banner",
    "owner",
    "permissions",
    "features",
];

/// What `v` lacks of `fields`, each as `{at}.{field} missing`.
pub fn lacks(v: &Value, at: &str, fields: &[&str]) -> Vec<String> {
    let Some(o) = v.as_object() else {
        return vec![format!("{at} is not an object: {v}")];
    };
    fields
        .iter()
        .filter(|f| !o.contains_key(**f))
        .map(|f| format!("{at}.{f} missing"))
        .collect()
}

/// A snowflake string: 17 to 20 digits (REST.md "Snowflakes").
pub fn snowflake(v: &Value, at: &str) -> Vec<String> {
    let ok = v
        .as_str()
        .is_some_and(|s| (17..=20).contains(&s.len()) && s.parse::<u64>().is_ok());
    if ok {
        Vec::new()
    } else {
        vec![format!("{at} is not a snowflake string: {v}")]
    }
}

/// A partial user: `USER`, and none of `PRIVATE_USER`.
pub fn user(v: &Value, at: &str) -> Vec<String> {
    let mut e = user_fields(v, at, USER);
    if let Some(o) = v.as_object() {
        e.extend(
            PRIVATE_USER
                .iter()
                .filter(|f| o.contains_key(**f))
                .map(|f| format!("{at}.{f} is private: a partial user never carries it")),
        );
    }
    e
}

/// The bot's own user (READY's, `/users/@me`): `USER` and `OWN_USER`.
pub fn own_user(v: &Value, at: &str) -> Vec<String> {
    let mut e = user_fields(v, at, USER);
    e.extend(lacks(v, at, OWN_USER));
    e
}

fn user_fields(v: &Value, at: &str, fields: &[&str]) -> Vec<String> {
    let mut e = lacks(v, at, fields);
    if e.is_empty() {
        e.extend(snowflake(&v["id"], &format!("{at}.id")));
        if v["username"].as_str().is_none_or(str::is_empty) {
            e.push(format!("{at}.username empty: {v}"));
        }
    }
    e
}

/// READY's `d`: PROTOCOL.md's fields, the bot's own whole user, every
/// server `{id, unavailable: true}`.
pub fn ready(d: &Value, at: &str) -> Vec<String> {
    let mut e = lacks(d, at, READY);
    e.extend(own_user(&d["user"], &format!("{at}.user")));
    e.extend(lacks(
        &d["application"],
        &format!("{at}.application"),
        &["id", "flags"],
    ));
    for (i, g) in d["guilds"].as_array().into_iter().flatten().enumerate() {
        if g["unavailable"] != true {
            e.push(format!("{at}.guilds[{i}] is not unavailable: {g}"));
        }
        e.extend(snowflake(&g["id"], &format!("{at}.guilds[{i}].id")));
    }
    e
}

/// GUILD_CREATE's `d`: its fields, and each member's `user` a partial one.
pub fn guild_create(d: &Value, at: &str) -> Vec<String> {
    let mut e = lacks(d, at, GUILD_CREATE);
    for (i, m) in d["members"].as_array().into_iter().flatten().enumerate() {
        e.extend(user(&m["user"], &format!("{at}.members[{i}].user")));
    }
    e
}

/// A message object (`event`: as MESSAGE_CREATE/UPDATE carry it, with
/// `guild_id` and, in a server, `member`).
pub fn message(v: &Value, at: &str, event: bool) -> Vec<String> {
    let mut e = lacks(v, at, MESSAGE);
    e.extend(snowflake(&v["id"], &format!("{at}.id")));
    e.extend(user(&v["author"], &format!("{at}.author")));
    for (i, m) in v["mentions"].as_array().into_iter().flatten().enumerate() {
        e.extend(user(m, &format!("{at}.mentions[{i}]")));
    }
    // Every component has its `id` (hikari reads it of each row and button).
    for (i, row) in v["components"].as_array().into_iter().flatten().enumerate() {
        e.extend(lacks(
            row,
            &format!("{at}.components[{i}]"),
            &["id", "type"],
        ));
        for (j, c) in row["components"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            e.extend(lacks(
                c,
                &format!("{at}.components[{i}].components[{j}]"),
                &["id", "type"],
            ));
        }
    }
    if let Some(r) = v.get("referenced_message").filter(|r| !r.is_null()) {
        e.extend(message(r, &format!("{at}.referenced_message"), false));
    }
    if event && v.get("guild_id").is_some_and(|g| !g.is_null()) {
        e.extend(lacks(&v["member"], &format!("{at}.member"), EVENT_MEMBER));
    }
    e
}

pub fn member(v: &Value, at: &str) -> Vec<String> {
    let mut e = lacks(v, at, MEMBER);
    e.extend(user(&v["user"], &format!("{at}.user")));
    e
}

pub fn interaction(v: &Value, at: &str) -> Vec<String> {
    let mut e = lacks(v, at, INTERACTION);
    e.extend(lacks(
        &v["data"],
        &format!("{at}.data"),
        &["id", "name", "type"],
    ));
    e.extend(lacks(
        &v["member"],
        &format!("{at}.member"),
        INTERACTION_MEMBER,
    ));
    e.extend(user(&v["member"]["user"], &format!("{at}.member.user")));
    if let Some(m) = v.get("message").filter(|m| !m.is_null()) {
        e.extend(message(m, &format!("{at}.message"), false));
    }
    e
}

/// Any dispatch `d` of type `t` the node sends a bot; `None` for types
/// without a list here (tests/twilight.rs and tests/discord_py.rs check
/// the rest with the libraries themselves).
pub fn dispatch(t: &str, d: &Value) -> Option<Vec<String>> {
    let at = t;
    Some(match t {
        "READY" => ready(d, at),
        "GUILD_CREATE" => guild_create(d, at),
        "GUILD_MEMBERS_CHUNK" => {
            let mut e = lacks(
                d,
                at,
                &["guild_id", "members", "chunk_index", "chunk_count"],
            );
            for (i, m) in d["members"].as_array().into_iter().flatten().enumerate() {
                e.extend(member(m, &format!("{at}.members[{i}]")));
            }
            e
        }
        "MESSAGE_CREATE" | "MESSAGE_UPDATE" => message(d, at, true),
        "MESSAGE_DELETE" => lacks(d, at, MESSAGE_DELETE),
        "MESSAGE_DELETE_BULK" => lacks(d, at, MESSAGE_DELETE_BULK),
        "MESSAGE_REACTION_ADD" => {
            let mut e = lacks(d, at, REACTION_ADD);
            e.extend(lacks(&d["emoji"], &format!("{at}.emoji"), &["id", "name"]));
            e.extend(member(&d["member"], &format!("{at}.member")));
            e
        }
        "MESSAGE_REACTION_REMOVE" => {
            let mut e = lacks(d, at, REACTION_REMOVE);
            e.extend(lacks(&d["emoji"], &format!("{at}.emoji"), &["id", "name"]));
            e
        }
        "TYPING_START" => {
            let mut e = lacks(d, at, TYPING_START);
            e.extend(member(&d["member"], &format!("{at}.member")));
            e
        }
        "INTERACTION_CREATE" => interaction(d, at),
        "GUILD_MEMBER_ADD" | "GUILD_MEMBER_UPDATE" => {
            let mut e = member(d, at);
            e.extend(lacks(d, at, &["guild_id"]));
            e
        }
        "GUILD_MEMBER_REMOVE" | "GUILD_BAN_ADD" | "GUILD_BAN_REMOVE" => {
            let mut e = lacks(d, at, &["guild_id", "user"]);
            e.extend(user(&d["user"], &format!("{at}.user")));
            e
        }
        _ => return None,
    })
}
