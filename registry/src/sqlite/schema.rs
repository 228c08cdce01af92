//! Brings an SQLite database to the schema of `crate::schema`.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use crate::schema::{SCHEMA_VERSION, SQLITE};
use crate::{error::RegistryError, error::Result};

/// Brings the database to [`SCHEMA_VERSION`]. Safe against a concurrent
/// opener: the version is re-read inside a write transaction.
pub fn migrate(conn: &mut Connection) -> Result<()> {
    conn.execute_batch(&SQLITE.meta())?;
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found: u32 = tx
        .query_row(
            "SELECT value FROM meta WHERE key = 'schema_version'",
            [],
            |r| r.get(0),
        )
        .optional()?
        .unwrap_or(0);
    if found > SCHEMA_VERSION {
        return Err(RegistryError::SchemaTooNew {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    for sql in SQLITE.migrations_after(found) {
        tx.execute_batch(&sql)?;
    }
    if found < SCHEMA_VERSION {
        tx.execute(
            "INSERT INTO meta (key, value) VALUES ('schema_version', ?1)
             ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            [SCHEMA_VERSION],
        )?;
    }
    tx.execute(
        "INSERT OR IGNORE INTO meta (key, value) VALUES ('revision', 0)",
        [],
    )?;
    tx.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database an older build left at schema 10 (before developer
    /// accounts) gains them, and `requested_intents` (0) on its
    /// applications, which are otherwise unchanged.
    #[test]
    fn a_schema_10_database_gains_developers_and_requested_intents() {
        let mut c = Connection::open_in_memory().unwrap();
        c.execute_batch("PRAGMA foreign_keys = ON;").unwrap();
        c.execute_batch(&SQLITE.meta()).unwrap();
        for sql in SQLITE.migrations_after(0).take(10) {
            c.execute_batch(&sql).unwrap();
        }
        c.execute_batch(
            "INSERT INTO meta (key, value) VALUES ('schema_version', 10), ('revision', 7);
             INSERT INTO applications (id, name, bot_user_id, bot_username, approved_intents,
                 token_salt, token_hash, created_at_ms)
             VALUES (5, 'old', 5, 'old', 32768, x'00', x'00', 1);",
        )
        .unwrap();
        migrate(&mut c).unwrap();
        let version: u32 = c
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(version, SCHEMA_VERSION);
        let (approved, requested): (i64, i64) = c
            .query_row(
                "SELECT approved_intents, requested_intents FROM applications WHERE id = 5",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!((approved, requested), (32768, 0));
        c.execute_batch(
            "INSERT INTO developers (id, name, password_hash, created_at_ms)
             VALUES (9, 'alice', '$argon2id$x', 1);
             INSERT INTO developer_apps (developer_id, application_id) VALUES (9, 5);
             DELETE FROM applications WHERE id = 5;",
        )
        .unwrap();
        let left: i64 = c
            .query_row("SELECT COUNT(*) FROM developer_apps", [], |r| r.get(0))
            .unwrap();
        assert_eq!(left, 0, "ownership goes with the application");
        let dup = c.execute(
            "INSERT INTO developers (id, name, password_hash, created_at_ms)
             VALUES (10, 'alice', 'x', 1)",
            [],
        );
        assert!(dup.is_err(), "names are unique");
    }
}
