//! The embedded backend: one SQLite file (WAL, busy timeout) shared by the
//! node's sidecar and the CLI. [`SqliteRegistry`] is a `Backend`: it runs
//! an operation as `crate::backend::Kind` says (a `Single` on the
//! connection in autocommit, a `Read` in a deferred transaction, a `Write`
//! or `Counter` in an IMMEDIATE one that bumps `revision` if anything
//! changed); the files beside this one hold its SQL, one per store trait.
//! The registry's rules are not here: `crate::generic` makes every backend
//! a `Registry`.

mod apps;
mod cached;
mod commands;
mod developers;
mod installs;
mod interactions;
mod nodes;
mod outbox;
mod people;
mod schema;
mod servers;
mod signing;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use rusqlite::{Connection, TransactionBehavior};

use self::cached::Cached;
use crate::backend::{Backend, Kind, Statements};
use crate::model::Server;
use crate::{error::Result, generic};

/// How long a write waits for another process's write before reporting
/// [`crate::error::RegistryError::Unavailable`].
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
    /// failing with [`crate::error::RegistryError::Unavailable`] (default
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
    /// shard placement). Like
    /// [`Registry::create_server`](crate::api::Registry::create_server)
    /// otherwise.
    pub fn create_server_with_id(&self, id: u64, name: &str, owner_id: u64) -> Result<Server> {
        generic::create_server_with_id(self, id, name, owner_id)
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic mid-operation rolled its transaction back; the connection is fine.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Prepared statements kept per connection (more than the registry has).
const STATEMENT_CACHE: usize = 256;

/// The store the rules work on is the connection (in the transaction, if
/// any): `&Connection` implements every store trait (the files beside).
impl Statements for &Connection {}

impl Backend for SqliteRegistry {
    type Tx<'a> = &'a Connection;

    fn run<T>(&self, kind: Kind, mut f: impl FnMut(&mut &Connection) -> Result<T>) -> Result<T> {
        let mut c = self.lock();
        match kind {
            // Autocommit: each statement on its own.
            Kind::Single => f(&mut &*c),
            // A consistent snapshot for multi-statement reads.
            Kind::Read => {
                let tx = c.transaction()?;
                let out = f(&mut &*tx)?;
                tx.commit()?;
                Ok(out)
            }
            // IMMEDIATE so two writers queue on the busy timeout instead of
            // failing on a read-to-write upgrade. Bumps `revision` if
            // anything changed.
            Kind::Write | Kind::Counter => {
                let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let before = tx.total_changes();
                let out = f(&mut &*tx)?;
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
