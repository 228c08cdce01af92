//! The REST edge's state on one worker (`ApiState`: the application
//! views and the rate limiter, its windows shared with the other nodes
//! when Redis is configured). A leaf: `Worker` (mod.rs) holds it,
//! `rest_edge.rs` works it.

use super::shared::Shared;
use crate::api::limit::Limiter;
use crate::api::view::Views;

/// The REST edge's state on one worker.
pub(super) struct ApiState {
    pub(super) views: Views,
    pub(super) limiter: Limiter,
}

impl ApiState {
    /// With `shared.counters` (Redis configured), the limiter's windows are
    /// shared with the other nodes (`api::shared`).
    pub(super) fn new(shared: &Shared, worker: usize) -> ApiState {
        let rest = &shared.cfg.rest;
        let link = shared
            .counters
            .clone()
            .map(|outbox| crate::api::shared::Link {
                outbox,
                worker: worker as u16,
                sharing: Default::default(),
            });
        ApiState {
            views: Views::with_refresh(rest.view_refresh_ms),
            limiter: Limiter::new(rest.into()).with_link(link),
        }
    }
}
