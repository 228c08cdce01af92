//! Interaction signing state (ADR-12), written once for both backends:
//! each application's Ed25519 seed (32 random bytes, created on first use)
//! and its interactions endpoint URL. The registry only stores them; the
//! node signs and verifies endpoints (`src/egress/sign.rs`).

use crate::apps::{require_application, AppStore};
use crate::{error::RegistryError, error::Result, token};

/// Longest endpoint URL stored.
pub const MAX_ENDPOINT_URL: usize = 2048;

/// The statements the signing operations need.
pub(crate) trait SigningStore: AppStore {
    /// The application's (seed, endpoint) row, if it has one.
    fn signing_row(&mut self, app_id: u64) -> Result<Option<(Vec<u8>, Option<String>)>>;
    /// Inserts a row with this seed and no endpoint unless one exists
    /// (a concurrent first use may have made it: that one is kept).
    fn insert_signing_if_absent(&mut self, app_id: u64, seed: &[u8; 32]) -> Result<()>;
    /// The row exists.
    fn update_endpoint(&mut self, app_id: u64, url: Option<&str>) -> Result<()>;
}

fn to_seed(app_id: u64, bytes: Vec<u8>) -> Result<[u8; 32]> {
    bytes.try_into().map_err(|b: Vec<u8>| {
        RegistryError::Storage(
            format!(
                "application {app_id}: signing seed of {} bytes, not 32",
                b.len()
            )
            .into(),
        )
    })
}

/// The seed if it exists (a read: no write transaction needed).
pub(crate) fn existing_seed<S: SigningStore>(s: &mut S, app_id: u64) -> Result<Option<[u8; 32]>> {
    s.signing_row(app_id)?
        .map(|(seed, _)| to_seed(app_id, seed))
        .transpose()
}

/// The seed, created if the application has none yet.
pub(crate) fn signing_seed<S: SigningStore>(s: &mut S, app_id: u64) -> Result<[u8; 32]> {
    require_application(s, app_id)?;
    if let Some(seed) = existing_seed(s, app_id)? {
        return Ok(seed);
    }
    s.insert_signing_if_absent(app_id, &token::random_bytes::<32>()?)?;
    existing_seed(s, app_id)?.ok_or(RegistryError::NotFound {
        what: "signing seed of application",
        id: app_id,
    })
}

/// An http(s) URL of printable ASCII; the egress checks the rest (its
/// host's addresses) when it calls it.
pub(crate) fn check_endpoint_url(url: &str) -> Result<()> {
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    if url.len() > MAX_ENDPOINT_URL
        || !(lower.starts_with("http://") || lower.starts_with("https://"))
        || url.bytes().any(|b| !(0x21..0x7f).contains(&b))
    {
        return Err(RegistryError::Invalid(format!(
            "interactions endpoint URL must be http(s)://..., printable ASCII, at most {MAX_ENDPOINT_URL} bytes"
        )));
    }
    Ok(())
}

pub(crate) fn set_interactions_endpoint<S: SigningStore>(
    s: &mut S,
    app_id: u64,
    url: Option<&str>,
) -> Result<()> {
    if let Some(u) = url {
        check_endpoint_url(u)?;
    }
    signing_seed(s, app_id)?;
    s.update_endpoint(app_id, url)
}

pub(crate) fn interactions_endpoint<S: SigningStore>(
    s: &mut S,
    app_id: u64,
) -> Result<Option<String>> {
    require_application(s, app_id)?;
    Ok(s.signing_row(app_id)?.and_then(|(_, url)| url))
}
