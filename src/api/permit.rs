//! Where a REST request is permitted (ADR-06): the permissions a route
//! needs, checked with `entitlement::channel_allows`, the same function the
//! event filter uses, on the application's leased view. No registry call.
//!
//! A channel the bot cannot know (not in a server it is installed in, or a
//! lapsed lease) is 404 10003; a channel it cannot see is 403 50001; one it
//! sees without the bits the route needs is 403 50013. Rules that depend
//! on the message (editing only one's own, deleting another's needs
//! MANAGE_MESSAGES) are decided by the chat service with `may_delete`
//! from the permissions answered here.

use proto::permissions as perm;
use proto::{ChannelId, ServerId};

use super::body::{codes, ApiError};
use super::route::ApiRoute;
use super::view::AppView;
use crate::delivery::entitlement::{channel_allows, Denied};

/// Where an allowed request acts, and with which permissions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    pub server: ServerId,
    /// `ChannelId::NONE` for server routes.
    pub channel: ChannelId,
    /// The bot's permission bits in the channel (server routes: 0).
    pub perms: u64,
}

impl Target {
    /// Nowhere (a request that names its place otherwise, e.g. a callback).
    pub const NONE: Target = Target {
        server: ServerId::NONE,
        channel: ChannelId::NONE,
        perms: 0,
    };
}

/// What a bot may do in a DM channel: read, write, react, embed (never
/// manage others' messages or bulk delete).
pub const DM_PERMISSIONS: u64 = perm::VIEW_CHANNEL
    | perm::SEND_MESSAGES
    | perm::READ_MESSAGE_HISTORY
    | perm::ADD_REACTIONS
    | perm::EMBED_LINKS;

/// The channel bits a channel route needs (VIEW_CHANNEL is always needed).
pub fn channel_need(route: &ApiRoute) -> Option<(u64, u64)> {
    use ApiRoute::*;
    let (channel, need) = match route {
        CreateMessage { channel } | Typing { channel } => (*channel, perm::SEND_MESSAGES),
        ListMessages { channel }
        | GetMessage { channel, .. }
        | ListReactions { channel, .. }
        | RemoveOwnReaction { channel, .. } => (*channel, perm::READ_MESSAGE_HISTORY),
        AddReaction { channel, .. } => (*channel, perm::READ_MESSAGE_HISTORY | perm::ADD_REACTIONS),
        EditMessage { channel, .. } | DeleteMessage { channel, .. } | GetChannel { channel } => {
            (*channel, 0)
        }
        BulkDelete { channel } => (*channel, perm::MANAGE_MESSAGES | perm::READ_MESSAGE_HISTORY),
        _ => return None,
    };
    Some((channel, need))
}

/// Decide a route for an application on its view at `now_ms`.
pub fn permit(view: &AppView, route: &ApiRoute, now_ms: u64) -> Result<Target, ApiError> {
    if let Some((channel, need)) = channel_need(route) {
        let channel = ChannelId(channel);
        if view.dm_peer(channel).is_some() {
            // A DM: the bot and one person, no roles or overwrites.
            return match need & !DM_PERMISSIONS {
                0 => Ok(Target {
                    server: ServerId::NONE,
                    channel,
                    perms: DM_PERMISSIONS,
                }),
                missing => Err(denied(Denied::Missing(missing))),
            };
        }
        let Some(g) = view.guild_of_channel(channel, now_ms) else {
            return Err(ApiError::new(
                404,
                codes::UNKNOWN_CHANNEL,
                "Unknown Channel",
            ));
        };
        return match channel_allows(g, channel, need) {
            Ok(perms) => Ok(Target {
                server: g.id,
                channel,
                perms,
            }),
            Err(d) => Err(denied(d)),
        };
    }
    if let Some((app, guild)) = route.command_scope() {
        return commands(view, app, guild, now_ms);
    }
    use ApiRoute::*;
    match route {
        // The bot itself: nowhere in particular.
        GatewayBot | UsersMe | MyGuilds | ApplicationsMe => Ok(Target::NONE),
        CreateDm => Ok(Target {
            server: ServerId::NONE,
            channel: ChannelId::NONE,
            perms: 0,
        }),
        // Member routes: the server must be one the bot is installed in;
        // the bits and the hierarchy need the member, so the sidecar
        // decides them (`link::members`).
        GetGuild { guild }
        | GuildChannels { guild }
        | GuildRoles { guild }
        | GetMember { guild, .. }
        | ListMembers { guild }
        | AddMemberRole { guild, .. }
        | RemoveMemberRole { guild, .. }
        | Kick { guild, .. }
        | Ban { guild, .. }
        | Unban { guild, .. } => {
            let Some(g) = view.guild(ServerId(*guild), now_ms) else {
                return Err(ApiError::new(404, codes::UNKNOWN_GUILD, "Unknown Guild"));
            };
            Ok(Target {
                server: g.id,
                channel: ChannelId::NONE,
                perms: 0,
            })
        }
        _ => Err(ApiError::new(403, codes::MISSING_ACCESS, "Missing Access")),
    }
}

/// Application commands: only the token's own application's (403 50001
/// for another's, as the platform answers), and a server's only where the
/// bot is installed (404 10004).
fn commands(view: &AppView, app: u64, guild: u64, now_ms: u64) -> Result<Target, ApiError> {
    if app != view.app.0 {
        return Err(ApiError::new(403, codes::MISSING_ACCESS, "Missing Access"));
    }
    let server = match guild {
        0 => ServerId::NONE,
        g => match view.guild(ServerId(g), now_ms) {
            Some(g) => g.id,
            None => return Err(ApiError::new(404, codes::UNKNOWN_GUILD, "Unknown Guild")),
        },
    };
    Ok(Target {
        server,
        channel: ChannelId::NONE,
        perms: 0,
    })
}

pub fn denied(d: Denied) -> ApiError {
    match d {
        Denied::UnknownChannel => ApiError::new(404, codes::UNKNOWN_CHANNEL, "Unknown Channel"),
        Denied::NoAccess => ApiError::new(403, codes::MISSING_ACCESS, "Missing Access"),
        Denied::Missing(_) => ApiError::new(403, codes::MISSING_PERMISSIONS, "Missing Permissions"),
    }
}

/// Deleting a message: one's own always; another's with MANAGE_MESSAGES.
pub fn may_delete(perms: u64, own: bool) -> Result<(), ApiError> {
    if own || perms & perm::MANAGE_MESSAGES != 0 {
        Ok(())
    } else {
        Err(denied(Denied::Missing(perm::MANAGE_MESSAGES)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::session::GuildAccess;
    use proto::AppId;

    const SEE: u64 = perm::VIEW_CHANNEL | perm::READ_MESSAGE_HISTORY;

    fn view() -> AppView {
        AppView::new(
            AppId(1),
            crate::protocol::bot_user::BotUser::new(2, "b"),
            0,
            vec![GuildAccess {
                id: ServerId(100),
                channels: vec![
                    (ChannelId(10), SEE | perm::SEND_MESSAGES),
                    (ChannelId(11), SEE),
                    (ChannelId(12), perm::SEND_MESSAGES),
                ],
                lease_until_ms: 1_000,
            }],
        )
    }

    fn code(r: Result<Target, ApiError>) -> (u16, u64) {
        let e = r.unwrap_err();
        (e.status, e.body["code"].as_u64().unwrap())
    }

    #[test]
    fn channel_routes() {
        let v = view();
        let t = permit(&v, &ApiRoute::CreateMessage { channel: 10 }, 0).unwrap();
        assert_eq!((t.server, t.channel), (ServerId(100), ChannelId(10)));
        assert_eq!(
            code(permit(&v, &ApiRoute::CreateMessage { channel: 11 }, 0)),
            (403, 50013)
        );
        assert_eq!(
            code(permit(&v, &ApiRoute::CreateMessage { channel: 12 }, 0)),
            (403, 50001)
        );
        assert_eq!(
            code(permit(&v, &ApiRoute::CreateMessage { channel: 13 }, 0)),
            (404, 10003)
        );
        assert_eq!(
            code(permit(&v, &ApiRoute::CreateMessage { channel: 10 }, 1_001)),
            (404, 10003),
            "a lapsed lease permits nothing"
        );
        assert!(permit(&v, &ApiRoute::ListMessages { channel: 11 }, 0).is_ok());
        assert_eq!(
            code(permit(&v, &ApiRoute::BulkDelete { channel: 10 }, 0)),
            (403, 50013)
        );
        assert_eq!(
            code(permit(&v, &ApiRoute::GetGuild { guild: 5 }, 0)),
            (404, 10004)
        );
        assert!(permit(&v, &ApiRoute::GuildRoles { guild: 100 }, 0).is_ok());
        let own = ApiRoute::PutCommands { app: 1, guild: 0 };
        assert_eq!(permit(&v, &own, 0).unwrap().server, ServerId::NONE);
        let here = ApiRoute::ListCommands { app: 1, guild: 100 };
        assert_eq!(permit(&v, &here, 0).unwrap().server, ServerId(100));
        let another = ApiRoute::ListCommands { app: 2, guild: 0 };
        assert_eq!(code(permit(&v, &another, 0)), (403, 50001));
        let elsewhere = ApiRoute::GetCommand {
            app: 1,
            guild: 5,
            command: 1,
        };
        assert_eq!(code(permit(&v, &elsewhere, 0)), (404, 10004));
        assert!(may_delete(0, true).is_ok());
        assert!(may_delete(perm::MANAGE_MESSAGES, false).is_ok());
        assert_eq!(may_delete(SEE, false).unwrap_err().body["code"], 50013);
    }
}
