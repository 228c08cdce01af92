//! One connection and one operation on it: [`Conn`] (the client, its
//! socket, its prepared statements, whether it is still usable) runs an
//! attempt as a [`WriteKind`] says, and [`Tx`] is the statements of that
//! attempt under its deadline (the store traits are implemented on it, in
//! the files beside). Retrying and reconnecting are the caller's
//! (`PostgresRegistry`).

use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;
use tokio_postgres::types::{FromSql, ToSql, Type};
use tokio_postgres::{Client, Config, Row, Statement};

use super::driver::{connect_by, drive, PgConnection, Stop};
use super::fault::{deadline_passed, describe, fault_of, Fault};
use super::tls::TlsSettings;
use crate::backend::Kind;
use crate::{error::RegistryError, error::Result};

/// Advisory lock key (per database) serialising registry writers.
pub const WRITE_LOCK: i64 = 0x6761_7465_7761_7901;

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

impl From<Kind> for WriteKind {
    fn from(kind: Kind) -> Self {
        match kind {
            Kind::Single => WriteKind::Single,
            Kind::Read => WriteKind::Read,
            Kind::Write => WriteKind::Write,
            Kind::Counter => WriteKind::Counter,
        }
    }
}

/// One connection and its prepared statements.
pub(crate) struct Conn {
    client: Client,
    connection: PgConnection,
    pub(super) stmts: HashMap<String, Statement>,
    /// True between BEGIN and COMMIT/ROLLBACK: still true at the next call
    /// only if a panic unwound through a transaction; the connection is then
    /// dropped rather than reused.
    in_tx: bool,
    /// The connection ended or a deadline passed on it: replace it.
    broken: bool,
}

/// A failed attempt: the error, its class, and whether it failed at BEGIN
/// (so nothing of it reached the database).
pub(super) struct Failure {
    pub(super) error: RegistryError,
    pub(super) fault: Option<Fault>,
    pub(super) at_begin: bool,
}

impl Conn {
    pub(super) fn open(
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

    pub(super) fn is_usable(&self) -> bool {
        !(self.broken || self.in_tx || self.client.is_closed())
    }

    /// Runs `f` once as `kind`; a failure says how it failed.
    pub(super) fn attempt<T>(
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
    pub(super) fn transaction<T>(
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
