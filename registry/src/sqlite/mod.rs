//! The embedded backend: one SQLite file (WAL, busy timeout) shared by the
//! node's sidecar and the CLI. Every operation is one transaction.

mod apps;
mod commands;
mod developers;
mod installs;
mod interactions;
mod nodes;
mod people;
mod schema;
mod servers;
mod signing;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rusqlite::{Connection, TransactionBehavior};

use crate::commands as cmds;
use crate::developers::{self as devs, DeveloperStore};
use crate::members::{self, MemberStore};
use crate::model::*;
use crate::rows::{self, to_i, to_u};
use crate::{
    ops, signing as sign_ops, Registry, Result, Revocation, RevocationRecord, StateChange,
};

/// How long a write waits for another process's write before reporting
/// [`crate::RegistryError::Unavailable`].
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

pub struct SqliteRegistry {
    // Mutex: makes the registry Sync and gives transactions the &mut they need.
    conn: Mutex<Connection>,
    path: Option<PathBuf>,
}

impl std::fmt::Debug for SqliteRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteRegistry")
            .field("path", &self.path)
            .finish()
    }
}

impl SqliteRegistry {
    /// Opens (creating file, parent directories and schema as needed).
    pub fn open(path: &Path) -> Result<Self> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        create_private_file(path)?;
        let conn = Connection::open(path)?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        // journal_mode answers with a row, so it is read, not just set.
        let _mode: String = conn.query_row_cached("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
        conn.execute_batch("PRAGMA synchronous = NORMAL;")?;
        Self::init(conn, Some(path.to_path_buf()))
    }

    pub fn open_in_memory() -> Result<Self> {
        Self::init(Connection::open_in_memory()?, None)
    }

    fn init(mut conn: Connection, path: Option<PathBuf>) -> Result<Self> {
        conn.execute_batch("PRAGMA foreign_keys = ON;")?;
        // Every statement is parsed once and kept (`Cached`): an identify
        // or an interaction runs a dozen of them.
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        schema::migrate(&mut conn)?;
        Ok(Self {
            conn: Mutex::new(conn),
            path,
        })
    }

    /// How long an operation waits on another process's write lock before
    /// failing with [`crate::RegistryError::Unavailable`] (default
    /// [`BUSY_TIMEOUT`]). The node may want it short to bound identify latency.
    pub fn set_busy_timeout(&self, timeout: Duration) -> Result<()> {
        Ok(self.lock().busy_timeout(timeout)?)
    }

    /// None for an in-memory registry.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    pub fn schema_version() -> u32 {
        crate::schema::SCHEMA_VERSION
    }

    /// A server with a chosen id (tests, load generators that need known
    /// shard placement). Like [`Registry::create_server`] otherwise.
    pub fn create_server_with_id(&self, id: u64, name: &str, owner_id: u64) -> Result<Server> {
        self.write(|mut c| ops::create_server_with_id(&mut c, id, name, owner_id))
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic mid-operation rolled its transaction back; the connection is fine.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Consistent snapshot for multi-statement reads.
    fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let mut c = self.lock();
        let tx = c.transaction()?;
        let out = f(&tx)?;
        tx.commit()?;
        Ok(out)
    }

    /// IMMEDIATE so two writers queue on the busy timeout instead of failing
    /// on a read-to-write upgrade. Bumps `revision` if anything changed.
    fn write<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let mut c = self.lock();
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let before = tx.total_changes();
        let out = f(&tx)?;
        if tx.total_changes() != before {
            tx.execute_cached(
                "UPDATE meta SET value = value + 1 WHERE key = 'revision'",
                [],
            )?;
        }
        tx.commit()?;
        Ok(out)
    }
}

/// Prepared statements kept per connection (more than the registry has).
const STATEMENT_CACHE: usize = 256;

/// `query_row` and `execute` through the connection's statement cache
/// (rusqlite's own prepare the SQL text again on every call).
pub(crate) trait Cached {
    fn query_row_cached<T, P: rusqlite::Params, F>(
        &self,
        sql: &str,
        p: P,
        f: F,
    ) -> rusqlite::Result<T>
    where
        F: FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>;
    fn execute_cached<P: rusqlite::Params>(&self, sql: &str, p: P) -> rusqlite::Result<usize>;
}

impl Cached for Connection {
    fn query_row_cached<T, P: rusqlite::Params, F>(
        &self,
        sql: &str,
        p: P,
        f: F,
    ) -> rusqlite::Result<T>
    where
        F: FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    {
        self.prepare_cached(sql)?.query_row(p, f)
    }
    fn execute_cached<P: rusqlite::Params>(&self, sql: &str, p: P) -> rusqlite::Result<usize> {
        self.prepare_cached(sql)?.execute(p)
    }
}

#[cfg(unix)]
fn create_private_file(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    // Holds token hashes: owner-only. SQLite gives -wal/-shm the same mode.
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(not(unix))]
fn create_private_file(_path: &Path) -> std::io::Result<()> {
    Ok(())
}

// The store `crate::ops` works on is the `&Connection` that `read` and
// `write` hand out: `|mut c| ops::f(&mut c, ..)`.
impl Registry for SqliteRegistry {
    fn authenticate(&self, token: &str) -> Result<Option<Application>> {
        self.read(|c| apps::authenticate(c, token))
    }

    fn application(&self, id: u64) -> Result<Option<Application>> {
        self.read(|c| apps::get(c, id))
    }

    fn list_applications(&self) -> Result<Vec<Application>> {
        self.read(apps::list)
    }

    fn create_application(
        &self,
        name: &str,
        approved_privileged_intents: u64,
        max_concurrency: u32,
    ) -> Result<(Application, String)> {
        self.write(|c| apps::create(c, name, approved_privileged_intents, max_concurrency))
    }

    fn reset_token(&self, app_id: u64) -> Result<String> {
        self.write(|c| {
            let t = apps::reset_token(c, app_id)?;
            outbox(
                c,
                Revocation::TokenReset {
                    application_id: app_id,
                },
            )?;
            Ok(t)
        })
    }

    fn set_approved_intents(&self, app_id: u64, bits: u64) -> Result<Application> {
        self.write(|c| {
            let a = apps::set_approved_intents(c, app_id, bits)?;
            outbox(
                c,
                Revocation::IntentsChanged {
                    application_id: app_id,
                },
            )?;
            Ok(a)
        })
    }

    fn set_max_concurrency(&self, app_id: u64, max_concurrency: u32) -> Result<Application> {
        self.write(|c| apps::set_max_concurrency(c, app_id, max_concurrency))
    }

    fn set_session_start_total(&self, app_id: u64, total: u32) -> Result<Application> {
        self.write(|c| apps::set_session_start_total(c, app_id, total))
    }

    fn delete_application(&self, app_id: u64) -> Result<bool> {
        self.write(|mut c| {
            for inst in installs::of_app(c, app_id)? {
                ops::uninstall(&mut c, app_id, inst.server_id)?;
                outbox(
                    c,
                    Revocation::Uninstalled {
                        application_id: app_id,
                        server_id: inst.server_id,
                    },
                )?;
            }
            (&mut c).delete_ownerships_of_app(app_id)?;
            apps::delete(c, app_id)
        })
    }

    fn create_server(&self, name: &str, owner_id: u64) -> Result<Server> {
        self.write(|mut c| ops::create_server(&mut c, name, owner_id))
    }

    fn delete_server(&self, server_id: u64) -> Result<bool> {
        self.write(|c| servers::delete(c, server_id))
    }

    fn create_channel(
        &self,
        server_id: u64,
        name: &str,
        kind: u8,
        parent: Option<u64>,
    ) -> Result<Channel> {
        self.write(|mut c| ops::create_channel(&mut c, server_id, name, kind, parent))
    }

    fn create_role(&self, server_id: u64, name: &str, permissions: u64) -> Result<Role> {
        self.write(|mut c| ops::create_role(&mut c, server_id, name, permissions, false))
    }

    fn set_overwrite(
        &self,
        channel_id: u64,
        target_id: u64,
        target_kind: OverwriteKind,
        allow: u64,
        deny: u64,
    ) -> Result<()> {
        self.write(|mut c| {
            ops::set_overwrite(&mut c, channel_id, target_id, target_kind, allow, deny)
        })
    }

    fn delete_overwrite(&self, channel_id: u64, target_id: u64) -> Result<bool> {
        self.write(|c| servers::delete_overwrite(c, channel_id, target_id))
    }

    fn list_servers(&self) -> Result<Vec<Server>> {
        self.read(servers::list)
    }

    fn install(&self, app_id: u64, server_id: u64, permissions: u64) -> Result<Installation> {
        self.write(|mut c| {
            let before = installs::get(c, app_id, server_id)?;
            let i = ops::install(&mut c, app_id, server_id, permissions)?;
            if before.is_some_and(|b| b.permissions != permissions) {
                outbox(
                    c,
                    Revocation::PermissionsChanged {
                        application_id: app_id,
                        server_id,
                    },
                )?;
            }
            Ok(i)
        })
    }

    fn uninstall(&self, app_id: u64, server_id: u64) -> Result<bool> {
        self.write(|mut c| {
            let removed = ops::uninstall(&mut c, app_id, server_id)?;
            if removed {
                outbox(
                    c,
                    Revocation::Uninstalled {
                        application_id: app_id,
                        server_id,
                    },
                )?;
            }
            Ok(removed)
        })
    }

    fn add_installation_role(&self, app_id: u64, server_id: u64, role_id: u64) -> Result<()> {
        self.write(|mut c| ops::add_installation_role(&mut c, app_id, server_id, role_id))
    }

    fn remove_installation_role(&self, app_id: u64, server_id: u64, role_id: u64) -> Result<bool> {
        self.write(|c| installs::remove_role(c, app_id, server_id, role_id))
    }

    fn installations_of_app(&self, app_id: u64) -> Result<Vec<Installation>> {
        self.read(|c| installs::of_app(c, app_id))
    }

    fn installation(&self, app_id: u64, server_id: u64) -> Result<Option<Installation>> {
        self.read(|c| installs::get(c, app_id, server_id))
    }

    fn server_snapshot(&self, server_id: u64) -> Result<Option<ServerSnapshot>> {
        self.read(|mut c| ops::snapshot(&mut c, server_id))
    }

    fn servers_for_shard(&self, app_id: u64, shard_id: u32, shard_count: u32) -> Result<Vec<u64>> {
        self.read(|mut c| ops::servers_for_shard(&mut c, app_id, shard_id, shard_count))
    }

    fn record_session_start(&self, app_id: u64, now_ms: u64) -> Result<SessionStartLimit> {
        self.write(|c| apps::record_session_start(c, app_id, now_ms))
    }

    fn session_start_remaining(&self, app_id: u64, now_ms: u64) -> Result<SessionStartLimit> {
        self.read(|c| apps::session_start_limit(c, app_id, now_ms))
    }

    fn revision(&self) -> Result<u64> {
        self.read(|c| {
            let v: i64 =
                c.query_row_cached("SELECT value FROM meta WHERE key = 'revision'", [], |r| {
                    r.get(0)
                })?;
            Ok(to_u(v))
        })
    }

    fn seed_demo(&self) -> Result<Option<DemoSeed>> {
        self.write(|mut c| crate::seed::seed_demo(&mut c))
    }

    fn find_demo(&self) -> Result<Option<DemoFound>> {
        self.read(|mut c| crate::seed::find_demo(&mut c))
    }

    fn installations_in_server(&self, server_id: u64) -> Result<Vec<Installation>> {
        self.read(|c| installs::in_server(c, server_id))
    }

    fn apply_state(&self, change: &StateChange) -> Result<()> {
        self.write(|mut c| ops::apply_state(&mut c, change))
    }

    fn revocations_since(&self, after: u64, limit: u32) -> Result<Vec<RevocationRecord>> {
        self.read(|c| {
            let mut st = c.prepare_cached(
                "SELECT id, at_ms, kind, application_id, server_id FROM revocations
                 WHERE id > ?1 ORDER BY id LIMIT ?2",
            )?;
            let rows = st.query_map(rusqlite::params![to_i(after), limit], |r| {
                let (id, at, kind, app, server): (i64, i64, i64, i64, i64) = r.try_into()?;
                Ok(rows::revocation((id, at, kind as u8, app, server)))
            })?;
            let mut out = Vec::new();
            for row in rows {
                out.extend(row?);
            }
            Ok(out)
        })
    }

    fn last_revocation_id(&self) -> Result<u64> {
        self.read(|c| {
            let v: i64 =
                c.query_row_cached("SELECT COALESCE(MAX(id), 0) FROM revocations", [], |r| {
                    r.get(0)
                })?;
            Ok(to_u(v))
        })
    }

    fn installed(&self, pairs: &[(u64, u64)]) -> Result<Vec<bool>> {
        self.read(|c| {
            let mut st = c.prepare_cached(
                "SELECT 1 FROM installations WHERE application_id = ?1 AND server_id = ?2",
            )?;
            pairs
                .iter()
                .map(|&(a, s)| Ok(st.exists(rusqlite::params![to_i(a), to_i(s)])?))
                .collect()
        })
    }

    fn create_user(&self, username: &str) -> Result<User> {
        self.write(|mut c| members::create_user(&mut c, username))
    }

    fn user(&self, id: u64) -> Result<Option<User>> {
        self.read(|mut c| c.user(id))
    }

    fn add_member(&self, server_id: u64, user_id: u64) -> Result<Member> {
        self.write(|mut c| members::add_member(&mut c, server_id, user_id))
    }

    fn member(&self, server_id: u64, user_id: u64) -> Result<Option<Member>> {
        self.read(|mut c| members::member(&mut c, server_id, user_id))
    }

    fn list_members(&self, server_id: u64, after: u64, limit: u32) -> Result<Vec<Member>> {
        self.read(|mut c| members::list_members(&mut c, server_id, after, limit))
    }

    fn set_member_roles(&self, server_id: u64, user_id: u64, role_ids: &[u64]) -> Result<Member> {
        self.write(|mut c| members::set_member_roles(&mut c, server_id, user_id, role_ids))
    }

    fn add_member_role(&self, server_id: u64, user_id: u64, role_id: u64) -> Result<bool> {
        self.write(|mut c| members::add_member_role(&mut c, server_id, user_id, role_id))
    }

    fn remove_member_role(&self, server_id: u64, user_id: u64, role_id: u64) -> Result<bool> {
        self.write(|mut c| members::remove_member_role(&mut c, server_id, user_id, role_id))
    }

    fn remove_member(&self, server_id: u64, user_id: u64) -> Result<bool> {
        self.write(|mut c| c.delete_member(server_id, user_id))
    }

    fn ban(&self, server_id: u64, user_id: u64, reason: Option<&str>) -> Result<BanOutcome> {
        self.write(|mut c| members::ban(&mut c, server_id, user_id, reason))
    }

    fn unban(&self, server_id: u64, user_id: u64) -> Result<bool> {
        self.write(|mut c| c.delete_ban(server_id, user_id))
    }

    fn open_dm(&self, user_a: u64, user_b: u64) -> Result<u64> {
        self.write(|mut c| members::open_dm(&mut c, user_a, user_b))
    }

    fn dm_channels_of(&self, user_id: u64) -> Result<Vec<(u64, u64)>> {
        self.read(|mut c| c.dm_channels_of(user_id))
    }

    fn claim_interaction(&self, id: u64, node: &str, now_ms: u64) -> Result<bool> {
        // Autocommit, outside `write`: a claim is not a registry change.
        let c = self.lock();
        let won = c.execute_cached(
            "INSERT INTO interaction_claims (id, node, claimed_at_ms) VALUES (?1, ?2, ?3)
             ON CONFLICT DO NOTHING",
            rusqlite::params![to_i(id), node, to_i(now_ms)],
        )? == 1;
        if id.is_multiple_of(crate::CLAIM_PRUNE_EVERY) {
            c.execute_cached(
                "DELETE FROM interaction_claims WHERE claimed_at_ms < ?1",
                [to_i(now_ms.saturating_sub(crate::CLAIM_KEEP_MS))],
            )?;
        }
        Ok(won)
    }

    fn put_interaction(&self, p: &PendingInteraction, now_ms: u64) -> Result<()> {
        self.put_interaction_row(p, now_ms)
    }

    fn interaction(&self, id: u64) -> Result<Option<PendingInteraction>> {
        self.interaction_where("id = ?1", &to_i(id))
    }

    fn interaction_by_token(&self, digest: &[u8; 32]) -> Result<Option<PendingInteraction>> {
        self.interaction_where("token_digest = ?1", &&digest[..])
    }

    fn settle_interaction(
        &self,
        id: u64,
        to: u8,
        opened_since_ms: u64,
        original: Option<u64>,
    ) -> Result<bool> {
        self.settle_interaction_row(id, to, opened_since_ms, original)
    }

    fn set_interaction_messages(
        &self,
        id: u64,
        original: Option<u64>,
        followups: &[u64],
    ) -> Result<()> {
        self.set_interaction_messages_row(id, original, followups)
    }

    fn waiting_interactions(&self, node: &str, limit: u32) -> Result<Vec<PendingInteraction>> {
        self.waiting_interaction_rows(node, limit)
    }

    fn create_developer(&self, name: &str, password: &str) -> Result<Developer> {
        // Hashed before the transaction: the lock is not held for it.
        let hash = devs::prepare(name, password)?;
        self.write(|mut c| devs::create(&mut c, name, &hash))
    }

    fn developer_sign_in(&self, name: &str, password: &str) -> Result<Option<Developer>> {
        let found = if devs::sign_in_allowed(password) {
            self.read(|mut c| c.credentials(name))?
        } else {
            return Ok(None);
        };
        // Verified after the read, outside the lock.
        Ok(devs::finish_sign_in(found, password))
    }

    fn set_developer_password(&self, name: &str, password: &str) -> Result<bool> {
        let hash = devs::prepare_password(password)?;
        self.write(|mut c| c.set_password_hash(name, &hash))
    }

    fn delete_developer(&self, name: &str) -> Result<bool> {
        self.write(|mut c| DeveloperStore::delete_developer(&mut c, name))
    }

    fn list_developers(&self) -> Result<Vec<Developer>> {
        self.read(|mut c| c.developers())
    }

    fn developer(&self, id: u64) -> Result<Option<Developer>> {
        self.read(|mut c| DeveloperStore::developer(&mut c, id))
    }

    fn own_application(&self, developer_id: u64, app_id: u64) -> Result<()> {
        self.write(|mut c| devs::own(&mut c, developer_id, app_id))
    }

    fn disown_application(&self, developer_id: u64, app_id: u64) -> Result<bool> {
        self.write(|mut c| c.delete_ownership(developer_id, app_id))
    }

    fn applications_of_developer(&self, developer_id: u64) -> Result<Vec<Application>> {
        self.read(|mut c| devs::applications_of(&mut c, developer_id))
    }

    fn developer_owns(&self, developer_id: u64, app_id: u64) -> Result<bool> {
        self.read(|mut c| c.owns(developer_id, app_id))
    }

    fn request_intents(&self, app_id: u64, bits: u64) -> Result<Application> {
        self.write(|mut c| devs::request_intents(&mut c, app_id, bits))
    }

    fn intent_requests(&self) -> Result<Vec<Application>> {
        self.read(|mut c| c.pending_intent_requests())
    }

    fn register_node(
        &self,
        instance: &str,
        link_addr: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<u16> {
        // Autocommit statements, outside `write`: membership is not a registry change.
        let c = self.lock();
        crate::nodes::register(&mut &*c, instance, link_addr, now_ms, ttl_ms)
    }

    fn heartbeat_node(
        &self,
        node: u16,
        instance: &str,
        link_addr: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<bool> {
        use crate::nodes::NodeStore;
        crate::nodes::check(instance, link_addr)?;
        let c = self.lock();
        (&*c).claim(
            node,
            instance,
            link_addr,
            now_ms,
            now_ms.saturating_add(ttl_ms),
        )
    }

    fn live_nodes(&self, now_ms: u64) -> Result<Vec<(u16, String)>> {
        use crate::nodes::NodeStore;
        let c = self.lock();
        (&*c).live_links(now_ms)
    }

    fn node_link(&self, node: u16, now_ms: u64) -> Result<Option<String>> {
        use crate::nodes::NodeStore;
        let c = self.lock();
        (&*c).link_of(node, now_ms)
    }

    fn instance_live(&self, instance: &str, now_ms: u64) -> Result<bool> {
        use crate::nodes::NodeStore;
        let c = self.lock();
        (&*c).instance_live(instance, now_ms)
    }

    fn leave_node(&self, node: u16, instance: &str) -> Result<()> {
        use crate::nodes::NodeStore;
        let c = self.lock();
        (&*c).leave(node, instance)
    }

    fn signing_seed(&self, app_id: u64) -> Result<[u8; 32]> {
        if let Some(seed) = self.read(|mut c| sign_ops::existing_seed(&mut c, app_id))? {
            return Ok(seed);
        }
        self.write(|mut c| sign_ops::signing_seed(&mut c, app_id))
    }

    fn set_interactions_endpoint(&self, app_id: u64, url: Option<&str>) -> Result<()> {
        self.write(|mut c| sign_ops::set_interactions_endpoint(&mut c, app_id, url))
    }

    fn interactions_endpoint(&self, app_id: u64) -> Result<Option<String>> {
        self.read(|mut c| sign_ops::interactions_endpoint(&mut c, app_id))
    }

    fn commands(&self, app_id: u64, guild_id: Option<u64>) -> Result<Vec<Command>> {
        self.read(|mut c| cmds::commands(&mut c, app_id, guild_id))
    }

    fn command(&self, app_id: u64, guild_id: Option<u64>, id: u64) -> Result<Option<Command>> {
        self.read(|mut c| cmds::command(&mut c, app_id, guild_id, id))
    }

    fn put_commands(
        &self,
        app_id: u64,
        guild_id: Option<u64>,
        list: &[NewCommand],
    ) -> Result<Vec<Command>> {
        self.write(|mut c| cmds::put_commands(&mut c, app_id, guild_id, list))
    }

    fn create_command(
        &self,
        app_id: u64,
        guild_id: Option<u64>,
        cmd: &NewCommand,
    ) -> Result<(Command, bool)> {
        self.write(|mut c| cmds::create_command(&mut c, app_id, guild_id, cmd))
    }

    fn edit_command(
        &self,
        app_id: u64,
        guild_id: Option<u64>,
        id: u64,
        patch: &CommandPatch,
    ) -> Result<Command> {
        self.write(|mut c| cmds::edit_command(&mut c, app_id, guild_id, id, patch))
    }

    fn delete_command(&self, app_id: u64, guild_id: Option<u64>, id: u64) -> Result<bool> {
        self.write(|mut c| cmds::delete_command(&mut c, app_id, guild_id, id))
    }
}

/// Write a revocation to the outbox (in the caller's transaction).
fn outbox(c: &Connection, r: Revocation) -> Result<()> {
    c.execute_cached(
        "INSERT INTO revocations (at_ms, kind, application_id, server_id) VALUES (?1, ?2, ?3, ?4)",
        rusqlite::params![
            to_i(crate::snowflake::unix_ms_now()),
            r.kind(),
            to_i(r.application_id()),
            to_i(r.server_id())
        ],
    )?;
    Ok(())
}
