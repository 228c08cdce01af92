//! The one `impl Registry`: for every [`Backend`]. Each operation is the
//! kind of run it needs (`crate::backend::Kind`) and the rule it runs
//! (`crate::apps`, `crate::ops`, `crate::members`, ...); what a backend adds
//! is only how it runs statements and which SQL they are. Work that needs
//! no database (token parsing, password hashing and verifying) is done
//! outside the run, so no lock or connection is held for it.

use crate::apps::{self, AppStore};
use crate::backend::Backend;
use crate::backend::Kind::{Counter, Read, Single, Write};
use crate::commands as cmds;
use crate::developers::{self as devs, DeveloperStore};
use crate::interactions::{prunes, InteractionStore};
use crate::members::{self, MemberStore};
use crate::model::*;
use crate::nodes::{self, NodeStore};
use crate::ops::{self, InstallStore, ServerStore};
use crate::outbox::OutboxStore;
use crate::{
    api::Registry, error::Result, interactions::CLAIM_KEEP_MS, revocation::RevocationRecord,
    revocation::StateChange,
};
use crate::{seed, signing, token};

/// A server with a chosen id (the backends' `create_server_with_id`).
pub(crate) fn create_server_with_id<B: Backend>(
    b: &B,
    id: u64,
    name: &str,
    owner_id: u64,
) -> Result<Server> {
    b.run(Write, |t| ops::create_server_with_id(t, id, name, owner_id))
}

impl<B: Backend> Registry for B {
    fn authenticate(&self, token: &str) -> Result<Option<Application>> {
        // A malformed token is refused without a statement.
        let tok = token::strip_prefix(token);
        let Some(id) = token::parse_app_id(tok) else {
            return Ok(None);
        };
        self.run(Single, |t| apps::authenticate(t, id, tok))
    }

    fn application(&self, id: u64) -> Result<Option<Application>> {
        self.run(Single, |t| t.application(id))
    }

    fn list_applications(&self) -> Result<Vec<Application>> {
        self.run(Single, |t| t.applications())
    }

    fn create_application(
        &self,
        name: &str,
        approved_privileged_intents: u64,
        max_concurrency: u32,
    ) -> Result<(Application, String)> {
        self.run(Write, |t| {
            apps::create_application(t, name, approved_privileged_intents, max_concurrency)
        })
    }

    fn reset_token(&self, app_id: u64) -> Result<String> {
        self.run(Write, |t| apps::reset_token(t, app_id))
    }

    fn set_approved_intents(&self, app_id: u64, bits: u64) -> Result<Application> {
        self.run(Write, |t| apps::set_approved_intents(t, app_id, bits))
    }

    fn set_max_concurrency(&self, app_id: u64, max_concurrency: u32) -> Result<Application> {
        self.run(Write, |t| {
            apps::set_max_concurrency(t, app_id, max_concurrency)
        })
    }

    fn set_session_start_total(&self, app_id: u64, total: u32) -> Result<Application> {
        self.run(Write, |t| apps::set_session_start_total(t, app_id, total))
    }

    fn delete_application(&self, app_id: u64) -> Result<bool> {
        self.run(Write, |t| ops::delete_application(t, app_id))
    }

    fn create_server(&self, name: &str, owner_id: u64) -> Result<Server> {
        self.run(Write, |t| ops::create_server(t, name, owner_id))
    }

    fn delete_server(&self, server_id: u64) -> Result<bool> {
        self.run(Write, |t| t.delete_server(server_id))
    }

    fn create_channel(
        &self,
        server_id: u64,
        name: &str,
        kind: u8,
        parent: Option<u64>,
    ) -> Result<Channel> {
        self.run(Write, |t| {
            ops::create_channel(t, server_id, name, kind, parent)
        })
    }

    fn create_role(&self, server_id: u64, name: &str, permissions: u64) -> Result<Role> {
        self.run(Write, |t| {
            ops::create_role(t, server_id, name, permissions, false)
        })
    }

    fn set_overwrite(
        &self,
        channel_id: u64,
        target_id: u64,
        target_kind: OverwriteKind,
        allow: u64,
        deny: u64,
    ) -> Result<()> {
        self.run(Write, |t| {
            ops::set_overwrite(t, channel_id, target_id, target_kind, allow, deny)
        })
    }

    fn delete_overwrite(&self, channel_id: u64, target_id: u64) -> Result<bool> {
        self.run(Write, |t| {
            ServerStore::delete_overwrite(t, channel_id, target_id)
        })
    }

    fn list_servers(&self) -> Result<Vec<Server>> {
        self.run(Single, |t| t.servers())
    }

    fn install(&self, app_id: u64, server_id: u64, permissions: u64) -> Result<Installation> {
        self.run(Write, |t| ops::install(t, app_id, server_id, permissions))
    }

    fn uninstall(&self, app_id: u64, server_id: u64) -> Result<bool> {
        self.run(Write, |t| ops::uninstall(t, app_id, server_id))
    }

    fn add_installation_role(&self, app_id: u64, server_id: u64, role_id: u64) -> Result<()> {
        self.run(Write, |t| {
            ops::add_installation_role(t, app_id, server_id, role_id)
        })
    }

    fn remove_installation_role(&self, app_id: u64, server_id: u64, role_id: u64) -> Result<bool> {
        self.run(Write, |t| {
            InstallStore::remove_installation_role(t, app_id, server_id, role_id)
        })
    }

    fn installations_of_app(&self, app_id: u64) -> Result<Vec<Installation>> {
        self.run(Read, |t| InstallStore::installations_of_app(t, app_id))
    }

    fn installation(&self, app_id: u64, server_id: u64) -> Result<Option<Installation>> {
        self.run(Read, |t| InstallStore::installation(t, app_id, server_id))
    }

    fn server_snapshot(&self, server_id: u64) -> Result<Option<ServerSnapshot>> {
        self.run(Read, |t| ops::snapshot(t, server_id))
    }

    fn servers_for_shard(&self, app_id: u64, shard_id: u32, shard_count: u32) -> Result<Vec<u64>> {
        self.run(Single, |t| {
            ops::servers_for_shard(t, app_id, shard_id, shard_count)
        })
    }

    fn record_session_start(&self, app_id: u64, now_ms: u64) -> Result<SessionStartLimit> {
        self.run(Counter, |t| apps::record_session_start(t, app_id, now_ms))
    }

    fn session_start_remaining(&self, app_id: u64, now_ms: u64) -> Result<SessionStartLimit> {
        self.run(Single, |t| apps::session_start_limit(t, app_id, now_ms))
    }

    fn revision(&self) -> Result<u64> {
        self.run(Single, |t| OutboxStore::revision(t))
    }

    fn seed_demo(&self) -> Result<Option<DemoSeed>> {
        self.run(Write, |t| seed::seed_demo(t))
    }

    fn find_demo(&self) -> Result<Option<DemoFound>> {
        self.run(Read, |t| seed::find_demo(t))
    }

    fn installations_in_server(&self, server_id: u64) -> Result<Vec<Installation>> {
        self.run(Read, |t| {
            InstallStore::installations_in_server(t, server_id)
        })
    }

    fn apply_state(&self, change: &StateChange) -> Result<()> {
        self.run(Write, |t| ops::apply_state(t, change))
    }

    fn revocations_since(&self, after: u64, limit: u32) -> Result<Vec<RevocationRecord>> {
        self.run(Single, |t| OutboxStore::revocations_since(t, after, limit))
    }

    fn last_revocation_id(&self) -> Result<u64> {
        self.run(Single, |t| OutboxStore::last_revocation_id(t))
    }

    fn installed(&self, pairs: &[(u64, u64)]) -> Result<Vec<bool>> {
        if pairs.is_empty() {
            return Ok(Vec::new());
        }
        self.run(Single, |t| InstallStore::installed(t, pairs))
    }

    fn create_user(&self, username: &str) -> Result<User> {
        self.run(Write, |t| members::create_user(t, username))
    }

    fn user(&self, id: u64) -> Result<Option<User>> {
        self.run(Read, |t| MemberStore::user(t, id))
    }

    fn add_member(&self, server_id: u64, user_id: u64) -> Result<Member> {
        self.run(Write, |t| members::add_member(t, server_id, user_id))
    }

    fn member(&self, server_id: u64, user_id: u64) -> Result<Option<Member>> {
        self.run(Read, |t| members::member(t, server_id, user_id))
    }

    fn list_members(&self, server_id: u64, after: u64, limit: u32) -> Result<Vec<Member>> {
        self.run(Read, |t| members::list_members(t, server_id, after, limit))
    }

    fn set_member_roles(&self, server_id: u64, user_id: u64, role_ids: &[u64]) -> Result<Member> {
        self.run(Write, |t| {
            members::set_member_roles(t, server_id, user_id, role_ids)
        })
    }

    fn add_member_role(&self, server_id: u64, user_id: u64, role_id: u64) -> Result<bool> {
        self.run(Write, |t| {
            members::add_member_role(t, server_id, user_id, role_id)
        })
    }

    fn remove_member_role(&self, server_id: u64, user_id: u64, role_id: u64) -> Result<bool> {
        self.run(Write, |t| {
            members::remove_member_role(t, server_id, user_id, role_id)
        })
    }

    fn remove_member(&self, server_id: u64, user_id: u64) -> Result<bool> {
        self.run(Write, |t| t.delete_member(server_id, user_id))
    }

    fn ban(&self, server_id: u64, user_id: u64, reason: Option<&str>) -> Result<BanOutcome> {
        self.run(Write, |t| members::ban(t, server_id, user_id, reason))
    }

    fn unban(&self, server_id: u64, user_id: u64) -> Result<bool> {
        self.run(Write, |t| t.delete_ban(server_id, user_id))
    }

    fn open_dm(&self, user_a: u64, user_b: u64) -> Result<u64> {
        self.run(Write, |t| members::open_dm(t, user_a, user_b))
    }

    fn dm_channels_of(&self, user_id: u64) -> Result<Vec<(u64, u64)>> {
        self.run(Read, |t| MemberStore::dm_channels_of(t, user_id))
    }

    fn claim_interaction(&self, id: u64, node: &str, now_ms: u64) -> Result<bool> {
        // The prune runs on its own: a retried run must not insert twice.
        let won = self.run(Single, |t| t.insert_claim(id, node, now_ms))?;
        if prunes(id) {
            let before = now_ms.saturating_sub(CLAIM_KEEP_MS);
            self.run(Single, |t| t.prune_claims(before))?;
        }
        Ok(won)
    }

    fn put_interaction(&self, p: &PendingInteraction, now_ms: u64) -> Result<()> {
        self.run(Single, |t| t.insert_interaction(p))?;
        if prunes(p.id) {
            self.run(Single, |t| t.prune_interactions(now_ms))?;
        }
        Ok(())
    }

    fn interaction(&self, id: u64) -> Result<Option<PendingInteraction>> {
        self.run(Single, |t| InteractionStore::interaction(t, id))
    }

    fn interaction_by_token(&self, digest: &[u8; 32]) -> Result<Option<PendingInteraction>> {
        self.run(Single, |t| {
            InteractionStore::interaction_by_token(t, digest)
        })
    }

    fn settle_interaction(
        &self,
        id: u64,
        to: u8,
        opened_since_ms: u64,
        original: Option<u64>,
    ) -> Result<bool> {
        self.run(Single, |t| {
            InteractionStore::settle_interaction(t, id, to, opened_since_ms, original)
        })
    }

    fn set_interaction_messages(
        &self,
        id: u64,
        original: Option<u64>,
        followups: &[u64],
    ) -> Result<()> {
        self.run(Single, |t| {
            InteractionStore::set_interaction_messages(t, id, original, followups)
        })
    }

    fn waiting_interactions(&self, node: &str, limit: u32) -> Result<Vec<PendingInteraction>> {
        self.run(Single, |t| {
            InteractionStore::waiting_interactions(t, node, limit)
        })
    }

    fn signing_seed(&self, app_id: u64) -> Result<[u8; 32]> {
        // Read first: only the first use writes (and takes the write lock).
        if let Some(seed) = self.run(Single, |t| signing::existing_seed(t, app_id))? {
            return Ok(seed);
        }
        self.run(Write, |t| signing::signing_seed(t, app_id))
    }

    fn set_interactions_endpoint(&self, app_id: u64, url: Option<&str>) -> Result<()> {
        self.run(Write, |t| {
            signing::set_interactions_endpoint(t, app_id, url)
        })
    }

    fn interactions_endpoint(&self, app_id: u64) -> Result<Option<String>> {
        self.run(Read, |t| signing::interactions_endpoint(t, app_id))
    }

    fn commands(&self, app_id: u64, guild_id: Option<u64>) -> Result<Vec<Command>> {
        self.run(Single, |t| cmds::commands(t, app_id, guild_id))
    }

    fn command(&self, app_id: u64, guild_id: Option<u64>, id: u64) -> Result<Option<Command>> {
        self.run(Single, |t| cmds::command(t, app_id, guild_id, id))
    }

    fn put_commands(
        &self,
        app_id: u64,
        guild_id: Option<u64>,
        list: &[NewCommand],
    ) -> Result<Vec<Command>> {
        self.run(Write, |t| cmds::put_commands(t, app_id, guild_id, list))
    }

    fn create_command(
        &self,
        app_id: u64,
        guild_id: Option<u64>,
        cmd: &NewCommand,
    ) -> Result<(Command, bool)> {
        self.run(Write, |t| cmds::create_command(t, app_id, guild_id, cmd))
    }

    fn edit_command(
        &self,
        app_id: u64,
        guild_id: Option<u64>,
        id: u64,
        patch: &CommandPatch,
    ) -> Result<Command> {
        self.run(Write, |t| {
            cmds::edit_command(t, app_id, guild_id, id, patch)
        })
    }

    fn delete_command(&self, app_id: u64, guild_id: Option<u64>, id: u64) -> Result<bool> {
        self.run(Write, |t| cmds::delete_command(t, app_id, guild_id, id))
    }

    fn create_developer(&self, name: &str, password: &str) -> Result<Developer> {
        // Hashed before the run: no lock is held for it.
        let hash = devs::prepare(name, password)?;
        self.run(Write, |t| devs::create(t, name, &hash))
    }

    fn developer_sign_in(&self, name: &str, password: &str) -> Result<Option<Developer>> {
        if !devs::sign_in_allowed(password) {
            return Ok(None);
        }
        let found = self.run(Single, |t| t.credentials(name))?;
        // Verified after the run, with the connection released.
        Ok(devs::finish_sign_in(found, password))
    }

    fn set_developer_password(&self, name: &str, password: &str) -> Result<bool> {
        let hash = devs::prepare_password(password)?;
        self.run(Write, |t| t.set_password_hash(name, &hash))
    }

    fn delete_developer(&self, name: &str) -> Result<bool> {
        self.run(Write, |t| DeveloperStore::delete_developer(t, name))
    }

    fn list_developers(&self) -> Result<Vec<Developer>> {
        self.run(Single, |t| t.developers())
    }

    fn developer(&self, id: u64) -> Result<Option<Developer>> {
        self.run(Single, |t| DeveloperStore::developer(t, id))
    }

    fn own_application(&self, developer_id: u64, app_id: u64) -> Result<()> {
        self.run(Write, |t| devs::own(t, developer_id, app_id))
    }

    fn disown_application(&self, developer_id: u64, app_id: u64) -> Result<bool> {
        self.run(Write, |t| t.delete_ownership(developer_id, app_id))
    }

    fn applications_of_developer(&self, developer_id: u64) -> Result<Vec<Application>> {
        self.run(Single, |t| devs::applications_of(t, developer_id))
    }

    fn developer_owns(&self, developer_id: u64, app_id: u64) -> Result<bool> {
        self.run(Single, |t| t.owns(developer_id, app_id))
    }

    fn request_intents(&self, app_id: u64, bits: u64) -> Result<Application> {
        self.run(Write, |t| devs::request_intents(t, app_id, bits))
    }

    fn intent_requests(&self) -> Result<Vec<Application>> {
        self.run(Single, |t| t.pending_intent_requests())
    }

    fn register_node(
        &self,
        instance: &str,
        link_addr: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<u16> {
        self.run(Single, |t| {
            nodes::register(t, instance, link_addr, now_ms, ttl_ms)
        })
    }

    fn heartbeat_node(
        &self,
        node: u16,
        instance: &str,
        link_addr: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<bool> {
        nodes::check(instance, link_addr)?;
        let until_ms = now_ms.saturating_add(ttl_ms);
        self.run(Single, |t| {
            t.claim(node, instance, link_addr, now_ms, until_ms)
        })
    }

    fn live_nodes(&self, now_ms: u64) -> Result<Vec<(u16, String)>> {
        self.run(Single, |t| t.live_links(now_ms))
    }

    fn node_link(&self, node: u16, now_ms: u64) -> Result<Option<String>> {
        self.run(Single, |t| t.link_of(node, now_ms))
    }

    fn instance_live(&self, instance: &str, now_ms: u64) -> Result<bool> {
        self.run(Single, |t| NodeStore::instance_live(t, instance, now_ms))
    }

    fn leave_node(&self, node: u16, instance: &str) -> Result<()> {
        self.run(Single, |t| t.leave(node, instance))
    }
}
