//! Brings an SQLite database to the schema of `crate::schema`.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use crate::schema::{SCHEMA_VERSION, SQLITE};
use crate::{RegistryError, Result};

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
