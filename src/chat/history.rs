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

#[derive(Default)]
pub struct History {
    channels: HashMap<u64, Channel>,
    bytes: usize,
    clock: u64,
    pub evicted: u64,
}

impl History {
    pub fn new() -> History {
        History::default()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.channels.values().map(|c| c.messages.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keep a committed message (ids increase, so it is the newest).
    pub fn push(&mut self, channel: u64, m: Stored) {
        self.clock += 1;
        let clock = self.clock;
        self.bytes += m.bytes;
        let ch = self.channels.entry(channel).or_default();
        ch.last_write = clock;
        debug_assert!(
            ch.messages.back().is_none_or(|b| b.id < m.id),
            "ids increase"
        );
        ch.messages.push_back(m);
        if ch.messages.len() > PER_CHANNEL {
            let old = ch.messages.pop_front().expect("non-empty");
            self.bytes -= old.bytes;
            self.evicted += 1;
        }
        while self.bytes > MAX_BYTES {
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
            self.evicted += 1;
            if c.messages.is_empty() {
                self.channels.remove(&victim);
            }
        }
    }

    /// Would a message with this id be the channel's newest (ids increase)?
    pub fn is_newest(&self, channel: u64, id: u64) -> bool {
        self.channels
            .get(&channel)
            .and_then(|c| c.messages.back())
            .is_none_or(|m| m.id < id)
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
