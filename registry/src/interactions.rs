//! Interactions' shared state: the claims (one node answers each
//! interaction) and the open interactions (`interaction_state`), one
//! statement each, none of it a registry change (no revision bump, no
//! global lock). A backend implements [`InteractionStore`]; the pruning
//! cadence is here.

use crate::error::Result;
use crate::model::PendingInteraction;

/// How long an interaction claim is kept (longer than any token lives).
pub const CLAIM_KEEP_MS: u64 = 60 * 60 * 1000;
/// One claim in this many also prunes the expired ones.
pub const CLAIM_PRUNE_EVERY: u64 = 256;

/// The claim and interaction-state statements.
pub(crate) trait InteractionStore {
    /// Insert-if-absent: true if this call inserted it.
    fn insert_claim(&mut self, id: u64, node: &str, now_ms: u64) -> Result<bool>;
    /// Claims made before `before_ms`.
    fn prune_claims(&mut self, before_ms: u64) -> Result<()>;
    fn insert_interaction(&mut self, p: &PendingInteraction) -> Result<()>;
    /// Interactions whose token expired before `now_ms`.
    fn prune_interactions(&mut self, now_ms: u64) -> Result<()>;
    fn interaction(&mut self, id: u64) -> Result<Option<PendingInteraction>>;
    fn interaction_by_token(&mut self, digest: &[u8; 32]) -> Result<Option<PendingInteraction>>;
    /// `WAITING` -> `to` if still waiting and opened at or after
    /// `since_ms`, recording `original` if given: true if it moved.
    fn settle_interaction(
        &mut self,
        id: u64,
        to: u8,
        since_ms: u64,
        original: Option<u64>,
    ) -> Result<bool>;
    fn set_interaction_messages(
        &mut self,
        id: u64,
        original: Option<u64>,
        followups: &[u64],
    ) -> Result<()>;
    /// `node`'s waiting interactions, oldest first, at most `limit`.
    fn waiting_interactions(&mut self, node: &str, limit: u32) -> Result<Vec<PendingInteraction>>;
}

/// Whether the claim or interaction `id` also prunes the expired ones (one
/// in [`CLAIM_PRUNE_EVERY`]).
pub(crate) fn prunes(id: u64) -> bool {
    id.is_multiple_of(CLAIM_PRUNE_EVERY)
}
