//! Schema migrations, applied in order; `meta.schema_version` is the number
//! of migrations applied. Append new entries, never edit shipped ones.

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use crate::{RegistryError, Result};

const MIGRATIONS: &[&str] = &[
    // 1: initial schema. u64 ids and bitsets are stored as i64 bit patterns.
    r#"
    CREATE TABLE applications (
        id                  INTEGER PRIMARY KEY,
        name                TEXT NOT NULL,
        bot_user_id         INTEGER NOT NULL,
        bot_username        TEXT NOT NULL,
        approved_intents    INTEGER NOT NULL DEFAULT 0,
        max_concurrency     INTEGER NOT NULL DEFAULT 1,
        session_start_total INTEGER NOT NULL DEFAULT 1000,
        flags               INTEGER NOT NULL DEFAULT 0,
        token_salt          BLOB NOT NULL,
        token_hash          BLOB NOT NULL,
        created_at_ms       INTEGER NOT NULL
    );
    CREATE INDEX applications_name ON applications(name);

    CREATE TABLE servers (
        id            INTEGER PRIMARY KEY,
        name          TEXT NOT NULL,
        owner_id      INTEGER NOT NULL,
        created_at_ms INTEGER NOT NULL
    );

    CREATE TABLE roles (
        id          INTEGER PRIMARY KEY,
        server_id   INTEGER NOT NULL REFERENCES servers(id) ON DELETE CASCADE,
        name        TEXT NOT NULL,
        permissions INTEGER NOT NULL,
        position    INTEGER NOT NULL,
        color       INTEGER NOT NULL DEFAULT 0,
        hoist       INTEGER NOT NULL DEFAULT 0,
        mentionable INTEGER NOT NULL DEFAULT 0,
        managed     INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX roles_server ON roles(server_id);

    CREATE TABLE channels (
        id        INTEGER PRIMARY KEY,
        server_id INTEGER NOT NULL REFERENCES servers(id) ON DELETE CASCADE,
        name      TEXT NOT NULL,
        kind      INTEGER NOT NULL,
        position  INTEGER NOT NULL,
        parent_id INTEGER REFERENCES channels(id) ON DELETE SET NULL,
        topic     TEXT
    );
    CREATE INDEX channels_server ON channels(server_id);
    CREATE INDEX channels_parent ON channels(parent_id);

    CREATE TABLE overwrites (
        channel_id  INTEGER NOT NULL REFERENCES channels(id) ON DELETE CASCADE,
        target_id   INTEGER NOT NULL,
        target_kind INTEGER NOT NULL,
        allow       INTEGER NOT NULL,
        deny        INTEGER NOT NULL,
        ord         INTEGER NOT NULL,
        PRIMARY KEY (channel_id, target_id)
    );
    CREATE INDEX overwrites_target ON overwrites(target_id);

    CREATE TABLE installations (
        application_id  INTEGER NOT NULL REFERENCES applications(id) ON DELETE CASCADE,
        server_id       INTEGER NOT NULL REFERENCES servers(id) ON DELETE CASCADE,
        permissions     INTEGER NOT NULL,
        managed_role_id INTEGER REFERENCES roles(id) ON DELETE SET NULL,
        installed_at_ms INTEGER NOT NULL,
        PRIMARY KEY (application_id, server_id)
    );
    CREATE INDEX installations_server ON installations(server_id);

    CREATE TABLE installation_roles (
        application_id INTEGER NOT NULL,
        server_id      INTEGER NOT NULL,
        role_id        INTEGER NOT NULL REFERENCES roles(id) ON DELETE CASCADE,
        PRIMARY KEY (application_id, server_id, role_id),
        FOREIGN KEY (application_id, server_id)
            REFERENCES installations(application_id, server_id) ON DELETE CASCADE
    );
    CREATE INDEX installation_roles_role ON installation_roles(role_id);

    CREATE TABLE identify_log (
        application_id INTEGER NOT NULL REFERENCES applications(id) ON DELETE CASCADE,
        at_ms          INTEGER NOT NULL
    );
    CREATE INDEX identify_log_app_at ON identify_log(application_id, at_ms);
    CREATE INDEX identify_log_at ON identify_log(at_ms);
    "#,
    // 2: identifies counted per application per minute, so checking the
    // 24 h limit reads at most 1,440 rows however many identifies there were
    // (one row per identify made a reconnect storm quadratic).
    r#"
    DROP TABLE identify_log;
    CREATE TABLE identify_counts (
        application_id INTEGER NOT NULL REFERENCES applications(id) ON DELETE CASCADE,
        minute_ms      INTEGER NOT NULL,
        count          INTEGER NOT NULL,
        PRIMARY KEY (application_id, minute_ms)
    );
    CREATE INDEX identify_counts_minute ON identify_counts(minute_ms);
    "#,
    // 3: the revocation outbox. Every change that takes something away from
    // a bot is written here in the same transaction, so nodes can apply it
    // (pushed, or polled by id) and measure how long that took.
    r#"
    CREATE TABLE revocations (
        id             INTEGER PRIMARY KEY AUTOINCREMENT,
        at_ms          INTEGER NOT NULL,
        kind           INTEGER NOT NULL,
        application_id INTEGER NOT NULL,
        server_id      INTEGER NOT NULL DEFAULT 0
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

/// Brings the database to [`SCHEMA_VERSION`]. Safe against a concurrent
/// opener: the version is re-read inside a write transaction.
pub fn migrate(conn: &mut Connection) -> Result<()> {
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);",
    )?;
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
    for sql in &MIGRATIONS[found as usize..] {
        tx.execute_batch(sql)?;
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
