//! The schema, described once for both engines. Migrations are applied in
//! order and `meta.schema_version` is the number applied, so one version
//! means one schema on SQLite and on PostgreSQL. Append new entries, never
//! edit shipped ones: `shipped_migrations_are_unchanged` pins their text.
//!
//! The text is both engines' at once: the few column types that differ are
//! placeholders a [`Dialect`] fills in. u64 ids and bitsets are stored as
//! their i64 bit pattern (`crate::rows::to_i`), positions are INTEGER (i32)
//! on both.
//!
//! | placeholder | what | SQLite | PostgreSQL |
//! |---|---|---|---|
//! | `{i64}` | ids, bitsets, times, counts | `INTEGER` | `BIGINT` |
//! | `{i16}` | small enums (kinds) | `INTEGER` | `SMALLINT` |
//! | `{bool}`, `{false}` | flags | `INTEGER`, `0` | `BOOLEAN`, `FALSE` |
//! | `{bytes}` | token salt and hash | `BLOB` | `BYTEA` |
//! | `{serial}` | the outbox id | `INTEGER PRIMARY KEY AUTOINCREMENT` | `BIGSERIAL PRIMARY KEY` |
//!
//! SQLite's `{i64} PRIMARY KEY` must stay exactly `INTEGER PRIMARY KEY`: that
//! makes the id the rowid.

const MIGRATIONS: &[&str] = &[
    // 1: initial schema.
    r#"
    CREATE TABLE applications (
        id                  {i64} PRIMARY KEY,
        name                TEXT NOT NULL,
        bot_user_id         {i64} NOT NULL,
        bot_username        TEXT NOT NULL,
        approved_intents    {i64} NOT NULL DEFAULT 0,
        max_concurrency     {i64} NOT NULL DEFAULT 1,
        session_start_total {i64} NOT NULL DEFAULT 1000,
        flags               {i64} NOT NULL DEFAULT 0,
        token_salt          {bytes} NOT NULL,
        token_hash          {bytes} NOT NULL,
        created_at_ms       {i64} NOT NULL
    );
    CREATE INDEX applications_name ON applications(name);

    CREATE TABLE servers (
        id            {i64} PRIMARY KEY,
        name          TEXT NOT NULL,
        owner_id      {i64} NOT NULL,
        created_at_ms {i64} NOT NULL
    );

    CREATE TABLE roles (
        id          {i64} PRIMARY KEY,
        server_id   {i64} NOT NULL REFERENCES servers(id) ON DELETE CASCADE,
        name        TEXT NOT NULL,
        permissions {i64} NOT NULL,
        position    INTEGER NOT NULL,
        color       {i64} NOT NULL DEFAULT 0,
        hoist       {bool} NOT NULL DEFAULT {false},
        mentionable {bool} NOT NULL DEFAULT {false},
        managed     {bool} NOT NULL DEFAULT {false}
    );
    CREATE INDEX roles_server ON roles(server_id);

    CREATE TABLE channels (
        id        {i64} PRIMARY KEY,
        server_id {i64} NOT NULL REFERENCES servers(id) ON DELETE CASCADE,
        name      TEXT NOT NULL,
        kind      {i16} NOT NULL,
        position  INTEGER NOT NULL,
        parent_id {i64} REFERENCES channels(id) ON DELETE SET NULL,
        topic     TEXT
    );
    CREATE INDEX channels_server ON channels(server_id);
    CREATE INDEX channels_parent ON channels(parent_id);

    CREATE TABLE overwrites (
        channel_id  {i64} NOT NULL REFERENCES channels(id) ON DELETE CASCADE,
        target_id   {i64} NOT NULL,
        target_kind {i16} NOT NULL,
        allow       {i64} NOT NULL,
        deny        {i64} NOT NULL,
        ord         INTEGER NOT NULL,
        PRIMARY KEY (channel_id, target_id)
    );
    CREATE INDEX overwrites_target ON overwrites(target_id);

    CREATE TABLE installations (
        application_id  {i64} NOT NULL REFERENCES applications(id) ON DELETE CASCADE,
        server_id       {i64} NOT NULL REFERENCES servers(id) ON DELETE CASCADE,
        permissions     {i64} NOT NULL,
        managed_role_id {i64} REFERENCES roles(id) ON DELETE SET NULL,
        installed_at_ms {i64} NOT NULL,
        PRIMARY KEY (application_id, server_id)
    );
    CREATE INDEX installations_server ON installations(server_id);

    CREATE TABLE installation_roles (
        application_id {i64} NOT NULL,
        server_id      {i64} NOT NULL,
        role_id        {i64} NOT NULL REFERENCES roles(id) ON DELETE CASCADE,
        PRIMARY KEY (application_id, server_id, role_id),
        FOREIGN KEY (application_id, server_id)
            REFERENCES installations(application_id, server_id) ON DELETE CASCADE
    );
    CREATE INDEX installation_roles_role ON installation_roles(role_id);

    CREATE TABLE identify_log (
        application_id {i64} NOT NULL REFERENCES applications(id) ON DELETE CASCADE,
        at_ms          {i64} NOT NULL
    );
    CREATE INDEX identify_log_app_at ON identify_log(application_id, at_ms);
    CREATE INDEX identify_log_at ON identify_log(at_ms);
    "#,
    // 2: identifies counted per application per minute, so checking the
    // 24 h limit reads at most 1,440 rows however many identifies there were
    // (one row per identify made a reconnect storm quadratic). PostgreSQL
    // nodes upsert their minute's row concurrently:
    // `ON CONFLICT DO UPDATE SET count = identify_counts.count + 1`.
    r#"
    DROP TABLE identify_log;
    CREATE TABLE identify_counts (
        application_id {i64} NOT NULL REFERENCES applications(id) ON DELETE CASCADE,
        minute_ms      {i64} NOT NULL,
        count          {i64} NOT NULL,
        PRIMARY KEY (application_id, minute_ms)
    );
    CREATE INDEX identify_counts_minute ON identify_counts(minute_ms);
    "#,
    // 3: the revocation outbox. Every change that takes something away from
    // a bot is written here in the same transaction, so nodes can apply it
    // (pushed, or polled by id) and measure how long that took. On
    // PostgreSQL each insert also sends `NOTIFY gatewayd_revocations, '<id>'`
    // in that transaction.
    r#"
    CREATE TABLE revocations (
        id             {serial},
        at_ms          {i64} NOT NULL,
        kind           {i16} NOT NULL,
        application_id {i64} NOT NULL,
        server_id      {i64} NOT NULL DEFAULT 0
    );
    "#,
    // 4: server snapshots read a server's installation roles by server_id,
    // which the primary key (application_id, server_id, role_id) cannot
    // serve: every identify scanned the whole table (found by loadgen: 4
    // identifies/s on a 1,000-bot registry).
    r#"
    CREATE INDEX installation_roles_server ON installation_roles(server_id);
    "#,
    // 5: people. Users, their memberships of servers with their roles (what
    // the REST edge's member routes read and its moderation routes change,
    // ranked by role position), bans, and direct-message channels between
    // two users (a bot's user is its application's `bot_user_id`; the pair
    // is stored low id first, so one pair has one channel).
    r#"
    CREATE TABLE users (
        id            {i64} PRIMARY KEY,
        username      TEXT NOT NULL,
        global_name   TEXT,
        created_at_ms {i64} NOT NULL
    );

    CREATE TABLE members (
        server_id    {i64} NOT NULL REFERENCES servers(id) ON DELETE CASCADE,
        user_id      {i64} NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        nick         TEXT,
        joined_at_ms {i64} NOT NULL,
        PRIMARY KEY (server_id, user_id)
    );

    CREATE TABLE member_roles (
        server_id {i64} NOT NULL,
        user_id   {i64} NOT NULL,
        role_id   {i64} NOT NULL REFERENCES roles(id) ON DELETE CASCADE,
        PRIMARY KEY (server_id, user_id, role_id),
        FOREIGN KEY (server_id, user_id)
            REFERENCES members(server_id, user_id) ON DELETE CASCADE
    );
    CREATE INDEX member_roles_role ON member_roles(role_id);

    CREATE TABLE bans (
        server_id     {i64} NOT NULL REFERENCES servers(id) ON DELETE CASCADE,
        user_id       {i64} NOT NULL,
        reason        TEXT,
        created_at_ms {i64} NOT NULL,
        PRIMARY KEY (server_id, user_id)
    );

    CREATE TABLE dm_channels (
        id        {i64} PRIMARY KEY,
        user_low  {i64} NOT NULL,
        user_high {i64} NOT NULL,
        UNIQUE (user_low, user_high)
    );
    CREATE INDEX dm_channels_high ON dm_channels(user_high);
    "#,
    // 6: application commands. A command's scope is a server, or 0 for
    // the application's global commands (no foreign key: 0 is no server;
    // deleting a server deletes its commands in the same transaction).
    // `options` is the normalised JSON array the REST edge validated;
    // `version` is a snowflake, new on every change. `command_creates`
    // counts creates per scope per UTC day (`day` = Unix ms / 86,400,000)
    // for the 200-a-day rule, upserted like `identify_counts`.
    r#"
    CREATE TABLE commands (
        id                         {i64} PRIMARY KEY,
        application_id             {i64} NOT NULL REFERENCES applications(id) ON DELETE CASCADE,
        guild_id                   {i64} NOT NULL DEFAULT 0,
        name                       TEXT NOT NULL,
        description                TEXT NOT NULL,
        kind                       {i16} NOT NULL,
        options                    TEXT NOT NULL,
        default_member_permissions {i64},
        nsfw                       {bool} NOT NULL DEFAULT {false},
        version                    {i64} NOT NULL,
        UNIQUE (application_id, guild_id, kind, name)
    );
    CREATE INDEX commands_guild ON commands(guild_id);

    CREATE TABLE command_creates (
        application_id {i64} NOT NULL REFERENCES applications(id) ON DELETE CASCADE,
        guild_id       {i64} NOT NULL,
        day            {i64} NOT NULL,
        count          {i64} NOT NULL,
        PRIMARY KEY (application_id, guild_id, day)
    );
    "#,
    // 7: interaction signing (ADR-12): each application's Ed25519 seed
    // (32 bytes, created on first use) and its interactions endpoint URL
    // (null: interactions go over the gateway). One row per application,
    // gone with it.
    r#"
    CREATE TABLE app_signing (
        application_id            {i64} PRIMARY KEY REFERENCES applications(id) ON DELETE CASCADE,
        signing_seed              {bytes} NOT NULL,
        interactions_endpoint_url TEXT
    );
    "#,
    // 8: interaction claims. Every node consumes every interaction record;
    // the one whose insert lands opens it (delivers it, holds its timer and
    // token), the others drop it. Old claims are pruned as claims are made.
    r#"
    CREATE TABLE interaction_claims (
        id            {i64} PRIMARY KEY,
        node          TEXT NOT NULL,
        claimed_at_ms {i64} NOT NULL
    );
    CREATE INDEX interaction_claims_at ON interaction_claims(claimed_at_ms);
    "#,
    // 9: open interactions' shared state (docs/interactions.md): the token
    // (as its SHA-256), the state (0 waiting, 1 answered, 2 deferred, 3
    // failed), what any node needs to answer or follow it up, and when the
    // token expires. A first response or a miss is one conditional UPDATE
    // from waiting, so exactly one wins across nodes and restarts.
    r#"
    CREATE TABLE interaction_state (
        id            {i64} PRIMARY KEY,
        application_id {i64} NOT NULL,
        token_digest  {bytes} NOT NULL UNIQUE,
        state         {i16} NOT NULL,
        opened_at_ms  {i64} NOT NULL,
        expires_at_ms {i64} NOT NULL,
        node          TEXT NOT NULL,
        detail        TEXT NOT NULL,
        original_id   {i64},
        followups     TEXT NOT NULL
    );
    CREATE INDEX interaction_state_expiry ON interaction_state(expires_at_ms);
    CREATE INDEX interaction_state_node ON interaction_state(node, state);
    "#,
    // 10: cluster membership (docs/cluster.md). One row per node number
    // (1..=65535, named in the session ids it issues): the process holding
    // it (`instance`, random per start), the address of its node-to-node
    // link, and when the claim lapses unless renewed by its heartbeat. A
    // lapsed row is free for the next node to claim: at most 65,535 rows.
    r#"
    CREATE TABLE cluster_nodes (
        node_id       {i64} PRIMARY KEY,
        instance      TEXT NOT NULL,
        link_addr     TEXT NOT NULL,
        expires_at_ms {i64} NOT NULL
    );
    "#,
    // 11: developer accounts and intent requests (issue 29). A developer
    // signs in with a name and a password, kept as an argon2id PHC string
    // (`crate::developers`); `developer_apps` says which applications each
    // one owns (gone with either side). `requested_intents` is what an
    // application's developer asked for; pending is requested & !approved,
    // until an operator approves (approved_intents) or denies it.
    r#"
    ALTER TABLE applications ADD COLUMN requested_intents {i64} NOT NULL DEFAULT 0;

    CREATE TABLE developers (
        id            {i64} PRIMARY KEY,
        name          TEXT NOT NULL UNIQUE,
        password_hash TEXT NOT NULL,
        created_at_ms {i64} NOT NULL
    );

    CREATE TABLE developer_apps (
        developer_id   {i64} NOT NULL REFERENCES developers(id) ON DELETE CASCADE,
        application_id {i64} NOT NULL REFERENCES applications(id) ON DELETE CASCADE,
        PRIMARY KEY (developer_id, application_id)
    );
    CREATE INDEX developer_apps_app ON developer_apps(application_id);
    "#,
];

/// Where the schema version and the revision counter live (created before
/// any migration, so a version can be read).
const META: &str = "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value {i64} NOT NULL);";

pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// One engine's spelling of the placeholders (see the module docs).
pub(crate) struct Dialect {
    i64: &'static str,
    i16: &'static str,
    bool: &'static str,
    false_: &'static str,
    bytes: &'static str,
    serial: &'static str,
}

pub(crate) const SQLITE: Dialect = Dialect {
    i64: "INTEGER",
    i16: "INTEGER",
    bool: "INTEGER",
    false_: "0",
    bytes: "BLOB",
    serial: "INTEGER PRIMARY KEY AUTOINCREMENT",
};

pub(crate) const POSTGRES: Dialect = Dialect {
    i64: "BIGINT",
    i16: "SMALLINT",
    bool: "BOOLEAN",
    false_: "FALSE",
    bytes: "BYTEA",
    serial: "BIGSERIAL PRIMARY KEY",
};

impl Dialect {
    fn render(&self, sql: &str) -> String {
        sql.replace("{i64}", self.i64)
            .replace("{i16}", self.i16)
            .replace("{bool}", self.bool)
            .replace("{false}", self.false_)
            .replace("{bytes}", self.bytes)
            .replace("{serial}", self.serial)
    }

    /// The `meta` table's DDL.
    pub(crate) fn meta(&self) -> String {
        self.render(META)
    }

    /// The migrations after the first `applied`, in order.
    pub(crate) fn migrations_after(&self, applied: u32) -> impl Iterator<Item = String> + '_ {
        MIGRATIONS
            .iter()
            .skip(applied as usize)
            .map(|sql| self.render(sql))
    }
}

#[cfg(test)]
mod tests {
    use sha2::{Digest, Sha256};

    use super::*;

    fn sha256(text: &str) -> String {
        Sha256::digest(text.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    /// The SHA-256 of each shipped migration as each engine runs it, taken
    /// from the two hand-written lists this text replaced: a database
    /// migrated by an older build has exactly this schema. Add a line per
    /// new migration; a changed line means a shipped migration was edited.
    #[test]
    fn shipped_migrations_are_unchanged() {
        let sqlite = [
            "86cf6ecbb3601c4c3f1a1f1254116fe7cea574d6ec4b264c07cbfc563a671cb7",
            "ce545b5b27ee827cc6bf8320571d11bb7b63340f8e157afaa84d24391947a187",
            "c1027b795e29f4f3a64c49dee64a7c03827141796587643fd41828a80b349279",
            "297443eb983d66bf21595d95478d6d3c449d090683d00446f71989acae15e637",
            "c651bd6a8e160a5fa40852ab2adf459ff98795cf969d9d9e8613345264ee215d",
            "17d9174725507782bc317ac42e3803cf595638a1d303e8dc2ca4b6b9dea052f5",
            // 7: app_signing.
            "476e8a39c3af7f39a6c5218bced2889db67d4cf7f0c35787803b001900679a57",
            // 8: interaction_claims.
            "5dabc41a7640143645d8599a19622e5799b00621139fee31ad6cc054d47146dd",
            // 9: interaction_state.
            "99b1786436fcb8131a4b7d377d7272fefe597ac8350520278e5980b094e65fa6",
            // 10: cluster_nodes.
            "0aeaa32dcd3e93de4f41a90e017005aa440b0804d073ebb9be0f1a661fdf1007",
            // 11: developers, developer_apps, requested_intents.
            "cf487e4891537ee8e4255ceb7c52ab13cf1ab36b8cf675ea379999c6f35e2709",
        ];
        let postgres = [
            "1a3cb466e916e54db1de963200edb5cc45643a0fd53b9acfb3007df2d641032a",
            "df17ceb77ce05b551a975eca24dec691a72cf361c4a23c3ebc8ad546d9edbc73",
            "649d47fd83918c53fe456dd3a09eebde6e14bbde887719577fa7b1e4e9cc91c0",
            "297443eb983d66bf21595d95478d6d3c449d090683d00446f71989acae15e637",
            "6e3b5ac838dca8b12441074dae0a83876cb98ac87111ff72b6d0a6f07af350e3",
            "e2f0be14d24ff778ba94367a312df2c8b98dbe5d7c46d57864fd6c396827369a",
            // 7: app_signing.
            "faba10835496a34f91b9e0289d92e745ecc9ca5827dc4f4b620b59f09ef9cc96",
            // 8: interaction_claims.
            "7675dfd2a3aa89b56d4d1a02800b13d07e51a05aede5b8d08ad1919cedc7c206",
            // 9: interaction_state.
            "fd582d8e57c02bfaaabbd517b9e6e6372524246ad8b4fb0562baa8ee28dd9cce",
            // 10: cluster_nodes.
            "5a5b3cc6f3c13017212d4cb709e2cf3fe866824617e0b9be0a397b846103732e",
            // 11: developers, developer_apps, requested_intents.
            "54d0ee2d91ff9d3bf571d963b651a626d62ed1a5d098eb45ff7ef63b37617045",
        ];
        for (dialect, pinned) in [(&SQLITE, sqlite), (&POSTGRES, postgres)] {
            let got: Vec<String> = dialect.migrations_after(0).map(|m| sha256(&m)).collect();
            assert_eq!(got.len(), SCHEMA_VERSION as usize);
            assert_eq!(got[..pinned.len()], pinned[..]);
        }
    }

    #[test]
    fn meta_table_per_engine() {
        assert_eq!(
            SQLITE.meta(),
            "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);"
        );
        assert_eq!(
            POSTGRES.meta(),
            "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value BIGINT NOT NULL);"
        );
    }

    #[test]
    fn every_placeholder_is_filled() {
        for dialect in [&SQLITE, &POSTGRES] {
            for sql in dialect.migrations_after(0) {
                assert!(!sql.contains('{') && !sql.contains('}'), "{sql}");
            }
        }
    }

    #[test]
    fn migrations_after_skips_the_applied() {
        assert_eq!(SQLITE.migrations_after(SCHEMA_VERSION).count(), 0);
        assert_eq!(
            POSTGRES.migrations_after(SCHEMA_VERSION - 1).next(),
            POSTGRES.migrations_after(0).last()
        );
    }
}
