//! PostgreSQL schema migrations, applied in order; `meta.schema_version` is
//! the number applied. Numbered like the SQLite ones (`crate::schema`) so one
//! version means one schema on either engine. Append, never edit shipped ones.
//!
//! Translation from SQLite: u64 ids and bitsets are BIGINT holding the i64
//! bit pattern (the same `as` casts), token salt/hash are BYTEA, flags that
//! SQLite keeps as 0/1 are BOOLEAN, small enums are SMALLINT, positions are
//! INTEGER (i32), and the outbox id is a BIGSERIAL.

use std::time::Instant;

use tokio::runtime::Runtime;

use super::{Conn, WriteKind, MIGRATE_LOCK};
use crate::{RegistryError, Result};

const MIGRATIONS: &[&str] = &[
    // 1: initial schema.
    r#"
    CREATE TABLE applications (
        id                  BIGINT PRIMARY KEY,
        name                TEXT NOT NULL,
        bot_user_id         BIGINT NOT NULL,
        bot_username        TEXT NOT NULL,
        approved_intents    BIGINT NOT NULL DEFAULT 0,
        max_concurrency     BIGINT NOT NULL DEFAULT 1,
        session_start_total BIGINT NOT NULL DEFAULT 1000,
        flags               BIGINT NOT NULL DEFAULT 0,
        token_salt          BYTEA NOT NULL,
        token_hash          BYTEA NOT NULL,
        created_at_ms       BIGINT NOT NULL
    );
    CREATE INDEX applications_name ON applications(name);

    CREATE TABLE servers (
        id            BIGINT PRIMARY KEY,
        name          TEXT NOT NULL,
        owner_id      BIGINT NOT NULL,
        created_at_ms BIGINT NOT NULL
    );

    CREATE TABLE roles (
        id          BIGINT PRIMARY KEY,
        server_id   BIGINT NOT NULL REFERENCES servers(id) ON DELETE CASCADE,
        name        TEXT NOT NULL,
        permissions BIGINT NOT NULL,
        position    INTEGER NOT NULL,
        color       BIGINT NOT NULL DEFAULT 0,
        hoist       BOOLEAN NOT NULL DEFAULT FALSE,
        mentionable BOOLEAN NOT NULL DEFAULT FALSE,
        managed     BOOLEAN NOT NULL DEFAULT FALSE
    );
    CREATE INDEX roles_server ON roles(server_id);

    CREATE TABLE channels (
        id        BIGINT PRIMARY KEY,
        server_id BIGINT NOT NULL REFERENCES servers(id) ON DELETE CASCADE,
        name      TEXT NOT NULL,
        kind      SMALLINT NOT NULL,
        position  INTEGER NOT NULL,
        parent_id BIGINT REFERENCES channels(id) ON DELETE SET NULL,
        topic     TEXT
    );
    CREATE INDEX channels_server ON channels(server_id);
    CREATE INDEX channels_parent ON channels(parent_id);

    CREATE TABLE overwrites (
        channel_id  BIGINT NOT NULL REFERENCES channels(id) ON DELETE CASCADE,
        target_id   BIGINT NOT NULL,
        target_kind SMALLINT NOT NULL,
        allow       BIGINT NOT NULL,
        deny        BIGINT NOT NULL,
        ord         INTEGER NOT NULL,
        PRIMARY KEY (channel_id, target_id)
    );
    CREATE INDEX overwrites_target ON overwrites(target_id);

    CREATE TABLE installations (
        application_id  BIGINT NOT NULL REFERENCES applications(id) ON DELETE CASCADE,
        server_id       BIGINT NOT NULL REFERENCES servers(id) ON DELETE CASCADE,
        permissions     BIGINT NOT NULL,
        managed_role_id BIGINT REFERENCES roles(id) ON DELETE SET NULL,
        installed_at_ms BIGINT NOT NULL,
        PRIMARY KEY (application_id, server_id)
    );
    CREATE INDEX installations_server ON installations(server_id);

    CREATE TABLE installation_roles (
        application_id BIGINT NOT NULL,
        server_id      BIGINT NOT NULL,
        role_id        BIGINT NOT NULL REFERENCES roles(id) ON DELETE CASCADE,
        PRIMARY KEY (application_id, server_id, role_id),
        FOREIGN KEY (application_id, server_id)
            REFERENCES installations(application_id, server_id) ON DELETE CASCADE
    );
    CREATE INDEX installation_roles_role ON installation_roles(role_id);

    CREATE TABLE identify_log (
        application_id BIGINT NOT NULL REFERENCES applications(id) ON DELETE CASCADE,
        at_ms          BIGINT NOT NULL
    );
    CREATE INDEX identify_log_app_at ON identify_log(application_id, at_ms);
    CREATE INDEX identify_log_at ON identify_log(at_ms);
    "#,
    // 2: identifies counted per application per minute (see the SQLite
    // migration 2). Nodes upsert their minute's row concurrently:
    // `ON CONFLICT DO UPDATE SET count = identify_counts.count + 1`.
    r#"
    DROP TABLE identify_log;
    CREATE TABLE identify_counts (
        application_id BIGINT NOT NULL REFERENCES applications(id) ON DELETE CASCADE,
        minute_ms      BIGINT NOT NULL,
        count          BIGINT NOT NULL,
        PRIMARY KEY (application_id, minute_ms)
    );
    CREATE INDEX identify_counts_minute ON identify_counts(minute_ms);
    "#,
    // 3: the revocation outbox. Each insert also sends
    // `NOTIFY gatewayd_revocations, '<id>'` in the same transaction.
    r#"
    CREATE TABLE revocations (
        id             BIGSERIAL PRIMARY KEY,
        at_ms          BIGINT NOT NULL,
        kind           SMALLINT NOT NULL,
        application_id BIGINT NOT NULL,
        server_id      BIGINT NOT NULL DEFAULT 0
    );
    "#, // 4: server snapshots read a server's installation roles by server_id,
    // which the primary key (application_id, server_id, role_id) cannot
    // serve: every identify scanned the whole table (found by loadgen: 4
    // identifies/s on a 1,000-bot registry).
    r#"
    CREATE INDEX installation_roles_server ON installation_roles(server_id);
    "#,
];

pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// Brings the database to [`SCHEMA_VERSION`]. Safe against concurrent
/// openers (several nodes starting at once): everything runs in one
/// transaction under a transaction-scoped advisory lock, and DDL is
/// transactional in PostgreSQL.
pub(super) fn migrate(rt: &Runtime, deadline: Instant, conn: &mut Conn) -> Result<()> {
    conn.transaction(rt, deadline, WriteKind::Migrate, |tx| {
        tx.batch(&format!(
            "SELECT pg_advisory_xact_lock({MIGRATE_LOCK});
             CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BIGINT NOT NULL);"
        ))?;
        let found: i64 =
            match tx.query_opt("SELECT value FROM meta WHERE key = 'schema_version'", &[])? {
                Some(r) => super::col(&r, 0)?,
                None => 0,
            };
        let found = u32::try_from(found).unwrap_or(u32::MAX);
        if found > SCHEMA_VERSION {
            return Err(RegistryError::SchemaTooNew {
                found,
                supported: SCHEMA_VERSION,
            });
        }
        for sql in &MIGRATIONS[found as usize..] {
            tx.batch(sql)?;
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
