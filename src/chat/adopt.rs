//! A callback or a follow-up for an interaction this node's table may not
//! hold, or may hold out of date (opened on another node, before a
//! restart, or answered elsewhere): found, adopted and settled through the
//! shared state (`store.rs`; docs/interactions.md "Across nodes and
//! restarts").

use super::interactions::{
    bad_webhook_token, note_answered_elsewhere, unknown_interaction, Count, State, RESPONSE_MS,
};
use super::store::Settled;
use super::*;

fn unavailable() -> crate::api::body::ApiError {
    crate::api::body::ApiError::new(503, 0, "interaction state unavailable")
}

impl Chat {
    /// A callback for an interaction not in the table: adopted from its
    /// row if the token is its own, else 404 10062.
    pub(super) fn adopt_by_id(&mut self, id: u64, dg: &[u8; 32], now: u64) -> Result<(), ApiError> {
        if !self.ix.store.enabled() {
            return Err(unknown_interaction());
        }
        match self.ix.store.by_id(id) {
            Ok(Some(p)) if p.token_digest == *dg && p.expires_at_ms > now => {
                // A table entry under this id with another token is a forgery's.
                if self.ix.open.get(&id).is_some_and(|o| o.digest != *dg) {
                    return Err(unknown_interaction());
                }
                self.ix.adopt(&p, now).map(|_| ()).ok_or_else(unavailable)
            }
            Ok(_) => Err(unknown_interaction()),
            Err(()) => Err(unavailable()),
        }
    }

    /// The first response's settle: exactly one wins across nodes.
    pub(super) fn settle_first_response(
        &mut self,
        id: u64,
        to: State,
        original: Option<u64>,
        now: u64,
    ) -> Result<(), ApiError> {
        let since = (now + 1).saturating_sub(RESPONSE_MS);
        match self.ix.store.settle(id, to, since, original) {
            Settled::Won => Ok(()),
            // Decided from memory where the interaction was opened.
            Settled::Unavailable if self.ix.open[&id].here => Ok(()),
            Settled::Unavailable => Err(unavailable()),
            Settled::Lost(s) => {
                let ix = &mut self.ix;
                let o = ix.open.get_mut(&id).expect("checked");
                o.state = s.unwrap_or(State::Failed);
                let answered = matches!(o.state, State::Answered | State::Deferred);
                if answered && o.here {
                    note_answered_elsewhere(&ix.stats, &ix.board, id);
                }
                if answered {
                    ix.stats.double.fetch_add(1, Relaxed);
                    ix.board.count(o.app, Count::Double);
                    Err(ApiError::new(
                        400,
                        40060,
                        "Interaction has already been acknowledged.",
                    ))
                } else {
                    ix.stats.late.fetch_add(1, Relaxed);
                    ix.board.count(o.app, Count::Late);
                    Err(unknown_interaction())
                }
            }
        }
    }

    /// The interaction a follow-up's token names, its table entry brought
    /// up to date from its row (another node may have answered it or added
    /// follow-ups): its id, or 401 50027.
    pub(super) fn webhook_interaction(
        &mut self,
        app: u64,
        dg: &[u8; 32],
        now: u64,
    ) -> Result<u64, ApiError> {
        let cached = self.ix.by_digest.get(dg).copied();
        let live = |opened: u64, ttl: u64| now < opened + ttl;
        if self.ix.store.enabled() {
            match self.ix.store.by_token(dg) {
                Ok(Some(p)) if p.application_id == app && p.expires_at_ms > now => {
                    return self.ix.adopt(&p, now).ok_or_else(unavailable);
                }
                Ok(_) => return Err(bad_webhook_token()),
                // Decided from memory if the interaction is here.
                Err(()) if cached.is_none() => return Err(unavailable()),
                Err(()) => {}
            }
        }
        let ttl = self.ix.token_ttl_ms();
        match cached {
            Some(id)
                if self
                    .ix
                    .open
                    .get(&id)
                    .is_some_and(|o| o.app == app && live(o.opened_ms, ttl)) =>
            {
                Ok(id)
            }
            _ => Err(bad_webhook_token()),
        }
    }
}
