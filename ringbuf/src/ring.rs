//! `SessionRing`: one per session, both the send queue and the resume buffer.
//!
//! Entries are numbered by a contiguous `seq`. The ring holds
//! `first..=last`; `unsent` is the first entry not yet written to the socket:
//!
//! ```text
//!   dropped/acked | held, sent          | held, unsent         | future
//!   ... first-1   | first .. unsent-1   | unsent ..= last      | last+1 ...
//! ```
//!
//! Invariants: `first <= unsent <= last + 1`; `last - first + 1 <= max_held`;
//! only sent entries are ever dropped. Storage is a chain of chunks from a
//! shared `RingSlab`; chunk boundaries are aligned to `seq % CHUNK`, so the
//! slot of `seq` is `seq % CHUNK` in the chunk covering it and the number of
//! chunks held is exactly the number of aligned CHUNK-seq blocks that
//! `first..=last` touches (zero when empty). Resume is "move `unsent` back
//! and send normally".
//!
//! The unit tests, including a property test against a plain model of
//! these invariants, are in `ring/tests.rs`.

use crate::arena::RecordRef;
use crate::slab::{ChunkId, ChunkSlab, CHUNK};

const CHUNK_U64: u64 = CHUNK as u64;

/// One queued delivery as callers see it. 32 bytes; only 24 are stored
/// (`seq` is implied by position).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Entry {
    /// The arena record to send: the full or the redacted variant.
    pub record: RecordRef,
    pub seq: u64,
    /// When it was pushed (caller's monotonic clock); drives `expire`.
    pub at_ms: u64,
}

/// What a slot of a ring chunk stores.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Slot {
    record: RecordRef,
    at_ms: u64,
}

/// The per-worker pool that all session rings take chunks from.
pub type RingSlab = ChunkSlab<Slot>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingConfig {
    /// Send-queue bound: a push that would exceed it fails with `Full`.
    pub max_unsent: u32,
    /// Resume-history bound: at it, a push drops the oldest sent entry.
    /// `max_unsent <= max_held`, so there is always a sent entry to drop.
    pub max_held: u32,
    /// Byte bound on unsent record payloads (frame headers not counted);
    /// `u64::MAX` for none. Should be at least the arena's `max_record`.
    pub max_unsent_bytes: u64,
}

impl Default for RingConfig {
    fn default() -> Self {
        RingConfig {
            max_unsent: 5000,
            max_held: 5000,
            max_unsent_bytes: u64::MAX,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    /// The unsent backlog is at its bound: close the session resumably.
    #[error("session send queue full")]
    Full,
    /// The worker's ring slab is exhausted: treat like `Full`.
    #[error("ring slab exhausted")]
    NoChunks,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    /// Answer with op 9 `d:false`.
    #[error("seq {seq} not held (can resume after {oldest_resumable}..={last})")]
    NotHeld {
        seq: u64,
        oldest_resumable: u64,
        last: u64,
    },
}

#[derive(Debug)]
pub struct SessionRing {
    /// Chunk covering `first`, `None` iff empty.
    head: Option<ChunkId>,
    /// Chunk covering `last`, `None` iff empty.
    tail: Option<ChunkId>,
    /// Chunk covering `unsent`, `None` iff nothing is unsent. Cached so a
    /// send batch does not walk the chain from `head`.
    send: Option<ChunkId>,
    max_unsent: u32,
    max_held: u32,
    first: u64,
    unsent: u64,
    last: u64,
    unsent_bytes: u64,
    max_unsent_bytes: u64,
}

impl SessionRing {
    /// An empty ring whose next push must carry `last_seq + 1`. Holds no
    /// chunks until then.
    pub fn new(config: &RingConfig, last_seq: u64) -> SessionRing {
        assert!(config.max_unsent >= 1);
        assert!(config.max_unsent <= config.max_held);
        assert!(last_seq < u64::MAX / 2);
        SessionRing {
            head: None,
            tail: None,
            send: None,
            max_unsent: config.max_unsent,
            max_held: config.max_held,
            first: last_seq + 1,
            unsent: last_seq + 1,
            last: last_seq,
            unsent_bytes: 0,
            max_unsent_bytes: config.max_unsent_bytes,
        }
    }

    /// Appends `entry` (whose seq must be `last_seq() + 1`) as unsent.
    /// On error nothing changes.
    pub fn push(&mut self, slab: &mut RingSlab, entry: Entry) -> Result<(), PushError> {
        assert_eq!(entry.seq, self.last + 1, "ring seq must be contiguous");
        let len = u64::from(entry.record.len);
        if self.len_unsent() >= self.max_unsent
            || self.unsent_bytes.saturating_add(len) > self.max_unsent_bytes
        {
            return Err(PushError::Full);
        }
        self.push_over_bound(slab, entry)
    }

    /// Like [`push`](Self::push) but past the unsent bound: for the one
    /// entry that finds the bound reached (kept, so closing the session at
    /// the bound loses nothing) and for the owner's own dispatches after a
    /// full replay. Still bounded by `max_held`: `Full` when every held entry
    /// is unsent.
    pub fn push_over_bound(&mut self, slab: &mut RingSlab, entry: Entry) -> Result<(), PushError> {
        assert_eq!(entry.seq, self.last + 1, "ring seq must be contiguous");
        let len = u64::from(entry.record.len);
        let held = self.len_held();
        assert!(held <= self.max_held);
        let drop_oldest = held == self.max_held;
        if drop_oldest && self.first >= self.unsent {
            return Err(PushError::Full);
        }
        // Decide before mutating so an error leaves the ring untouched.
        let drop_frees = drop_oldest && (held == 1 || (self.first + 1).is_multiple_of(CHUNK_U64));
        let needs_chunk = held - u32::from(drop_oldest) == 0 || entry.seq.is_multiple_of(CHUNK_U64);
        if needs_chunk && !drop_frees && slab.free_count() == 0 {
            return Err(PushError::NoChunks);
        }
        if drop_oldest {
            debug_assert!(self.first < self.unsent, "checked above");
            self.drop_first(slab);
        }
        if needs_chunk {
            let c = slab.alloc().expect("checked above");
            match self.tail {
                Some(t) => slab.set_next(t, Some(c)),
                None => self.head = Some(c),
            }
            self.tail = Some(c);
        }
        let tail = self.tail.expect("non-empty ring has a tail");
        slab.get_mut(tail)[slot(entry.seq)] = Slot {
            record: entry.record,
            at_ms: entry.at_ms,
        };
        self.last = entry.seq;
        self.unsent_bytes += len;
        if self.send.is_none() {
            debug_assert_eq!(self.unsent, entry.seq);
            self.send = Some(tail);
        }
        Ok(())
    }

    /// The unsent entries in order; take a prefix for a send batch, then
    /// `mark_sent(n)` once it is written. Borrows only the slab.
    pub fn unsent<'a>(&self, slab: &'a RingSlab) -> Entries<'a> {
        Entries {
            slab,
            chunk: self.send,
            seq: self.unsent,
            end: self.last + 1,
        }
    }

    /// All held entries (sent history, then unsent) in order.
    pub fn held<'a>(&self, slab: &'a RingSlab) -> Entries<'a> {
        Entries {
            slab,
            chunk: self.head,
            seq: self.first,
            end: self.last + 1,
        }
    }

    /// One held entry by seq (walks the chain: for resume checks, not per event).
    pub fn get(&self, slab: &RingSlab, seq: u64) -> Option<Entry> {
        let chunk = self.locate(slab, seq)?;
        let s = slab.get(chunk)[slot(seq)];
        Some(Entry {
            record: s.record,
            seq,
            at_ms: s.at_ms,
        })
    }

    /// The first `n` unsent entries have been written to the socket.
    pub fn mark_sent(&mut self, slab: &RingSlab, n: u32) {
        assert!(n <= self.len_unsent(), "marking more than is unsent");
        if n == 0 {
            return;
        }
        let mut it = self.unsent(slab);
        let mut bytes = 0u64;
        for _ in 0..n {
            bytes += u64::from(it.next().expect("n <= len_unsent").record.len);
        }
        self.unsent_bytes -= bytes;
        self.unsent += u64::from(n);
        debug_assert_eq!(it.seq, self.unsent);
        self.send = if self.unsent <= self.last {
            it.chunk
        } else {
            None
        };
    }

    /// The client has everything up to `seq` (heartbeat `d`): drop sent
    /// entries `<= seq`. Never touches unsent ones, so a stale or bogus
    /// value is harmless.
    pub fn ack(&mut self, slab: &mut RingSlab, seq: u64) {
        let upto = seq.min(self.unsent - 1);
        while self.first <= upto {
            self.drop_first(slab);
        }
    }

    /// Whether a Resume with the client's `seq` can be served: everything
    /// after it is still held (`first - 1 <= seq <= last`).
    pub fn check_resume(&self, seq: u64) -> Result<(), ReplayError> {
        if seq >= self.first - 1 && seq <= self.last {
            Ok(())
        } else {
            Err(ReplayError::NotHeld {
                seq,
                oldest_resumable: self.first - 1,
                last: self.last,
            })
        }
    }

    /// Resume: drops everything `<= seq` (the client has it) and moves the
    /// unsent cursor to `seq + 1`, so the normal send path replays the rest
    /// in order. `seq` may be past the sent cursor (a partial write the
    /// client did receive). On error nothing changes.
    pub fn rewind_for_resume(&mut self, slab: &mut RingSlab, seq: u64) -> Result<(), ReplayError> {
        self.check_resume(seq)?;
        self.unsent = seq + 1;
        // Recomputed below; `seq` may be past the old cursor's chunk.
        self.send = None;
        while self.first <= seq {
            self.drop_first(slab);
        }
        debug_assert_eq!(self.first, self.unsent);
        self.send = self.head;
        self.unsent_bytes = self.unsent(slab).map(|e| u64::from(e.record.len)).sum();
        Ok(())
    }

    /// Drops the longest prefix of sent entries older than the window
    /// (`now_ms - at_ms > window_ms`), freeing chunks as they empty.
    pub fn expire(&mut self, slab: &mut RingSlab, now_ms: u64, window_ms: u64) {
        while self.first < self.unsent {
            let head = self.head.expect("non-empty ring has a head");
            let at_ms = slab.get(head)[slot(self.first)].at_ms;
            if now_ms.saturating_sub(at_ms) <= window_ms {
                break;
            }
            self.drop_first(slab);
        }
    }

    /// Frees every chunk; seq numbering continues after `last_seq()`.
    pub fn clear(&mut self, slab: &mut RingSlab) {
        let mut chunk = self.head;
        while let Some(c) = chunk {
            chunk = slab.next(c);
            slab.free(c);
        }
        self.head = None;
        self.tail = None;
        self.send = None;
        self.first = self.last + 1;
        self.unsent = self.last + 1;
        self.unsent_bytes = 0;
    }

    pub fn len_held(&self) -> u32 {
        (self.last + 1 - self.first) as u32
    }

    pub fn len_unsent(&self) -> u32 {
        (self.last + 1 - self.unsent) as u32
    }

    pub fn unsent_bytes(&self) -> u64 {
        self.unsent_bytes
    }

    /// Seq of the newest entry (or the starting seq if none was pushed).
    pub fn last_seq(&self) -> u64 {
        self.last
    }

    /// Seq the next push must carry.
    pub fn next_seq(&self) -> u64 {
        self.last + 1
    }

    /// Oldest held seq; `last_seq() + 1` when empty.
    pub fn first_held_seq(&self) -> u64 {
        self.first
    }

    /// `len_unsent / max_unsent`; a ring at 0.8 or more counts as degraded.
    pub fn fill_ratio(&self) -> f32 {
        self.len_unsent() as f32 / self.max_unsent as f32
    }

    pub fn chunks_held(&self) -> u32 {
        if self.first > self.last {
            0
        } else {
            (self.last / CHUNK_U64 - self.first / CHUNK_U64 + 1) as u32
        }
    }

    /// Drops `first` (which must be sent), freeing its chunk if it empties.
    fn drop_first(&mut self, slab: &mut RingSlab) {
        assert!(self.first < self.unsent, "only sent entries are dropped");
        let head = self.head.expect("non-empty ring has a head");
        self.first += 1;
        let empty = self.first > self.last;
        if empty || self.first.is_multiple_of(CHUNK_U64) {
            let next = slab.next(head);
            slab.free(head);
            self.head = next;
            if empty {
                assert!(next.is_none());
                self.tail = None;
                debug_assert!(self.send.is_none());
            }
        }
    }

    /// The chunk covering a held `seq`.
    fn locate(&self, slab: &RingSlab, seq: u64) -> Option<ChunkId> {
        if seq < self.first || seq > self.last {
            return None;
        }
        let mut chunk = self.head.expect("non-empty ring has a head");
        for _ in self.first / CHUNK_U64..seq / CHUNK_U64 {
            chunk = slab.next(chunk).expect("chain covers first..=last");
        }
        Some(chunk)
    }

    #[cfg(test)]
    fn check_invariants(&self, slab: &RingSlab) {
        assert!(self.first <= self.unsent && self.unsent <= self.last + 1);
        assert!(self.len_held() <= self.max_held);
        assert_eq!(self.head.is_none(), self.first > self.last);
        assert_eq!(self.tail.is_none(), self.first > self.last);
        assert_eq!(self.send, self.locate(slab, self.unsent));
        assert_eq!(self.tail, self.locate(slab, self.last));
        let mut n = 0;
        let mut c = self.head;
        while let Some(id) = c {
            n += 1;
            if Some(id) == self.tail {
                assert_eq!(slab.next(id), None);
            }
            c = slab.next(id);
        }
        assert_eq!(n, self.chunks_held());
        let bytes: u64 = self.unsent(slab).map(|e| u64::from(e.record.len)).sum();
        assert_eq!(bytes, self.unsent_bytes);
    }
}

fn slot(seq: u64) -> usize {
    (seq % CHUNK_U64) as usize
}

/// Iterator over a contiguous seq range of one ring. Copies entries out; no
/// allocation.
#[derive(Clone, Debug)]
pub struct Entries<'a> {
    slab: &'a RingSlab,
    /// Chunk covering `seq` while `seq < end`.
    chunk: Option<ChunkId>,
    seq: u64,
    end: u64,
}

impl Iterator for Entries<'_> {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        if self.seq >= self.end {
            return None;
        }
        let chunk = self.chunk.expect("chunk covers a held seq");
        let s = self.slab.get(chunk)[slot(self.seq)];
        let e = Entry {
            record: s.record,
            seq: self.seq,
            at_ms: s.at_ms,
        };
        self.seq += 1;
        if self.seq.is_multiple_of(CHUNK_U64) && self.seq < self.end {
            self.chunk = self.slab.next(chunk);
        }
        Some(e)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = (self.end - self.seq) as usize;
        (n, Some(n))
    }
}

impl ExactSizeIterator for Entries<'_> {}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod over_bound_tests {
    use super::*;

    #[test]
    fn push_over_bound_passes_the_unsent_bound_but_not_held() {
        let mut slab = RingSlab::new(4);
        let cfg = RingConfig {
            max_unsent: 2,
            max_held: 3,
            max_unsent_bytes: u64::MAX,
        };
        let mut ring = SessionRing::new(&cfg, 0);
        let e = |seq| Entry {
            record: RecordRef {
                pos: seq * 8,
                len: 8,
            },
            seq,
            at_ms: 0,
        };
        ring.push(&mut slab, e(1)).unwrap();
        ring.push(&mut slab, e(2)).unwrap();
        assert_eq!(ring.push(&mut slab, e(3)), Err(PushError::Full));
        ring.push_over_bound(&mut slab, e(3)).unwrap();
        assert_eq!(ring.len_unsent(), 3);
        // Held is at max and nothing is sent: nothing can be dropped.
        assert_eq!(ring.push_over_bound(&mut slab, e(4)), Err(PushError::Full));
        ring.mark_sent(&slab, 1);
        ring.push_over_bound(&mut slab, e(4)).unwrap();
        assert_eq!((ring.first_held_seq(), ring.last_seq()), (2, 4));
        ring.clear(&mut slab);
        assert_eq!(slab.free_count(), 4);
    }
}
