//! What a person's interaction is completed from (`interactions.rs`), kept
//! between interactions while the registry's `revision` is unchanged.
//!
//! ```text
//!   interaction ──revision()──► same as cached? ── yes ──► the rows kept here
//!                                     └── no: forget everything, read the rows again
//! ```
//!
//! Every registry change bumps `revision` in the same transaction (an
//! application, an installation and its grant, a server's channels, roles
//! and overwrites, a member, a command, an endpoint); the interaction
//! bookkeeping does not (claims and open interactions' rows are written
//! outside that path, on both backends). So one `revision()` read answers
//! whether every row kept here is still the registry's: an interaction
//! costs that read, its claim and, for a person not seen since the last
//! change, their member row, instead of seven to nine reads. A change made
//! while an interaction is being completed is seen by the next one, as if
//! it had been made a moment later.
//!
//! Bounds: at most `MAX_ENTRIES` entries per kind; a full kind is
//! forgotten whole (the next interactions read it again). Not-found answers
//! are never kept (a command registered a moment ago is found at once).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;

use registry::{Application, Command, Installation, Member, ServerSnapshot};

/// Entries kept per kind.
pub const MAX_ENTRIES: usize = 4096;

/// An application's interactions endpoint and its signing seed.
pub type Endpoint = Arc<(String, [u8; 32])>;

/// A bounded map: past `MAX_ENTRIES` it starts again empty.
struct Kept<K, V>(HashMap<K, V>);

impl<K: Hash + Eq, V: Clone> Kept<K, V> {
    fn get(&self, k: &K) -> Option<V> {
        self.0.get(k).cloned()
    }

    fn put(&mut self, k: K, v: V) {
        if self.0.len() >= MAX_ENTRIES {
            self.0.clear();
        }
        self.0.insert(k, v);
    }
}

impl<K, V> Default for Kept<K, V> {
    fn default() -> Self {
        Kept(HashMap::new())
    }
}

#[derive(Default)]
pub struct Enrich {
    /// The registry's revision the entries were read at (None: none kept).
    revision: Option<u64>,
    /// Applications by their bot user's id.
    apps: Kept<u64, Arc<Application>>,
    installs: Kept<(u64, u64), Arc<Installation>>,
    snapshots: Kept<u64, Arc<ServerSnapshot>>,
    /// (application, server: None for global) -> its commands.
    commands: Kept<(u64, Option<u64>), Arc<Vec<Command>>>,
    /// (server, user) -> the member row.
    members: Kept<(u64, u64), Arc<Member>>,
    /// Application -> its interactions endpoint and signing seed (None: it
    /// has none, which is kept: it is the application's own setting).
    endpoints: Kept<u64, Option<Endpoint>>,
    /// Interactions completed from kept rows, and after a revision change.
    pub hits: u64,
    pub misses: u64,
}

impl Enrich {
    /// The registry is at `revision`: keep what was read at it, forget
    /// everything read before a change.
    pub fn at(&mut self, revision: u64) {
        if self.revision == Some(revision) {
            self.hits += 1;
            return;
        }
        self.misses += 1;
        *self = Enrich {
            revision: Some(revision),
            hits: self.hits,
            misses: self.misses,
            ..Enrich::default()
        };
    }

    /// Forget everything (a registry call failed between the revision read
    /// and the rows: nothing read then is trusted).
    pub fn forget(&mut self) {
        self.revision = None;
    }
}

/// One accessor per kind: the kept row, or `read` (kept if found).
macro_rules! kept {
    ($name:ident, $field:ident, $k:ty, $v:ty) => {
        impl Enrich {
            pub fn $name<E>(
                &mut self,
                k: $k,
                read: impl FnOnce() -> Result<Option<$v>, E>,
            ) -> Result<Option<Arc<$v>>, E> {
                if let Some(v) = self.$field.get(&k) {
                    return Ok(Some(v));
                }
                let v = read()?.map(Arc::new);
                if let Some(v) = &v {
                    self.$field.put(k, v.clone());
                }
                Ok(v)
            }
        }
    };
}

kept!(application, apps, u64, Application);
kept!(installation, installs, (u64, u64), Installation);
kept!(snapshot, snapshots, u64, ServerSnapshot);
kept!(member, members, (u64, u64), Member);

impl Enrich {
    /// An application's commands in one scope (an empty list is kept too:
    /// a registration bumps the revision).
    pub fn commands<E>(
        &mut self,
        k: (u64, Option<u64>),
        read: impl FnOnce() -> Result<Vec<Command>, E>,
    ) -> Result<Arc<Vec<Command>>, E> {
        if let Some(v) = self.commands.get(&k) {
            return Ok(v);
        }
        let v = Arc::new(read()?);
        self.commands.put(k, v.clone());
        Ok(v)
    }

    /// An application's endpoint and seed, or None.
    pub fn endpoint<E>(
        &mut self,
        app: u64,
        read: impl FnOnce() -> Result<Option<(String, [u8; 32])>, E>,
    ) -> Result<Option<Endpoint>, E> {
        if let Some(v) = self.endpoints.get(&app) {
            return Ok(v);
        }
        let v = read()?.map(Arc::new);
        self.endpoints.put(app, v.clone());
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_kept_until_the_revision_changes_and_misses_are_not() {
        let mut e = Enrich::default();
        let reads = std::cell::Cell::new(0);
        let list = |e: &mut Enrich| {
            e.commands((1, None), || {
                reads.set(reads.get() + 1);
                Ok::<_, ()>(vec![])
            })
            .unwrap();
        };
        e.at(7);
        list(&mut e);
        list(&mut e);
        assert_eq!(reads.get(), 1, "kept at the same revision");
        e.at(7);
        list(&mut e);
        assert_eq!(reads.get(), 1);
        e.at(8);
        list(&mut e);
        assert_eq!(reads.get(), 2, "a change forgets everything");
        let member_reads = std::cell::Cell::new(0);
        let member = |e: &mut Enrich| {
            e.member((1, 2), || {
                member_reads.set(member_reads.get() + 1);
                Ok::<Option<Member>, ()>(None)
            })
            .unwrap()
        };
        assert!(member(&mut e).is_none());
        assert!(member(&mut e).is_none());
        assert_eq!(member_reads.get(), 2, "not found is read again");
        assert_eq!((e.hits, e.misses), (1, 2));
        e.forget();
        e.at(8);
        assert_eq!(e.misses, 3, "after a failure nothing kept is trusted");
    }

    #[test]
    fn a_kind_past_its_bound_starts_again() {
        let mut k: Kept<u64, u64> = Kept::default();
        for i in 0..MAX_ENTRIES as u64 {
            k.put(i, i);
        }
        assert_eq!(k.0.len(), MAX_ENTRIES);
        k.put(u64::MAX, 1);
        assert_eq!(k.0.len(), 1, "forgotten whole, then the new one");
    }
}
