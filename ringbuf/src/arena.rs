//! `Arena`: one per worker, a circular log of immutable records in a region
//! mapped once at start.
//!
//! Positions are logical and monotonic (`u64` bytes since start); the
//! physical offset is `pos % capacity` and `pos / capacity` is the
//! generation. Everything at or above `oldest() == head - capacity` is intact;
//! everything below is gone. Because a record never straddles the end and is
//! written at or above its predecessor, that single comparison decides
//! whether a `RecordRef` still points at its own bytes: a reader gets the
//! exact bytes or `None`, never another record's bytes.

use std::cell::Cell;

use memmap2::{MmapMut, MmapOptions};

/// Records start on 8-byte boundaries so callers can read aligned headers.
pub const RECORD_ALIGN: u64 = 8;

/// Smallest arena accepted; below this the bounds are meaningless.
pub const MIN_CAPACITY: u64 = 64;

/// A reference to one record: where it starts (logical) and how long it is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RecordRef {
    /// Logical byte position since the arena started; multiple of 8.
    pub pos: u64,
    /// Record length in bytes (without alignment padding).
    pub len: u32,
}

impl RecordRef {
    /// Logical end (exclusive).
    pub fn end(self) -> u64 {
        self.pos + u64::from(self.len)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArenaConfig {
    /// Bytes mapped at start; multiple of 8, at least `MIN_CAPACITY`.
    pub capacity: u64,
    /// Largest record accepted; at most `capacity / 2` so at least two
    /// maximal records are retained.
    pub max_record: u32,
    /// Try MAP_HUGETLB (needs reserved hugepages and a 2 MiB multiple);
    /// falls back silently to normal pages with MADV_HUGEPAGE.
    pub hugepages: bool,
    /// Fault every page in at start (MAP_POPULATE) so the hot path never
    /// page-faults and RSS is honest from the first second.
    pub populate: bool,
}

impl ArenaConfig {
    /// `capacity` bytes, records up to a quarter of it, normal pages.
    pub fn new(capacity: u64) -> ArenaConfig {
        ArenaConfig {
            capacity,
            max_record: (capacity / 4).min(u64::from(u32::MAX)) as u32,
            hugepages: false,
            populate: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ArenaError {
    #[error("record of {len} bytes exceeds the arena's max_record of {max}")]
    TooLarge { len: u64, max: u32 },
    #[error("invalid arena config: {0}")]
    Config(&'static str),
    #[error("mapping the arena failed: {0}")]
    Map(#[from] std::io::Error),
}

/// Counters since start. `lost_reads` counts `get()` calls that found their
/// record overwritten (how many records were overwritten is not knowable
/// without scanning, so the arena counts the losses that mattered).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArenaStats {
    pub records: u64,
    /// Payload bytes appended (without padding or skipped tails).
    pub bytes: u64,
    /// Times writing restarted at physical offset 0.
    pub wraps: u64,
    /// Tail bytes skipped because a record did not fit before the end.
    pub skipped_bytes: u64,
    pub too_large: u64,
    pub lost_reads: u64,
}

pub struct Arena {
    map: MmapMut,
    capacity: u64,
    max_record: u32,
    /// Next logical write position; multiple of 8.
    head: u64,
    /// Loss boundary: records starting below this may be overwritten.
    /// Always `max(0, head - capacity)`.
    oldest: u64,
    hugetlb: bool,
    stats: ArenaStats,
    /// `get()` takes `&self` so readers can hold many slices at once.
    lost_reads: Cell<u64>,
}

const HUGE_PAGE: u64 = 2 << 20;

impl Arena {
    pub fn new(config: ArenaConfig) -> Result<Arena, ArenaError> {
        let capacity = config.capacity;
        if capacity < MIN_CAPACITY {
            return Err(ArenaError::Config("capacity below MIN_CAPACITY"));
        }
        if !capacity.is_multiple_of(RECORD_ALIGN) {
            return Err(ArenaError::Config("capacity not a multiple of 8"));
        }
        if capacity > isize::MAX as u64 {
            return Err(ArenaError::Config("capacity exceeds the address space"));
        }
        if config.max_record == 0 || u64::from(config.max_record) > capacity / 2 {
            return Err(ArenaError::Config("max_record must be in 1..=capacity/2"));
        }
        let len = capacity as usize;
        let mut hugetlb = false;
        let mut map = None;
        if config.hugepages && capacity.is_multiple_of(HUGE_PAGE) {
            let mut opts = MmapOptions::new();
            opts.len(len).huge(None);
            if config.populate {
                opts.populate();
            }
            // Fails without reserved hugepages; that is the silent fallback.
            if let Ok(m) = opts.map_anon() {
                hugetlb = true;
                map = Some(m);
            }
        }
        let map = match map {
            Some(m) => m,
            None => {
                let mut opts = MmapOptions::new();
                opts.len(len);
                if config.populate {
                    opts.populate();
                }
                let m = opts.map_anon()?;
                #[cfg(target_os = "linux")]
                if config.hugepages {
                    // Transparent hugepages are best effort too.
                    let _ = m.advise(memmap2::Advice::HugePage);
                }
                m
            }
        };
        assert_eq!(map.len(), len);
        assert_eq!(map.as_ptr() as usize % RECORD_ALIGN as usize, 0);
        Ok(Arena {
            map,
            capacity,
            max_record: config.max_record,
            head: 0,
            oldest: 0,
            hugetlb,
            stats: ArenaStats::default(),
            lost_reads: Cell::new(0),
        })
    }

    /// Copies the concatenation of `parts` in as one record. Never allocates.
    pub fn append(&mut self, parts: &[&[u8]]) -> Result<RecordRef, ArenaError> {
        let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
        if len > u64::from(self.max_record) {
            self.stats.too_large += 1;
            return Err(ArenaError::TooLarge {
                len,
                max: self.max_record,
            });
        }
        let padded = len.next_multiple_of(RECORD_ALIGN);
        let mut pos = self.head;
        let phys = pos % self.capacity;
        if phys + padded > self.capacity {
            // Never straddle the end: skip the tail, start the next generation.
            let skip = self.capacity - phys;
            pos = pos.checked_add(skip).expect("logical position overflow");
            self.stats.skipped_bytes += skip;
        }
        let phys = (pos % self.capacity) as usize;
        // Records are at most capacity/2, so no generation is ever skipped:
        // the generation of the latest record is the number of wraps.
        self.stats.wraps = pos / self.capacity;
        let mut at = phys;
        for part in parts {
            self.map[at..at + part.len()].copy_from_slice(part);
            at += part.len();
        }
        assert_eq!(at - phys, len as usize);

        self.head = pos.checked_add(padded).expect("logical position overflow");
        self.oldest = self.oldest.max(self.head.saturating_sub(self.capacity));
        assert!(pos >= self.oldest, "a fresh record is always retained");
        self.stats.records += 1;
        self.stats.bytes += len;
        Ok(RecordRef {
            pos,
            len: len as u32,
        })
    }

    /// The record's bytes, or `None` if it has been (or may have been)
    /// overwritten. A ref this arena never issued (from the future, or
    /// straddling the end) is a caller bug and panics.
    pub fn get(&self, r: RecordRef) -> Option<&[u8]> {
        let end = r.pos.checked_add(u64::from(r.len));
        assert!(
            end.is_some_and(|end| end <= self.head),
            "RecordRef beyond the arena head"
        );
        if r.pos < self.oldest {
            self.lost_reads.set(self.lost_reads.get() + 1);
            return None;
        }
        let phys = (r.pos % self.capacity) as usize;
        let len = r.len as usize;
        assert!(
            r.pos.is_multiple_of(RECORD_ALIGN) && phys + len <= self.capacity as usize,
            "RecordRef not issued by this arena"
        );
        Some(&self.map[phys..phys + len])
    }

    /// Whether `get(r)` would return the bytes, without counting a loss.
    /// Also the check for an in-flight send that references arena bytes.
    pub fn contains(&self, r: RecordRef) -> bool {
        r.pos >= self.oldest && r.end() <= self.head
    }

    /// The loss boundary: records with `pos` below this are gone.
    pub fn oldest(&self) -> u64 {
        self.oldest
    }

    /// Next logical write position.
    pub fn head(&self) -> u64 {
        self.head
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    pub fn max_record(&self) -> u32 {
        self.max_record
    }

    /// Whether MAP_HUGETLB was obtained.
    pub fn hugepages(&self) -> bool {
        self.hugetlb
    }

    pub fn stats(&self) -> ArenaStats {
        ArenaStats {
            lost_reads: self.lost_reads.get(),
            ..self.stats
        }
    }
}

impl std::fmt::Debug for Arena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Arena")
            .field("capacity", &self.capacity)
            .field("max_record", &self.max_record)
            .field("head", &self.head)
            .field("oldest", &self.oldest)
            .field("hugetlb", &self.hugetlb)
            .field("stats", &self.stats())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;

    fn arena(capacity: u64, max_record: u32) -> Arena {
        Arena::new(ArenaConfig {
            max_record,
            ..ArenaConfig::new(capacity)
        })
        .unwrap()
    }

    #[test]
    fn sizes() {
        assert!(std::mem::size_of::<RecordRef>() <= 16);
    }

    #[test]
    fn config_is_validated() {
        assert!(Arena::new(ArenaConfig::new(32)).is_err());
        assert!(Arena::new(ArenaConfig::new(1001)).is_err());
        let mut c = ArenaConfig::new(1024);
        c.max_record = 513;
        assert!(Arena::new(c).is_err());
        c.max_record = 0;
        assert!(Arena::new(c).is_err());
    }

    #[test]
    fn hugepage_flag_falls_back() {
        let a = Arena::new(ArenaConfig {
            hugepages: true,
            populate: true,
            ..ArenaConfig::new(4 << 20)
        })
        .unwrap();
        assert_eq!(a.capacity(), 4 << 20);
    }

    #[test]
    fn parts_are_concatenated_and_aligned() {
        let mut a = arena(256, 64);
        let r1 = a.append(&[b"abc", b"", b"de"]).unwrap();
        let r2 = a.append(&[b"xyz"]).unwrap();
        assert_eq!(r1, RecordRef { pos: 0, len: 5 });
        assert_eq!(r2.pos, 8);
        assert_eq!(a.get(r1), Some(&b"abcde"[..]));
        assert_eq!(a.get(r2), Some(&b"xyz"[..]));
        assert!(matches!(
            a.append(&[&[0u8; 65]]),
            Err(ArenaError::TooLarge { len: 65, max: 64 })
        ));
        assert_eq!(a.stats().too_large, 1);
    }

    #[test]
    fn wrap_skips_tail_and_loses_oldest() {
        let mut a = arena(128, 64);
        let r0 = a.append(&[&[1u8; 60]]).unwrap(); // 0..64
        let r1 = a.append(&[&[2u8; 40]]).unwrap(); // 64..104
        let r2 = a.append(&[&[3u8; 40]]).unwrap(); // skip 24 bytes, 128..168
        assert_eq!(r2.pos, 128);
        assert_eq!(a.stats().skipped_bytes, 24);
        assert_eq!(a.stats().wraps, 1);
        assert_eq!(a.oldest(), 40);
        assert_eq!(a.get(r0), None);
        assert_eq!(a.get(r1), Some(&[2u8; 40][..]));
        assert_eq!(a.get(r2), Some(&[3u8; 40][..]));
        assert_eq!(a.stats().lost_reads, 1);
        assert!(!a.contains(r0));
        assert!(a.contains(r1));
    }

    #[test]
    #[should_panic(expected = "beyond the arena head")]
    fn future_ref_panics() {
        let a = arena(128, 64);
        a.get(RecordRef { pos: 0, len: 1 });
    }

    /// The specification: records in a deque, placed by the same rule
    /// (8-aligned, never straddling the end), retained while `pos` is at
    /// least `head - capacity`.
    struct Model {
        cap: u64,
        head: u64,
        records: VecDeque<(u64, Vec<u8>)>,
    }

    impl Model {
        fn append(&mut self, bytes: Vec<u8>) -> u64 {
            let padded = (bytes.len() as u64).div_ceil(8) * 8;
            let mut pos = self.head;
            if pos % self.cap + padded > self.cap {
                pos = (pos / self.cap + 1) * self.cap;
            }
            self.head = pos + padded;
            let oldest = self.head.saturating_sub(self.cap);
            self.records.push_back((pos, bytes));
            while self.records.front().is_some_and(|(p, _)| *p < oldest) {
                self.records.pop_front();
            }
            pos
        }

        /// Zero-length records share a position with their successor, so
        /// match the length too.
        fn get(&self, r: RecordRef) -> Option<&[u8]> {
            self.records
                .iter()
                .find(|(p, b)| *p == r.pos && b.len() == r.len as usize)
                .map(|(_, b)| &b[..])
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn arena_matches_model(
            cap_words in 8..64u64,
            record_lens in prop::collection::vec((0..200usize, any::<u8>(), 0..4usize), 1..600),
            reads in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        ) {
            let cap = cap_words * 8;
            let max = (cap / 2) as u32;
            let mut a = arena(cap, max);
            let mut m = Model { cap, head: 0, records: VecDeque::new() };
            let mut issued: Vec<RecordRef> = Vec::new();
            let mut lost = 0u64;
            for (i, (len, fill, split)) in record_lens.into_iter().enumerate() {
                let bytes: Vec<u8> = (0..len).map(|k| fill.wrapping_add(k as u8)).collect();
                let cut = len.min(split * 7);
                let got = a.append(&[&bytes[..cut], &bytes[cut..]]);
                if len as u64 > u64::from(max) {
                    prop_assert!(matches!(got, Err(ArenaError::TooLarge { .. })), "expected TooLarge");
                    continue;
                }
                let r = got.unwrap();
                let pos = m.append(bytes.clone());
                prop_assert_eq!(r, RecordRef { pos, len: len as u32 });
                prop_assert_eq!(r.pos % 8, 0);
                prop_assert!(r.pos % cap + u64::from(r.len) <= cap);
                prop_assert_eq!(a.head(), m.head);
                prop_assert_eq!(a.oldest(), m.head.saturating_sub(cap));
                prop_assert_eq!(a.stats().wraps, r.pos / cap);
                issued.push(r);
                // Read back the newest, some random older ones, and all
                // every so often.
                prop_assert_eq!(a.get(r), Some(&bytes[..]));
                let picks: Vec<RecordRef> = if i % 50 == 0 {
                    issued.clone()
                } else {
                    reads.iter().map(|ix| *ix.get(&issued)).collect()
                };
                for old in picks {
                    let want = m.get(old);
                    if want.is_none() {
                        lost += 1;
                    }
                    prop_assert_eq!(a.get(old), want);
                    prop_assert_eq!(a.contains(old), want.is_some());
                }
            }
            prop_assert_eq!(a.stats().lost_reads, lost);
            prop_assert_eq!(a.stats().records, issued.len() as u64);
        }
    }
}
