//! Who may see what: effective channel permissions (PROTOCOL.md,
//! "Permissions") and the per-event decision. Bitsets only; computed once
//! per identify (or snapshot change), never per event.

use crate::protocol::intents::{self, perm};
use proto::{ChannelId, ServerId};
use registry::model::{Installation, ServerSnapshot};
use registry::OverwriteKind;

use crate::protocol::session::{GuildAccess, Identity};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Role,
    Member,
}

#[derive(Clone, Copy, Debug)]
pub struct Overwrite {
    pub id: u64,
    pub target: Target,
    pub allow: u64,
    pub deny: u64,
}

/// The bot member's permissions in one channel of server `server_id`.
///
/// `everyone` is the @everyone role's permissions, `role_perms` those of the
/// member's roles. ADMINISTRATOR grants everything and skips overwrites. The
/// installation's `granted` bitset bounds the result.
pub fn channel_permissions(
    server_id: u64,
    member_id: u64,
    member_roles: &[u64],
    everyone: u64,
    role_perms: u64,
    overwrites: &[Overwrite],
    granted: u64,
) -> u64 {
    let bound = grant_bound(granted);
    let base = everyone | role_perms;
    if base & perm::ADMINISTRATOR != 0 {
        return perm::ALL & bound;
    }
    let mut p = base;
    // @everyone overwrite (its id is the server id), then roles, then member.
    if let Some(o) = overwrites
        .iter()
        .find(|o| o.target == Target::Role && o.id == server_id)
    {
        p = (p & !o.deny) | o.allow;
    }
    let (mut deny, mut allow) = (0u64, 0u64);
    for o in overwrites
        .iter()
        .filter(|o| o.target == Target::Role && o.id != server_id && member_roles.contains(&o.id))
    {
        deny |= o.deny;
        allow |= o.allow;
    }
    p = (p & !deny) | allow;
    if let Some(o) = overwrites
        .iter()
        .find(|o| o.target == Target::Member && o.id == member_id)
    {
        p = (p & !o.deny) | o.allow;
    }
    p & bound
}

/// What an installation's granted bitset lets through: a grant that
/// includes ADMINISTRATOR bounds nothing (an admin bot).
fn grant_bound(granted: u64) -> u64 {
    if granted & perm::ADMINISTRATOR != 0 {
        perm::ALL
    } else {
        granted
    }
}

/// The bot member's server-wide permissions (`channel_permissions` before
/// any overwrite): what the moderation routes need (MANAGE_ROLES,
/// KICK_MEMBERS, BAN_MEMBERS), from the same roles and granted bitset.
pub fn guild_permissions(everyone: u64, role_perms: u64, granted: u64) -> u64 {
    let base = everyone | role_perms;
    if base & perm::ADMINISTRATOR != 0 {
        perm::ALL & grant_bound(granted)
    } else {
        base & grant_bound(granted)
    }
}

/// The highest position among a member's roles (0: only `@everyone`).
pub fn top_position(snap: &ServerSnapshot, role_ids: &[u64]) -> i32 {
    snap.roles
        .iter()
        .filter(|r| role_ids.contains(&r.id))
        .map(|r| r.position)
        .max()
        .unwrap_or(0)
}

/// The role hierarchy: a bot acts on a member (kick, ban) or a role
/// (give, take) only if its own highest role is strictly above. The
/// server's owner is above everyone (and a bot never owns a server).
pub fn outranks(bot_top: i32, target_top: i32) -> bool {
    bot_top > target_top
}

/// The @everyone permissions and the union of `role_ids`' permissions.
fn role_bits(snap: &ServerSnapshot, role_ids: &[u64]) -> (u64, u64) {
    let everyone = snap
        .roles
        .iter()
        .find(|r| r.id == snap.server.id)
        .map(|r| r.permissions)
        .unwrap_or(0);
    let roles = snap
        .roles
        .iter()
        .filter(|r| role_ids.contains(&r.id))
        .fold(0, |acc, r| acc | r.permissions);
    (everyone, roles)
}

/// A person's permissions in a channel (an interaction's
/// `member.permissions`): their roles and the channel's overwrites, no
/// grant bounding them; the owner has every permission.
pub fn person_permissions(
    snap: &ServerSnapshot,
    ch: &registry::model::ChannelWithOverwrites,
    user_id: u64,
    role_ids: &[u64],
) -> u64 {
    if user_id == snap.server.owner_id {
        return perm::ALL;
    }
    let (everyone, roles) = role_bits(snap, role_ids);
    let ows: Vec<Overwrite> = ch.overwrites.iter().map(overwrite).collect();
    channel_permissions(
        snap.server.id,
        user_id,
        role_ids,
        everyone,
        roles,
        &ows,
        perm::ALL,
    )
}

fn overwrite(o: &registry::Overwrite) -> Overwrite {
    Overwrite {
        id: o.target_id,
        target: if o.kind == OverwriteKind::Member {
            Target::Member
        } else {
            Target::Role
        },
        allow: o.allow,
        deny: o.deny,
    }
}

/// An installed bot's server-wide permissions and rank in a server.
pub fn bot_standing(snap: &ServerSnapshot, inst: &Installation) -> (u64, i32) {
    let (everyone, roles) = role_bits(snap, &inst.role_ids);
    (
        guild_permissions(everyone, roles, inst.permissions),
        top_position(snap, &inst.role_ids),
    )
}

/// Why a bot may not act in (or see) a channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Denied {
    /// Not a channel of this server as the bot knows it.
    UnknownChannel,
    /// No VIEW_CHANNEL: the channel is invisible to the bot (REST 50001).
    NoAccess,
    /// Visible, but these required bits are missing (REST 50013).
    Missing(u64),
}

/// THE check, for events and for REST alike: does the bot hold
/// VIEW_CHANNEL and every bit of `need` in `channel`? Answers the bot's
/// permissions there. The bits come from `channel_permissions` (granted
/// bitset, roles, overwrites), computed once per lease into `guild`.
#[inline]
pub fn channel_allows(guild: &GuildAccess, channel: ChannelId, need: u64) -> Result<u64, Denied> {
    let p = guild
        .channel_permissions(channel)
        .ok_or(Denied::UnknownChannel)?;
    if p & perm::VIEW_CHANNEL == 0 {
        return Err(Denied::NoAccess);
    }
    let missing = need & !p;
    if missing != 0 {
        return Err(Denied::Missing(missing));
    }
    Ok(p)
}

/// Which form of an event a session gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    Full,
    /// MESSAGE_CONTENT redacted: content, embeds, attachments, components, poll emptied.
    Redacted,
}

/// What an event needs from a recipient.
#[derive(Clone, Copy, Debug)]
pub struct Requirement<'a> {
    pub server_id: ServerId,
    /// `ChannelId::NONE` for server-wide events.
    pub channel_id: ChannelId,
    pub intent: u64,
    pub permissions: u64,
    /// The event has message content subject to the MESSAGE_CONTENT rule.
    pub has_content: bool,
    /// Only the bots named in `mentions` may get the event (an
    /// interaction is addressed to one application; intents do not gate it).
    pub addressed: bool,
    /// User ids mentioned by the message (they see full content).
    pub mentions: &'a [u64],
    /// Now (Unix ms), to check the (application, server) lease.
    pub now_ms: u64,
}

/// Decide for one session: `None` if it must not get the event.
pub fn decide(id: &Identity, req: &Requirement) -> Option<Variant> {
    if id.intents & req.intent != req.intent {
        return None;
    }
    if req.addressed && !req.mentions.contains(&id.bot_user_id) {
        return None;
    }
    if req.server_id == ServerId::NONE {
        // A direct message, addressed by naming the bot in `mentions`; DMs
        // are exempt from MESSAGE_CONTENT redaction.
        return req
            .mentions
            .contains(&id.bot_user_id)
            .then_some(Variant::Full);
    }
    let guild = id.guild(req.server_id)?;
    if guild.lease_until_ms < req.now_ms {
        return None; // the lease lapsed: the registry could not confirm the installation
    }
    if req.channel_id != ChannelId::NONE {
        channel_allows(guild, req.channel_id, req.permissions).ok()?;
    }
    if !req.has_content
        || id.intents & intents::MESSAGE_CONTENT != 0
        || req.mentions.contains(&id.bot_user_id)
    {
        Some(Variant::Full)
    } else {
        Some(Variant::Redacted)
    }
}

/// Effective permissions of the bot in every channel of a server, from
/// the registry's view: the one function the identify path, permission
/// changes and lease renewals use.
pub fn guild_access(snap: &ServerSnapshot, inst: &Installation, bot_user_id: u64) -> GuildAccess {
    let server_id = snap.server.id;
    let (everyone, role_perms) = role_bits(snap, &inst.role_ids);
    let mut channels: Vec<(ChannelId, u64)> = snap
        .channels
        .iter()
        .map(|c| {
            let ows: Vec<Overwrite> = c.overwrites.iter().map(overwrite).collect();
            let p = channel_permissions(
                server_id,
                bot_user_id,
                &inst.role_ids,
                everyone,
                role_perms,
                &ows,
                inst.permissions,
            );
            (ChannelId(c.channel.id), p)
        })
        .collect();
    channels.sort_unstable();
    GuildAccess {
        id: ServerId(server_id),
        channels,
        lease_until_ms: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shards::SessionId;

    const S: u64 = 1000;
    const BOT: u64 = 7;
    const VIEW: u64 = perm::VIEW_CHANNEL;
    const SEND: u64 = perm::SEND_MESSAGES;

    fn ow(id: u64, target: Target, allow: u64, deny: u64) -> Overwrite {
        Overwrite {
            id,
            target,
            allow,
            deny,
        }
    }

    #[test]
    fn everyone_then_roles_then_member() {
        // @everyone denies view in the channel, a role allows it back.
        let o = [ow(S, Target::Role, 0, VIEW), ow(55, Target::Role, VIEW, 0)];
        assert_eq!(
            channel_permissions(S, BOT, &[55], VIEW | SEND, 0, &o, u64::MAX) & VIEW,
            VIEW
        );
        assert_eq!(
            channel_permissions(S, BOT, &[], VIEW | SEND, 0, &o, u64::MAX) & VIEW,
            0,
            "no role: denied"
        );
        // A member deny beats the role allow.
        let o2 = [o[0], o[1], ow(BOT, Target::Member, 0, VIEW)];
        assert_eq!(
            channel_permissions(S, BOT, &[55], VIEW, 0, &o2, u64::MAX) & VIEW,
            0
        );
        // Role denies are applied before role allows: allow wins across roles.
        let o3 = [ow(55, Target::Role, 0, VIEW), ow(56, Target::Role, VIEW, 0)];
        assert_eq!(
            channel_permissions(S, BOT, &[55, 56], VIEW, 0, &o3, u64::MAX) & VIEW,
            VIEW
        );
    }

    #[test]
    fn administrator_and_granted_bound() {
        let o = [ow(S, Target::Role, 0, VIEW)];
        let p = channel_permissions(S, BOT, &[1], 0, perm::ADMINISTRATOR, &o, u64::MAX);
        assert_eq!(p & VIEW, VIEW, "administrator ignores overwrites");
        // The installation grants less than the roles: bounded.
        let p = channel_permissions(S, BOT, &[1], VIEW | SEND, SEND, &[], SEND);
        assert_eq!(p, SEND);
        // Installed with only ADMINISTRATOR (an admin bot): sees every channel.
        let p = channel_permissions(
            S,
            BOT,
            &[1],
            0,
            perm::ADMINISTRATOR,
            &o,
            perm::ADMINISTRATOR,
        );
        assert_eq!(p & VIEW, VIEW);
    }

    fn identity(intents: u64, perms: u64) -> Identity {
        Identity {
            session_id: SessionId::new(0, 1),
            application_id: proto::AppId(1),
            bot_user_id: BOT,
            intents,
            shard: [0, 1],
            token_digest: [0; 32],
            guilds: vec![GuildAccess {
                id: proto::ServerId(S),
                channels: vec![(proto::ChannelId(10), perms)],
                lease_until_ms: 1000,
            }],
            user_json: "{}".into(),
        }
    }

    fn msg<'a>(mentions: &'a [u64]) -> Requirement<'a> {
        Requirement {
            server_id: proto::ServerId(S),
            channel_id: proto::ChannelId(10),
            intent: intents::GUILD_MESSAGES,
            permissions: 0,
            has_content: true,
            addressed: false,
            mentions,
            now_ms: 500,
        }
    }

    #[test]
    fn decisions() {
        let gm = intents::GUILD_MESSAGES;
        assert_eq!(
            decide(&identity(0, VIEW), &msg(&[])),
            None,
            "missing intent"
        );
        assert_eq!(decide(&identity(gm, 0), &msg(&[])), None, "no VIEW_CHANNEL");
        assert_eq!(
            decide(&identity(gm, VIEW), &msg(&[])),
            Some(Variant::Redacted)
        );
        assert_eq!(
            decide(&identity(gm | intents::MESSAGE_CONTENT, VIEW), &msg(&[])),
            Some(Variant::Full)
        );
        assert_eq!(
            decide(&identity(gm, VIEW), &msg(&[BOT])),
            Some(Variant::Full),
            "mention exception"
        );
        let mut other_server = msg(&[]);
        other_server.server_id = proto::ServerId(S + 1);
        assert_eq!(decide(&identity(gm, VIEW), &other_server), None);
        let dm = |mentions: &'static [u64]| Requirement {
            server_id: proto::ServerId(0),
            channel_id: proto::ChannelId(77),
            intent: intents::DIRECT_MESSAGES,
            permissions: 0,
            has_content: true,
            addressed: false,
            mentions,
            now_ms: 500,
        };
        assert_eq!(
            decide(&identity(intents::DIRECT_MESSAGES, 0), &dm(&[BOT])),
            Some(Variant::Full),
            "DM exception"
        );
        assert_eq!(
            decide(&identity(gm, VIEW), &dm(&[BOT])),
            None,
            "DM needs DIRECT_MESSAGES"
        );
        assert_eq!(
            decide(&identity(intents::DIRECT_MESSAGES, 0), &dm(&[BOT + 1])),
            None,
            "someone else's DM"
        );
        let mut expired = msg(&[]);
        expired.now_ms = 1001;
        assert_eq!(decide(&identity(gm, VIEW), &expired), None, "lease lapsed");
        let mut unknown_channel = msg(&[]);
        unknown_channel.channel_id = proto::ChannelId(11);
        assert_eq!(decide(&identity(gm, VIEW), &unknown_channel), None);
    }

    #[test]
    fn guild_access_uses_registry_roles_and_overwrites() {
        use registry::Registry;
        let reg = registry::SqliteRegistry::open_in_memory().unwrap();
        let seed = reg.seed_demo().unwrap().unwrap();
        let snap = reg.server_snapshot(seed.server_id).unwrap().unwrap();
        let inst = reg
            .installation(seed.app.id, seed.server_id)
            .unwrap()
            .unwrap();
        let ga = guild_access(&snap, &inst, seed.app.bot_user_id);
        let p = ga
            .channel_permissions(proto::ChannelId(seed.general_channel_id))
            .unwrap();
        assert_ne!(p & intents::perm::VIEW_CHANNEL, 0);
        // A deny overwrite for @everyone on #general hides it.
        reg.set_overwrite(
            seed.general_channel_id,
            seed.server_id,
            OverwriteKind::Role,
            0,
            intents::perm::VIEW_CHANNEL,
        )
        .unwrap();
        let snap = reg.server_snapshot(seed.server_id).unwrap().unwrap();
        let ga = guild_access(&snap, &inst, seed.app.bot_user_id);
        let p = ga
            .channel_permissions(proto::ChannelId(seed.general_channel_id))
            .unwrap();
        assert_eq!(p & intents::perm::VIEW_CHANNEL, 0);
        let gc = crate::protocol::guild::guild_create(&snap, &inst, &seed.app, &[]);
        assert_eq!(gc["id"], seed.server_id.to_string());
        assert!(gc["channels"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "general"));
    }
}
