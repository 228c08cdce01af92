//! What a failed PostgreSQL call means: [`Fault`] sorts an error (retry
//! the transaction, replace the connection, transient, stale statement,
//! deadline passed, anything else), and the sort decides which
//! `RegistryError` it becomes (`Unavailable` for every transient one).

use crate::error::RegistryError;

/// What a failed statement says about the connection and the transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fault {
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

pub(super) fn fault_of(e: &tokio_postgres::Error) -> Fault {
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

pub(super) fn describe(e: &tokio_postgres::Error) -> String {
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

pub(super) fn deadline_passed(doing: &str) -> RegistryError {
    RegistryError::Unavailable(format!(
        "PostgreSQL did not answer in time ({doing}): call abandoned, connection closed"
    ))
}
