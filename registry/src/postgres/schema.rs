//! Brings a PostgreSQL database to the schema of `crate::schema` (the same
//! migrations as SQLite's, in PostgreSQL's types).

use std::time::Instant;

use tokio::runtime::Runtime;

use super::conn::{col, Conn, WriteKind};
use crate::schema::POSTGRES;
pub(super) use crate::schema::SCHEMA_VERSION;
use crate::{error::RegistryError, error::Result};

/// Advisory lock key (per database) serialising schema migrations.
const MIGRATE_LOCK: i64 = 0x6761_7465_7761_7902;

/// Brings the database to [`SCHEMA_VERSION`]. Safe against concurrent
/// openers (several nodes starting at once): everything runs in one
/// transaction under a transaction-scoped advisory lock, and DDL is
/// transactional in PostgreSQL.
pub(super) fn migrate(rt: &Runtime, deadline: Instant, conn: &mut Conn) -> Result<()> {
    conn.transaction(rt, deadline, WriteKind::Migrate, |tx| {
        tx.batch(&format!(
            "SELECT pg_advisory_xact_lock({MIGRATE_LOCK});\n{}",
            POSTGRES.meta()
        ))?;
        let found: i64 =
            match tx.query_opt("SELECT value FROM meta WHERE key = 'schema_version'", &[])? {
                Some(r) => col(&r, 0)?,
                None => 0,
            };
        let found = u32::try_from(found).unwrap_or(u32::MAX);
        if found > SCHEMA_VERSION {
            return Err(RegistryError::SchemaTooNew {
                found,
                supported: SCHEMA_VERSION,
            });
        }
        for sql in POSTGRES.migrations_after(found) {
            tx.batch(&sql)?;
        }
        if found < SCHEMA_VERSION {
            tx.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', $1)
                 ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                &[&i64::from(SCHEMA_VERSION)],
            )?;
        }
        tx.execute(
            "INSERT INTO meta (key, value) VALUES ('revision', 0) ON CONFLICT (key) DO NOTHING",
            &[],
        )?;
        Ok(())
    })
}
