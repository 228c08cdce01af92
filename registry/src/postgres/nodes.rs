//! The cluster membership statements (PostgreSQL); the rules are `crate::nodes`'.

use super::conn::{col, Tx};
use crate::error::Result;
use crate::nodes::NodeStore;
use crate::rows::to_i;

impl NodeStore for Tx<'_> {
    fn live_nodes(&mut self, now_ms: u64) -> Result<Vec<u16>> {
        self.query(
            "SELECT node_id FROM cluster_nodes WHERE expires_at_ms > $1 ORDER BY node_id",
            &[&to_i(now_ms)],
        )?
        .iter()
        .map(|r| Ok(u16::try_from(col::<i64>(r, 0)?).unwrap_or(0)))
        .collect()
    }

    fn claim(
        &mut self,
        node: u16,
        instance: &str,
        link_addr: &str,
        now_ms: u64,
        until_ms: u64,
    ) -> Result<bool> {
        Ok(self.execute(
            "INSERT INTO cluster_nodes (node_id, instance, link_addr, expires_at_ms)
             VALUES ($1, $2, $3, $5)
             ON CONFLICT (node_id) DO UPDATE
               SET instance = excluded.instance, link_addr = excluded.link_addr,
                   expires_at_ms = excluded.expires_at_ms
             WHERE cluster_nodes.instance = excluded.instance OR cluster_nodes.expires_at_ms <= $4",
            &[
                &i64::from(node),
                &instance,
                &link_addr,
                &to_i(now_ms),
                &to_i(until_ms),
            ],
        )? == 1)
    }

    fn live_links(&mut self, now_ms: u64) -> Result<Vec<(u16, String)>> {
        self.query(
            "SELECT node_id, link_addr FROM cluster_nodes WHERE expires_at_ms > $1 ORDER BY node_id",
            &[&to_i(now_ms)],
        )?
        .iter()
        .map(|r| Ok((u16::try_from(col::<i64>(r, 0)?).unwrap_or(0), col::<String>(r, 1)?)))
        .collect()
    }

    fn link_of(&mut self, node: u16, now_ms: u64) -> Result<Option<String>> {
        self.query_opt(
            "SELECT link_addr FROM cluster_nodes WHERE node_id = $1 AND expires_at_ms > $2",
            &[&i64::from(node), &to_i(now_ms)],
        )?
        .map(|r| col::<String>(&r, 0))
        .transpose()
    }

    fn instance_live(&mut self, instance: &str, now_ms: u64) -> Result<bool> {
        Ok(self
            .query_opt(
                "SELECT 1 FROM cluster_nodes WHERE instance = $1 AND expires_at_ms > $2 LIMIT 1",
                &[&instance, &to_i(now_ms)],
            )?
            .is_some())
    }

    fn leave(&mut self, node: u16, instance: &str) -> Result<()> {
        self.execute(
            "DELETE FROM cluster_nodes WHERE node_id = $1 AND instance = $2",
            &[&i64::from(node), &instance],
        )?;
        Ok(())
    }
}
