//! The signing statements (PostgreSQL); the rules are `crate::signing`'s.

use super::conn::{col, Tx};
use crate::error::Result;
use crate::rows::to_i;
use crate::signing::SigningStore;

impl SigningStore for Tx<'_> {
    fn signing_row(&mut self, app_id: u64) -> Result<Option<(Vec<u8>, Option<String>)>> {
        self.query_opt(
            "SELECT signing_seed, interactions_endpoint_url FROM app_signing WHERE application_id = $1",
            &[&to_i(app_id)],
        )?
        .map(|r| Ok((col::<Vec<u8>>(&r, 0)?, col::<Option<String>>(&r, 1)?)))
        .transpose()
    }

    fn insert_signing_if_absent(&mut self, app_id: u64, seed: &[u8; 32]) -> Result<()> {
        self.execute(
            "INSERT INTO app_signing (application_id, signing_seed) VALUES ($1, $2)
             ON CONFLICT (application_id) DO NOTHING",
            &[&to_i(app_id), &&seed[..]],
        )?;
        Ok(())
    }

    fn update_endpoint(&mut self, app_id: u64, url: Option<&str>) -> Result<()> {
        self.execute(
            "UPDATE app_signing SET interactions_endpoint_url = $2 WHERE application_id = $1",
            &[&to_i(app_id), &url],
        )?;
        Ok(())
    }
}
