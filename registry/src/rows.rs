//! Stored rows turned into the model, the same way on either backend.
//!
//! Both store u64 ids and bitsets as the i64 bit pattern (SQLite INTEGER,
//! PostgreSQL BIGINT) through [`to_i`] and [`to_u`]. A backend reads a row's
//! columns (selected in the order of the `*_COLS` lists) with its driver,
//! narrowing the small ones (u32, u8) as its column types need, and hands
//! the plain values to the functions here.

use crate::model::*;
use crate::{revocation::Revocation, revocation::RevocationRecord};

pub(crate) fn to_i(v: u64) -> i64 {
    v as i64
}
pub(crate) fn to_u(v: i64) -> u64 {
    v as u64
}

pub(crate) const APP_COLS: &str = "id, name, bot_user_id, bot_username, approved_intents, \
                                   max_concurrency, session_start_total, flags, requested_intents";
/// [`APP_COLS`].
pub(crate) type AppRow = (i64, String, i64, String, i64, u32, u32, i64, i64);

pub(crate) fn application(r: AppRow) -> Application {
    let (id, name, bot_user_id, bot_username, approved, max_concurrency, total, flags, requested) =
        r;
    Application {
        id: to_u(id),
        name,
        bot_user_id: to_u(bot_user_id),
        bot_username,
        approved_intents: to_u(approved),
        requested_intents: to_u(requested),
        max_concurrency,
        session_start_total: total,
        flags: to_u(flags),
    }
}

pub(crate) const DEVELOPER_COLS: &str = "id, name, created_at_ms";

/// A `developers` row ([`DEVELOPER_COLS`]).
pub(crate) fn developer((id, name, created_at_ms): (i64, String, i64)) -> Developer {
    Developer {
        id: to_u(id),
        name,
        created_at_ms: to_u(created_at_ms),
    }
}

pub(crate) const SERVER_COLS: &str = "id, name, owner_id, created_at_ms";
/// [`SERVER_COLS`].
pub(crate) type ServerRow = (i64, String, i64, i64);

pub(crate) fn server((id, name, owner_id, created_at_ms): ServerRow) -> Server {
    Server {
        id: to_u(id),
        name,
        owner_id: to_u(owner_id),
        created_at_ms: to_u(created_at_ms),
    }
}

pub(crate) const ROLE_COLS: &str =
    "id, server_id, name, permissions, position, color, hoist, mentionable, managed";
/// [`ROLE_COLS`].
pub(crate) type RoleRow = (i64, i64, String, i64, i32, u32, bool, bool, bool);

pub(crate) fn role(r: RoleRow) -> Role {
    let (id, server_id, name, permissions, position, color, hoist, mentionable, managed) = r;
    Role {
        id: to_u(id),
        server_id: to_u(server_id),
        name,
        permissions: to_u(permissions),
        position,
        color,
        hoist,
        mentionable,
        managed,
    }
}

pub(crate) const CHANNEL_COLS: &str = "id, server_id, name, kind, position, parent_id, topic";
/// [`CHANNEL_COLS`].
pub(crate) type ChannelRow = (i64, i64, String, u8, i32, Option<i64>, Option<String>);

pub(crate) fn channel(r: ChannelRow) -> Channel {
    let (id, server_id, name, kind, position, parent_id, topic) = r;
    Channel {
        id: to_u(id),
        server_id: to_u(server_id),
        name,
        kind,
        position,
        parent_id: parent_id.map(to_u),
        topic,
    }
}

/// (target_id, target_kind, allow, deny) of an `overwrites` row.
pub(crate) fn overwrite(target_id: i64, kind: u8, allow: i64, deny: i64) -> Overwrite {
    Overwrite {
        target_id: to_u(target_id),
        // Only 0/1 are ever written; anything else is treated as a member.
        kind: OverwriteKind::from_u8(kind).unwrap_or(OverwriteKind::Member),
        allow: to_u(allow),
        deny: to_u(deny),
    }
}

/// An `installations` row (permissions, managed_role_id, installed_at_ms)
/// of `application_id` in `server_id`, with its roles (ascending).
pub(crate) fn installation(
    application_id: u64,
    server_id: u64,
    (permissions, managed_role_id, installed_at_ms): (i64, Option<i64>, i64),
    role_ids: Vec<u64>,
) -> Installation {
    Installation {
        application_id,
        server_id,
        permissions: to_u(permissions),
        role_ids,
        managed_role_id: managed_role_id.map(to_u),
        installed_at_ms: to_u(installed_at_ms),
    }
}

/// A `revocations` row (id, at_ms, kind, application_id, server_id); None
/// for a kind this build does not know.
pub(crate) fn revocation(
    (id, at_ms, kind, application_id, server_id): (i64, i64, u8, i64, i64),
) -> Option<RevocationRecord> {
    let revocation = Revocation::from_parts(kind, to_u(application_id), to_u(server_id))?;
    Some(RevocationRecord {
        id: to_u(id),
        at_ms: to_u(at_ms),
        revocation,
    })
}

pub(crate) const COMMAND_COLS: &str = "id, application_id, guild_id, name, description, kind, \
                                       options, default_member_permissions, nsfw, version";
/// [`COMMAND_COLS`].
pub(crate) type CommandRow = (
    i64,
    i64,
    i64,
    String,
    String,
    u8,
    String,
    Option<i64>,
    bool,
    i64,
);

pub(crate) fn command(r: CommandRow) -> Command {
    let (id, app, guild, name, description, kind, options, perms, nsfw, version) = r;
    Command {
        id: to_u(id),
        application_id: to_u(app),
        guild_id: (guild != 0).then_some(to_u(guild)),
        name,
        description,
        kind,
        options_json: options,
        default_member_permissions: perms.map(to_u),
        nsfw,
        version: to_u(version),
    }
}

pub(crate) const INTERACTION_COLS: &str = "id, application_id, token_digest, state, opened_at_ms, \
                                           expires_at_ms, node, detail, original_id, followups";
/// [`INTERACTION_COLS`] (the state widened to i64).
pub(crate) type InteractionRow = (
    i64,
    i64,
    Vec<u8>,
    i64,
    i64,
    i64,
    String,
    String,
    Option<i64>,
    String,
);

pub(crate) fn pending_interaction(r: InteractionRow) -> PendingInteraction {
    let (id, app, digest, state, opened, expires, node, detail, original, followups) = r;
    let mut token_digest = [0u8; 32];
    if digest.len() == 32 {
        token_digest.copy_from_slice(&digest);
    }
    PendingInteraction {
        id: to_u(id),
        application_id: to_u(app),
        token_digest,
        state: u8::try_from(state).unwrap_or(interaction_state::FAILED),
        opened_at_ms: to_u(opened),
        expires_at_ms: to_u(expires),
        node,
        detail,
        original_id: original.map(to_u),
        followups: followups
            .split(',')
            .filter_map(|s| s.parse().ok())
            .collect(),
    }
}

/// Follow-up ids as stored (comma-separated).
pub(crate) fn followups_text(ids: &[u64]) -> String {
    ids.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}
