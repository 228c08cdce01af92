//! The revocation outbox and the revision counter: the SQLite statements
//! behind [`OutboxStore`] (the rules that write to it are in `crate::apps`
//! and `crate::ops`; `revision` is bumped by `SqliteRegistry`'s writes).

use rusqlite::{params, Connection};

use super::cached::Cached;
use crate::outbox::OutboxStore;
use crate::rows::{self, to_i, to_u};
use crate::{error::Result, revocation::Revocation, revocation::RevocationRecord};

impl OutboxStore for &Connection {
    fn insert_revocation(&mut self, r: Revocation, at_ms: u64) -> Result<()> {
        self.execute_cached(
            "INSERT INTO revocations (at_ms, kind, application_id, server_id)
             VALUES (?1, ?2, ?3, ?4)",
            params![
                to_i(at_ms),
                r.kind(),
                to_i(r.application_id()),
                to_i(r.server_id())
            ],
        )?;
        Ok(())
    }

    fn revocations_since(&mut self, after: u64, limit: u32) -> Result<Vec<RevocationRecord>> {
        let mut st = self.prepare_cached(
            "SELECT id, at_ms, kind, application_id, server_id FROM revocations
             WHERE id > ?1 ORDER BY id LIMIT ?2",
        )?;
        let rows = st.query_map(params![to_i(after), limit], |r| {
            let (id, at, kind, app, server): (i64, i64, i64, i64, i64) = r.try_into()?;
            Ok(rows::revocation((id, at, kind as u8, app, server)))
        })?;
        let mut out = Vec::new();
        for row in rows {
            out.extend(row?);
        }
        Ok(out)
    }

    fn last_revocation_id(&mut self) -> Result<u64> {
        let v: i64 =
            self.query_row_cached("SELECT COALESCE(MAX(id), 0) FROM revocations", [], |r| {
                r.get(0)
            })?;
        Ok(to_u(v))
    }

    fn revision(&mut self) -> Result<u64> {
        let v: i64 =
            self.query_row_cached("SELECT value FROM meta WHERE key = 'revision'", [], |r| {
                r.get(0)
            })?;
        Ok(to_u(v))
    }
}
