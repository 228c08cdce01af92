//! People: users, memberships with their roles, bans and direct-message
//! channels, written once for both backends (as `crate::ops` is for
//! servers): a backend implements [`MemberStore`], one method per
//! statement; the checks and the order of the steps are here.
//!
//! Rules (the platform's):
//! - a member's roles are roles of the member's server, never `@everyone`
//!   (every member has it implicitly) and never a managed role (a bot's);
//! - a banned user cannot be added as a member; a ban removes the
//!   membership; banning needs no membership (any known user id);
//! - one channel per pair of users for direct messages, stored low id
//!   first.

use crate::model::*;
use crate::ops::{require_server, ServerStore};
use crate::validate::validate_name;
use crate::{error::RegistryError, error::Result, snowflake};

/// The statements behind the member operations.
pub(crate) trait MemberStore: ServerStore {
    fn user(&mut self, id: u64) -> Result<Option<User>>;
    fn insert_user(&mut self, user: &User, created_at_ms: u64) -> Result<()>;
    /// (nick, joined_at_ms) of one membership.
    fn membership(&mut self, server_id: u64, user_id: u64)
        -> Result<Option<(Option<String>, u64)>>;
    /// The member's role ids, ascending.
    fn member_role_ids(&mut self, server_id: u64, user_id: u64) -> Result<Vec<u64>>;
    /// Members with user id > `after`, ascending, at most `limit`, as
    /// (user, nick, joined_at_ms).
    fn members_page(
        &mut self,
        server_id: u64,
        after: u64,
        limit: u32,
    ) -> Result<Vec<(User, Option<String>, u64)>>;
    /// (user id, role id) of the members with `after < user id <= upto`.
    fn member_roles_between(
        &mut self,
        server_id: u64,
        after: u64,
        upto: u64,
    ) -> Result<Vec<(u64, u64)>>;
    fn insert_member(&mut self, server_id: u64, user_id: u64, joined_at_ms: u64) -> Result<()>;
    /// Also removes its roles. False if there was none.
    fn delete_member(&mut self, server_id: u64, user_id: u64) -> Result<bool>;
    /// False if the member already had it.
    fn insert_member_role(&mut self, server_id: u64, user_id: u64, role_id: u64) -> Result<bool>;
    fn delete_member_role(&mut self, server_id: u64, user_id: u64, role_id: u64) -> Result<bool>;
    fn clear_member_roles(&mut self, server_id: u64, user_id: u64) -> Result<()>;
    fn is_banned(&mut self, server_id: u64, user_id: u64) -> Result<bool>;
    /// False if already banned.
    fn insert_ban(
        &mut self,
        server_id: u64,
        user_id: u64,
        reason: Option<&str>,
        at_ms: u64,
    ) -> Result<bool>;
    fn delete_ban(&mut self, server_id: u64, user_id: u64) -> Result<bool>;
    fn dm_channel(&mut self, low: u64, high: u64) -> Result<Option<u64>>;
    fn insert_dm_channel(&mut self, id: u64, low: u64, high: u64) -> Result<()>;
    /// (channel id, the other user) of every DM channel `user_id` is in.
    fn dm_channels_of(&mut self, user_id: u64) -> Result<Vec<(u64, u64)>>;
}

fn require_user<S: MemberStore>(s: &mut S, id: u64) -> Result<User> {
    s.user(id)?
        .ok_or(RegistryError::NotFound { what: "user", id })
}

pub(crate) fn create_user<S: MemberStore>(s: &mut S, username: &str) -> Result<User> {
    validate_name("user", username)?;
    let user = User {
        id: snowflake::global().next_id(),
        username: username.to_owned(),
        global_name: None,
    };
    s.insert_user(&user, snowflake::unix_ms_now())?;
    Ok(user)
}

pub(crate) fn member<S: MemberStore>(
    s: &mut S,
    server_id: u64,
    user_id: u64,
) -> Result<Option<Member>> {
    let Some((nick, joined_at_ms)) = s.membership(server_id, user_id)? else {
        return Ok(None);
    };
    let user = require_user(s, user_id)?;
    let role_ids = s.member_role_ids(server_id, user_id)?;
    Ok(Some(Member {
        server_id,
        user,
        nick,
        role_ids,
        joined_at_ms,
    }))
}

fn require_member<S: MemberStore>(s: &mut S, server_id: u64, user_id: u64) -> Result<Member> {
    member(s, server_id, user_id)?.ok_or(RegistryError::NotFound {
        what: "member",
        id: user_id,
    })
}

pub(crate) fn list_members<S: MemberStore>(
    s: &mut S,
    server_id: u64,
    after: u64,
    limit: u32,
) -> Result<Vec<Member>> {
    let limit = limit.clamp(1, MAX_MEMBERS_PAGE);
    let page = s.members_page(server_id, after, limit)?;
    let Some(upto) = page.last().map(|(u, _, _)| u.id) else {
        return Ok(Vec::new());
    };
    let mut roles = s.member_roles_between(server_id, after, upto)?;
    roles.sort_unstable();
    Ok(page
        .into_iter()
        .map(|(user, nick, joined_at_ms)| {
            let lo = roles.partition_point(|&(u, _)| u < user.id);
            let hi = roles.partition_point(|&(u, _)| u <= user.id);
            Member {
                server_id,
                role_ids: roles[lo..hi].iter().map(|&(_, r)| r).collect(),
                user,
                nick,
                joined_at_ms,
            }
        })
        .collect())
}

pub(crate) fn add_member<S: MemberStore>(
    s: &mut S,
    server_id: u64,
    user_id: u64,
) -> Result<Member> {
    require_server(s, server_id)?;
    require_user(s, user_id)?;
    if s.is_banned(server_id, user_id)? {
        return Err(RegistryError::Invalid(format!(
            "user {user_id} is banned from server {server_id}"
        )));
    }
    if s.membership(server_id, user_id)?.is_none() {
        s.insert_member(server_id, user_id, snowflake::unix_ms_now())?;
    }
    require_member(s, server_id, user_id)
}

/// A role a member may be given: of the server, not `@everyone`, not managed.
fn assignable<S: MemberStore>(s: &mut S, server_id: u64, role_id: u64) -> Result<()> {
    match s.role(role_id)? {
        Some(r) if r.server_id == server_id && r.id != server_id && !r.managed => Ok(()),
        Some(_) => Err(RegistryError::Invalid(format!(
            "role {role_id} is @everyone, a bot's managed role, or not of server {server_id}"
        ))),
        None => Err(RegistryError::NotFound {
            what: "role",
            id: role_id,
        }),
    }
}

pub(crate) fn add_member_role<S: MemberStore>(
    s: &mut S,
    server_id: u64,
    user_id: u64,
    role_id: u64,
) -> Result<bool> {
    require_member(s, server_id, user_id)?;
    assignable(s, server_id, role_id)?;
    s.insert_member_role(server_id, user_id, role_id)
}

pub(crate) fn remove_member_role<S: MemberStore>(
    s: &mut S,
    server_id: u64,
    user_id: u64,
    role_id: u64,
) -> Result<bool> {
    require_member(s, server_id, user_id)?;
    s.delete_member_role(server_id, user_id, role_id)
}

pub(crate) fn set_member_roles<S: MemberStore>(
    s: &mut S,
    server_id: u64,
    user_id: u64,
    role_ids: &[u64],
) -> Result<Member> {
    require_member(s, server_id, user_id)?;
    for &r in role_ids {
        assignable(s, server_id, r)?;
    }
    s.clear_member_roles(server_id, user_id)?;
    for &r in role_ids {
        s.insert_member_role(server_id, user_id, r)?;
    }
    require_member(s, server_id, user_id)
}

pub(crate) fn ban<S: MemberStore>(
    s: &mut S,
    server_id: u64,
    user_id: u64,
    reason: Option<&str>,
) -> Result<BanOutcome> {
    require_server(s, server_id)?;
    require_user(s, user_id)?;
    let new = s.insert_ban(server_id, user_id, reason, snowflake::unix_ms_now())?;
    let was_member = s.delete_member(server_id, user_id)?;
    Ok(BanOutcome { new, was_member })
}

pub(crate) fn open_dm<S: MemberStore>(s: &mut S, a: u64, b: u64) -> Result<u64> {
    if a == b || a == 0 || b == 0 {
        return Err(RegistryError::Invalid(format!(
            "a direct message needs two users, not {a} and {b}"
        )));
    }
    let (low, high) = (a.min(b), a.max(b));
    if let Some(id) = s.dm_channel(low, high)? {
        return Ok(id);
    }
    let id = snowflake::global().next_id();
    s.insert_dm_channel(id, low, high)?;
    Ok(id)
}
