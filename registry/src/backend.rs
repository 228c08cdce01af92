//! What a backend is: a way to run an operation's statements ([`Backend`])
//! and the statements themselves in its SQL ([`Statements`], one store
//! trait per concept, each defined beside its rules). The registry's rules
//! are written once over these (`crate::generic` holds the one
//! `impl Registry`); `crate::sqlite` and `crate::postgres` each implement
//! the two traits and nothing else of the registry's behaviour.

use crate::apps::AppStore;
use crate::commands::CommandStore;
use crate::developers::DeveloperStore;
use crate::error::Result;
use crate::interactions::InteractionStore;
use crate::members::MemberStore;
use crate::nodes::NodeStore;
use crate::ops::{InstallStore, ServerStore};
use crate::outbox::OutboxStore;
use crate::signing::SigningStore;

/// How an operation runs. PostgreSQL pays a round trip per BEGIN and
/// COMMIT, so what needs no common snapshot runs without them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Autocommit statements, no global lock, no revision bump: one read,
    /// reads that need no common snapshot, and the writes that are not
    /// registry changes (claims, interaction state, node membership).
    Single,
    /// A consistent snapshot for several reads.
    Read,
    /// A registry change: serialised with every other writer (SQLite's
    /// write lock, PostgreSQL's advisory lock); bumps `revision` if any row
    /// changed.
    Write,
    /// Identify counting: bumps `revision`, but on PostgreSQL takes no
    /// global lock (an upsert counts exactly from many nodes).
    Counter,
}

/// Every statement the registry's rules need, in one backend's SQL (each
/// backend says `impl Statements for` its statement handle).
pub(crate) trait Statements:
    AppStore
    + ServerStore
    + InstallStore
    + MemberStore
    + DeveloperStore
    + CommandStore
    + SigningStore
    + NodeStore
    + OutboxStore
    + InteractionStore
{
}

/// A registry backend: it runs an operation's statements as [`Kind`] says.
/// Every `Backend` is a `Registry` (`crate::generic`).
pub(crate) trait Backend: Send + Sync {
    /// The statements of one operation (in its transaction, if any).
    type Tx<'a>: Statements;

    /// Runs `f` as `kind`: commits what it wrote if it returns Ok, rolls
    /// back if it fails (a `Single` run's statements commit one by one).
    /// `f` may be run again: PostgreSQL retries a connection found broken
    /// at BEGIN or in a `Single` run, and serialization failures.
    fn run<T>(&self, kind: Kind, f: impl FnMut(&mut Self::Tx<'_>) -> Result<T>) -> Result<T>;
}
