//! The sidecar's REST answers: the connect-time routes, the token lookup
//! that gives a worker an application's leased view (`api::view`), and the
//! reads of server data (channel, server, channels, roles) a permitted
//! request asks for. Each is one or a few registry calls under the link's
//! deadline; a registry that cannot answer is a 503.

use super::*;
use crate::api::permit::Target;
use crate::api::route::ApiRoute;
use crate::api::view::AppView;
use crate::protocol::bot_user::BotUser;
use crate::protocol::guild::{bot_user_public, channel, guild_rest, role};
use crate::protocol::rest::GuildsPage;

/// An application's view holds at most this many servers (the rest are
/// not visible to its REST requests; documented in docs/rest.md).
pub const MAX_VIEW_SERVERS: usize = 10_000;

fn unavailable() -> (u16, Vec<u8>) {
    (
        503,
        br#"{"message": "registry unavailable", "code": 0}"#.to_vec(),
    )
}

fn unknown(code: u32, what: &str) -> (u16, Vec<u8>) {
    (
        404,
        format!(r#"{{"message": "Unknown {what}", "code": {code}}}"#).into_bytes(),
    )
}

impl Sidecar {
    /// A connect-time route for `app` (the worker found its token).
    pub(super) fn rest(&mut self, route: RestRoute, app: AppId) -> (u16, Vec<u8>) {
        let app = match self.call(|r| r.application(app.0)) {
            Ok(Some(app)) => app,
            // Deleted since the worker's view was leased.
            Ok(None) => {
                return (
                    401,
                    br#"{"message": "401: Unauthorized", "code": 0}"#.to_vec(),
                )
            }
            Err(e) => {
                tracing::warn!(error = %e, "registry error during REST");
                return unavailable();
            }
        };
        let body = match route {
            RestRoute::GatewayBot => {
                let installs = self
                    .call(|r| r.installations_of_app(app.id))
                    .map(|i| i.len())
                    .unwrap_or(0);
                let limit = match self
                    .call(|r| r.session_start_remaining(app.id, registry::snowflake::unix_ms_now()))
                {
                    Ok(l) => l,
                    Err(_) => {
                        return (
                            503,
                            br#"{"message": "registry unavailable", "code": 0}"#.to_vec(),
                        )
                    }
                };
                json!({
                    "url": self.gateway_url,
                    "shards": installs.div_ceil(1000).max(1),
                    "session_start_limit": {
                        "total": limit.total,
                        "remaining": limit.remaining,
                        "reset_after": limit.reset_after_ms,
                        "max_concurrency": limit.max_concurrency,
                    }
                })
            }
            RestRoute::MyGuilds(page) => match self.my_guilds(&app, page) {
                Ok(list) => list,
                Err(()) => return unavailable(),
            },
            RestRoute::ApplicationsMe => {
                // The application's Ed25519 public key (ADR-12): what its
                // HTTP endpoint verifies interaction signatures with.
                let verify_key = match self.call(|r| r.signing_seed(app.id)) {
                    Ok(seed) => crate::egress::sign::public_key_hex(&seed),
                    Err(_) => return unavailable(),
                };
                // hikari's `fetch_application` reads both counts (a
                // KeyError without them); every installation here is a
                // server's.
                let servers = match self.call(|r| r.installations_of_app(app.id)) {
                    Ok(i) => i.len(),
                    Err(_) => return unavailable(),
                };
                json!({
                    "id": app.id.to_string(),
                    "name": app.name,
                    "description": "",
                    "icon": null,
                    "bot_public": false,
                    "bot_require_code_grant": false,
                    // A partial user with a real snowflake (an id of "0" breaks
                    // the libraries that parse ids as snowflakes): the
                    // application's own id, as a team-owned application's
                    // owner is the team's.
                    "owner": {"id": app.id.to_string(), "username": "gatewayd", "discriminator": "0", "global_name": null, "avatar": null, "public_flags": 0},
                    "verify_key": verify_key,
                    "flags": app.flags,
                    "team": null,
                    "summary": "",
                    "rpc_origins": [],
                    "tags": [],
                    "approximate_guild_count": servers,
                    "approximate_user_install_count": 0,
                    "bot": bot_user_public(&app),
                })
            }
        };
        (200, serde_json::to_vec(&body).expect("json"))
    }

    /// `GET /users/@me/guilds`: the bot's servers as partial guild objects,
    /// ascending by id, one page (`GuildsPage`).
    fn my_guilds(
        &mut self,
        app: &registry::model::Application,
        page: GuildsPage,
    ) -> Result<serde_json::Value, ()> {
        let mut installs = self
            .call(|r| r.installations_of_app(app.id))
            .map_err(|_| ())?;
        installs.sort_by_key(|i| i.server_id);
        let mut out = Vec::with_capacity(page.limit as usize);
        for inst in page.of(&installs, |i| i.server_id) {
            let Some(snap) = self
                .call(|r| r.server_snapshot(inst.server_id))
                .map_err(|_| ())?
            else {
                continue;
            };
            let (perms, _) = crate::delivery::entitlement::bot_standing(&snap, inst);
            let mut g = json!({
                "id": snap.server.id.to_string(),
                "name": snap.server.name,
                "icon": null,
                "banner": null,
                "owner": snap.server.owner_id == app.bot_user_id,
                "permissions": perms.to_string(),
                "features": [],
            });
            if page.with_counts {
                // Approximate, as named: the people of the first members
                // page (at most `MAX_MEMBERS_PAGE`) and the bot.
                let members = self
                    .call(|r| r.list_members(inst.server_id, 0, registry::MAX_MEMBERS_PAGE))
                    .map(|m| m.len() as u64 + 1)
                    .map_err(|_| ())?;
                g["approximate_member_count"] = members.into();
                g["approximate_presence_count"] = 0.into();
            }
            out.push(g);
        }
        Ok(serde_json::Value::Array(out))
    }

    /// The application behind a token and its view: `Ok(None)` for a bad
    /// token, `Err(())` if the registry could not answer.
    pub(super) fn api_auth(&mut self, token: &str) -> Result<Option<AppView>, ()> {
        let app = match self.call(|r| r.authenticate(token)) {
            Ok(Some(app)) => app,
            Ok(None) => return Ok(None),
            Err(e) => {
                tracing::debug!(error = %e, "registry error during a REST token lookup");
                return Err(());
            }
        };
        self.view_of(&app).map(Some)
    }

    /// A worker's periodic refresh of an application's view (new
    /// installations become visible): `Ok(None)` if the application is gone.
    pub(super) fn api_refresh(&mut self, app: AppId) -> Result<Option<AppView>, ()> {
        match self.call(|r| r.application(app.0)) {
            Ok(Some(a)) => self.view_of(&a).map(Some),
            Ok(None) => Ok(None),
            Err(_) => Err(()),
        }
    }

    fn view_of(&mut self, app: &registry::model::Application) -> Result<AppView, ()> {
        let installs = self
            .call(|r| r.installations_of_app(app.id))
            .map_err(|_| ())?;
        let until = now_ms() + self.cfg.lease_ttl_ms;
        let mut guilds = Vec::with_capacity(installs.len().min(MAX_VIEW_SERVERS));
        for inst in installs.iter().take(MAX_VIEW_SERVERS) {
            let Some(snap) = self
                .call(|r| r.server_snapshot(inst.server_id))
                .map_err(|_| ())?
            else {
                continue;
            };
            let mut a = guild_access(&snap, inst, app.bot_user_id);
            a.lease_until_ms = until;
            guilds.push(a);
        }
        let dms = self
            .call(|r| r.dm_channels_of(app.bot_user_id))
            .map_err(|_| ())?;
        let mut view = AppView::new(
            AppId(app.id),
            BotUser::of(app),
            app.approved_intents,
            guilds,
        );
        // Ascending ids: the newest `MAX_DMS` are kept.
        for (channel, peer) in dms {
            view.add_dm(proto::ChannelId(channel), peer);
        }
        Ok(view)
    }

    /// A permitted read of server data.
    pub(super) fn api_read(&mut self, app: AppId, route: &ApiRoute, t: Target) -> (u16, Vec<u8>) {
        let server = t.server.0;
        let Ok(snap) = self.call(|r| r.server_snapshot(server)) else {
            return unavailable();
        };
        let Some(snap) = snap else {
            return unknown(10004, "Guild");
        };
        let body = match route {
            ApiRoute::GetChannel { channel: id } => {
                match snap.channels.iter().find(|c| c.channel.id == *id) {
                    Some(c) => channel(c, server),
                    None => return unknown(10003, "Channel"),
                }
            }
            ApiRoute::GuildChannels { .. } => {
                serde_json::Value::Array(snap.channels.iter().map(|c| channel(c, server)).collect())
            }
            ApiRoute::GuildRoles { .. } | ApiRoute::GetGuild { .. } => {
                let Ok(managed) = self.call(|r| r.installations_in_server(server)) else {
                    return unavailable();
                };
                let managed: Vec<(u64, u64)> = managed
                    .iter()
                    .filter_map(|i| i.managed_role_id.map(|r| (r, i.application_id)))
                    .collect();
                if matches!(route, ApiRoute::GuildRoles { .. }) {
                    serde_json::Value::Array(snap.roles.iter().map(|r| role(r, &managed)).collect())
                } else {
                    let (Ok(Some(a)), Ok(Some(inst))) = (
                        self.call(|r| r.application(app.0)),
                        self.call(|r| r.installation(app.0, server)),
                    ) else {
                        return unknown(10004, "Guild");
                    };
                    guild_rest(&snap, &inst, &a, &managed)
                }
            }
            _ => {
                return (
                    500,
                    br#"{"message": "not a read route", "code": 0}"#.to_vec(),
                )
            }
        };
        (200, serde_json::to_vec(&body).expect("json"))
    }
}
