//! Bounded, preallocated storage for the event path: no I/O, no protocol
//! knowledge, no allocation after construction.
//!
//! - [`Arena`] (one per worker): a circular log of immutable event records
//!   in one region mapped at start. An event is copied into a worker's arena
//!   once; sessions refer to it by [`RecordRef`] (logical position + length).
//!   Invariant: a `RecordRef` whose `pos` is at least [`Arena::oldest`] reads
//!   back exactly the appended bytes; below it, [`Arena::get`] returns `None`
//!   and counts a lost read. The boundary is public so a resume can decide.
//! - [`ChunkSlab`] (one per worker): fixed-size chunks with an index free
//!   list; the only memory rings ever use. Exhaustion is an error, not growth.
//! - [`SessionRing`] (one per session): entries `(record, seq, at_ms)` held in
//!   chunks from a [`RingSlab`]. It is the send queue (`unsent` cursor,
//!   bounded by `max_unsent` and a byte budget) and the resume buffer (sent
//!   history, bounded by `max_held` and the expiry window). Resume moves the
//!   unsent cursor back; replay is the normal send path. An empty ring holds
//!   no chunks.
//!
//! Every bound is explicit in a config struct and checked with assertions;
//! every error leaves the structure unchanged.

pub mod arena;
pub mod ring;
pub mod slab;

pub use arena::{Arena, ArenaConfig, ArenaError, ArenaStats, RecordRef, RECORD_ALIGN};
pub use ring::{Entries, Entry, PushError, ReplayError, RingConfig, RingSlab, SessionRing, Slot};
pub use slab::{ChunkId, ChunkSlab, CHUNK};

// Built at startup, then moved into the worker that owns them.
const _: () = {
    const fn send<T: Send>() {}
    send::<Arena>();
    send::<RingSlab>();
    send::<SessionRing>();
};
