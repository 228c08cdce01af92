//! The chat thread's table of interactions (`Interactions`: the open
//! ones by id and digest, their deadlines and expiries, what was shown)
//! and their counters. A leaf: `Chat` (mod.rs) holds the table,
//! `interactions.rs` works it (and re-exports both).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use super::board::Board;
use super::open::Open;

#[derive(Default)]
pub struct InteractionStats {
    pub opened: AtomicU64,
    pub refused: AtomicU64,
    pub acked: AtomicU64,
    pub deferred: AtomicU64,
    pub missed: AtomicU64,
    pub late: AtomicU64,
    pub double: AtomicU64,
    pub followups: AtomicU64,
    /// Interactions of this node answered on another (their miss lost).
    pub answered_elsewhere: AtomicU64,
    /// Registry calls for the shared state that failed (`store.rs`).
    pub store_failures: Arc<AtomicU64>,
    /// Time from opening to the first response.
    pub ack_latency: crate::histogram::Histogram,
}

pub struct Interactions {
    pub(super) open: HashMap<u64, Open>,
    pub(super) by_digest: HashMap<[u8; 32], u64>,
    pub(super) deadlines: VecDeque<(u64, u64)>,
    pub(super) expiries: VecDeque<(u64, u64)>,
    /// When each board entry is forgotten (FIFO, like the others).
    pub(super) shown: VecDeque<(u64, u64)>,
    pub(super) token_ttl_ms: u64,
    pub board: Arc<Board>,
    pub stats: Arc<InteractionStats>,
    /// The deliverer to HTTP interactions endpoints (`endpoint.rs`).
    pub deliver: Option<super::endpoint::Deliveries>,
    /// The shared state (`store.rs`).
    pub store: super::store::Store,
}
