//! What the cluster view keeps between page refreshes (`State`): the
//! live nodes as last read, the nodes gone and silent, and each
//! application's cached answers (`Remote`, one `Peer` per other node).
//! A leaf: `cluster.rs` fills and reads it, `Ctx` holds it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::figures::NodeFigures;

/// Another node, and what it said.
#[derive(Clone, Debug)]
pub struct Peer {
    pub node: u16,
    /// Its figures, or why there are none.
    pub answer: Result<NodeFigures, &'static str>,
    pub took_ms: u64,
}

/// The other nodes' answers for one application.
#[derive(Debug)]
pub struct Remote {
    pub at: Instant,
    /// None: the registry did not list the live nodes (its error).
    pub registry_error: Option<String>,
    pub peers: Vec<Peer>,
}

pub(super) struct Entry {
    pub(super) view: Arc<Remote>,
    /// A refresh is under way (others use this view meanwhile).
    pub(super) fetching: bool,
    /// When a page of the application last asked.
    pub(super) polled: Instant,
}

/// (node, link address) of the live nodes, and when read.
pub(super) type Listed = (Vec<(u16, String)>, Option<Instant>);

#[derive(Default)]
pub struct State {
    pub(super) nodes: Mutex<Listed>,
    /// Nodes listed before and not any more: (node, link, when noticed).
    pub(super) gone: Mutex<Vec<(u16, String, Instant)>>,
    /// Nodes that did not answer: when, and why (at most `MAX_PEERS`).
    pub(super) silent: Mutex<Vec<(u16, Instant, &'static str)>>,
    pub(super) cache: Mutex<HashMap<u64, Entry>>,
}
