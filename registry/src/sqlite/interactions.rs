//! Claims and open interactions' shared state: the SQLite statements behind
//! [`InteractionStore`] (run as `Single`: autocommit, none of it a registry
//! change).

use rusqlite::{params, Connection, OptionalExtension};

use super::cached::Cached;
use crate::error::Result;
use crate::interactions::InteractionStore;
use crate::model::{interaction_state::WAITING, PendingInteraction};
use crate::rows::{followups_text, pending_interaction, to_i, InteractionRow, INTERACTION_COLS};

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<InteractionRow> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
        r.get(8)?,
        r.get(9)?,
    ))
}

fn interaction_where(
    c: &Connection,
    clause: &str,
    key: &dyn rusqlite::ToSql,
) -> Result<Option<PendingInteraction>> {
    let sql = format!("SELECT {INTERACTION_COLS} FROM interaction_state WHERE {clause}");
    let r = c.query_row_cached(&sql, [key], row).optional()?;
    Ok(r.map(pending_interaction))
}

impl InteractionStore for &Connection {
    fn insert_claim(&mut self, id: u64, node: &str, now_ms: u64) -> Result<bool> {
        Ok(self.execute_cached(
            "INSERT INTO interaction_claims (id, node, claimed_at_ms) VALUES (?1, ?2, ?3)
             ON CONFLICT DO NOTHING",
            params![to_i(id), node, to_i(now_ms)],
        )? == 1)
    }

    fn prune_claims(&mut self, before_ms: u64) -> Result<()> {
        self.execute_cached(
            "DELETE FROM interaction_claims WHERE claimed_at_ms < ?1",
            [to_i(before_ms)],
        )?;
        Ok(())
    }

    fn insert_interaction(&mut self, p: &PendingInteraction) -> Result<()> {
        self.execute_cached(
            "INSERT INTO interaction_state (id, application_id, token_digest, state, opened_at_ms,
                 expires_at_ms, node, detail, original_id, followups)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![
                to_i(p.id),
                to_i(p.application_id),
                &p.token_digest[..],
                i64::from(p.state),
                to_i(p.opened_at_ms),
                to_i(p.expires_at_ms),
                p.node,
                p.detail,
                p.original_id.map(to_i),
                followups_text(&p.followups),
            ],
        )?;
        Ok(())
    }

    fn prune_interactions(&mut self, now_ms: u64) -> Result<()> {
        self.execute_cached(
            "DELETE FROM interaction_state WHERE expires_at_ms < ?1",
            [to_i(now_ms)],
        )?;
        Ok(())
    }

    fn interaction(&mut self, id: u64) -> Result<Option<PendingInteraction>> {
        interaction_where(self, "id = ?1", &to_i(id))
    }

    fn interaction_by_token(&mut self, digest: &[u8; 32]) -> Result<Option<PendingInteraction>> {
        interaction_where(self, "token_digest = ?1", &&digest[..])
    }

    fn settle_interaction(
        &mut self,
        id: u64,
        to: u8,
        since_ms: u64,
        original: Option<u64>,
    ) -> Result<bool> {
        Ok(self.execute_cached(
            "UPDATE interaction_state SET state = ?2, original_id = COALESCE(?5, original_id)
             WHERE id = ?1 AND state = ?3 AND opened_at_ms >= ?4",
            params![
                to_i(id),
                i64::from(to),
                i64::from(WAITING),
                to_i(since_ms),
                original.map(to_i)
            ],
        )? == 1)
    }

    fn set_interaction_messages(
        &mut self,
        id: u64,
        original: Option<u64>,
        followups: &[u64],
    ) -> Result<()> {
        self.execute_cached(
            "UPDATE interaction_state SET original_id = ?2, followups = ?3 WHERE id = ?1",
            params![to_i(id), original.map(to_i), followups_text(followups)],
        )?;
        Ok(())
    }

    fn waiting_interactions(&mut self, node: &str, limit: u32) -> Result<Vec<PendingInteraction>> {
        let sql = format!(
            "SELECT {INTERACTION_COLS} FROM interaction_state
             WHERE node = ?1 AND state = ?2 ORDER BY opened_at_ms LIMIT ?3"
        );
        let mut st = self.prepare_cached(&sql)?;
        let rows = st.query_map(params![node, i64::from(WAITING), i64::from(limit)], row)?;
        let mut out = Vec::new();
        for r in rows {
            out.push(pending_interaction(r?));
        }
        Ok(out)
    }
}
