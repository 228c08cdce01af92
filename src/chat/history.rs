//! The embedded chat service's recent history: the messages it committed,
//! per channel, newest last, so bots can read, edit, delete and react to
//! them. This is a window, not an archive.
//!
//! Bounds (docs/rest.md): at most `PER_CHANNEL` messages per channel and
//! `MAX_BYTES` of message JSON in all; past either, the oldest message of
//! the channel written to least recently goes first. At most
//! `MAX_REACTIONS` distinct emoji per message and `MAX_REACTORS` users per
//! emoji (the platform's 20 and a bound of ours).

use std::collections::{HashMap, VecDeque};

use serde_json::Value;

pub const PER_CHANNEL: usize = 100;
pub const MAX_BYTES: usize = 64 << 20;
pub const MAX_REACTIONS: usize = 20;
pub const MAX_REACTORS: usize = 1000;

#[derive(Debug, Clone)]
pub struct Reaction {
    pub emoji: String,
    pub users: Vec<u64>,
}

#[derive(Debug, Clone)]
pub struct Stored {
    pub id: u64,
    pub author_id: u64,
    /// The message object as the REST edge answers it (no `reactions`);
    /// `Null` while only `raw` holds it.
    pub message: Value,
    /// A message learnt from another source, as its event carried it,
    /// parsed when a request reads it.
    pub raw: Option<Box<[u8]>>,
    pub reactions: Vec<Reaction>,
    /// What this message counts against `MAX_BYTES`.
    pub bytes: usize,
}

impl Stored {
    /// The message object as JSON (written again only if held as a value).
    pub fn json(&self) -> std::borrow::Cow<'_, [u8]> {
        match &self.raw {
            Some(r) => std::borrow::Cow::Borrowed(r),
            None => std::borrow::Cow::Owned(serde_json::to_vec(&self.message).expect("json")),
        }
    }

    /// The message object (parsing it if it was learnt from the stream).
    pub fn value(&self) -> Value {
        match &self.raw {
            Some(r) => serde_json::from_slice(r).unwrap_or(Value::Null),
            None => self.message.clone(),
        }
    }
}

#[derive(Default)]
struct Channel {
    messages: VecDeque<Stored>,
    last_write: u64,
}

pub struct History {
    channels: HashMap<u64, Channel>,
    bytes: usize,
    /// Messages held (kept, not counted per call: read every turn).
    count: usize,
    /// This window's byte bound (`MAX_BYTES`, or a worker's share of it).
    max_bytes: usize,
    clock: u64,
    pub evicted: u64,
}

impl Default for History {
    fn default() -> History {
        History::with_max_bytes(MAX_BYTES)
    }
}

impl History {
    pub fn new() -> History {
        History::default()
    }

    /// A window bounded at `max_bytes` of message JSON (a worker's chat
    /// service holds its servers' share of `MAX_BYTES`).
    pub fn with_max_bytes(max_bytes: usize) -> History {
        History {
            channels: HashMap::new(),
            bytes: 0,
            count: 0,
            max_bytes,
            clock: 0,
            evicted: 0,
        }
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keep a committed message, in id order (almost always the newest:
    /// a message learnt from another source may be a little older than
    /// ours, ids of two generators in one millisecond interleave).
    pub fn push(&mut self, channel: u64, m: Stored) {
        self.clock += 1;
        let clock = self.clock;
        let ch = self.channels.entry(channel).or_default();
        ch.last_write = clock;
        let at = ch.messages.partition_point(|x| x.id < m.id);
        if ch.messages.get(at).is_some_and(|x| x.id == m.id) {
            return; // already kept
        }
        self.bytes += m.bytes;
        self.count += 1;
        ch.messages.insert(at, m);
        if ch.messages.len() > PER_CHANNEL {
            let old = ch.messages.pop_front().expect("non-empty");
            self.bytes -= old.bytes;
            self.count -= 1;
            self.evicted += 1;
        }
        while self.bytes > self.max_bytes {
            let Some((&victim, _)) = self
                .channels
                .iter()
                .filter(|(_, c)| !c.messages.is_empty())
                .min_by_key(|(_, c)| c.last_write)
            else {
                break;
            };
            let c = self.channels.get_mut(&victim).expect("present");
            let old = c.messages.pop_front().expect("non-empty");
            self.bytes -= old.bytes;
            self.count -= 1;
            self.evicted += 1;
            if c.messages.is_empty() {
                self.channels.remove(&victim);
            }
        }
    }

    pub fn get(&self, channel: u64, id: u64) -> Option<&Stored> {
        let c = self.channels.get(&channel)?;
        let i = c.messages.binary_search_by_key(&id, |m| m.id).ok()?;
        c.messages.get(i)
    }

    pub fn get_mut(&mut self, channel: u64, id: u64) -> Option<&mut Stored> {
        let c = self.channels.get_mut(&channel)?;
        let i = c.messages.binary_search_by_key(&id, |m| m.id).ok()?;
        c.messages.get_mut(i)
    }

    /// Replace a message's JSON after an edit, keeping the byte count true.
    pub fn resize(&mut self, old: usize, new: usize) {
        self.bytes = self.bytes - old + new;
    }

    pub fn remove(&mut self, channel: u64, id: u64) -> Option<Stored> {
        let c = self.channels.get_mut(&channel)?;
        let i = c.messages.binary_search_by_key(&id, |m| m.id).ok()?;
        let m = c.messages.remove(i).expect("found");
        self.bytes -= m.bytes;
        self.count -= 1;
        Some(m)
    }

    /// Up to `limit` messages, newest first, `before`/`after` an id
    /// (exclusive), or `around` one (half on each side).
    pub fn list(
        &self,
        channel: u64,
        limit: usize,
        before: Option<u64>,
        after: Option<u64>,
        around: Option<u64>,
    ) -> Vec<&Stored> {
        let Some(c) = self.channels.get(&channel) else {
            return Vec::new();
        };
        let m = &c.messages;
        if let Some(a) = around {
            let at = m.partition_point(|x| x.id < a);
            let lo = at.saturating_sub(limit / 2);
            let hi = (lo + limit).min(m.len());
            return m.range(lo..hi).rev().collect();
        }
        if let Some(a) = after {
            // The `limit` oldest after `a`, answered newest first.
            let from = m.partition_point(|x| x.id <= a);
            let to = (from + limit).min(m.len());
            return m.range(from..to).rev().collect();
        }
        let to = before.map_or(m.len(), |b| m.partition_point(|x| x.id < b));
        m.range(..to).rev().take(limit).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(id: u64, bytes: usize) -> Stored {
        Stored {
            id,
            author_id: 1,
            message: Value::Null,
            raw: None,
            reactions: Vec::new(),
            bytes,
        }
    }

    #[test]
    fn per_channel_bound_and_listing() {
        let mut h = History::new();
        for id in 1..=(PER_CHANNEL as u64 + 5) {
            h.push(7, msg(id, 10));
        }
        assert_eq!(h.len(), PER_CHANNEL);
        assert!(h.get(7, 5).is_none(), "the oldest went first");
        assert_eq!(h.bytes(), PER_CHANNEL * 10);
        let ids = |v: Vec<&Stored>| v.iter().map(|m| m.id).collect::<Vec<_>>();
        assert_eq!(ids(h.list(7, 3, None, None, None)), vec![105, 104, 103]);
        assert_eq!(ids(h.list(7, 2, Some(50), None, None)), vec![49, 48]);
        assert_eq!(ids(h.list(7, 2, None, Some(50), None)), vec![52, 51]);
        assert_eq!(
            ids(h.list(7, 4, None, None, Some(50))),
            vec![51, 50, 49, 48]
        );
        assert!(h.list(8, 10, None, None, None).is_empty());
        let m = h.remove(7, 50).unwrap();
        assert_eq!(m.id, 50);
        assert_eq!(h.bytes(), (PER_CHANNEL - 1) * 10);
        assert_eq!(h.len(), PER_CHANNEL - 1);
    }

    #[test]
    fn ids_of_two_generators_are_kept_in_order_and_once() {
        let mut h = History::new();
        h.push(7, msg(10, 1));
        h.push(7, msg(30, 1));
        // Another worker's id of the same millisecond, committed later.
        h.push(7, msg(20, 1));
        h.push(7, msg(20, 1));
        let ids: Vec<u64> = h
            .list(7, 10, None, None, None)
            .iter()
            .map(|m| m.id)
            .collect();
        assert_eq!(ids, vec![30, 20, 10]);
        assert_eq!((h.len(), h.bytes()), (3, 3));
        assert!(h.get(7, 20).is_some(), "found by binary search");
    }

    #[test]
    fn the_byte_bound_evicts_the_least_recently_written_channel() {
        let mut h = History::new();
        let big = MAX_BYTES / 4;
        h.push(1, msg(1, big));
        h.push(2, msg(2, big));
        h.push(3, msg(3, big));
        h.push(1, msg(4, big));
        h.push(2, msg(5, big));
        assert!(h.bytes() <= MAX_BYTES);
        assert!(
            h.get(3, 3).is_none(),
            "channel 3 was written to least recently"
        );
        assert!(h.get(1, 1).is_some() && h.get(2, 5).is_some());
        assert_eq!(h.evicted, 1);
    }
}
