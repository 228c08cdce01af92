//! A person's interaction from the event stream, checked and completed
//! from the registry before the chat service opens it (docs/interactions.md):
//!
//! - the application is the one the record names (`mentions[0]`, its bot
//!   user), installed in the server, and may see the channel (the event
//!   filter's permissions: `entitlement::guild_access`); otherwise the
//!   person is shown the failure at once (`refused`);
//! - the command is one the application registered (server-scoped first,
//!   then global), which gives `data.id` and, for a server command,
//!   `data.guild_id` (discord.py finds server commands only through it);
//! - the person's member object (roles, permissions in the channel), the
//!   channel object and every field REST.md lists as required.
//!
//! Every node consumes every interaction record: the one whose claim
//! (`Registry::claim_interaction`, an insert-if-absent in the shared
//! registry) lands opens it, the others drop it.
//!
//! A few registry reads per interaction, under the link's deadline; a
//! registry that cannot answer refuses the interaction (the person sees
//! the failure, counted as `refused{reason="registry"}`).

use serde_json::{json, Map, Value};

use super::*;
use crate::api::permit::Target;
use crate::delivery::entitlement::person_permissions;
use crate::protocol::bot_user::BotUser;
use crate::protocol::guild::{channel, member_object, person};
use proto::ChannelId;

/// `attachment_size_limit` in every interaction (discord.py, twilight).
const ATTACHMENT_SIZE_LIMIT: u64 = 8 * 1024 * 1024;

impl Sidecar {
    pub(super) fn interaction(&mut self, raw: RawInteraction) {
        let Some(chat) = self.chat.clone() else {
            return;
        };
        let (target, bot, action) = match self.open_interaction(&raw) {
            Ok(x) => x,
            // Another node opened it (every node consumes every record).
            Err("claimed_elsewhere") => return,
            Err(reason) => {
                tracing::debug!(reason, server = raw.server, "interaction refused");
                let id = serde_json::from_slice::<Value>(&raw.d)
                    .ok()
                    .and_then(|v| v["id"].as_str().and_then(|s| s.parse().ok()))
                    .unwrap_or(0);
                (
                    Target {
                        server: ServerId(raw.server),
                        channel: ChannelId(raw.channel),
                        perms: 0,
                    },
                    None,
                    ChatAction::Interaction(Box::new(NewInteraction {
                        id,
                        d: Value::Null,
                        refused: Some(reason),
                        endpoint: None,
                    })),
                )
            }
        };
        let req = ChatRequest::internal(AppId(raw.app_user), bot, target, action);
        if chat
            .send_timeout(req, super::members::COMMIT_HANDOFF)
            .is_err()
        {
            tracing::warn!("chat service busy: an interaction was dropped");
        }
    }

    /// The interaction the chat service opens, or why it is refused. The
    /// registry rows it is completed from are kept between interactions
    /// while the registry's revision holds (`enrich.rs`).
    fn open_interaction(
        &mut self,
        raw: &RawInteraction,
    ) -> Result<(Target, Option<BotUser>, ChatAction), &'static str> {
        let mut kept = std::mem::take(&mut self.enrich);
        let out = self.complete(raw, &mut kept);
        if out.as_ref().err() == Some(&"registry") {
            kept.forget();
        }
        self.enrich = kept;
        out
    }

    fn complete(
        &mut self,
        raw: &RawInteraction,
        kept: &mut super::enrich::Enrich,
    ) -> Result<(Target, Option<BotUser>, ChatAction), &'static str> {
        let mut d: Map<String, Value> = match serde_json::from_slice(&raw.d) {
            Ok(Value::Object(m)) => m,
            _ => return Err("malformed"),
        };
        let id: u64 = d
            .get("id")
            .and_then(Value::as_str)
            .and_then(|s| s.parse().ok())
            .filter(|&id| id > 0)
            .ok_or("malformed")?;
        let node = self.node_id.clone();
        match self.call(|r| r.claim_interaction(id, &node, registry::snowflake::unix_ms_now())) {
            Ok(true) => {}
            Ok(false) => return Err("claimed_elsewhere"),
            Err(_) => return Err("registry"),
        }
        let kind = d.get("type").and_then(Value::as_u64).unwrap_or(2);
        if !(2..=5).contains(&kind) {
            return Err("malformed");
        }
        let revision = self.call(|r| r.revision()).map_err(|_| "registry")?;
        kept.at(revision);
        let (server, channel_id) = (raw.server, raw.channel);
        let app =
            match kept.application(raw.app_user, || self.call(|r| r.application(raw.app_user))) {
                Ok(Some(a)) if a.bot_user_id == raw.app_user => a,
                Ok(_) => return Err("unknown_application"),
                Err(_) => return Err("registry"),
            };
        let inst = match kept.installation((app.id, server), || {
            self.call(|r| r.installation(app.id, server))
        }) {
            Ok(Some(i)) => i,
            Ok(None) => return Err("not_installed"),
            Err(_) => return Err("registry"),
        };
        let snap = match kept.snapshot(server, || self.call(|r| r.server_snapshot(server))) {
            Ok(Some(s)) => s,
            Ok(None) => return Err("not_installed"),
            Err(_) => return Err("registry"),
        };
        let access = guild_access(&snap, &inst, app.bot_user_id);
        let perms = access
            .channel_permissions(ChannelId(channel_id))
            .ok_or("unknown_channel")?;
        if perms & crate::protocol::intents::perm::VIEW_CHANNEL == 0 {
            return Err("no_access");
        }
        let ch = snap
            .channels
            .iter()
            .find(|c| c.channel.id == channel_id)
            .ok_or("unknown_channel")?;
        // The person: a member of the server (from the registry), or as the
        // producer described them.
        let user_id: u64 = d
            .get("user")
            .or_else(|| d.get("member").and_then(|m| m.get("user")))
            .and_then(|u| u["id"].as_str())
            .and_then(|s| s.parse().ok())
            .ok_or("malformed")?;
        let member = kept
            .member((server, user_id), || {
                self.call(|r| r.member(server, user_id))
            })
            .map_err(|_| "registry")?;
        let (user, roles, joined, nick) = match &member {
            Some(m) => (person(&m.user), m.role_ids.clone(), m.joined_at_ms, m.nick.clone()),
            None => (
                d.get("user")
                    .cloned()
                    .unwrap_or_else(|| json!({"id": user_id.to_string(), "username": "person", "discriminator": "0", "avatar": null, "global_name": null})),
                Vec::new(),
                snap.server.created_at_ms,
                None,
            ),
        };
        let mut m = member_object(user.clone(), nick.as_deref(), &roles, joined);
        m["permissions"] = person_permissions(&snap, ch, user_id, &roles)
            .to_string()
            .into();
        d.remove("user");
        let guild = server.to_string();
        if matches!(kind, 2 | 4) {
            let data = d
                .get_mut("data")
                .and_then(Value::as_object_mut)
                .ok_or("malformed")?;
            let name = data
                .get("name")
                .and_then(Value::as_str)
                .ok_or("malformed")?
                .to_owned();
            let ctype = data.get("type").and_then(Value::as_u64).unwrap_or(1) as u8;
            data.insert("type".into(), ctype.into());
            let (cmd, scoped) = self.command_named(kept, app.id, server, &name, ctype)?;
            data.insert("id".into(), cmd.to_string().into());
            if scoped {
                data.insert("guild_id".into(), guild.clone().into());
            }
        }
        for (k, v) in [
            ("application_id", Value::from(app.id.to_string())),
            ("guild_id", guild.clone().into()),
            (
                "guild",
                json!({"id": guild, "locale": "en-US", "features": []}),
            ),
            ("guild_locale", "en-US".into()),
            ("channel_id", channel_id.to_string().into()),
            ("channel", channel(ch, server)),
            ("member", m),
            ("version", 1.into()),
            ("app_permissions", perms.to_string().into()),
            ("entitlements", json!([])),
            (
                "authorizing_integration_owners",
                json!({"0": server.to_string()}),
            ),
            ("context", 0.into()),
            ("attachment_size_limit", ATTACHMENT_SIZE_LIMIT.into()),
        ] {
            d.insert(k.into(), v);
        }
        d.entry("locale").or_insert_with(|| "en-US".into());
        let target = Target {
            server: ServerId(server),
            channel: ChannelId(channel_id),
            perms,
        };
        let endpoint = kept
            .endpoint(app.id, || {
                Ok(match self.call(|r| r.interactions_endpoint(app.id))? {
                    Some(url) => Some((url, self.call(|r| r.signing_seed(app.id))?)),
                    None => None,
                })
            })
            .map_err(|_: registry::RegistryError| "registry")?
            .map(|e| (*e).clone());
        Ok((
            target,
            Some(BotUser::of(&app)),
            ChatAction::Interaction(Box::new(NewInteraction {
                id,
                d: Value::Object(d),
                refused: None,
                endpoint,
            })),
        ))
    }

    /// The registered command a person used: (its id, server-scoped?).
    fn command_named(
        &mut self,
        kept: &mut super::enrich::Enrich,
        app: u64,
        server: u64,
        name: &str,
        kind: u8,
    ) -> Result<(u64, bool), &'static str> {
        for scope in [Some(server), None] {
            let list = kept
                .commands((app, scope), || self.call(|r| r.commands(app, scope)))
                .map_err(|_| "registry")?;
            if let Some(c) = list.iter().find(|c| c.name == name && c.kind == kind) {
                return Ok((c.id, scope.is_some()));
            }
        }
        Err("unknown_command")
    }
}
