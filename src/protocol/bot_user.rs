//! The acting bot's user object: the author of every message a bot posts,
//! the reactor of its reactions, the typer of its TYPING_START (all three
//! the partial user, `public_*`: what others see of it, with no private
//! field), `GET /users/@me` (the whole object, `own_json`: what the bot
//! sees of itself, as READY's `user`).
//!
//! It has ONE source: the registry's record of the application's bot user
//! (`BotUser::of`). A request never carries its own copy to be trusted, and
//! nothing keyed by user id keeps a JSON text it was handed first: an
//! interaction refused before the registry answered once sent the chat
//! service `"{}"`, which a per-user cache kept as the bot's author from
//! then on (issue 26). The one other way in is `BotUser::parse`, for a copy
//! the node wrote itself (an open interaction in the shared store), and it
//! refuses an object without the fields below.
//!
//! `REQUIRED` is the field list of a user object in docs/rest.md ("Field
//! lists"): what discord.py, serenity, discord.js and twilight-model
//! require of `author`, `user` and `member.user`.

use std::sync::Arc;

use registry::model::Application;
use serde_json::Value;

/// Every user object the node sends has these fields (docs/rest.md).
pub const REQUIRED: [&str; 5] = ["id", "username", "discriminator", "global_name", "avatar"];

/// Why a user object is not one the node may send as a bot's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invalid {
    /// Not JSON, or not an object.
    NotAnObject,
    /// A field of `REQUIRED` is absent.
    Missing(&'static str),
    /// `id` is not a snowflake string, or `username` not a non-empty string.
    BadField(&'static str),
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Invalid::NotAnObject => write!(f, "a bot user must be a JSON object"),
            Invalid::Missing(k) => write!(f, "a bot user object lacks `{k}`"),
            Invalid::BadField(k) => write!(f, "a bot user object has a malformed `{k}`"),
        }
    }
}

/// A checked bot user object, shared (cloning is a reference count).
#[derive(Clone, Debug)]
pub struct BotUser(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    id: u64,
    /// The whole object, private fields included.
    own_json: Box<str>,
    /// The partial user (`user::public_user`).
    public: Value,
    public_json: Box<str>,
}

impl BotUser {
    /// The application's bot user, as the registry records it.
    pub fn of(app: &Application) -> BotUser {
        BotUser::new(app.bot_user_id, &app.bot_username)
    }

    /// A bot user of the registry's shape (`guild::bot_user_object`).
    pub fn new(id: u64, username: &str) -> BotUser {
        let value = crate::protocol::guild::bot_user_object(id, username);
        BotUser::checked(value).expect("the registry's bot user has every field")
    }

    /// A copy the node wrote itself, read back (e.g. from the shared store).
    pub fn parse(json: &str) -> Result<BotUser, Invalid> {
        let value: Value = serde_json::from_str(json).map_err(|_| Invalid::NotAnObject)?;
        BotUser::checked(value)
    }

    fn checked(value: Value) -> Result<BotUser, Invalid> {
        let id = check_user(&value)?;
        let own_json = value.to_string().into_boxed_str();
        let public = crate::protocol::user::public_user(&value);
        let public_json = public.to_string().into_boxed_str();
        Ok(BotUser(Arc::new(Inner {
            id,
            own_json,
            public,
            public_json,
        })))
    }

    pub fn id(&self) -> u64 {
        self.0.id
    }

    /// The partial user: what others see of the bot (an `author`, a
    /// `member.user`, a reactor).
    pub fn public_value(&self) -> &Value {
        &self.0.public
    }

    /// The partial user as JSON text.
    pub fn public_json(&self) -> &str {
        &self.0.public_json
    }

    /// The whole object, private fields included: only for the bot itself
    /// (`GET /users/@me`), and the copy the node keeps to read back.
    pub fn own_json(&self) -> &str {
        &self.0.own_json
    }
}

/// Checks a user object against `REQUIRED`; its id.
pub fn check_user(v: &Value) -> Result<u64, Invalid> {
    let o = v.as_object().ok_or(Invalid::NotAnObject)?;
    for k in REQUIRED {
        if !o.contains_key(k) {
            return Err(Invalid::Missing(k));
        }
    }
    if o["username"].as_str().is_none_or(str::is_empty) {
        return Err(Invalid::BadField("username"));
    }
    o["id"]
        .as_str()
        .and_then(|s| s.parse::<u64>().ok())
        .filter(|&id| id > 0)
        .ok_or(Invalid::BadField("id"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app() -> Application {
        Application {
            id: 1_180_000_000_000_000_100,
            name: "b".into(),
            bot_user_id: 1_180_000_000_000_000_101,
            bot_username: "b".into(),
            approved_intents: 0,
            requested_intents: 0,
            max_concurrency: 1,
            session_start_total: 1000,
            flags: 0,
        }
    }

    #[test]
    fn the_registry_s_bot_user_has_every_required_field() {
        let b = BotUser::of(&app());
        assert_eq!(b.id(), 1_180_000_000_000_000_101);
        for k in REQUIRED {
            assert!(b.public_value().get(k).is_some(), "{k}");
        }
        assert_eq!(b.public_value()["bot"], true);
        let again = BotUser::parse(b.own_json()).unwrap();
        assert_eq!(again.own_json(), b.own_json());
        assert_eq!(again.public_value(), b.public_value());
    }

    #[test]
    fn others_see_the_partial_user_the_bot_sees_itself_whole() {
        let b = BotUser::of(&app());
        let own: Value = serde_json::from_str(b.own_json()).unwrap();
        for k in crate::protocol::user::PRIVATE_USER_FIELDS {
            assert!(b.public_value().get(k).is_none(), "{k} in a partial user");
            let text: Value = serde_json::from_str(b.public_json()).unwrap();
            assert!(text.get(k).is_none(), "{k} in a partial user's text");
        }
        // READY's user (PROTOCOL.md) keeps the private ones.
        for k in [
            "id",
            "username",
            "discriminator",
            "avatar",
            "bot",
            "mfa_enabled",
            "flags",
        ] {
            assert!(own.get(k).is_some(), "{k} missing from the bot's own user");
        }
    }

    #[test]
    fn an_object_without_the_fields_is_refused() {
        assert_eq!(BotUser::parse("{}").unwrap_err(), Invalid::Missing("id"));
        assert_eq!(BotUser::parse("").unwrap_err(), Invalid::NotAnObject);
        assert_eq!(BotUser::parse("null").unwrap_err(), Invalid::NotAnObject);
        assert_eq!(
            BotUser::parse(r#"{"id":"7"}"#).unwrap_err(),
            Invalid::Missing("username")
        );
        let no_name =
            r#"{"id":"7","username":"","discriminator":"0","global_name":null,"avatar":null}"#;
        assert_eq!(
            BotUser::parse(no_name).unwrap_err(),
            Invalid::BadField("username")
        );
        let bad_id =
            r#"{"id":7,"username":"b","discriminator":"0","global_name":null,"avatar":null}"#;
        assert_eq!(BotUser::parse(bad_id).unwrap_err(), Invalid::BadField("id"));
    }
}
