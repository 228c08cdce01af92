//! Where the chat thread hands what it learnt when workers run chat
//! services of their own (`Forward`: the workers and what waits for each).
//! A leaf: `Chat` (mod.rs) holds it, `tap.rs` fills and sends it.

use std::sync::Arc;

use crate::worker::mail::{Learnt, WorkerHandle};

/// Where the chat thread hands what it learnt (per-worker chat services on).
pub struct Forward {
    pub workers: Arc<[WorkerHandle]>,
    pub(super) pending: Vec<Vec<Learnt>>,
}

impl Forward {
    pub fn new(workers: Arc<[WorkerHandle]>) -> Forward {
        let pending = (0..workers.len()).map(|_| Vec::new()).collect();
        Forward { workers, pending }
    }
}
