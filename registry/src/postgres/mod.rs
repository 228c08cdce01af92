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
//! Deadline (what makes [`RegistryError::Unavailable`] arrive in time rather
//! than a hang): every call, from its first statement (or the connection
//! attempt it needs) to its COMMIT, has `timeout` (given to
//! [`PostgresRegistry::connect`]; the node passes `registry.timeout_ms`). A
//! call still unanswered at its deadline is abandoned: its connection is
//! closed at once (the server rolls back whatever it had begun) and the call
//! returns `Unavailable`. That covers the peer no TCP timer notices: a
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
pub mod tls;

use std::collections::HashMap;
use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;
use tokio_postgres::types::{FromSql, ToSql, Type};
use tokio_postgres::{AsyncMessage, Client, Connection, Row, Socket, Statement};

use self::tls::{MakeRustls, RustlsStream, SslMode, TlsSettings};

use crate::commands as cmds;
use crate::developers::{self as devs, DeveloperStore};
use crate::members::{self, MemberStore};
use crate::model::*;
use crate::rows::{self, to_i, to_u};
use crate::{ops, Registry, RegistryError, Result, Revocation, RevocationRecord, StateChange};

/// The connection settings type of [`PostgresRegistry::connect_config`]
/// (re-exported so callers need no `tokio-postgres` dependency of their own).
pub use tokio_postgres::config::Host;
pub use tokio_postgres::Config;

/// The LISTEN/NOTIFY channel; the payload is the outbox id in decimal.
pub const REVOCATION_CHANNEL: &str = "gatewayd_revocations";

/// A bound for connection attempts where the caller has none of its own
/// (e.g. [`PostgresRegistry::listen_revocations`]).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// Advisory lock key (per database) serialising registry writers.
pub const WRITE_LOCK: i64 = 0x6761_7465_7761_7901;
/// Advisory lock key (per database) serialising schema migrations.
const MIGRATE_LOCK: i64 = 0x6761_7465_7761_7902;

/// A column, with a type mismatch reported as an error instead of a panic.
pub(crate) fn col<'a, T: FromSql<'a>>(r: &'a Row, i: usize) -> Result<T> {
    r.try_get(i)
        .map_err(|e| RegistryError::Storage(Box::new(e)))
}

/// A u32 stored in a BIGINT column.
pub(crate) fn col_u32(r: &Row, i: usize) -> Result<u32> {
    let v: i64 = col(r, i)?;
    u32::try_from(v)
        .map_err(|_| RegistryError::Storage(format!("column {i}: {v} is not a u32").into()))
}

/// What a failed statement says about the connection and the transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// Serialization failure or deadlock: the transaction may be retried.
    Retry,
    /// The connection is gone (closed, I/O error, server shutting down,
    /// session terminated): replace it.
    Broken,
    /// Statement or lock timeout, server out of resources: transient.
    Busy,
    /// A prepared statement outlived a schema change: re-prepare.
    StaleStatement,
    /// The call's deadline passed with no answer: the connection was closed
    /// (a frozen or hung server). Not retried: the deadline is spent.
    Deadline,
    /// Anything else (constraint violations, bugs): not transient.
    Other,
}

fn fault_of(e: &tokio_postgres::Error) -> Fault {
    if let Some(db) = e.as_db_error() {
        let c = db.code().code();
        return if c == "40001" || c == "40P01" {
            Fault::Retry
        } else if c.starts_with("08")
            || matches!(c, "57P01" | "57P02" | "57P03" | "57P05" | "25P03")
        {
            Fault::Broken
        } else if c == "57014" || c == "55P03" || c.starts_with("53") {
            Fault::Busy
        } else if c == "0A000" && db.message().contains("cached plan") {
            Fault::StaleStatement
        } else {
            Fault::Other
        };
    }
    let io = std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>());
    let msg = e.to_string();
    if e.is_closed()
        || io
        || msg.starts_with("error connecting to server")
        || msg.starts_with("timeout waiting for server")
        || msg.starts_with("error communicating with the server")
    {
        Fault::Broken
    } else {
        Fault::Other
    }
}

fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {} ({})", e, db.message(), db.code().code()),
        None => match std::error::Error::source(e) {
            Some(s) => format!("{e}: {s}"),
            None => e.to_string(),
        },
    }
}

impl From<tokio_postgres::Error> for RegistryError {
    fn from(e: tokio_postgres::Error) -> Self {
        match fault_of(&e) {
            Fault::Retry | Fault::Broken | Fault::Busy | Fault::Deadline => {
                RegistryError::Unavailable(describe(&e))
            }
            Fault::StaleStatement | Fault::Other => RegistryError::Storage(Box::new(e)),
        }
    }
}

/// How an operation talks to the database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriteKind {
    /// One read-only statement, autocommit: a single round trip.
    Single,
    /// A consistent snapshot for several reads.
    Read,
    /// A registry change: serialised by [`WRITE_LOCK`], bumps `revision`.
    Write,
    /// Identify counting: no global lock, bumps `revision`.
    Counter,
    /// Schema migration (takes its own lock), no revision bump.
    Migrate,
}

/// The tokio-postgres connection half: the socket, polled while a statement
/// waits. Dropping it closes the socket.
type PgConnection = Connection<Socket, RustlsStream>;

/// Why a statement did not complete.
enum Stop {
    /// The server answered with an error, or the request failed.
    Pg(tokio_postgres::Error),
    /// The connection ended (closed by the server, an I/O error).
    Ended(Option<tokio_postgres::Error>),
    /// The call's deadline passed first.
    Deadline,
}

/// Runs `fut` (a request on `connection`'s client) on `rt`, polling the
/// connection beside it, until it completes, the connection ends, or
/// `deadline` passes, whichever is first.
fn drive<T>(
    rt: &Runtime,
    connection: &mut PgConnection,
    deadline: Instant,
    fut: impl Future<Output = std::result::Result<T, tokio_postgres::Error>>,
) -> std::result::Result<T, Stop> {
    rt.block_on(async {
        let mut fut = pin!(fut);
        let mut sleep = pin!(tokio::time::sleep_until(deadline.into()));
        std::future::poll_fn(|cx| {
            if let Poll::Ready(r) = fut.as_mut().poll(cx) {
                return Poll::Ready(r.map_err(Stop::Pg));
            }
            if let Poll::Ready(r) = Pin::new(&mut *connection).poll(cx) {
                return Poll::Ready(Err(Stop::Ended(r.err())));
            }
            if sleep.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(Stop::Deadline));
            }
            Poll::Pending
        })
        .await
    })
}

/// Connects within `deadline` (TCP, startup, authentication).
fn connect_by(
    rt: &Runtime,
    config: &Config,
    tls: &TlsSettings,
    deadline: Instant,
) -> Result<(Client, PgConnection)> {
    // Read at every (re)connection: a replaced `sslrootcert` is picked up.
    let make = MakeRustls(tls::client_config(tls)?);
    // The timer is made inside the runtime (it needs its time driver).
    let attempt =
        rt.block_on(async { tokio::time::timeout_at(deadline.into(), config.connect(make)).await });
    match attempt {
        Ok(r) => Ok(r?),
        Err(_) => Err(deadline_passed("connecting")),
    }
}

fn deadline_passed(doing: &str) -> RegistryError {
    RegistryError::Unavailable(format!(
        "PostgreSQL did not answer in time ({doing}): call abandoned, connection closed"
    ))
}

/// A current-thread runtime for one registry or listener: it runs only
/// inside our `block_on` calls, on the calling thread.
fn runtime() -> Result<Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(RegistryError::Io)
}

/// One connection and its prepared statements.
pub(crate) struct Conn {
    client: Client,
    connection: PgConnection,
    stmts: HashMap<String, Statement>,
    /// True between BEGIN and COMMIT/ROLLBACK: still true at the next call
    /// only if a panic unwound through a transaction; the connection is then
    /// dropped rather than reused.
    in_tx: bool,
    /// The connection ended or a deadline passed on it: replace it.
    broken: bool,
}

/// A failed attempt: the error, its class, and whether it failed at BEGIN
/// (so nothing of it reached the database).
struct Failure {
    error: RegistryError,
    fault: Option<Fault>,
    at_begin: bool,
}

impl Conn {
    fn open(
        rt: &Runtime,
        config: &Config,
        tls: &TlsSettings,
        statement_timeout: Duration,
        deadline: Instant,
    ) -> Result<Conn> {
        let (client, connection) = connect_by(rt, config, tls, deadline)?;
        let mut conn = Conn {
            client,
            connection,
            stmts: HashMap::new(),
            in_tx: false,
            broken: false,
        };
        let ms = statement_timeout.as_millis().max(1);
        // A session idle inside a transaction would hold the write lock for
        // every node: the server ends it (we never idle between statements).
        let idle = (ms * 4).max(10_000);
        let Conn {
            client, connection, ..
        } = &mut conn;
        let set = format!(
            "SET statement_timeout = {ms}; SET idle_in_transaction_session_timeout = {idle}"
        );
        match drive(rt, connection, deadline, client.batch_execute(&set)) {
            Ok(()) => Ok(conn),
            Err(Stop::Pg(e)) | Err(Stop::Ended(Some(e))) => Err(e.into()),
            Err(Stop::Ended(None)) => Err(RegistryError::Unavailable(
                "PostgreSQL closed the connection while it was being set up".into(),
            )),
            Err(Stop::Deadline) => Err(deadline_passed("setting up the connection")),
        }
    }

    fn is_usable(&self) -> bool {
        !(self.broken || self.in_tx || self.client.is_closed())
    }

    /// Runs `f` once as `kind`; a failure says how it failed.
    fn attempt<T>(
        &mut self,
        rt: &Runtime,
        deadline: Instant,
        kind: WriteKind,
        f: &mut impl FnMut(&mut Tx<'_>) -> Result<T>,
    ) -> Result<T, Failure> {
        let begin = match kind {
            WriteKind::Single => None,
            WriteKind::Read => Some("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY".to_owned()),
            WriteKind::Write => Some(format!(
                "BEGIN ISOLATION LEVEL READ COMMITTED; SELECT pg_advisory_xact_lock({WRITE_LOCK})"
            )),
            WriteKind::Counter | WriteKind::Migrate => {
                Some("BEGIN ISOLATION LEVEL READ COMMITTED".to_owned())
            }
        };
        let bumps = matches!(kind, WriteKind::Write | WriteKind::Counter);
        let mut tx = Tx {
            conn: self,
            rt,
            deadline,
            changes: 0,
            fault: None,
        };
        if let Some(sql) = &begin {
            tx.conn.in_tx = true;
            if let Err(error) = tx.batch(sql) {
                let fault = tx.fault;
                self.finish_failed(rt, deadline, fault);
                return Err(Failure {
                    error,
                    fault,
                    at_begin: true,
                });
            }
        }
        let out = f(&mut tx).and_then(|v| {
            if begin.is_some() {
                if bumps && tx.changes > 0 {
                    tx.batch("UPDATE meta SET value = value + 1 WHERE key = 'revision'; COMMIT")?;
                } else {
                    tx.batch("COMMIT")?;
                }
                tx.conn.in_tx = false;
            }
            Ok(v)
        });
        let fault = tx.fault;
        out.map_err(|error| {
            if begin.is_some() {
                self.finish_failed(rt, deadline, fault);
            }
            Failure {
                error,
                fault,
                at_begin: false,
            }
        })
    }

    /// Ends a failed transaction (best effort; a broken connection is
    /// dropped by the caller anyway).
    fn finish_failed(&mut self, rt: &Runtime, deadline: Instant, fault: Option<Fault>) {
        if self.broken || matches!(fault, Some(Fault::Broken | Fault::Deadline)) {
            return;
        }
        let Conn {
            client, connection, ..
        } = self;
        match drive(rt, connection, deadline, client.batch_execute("ROLLBACK")) {
            Ok(()) => self.in_tx = false,
            Err(Stop::Pg(_)) => {}
            Err(Stop::Ended(_) | Stop::Deadline) => self.broken = true,
        }
    }

    /// For migrations on a fresh connection: one attempt, no reconnects.
    fn transaction<T>(
        &mut self,
        rt: &Runtime,
        deadline: Instant,
        kind: WriteKind,
        mut f: impl FnMut(&mut Tx<'_>) -> Result<T>,
    ) -> Result<T> {
        self.attempt(rt, deadline, kind, &mut f)
            .map_err(|fail| fail.error)
    }
}

/// The statements of one operation, on one connection, under one deadline.
pub(crate) struct Tx<'a> {
    conn: &'a mut Conn,
    rt: &'a Runtime,
    deadline: Instant,
    /// Rows written so far: decides whether `revision` is bumped.
    changes: u64,
    /// The class of the last failed statement.
    fault: Option<Fault>,
}

type Params<'p> = &'p [&'p (dyn ToSql + Sync)];

impl Tx<'_> {
    /// Runs one request built from the client, under the call's deadline.
    fn run<'c, T, F>(&'c mut self, make: impl FnOnce(&'c Client) -> F) -> Result<T>
    where
        F: Future<Output = std::result::Result<T, tokio_postgres::Error>> + 'c,
    {
        let Conn {
            client,
            connection,
            broken,
            ..
        } = &mut *self.conn;
        match drive(self.rt, connection, self.deadline, make(client)) {
            Ok(v) => Ok(v),
            Err(Stop::Pg(e)) => {
                let fault = fault_of(&e);
                if fault == Fault::Broken {
                    *broken = true;
                }
                self.fault = Some(fault);
                Err(e.into())
            }
            Err(Stop::Ended(e)) => {
                *broken = true;
                self.fault = Some(Fault::Broken);
                Err(match e {
                    Some(e) => RegistryError::Unavailable(describe(&e)),
                    None => RegistryError::Unavailable("PostgreSQL closed the connection".into()),
                })
            }
            Err(Stop::Deadline) => {
                *broken = true;
                self.fault = Some(Fault::Deadline);
                Err(deadline_passed("waiting for an answer"))
            }
        }
    }

    fn stmt(&mut self, sql: &str) -> Result<Statement> {
        if let Some(s) = self.conn.stmts.get(sql) {
            return Ok(s.clone());
        }
        let s = self.run(|c| c.prepare(sql))?;
        self.conn.stmts.insert(sql.to_owned(), s.clone());
        Ok(s)
    }

    /// Simple-query protocol: several statements, no parameters, no rows.
    pub(crate) fn batch(&mut self, sql: &str) -> Result<()> {
        self.run(|c| c.batch_execute(sql))
    }

    pub(crate) fn query(&mut self, sql: &str, params: Params<'_>) -> Result<Vec<Row>> {
        let st = self.stmt(sql)?;
        self.run(|c| async move { c.query(&st, params).await })
    }

    /// Without a prepare round trip, whatever the statement cache holds.
    pub(crate) fn query_typed(
        &mut self,
        sql: &str,
        params: &[(&(dyn ToSql + Sync), Type)],
    ) -> Result<Vec<Row>> {
        self.run(|c| c.query_typed(sql, params))
    }

    pub(crate) fn query_opt(&mut self, sql: &str, params: Params<'_>) -> Result<Option<Row>> {
        Ok(self.query(sql, params)?.into_iter().next())
    }

    pub(crate) fn query_one(&mut self, sql: &str, params: Params<'_>) -> Result<Row> {
        self.query_opt(sql, params)?
            .ok_or_else(|| RegistryError::Storage(format!("no row from: {sql}").into()))
    }

    /// INSERT/UPDATE/DELETE: returns (and counts) the rows changed.
    pub(crate) fn execute(&mut self, sql: &str, params: Params<'_>) -> Result<u64> {
        let st = self.stmt(sql)?;
        let n = self.run(|c| async move { c.execute(&st, params).await })?;
        self.changes += n;
        Ok(n)
    }
}

/// The PostgreSQL registry. `Sync`: calls from several threads queue on the
/// one connection. Not for use from inside a tokio runtime (its calls block).
pub struct PostgresRegistry {
    config: Config,
    /// `sslmode` / `sslrootcert`, taken out of the URL.
    tls: TlsSettings,
    /// Each call's deadline, and the server's `statement_timeout`.
    statement_timeout: Duration,
    conn: Mutex<Link>,
}

/// The runtime that drives the connection, and the connection (None until
/// the first call, or after it broke).
struct Link {
    rt: Runtime,
    conn: Option<Conn>,
}

impl std::fmt::Debug for PostgresRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        f.debug_struct("PostgresRegistry")
            .field("hosts", &self.config.get_hosts())
            .field("ports", &self.config.get_ports())
            .field("dbname", &self.config.get_dbname())
            .field("user", &self.config.get_user())
            .field("tls", &self.tls)
            .field("statement_timeout", &self.statement_timeout)
            .finish()
    }
}

fn parse_url(url: &str) -> Result<(Config, TlsSettings)> {
    let (rest, tls) = tls::split_url(url)?;
    // The parser's message never repeats the URL (which may hold a password).
    let mut config = rest
        .parse::<Config>()
        .map_err(|e| RegistryError::Invalid(format!("database url: {e}")))?;
    config.ssl_mode(tls.mode.for_driver());
    Ok((config, tls))
}

/// The TLS settings of a configuration made without [`tls::split_url`]:
/// tokio-postgres's own modes, no certificate check.
fn tls_of(config: &Config) -> TlsSettings {
    use tokio_postgres::config::SslMode as Pg;
    let mode = match config.get_ssl_mode() {
        Pg::Disable => SslMode::Disable,
        Pg::Require => SslMode::Require,
        _ => SslMode::Prefer,
    };
    TlsSettings {
        mode,
        root_cert: None,
    }
}

/// Client-side bounds derived from the statement timeout, where the URL
/// does not set them.
fn tune(config: &mut Config, timeout: Duration) {
    let t = timeout.max(Duration::from_secs(1));
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(t);
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(t + Duration::from_secs(1));
    }
    if config.get_keepalives() {
        if config.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
            config.keepalives_idle(t);
        }
        if config.get_keepalives_interval().is_none() {
            config.keepalives_interval(Duration::from_secs(1));
        }
        if config.get_keepalives_retries().is_none() {
            config.keepalives_retries(3);
        }
    }
    if config.get_application_name().is_none() {
        config.application_name("gatewayd-registry");
    }
}

impl PostgresRegistry {
    /// Connects (e.g. `postgres://user@127.0.0.1:5432/gatewayd`) and brings
    /// the schema up to date. Every statement then runs under
    /// `statement_timeout` (server side); exceeding it, like an unreachable
    /// server, is [`RegistryError::Unavailable`]. A bad URL is
    /// [`RegistryError::Invalid`]. TLS as libpq's `sslmode` and
    /// `sslrootcert` in the URL say (see [`tls`]); a certificate that does
    /// not verify is [`RegistryError::Unavailable`] saying
    /// "certificate verify failed" and why.
    pub fn connect(url: &str, statement_timeout: Duration) -> Result<Self> {
        let (config, tls) = parse_url(url)?;
        Self::connect_tls(config, tls, statement_timeout)
    }

    /// Like [`connect`](Self::connect) with a parsed configuration (its
    /// `ssl_mode` as tokio-postgres has it: no certificate check).
    pub fn connect_config(config: Config, statement_timeout: Duration) -> Result<Self> {
        let tls = tls_of(&config);
        Self::connect_tls(config, tls, statement_timeout)
    }

    fn connect_tls(
        mut config: Config,
        tls: TlsSettings,
        statement_timeout: Duration,
    ) -> Result<Self> {
        if statement_timeout.is_zero() {
            return Err(RegistryError::Invalid(
                "statement timeout must be > 0".into(),
            ));
        }
        tune(&mut config, statement_timeout);
        let rt = runtime()?;
        let mut conn = Conn::open(
            &rt,
            &config,
            &tls,
            statement_timeout,
            Instant::now() + statement_timeout,
        )?;
        // DDL may take longer than an ordinary call (and may wait for
        // another node's migration): a few deadlines' worth.
        schema::migrate(&rt, Instant::now() + statement_timeout * 4, &mut conn)?;
        Ok(Self {
            config,
            tls,
            statement_timeout,
            conn: Mutex::new(Link {
                rt,
                conn: Some(conn),
            }),
        })
    }

    pub fn schema_version() -> u32 {
        schema::SCHEMA_VERSION
    }

    pub fn statement_timeout(&self) -> Duration {
        self.statement_timeout
    }

    /// A server with a chosen id (tests, load generators that need known
    /// shard placement). Like [`Registry::create_server`] otherwise.
    pub fn create_server_with_id(&self, id: u64, name: &str, owner_id: u64) -> Result<Server> {
        self.run(WriteKind::Write, |t| {
            ops::create_server_with_id(t, id, name, owner_id)
        })
    }

    /// A listener on the revocation channel over its own connection, to the
    /// same database as this registry.
    pub fn revocation_listener(&self) -> Result<RevocationListener> {
        RevocationListener::open(
            self.config.clone(),
            self.tls.clone(),
            self.statement_timeout,
        )
    }

    /// A listener on [`REVOCATION_CHANNEL`] of the database at `url` (its
    /// own connection; each (re)connection, `LISTEN` included, bounded by
    /// `timeout`, e.g. [`DEFAULT_TIMEOUT`]).
    pub fn listen_revocations(url: &str, timeout: Duration) -> Result<RevocationListener> {
        let (mut config, tls) = parse_url(url)?;
        tune(&mut config, timeout);
        RevocationListener::open(config, tls, timeout.max(Duration::from_millis(1)))
    }

    fn lock(&self) -> MutexGuard<'_, Link> {
        // A panic mid-operation leaves `in_tx` set: that connection is
        // replaced below, so the poison carries no state.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs one operation under one deadline (`statement_timeout` from now,
    /// connecting included), reconnecting first if the connection is known
    /// broken. Retried within the same deadline: a break noticed at BEGIN or
    /// in a single read (once, on a new connection; nothing was written),
    /// serialization failures and deadlocks (twice; the transaction was
    /// rolled back). A passed deadline is never retried.
    fn run<T>(&self, kind: WriteKind, mut f: impl FnMut(&mut Tx<'_>) -> Result<T>) -> Result<T> {
        let deadline = Instant::now() + self.statement_timeout;
        let mut link = self.lock();
        let Link { rt, conn: slot } = &mut *link;
        let mut reconnected = false;
        let mut conflicts = 0;
        loop {
            if slot.as_ref().is_some_and(|c| !c.is_usable()) {
                *slot = None;
            }
            let conn = match slot.as_mut() {
                Some(c) => c,
                None => {
                    reconnected = true;
                    slot.insert(Conn::open(
                        rt,
                        &self.config,
                        &self.tls,
                        self.statement_timeout,
                        deadline,
                    )?)
                }
            };
            let fail = match conn.attempt(rt, deadline, kind, &mut f) {
                Ok(v) => return Ok(v),
                Err(fail) => fail,
            };
            let retry = match fail.fault {
                Some(Fault::Broken) => {
                    *slot = None;
                    !reconnected && (fail.at_begin || kind == WriteKind::Single)
                }
                Some(Fault::Deadline) => {
                    *slot = None;
                    false
                }
                Some(Fault::Retry) => {
                    conflicts += 1;
                    conflicts <= 2
                }
                Some(Fault::StaleStatement) => {
                    if let Some(c) = slot.as_mut() {
                        c.stmts.clear();
                    }
                    conflicts += 1;
                    conflicts <= 1
                }
                _ => false,
            };
            if !retry {
                return Err(fail.error);
            }
        }
    }
}

impl Registry for PostgresRegistry {
    fn authenticate(&self, token: &str) -> Result<Option<Application>> {
        // A malformed token is refused without a round trip.
        let tok = crate::token::strip_prefix(token);
        let Some(id) = crate::token::parse_app_id(tok) else {
            return Ok(None);
        };
        self.run(WriteKind::Single, |t| apps::authenticate(t, id, tok))
    }

    fn application(&self, id: u64) -> Result<Option<Application>> {
        self.run(WriteKind::Single, |t| apps::get(t, id))
    }

    fn list_applications(&self) -> Result<Vec<Application>> {
        self.run(WriteKind::Single, apps::list)
    }

    fn create_application(
        &self,
        name: &str,
        approved_privileged_intents: u64,
        max_concurrency: u32,
    ) -> Result<(Application, String)> {
        self.run(WriteKind::Write, |t| {
            apps::create(t, name, approved_privileged_intents, max_concurrency)
        })
    }

    fn reset_token(&self, app_id: u64) -> Result<String> {
        self.run(WriteKind::Write, |t| {
            let tok = apps::reset_token(t, app_id)?;
            outbox(
                t,
                Revocation::TokenReset {
                    application_id: app_id,
                },
            )?;
            Ok(tok)
        })
    }

    fn set_approved_intents(&self, app_id: u64, bits: u64) -> Result<Application> {
        self.run(WriteKind::Write, |t| {
            let a = apps::set_approved_intents(t, app_id, bits)?;
            outbox(
                t,
                Revocation::IntentsChanged {
                    application_id: app_id,
                },
            )?;
            Ok(a)
        })
    }

    fn set_max_concurrency(&self, app_id: u64, max_concurrency: u32) -> Result<Application> {
        self.run(WriteKind::Write, |t| {
            apps::set_max_concurrency(t, app_id, max_concurrency)
        })
    }

    fn set_session_start_total(&self, app_id: u64, total: u32) -> Result<Application> {
        self.run(WriteKind::Write, |t| {
            apps::set_session_start_total(t, app_id, total)
        })
    }

    fn delete_application(&self, app_id: u64) -> Result<bool> {
        self.run(WriteKind::Write, |t| {
            for inst in installs::of_app(t, app_id)? {
                ops::uninstall(t, app_id, inst.server_id)?;
                outbox(
                    t,
                    Revocation::Uninstalled {
                        application_id: app_id,
                        server_id: inst.server_id,
                    },
                )?;
            }
            t.delete_ownerships_of_app(app_id)?;
            apps::delete(t, app_id)
        })
    }

    fn create_server(&self, name: &str, owner_id: u64) -> Result<Server> {
        self.run(WriteKind::Write, |t| ops::create_server(t, name, owner_id))
    }

    fn delete_server(&self, server_id: u64) -> Result<bool> {
        self.run(WriteKind::Write, |t| servers::delete(t, server_id))
    }

    fn create_channel(
        &self,
        server_id: u64,
        name: &str,
        kind: u8,
        parent: Option<u64>,
    ) -> Result<Channel> {
        self.run(WriteKind::Write, |t| {
            ops::create_channel(t, server_id, name, kind, parent)
        })
    }

    fn create_role(&self, server_id: u64, name: &str, permissions: u64) -> Result<Role> {
        self.run(WriteKind::Write, |t| {
            ops::create_role(t, server_id, name, permissions, false)
        })
    }

    fn set_overwrite(
        &self,
        channel_id: u64,
        target_id: u64,
        target_kind: OverwriteKind,
        allow: u64,
        deny: u64,
    ) -> Result<()> {
        self.run(WriteKind::Write, |t| {
            ops::set_overwrite(t, channel_id, target_id, target_kind, allow, deny)
        })
    }

    fn delete_overwrite(&self, channel_id: u64, target_id: u64) -> Result<bool> {
        self.run(WriteKind::Write, |t| {
            servers::delete_overwrite(t, channel_id, target_id)
        })
    }

    fn list_servers(&self) -> Result<Vec<Server>> {
        self.run(WriteKind::Single, servers::list)
    }

    fn install(&self, app_id: u64, server_id: u64, permissions: u64) -> Result<Installation> {
        self.run(WriteKind::Write, |t| {
            let before = installs::get(t, app_id, server_id)?;
            let i = ops::install(t, app_id, server_id, permissions)?;
            if before.is_some_and(|b| b.permissions != permissions) {
                outbox(
                    t,
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
        self.run(WriteKind::Write, |t| {
            let removed = ops::uninstall(t, app_id, server_id)?;
            if removed {
                outbox(
                    t,
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
        self.run(WriteKind::Write, |t| {
            ops::add_installation_role(t, app_id, server_id, role_id)
        })
    }

    fn remove_installation_role(&self, app_id: u64, server_id: u64, role_id: u64) -> Result<bool> {
        self.run(WriteKind::Write, |t| {
            installs::remove_role(t, app_id, server_id, role_id)
        })
    }

    fn installations_of_app(&self, app_id: u64) -> Result<Vec<Installation>> {
        self.run(WriteKind::Read, |t| installs::of_app(t, app_id))
    }

    fn installation(&self, app_id: u64, server_id: u64) -> Result<Option<Installation>> {
        self.run(WriteKind::Read, |t| installs::get(t, app_id, server_id))
    }

    fn server_snapshot(&self, server_id: u64) -> Result<Option<ServerSnapshot>> {
        self.run(WriteKind::Read, |t| ops::snapshot(t, server_id))
    }

    fn servers_for_shard(&self, app_id: u64, shard_id: u32, shard_count: u32) -> Result<Vec<u64>> {
        crate::validate::check_shard(shard_id, shard_count)?;
        self.run(WriteKind::Single, |t| {
            ops::servers_for_shard(t, app_id, shard_id, shard_count)
        })
    }

    fn record_session_start(&self, app_id: u64, now_ms: u64) -> Result<SessionStartLimit> {
        self.run(WriteKind::Counter, |t| {
            apps::record_session_start(t, app_id, now_ms)
        })
    }

    fn session_start_remaining(&self, app_id: u64, now_ms: u64) -> Result<SessionStartLimit> {
        self.run(WriteKind::Single, |t| {
            apps::session_start_limit(t, app_id, now_ms)
        })
    }

    fn revision(&self) -> Result<u64> {
        self.run(WriteKind::Single, |t| {
            let r = t.query_one("SELECT value FROM meta WHERE key = 'revision'", &[])?;
            Ok(to_u(col(&r, 0)?))
        })
    }

    fn seed_demo(&self) -> Result<Option<DemoSeed>> {
        self.run(WriteKind::Write, |t| crate::seed::seed_demo(t))
    }

    fn find_demo(&self) -> Result<Option<DemoFound>> {
        self.run(WriteKind::Read, |t| crate::seed::find_demo(t))
    }

    fn installations_in_server(&self, server_id: u64) -> Result<Vec<Installation>> {
        self.run(WriteKind::Read, |t| installs::in_server(t, server_id))
    }

    fn apply_state(&self, change: &StateChange) -> Result<()> {
        self.run(WriteKind::Write, |t| ops::apply_state(t, change))
    }

    fn revocations_since(&self, after: u64, limit: u32) -> Result<Vec<RevocationRecord>> {
        self.run(WriteKind::Single, |t| {
            let rows = t.query(
                "SELECT id, at_ms, kind, application_id, server_id FROM revocations
                 WHERE id > $1 ORDER BY id LIMIT $2",
                &[&to_i(after), &i64::from(limit)],
            )?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                let kind = col::<i16>(r, 2)? as u8;
                let row = (col(r, 0)?, col(r, 1)?, kind, col(r, 3)?, col(r, 4)?);
                out.extend(rows::revocation(row));
            }
            Ok(out)
        })
    }

    fn last_revocation_id(&self) -> Result<u64> {
        self.run(WriteKind::Single, |t| {
            let r = t.query_one("SELECT COALESCE(MAX(id), 0)::BIGINT FROM revocations", &[])?;
            Ok(to_u(col(&r, 0)?))
        })
    }

    /// One statement, sent without a prepare step: exactly one round trip
    /// for the whole batch, on any connection. The pairs travel as two
    /// BIGINT arrays, are unnested with their ordinal, and each is answered
    /// with an EXISTS probe of the installations primary key.
    fn installed(&self, pairs: &[(u64, u64)]) -> Result<Vec<bool>> {
        if pairs.is_empty() {
            return Ok(Vec::new());
        }
        let apps: Vec<i64> = pairs.iter().map(|&(a, _)| to_i(a)).collect();
        let servers: Vec<i64> = pairs.iter().map(|&(_, s)| to_i(s)).collect();
        self.run(WriteKind::Single, |t| {
            let rows = t.query_typed(
                "SELECT EXISTS (SELECT 1 FROM installations i
                                WHERE i.application_id = p.a AND i.server_id = p.s)
                 FROM unnest($1::BIGINT[], $2::BIGINT[]) WITH ORDINALITY AS p(a, s, n)
                 ORDER BY p.n",
                &[(&apps, Type::INT8_ARRAY), (&servers, Type::INT8_ARRAY)],
            )?;
            rows.iter().map(|r| col::<bool>(r, 0)).collect()
        })
    }

    fn create_user(&self, username: &str) -> Result<User> {
        self.run(WriteKind::Write, |t| members::create_user(t, username))
    }

    fn user(&self, id: u64) -> Result<Option<User>> {
        self.run(WriteKind::Read, |t| t.user(id))
    }

    fn add_member(&self, server_id: u64, user_id: u64) -> Result<Member> {
        self.run(WriteKind::Write, |t| {
            members::add_member(t, server_id, user_id)
        })
    }

    fn member(&self, server_id: u64, user_id: u64) -> Result<Option<Member>> {
        self.run(WriteKind::Read, |t| members::member(t, server_id, user_id))
    }

    fn list_members(&self, server_id: u64, after: u64, limit: u32) -> Result<Vec<Member>> {
        self.run(WriteKind::Read, |t| {
            members::list_members(t, server_id, after, limit)
        })
    }

    fn set_member_roles(&self, server_id: u64, user_id: u64, role_ids: &[u64]) -> Result<Member> {
        self.run(WriteKind::Write, |t| {
            members::set_member_roles(t, server_id, user_id, role_ids)
        })
    }

    fn add_member_role(&self, server_id: u64, user_id: u64, role_id: u64) -> Result<bool> {
        self.run(WriteKind::Write, |t| {
            members::add_member_role(t, server_id, user_id, role_id)
        })
    }

    fn remove_member_role(&self, server_id: u64, user_id: u64, role_id: u64) -> Result<bool> {
        self.run(WriteKind::Write, |t| {
            members::remove_member_role(t, server_id, user_id, role_id)
        })
    }

    fn remove_member(&self, server_id: u64, user_id: u64) -> Result<bool> {
        self.run(WriteKind::Write, |t| t.delete_member(server_id, user_id))
    }

    fn ban(&self, server_id: u64, user_id: u64, reason: Option<&str>) -> Result<BanOutcome> {
        self.run(WriteKind::Write, |t| {
            members::ban(t, server_id, user_id, reason)
        })
    }

    fn unban(&self, server_id: u64, user_id: u64) -> Result<bool> {
        self.run(WriteKind::Write, |t| t.delete_ban(server_id, user_id))
    }

    fn open_dm(&self, user_a: u64, user_b: u64) -> Result<u64> {
        self.run(WriteKind::Write, |t| members::open_dm(t, user_a, user_b))
    }

    fn dm_channels_of(&self, user_id: u64) -> Result<Vec<(u64, u64)>> {
        self.run(WriteKind::Read, |t| t.dm_channels_of(user_id))
    }

    fn claim_interaction(&self, id: u64, node: &str, now_ms: u64) -> Result<bool> {
        // One autocommit statement, no global lock, no revision bump.
        let won = self.run(WriteKind::Single, |t| {
            t.execute(
                "INSERT INTO interaction_claims (id, node, claimed_at_ms) VALUES ($1, $2, $3)
                 ON CONFLICT DO NOTHING",
                &[&to_i(id), &node, &to_i(now_ms)],
            )
        })? == 1;
        if id.is_multiple_of(crate::CLAIM_PRUNE_EVERY) {
            self.run(WriteKind::Single, |t| {
                t.execute(
                    "DELETE FROM interaction_claims WHERE claimed_at_ms < $1",
                    &[&to_i(now_ms.saturating_sub(crate::CLAIM_KEEP_MS))],
                )
            })?;
        }
        Ok(won)
    }

    fn put_interaction(&self, p: &PendingInteraction, now_ms: u64) -> Result<()> {
        self.put_interaction_row(p, now_ms)
    }

    fn interaction(&self, id: u64) -> Result<Option<PendingInteraction>> {
        self.interaction_row_by_id(id)
    }

    fn interaction_by_token(&self, digest: &[u8; 32]) -> Result<Option<PendingInteraction>> {
        self.interaction_row_by_token(digest)
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
        // Hashed before the transaction: the write lock is not held for it.
        let hash = devs::prepare(name, password)?;
        self.run(WriteKind::Write, |t| devs::create(t, name, &hash))
    }

    fn developer_sign_in(&self, name: &str, password: &str) -> Result<Option<Developer>> {
        if !devs::sign_in_allowed(password) {
            return Ok(None);
        }
        let found = self.run(WriteKind::Single, |t| t.credentials(name))?;
        // Verified after the read, with the connection released.
        Ok(devs::finish_sign_in(found, password))
    }

    fn set_developer_password(&self, name: &str, password: &str) -> Result<bool> {
        let hash = devs::prepare_password(password)?;
        self.run(WriteKind::Write, |t| t.set_password_hash(name, &hash))
    }

    fn delete_developer(&self, name: &str) -> Result<bool> {
        self.run(WriteKind::Write, |t| {
            DeveloperStore::delete_developer(t, name)
        })
    }

    fn list_developers(&self) -> Result<Vec<Developer>> {
        self.run(WriteKind::Single, |t| t.developers())
    }

    fn developer(&self, id: u64) -> Result<Option<Developer>> {
        self.run(WriteKind::Single, |t| DeveloperStore::developer(t, id))
    }

    fn own_application(&self, developer_id: u64, app_id: u64) -> Result<()> {
        self.run(WriteKind::Write, |t| devs::own(t, developer_id, app_id))
    }

    fn disown_application(&self, developer_id: u64, app_id: u64) -> Result<bool> {
        self.run(WriteKind::Write, |t| {
            t.delete_ownership(developer_id, app_id)
        })
    }

    fn applications_of_developer(&self, developer_id: u64) -> Result<Vec<Application>> {
        self.run(WriteKind::Single, |t| {
            devs::applications_of(t, developer_id)
        })
    }

    fn developer_owns(&self, developer_id: u64, app_id: u64) -> Result<bool> {
        self.run(WriteKind::Single, |t| t.owns(developer_id, app_id))
    }

    fn request_intents(&self, app_id: u64, bits: u64) -> Result<Application> {
        self.run(WriteKind::Write, |t| devs::request_intents(t, app_id, bits))
    }

    fn intent_requests(&self) -> Result<Vec<Application>> {
        self.run(WriteKind::Single, |t| t.pending_intent_requests())
    }

    fn register_node(
        &self,
        instance: &str,
        link_addr: &str,
        now_ms: u64,
        ttl_ms: u64,
    ) -> Result<u16> {
        self.run(WriteKind::Single, |t| {
            crate::nodes::register(t, instance, link_addr, now_ms, ttl_ms)
        })
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
        self.run(WriteKind::Single, |t| {
            t.claim(
                node,
                instance,
                link_addr,
                now_ms,
                now_ms.saturating_add(ttl_ms),
            )
        })
    }

    fn live_nodes(&self, now_ms: u64) -> Result<Vec<(u16, String)>> {
        use crate::nodes::NodeStore;
        self.run(WriteKind::Single, |t| t.live_links(now_ms))
    }

    fn node_link(&self, node: u16, now_ms: u64) -> Result<Option<String>> {
        use crate::nodes::NodeStore;
        self.run(WriteKind::Single, |t| t.link_of(node, now_ms))
    }

    fn instance_live(&self, instance: &str, now_ms: u64) -> Result<bool> {
        use crate::nodes::NodeStore;
        self.run(WriteKind::Single, |t| t.instance_live(instance, now_ms))
    }

    fn leave_node(&self, node: u16, instance: &str) -> Result<()> {
        use crate::nodes::NodeStore;
        self.run(WriteKind::Single, |t| t.leave(node, instance))
    }

    fn signing_seed(&self, app_id: u64) -> Result<[u8; 32]> {
        if let Some(seed) = self.run(WriteKind::Single, |t| {
            crate::signing::existing_seed(t, app_id)
        })? {
            return Ok(seed);
        }
        self.run(WriteKind::Write, |t| {
            crate::signing::signing_seed(t, app_id)
        })
    }

    fn set_interactions_endpoint(&self, app_id: u64, url: Option<&str>) -> Result<()> {
        self.run(WriteKind::Write, |t| {
            crate::signing::set_interactions_endpoint(t, app_id, url)
        })
    }

    fn interactions_endpoint(&self, app_id: u64) -> Result<Option<String>> {
        self.run(WriteKind::Read, |t| {
            crate::signing::interactions_endpoint(t, app_id)
        })
    }

    fn commands(&self, app_id: u64, guild_id: Option<u64>) -> Result<Vec<Command>> {
        self.run(WriteKind::Single, |t| cmds::commands(t, app_id, guild_id))
    }

    fn command(&self, app_id: u64, guild_id: Option<u64>, id: u64) -> Result<Option<Command>> {
        self.run(WriteKind::Single, |t| {
            cmds::command(t, app_id, guild_id, id)
        })
    }

    fn put_commands(
        &self,
        app_id: u64,
        guild_id: Option<u64>,
        list: &[NewCommand],
    ) -> Result<Vec<Command>> {
        self.run(WriteKind::Write, |t| {
            cmds::put_commands(t, app_id, guild_id, list)
        })
    }

    fn create_command(
        &self,
        app_id: u64,
        guild_id: Option<u64>,
        cmd: &NewCommand,
    ) -> Result<(Command, bool)> {
        self.run(WriteKind::Write, |t| {
            cmds::create_command(t, app_id, guild_id, cmd)
        })
    }

    fn edit_command(
        &self,
        app_id: u64,
        guild_id: Option<u64>,
        id: u64,
        patch: &CommandPatch,
    ) -> Result<Command> {
        self.run(WriteKind::Write, |t| {
            cmds::edit_command(t, app_id, guild_id, id, patch)
        })
    }

    fn delete_command(&self, app_id: u64, guild_id: Option<u64>, id: u64) -> Result<bool> {
        self.run(WriteKind::Write, |t| {
            cmds::delete_command(t, app_id, guild_id, id)
        })
    }
}

/// Write a revocation to the outbox and NOTIFY its id, in the caller's
/// transaction: both happen at its commit or not at all.
fn outbox(t: &mut Tx<'_>, r: Revocation) -> Result<()> {
    // Counted as a change by `execute` (one row).
    t.execute(
        "WITH r AS (
             INSERT INTO revocations (at_ms, kind, application_id, server_id)
             VALUES ($1, $2, $3, $4) RETURNING id)
         SELECT pg_notify('gatewayd_revocations', r.id::TEXT) FROM r",
        &[
            &to_i(crate::snowflake::unix_ms_now()),
            &i16::from(r.kind()),
            &to_i(r.application_id()),
            &to_i(r.server_id()),
        ],
    )?;
    Ok(())
}

/// Follows [`REVOCATION_CHANNEL`] on its own connection (`LISTEN`).
///
/// Pushes are a latency optimisation, not the record: the outbox is. A node
/// starts with `LISTEN` (open the listener), then reads
/// [`Registry::last_revocation_id`] or catches up with
/// [`Registry::revocations_since`], then applies each pushed id by reading
/// the outbox from its last applied id. Pushes sent while the listener is
/// disconnected are lost: after [`wait`](Self::wait) returns an error, the
/// next `wait` reconnects (and re-`LISTEN`s) before waiting, and the first
/// `Ok` after an error is the moment to catch up from the outbox.
pub struct RevocationListener {
    config: Config,
    tls: TlsSettings,
    /// Bounds a (re)connection: TCP, startup and `LISTEN`.
    connect_timeout: Duration,
    rt: Runtime,
    link: Option<(Client, PgConnection)>,
}

impl std::fmt::Debug for RevocationListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RevocationListener")
            .field("connected", &self.link.is_some())
            .finish()
    }
}

impl RevocationListener {
    fn open(config: Config, tls: TlsSettings, connect_timeout: Duration) -> Result<Self> {
        let mut l = Self {
            config,
            tls,
            connect_timeout,
            rt: runtime()?,
            link: None,
        };
        l.connect()?;
        Ok(l)
    }

    fn connect(&mut self) -> Result<&mut (Client, PgConnection)> {
        let deadline = Instant::now() + self.connect_timeout;
        let (client, mut connection) = connect_by(&self.rt, &self.config, &self.tls, deadline)?;
        let listen = format!("LISTEN {REVOCATION_CHANNEL}");
        match drive(
            &self.rt,
            &mut connection,
            deadline,
            client.batch_execute(&listen),
        ) {
            Ok(()) => Ok(self.link.insert((client, connection))),
            Err(Stop::Pg(e)) | Err(Stop::Ended(Some(e))) => Err(e.into()),
            Err(Stop::Ended(None)) => Err(RegistryError::Unavailable(
                "revocation listener: connection closed during LISTEN".into(),
            )),
            Err(Stop::Deadline) => Err(deadline_passed("LISTEN")),
        }
    }

    /// The next pushed outbox id, or None when `timeout` passes without one.
    /// Ids already pushed are returned at once, in commit order. An error
    /// means the connection broke (see the type's docs). A (re)connection
    /// first is bounded by the listener's connect timeout, so a call never
    /// blocks longer than that plus `timeout`.
    pub fn wait(&mut self, timeout: Duration) -> Result<Option<u64>> {
        let deadline = Instant::now() + timeout;
        if self.link.as_ref().is_some_and(|(c, _)| c.is_closed()) {
            self.link = None;
        }
        if self.link.is_none() {
            self.connect()?;
        }
        let (_, connection) = self.link.as_mut().expect("connected above");
        loop {
            let next = self.rt.block_on(async {
                let message = std::future::poll_fn(|cx| connection.poll_message(cx));
                tokio::time::timeout_at(deadline.into(), message).await
            });
            match next {
                Err(_) => return Ok(None),
                Ok(Some(Ok(AsyncMessage::Notification(n)))) => {
                    if n.channel() != REVOCATION_CHANNEL {
                        continue;
                    }
                    match n.payload().parse::<u64>() {
                        Ok(id) => return Ok(Some(id)),
                        // Not ours (someone NOTIFYs by hand): keep waiting.
                        Err(_) => continue,
                    }
                }
                // Notices and anything newer: not for us.
                Ok(Some(Ok(_))) => continue,
                Ok(Some(Err(e))) => {
                    self.link = None;
                    return Err(e.into());
                }
                Ok(None) => {
                    self.link = None;
                    return Err(RegistryError::Unavailable(
                        "revocation listener: connection closed".into(),
                    ));
                }
            }
        }
    }
}
