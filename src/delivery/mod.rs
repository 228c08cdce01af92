//! Delivery: from a validated event to bytes on a socket. Who may see an
//! event (`entitlement`), which sessions get it and the ring append
//! (`fanout`), the arena record an event is stored as (`record`), and the
//! send path with its fixed pool, TLS and compression (`sendpath`). Nothing
//! here owns a socket: the worker hands in buffers and completions.

pub mod batch;
pub mod entitlement;
pub mod fanout;
pub mod interest;
pub mod latency;
pub mod moved;
pub mod reconnect;
pub mod record;
pub mod recovery;
pub mod resume;
pub mod sendpath;
pub mod wire;

/// Names one connection of one worker: ring, fixed-file slot and the slot's
/// generation (a reused slot never receives a reply meant for the old one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConnKey {
    pub ring: u8,
    pub gen: u16,
    pub slot: u32,
}

impl ConnKey {
    /// No connection: a request made inside the node (its answer goes
    /// nowhere).
    pub const NONE: ConnKey = ConnKey {
        ring: 0,
        gen: 0,
        slot: 0,
    };
}
