//! The JSON shapes the chat service answers and commits: message objects
//! (as REST returns them; the event adds `guild_id` and `member`), emoji,
//! and the `d` of each event it produces.

use serde_json::{json, Map, Value};

use crate::api::body::MessageDraft;
use crate::protocol::payload::iso8601;

pub const MESSAGE_DEFAULT: u8 = 0;
pub const MESSAGE_REPLY: u8 = 19;
/// A message answering a slash command.
pub const MESSAGE_CHAT_INPUT_COMMAND: u8 = 20;

/// A user known only by id (a mention, a reactor that is not the caller).
pub fn user_stub(id: u64) -> Value {
    json!({"id": id.to_string(), "username": format!("user-{id}"), "discriminator": "0",
           "global_name": null, "avatar": null, "public_flags": 0, "flags": 0})
}

/// The member object of a bot acting in a server, without `user` (as in
/// MESSAGE_CREATE, where the author is the user).
pub fn bot_member(now_ms: u64) -> Value {
    json!({"roles": [], "joined_at": iso8601(now_ms), "deaf": false, "mute": false, "flags": 0,
           "pending": false, "premium_since": null, "nick": null, "avatar": null,
           "communication_disabled_until": null})
}

/// `<@123>` and `<@!123>` in content, in order, without repeats, at most 100.
pub fn mentioned_users(content: &str) -> Vec<u64> {
    let mut out = Vec::new();
    let mut rest = content;
    while let Some(i) = rest.find("<@") {
        rest = &rest[i + 2..];
        let digits = rest.strip_prefix('!').unwrap_or(rest);
        let n = digits.bytes().take_while(u8::is_ascii_digit).count();
        if n > 0 && n <= 20 && digits[n..].starts_with('>') {
            if let Ok(id) = digits[..n].parse::<u64>() {
                if !out.contains(&id) && out.len() < 100 {
                    out.push(id);
                }
            }
        }
    }
    out
}

/// The users a message may ping, after `allowed_mentions` (absent: all
/// mentioned users; `parse` without "users": only those in `users`).
pub fn allowed_users(content: &str, allowed: Option<&Value>) -> Vec<u64> {
    let all = mentioned_users(content);
    let Some(a) = allowed else { return all };
    let parse_users = a
        .get("parse")
        .and_then(Value::as_array)
        .is_some_and(|p| p.iter().any(|v| v == "users"));
    if parse_users {
        return all;
    }
    let listed: Vec<u64> = a
        .get("users")
        .and_then(Value::as_array)
        .map(|u| u.iter().filter_map(crate::api::body::snowflake).collect())
        .unwrap_or_default();
    all.into_iter().filter(|id| listed.contains(id)).collect()
}

pub struct NewMessage<'a> {
    pub id: u64,
    pub channel: u64,
    pub author: &'a Value,
    pub draft: &'a MessageDraft,
    pub now_ms: u64,
    pub mentions: &'a [u64],
    /// The message replied to: (its id, its object).
    pub reply_to: Option<(u64, &'a Value)>,
    pub guild: u64,
}

/// A message object as `POST /channels/{id}/messages` answers it.
pub fn message(m: &NewMessage) -> Value {
    let mut o = Map::new();
    o.insert("id".into(), m.id.to_string().into());
    o.insert(
        "type".into(),
        if m.draft.interaction.is_some() {
            MESSAGE_CHAT_INPUT_COMMAND
        } else if m.reply_to.is_some() {
            MESSAGE_REPLY
        } else {
            MESSAGE_DEFAULT
        }
        .into(),
    );
    if let Some((meta, app)) = &m.draft.interaction {
        // `interaction_metadata` and the older `interaction` object.
        if let Some(fields) = meta.as_object() {
            o.extend(fields.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        o.insert("application_id".into(), app.to_string().into());
        o.insert("webhook_id".into(), app.to_string().into());
    }
    o.insert("channel_id".into(), m.channel.to_string().into());
    o.insert("author".into(), m.author.clone());
    o.insert(
        "content".into(),
        m.draft.content.clone().unwrap_or_default().into(),
    );
    o.insert("timestamp".into(), iso8601(m.now_ms).into());
    o.insert("edited_timestamp".into(), Value::Null);
    o.insert("tts".into(), false.into());
    o.insert("mention_everyone".into(), false.into());
    o.insert(
        "mentions".into(),
        m.mentions.iter().map(|&u| user_stub(u)).collect(),
    );
    o.insert("mention_roles".into(), json!([]));
    o.insert("mention_channels".into(), json!([]));
    o.insert("attachments".into(), json!([]));
    o.insert(
        "embeds".into(),
        m.draft.embeds.clone().unwrap_or_default().into(),
    );
    o.insert(
        "components".into(),
        m.draft.components.clone().unwrap_or_default().into(),
    );
    o.insert("pinned".into(), false.into());
    o.insert("flags".into(), m.draft.flags.into());
    if let Some(n) = &m.draft.nonce {
        o.insert("nonce".into(), n.clone());
    }
    if let Some((rid, obj)) = m.reply_to {
        o.insert(
            "message_reference".into(),
            json!({"type": 0, "message_id": rid.to_string(), "channel_id": m.channel.to_string(), "guild_id": m.guild.to_string()}),
        );
        o.insert("referenced_message".into(), obj.clone());
    }
    Value::Object(o)
}

/// The `d` of MESSAGE_CREATE / MESSAGE_UPDATE from the message's JSON: the
/// same object with the server and the author's member object spliced in
/// before its closing brace (no second serialisation of the message).
/// A direct message (`guild` 0) has neither: it is the message as is.
pub fn message_event(message: &[u8], guild: u64, now_ms: u64) -> Vec<u8> {
    debug_assert!(message.starts_with(b"{") && message.ends_with(b"}"));
    if guild == 0 {
        return message.to_vec();
    }
    let member = serde_json::to_string(&bot_member(now_ms)).expect("json");
    let mut d = Vec::with_capacity(message.len() + member.len() + 48);
    d.extend_from_slice(&message[..message.len() - 1]);
    d.extend_from_slice(format!(r#","guild_id":"{guild}","member":{member}}}"#).as_bytes());
    d
}

/// A message object with its current reactions, as REST reads answer it.
pub fn with_reactions(message: &Value, reactions: &[super::history::Reaction], me: u64) -> Value {
    if reactions.is_empty() {
        return message.clone();
    }
    let mut m = message.clone();
    if let Value::Object(o) = &mut m {
        let r: Vec<Value> = reactions
            .iter()
            .map(|r| {
                json!({"count": r.users.len(), "count_details": {"burst": 0, "normal": r.users.len()},
                       "me": r.users.contains(&me), "me_burst": false, "burst_colors": [],
                       "emoji": emoji(&r.emoji)})
            })
            .collect();
        o.insert("reactions".into(), r.into());
    }
    m
}

/// `name:id` is a custom emoji; anything else a unicode one.
pub fn emoji(e: &str) -> Value {
    match e.rsplit_once(':') {
        Some((name, id)) if !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) => {
            json!({"id": id, "name": name})
        }
        _ => json!({"id": null, "name": e}),
    }
}

/// The member object with its `user` (reactions and typing carry it;
/// discord.py reads `member.user`).
pub fn member_with_user(user_json: &Value, now_ms: u64) -> Value {
    let mut m = bot_member(now_ms);
    m["user"] = user_json.clone();
    m
}

#[allow(clippy::too_many_arguments)]
pub fn reaction_event(
    user: u64,
    user_json: &Value,
    channel: u64,
    message: u64,
    guild: u64,
    e: &str,
    author: Option<u64>,
    add: bool,
    now_ms: u64,
) -> Value {
    let mut d = json!({"user_id": user.to_string(), "channel_id": channel.to_string(),
                       "message_id": message.to_string(), "guild_id": guild.to_string(),
                       "emoji": emoji(e), "burst": false, "type": 0});
    if add {
        d["member"] = member_with_user(user_json, now_ms);
        d["burst_colors"] = json!([]);
        if let Some(a) = author {
            d["message_author_id"] = a.to_string().into();
        }
    }
    d
}

pub fn typing_event(user: u64, user_json: &Value, channel: u64, guild: u64, now_ms: u64) -> Value {
    json!({"user_id": user.to_string(), "channel_id": channel.to_string(), "guild_id": guild.to_string(),
           "timestamp": now_ms / 1000, "member": member_with_user(user_json, now_ms)})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mentions_and_allowed_mentions() {
        assert_eq!(
            mentioned_users("hi <@12> and <@!34>, <@12> <@x> <@56"),
            vec![12, 34]
        );
        assert_eq!(allowed_users("<@1> <@2>", None), vec![1, 2]);
        assert_eq!(
            allowed_users("<@1> <@2>", Some(&json!({"parse": []}))),
            Vec::<u64>::new()
        );
        assert_eq!(
            allowed_users("<@1> <@2>", Some(&json!({"parse": [], "users": ["2"]}))),
            vec![2]
        );
        assert_eq!(
            allowed_users("<@1>", Some(&json!({"parse": ["users"]}))),
            vec![1]
        );
    }

    #[test]
    fn the_event_is_the_message_with_guild_and_member() {
        let m = json!({"id": "1", "content": "hi"});
        let d: Value =
            serde_json::from_slice(&message_event(&serde_json::to_vec(&m).unwrap(), 7, 0)).unwrap();
        assert_eq!(d["id"], "1");
        assert_eq!(d["content"], "hi");
        assert_eq!(d["guild_id"], "7");
        assert!(d["member"]["roles"].is_array());
    }

    #[test]
    fn emoji_objects() {
        assert_eq!(emoji("\u{1F44D}"), json!({"id": null, "name": "\u{1F44D}"}));
        assert_eq!(emoji("blob:123"), json!({"id": "123", "name": "blob"}));
    }
}
