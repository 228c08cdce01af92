//! The signing statements (SQLite); the rules are `crate::signing`'s.

use rusqlite::{params, Connection, OptionalExtension};

use super::cached::Cached;
use crate::error::Result;
use crate::rows::to_i;
use crate::signing::SigningStore;

impl SigningStore for &Connection {
    fn signing_row(&mut self, app_id: u64) -> Result<Option<(Vec<u8>, Option<String>)>> {
        Ok(self
            .query_row_cached(
                "SELECT signing_seed, interactions_endpoint_url FROM app_signing WHERE application_id = ?1",
                [to_i(app_id)],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?)
    }

    fn insert_signing_if_absent(&mut self, app_id: u64, seed: &[u8; 32]) -> Result<()> {
        self.execute_cached(
            "INSERT INTO app_signing (application_id, signing_seed) VALUES (?1, ?2)
             ON CONFLICT (application_id) DO NOTHING",
            params![to_i(app_id), &seed[..]],
        )?;
        Ok(())
    }

    fn update_endpoint(&mut self, app_id: u64, url: Option<&str>) -> Result<()> {
        self.execute_cached(
            "UPDATE app_signing SET interactions_endpoint_url = ?2 WHERE application_id = ?1",
            params![to_i(app_id), url],
        )?;
        Ok(())
    }
}
