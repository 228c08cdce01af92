//! The registry behaviour suite (`behaviour/`) against the embedded SQLite
//! backend, plus what only SQLite has: files on disk, WAL, busy timeout.

use std::path::{Path, PathBuf};

use registry::*;

#[macro_use]
mod behaviour;

/// A fresh database file (in a nested directory that `open` must create).
struct SqliteStore {
    dir: tempfile::TempDir,
    path: PathBuf,
}

impl behaviour::Store for SqliteStore {
    fn open(&self) -> Box<dyn behaviour::Backend> {
        Box::new(SqliteRegistry::open(&self.path).unwrap())
    }

    /// Open, the data may be in the WAL; closed, it is checkpointed.
    fn stored_bytes(&self) -> Vec<u8> {
        all_bytes(self.dir.path())
    }
}

fn store() -> SqliteStore {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/dir/registry.db");
    SqliteStore { dir, path }
}

behaviour_tests!(
    fresh: Box::new(SqliteRegistry::open_in_memory().unwrap()),
    store: store(),
);

/// Every byte of every file under `dir` (db, -wal, -shm).
fn all_bytes(dir: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.extend(std::fs::read(p).unwrap());
            }
        }
    }
    out
}

/// The file holds token hashes: owner-only (what the tokens themselves
/// are not in: `behaviour::secrets_are_never_stored`).
#[cfg(unix)]
#[test]
fn registry_file_is_owner_only() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    let reg = SqliteRegistry::open(&path).unwrap();
    reg.create_application("bot", 0, 1).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(
        mode & 0o077,
        0,
        "registry file must not be group/world readable"
    );
}

#[test]
fn registry_is_object_safe_and_shareable() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<SqliteRegistry>();
    let reg: Box<dyn Registry> = Box::new(SqliteRegistry::open_in_memory().unwrap());
    assert!(reg.list_applications().unwrap().is_empty());
}

#[test]
fn wal_schema_version_and_busy() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    let reg = SqliteRegistry::open(&path).unwrap();
    let raw = rusqlite::Connection::open(&path).unwrap();
    let mode: String = raw
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let v: u32 = raw
        .query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(v, SqliteRegistry::schema_version());

    // Another writer holds the lock past our timeout: transient error, and
    // reads still work (WAL).
    reg.set_busy_timeout(std::time::Duration::from_millis(50))
        .unwrap();
    raw.execute_batch("BEGIN IMMEDIATE").unwrap();
    assert!(matches!(
        reg.create_server("S", 1),
        Err(RegistryError::Unavailable(_))
    ));
    assert!(reg.list_servers().unwrap().is_empty());
    raw.execute_batch("ROLLBACK").unwrap();
    reg.create_server("S", 1).unwrap();
    drop(reg);

    // A database from a newer build is refused, not downgraded.
    raw.execute(
        "UPDATE meta SET value = 99 WHERE key = 'schema_version'",
        [],
    )
    .unwrap();
    assert!(matches!(
        SqliteRegistry::open(&path),
        Err(RegistryError::SchemaTooNew { found: 99, .. })
    ));
}

/// (That no password is anywhere in the files:
/// `behaviour::secrets_are_never_stored`.)
#[test]
fn developer_password_stored_as_argon2id_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    let reg = SqliteRegistry::open(&path).unwrap();
    let pw = "a password of developers";
    let dev = reg.create_developer("alice", pw).unwrap();
    let raw = rusqlite::Connection::open(&path).unwrap();
    let hash: String = raw
        .query_row(
            "SELECT password_hash FROM developers WHERE id = ?1",
            [dev.id as i64],
            |r| r.get(0),
        )
        .unwrap();
    assert!(
        hash.starts_with("$argon2id$v=19$m=19456,t=2,p=1$"),
        "{hash}"
    );
    assert!(!hash.contains(pw));
    reg.set_developer_password("alice", "the second password")
        .unwrap();
    let again: String = raw
        .query_row("SELECT password_hash FROM developers", [], |r| r.get(0))
        .unwrap();
    assert!(again.starts_with("$argon2id$") && again != hash);
}
