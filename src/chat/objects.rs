//! The JSON shapes the chat service answers and commits: message objects
//! (as REST returns them; the event adds `guild_id` and `member`), emoji,
//! and the `d` of each event it produces.

use serde_json::{json, Value};

use crate::api::body::MessageDraft;
use crate::protocol::payload::{iso8601, Iso8601};

pub const MESSAGE_DEFAULT: u8 = 0;
pub const MESSAGE_REPLY: u8 = 19;
/// A message answering a slash command.
pub const MESSAGE_CHAT_INPUT_COMMAND: u8 = 20;

/// A user known only by id (a mention, a reactor that is not the caller).
pub fn user_stub(id: u64) -> Value {
    json!({"id": id.to_string(), "username": format!("user-{id}"), "discriminator": "0",
           "global_name": null, "avatar": null, "public_flags": 0})
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
    /// The author's user object, as JSON (`BotUser::json`).
    pub author: &'a str,
    pub draft: &'a MessageDraft,
    pub now_ms: u64,
    pub mentions: &'a [u64],
    /// The message replied to: (its id, its object as JSON, `null` when it
    /// is not in the window).
    pub reply_to: Option<(u64, &'a [u8])>,
    pub guild: u64,
}

/// A JSON string (escaped as serde_json escapes it).
fn put_str(out: &mut Vec<u8>, s: &str) {
    serde_json::to_writer(&mut *out, s).expect("a string serialises");
}

fn put_value<T: serde::Serialize + ?Sized>(out: &mut Vec<u8>, v: &T) {
    serde_json::to_writer(&mut *out, v).expect("a value serialises");
}

/// Append a message object, as `POST /channels/{id}/messages` answers it,
/// to `out`: written directly (no `serde_json::Value` on the commit path),
/// its fields in the platform's order.
pub fn write_message(m: &NewMessage, out: &mut Vec<u8>) {
    use std::io::Write;
    let kind = if m.draft.interaction.is_some() {
        MESSAGE_CHAT_INPUT_COMMAND
    } else if m.reply_to.is_some() {
        MESSAGE_REPLY
    } else {
        MESSAGE_DEFAULT
    };
    let w = "writing to a Vec cannot fail";
    write!(out, r#"{{"id":"{}","type":{kind}"#, m.id).expect(w);
    if let Some((meta, app)) = &m.draft.interaction {
        // `interaction_metadata` and the older `interaction` object.
        if let Some(fields) = meta.as_object() {
            for (k, v) in fields {
                out.push(b',');
                put_str(out, k);
                out.push(b':');
                put_value(out, v);
            }
        }
        write!(out, r#","application_id":"{app}","webhook_id":"{app}""#).expect(w);
    }
    write!(out, r#","channel_id":"{}","author":"#, m.channel).expect(w);
    out.extend_from_slice(m.author.as_bytes());
    out.extend_from_slice(br#","content":"#);
    put_str(out, m.draft.content.as_deref().unwrap_or(""));
    write!(
        out,
        r#","timestamp":"{}","edited_timestamp":null,"tts":false,"mention_everyone":false,"mentions":["#,
        Iso8601(m.now_ms)
    )
    .expect(w);
    for (i, &u) in m.mentions.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        put_value(out, &user_stub(u));
    }
    out.extend_from_slice(
        br#"],"mention_roles":[],"mention_channels":[],"attachments":[],"embeds":"#,
    );
    match &m.draft.embeds {
        Some(e) => put_value(out, e),
        None => out.extend_from_slice(b"[]"),
    }
    out.extend_from_slice(br#","components":"#);
    match &m.draft.components {
        Some(c) => put_value(out, c),
        None => out.extend_from_slice(b"[]"),
    }
    write!(out, r#","pinned":false,"flags":{}"#, m.draft.flags).expect(w);
    if let Some(n) = &m.draft.nonce {
        out.extend_from_slice(br#","nonce":"#);
        put_value(out, n);
    }
    if let Some((rid, obj)) = m.reply_to {
        write!(
            out,
            r#","message_reference":{{"type":0,"message_id":"{rid}","channel_id":"{}","guild_id":"{}"}},"referenced_message":"#,
            m.channel, m.guild
        )
        .expect(w);
        out.extend_from_slice(if obj.is_empty() { b"null" } else { obj });
    }
    out.push(b'}');
}

/// The same message object as a `Value` (the interaction paths, which
/// edit it further).
pub fn message(m: &NewMessage) -> Value {
    let mut out = Vec::with_capacity(512);
    write_message(m, &mut out);
    serde_json::from_slice(&out).expect("write_message writes JSON")
}

/// The `d` of MESSAGE_CREATE / MESSAGE_UPDATE from the message's JSON: the
/// same object with the server and the author's member object spliced in
/// before its closing brace (no second serialisation of the message).
/// A direct message (`guild` 0) has neither: it is the message as is.
pub fn message_event(message: &[u8], guild: u64, now_ms: u64) -> Vec<u8> {
    let mut d = Vec::with_capacity(message.len() + 320);
    write_message_event(message, guild, now_ms, &mut d);
    d
}

/// `message_event` into `out` (cleared first).
pub fn write_message_event(message: &[u8], guild: u64, now_ms: u64, out: &mut Vec<u8>) {
    use std::io::Write;
    debug_assert!(message.starts_with(b"{") && message.ends_with(b"}"));
    out.clear();
    if guild == 0 {
        out.extend_from_slice(message);
        return;
    }
    out.extend_from_slice(&message[..message.len() - 1]);
    // `bot_member`, written directly.
    write!(
        out,
        r#","guild_id":"{guild}","member":{{"roles":[],"joined_at":"{}","deaf":false,"mute":false,"flags":0,"pending":false,"premium_since":null,"nick":null,"avatar":null,"communication_disabled_until":null}}}}"#,
        Iso8601(now_ms)
    )
    .expect("writing to a Vec cannot fail");
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
        assert_eq!(
            d["member"],
            bot_member(0),
            "the member object, as `bot_member`"
        );
    }

    #[test]
    fn the_written_message_is_the_platforms_object() {
        let draft = MessageDraft {
            content: Some("hi \"<@5>\"\n".into()),
            embeds: Some(vec![json!({"title": "t"})]),
            nonce: Some(json!("n1")),
            flags: 4,
            ..Default::default()
        };
        let author = r#"{"id":"9","username":"b"}"#;
        let m = message(&NewMessage {
            id: 11,
            channel: 22,
            author,
            draft: &draft,
            now_ms: 0,
            mentions: &[5],
            reply_to: Some((3, b"null")),
            guild: 33,
        });
        assert_eq!(m["id"], "11");
        assert_eq!(m["type"], MESSAGE_REPLY);
        assert_eq!(m["channel_id"], "22");
        assert_eq!(m["author"]["id"], "9");
        assert_eq!(m["content"], "hi \"<@5>\"\n");
        assert_eq!(m["mentions"][0], user_stub(5));
        assert_eq!(m["embeds"][0]["title"], "t");
        assert_eq!(m["components"], json!([]));
        assert_eq!(m["nonce"], "n1");
        assert_eq!(m["flags"], 4);
        assert_eq!(m["edited_timestamp"], Value::Null);
        assert_eq!(m["message_reference"]["message_id"], "3");
        assert_eq!(m["message_reference"]["guild_id"], "33");
        assert_eq!(m["referenced_message"], Value::Null);
        for k in [
            "timestamp",
            "tts",
            "mention_everyone",
            "mention_roles",
            "mention_channels",
            "attachments",
            "pinned",
        ] {
            assert!(m.get(k).is_some(), "{k}");
        }
    }

    #[test]
    fn emoji_objects() {
        assert_eq!(emoji("\u{1F44D}"), json!({"id": null, "name": "\u{1F44D}"}));
        assert_eq!(emoji("blob:123"), json!({"id": "123", "name": "blob"}));
    }
}
