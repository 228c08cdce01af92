//! The registry sidecar: one thread per node owns the registry link. Workers
//! ask it for Identify and authenticated REST answers by message; it never
//! sits on the event path (Resume and dispatch never reach it).

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError};
use registry::model::{Application, Installation, ServerSnapshot};
use registry::{OverwriteKind, Registry};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::entitlement::{self, Overwrite, Target};
use crate::gateway::intents;
use crate::gateway::payload::iso8601;
use crate::gateway::session::GuildAccess;
use crate::gateway::{Close, CloseCode};
use crate::messages::*;

/// PROTOCOL.md: at most 2500 servers per shard.
const MAX_SERVERS_PER_SHARD: usize = 2500;

pub struct Sidecar {
    pub registry: Box<dyn Registry>,
    pub workers: Arc<[WorkerHandle]>,
    pub gateway_url: String,
}

impl Sidecar {
    pub fn run(self, rx: Receiver<SidecarRequest>, stop: Arc<std::sync::atomic::AtomicBool>) {
        loop {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(req) => self.handle(req),
                Err(RecvTimeoutError::Timeout) => {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        return;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }

    fn reply(&self, worker: usize, msg: ToWorker) {
        if let Some(w) = self.workers.get(worker) {
            if !w.send(msg) {
                tracing::warn!(worker, "worker inbox full: sidecar reply dropped");
            }
        }
    }

    fn handle(&self, req: SidecarRequest) {
        match req {
            SidecarRequest::Identify {
                worker,
                conn,
                identify,
            } => {
                let result = self.identify(&identify).map(Box::new);
                if let Err(e) = &result {
                    if let IdentifyRefusal::Close(c) = e {
                        tracing::debug!(code = c.code, reason = c.reason, "identify refused");
                    }
                }
                self.reply(worker, ToWorker::Identified { conn, result });
            }
            SidecarRequest::Rest {
                worker,
                conn,
                route,
                token,
            } => {
                let (status, body) = self.rest(route, token.as_deref());
                self.reply(worker, ToWorker::RestReply { conn, status, body });
            }
            SidecarRequest::ApplyState {
                server_id,
                change,
                reply,
            } => {
                let _ = reply.send(self.apply_state(server_id, &change));
            }
        }
    }

    fn identify(
        &self,
        id: &crate::gateway::identify::Identify,
    ) -> Result<IdentifyOk, IdentifyRefusal> {
        let unavailable = |e: registry::RegistryError| {
            tracing::warn!(error = %e, "registry error during identify");
            IdentifyRefusal::InvalidSession
        };
        let app = self
            .registry
            .authenticate(&id.token)
            .map_err(unavailable)?
            .ok_or(IdentifyRefusal::Close(Close::new(
                CloseCode::AuthenticationFailed,
                "authentication failed: invalid token",
            )))?;
        if id.intents & intents::PRIVILEGED & !app.approved_intents != 0 {
            return Err(IdentifyRefusal::Close(Close::new(
                CloseCode::DisallowedIntents,
                "disallowed intents: privileged intent not approved for this application",
            )));
        }
        let servers = self
            .registry
            .servers_for_shard(app.id, id.shard.0, id.shard.1)
            .map_err(unavailable)?;
        if servers.len() > MAX_SERVERS_PER_SHARD {
            return Err(IdentifyRefusal::Close(Close::new(
                CloseCode::ShardingRequired,
                "sharding required: more than 2500 servers on this shard",
            )));
        }
        let mut guilds = Vec::with_capacity(servers.len());
        for server_id in servers {
            let (Some(snap), Some(inst)) = (
                self.registry
                    .server_snapshot(server_id)
                    .map_err(unavailable)?,
                self.registry
                    .installation(app.id, server_id)
                    .map_err(unavailable)?,
            ) else {
                continue; // uninstalled between the two reads
            };
            let access = guild_access(&snap, &inst, app.bot_user_id);
            // Which bot each managed role belongs to (its tags name it).
            let managed: Vec<(u64, u64)> = self
                .registry
                .installations_in_server(server_id)
                .map_err(unavailable)?
                .iter()
                .filter_map(|i| i.managed_role_id.map(|r| (r, i.application_id)))
                .collect();
            let d = serde_json::to_vec(&guild_create(&snap, &inst, &app, &managed)).expect("json");
            guilds.push((access, d));
        }
        guilds.sort_by_key(|g| g.0.id);
        let now = registry::snowflake::unix_ms_now();
        self.registry
            .record_session_start(app.id, now)
            .map_err(unavailable)?;
        Ok(IdentifyOk {
            application_id: app.id,
            application_flags: app.flags,
            bot_user_id: app.bot_user_id,
            user_json: bot_user(&app).to_string().into(),
            intents: id.intents,
            shard: id.shard,
            token_digest: token_digest(&id.token),
            guilds,
        })
    }

    /// Write a server change to the registry, then recompute what every bot
    /// installed there may see.
    fn apply_state(&self, server_id: u64, change: &registry::StateChange) -> Option<AccessUpdate> {
        if let Err(e) = self.registry.apply_state(change) {
            tracing::warn!(server_id, error = %e, "server change from the event stream not applied");
        }
        let snap = self.registry.server_snapshot(server_id).ok()??;
        let installs = self.registry.installations_in_server(server_id).ok()?;
        let mut by_app = Vec::with_capacity(installs.len());
        for inst in installs {
            // Applications created here have bot user id == application id.
            let bot_user_id = self
                .registry
                .application(inst.application_id)
                .ok()
                .flatten()
                .map(|a| a.bot_user_id);
            if let Some(bot) = bot_user_id {
                by_app.push((inst.application_id, guild_access(&snap, &inst, bot)));
            }
        }
        Some(AccessUpdate { server_id, by_app })
    }

    fn rest(&self, route: RestRoute, token: Option<&str>) -> (u16, Vec<u8>) {
        let app = match token.map(|t| self.registry.authenticate(t)) {
            Some(Ok(Some(app))) => app,
            Some(Err(e)) => {
                tracing::warn!(error = %e, "registry error during REST");
                return (
                    503,
                    br#"{"message": "registry unavailable", "code": 0}"#.to_vec(),
                );
            }
            _ => {
                return (
                    401,
                    br#"{"message": "401: Unauthorized", "code": 0}"#.to_vec(),
                )
            }
        };
        let body = match route {
            RestRoute::GatewayBot => {
                let installs = self
                    .registry
                    .installations_of_app(app.id)
                    .map(|i| i.len())
                    .unwrap_or(0);
                let limit = match self
                    .registry
                    .session_start_remaining(app.id, registry::snowflake::unix_ms_now())
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
            RestRoute::UsersMe => bot_user(&app),
            RestRoute::ApplicationsMe => json!({
                "id": app.id.to_string(),
                "name": app.name,
                "description": "",
                "icon": null,
                "bot_public": false,
                "bot_require_code_grant": false,
                "owner": {"id": "0", "username": "gatewayd", "discriminator": "0", "global_name": null, "avatar": null, "flags": 0, "public_flags": 0},
                "verify_key": format!("{:064x}", u128::from(app.id as u32)),
                "flags": app.flags,
                "team": null,
                "summary": "",
                "rpc_origins": [],
                "tags": [],
                "bot": bot_user(&app),
            }),
        };
        (200, serde_json::to_vec(&body).expect("json"))
    }
}

pub fn token_digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn bot_user(app: &Application) -> Value {
    json!({
        "id": app.bot_user_id.to_string(),
        "username": app.bot_username,
        "discriminator": "0",
        "global_name": null,
        "avatar": null,
        "bot": true,
        "system": false,
        "mfa_enabled": false,
        "verified": true,
        "email": null,
        "flags": 0,
        "public_flags": 0,
        "banner": null,
        "accent_color": null,
    })
}

/// Effective permissions of the bot in every channel of a server.
pub fn guild_access(snap: &ServerSnapshot, inst: &Installation, bot_user_id: u64) -> GuildAccess {
    let server_id = snap.server.id;
    let everyone = snap
        .roles
        .iter()
        .find(|r| r.id == server_id)
        .map(|r| r.permissions)
        .unwrap_or(0);
    let role_perms = snap
        .roles
        .iter()
        .filter(|r| inst.role_ids.contains(&r.id))
        .fold(0, |acc, r| acc | r.permissions);
    let mut channels: Vec<(u64, u64)> = snap
        .channels
        .iter()
        .map(|c| {
            let ows: Vec<Overwrite> = c
                .overwrites
                .iter()
                .map(|o| Overwrite {
                    id: o.target_id,
                    target: if o.kind == OverwriteKind::Member {
                        Target::Member
                    } else {
                        Target::Role
                    },
                    allow: o.allow,
                    deny: o.deny,
                })
                .collect();
            let p = entitlement::channel_permissions(
                server_id,
                bot_user_id,
                &inst.role_ids,
                everyone,
                role_perms,
                &ows,
                inst.permissions,
            );
            (c.channel.id, p)
        })
        .collect();
    channels.sort_unstable();
    GuildAccess {
        id: server_id,
        channels,
    }
}

/// The GUILD_CREATE `d` for a server: every field twilight-model and
/// discord.py require, with the bot as the one listed member.
/// `managed` maps each managed role to the application (bot user) owning it.
pub fn guild_create(
    snap: &ServerSnapshot,
    inst: &Installation,
    app: &Application,
    managed: &[(u64, u64)],
) -> Value {
    let s = &snap.server;
    let roles: Vec<Value> = snap
        .roles
        .iter()
        .map(|r| {
            json!({
                "id": r.id.to_string(),
                "name": r.name,
                "permissions": r.permissions.to_string(),
                "position": r.position,
                "color": r.color,
                "colors": {"primary_color": r.color, "secondary_color": null, "tertiary_color": null},
                "hoist": r.hoist,
                "managed": r.managed,
                "mentionable": r.mentionable,
                "icon": null,
                "unicode_emoji": null,
                "flags": 0,
                "tags": match managed.iter().find(|(role, _)| *role == r.id) {
                    Some((_, bot)) => json!({"bot_id": bot.to_string()}),
                    None => json!({}),
                },
            })
        })
        .collect();
    let channels: Vec<Value> = snap
        .channels
        .iter()
        .map(|c| {
            let ch = &c.channel;
            let overwrites: Vec<Value> = c
                .overwrites
                .iter()
                .map(|o| {
                    json!({
                        "id": o.target_id.to_string(),
                        "type": o.kind.as_u8(),
                        "allow": o.allow.to_string(),
                        "deny": o.deny.to_string(),
                    })
                })
                .collect();
            json!({
                "id": ch.id.to_string(),
                "type": ch.kind,
                "guild_id": s.id.to_string(),
                "name": ch.name,
                "position": ch.position,
                "parent_id": ch.parent_id.map(|p| p.to_string()),
                "topic": ch.topic,
                "nsfw": false,
                "rate_limit_per_user": 0,
                "last_message_id": null,
                "permission_overwrites": overwrites,
                "flags": 0,
            })
        })
        .collect();
    let joined = iso8601(inst.installed_at_ms);
    json!({
        "id": s.id.to_string(),
        "name": s.name,
        "icon": null,
        "icon_hash": null,
        "splash": null,
        "discovery_splash": null,
        "banner": null,
        "description": null,
        // Clients reject a zero snowflake; servers made without an owner name themselves.
        "owner_id": if s.owner_id == 0 { s.id } else { s.owner_id }.to_string(),
        "afk_channel_id": null,
        "afk_timeout": 300,
        "widget_enabled": false,
        "verification_level": 0,
        "default_message_notifications": 0,
        "explicit_content_filter": 0,
        "mfa_level": 0,
        "nsfw_level": 0,
        "premium_tier": 0,
        "premium_subscription_count": 0,
        "premium_progress_bar_enabled": false,
        "preferred_locale": "en-US",
        "system_channel_id": null,
        "system_channel_flags": 0,
        "rules_channel_id": null,
        "public_updates_channel_id": null,
        "safety_alerts_channel_id": null,
        "vanity_url_code": null,
        "application_id": null,
        "max_members": 500000,
        "max_video_channel_users": 25,
        "features": [],
        "emojis": [],
        "stickers": [],
        "roles": roles,
        "channels": channels,
        "threads": [],
        "members": [{
            "user": bot_user(app),
            "nick": null,
            "avatar": null,
            "roles": inst.role_ids.iter().map(|r| r.to_string()).collect::<Vec<_>>(),
            "joined_at": joined,
            "premium_since": null,
            "deaf": false,
            "mute": false,
            "pending": false,
            "flags": 0,
            "communication_disabled_until": null,
        }],
        "member_count": 2,
        "presences": [],
        "voice_states": [],
        "stage_instances": [],
        "guild_scheduled_events": [],
        "soundboard_sounds": [],
        "large": false,
        "unavailable": false,
        "lazy": true,
        "joined_at": joined,
        "incidents_data": null,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use registry::SqliteRegistry;

    #[test]
    fn guild_access_uses_registry_roles_and_overwrites() {
        let reg = SqliteRegistry::open_in_memory().unwrap();
        let seed = reg.seed_demo().unwrap().unwrap();
        let snap = reg.server_snapshot(seed.server_id).unwrap().unwrap();
        let inst = reg
            .installation(seed.app.id, seed.server_id)
            .unwrap()
            .unwrap();
        let ga = guild_access(&snap, &inst, seed.app.bot_user_id);
        let p = ga.channel_permissions(seed.general_channel_id).unwrap();
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
        let p = ga.channel_permissions(seed.general_channel_id).unwrap();
        assert_eq!(p & intents::perm::VIEW_CHANNEL, 0);
        let gc = guild_create(&snap, &inst, &seed.app, &[]);
        assert_eq!(gc["id"], seed.server_id.to_string());
        assert!(gc["channels"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "general"));
    }
}
