//! The worker's own chat service, as the worker sees it: the port through
//! which a worker commits the message actions of the servers
//! `api::commit_worker` gives it (`chat::Chat::for_worker`, the embedded
//! service), or forwards every action of its bots to the upstream chat
//! service from its own connections (`chat::upstream::Forwarder`). `node`
//! plugs one in. The worker names this trait and not
//! the chat service, which sits floors above it (it feeds the event stream
//! that reaches every worker: docs/architecture.md "Rooms").
//!
//! Contract, per worker turn: any number of `take`s, then one `end_turn`,
//! which puts the turn's batch of events into every worker's inbox (this
//! worker's without a wakeup) and only then each answer (`ToWorker::
//! RestReply`) behind it. A service that cannot commit now (its batches
//! not yet let go by the workers) answers 503 at once; it never waits.

use super::mail::{ChatRequest, Learnt, WorkerHandle};

/// Which of its bots' actions a worker's chat service takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Takes {
    /// The embedded service (`chat::Chat::for_worker`): the message family
    /// (`ChatAction::commits_on_worker`) of the servers `api::commit_worker`
    /// gives this worker; another worker's server's go there
    /// (`ToWorker::Chat`), interactions to the chat thread.
    ServersMessages,
    /// The upstream option (`chat::upstream::Forwarder`): every action,
    /// forwarded from this worker (the upstream commits and orders them).
    Everything,
}

pub trait LocalChat: Send {
    /// Which actions it takes (the rest go elsewhere, see `Takes`).
    fn takes(&self) -> Takes;
    /// Handle one request of this turn; its answer waits for `end_turn`.
    fn take(&mut self, req: ChatRequest);
    /// Apply changes to this worker's servers learnt from other sources.
    fn learnt(&mut self, changes: Box<[Learnt]>);
    /// The end of a turn: the events first, then the answers. False if
    /// there was nothing to send.
    fn end_turn(&mut self, workers: &[WorkerHandle]) -> bool;
}
