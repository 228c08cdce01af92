//! Claims and open interactions' shared state: the PostgreSQL statements
//! behind [`InteractionStore`] (run as `Single`: autocommit, no global
//! lock, no revision bump). The settle is one conditional UPDATE, so
//! exactly one node wins it.

use tokio_postgres::Row;

use super::conn::{col, Tx};
use crate::error::Result;
use crate::interactions::InteractionStore;
use crate::model::{interaction_state::WAITING, PendingInteraction};
use crate::rows::{followups_text, pending_interaction, to_i, INTERACTION_COLS};

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

impl InteractionStore for Tx<'_> {
    fn insert_claim(&mut self, id: u64, node: &str, now_ms: u64) -> Result<bool> {
        Ok(self.execute(
            "INSERT INTO interaction_claims (id, node, claimed_at_ms) VALUES ($1, $2, $3)
             ON CONFLICT DO NOTHING",
            &[&to_i(id), &node, &to_i(now_ms)],
        )? == 1)
    }

    fn prune_claims(&mut self, before_ms: u64) -> Result<()> {
        self.execute(
            "DELETE FROM interaction_claims WHERE claimed_at_ms < $1",
            &[&to_i(before_ms)],
        )?;
        Ok(())
    }

    fn insert_interaction(&mut self, p: &PendingInteraction) -> Result<()> {
        self.execute(
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
                &followups_text(&p.followups),
            ],
        )?;
        Ok(())
    }

    fn prune_interactions(&mut self, now_ms: u64) -> Result<()> {
        self.execute(
            "DELETE FROM interaction_state WHERE expires_at_ms < $1",
            &[&to_i(now_ms)],
        )?;
        Ok(())
    }

    fn interaction(&mut self, id: u64) -> Result<Option<PendingInteraction>> {
        let sql = format!("SELECT {INTERACTION_COLS} FROM interaction_state WHERE id = $1");
        self.query_opt(&sql, &[&to_i(id)])?
            .map(|r| row(&r))
            .transpose()
    }

    fn interaction_by_token(&mut self, digest: &[u8; 32]) -> Result<Option<PendingInteraction>> {
        let sql =
            format!("SELECT {INTERACTION_COLS} FROM interaction_state WHERE token_digest = $1");
        self.query_opt(&sql, &[&&digest[..]])?
            .map(|r| row(&r))
            .transpose()
    }

    fn settle_interaction(
        &mut self,
        id: u64,
        to: u8,
        since_ms: u64,
        original: Option<u64>,
    ) -> Result<bool> {
        Ok(self.execute(
            "UPDATE interaction_state SET state = $2, original_id = COALESCE($5, original_id)
             WHERE id = $1 AND state = $3 AND opened_at_ms >= $4",
            &[
                &to_i(id),
                &i16::from(to),
                &i16::from(WAITING),
                &to_i(since_ms),
                &original.map(to_i),
            ],
        )? == 1)
    }

    fn set_interaction_messages(
        &mut self,
        id: u64,
        original: Option<u64>,
        followups: &[u64],
    ) -> Result<()> {
        self.execute(
            "UPDATE interaction_state SET original_id = $2, followups = $3 WHERE id = $1",
            &[&to_i(id), &original.map(to_i), &followups_text(followups)],
        )?;
        Ok(())
    }

    fn waiting_interactions(&mut self, node: &str, limit: u32) -> Result<Vec<PendingInteraction>> {
        let sql = format!(
            "SELECT {INTERACTION_COLS} FROM interaction_state
             WHERE node = $1 AND state = $2 ORDER BY opened_at_ms LIMIT $3"
        );
        self.query(&sql, &[&node, &i16::from(WAITING), &i64::from(limit)])?
            .iter()
            .map(row)
            .collect()
    }
}
