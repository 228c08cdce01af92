//! The recent stream of one clustered worker and the cut that lines an
//! arriving session up with it (docs/cluster.md, "the stream cut").
//!
//! Two rules, by what the records carry:
//! - **Positions** (Kafka: partition, offset, frame): the holder sends the
//!   last position it took in every partition. We are ready once we have
//!   taken at least that far in each; the session then gets exactly our
//!   records past the holder's position in their partition, whatever the
//!   interleaving of partitions on either node.
//! - **No positions** (the listener): the holder sends the digests of its
//!   last `TAIL` records; we find the last among ours and check that the
//!   ones before it match, in order; the session gets our records after it.
//!   Exact when both nodes take the records in the same order.

use std::collections::{HashMap, VecDeque};

use ringbuf::{Arena, ArenaConfig, RecordRef};

use crate::delivery::batch::StreamPos;
use crate::delivery::moved::{self, Moved, MAX_PARTITIONS, TAIL};
use crate::worker::mail::ConnKey;

/// Bytes of recent stream records a clustered worker keeps (a copy of
/// each record body, in a log of its own: the ingest batches are never
/// held, so the pipeline's recycling and Kafka's commits are unchanged).
const RECENT_BYTES: u64 = 8 << 20;
/// ... at most this many records ...
const RECENT_RECORDS: usize = 8_192;
/// ... and for this long (the last `TAIL` are kept regardless).
const RECENT_MS: u64 = 2_000;
/// Arrived sessions waiting for our stream to reach their cut.
pub(super) const MAX_PENDING: usize = 1_024;

pub(in crate::worker) struct ClusterState {
    /// The recent records (None: not clustered, nothing kept).
    log: Option<Arena>,
    /// (where in `log`, when taken, its place in the stream), oldest first.
    recent: VecDeque<(RecordRef, u64, StreamPos)>,
    /// Records taken from the stream since start.
    records_seen: u64,
    /// Records kept in `recent` since start (equal to `records_seen` as
    /// long as none was too large to keep).
    records_kept: u64,
    /// Per partition: 1 + the first and the last position taken (0: none).
    first: Box<[u64]>,
    last: Box<[u64]>,
    /// A partition id at or above `MAX_PARTITIONS` was seen: no cut by
    /// positions can be trusted.
    positions_broken: bool,
    pub(super) pending: Vec<Pending>,
}

pub(super) struct Pending {
    pub(super) conn: ConnKey,
    pub(super) moved: Box<Moved>,
    pub(super) until_ms: u64,
}

/// Where a holder's cut is in our retained stream.
pub(super) enum Cut {
    /// Our records from this index of the log on came after the cut.
    After(usize),
    /// Our records past the holder's position in their partition.
    Past(HashMap<i32, u64>),
    NotYet,
    Mismatch(&'static str),
}

impl Cut {
    /// Whether a retained record (`pos`) goes to the session.
    pub(super) fn takes(&self, index: usize, pos: StreamPos, done: &mut HashMap<i32, u64>) -> bool {
        match self {
            Cut::After(from) => index >= *from,
            Cut::Past(holder) => {
                if !pos.is_some() {
                    return false; // a record only this node has
                }
                let floor = holder.get(&pos.partition).map_or(0, |at| at + 1);
                // A record consumed twice (a rebalance) is offered once.
                let next = done
                    .get(&pos.partition)
                    .map_or(floor, |at| (at + 1).max(floor));
                if pos.at < next {
                    return false;
                }
                done.insert(pos.partition, pos.at);
                true
            }
            Cut::NotYet | Cut::Mismatch(_) => false,
        }
    }
}

impl ClusterState {
    pub(in crate::worker) fn new(clustered: bool) -> ClusterState {
        let log = clustered
            .then(|| Arena::new(ArenaConfig::new(RECENT_BYTES)))
            .and_then(|a| match a {
                Ok(a) => Some(a),
                Err(e) => {
                    tracing::error!(error = %e, "cluster: no recent-stream log; hand-offs to this node will get op 9");
                    None
                }
            });
        let table = if log.is_some() { MAX_PARTITIONS } else { 0 };
        ClusterState {
            recent: VecDeque::with_capacity(if log.is_some() { RECENT_RECORDS + 1 } else { 0 }),
            log,
            records_seen: 0,
            records_kept: 0,
            first: vec![0; table].into_boxed_slice(),
            last: vec![0; table].into_boxed_slice(),
            positions_broken: false,
            pending: Vec::new(),
        }
    }

    pub(super) fn enabled(&self) -> bool {
        self.log.is_some()
    }

    /// Keep a copy of one record taken from the stream (no allocation).
    pub(super) fn keep(&mut self, body: &[u8], pos: StreamPos, now_ms: u64) {
        let Some(log) = self.log.as_mut() else { return };
        self.records_seen += 1;
        if pos.is_some() {
            match usize::try_from(pos.partition)
                .ok()
                .filter(|p| *p < MAX_PARTITIONS)
            {
                Some(p) => {
                    if self.first[p] == 0 {
                        self.first[p] = pos.at + 1;
                    }
                    self.last[p] = self.last[p].max(pos.at + 1);
                }
                None => self.positions_broken = true,
            }
        }
        match log.append(&[body]) {
            Ok(r) => {
                if self.recent.len() == RECENT_RECORDS {
                    self.recent.pop_front();
                }
                self.recent.push_back((r, now_ms, pos));
                self.records_kept += 1;
            }
            // Too large to keep: no cut can be placed across it.
            Err(_) => self.recent.clear(),
        }
        while let Some(&(r, at, _)) = self.recent.front() {
            let stale = self.recent.len() > TAIL && at + RECENT_MS < now_ms;
            if stale || !log.contains(r) {
                self.recent.pop_front();
            } else {
                break;
            }
        }
    }

    /// The retained records, oldest first, with their places.
    pub(super) fn records(&self) -> impl Iterator<Item = (&[u8], StreamPos)> {
        let log = self.log.as_ref();
        self.recent
            .iter()
            .filter_map(move |(r, _, pos)| Some((log?.get(*r)?, *pos)))
    }

    /// Digests of the last `TAIL` records taken, oldest first.
    pub(super) fn tail(&self) -> Vec<u64> {
        let skip = self.recent.len().saturating_sub(TAIL);
        self.records()
            .skip(skip)
            .map(|(b, _)| moved::digest(b))
            .collect()
    }

    /// The last position taken in every partition seen, by partition.
    pub(super) fn cut(&self) -> Vec<(i32, u64)> {
        self.last
            .iter()
            .enumerate()
            .filter(|(_, at)| **at != 0)
            .map(|(p, at)| (p as i32, at - 1))
            .collect()
    }

    fn has_positions(&self) -> bool {
        self.positions_broken || self.last.iter().any(|at| *at != 0)
    }

    pub(super) fn locate(&self, m: &Moved) -> Cut {
        if self.log.is_none() {
            return Cut::Mismatch("this worker keeps no stream log");
        }
        if !m.cut.is_empty() || self.has_positions() {
            self.locate_by_position(&m.cut)
        } else {
            self.locate_by_digest(&m.tail)
        }
    }

    fn locate_by_position(&self, holder: &[(i32, u64)]) -> Cut {
        if self.positions_broken {
            return Cut::Mismatch("a partition id beyond the cut's table");
        }
        let mut past = HashMap::with_capacity(holder.len());
        for &(p, at) in holder {
            let ours = usize::try_from(p)
                .ok()
                .and_then(|p| self.last.get(p))
                .copied();
            match ours {
                Some(last) if last > at => {}
                Some(_) => return Cut::NotYet, // we have not taken that far yet
                None => return Cut::Mismatch("a partition beyond the cut's table"),
            }
            past.insert(p, at);
        }
        // Where our log begins, per partition: it must reach back to the
        // holder's position (or to the first record we ever took of a
        // partition the holder never saw) wherever we took more.
        let mut oldest: HashMap<i32, u64> = HashMap::new();
        for (_, pos) in self.records() {
            if pos.is_some() {
                oldest.entry(pos.partition).or_insert(pos.at);
            }
        }
        for (p, &last) in self.last.iter().enumerate() {
            if last == 0 {
                continue;
            }
            let p32 = p as i32;
            let reach = oldest.get(&p32).copied();
            let whole = match past.get(&p32) {
                // Offsets may skip (markers, compaction): only a log that
                // still holds the holder's last record proves nothing after
                // it was dropped.
                Some(&at) => last - 1 == at || reach.is_some_and(|o| o <= at),
                None => reach == Some(self.first[p] - 1),
            };
            if !whole {
                return Cut::Mismatch("our stream is too far ahead of the holder's");
            }
        }
        Cut::Past(past)
    }

    fn locate_by_digest(&self, tail: &[u64]) -> Cut {
        let ours: Vec<u64> = self.records().map(|(b, _)| moved::digest(b)).collect();
        let Some((&last, before)) = tail.split_last() else {
            // The holder had taken nothing: all we took is after its cut,
            // if we still have all of it.
            return if self.records_seen == ours.len() as u64
                && self.records_kept == self.records_seen
            {
                Cut::After(0)
            } else {
                Cut::Mismatch("the holder took nothing and we no longer have all we took")
            };
        };
        let Some(p) = ours.iter().rposition(|&d| d == last) else {
            return Cut::NotYet;
        };
        // The records before the cut must be the holder's, in its order, as
        // far as both still have them.
        let k = before.len().min(p);
        if ours[p - k..p] != before[before.len() - k..] {
            return Cut::Mismatch("the records before the cut differ");
        }
        Cut::After(p + 1)
    }
}
