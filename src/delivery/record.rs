//! The arena record of one event, as fan-out stores it and the send path
//! and replay read it:
//!
//! ```text
//!  +-------------+-----------+-----------------+---------------------------+
//!  | stamp: 16 B | t_len: u8 | t (t_len bytes) | d (the rest of the record)|
//!  +-------------+-----------+-----------------+---------------------------+
//! ```
//!
//! `stamp` is the event's commit time and the time its worker took it
//! (`latency::Stamp`, little-endian Unix ns; zero for records the node
//! makes itself): what the send path times a delivery by.
//!
//! `t` is the dispatch's event name, at most `MAX_T` bytes: the ingest
//! format's own limit (`ingest::MAX_EVENT_TYPE_LEN`), so a record from the
//! stream is never cut; names the node makes itself (READY, GUILD_CREATE,
//! RESUMED) are far below it. `d` is the JSON written after `"d":`.

use ringbuf::{Arena, ArenaError, RecordRef};

use crate::delivery::latency::Stamp;

/// The longest `t` a record keeps (longer names are cut to it).
pub const MAX_T: usize = ingest::MAX_EVENT_TYPE_LEN;
const _: () = assert!(MAX_T <= u8::MAX as usize, "t_len is one byte");

/// `t` as a record keeps it.
pub fn clip_t(t: &str) -> &[u8] {
    &t.as_bytes()[..t.len().min(MAX_T)]
}

/// Copy one record into the arena.
pub fn append(arena: &mut Arena, stamp: Stamp, t: &str, d: &[u8]) -> Result<RecordRef, ArenaError> {
    let t = clip_t(t);
    arena.append(&[&stamp.to_bytes(), &[t.len() as u8], t, d])
}

/// The stamp of a record (NONE if it is short).
pub fn stamp(record: &[u8]) -> Stamp {
    Stamp::from_bytes(record)
}

/// `(t, d)` of a record (an empty `t` if it is not UTF-8; never panics on
/// a short record).
pub fn parts(record: &[u8]) -> (&str, &[u8]) {
    let record = record.get(Stamp::LEN..).unwrap_or(&[]);
    let n = record.first().copied().unwrap_or(0) as usize;
    let t = record
        .get(1..1 + n)
        .and_then(|t| std::str::from_utf8(t).ok())
        .unwrap_or("");
    (t, record.get(1 + n..).unwrap_or(&[]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringbuf::ArenaConfig;

    #[test]
    fn a_record_round_trips_and_t_is_cut_at_the_ingest_limit() {
        let mut arena = Arena::new(ArenaConfig::new(1 << 16)).unwrap();
        let at = Stamp {
            commit_ns: 7,
            take_ns: 9,
        };
        let r = append(&mut arena, at, "MESSAGE_CREATE", br#"{"x":1}"#).unwrap();
        assert_eq!(
            parts(arena.get(r).unwrap()),
            ("MESSAGE_CREATE", &br#"{"x":1}"#[..])
        );
        assert_eq!(stamp(arena.get(r).unwrap()), at);
        let long = "T".repeat(MAX_T + 10);
        let r = append(&mut arena, Stamp::NONE, &long, b"{}").unwrap();
        let (t, d) = parts(arena.get(r).unwrap());
        assert_eq!((t.len(), d), (MAX_T, &b"{}"[..]));
        assert_eq!(stamp(arena.get(r).unwrap()), Stamp::NONE);
        assert_eq!(parts(&[]), ("", &[][..]));
        let mut short = [0u8; Stamp::LEN + 2];
        short[Stamp::LEN] = 200;
        assert_eq!(parts(&short), ("", &[][..]));
    }
}
