//! The sidecar's member, moderation and DM routes: where a moderation
//! request is PERMITTED and COMMITTED. They read the member anyway (its
//! roles rank it), so they are decided on the registry's current state, with
//! the event filter's permission function (`entitlement::bot_standing`:
//! the same roles and granted bitset that `guild_access` computes channels
//! from) and the role hierarchy (`entitlement::outranks`).
//!
//! Order: the registry is written first (it is the record); the resulting
//! events (GUILD_MEMBER_UPDATE / REMOVE, GUILD_BAN_ADD / REMOVE) then go to
//! the chat service as one `ChatAction::Commit`, which produces them into
//! the event stream and answers the bot. If the chat service cannot take
//! them within `COMMIT_HANDOFF`, the bot gets 503 and the change stands
//! without its events (logged; `gatewayd_chat_commit_failures_total`).
//!
//! Bots are members through their installation: they are read here
//! (GET member), but acting on another bot's membership is refused (403
//! 50013: an installation is changed with the registry CLI).

use std::time::Duration;

use super::*;
use crate::api::body::{codes, ApiError};
use crate::api::route::ApiRoute;
use crate::delivery::entitlement::{bot_standing, outranks, top_position};
use crate::protocol::guild::{bot_user_public, member, member_object, person};
use proto::permissions as perm;
use proto::ChannelId;
use registry::model::{Member, ServerSnapshot};
use registry::RegistryError;

/// How long the sidecar waits for room in the chat service's queue.
pub const COMMIT_HANDOFF: Duration = Duration::from_secs(2);

fn err(e: ApiError) -> (u16, Vec<u8>) {
    (e.status, e.to_bytes())
}

fn unknown(code: u32, what: &str) -> ApiError {
    ApiError::new(404, code, &format!("Unknown {what}"))
}

fn missing() -> ApiError {
    ApiError::new(403, codes::MISSING_PERMISSIONS, "Missing Permissions")
}

fn unavailable() -> ApiError {
    ApiError::new(503, 0, "registry unavailable")
}

/// A registry failure as the bot sees it.
fn registry_error(e: RegistryError) -> ApiError {
    match e {
        RegistryError::NotFound { what: "role", .. } => unknown(codes::UNKNOWN_ROLE, "Role"),
        RegistryError::NotFound { what: "user", .. } => unknown(codes::UNKNOWN_USER, "User"),
        RegistryError::NotFound { what: "member", .. } => unknown(codes::UNKNOWN_MEMBER, "Member"),
        RegistryError::NotFound { .. } => unknown(codes::UNKNOWN_GUILD, "Guild"),
        RegistryError::Invalid(_) => missing(),
        _ => unavailable(),
    }
}

/// What a member request comes to.
enum Outcome {
    Answer(u16, Vec<u8>),
    /// Commit these events (name, intent, `d`), then answer 204.
    Commit(Vec<(&'static str, u64, Vec<u8>)>),
}

impl Sidecar {
    pub(super) fn api_member(&mut self, req: MemberRequest) {
        let (worker, conn) = (req.worker, req.conn);
        let events = match self.member_outcome(&req) {
            Ok(Outcome::Answer(status, body)) => {
                return self.reply(worker, ToWorker::RestReply { conn, status, body })
            }
            Ok(Outcome::Commit(events)) => events,
            Err(e) => {
                let (status, body) = err(e);
                return self.reply(worker, ToWorker::RestReply { conn, status, body });
            }
        };
        let Some(chat) = self.chat.clone() else {
            let (status, body) = err(ApiError::new(503, 0, "no chat service"));
            return self.reply(worker, ToWorker::RestReply { conn, status, body });
        };
        let commit = ChatRequest {
            worker,
            conn,
            app: req.app,
            bot: Some(req.bot),
            target: req.target,
            action: ChatAction::Commit {
                route: req.route,
                events,
            },
        };
        if chat.send_timeout(commit, COMMIT_HANDOFF).is_err() {
            tracing::warn!("chat service busy: a moderation change was written without its events");
            let (status, body) = err(ApiError::new(
                503,
                0,
                "the chat service is busy: the change was made, its events were not sent",
            ));
            self.reply(worker, ToWorker::RestReply { conn, status, body });
        }
    }

    fn member_outcome(&mut self, req: &MemberRequest) -> Result<Outcome, ApiError> {
        let server = req.target.server.0;
        let snap = self
            .call(|r| r.server_snapshot(server))
            .map_err(|_| unavailable())?
            .ok_or_else(|| unknown(codes::UNKNOWN_GUILD, "Guild"))?;
        let inst = self
            .call(|r| r.installation(req.app.0, server))
            .map_err(|_| unavailable())?
            .ok_or_else(|| unknown(codes::UNKNOWN_GUILD, "Guild"))?;
        let (perms, bot_top) = bot_standing(&snap, &inst);
        let need = |bit: u64| {
            if perms & bit == bit {
                Ok(())
            } else {
                Err(missing())
            }
        };
        let d = |v: serde_json::Value| serde_json::to_vec(&v).expect("json");
        let guild_id = server.to_string();
        use ApiRoute::*;
        match &req.route {
            GetMember { user, .. } => {
                let body = match self.person_member(server, *user)? {
                    Some(m) => member(&m),
                    None => self
                        .bot_member(server, *user)?
                        .ok_or_else(|| unknown(codes::UNKNOWN_MEMBER, "Member"))?,
                };
                Ok(Outcome::Answer(200, d(body)))
            }
            ListMembers { .. } => {
                let approved = self
                    .call(|r| r.application(req.app.0))
                    .map_err(|_| unavailable())?
                    .map_or(0, |a| a.approved_intents);
                if approved & intents::GUILD_MEMBERS == 0 {
                    return Err(ApiError::new(403, codes::MISSING_ACCESS, "Missing Access"));
                }
                let (limit, after) = req.page;
                let list = self
                    .call(|r| r.list_members(server, after, limit))
                    .map_err(registry_error)?;
                let list: Vec<_> = list.iter().map(member).collect();
                Ok(Outcome::Answer(200, d(serde_json::Value::Array(list))))
            }
            AddMemberRole { user, role, .. } | RemoveMemberRole { user, role, .. } => {
                need(perm::MANAGE_ROLES)?;
                let m = self.target_person(server, *user)?;
                let r = snap
                    .roles
                    .iter()
                    .find(|r| r.id == *role)
                    .ok_or_else(|| unknown(codes::UNKNOWN_ROLE, "Role"))?;
                if r.managed || r.id == server || !outranks(bot_top, r.position) {
                    return Err(missing());
                }
                let add = matches!(req.route, AddMemberRole { .. });
                let changed = self
                    .call(|reg| {
                        if add {
                            reg.add_member_role(server, *user, *role)
                        } else {
                            reg.remove_member_role(server, *user, *role)
                        }
                    })
                    .map_err(registry_error)?;
                if !changed {
                    return Ok(Outcome::Answer(204, Vec::new()));
                }
                let mut roles = m.role_ids.clone();
                if add {
                    roles.push(*role);
                    roles.sort_unstable();
                } else {
                    roles.retain(|r| r != role);
                }
                let mut ev =
                    member_object(person(&m.user), m.nick.as_deref(), &roles, m.joined_at_ms);
                ev["guild_id"] = guild_id.into();
                Ok(Outcome::Commit(vec![(
                    "GUILD_MEMBER_UPDATE",
                    intents::GUILD_MEMBERS,
                    d(ev),
                )]))
            }
            Kick { user, .. } => {
                need(perm::KICK_MEMBERS)?;
                let m = self.target_person(server, *user)?;
                self.may_act_on(&snap, bot_top, &m)?;
                if !self
                    .call(|r| r.remove_member(server, *user))
                    .map_err(registry_error)?
                {
                    return Err(unknown(codes::UNKNOWN_MEMBER, "Member"));
                }
                Ok(Outcome::Commit(vec![(
                    "GUILD_MEMBER_REMOVE",
                    intents::GUILD_MEMBERS,
                    d(json!({"guild_id": guild_id, "user": person(&m.user)})),
                )]))
            }
            Ban { user, .. } => {
                need(perm::BAN_MEMBERS)?;
                if self.is_bot(server, *user)? {
                    return Err(missing());
                }
                if let Some(m) = self.person_member(server, *user)? {
                    self.may_act_on(&snap, bot_top, &m)?;
                }
                let u = self
                    .call(|r| r.user(*user))
                    .map_err(|_| unavailable())?
                    .ok_or_else(|| unknown(codes::UNKNOWN_USER, "User"))?;
                let out = self
                    .call(|r| r.ban(server, *user, None))
                    .map_err(registry_error)?;
                let who = json!({"guild_id": guild_id, "user": person(&u)});
                let mut events = Vec::new();
                if out.new {
                    events.push(("GUILD_BAN_ADD", intents::GUILD_MODERATION, d(who.clone())));
                }
                if out.was_member {
                    events.push(("GUILD_MEMBER_REMOVE", intents::GUILD_MEMBERS, d(who)));
                }
                if events.is_empty() {
                    return Ok(Outcome::Answer(204, Vec::new()));
                }
                Ok(Outcome::Commit(events))
            }
            Unban { user, .. } => {
                need(perm::BAN_MEMBERS)?;
                if !self
                    .call(|r| r.unban(server, *user))
                    .map_err(registry_error)?
                {
                    return Err(unknown(codes::UNKNOWN_BAN, "Ban"));
                }
                let u = self.call(|r| r.user(*user)).map_err(|_| unavailable())?;
                let user_json = u.as_ref().map_or(json!({"id": user.to_string()}), person);
                Ok(Outcome::Commit(vec![(
                    "GUILD_BAN_REMOVE",
                    intents::GUILD_MODERATION,
                    d(json!({"guild_id": guild_id, "user": user_json})),
                )]))
            }
            _ => Err(ApiError::new(500, 0, "not a member route")),
        }
    }

    fn person_member(&mut self, server: u64, user: u64) -> Result<Option<Member>, ApiError> {
        self.call(|r| r.member(server, user))
            .map_err(|_| unavailable())
    }

    /// A person who is a member (a bot's membership is its installation's).
    fn target_person(&mut self, server: u64, user: u64) -> Result<Member, ApiError> {
        match self.person_member(server, user)? {
            Some(m) => Ok(m),
            None if self.is_bot(server, user)? => Err(missing()),
            None => Err(unknown(codes::UNKNOWN_MEMBER, "Member")),
        }
    }

    /// Kick and ban: never the owner, only members ranked below the bot.
    fn may_act_on(&self, snap: &ServerSnapshot, bot_top: i32, m: &Member) -> Result<(), ApiError> {
        if m.user.id == snap.server.owner_id || !outranks(bot_top, top_position(snap, &m.role_ids))
        {
            return Err(missing());
        }
        Ok(())
    }

    fn bot_installation(
        &mut self,
        server: u64,
        user: u64,
    ) -> Result<Option<(registry::model::Application, registry::model::Installation)>, ApiError>
    {
        let installs = self
            .call(|r| r.installations_in_server(server))
            .map_err(|_| unavailable())?;
        for inst in installs {
            if let Some(app) = self
                .call(|r| r.application(inst.application_id))
                .map_err(|_| unavailable())?
            {
                if app.bot_user_id == user {
                    return Ok(Some((app, inst)));
                }
            }
        }
        Ok(None)
    }

    fn is_bot(&mut self, server: u64, user: u64) -> Result<bool, ApiError> {
        Ok(self.bot_installation(server, user)?.is_some())
    }

    fn bot_member(
        &mut self,
        server: u64,
        user: u64,
    ) -> Result<Option<serde_json::Value>, ApiError> {
        Ok(self.bot_installation(server, user)?.map(|(app, inst)| {
            member_object(
                bot_user_public(&app),
                None,
                &inst.role_ids,
                inst.installed_at_ms,
            )
        }))
    }

    /// `POST /users/@me/channels`: the DM channel between the bot and a
    /// person (created on first use), as (status, body, the channel and
    /// the person for the worker's view).
    pub(super) fn api_dm(&mut self, bot_user_id: u64, recipient: u64) -> DmOpened {
        let refused = |e: ApiError| DmOpened {
            status: e.status,
            body: e.to_bytes(),
            channel: None,
        };
        let user = match self.call(|r| r.user(recipient)) {
            Ok(Some(u)) => u,
            Ok(None) => return refused(unknown(codes::UNKNOWN_USER, "User")),
            Err(_) => return refused(unavailable()),
        };
        let id = match self.call(|r| r.open_dm(bot_user_id, recipient)) {
            Ok(id) => id,
            Err(RegistryError::Invalid(m)) => {
                return refused(ApiError::form("recipient_id", "BASE_TYPE_INVALID", &m))
            }
            Err(_) => return refused(unavailable()),
        };
        let body = json!({
            "id": id.to_string(),
            "type": 1,
            "last_message_id": null,
            "flags": 0,
            "recipients": [person(&user)],
        });
        DmOpened {
            status: 200,
            body: serde_json::to_vec(&body).expect("json"),
            channel: Some((ChannelId(id), recipient)),
        }
    }
}
