//! A user object's two faces: the whole one only its owner sees (READY's
//! `user`, `GET /users/@me`) and the partial one everyone else gets (an
//! `author`, a `member.user`, `mentions[]`, a reactor, `application.bot`).
//! A leaf: `guild`, `payload` and `bot_user` take the split from here.

use serde_json::Value;

/// The fields of a user object only its owner sees (Discord sends them in
/// READY's `user` and `GET /users/@me`, never in a partial user: an
/// `author`, a `member.user`, `mentions[]`, a reactor, `application.bot`).
pub const PRIVATE_USER_FIELDS: [&str; 6] = [
    "email",
    "verified",
    "mfa_enabled",
    "locale",
    "premium_type",
    "flags",
];

/// The partial (public) user of a user object: the same without
/// `PRIVATE_USER_FIELDS`.
pub fn public_user(user: &Value) -> Value {
    let mut v = user.clone();
    if let Some(o) = v.as_object_mut() {
        for k in PRIVATE_USER_FIELDS {
            o.remove(k);
        }
    }
    v
}
