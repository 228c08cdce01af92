//! The scale-out backend: one PostgreSQL database shared by every node's
//! registry sidecar and by the CLI. Same schema (`crate::schema`, in
//! PostgreSQL types) and the same behaviour as the embedded SQLite backend.
//!
//! Connection: one tokio-postgres connection behind a mutex, driven by a
//! current-thread tokio runtime on the calling thread (the node's sidecar
//! thread): each statement is one `block_on` that polls the request, the
//! connection and the call's deadline together. A broken connection is
//! replaced at the next call; if the break is noticed when a transaction
//! begins (nothing sent yet) the call is retried once on the new connection,
//! so a database restart costs no error.
//!
//! Deadline (what makes
//! [`RegistryError::Unavailable`](crate::error::RegistryError::Unavailable) arrive
//! in time rather than a hang): every call, from its first statement (or
//! the connection attempt it needs) to its COMMIT, has `timeout` (given to
//! [`PostgresRegistry::connect`]; the node passes `registry.timeout_ms`). A
//! call still unanswered at its deadline is abandoned: its connection is
//! closed at once (the server rolls back whatever it had begun) and the
//! call returns `Unavailable`. That covers the peer no TCP timer notices: a
//! server that accepts and acknowledges but never answers (SIGSTOP, a hung
//! host, a full disk). The server also runs each statement under
//! `statement_timeout` = `timeout` (lock waits count), and TCP keepalives
//! with `tcp_user_timeout` close a connection whose peer stopped
//! acknowledging while idle.
//!
//! Concurrency (several nodes on one database):
//! - Every writing operation runs in a READ COMMITTED transaction that first
//!   takes a transaction-scoped advisory lock ([`WRITE_LOCK`]), so writers
//!   are serialised cluster-wide exactly like SQLite's single writer: the
//!   check-then-write logic ported from SQLite stays correct, and outbox ids
//!   (a BIGSERIAL) are committed in increasing order, so a node following
//!   `revocations_since(last)` never skips a row that commits late.
//! - Identify counting does not take that lock: it upserts its minute's row
//!   (`ON CONFLICT DO UPDATE SET count = identify_counts.count + 1`), so
//!   identifies from many nodes count exactly and only contend on one row.
//! - Reads run in REPEATABLE READ READ ONLY transactions (one snapshot for
//!   multi-statement reads) or as one autocommit statement; they never wait.
//! - `revision` is bumped in the committing transaction whenever it changed
//!   any row (as SQLite's `total_changes`), by every writer on every node.
//! - Serialization failures and deadlocks are retried (twice) before they
//!   surface as `Unavailable`.
//!
//! Revocations: each outbox insert also runs
//! `pg_notify('gatewayd_revocations', '<outbox id>')` in the same
//! transaction, so it is pushed exactly when (and only if) it commits. See
//! [`RevocationListener`].
//!
//! Files: this one declares and re-exports. [`PostgresRegistry`] (settings,
//! the connection slot, the retry loop: `impl Backend`) is in `registry`;
//! one connection and one attempt on it (`Conn`, `Tx`) in `conn`, over
//! `driver` (the runtime and the deadline) and `fault` (what an error
//! means); the SQL, one file per store trait (`apps`, `servers`,
//! `installs`, `people`, `developers`, `commands`, `signing`, `nodes`,
//! `interactions`, `outbox`), each an `impl` on `Tx`; the listener in
//! `listener`; migrations in `schema`; TLS in `tls`. The registry's rules
//! are not here: `crate::generic` makes every backend a `Registry`.

mod apps;
mod commands;
mod conn;
mod developers;
mod driver;
mod fault;
mod installs;
mod interactions;
mod listener;
mod nodes;
mod outbox;
mod people;
mod registry;
mod schema;
mod servers;
mod signing;
pub mod tls;

pub use self::conn::WRITE_LOCK;
pub use self::listener::{RevocationListener, REVOCATION_CHANNEL};
pub use self::registry::{PostgresRegistry, DEFAULT_TIMEOUT};

/// The connection settings type of [`PostgresRegistry::connect_config`]
/// (re-exported so callers need no `tokio-postgres` dependency of their own).
pub use tokio_postgres::config::Host;
pub use tokio_postgres::Config;
