//! Open interactions' shared state (PostgreSQL): single autocommit
//! statements, no global lock, no revision bump (like the claims). The
//! settle is one conditional UPDATE, so exactly one node wins it.

use tokio_postgres::Row;

use super::{col, PostgresRegistry, WriteKind};
use crate::model::{interaction_state::WAITING, PendingInteraction};
use crate::rows::{followups_text, pending_interaction, to_i, INTERACTION_COLS};
use crate::Result;

fn row(r: &Row) -> Result<PendingInteraction> {
    Ok(pending_interaction((
        col(r, 0)?,
        col(r, 1)?,
        col(r, 2)?,
        i64::from(col::<i16>(r, 3)?),
        col(r, 4)?,
        col(r, 5)?,
        col(r, 6)?,
        col(r, 7)?,
        col(r, 8)?,
        col(r, 9)?,
    )))
}

impl PostgresRegistry {
    pub(super) fn put_interaction_row(&self, p: &PendingInteraction, now_ms: u64) -> Result<()> {
        let followups = followups_text(&p.followups);
        self.run(WriteKind::Single, |t| {
            t.execute(
                "INSERT INTO interaction_state (id, application_id, token_digest, state,
                     opened_at_ms, expires_at_ms, node, detail, original_id, followups)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
                &[
                    &to_i(p.id),
                    &to_i(p.application_id),
                    &&p.token_digest[..],
                    &i16::from(p.state),
                    &to_i(p.opened_at_ms),
                    &to_i(p.expires_at_ms),
                    &p.node,
                    &p.detail,
                    &p.original_id.map(to_i),
                    &followups,
                ],
            )
        })?;
        if p.id.is_multiple_of(crate::CLAIM_PRUNE_EVERY) {
            self.run(WriteKind::Single, |t| {
                t.execute(
                    "DELETE FROM interaction_state WHERE expires_at_ms < $1",
                    &[&to_i(now_ms)],
                )
            })?;
        }
        Ok(())
    }

    pub(super) fn interaction_row_by_id(&self, id: u64) -> Result<Option<PendingInteraction>> {
        let sql = format!("SELECT {INTERACTION_COLS} FROM interaction_state WHERE id = $1");
        self.run(WriteKind::Single, |t| t.query_opt(&sql, &[&to_i(id)]))?
            .map(|r| row(&r))
            .transpose()
    }

    pub(super) fn interaction_row_by_token(
        &self,
        digest: &[u8; 32],
    ) -> Result<Option<PendingInteraction>> {
        let sql =
            format!("SELECT {INTERACTION_COLS} FROM interaction_state WHERE token_digest = $1");
        self.run(WriteKind::Single, |t| t.query_opt(&sql, &[&&digest[..]]))?
            .map(|r| row(&r))
            .transpose()
    }

    pub(super) fn settle_interaction_row(
        &self,
        id: u64,
        to: u8,
        since_ms: u64,
        original: Option<u64>,
    ) -> Result<bool> {
        let original = original.map(to_i);
        let n = self.run(WriteKind::Single, |t| {
            t.execute(
                "UPDATE interaction_state SET state = $2, original_id = COALESCE($5, original_id)
                 WHERE id = $1 AND state = $3 AND opened_at_ms >= $4",
                &[
                    &to_i(id),
                    &i16::from(to),
                    &i16::from(WAITING),
                    &to_i(since_ms),
                    &original,
                ],
            )
        })?;
        Ok(n == 1)
    }

    pub(super) fn set_interaction_messages_row(
        &self,
        id: u64,
        original: Option<u64>,
        followups: &[u64],
    ) -> Result<()> {
        let text = followups_text(followups);
        self.run(WriteKind::Single, |t| {
            t.execute(
                "UPDATE interaction_state SET original_id = $2, followups = $3 WHERE id = $1",
                &[&to_i(id), &original.map(to_i), &text],
            )
        })?;
        Ok(())
    }

    pub(super) fn waiting_interaction_rows(
        &self,
        node: &str,
        limit: u32,
    ) -> Result<Vec<PendingInteraction>> {
        let sql = format!(
            "SELECT {INTERACTION_COLS} FROM interaction_state
             WHERE node = $1 AND state = $2 ORDER BY opened_at_ms LIMIT $3"
        );
        let rows = self.run(WriteKind::Single, |t| {
            t.query(&sql, &[&node, &i16::from(WAITING), &i64::from(limit)])
        })?;
        rows.iter().map(row).collect()
    }
}
