//! The REST edge's route table: `METHOD /api[/vN]/path` to a typed route
//! with its ids, and each route's rate-limit bucket and top-level resource
//! (REST.md: buckets split by `channel_id`, `guild_id`, `webhook_id`).
//!
//! Ids in paths must be snowflakes: 1 to 20 decimal digits that fit a u64
//! (the platform answers 404 for anything else in an id position, so do
//! we). Emoji in reaction paths are percent-decoded (`%F0%9F%91%8D`, or
//! `name:id` for a custom emoji), at most `MAX_EMOJI` bytes.

use super::limit::Bucket;

pub const MAX_EMOJI: usize = 100;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApiRoute {
    /// `GET /gateway`: needs no token.
    Gateway,
    GatewayBot,
    UsersMe,
    ApplicationsMe,
    /// `GET /users/@me/guilds`: the bot's servers, paged.
    MyGuilds,
    CreateMessage {
        channel: u64,
    },
    ListMessages {
        channel: u64,
    },
    GetMessage {
        channel: u64,
        message: u64,
    },
    EditMessage {
        channel: u64,
        message: u64,
    },
    DeleteMessage {
        channel: u64,
        message: u64,
    },
    BulkDelete {
        channel: u64,
    },
    AddReaction {
        channel: u64,
        message: u64,
        emoji: String,
    },
    RemoveOwnReaction {
        channel: u64,
        message: u64,
        emoji: String,
    },
    ListReactions {
        channel: u64,
        message: u64,
        emoji: String,
    },
    Typing {
        channel: u64,
    },
    GetChannel {
        channel: u64,
    },
    GetGuild {
        guild: u64,
    },
    GuildChannels {
        guild: u64,
    },
    GuildRoles {
        guild: u64,
    },
    GetMember {
        guild: u64,
        user: u64,
    },
    ListMembers {
        guild: u64,
    },
    AddMemberRole {
        guild: u64,
        user: u64,
        role: u64,
    },
    RemoveMemberRole {
        guild: u64,
        user: u64,
        role: u64,
    },
    Kick {
        guild: u64,
        user: u64,
    },
    Ban {
        guild: u64,
        user: u64,
    },
    Unban {
        guild: u64,
        user: u64,
    },
    CreateDm,
    // Interactions: the interaction's token in the path is the credential
    // (no Authorization header: discord.js sends none).
    InteractionCallback {
        id: u64,
        token: String,
    },
    /// `POST /webhooks/{app}/{token}`: a follow-up message.
    WebhookExecute {
        app: u64,
        token: String,
    },
    /// `GET/PATCH/DELETE /webhooks/{app}/{token}/messages/{id|@original}`
    /// (`message` 0: `@original`).
    WebhookMessage {
        app: u64,
        token: String,
        message: u64,
        method: WebhookMethod,
    },
    // Application commands (`api::commands`): `guild` 0 is the global
    // scope (`/applications/{app}/commands`), else the server's
    // (`/applications/{app}/guilds/{guild}/commands`).
    ListCommands {
        app: u64,
        guild: u64,
    },
    PutCommands {
        app: u64,
        guild: u64,
    },
    CreateCommand {
        app: u64,
        guild: u64,
    },
    GetCommand {
        app: u64,
        guild: u64,
        command: u64,
    },
    EditCommand {
        app: u64,
        guild: u64,
        command: u64,
    },
    DeleteCommand {
        app: u64,
        guild: u64,
        command: u64,
    },
}

/// The methods of a webhook message route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WebhookMethod {
    Get,
    Post,
    Patch,
    Delete,
}

/// The longest interaction token a path may carry.
pub const MAX_TOKEN_LEN: usize = 128;

/// Every route's metrics name, in a fixed order; index 0 counts requests
/// that matched no route.
pub const ROUTE_NAMES: [&str; 45] = [
    "unrouted",
    "GET /gateway",
    "GET /gateway/bot",
    "GET /users/@me",
    "GET /applications/@me",
    "POST /channels/{id}/messages",
    "GET /channels/{id}/messages",
    "GET /channels/{id}/messages/{id}",
    "PATCH /channels/{id}/messages/{id}",
    "DELETE /channels/{id}/messages/{id}",
    "POST /channels/{id}/messages/bulk-delete",
    "PUT /channels/{id}/messages/{id}/reactions/{emoji}/@me",
    "DELETE /channels/{id}/messages/{id}/reactions/{emoji}/@me",
    "GET /channels/{id}/messages/{id}/reactions/{emoji}",
    "POST /channels/{id}/typing",
    "GET /channels/{id}",
    "GET /guilds/{id}",
    "GET /guilds/{id}/channels",
    "GET /guilds/{id}/roles",
    "GET /guilds/{id}/members/{id}",
    "GET /guilds/{id}/members",
    "PUT /guilds/{id}/members/{id}/roles/{id}",
    "DELETE /guilds/{id}/members/{id}/roles/{id}",
    "DELETE /guilds/{id}/members/{id}",
    "PUT /guilds/{id}/bans/{id}",
    "DELETE /guilds/{id}/bans/{id}",
    "POST /users/@me/channels",
    "POST /interactions/{id}/{token}/callback",
    "POST /webhooks/{id}/{token}",
    "GET /webhooks/{id}/{token}/messages/{id}",
    "PATCH /webhooks/{id}/{token}/messages/{id}",
    "DELETE /webhooks/{id}/{token}/messages/{id}",
    // Application commands.
    "GET /applications/{id}/commands",
    "PUT /applications/{id}/commands",
    "POST /applications/{id}/commands",
    "GET /applications/{id}/commands/{id}",
    "PATCH /applications/{id}/commands/{id}",
    "DELETE /applications/{id}/commands/{id}",
    "GET /applications/{id}/guilds/{id}/commands",
    "PUT /applications/{id}/guilds/{id}/commands",
    "POST /applications/{id}/guilds/{id}/commands",
    "GET /applications/{id}/guilds/{id}/commands/{id}",
    "PATCH /applications/{id}/guilds/{id}/commands/{id}",
    "DELETE /applications/{id}/guilds/{id}/commands/{id}",
    "GET /users/@me/guilds",
];

/// Latency classes of routes, as metric labels (`ApiRoute::class`).
pub const ROUTE_CLASSES: [&str; 7] = [
    "connect",
    "message_write",
    "message_read",
    "server_read",
    "members",
    "commands",
    "interactions",
];

/// Why a request has no route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteError {
    /// No such path (or an id that is not a snowflake): 404 code 0.
    NotFound,
    /// The path exists, not with this method: 405 code 0.
    MethodNotAllowed,
}

impl ApiRoute {
    /// The rate-limit bucket and the top-level resource (0: none) it splits by.
    pub fn bucket(&self) -> Option<(Bucket, u64)> {
        use ApiRoute::*;
        Some(match *self {
            // `/gateway` needs no token: only the per-address limits apply.
            Gateway => return None,
            // The connect-time routes are limited per bot, as the platform
            // limits them per route (docs/rate-limits.md).
            GatewayBot => (Bucket::GatewayBot, 0),
            UsersMe => (Bucket::UserRead, 0),
            MyGuilds => (Bucket::MyGuilds, 0),
            ApplicationsMe => (Bucket::ApplicationRead, 0),
            // Not limited per bot token (REST.md: callbacks are exempt; a
            // token is good for one interaction's 15 minutes).
            InteractionCallback { .. } | WebhookExecute { .. } | WebhookMessage { .. } => {
                return None
            }
            CreateMessage { channel } => (Bucket::MessageCreate, channel),
            ListMessages { channel } | GetMessage { channel, .. } => (Bucket::MessageRead, channel),
            EditMessage { channel, .. } => (Bucket::MessageEdit, channel),
            DeleteMessage { channel, .. } => (Bucket::MessageDelete, channel),
            BulkDelete { channel } => (Bucket::BulkDelete, channel),
            AddReaction { channel, .. } | RemoveOwnReaction { channel, .. } => {
                (Bucket::Reaction, channel)
            }
            ListReactions { channel, .. } => (Bucket::MessageRead, channel),
            Typing { channel } => (Bucket::Typing, channel),
            GetChannel { channel } => (Bucket::ChannelRead, channel),
            GetGuild { guild } | GuildChannels { guild } | GuildRoles { guild } => {
                (Bucket::GuildRead, guild)
            }
            GetMember { guild, .. } | ListMembers { guild } => (Bucket::MemberRead, guild),
            AddMemberRole { guild, .. } | RemoveMemberRole { guild, .. } => {
                (Bucket::MemberRole, guild)
            }
            Kick { guild, .. } => (Bucket::Kick, guild),
            Ban { guild, .. } | Unban { guild, .. } => (Bucket::Ban, guild),
            CreateDm => (Bucket::Dm, 0),
            // Application commands: split by server (0: global).
            ListCommands { guild, .. } | GetCommand { guild, .. } => (Bucket::CommandRead, guild),
            PutCommands { guild, .. }
            | CreateCommand { guild, .. }
            | EditCommand { guild, .. }
            | DeleteCommand { guild, .. } => (Bucket::CommandWrite, guild),
        })
    }

    /// The route's latency class (`ROUTE_CLASSES`): 0 connect-time, 1 message
    /// writes, 2 message reads, 3 server reads, 4 members and moderation.
    pub fn class(&self) -> usize {
        use ApiRoute::*;
        match self {
            Gateway | GatewayBot | UsersMe | ApplicationsMe => 0,
            CreateMessage { .. }
            | EditMessage { .. }
            | DeleteMessage { .. }
            | BulkDelete { .. }
            | AddReaction { .. }
            | RemoveOwnReaction { .. }
            | Typing { .. } => 1,
            ListMessages { .. } | GetMessage { .. } | ListReactions { .. } => 2,
            GetChannel { .. }
            | GetGuild { .. }
            | GuildChannels { .. }
            | GuildRoles { .. }
            | MyGuilds => 3,
            InteractionCallback { .. } | WebhookExecute { .. } | WebhookMessage { .. } => 6,
            _ if self.command_scope().is_some() => 5,
            _ => 4,
        }
    }

    /// The route's position in `ROUTE_NAMES` (0 is "no route").
    pub fn index(&self) -> usize {
        let n = self.name();
        ROUTE_NAMES
            .iter()
            .position(|r| *r == n)
            .expect("every route is named")
    }

    /// A short stable name for metrics (`route` label): the path template.
    pub fn name(&self) -> &'static str {
        use ApiRoute::*;
        match self {
            Gateway => "GET /gateway",
            GatewayBot => "GET /gateway/bot",
            UsersMe => "GET /users/@me",
            MyGuilds => "GET /users/@me/guilds",
            ApplicationsMe => "GET /applications/@me",
            CreateMessage { .. } => "POST /channels/{id}/messages",
            ListMessages { .. } => "GET /channels/{id}/messages",
            GetMessage { .. } => "GET /channels/{id}/messages/{id}",
            EditMessage { .. } => "PATCH /channels/{id}/messages/{id}",
            DeleteMessage { .. } => "DELETE /channels/{id}/messages/{id}",
            BulkDelete { .. } => "POST /channels/{id}/messages/bulk-delete",
            AddReaction { .. } => "PUT /channels/{id}/messages/{id}/reactions/{emoji}/@me",
            RemoveOwnReaction { .. } => "DELETE /channels/{id}/messages/{id}/reactions/{emoji}/@me",
            ListReactions { .. } => "GET /channels/{id}/messages/{id}/reactions/{emoji}",
            Typing { .. } => "POST /channels/{id}/typing",
            GetChannel { .. } => "GET /channels/{id}",
            GetGuild { .. } => "GET /guilds/{id}",
            GuildChannels { .. } => "GET /guilds/{id}/channels",
            GuildRoles { .. } => "GET /guilds/{id}/roles",
            GetMember { .. } => "GET /guilds/{id}/members/{id}",
            ListMembers { .. } => "GET /guilds/{id}/members",
            AddMemberRole { .. } => "PUT /guilds/{id}/members/{id}/roles/{id}",
            RemoveMemberRole { .. } => "DELETE /guilds/{id}/members/{id}/roles/{id}",
            Kick { .. } => "DELETE /guilds/{id}/members/{id}",
            Ban { .. } => "PUT /guilds/{id}/bans/{id}",
            Unban { .. } => "DELETE /guilds/{id}/bans/{id}",
            CreateDm => "POST /users/@me/channels",
            InteractionCallback { .. } => "POST /interactions/{id}/{token}/callback",
            WebhookExecute { .. } => "POST /webhooks/{id}/{token}",
            WebhookMessage { method, .. } => match method {
                WebhookMethod::Get => "GET /webhooks/{id}/{token}/messages/{id}",
                WebhookMethod::Patch => "PATCH /webhooks/{id}/{token}/messages/{id}",
                _ => "DELETE /webhooks/{id}/{token}/messages/{id}",
            },
            // Application commands.
            ListCommands { guild: 0, .. } => "GET /applications/{id}/commands",
            PutCommands { guild: 0, .. } => "PUT /applications/{id}/commands",
            CreateCommand { guild: 0, .. } => "POST /applications/{id}/commands",
            GetCommand { guild: 0, .. } => "GET /applications/{id}/commands/{id}",
            EditCommand { guild: 0, .. } => "PATCH /applications/{id}/commands/{id}",
            DeleteCommand { guild: 0, .. } => "DELETE /applications/{id}/commands/{id}",
            ListCommands { .. } => "GET /applications/{id}/guilds/{id}/commands",
            PutCommands { .. } => "PUT /applications/{id}/guilds/{id}/commands",
            CreateCommand { .. } => "POST /applications/{id}/guilds/{id}/commands",
            GetCommand { .. } => "GET /applications/{id}/guilds/{id}/commands/{id}",
            EditCommand { .. } => "PATCH /applications/{id}/guilds/{id}/commands/{id}",
            DeleteCommand { .. } => "DELETE /applications/{id}/guilds/{id}/commands/{id}",
        }
    }

    /// A command route's (application in the path, server or 0).
    pub fn command_scope(&self) -> Option<(u64, u64)> {
        use ApiRoute::*;
        match *self {
            ListCommands { app, guild }
            | PutCommands { app, guild }
            | CreateCommand { app, guild }
            | GetCommand { app, guild, .. }
            | EditCommand { app, guild, .. }
            | DeleteCommand { app, guild, .. } => Some((app, guild)),
            _ => None,
        }
    }

    /// The route carries a JSON (or multipart) body a client must send.
    pub fn takes_body(&self) -> bool {
        matches!(
            self,
            ApiRoute::CreateMessage { .. }
                | ApiRoute::EditMessage { .. }
                | ApiRoute::BulkDelete { .. }
                | ApiRoute::CreateDm
                | ApiRoute::PutCommands { .. }
                | ApiRoute::CreateCommand { .. }
                | ApiRoute::EditCommand { .. }
        )
    }
}

/// An interaction token in a path: URL-safe, at most `MAX_TOKEN_LEN`.
fn token(t: &str) -> Result<String, RouteError> {
    let ok = !t.is_empty()
        && t.len() <= MAX_TOKEN_LEN
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.');
    ok.then(|| t.to_owned()).ok_or(RouteError::NotFound)
}

/// Route `METHOD /api[/vN]/...`, tolerant of a trailing slash. `HEAD` is
/// routed as `GET`.
pub fn route(method: &str, path: &str) -> Result<ApiRoute, RouteError> {
    let rest = path.strip_prefix("/api").unwrap_or(path);
    let rest = match rest.strip_prefix("/v") {
        Some(v) => match v.find('/') {
            Some(i) if i > 0 && v[..i].bytes().all(|b| b.is_ascii_digit()) => &v[i..],
            _ => rest,
        },
        None => rest,
    };
    let rest = rest.trim_end_matches('/');
    let mut seg = [""; 8];
    let mut n = 0;
    for s in rest.split('/').skip(1) {
        if n == seg.len() {
            return Err(RouteError::NotFound);
        }
        // `@` percent-encoded, as discord.js sends `%40original`.
        seg[n] = match s.get(..3) {
            Some(p) if p.eq_ignore_ascii_case("%40") && &s[3..] == "me" => "@me",
            Some(p) if p.eq_ignore_ascii_case("%40") && &s[3..] == "original" => "@original",
            _ => s,
        };
        n += 1;
    }
    let m = if method == "HEAD" { "GET" } else { method };
    // The methods a path allows, then the route for this method.
    let (allowed, r): (&[&str], Option<ApiRoute>) = match &seg[..n] {
        ["gateway"] => (&["GET"], Some(ApiRoute::Gateway)),
        ["gateway", "bot"] => (&["GET"], Some(ApiRoute::GatewayBot)),
        ["users", "@me"] => (&["GET"], Some(ApiRoute::UsersMe)),
        ["oauth2", "applications", "@me"] | ["applications", "@me"] => {
            (&["GET"], Some(ApiRoute::ApplicationsMe))
        }
        ["users", "@me", "channels"] => (&["POST"], Some(ApiRoute::CreateDm)),
        ["users", "@me", "guilds"] => (&["GET"], Some(ApiRoute::MyGuilds)),
        ["interactions", i, t, "callback"] => {
            let (id, token) = (id(i)?, token(t)?);
            (&["POST"], Some(ApiRoute::InteractionCallback { id, token }))
        }
        ["webhooks", a, t] => {
            let (app, token) = (id(a)?, token(t)?);
            (&["POST"], Some(ApiRoute::WebhookExecute { app, token }))
        }
        ["webhooks", a, t, "messages", mid] => {
            let (app, token) = (id(a)?, token(t)?);
            let message = if *mid == "@original" { 0 } else { id(mid)? };
            let method = match m {
                "GET" => Some(WebhookMethod::Get),
                "PATCH" => Some(WebhookMethod::Patch),
                "DELETE" => Some(WebhookMethod::Delete),
                _ => None,
            };
            (
                &["GET", "PATCH", "DELETE"],
                method.map(|method| ApiRoute::WebhookMessage {
                    app,
                    token,
                    message,
                    method,
                }),
            )
        }
        ["channels", c] => {
            let channel = id(c)?;
            (&["GET"], Some(ApiRoute::GetChannel { channel }))
        }
        ["channels", c, "typing"] => {
            let channel = id(c)?;
            (&["POST"], Some(ApiRoute::Typing { channel }))
        }
        ["channels", c, "messages"] => {
            let channel = id(c)?;
            let r = match m {
                "GET" => Some(ApiRoute::ListMessages { channel }),
                "POST" => Some(ApiRoute::CreateMessage { channel }),
                _ => None,
            };
            (&["GET", "POST"], r)
        }
        ["channels", c, "messages", "bulk-delete"] => {
            let channel = id(c)?;
            (&["POST"], Some(ApiRoute::BulkDelete { channel }))
        }
        ["channels", c, "messages", mid] => {
            let (channel, message) = (id(c)?, id(mid)?);
            let r = match m {
                "GET" => Some(ApiRoute::GetMessage { channel, message }),
                "PATCH" => Some(ApiRoute::EditMessage { channel, message }),
                "DELETE" => Some(ApiRoute::DeleteMessage { channel, message }),
                _ => None,
            };
            (&["GET", "PATCH", "DELETE"], r)
        }
        ["channels", c, "messages", mid, "reactions", e] => {
            let (channel, message, emoji) = (id(c)?, id(mid)?, emoji(e)?);
            (
                &["GET"],
                Some(ApiRoute::ListReactions {
                    channel,
                    message,
                    emoji,
                }),
            )
        }
        ["channels", c, "messages", mid, "reactions", e, "@me"] => {
            let (channel, message, emoji) = (id(c)?, id(mid)?, emoji(e)?);
            let r = match m {
                "PUT" => Some(ApiRoute::AddReaction {
                    channel,
                    message,
                    emoji,
                }),
                "DELETE" => Some(ApiRoute::RemoveOwnReaction {
                    channel,
                    message,
                    emoji,
                }),
                _ => None,
            };
            (&["PUT", "DELETE"], r)
        }
        ["guilds", g] => {
            let guild = id(g)?;
            (&["GET"], Some(ApiRoute::GetGuild { guild }))
        }
        ["guilds", g, "channels"] => {
            let guild = id(g)?;
            (&["GET"], Some(ApiRoute::GuildChannels { guild }))
        }
        ["guilds", g, "roles"] => {
            let guild = id(g)?;
            (&["GET"], Some(ApiRoute::GuildRoles { guild }))
        }
        ["guilds", g, "members"] => {
            let guild = id(g)?;
            (&["GET"], Some(ApiRoute::ListMembers { guild }))
        }
        ["guilds", g, "members", u] => {
            let (guild, user) = (id(g)?, id(u)?);
            let r = match m {
                "GET" => Some(ApiRoute::GetMember { guild, user }),
                "DELETE" => Some(ApiRoute::Kick { guild, user }),
                _ => None,
            };
            (&["GET", "DELETE"], r)
        }
        ["guilds", g, "members", u, "roles", rl] => {
            let (guild, user, role) = (id(g)?, id(u)?, id(rl)?);
            let r = match m {
                "PUT" => Some(ApiRoute::AddMemberRole { guild, user, role }),
                "DELETE" => Some(ApiRoute::RemoveMemberRole { guild, user, role }),
                _ => None,
            };
            (&["PUT", "DELETE"], r)
        }
        ["guilds", g, "bans", u] => {
            let (guild, user) = (id(g)?, id(u)?);
            let r = match m {
                "PUT" => Some(ApiRoute::Ban { guild, user }),
                "DELETE" => Some(ApiRoute::Unban { guild, user }),
                _ => None,
            };
            (&["PUT", "DELETE"], r)
        }
        // Application commands.
        ["applications", a, "commands"] => cmd_route(m, id(a)?, 0, None),
        ["applications", a, "commands", c] => cmd_route(m, id(a)?, 0, Some(id(c)?)),
        ["applications", a, "guilds", g, "commands"] => cmd_route(m, id(a)?, server(g)?, None),
        ["applications", a, "guilds", g, "commands", c] => {
            cmd_route(m, id(a)?, server(g)?, Some(id(c)?))
        }
        _ => return Err(RouteError::NotFound),
    };
    match r {
        Some(r) if allowed.contains(&m) => Ok(r),
        _ => Err(RouteError::MethodNotAllowed),
    }
}

/// The methods of a command path (`command`: one command's) and its route.
fn cmd_route(
    m: &str,
    app: u64,
    guild: u64,
    command: Option<u64>,
) -> (&'static [&'static str], Option<ApiRoute>) {
    use ApiRoute::*;
    let Some(command) = command else {
        let r = match m {
            "GET" => Some(ListCommands { app, guild }),
            "PUT" => Some(PutCommands { app, guild }),
            "POST" => Some(CreateCommand { app, guild }),
            _ => None,
        };
        return (&["GET", "PUT", "POST"], r);
    };
    let r = match m {
        "GET" => Some(GetCommand {
            app,
            guild,
            command,
        }),
        "PATCH" => Some(EditCommand {
            app,
            guild,
            command,
        }),
        "DELETE" => Some(DeleteCommand {
            app,
            guild,
            command,
        }),
        _ => None,
    };
    (&["GET", "PATCH", "DELETE"], r)
}

/// A server id in a path: a snowflake, never 0 (0 is the global scope).
fn server(s: &str) -> Result<u64, RouteError> {
    id(s).and_then(|g| {
        if g == 0 {
            Err(RouteError::NotFound)
        } else {
            Ok(g)
        }
    })
}

/// A snowflake in an id position, or 404.
fn id(s: &str) -> Result<u64, RouteError> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(RouteError::NotFound);
    }
    s.parse().map_err(|_| RouteError::NotFound)
}

/// A percent-decoded emoji: a unicode emoji or `name:id`; not empty, UTF-8,
/// at most `MAX_EMOJI` bytes.
fn emoji(s: &str) -> Result<String, RouteError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len().min(MAX_EMOJI));
    let mut i = 0;
    while i < b.len() {
        let c = if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3).ok_or(RouteError::NotFound)?;
            let hex = std::str::from_utf8(hex).map_err(|_| RouteError::NotFound)?;
            i += 3;
            u8::from_str_radix(hex, 16).map_err(|_| RouteError::NotFound)?
        } else {
            i += 1;
            b[i - 1]
        };
        if out.len() == MAX_EMOJI {
            return Err(RouteError::NotFound);
        }
        out.push(c);
    }
    let s = String::from_utf8(out).map_err(|_| RouteError::NotFound)?;
    if s.is_empty() || s.chars().any(char::is_control) {
        return Err(RouteError::NotFound);
    }
    Ok(s)
}

#[cfg(test)]
mod tests;
