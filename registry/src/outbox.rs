//! What a node follows to learn of changes: the revocation outbox (what was
//! taken away from a bot, oldest first) and the `revision` counter (bumped
//! by the backend in every transaction that changed a row). A backend
//! implements [`OutboxStore`]; the rules that write to the outbox are where
//! the changes are (`crate::apps`, `crate::ops`), each in the change's own
//! transaction, after the change.

use crate::{error::Result, revocation::Revocation, revocation::RevocationRecord, snowflake};

/// The outbox and revision statements.
pub(crate) trait OutboxStore {
    /// Appends a row (PostgreSQL also notifies its id at commit).
    fn insert_revocation(&mut self, r: Revocation, at_ms: u64) -> Result<()>;
    /// Rows with id > `after`, oldest first, at most `limit`.
    fn revocations_since(&mut self, after: u64, limit: u32) -> Result<Vec<RevocationRecord>>;
    /// The newest row's id, 0 if none.
    fn last_revocation_id(&mut self) -> Result<u64>;
    fn revision(&mut self) -> Result<u64>;
}

/// Writes `r` to the outbox, stamped now (in the caller's transaction).
pub(crate) fn emit<S: OutboxStore>(s: &mut S, r: Revocation) -> Result<()> {
    s.insert_revocation(r, snowflake::unix_ms_now())
}
