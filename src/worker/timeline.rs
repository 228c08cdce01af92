//! The last `LEN` lifecycle events of each application's sessions on this
//! node (identify, resume, a close with its code, a hand-off in or out, a
//! session recovered from a dead node), with their times and session ids:
//! the portal's timeline (issue 29, docs/portal.md "Sessions one by one").
//!
//! Bounded and allocated at start: one ring of `LEN` entries per slot of
//! the `AppTable` (the same slot index), 24 bytes an entry, 9.4 MiB for
//! `app_stats::SLOTS`. Writers are the workers, several at once: a writer
//! claims an entry with one `fetch_add` on the ring's head and writes its
//! three words, the first one (time, kind, code) zeroed first and stored
//! last. A reader takes an entry only if that first word is non-zero and
//! the same before and after it read the other two (a one-word seqlock);
//! an entry being written, or overwritten while read, is left out of that
//! read. Never a lock, never an allocation on the writing side.
//!
//! Word 0: `unix_ms << 20 | kind << 16 | close code`; words 1 and 2: the
//! session id's 128 bits (`session_bits`).

use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use shards::session_id::SessionId;

/// Events kept per application.
pub const LEN: usize = 100;

/// What happened to a session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Identify,
    Resume,
    /// A close sent to the bot, with its code.
    Close(u16),
    /// Arrived from another node (a Resume there asked for it).
    HandIn,
    /// Given to another node (a Resume arrived there).
    HandOut,
    /// Rebuilt here from a dead node's checkpoint.
    Recovered,
}

impl Kind {
    /// Its number on the wire (`portal::figures`) and in the ring.
    pub fn tag(self) -> u64 {
        match self {
            Kind::Identify => 1,
            Kind::Resume => 2,
            Kind::Close(_) => 3,
            Kind::HandIn => 4,
            Kind::HandOut => 5,
            Kind::Recovered => 6,
        }
    }

    pub fn code(self) -> u16 {
        match self {
            Kind::Close(c) => c,
            _ => 0,
        }
    }

    pub fn from_parts(tag: u64, code: u16) -> Option<Kind> {
        Some(match tag {
            1 => Kind::Identify,
            2 => Kind::Resume,
            3 => Kind::Close(code),
            4 => Kind::HandIn,
            5 => Kind::HandOut,
            6 => Kind::Recovered,
            _ => return None,
        })
    }

    /// The name in `/api/sessions` and the figures.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Identify => "identify",
            Kind::Resume => "resume",
            Kind::Close(_) => "close",
            Kind::HandIn => "hand_off_in",
            Kind::HandOut => "hand_off_out",
            Kind::Recovered => "recovered",
        }
    }

    pub fn parse(name: &str, code: u16) -> Option<Kind> {
        Some(match name {
            "identify" => Kind::Identify,
            "resume" => Kind::Resume,
            "close" => Kind::Close(code),
            "hand_off_in" => Kind::HandIn,
            "hand_off_out" => Kind::HandOut,
            "recovered" => Kind::Recovered,
            _ => return None,
        })
    }
}

/// One event as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    pub at_ms: u64,
    pub kind: Kind,
    /// `session_bits` of the session's id.
    pub session: u128,
}

/// A session id in 128 bits (worker, node, randomness), and back.
pub fn session_bits(id: &SessionId) -> u128 {
    u128::from(id.worker()) << 120 | u128::from(id.node()) << 104 | id.random_bits()
}

pub fn session_of(bits: u128) -> SessionId {
    SessionId::on_node((bits >> 104) as u16, (bits >> 120) as u8, bits)
}

struct Entry {
    head: AtomicU64,
    hi: AtomicU64,
    lo: AtomicU64,
}

struct Ring {
    next: AtomicU32,
    entries: [Entry; LEN],
}

pub struct Timelines {
    rings: Box<[Ring]>,
}

impl Timelines {
    /// Allocated zeroed in one piece: the pages of slots never used are
    /// never touched, so they cost address space, not memory (the table
    /// is 9.4 MiB; a node with a few applications holds a few KiB of it).
    pub fn new(slots: usize) -> Timelines {
        let rings = Box::<[Ring]>::new_zeroed_slice(slots);
        // SAFETY: a `Ring` is only atomic integers (`AtomicU32`,
        // `AtomicU64`), for which all-zero bytes are a valid value (0):
        // the zeroed slice is `slots` initialised, empty rings.
        let rings = unsafe { rings.assume_init() };
        Timelines { rings }
    }

    /// One event of the application that holds slot `slot`.
    pub fn push(&self, slot: usize, at_ms: u64, kind: Kind, session: u128) {
        let Some(r) = self.rings.get(slot) else {
            return;
        };
        let i = r.next.fetch_add(1, Ordering::Relaxed) as usize % LEN;
        let e = &r.entries[i];
        let head = (at_ms & ((1 << 44) - 1)) << 20 | kind.tag() << 16 | u64::from(kind.code());
        debug_assert!(head != 0, "a written entry is never zero");
        e.head.store(0, Ordering::Relaxed);
        fence(Ordering::Release);
        e.hi.store((session >> 64) as u64, Ordering::Relaxed);
        e.lo.store(session as u64, Ordering::Relaxed);
        e.head.store(head, Ordering::Release);
    }

    /// Slot `slot`'s events, newest first, into `out` (cleared first; at
    /// most `LEN`).
    pub fn read(&self, slot: usize, out: &mut Vec<Event>) {
        out.clear();
        let Some(r) = self.rings.get(slot) else {
            return;
        };
        let next = r.next.load(Ordering::Acquire) as usize;
        for back in 1..=LEN {
            let e = &r.entries[(next + LEN * 4 - back) % LEN];
            let a = e.head.load(Ordering::Acquire);
            if a == 0 {
                continue;
            }
            let (hi, lo) = (e.hi.load(Ordering::Relaxed), e.lo.load(Ordering::Relaxed));
            fence(Ordering::Acquire);
            if e.head.load(Ordering::Relaxed) != a {
                continue;
            }
            let Some(kind) = Kind::from_parts(a >> 16 & 0xf, a as u16) else {
                continue;
            };
            out.push(Event {
                at_ms: a >> 20,
                kind,
                session: u128::from(hi) << 64 | u128::from(lo),
            });
        }
        // Writers racing past the head may leave an entry out of order.
        out.sort_by_key(|e| std::cmp::Reverse(e.at_ms));
    }
}

#[cfg(test)]
mod tests {
    use crate::worker::timeline::*;

    #[test]
    fn keeps_the_last_hundred_newest_first() {
        let t = Timelines::new(2);
        let id = SessionId::on_node(7, 3, 0xabc_def);
        for i in 0..250u64 {
            let kind = if i % 2 == 0 {
                Kind::Identify
            } else {
                Kind::Close(4000 + i as u16 % 15)
            };
            t.push(1, 1_700_000_000_000 + i, kind, session_bits(&id));
        }
        let mut out = Vec::new();
        t.read(1, &mut out);
        assert_eq!(out.len(), LEN);
        assert_eq!(out[0].at_ms, 1_700_000_000_249);
        assert_eq!(out[0].kind, Kind::Close(4000 + 249 % 15));
        assert_eq!(out[LEN - 1].at_ms, 1_700_000_000_150);
        assert_eq!(session_of(out[0].session), id);
        t.read(0, &mut out);
        assert!(out.is_empty(), "another slot's events are its own");
        t.read(9, &mut out);
        assert!(out.is_empty(), "a slot past the table reads nothing");
    }

    #[test]
    fn every_kind_round_trips() {
        for k in [
            Kind::Identify,
            Kind::Resume,
            Kind::Close(4009),
            Kind::HandIn,
            Kind::HandOut,
            Kind::Recovered,
        ] {
            assert_eq!(Kind::from_parts(k.tag(), k.code()), Some(k));
            assert_eq!(Kind::parse(k.as_str(), k.code()), Some(k));
        }
    }
}
