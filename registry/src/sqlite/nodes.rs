//! The cluster membership statements (SQLite); the rules are `crate::nodes`'.

use rusqlite::{params, Connection, OptionalExtension};

use super::cached::Cached;
use crate::error::Result;
use crate::nodes::NodeStore;
use crate::rows::to_i;

impl NodeStore for &Connection {
    fn live_nodes(&mut self, now_ms: u64) -> Result<Vec<u16>> {
        let mut st = self.prepare_cached(
            "SELECT node_id FROM cluster_nodes WHERE expires_at_ms > ?1 ORDER BY node_id",
        )?;
        let rows = st.query_map([to_i(now_ms)], |r| r.get::<_, i64>(0))?;
        let mut out = Vec::new();
        for r in rows {
            out.push(u16::try_from(r?).unwrap_or(0));
        }
        Ok(out)
    }

    fn live_links(&mut self, now_ms: u64) -> Result<Vec<(u16, String)>> {
        let mut st = self.prepare_cached(
            "SELECT node_id, link_addr FROM cluster_nodes WHERE expires_at_ms > ?1 ORDER BY node_id",
        )?;
        let rows = st.query_map([to_i(now_ms)], |r| {
            Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))
        })?;
        let mut out = Vec::new();
        for r in rows {
            let (n, a) = r?;
            out.push((u16::try_from(n).unwrap_or(0), a));
        }
        Ok(out)
    }

    fn claim(
        &mut self,
        node: u16,
        instance: &str,
        link_addr: &str,
        now_ms: u64,
        until_ms: u64,
    ) -> Result<bool> {
        Ok(self.execute_cached(
            "INSERT INTO cluster_nodes (node_id, instance, link_addr, expires_at_ms)
             VALUES (?1, ?2, ?3, ?5)
             ON CONFLICT (node_id) DO UPDATE
               SET instance = excluded.instance, link_addr = excluded.link_addr,
                   expires_at_ms = excluded.expires_at_ms
             WHERE cluster_nodes.instance = excluded.instance OR cluster_nodes.expires_at_ms <= ?4",
            params![
                i64::from(node),
                instance,
                link_addr,
                to_i(now_ms),
                to_i(until_ms)
            ],
        )? == 1)
    }

    fn link_of(&mut self, node: u16, now_ms: u64) -> Result<Option<String>> {
        Ok(self
            .query_row_cached(
                "SELECT link_addr FROM cluster_nodes WHERE node_id = ?1 AND expires_at_ms > ?2",
                params![i64::from(node), to_i(now_ms)],
                |r| r.get(0),
            )
            .optional()?)
    }

    fn instance_live(&mut self, instance: &str, now_ms: u64) -> Result<bool> {
        Ok(self
            .query_row_cached(
                "SELECT 1 FROM cluster_nodes WHERE instance = ?1 AND expires_at_ms > ?2 LIMIT 1",
                params![instance, to_i(now_ms)],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    }

    fn leave(&mut self, node: u16, instance: &str) -> Result<()> {
        self.execute_cached(
            "DELETE FROM cluster_nodes WHERE node_id = ?1 AND instance = ?2",
            params![i64::from(node), instance],
        )?;
        Ok(())
    }
}
