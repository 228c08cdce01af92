//! The objects a bot sees of the registry's view of a server: its bot
//! user and the GUILD_CREATE `d`, with every field the real libraries
//! (twilight-model, discord.py, discord.js) require.

use registry::model::{Application, Installation, ServerSnapshot};
use serde_json::{json, Value};

use crate::protocol::payload::iso8601;
use crate::protocol::user::public_user;

/// The bot's own user object, private fields included (READY's `user`,
/// `GET /users/@me`: what a bot sees of itself).
pub fn bot_user(app: &Application) -> Value {
    bot_user_object(app.bot_user_id, &app.bot_username)
}

/// The bot's user as others see it (its messages' `author`, its
/// `member.user`).
pub fn bot_user_public(app: &Application) -> Value {
    public_user(&bot_user(app))
}

/// A bot user object of the registry's shape (`bot_user::BotUser` holds
/// one, checked).
pub fn bot_user_object(id: u64, username: &str) -> Value {
    json!({
        "id": id.to_string(),
        "username": username,
        "discriminator": "0",
        "global_name": null,
        "avatar": null,
        "bot": true,
        "system": false,
        "mfa_enabled": false,
        "verified": true,
        "email": null,
        "flags": 0,
        "public_flags": 0,
        "banner": null,
        "accent_color": null,
    })
}

/// The GUILD_CREATE `d` for a server: every field twilight-model and
/// discord.py require, with the bot as the one listed member.
/// `managed` maps each managed role to the application (bot user) owning it.
pub fn guild_create(
    snap: &ServerSnapshot,
    inst: &Installation,
    app: &Application,
    managed: &[(u64, u64)],
) -> Value {
    let s = &snap.server;
    let roles: Vec<Value> = snap.roles.iter().map(|r| role(r, managed)).collect();
    let channels: Vec<Value> = snap.channels.iter().map(|c| channel(c, s.id)).collect();
    let joined = iso8601(inst.installed_at_ms);
    json!({
        "id": s.id.to_string(),
        "name": s.name,
        "icon": null,
        "icon_hash": null,
        "splash": null,
        "discovery_splash": null,
        "banner": null,
        "description": null,
        // Clients reject a zero snowflake; servers made without an owner name themselves.
        "owner_id": if s.owner_id == 0 { s.id } else { s.owner_id }.to_string(),
        "afk_channel_id": null,
        "afk_timeout": 300,
        "widget_enabled": false,
        "verification_level": 0,
        "default_message_notifications": 0,
        "explicit_content_filter": 0,
        "mfa_level": 0,
        "nsfw_level": 0,
        "premium_tier": 0,
        "premium_subscription_count": 0,
        "premium_progress_bar_enabled": false,
        "preferred_locale": "en-US",
        "system_channel_id": null,
        "system_channel_flags": 0,
        "rules_channel_id": null,
        "public_updates_channel_id": null,
        "safety_alerts_channel_id": null,
        "vanity_url_code": null,
        "application_id": null,
        "max_members": 500000,
        "max_video_channel_users": 25,
        "features": [],
        "emojis": [],
        "stickers": [],
        "roles": roles,
        "channels": channels,
        "threads": [],
        "members": [member_object(bot_user_public(app), None, &inst.role_ids, inst.installed_at_ms)],
        "member_count": 2,
        "presences": [],
        "voice_states": [],
        "stage_instances": [],
        "guild_scheduled_events": [],
        "soundboard_sounds": [],
        "large": false,
        "unavailable": false,
        "lazy": true,
        "joined_at": joined,
        "incidents_data": null,
    })
}

/// A person's user object.
pub fn person(u: &registry::model::User) -> Value {
    json!({
        "id": u.id.to_string(),
        "username": u.username,
        "discriminator": "0",
        "global_name": u.global_name,
        "avatar": null,
        "bot": false,
        "public_flags": 0,
    })
}

/// A guild member object around a user object (a person's or a bot's).
pub fn member_object(user: Value, nick: Option<&str>, role_ids: &[u64], joined_ms: u64) -> Value {
    json!({
        "user": user,
        "nick": nick,
        "avatar": null,
        "roles": role_ids.iter().map(|r| r.to_string()).collect::<Vec<_>>(),
        "joined_at": iso8601(joined_ms),
        "premium_since": null,
        "deaf": false,
        "mute": false,
        "pending": false,
        "flags": 0,
        "communication_disabled_until": null,
    })
}

/// A person's member object.
pub fn member(m: &registry::model::Member) -> Value {
    member_object(
        person(&m.user),
        m.nick.as_deref(),
        &m.role_ids,
        m.joined_at_ms,
    )
}

/// A role object; `managed` maps each managed role to its bot user.
pub fn role(r: &registry::model::Role, managed: &[(u64, u64)]) -> Value {
    json!({
        "id": r.id.to_string(),
        "name": r.name,
        "permissions": r.permissions.to_string(),
        "position": r.position,
        "color": r.color,
        "colors": {"primary_color": r.color, "secondary_color": null, "tertiary_color": null},
        "hoist": r.hoist,
        "managed": r.managed,
        "mentionable": r.mentionable,
        "icon": null,
        "unicode_emoji": null,
        "flags": 0,
        "tags": match managed.iter().find(|(role, _)| *role == r.id) {
            Some((_, bot)) => json!({"bot_id": bot.to_string()}),
            None => json!({}),
        },
    })
}

/// A server channel object with its overwrites.
pub fn channel(c: &registry::model::ChannelWithOverwrites, server_id: u64) -> Value {
    let ch = &c.channel;
    let overwrites: Vec<Value> = c
        .overwrites
        .iter()
        .map(|o| {
            json!({
                "id": o.target_id.to_string(),
                "type": o.kind.as_u8(),
                "allow": o.allow.to_string(),
                "deny": o.deny.to_string(),
            })
        })
        .collect();
    json!({
        "id": ch.id.to_string(),
        "type": ch.kind,
        "guild_id": server_id.to_string(),
        "name": ch.name,
        "position": ch.position,
        "parent_id": ch.parent_id.map(|p| p.to_string()),
        "topic": ch.topic,
        "nsfw": false,
        "rate_limit_per_user": 0,
        "last_message_id": null,
        "permission_overwrites": overwrites,
        "flags": 0,
    })
}

/// The guild object `GET /guilds/{id}` answers: GUILD_CREATE without the
/// gateway-only fields.
pub fn guild_rest(
    snap: &ServerSnapshot,
    inst: &Installation,
    app: &Application,
    managed: &[(u64, u64)],
) -> Value {
    let mut g = guild_create(snap, inst, app, managed);
    if let Value::Object(o) = &mut g {
        for k in [
            "channels",
            "threads",
            "members",
            "member_count",
            "presences",
            "voice_states",
            "stage_instances",
            "guild_scheduled_events",
            "soundboard_sounds",
            "large",
            "unavailable",
            "lazy",
            "joined_at",
        ] {
            o.remove(k);
        }
        o.insert("approximate_member_count".into(), json!(2));
    }
    g
}
