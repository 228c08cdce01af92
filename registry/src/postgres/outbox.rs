//! The revocation outbox and the revision counter: the PostgreSQL
//! statements behind [`OutboxStore`] (the rules that write to it are in
//! `crate::apps` and `crate::ops`; `revision` is bumped by the committing
//! transaction, `crate::postgres::conn`). Each row is also pushed with
//! `pg_notify` on [`REVOCATION_CHANNEL`](super::listener::REVOCATION_CHANNEL)
//! in the same transaction: exactly when, and only if, it commits.

use super::conn::{col, Tx};
use crate::outbox::OutboxStore;
use crate::rows::{self, to_i, to_u};
use crate::{error::Result, revocation::Revocation, revocation::RevocationRecord};

impl OutboxStore for Tx<'_> {
    fn insert_revocation(&mut self, r: Revocation, at_ms: u64) -> Result<()> {
        // Counted as a change by `execute` (one row).
        self.execute(
            "WITH r AS (
                 INSERT INTO revocations (at_ms, kind, application_id, server_id)
                 VALUES ($1, $2, $3, $4) RETURNING id)
             SELECT pg_notify('gatewayd_revocations', r.id::TEXT) FROM r",
            &[
                &to_i(at_ms),
                &i16::from(r.kind()),
                &to_i(r.application_id()),
                &to_i(r.server_id()),
            ],
        )?;
        Ok(())
    }

    fn revocations_since(&mut self, after: u64, limit: u32) -> Result<Vec<RevocationRecord>> {
        let rows = self.query(
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
    }

    fn last_revocation_id(&mut self) -> Result<u64> {
        let r = self.query_one("SELECT COALESCE(MAX(id), 0)::BIGINT FROM revocations", &[])?;
        Ok(to_u(col(&r, 0)?))
    }

    fn revision(&mut self) -> Result<u64> {
        let r = self.query_one("SELECT value FROM meta WHERE key = 'revision'", &[])?;
        Ok(to_u(col(&r, 0)?))
    }
}
