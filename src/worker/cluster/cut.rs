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

use std::cell::Cell;
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
/// Permission changes kept for sessions arriving after them: this many ...
const RECENT_CHANGES: usize = 1_024;
/// ... for this long (beyond it the holder has had them too, or the cut
/// fails: its stream is further behind than the log reaches). Crash
/// recovery needs the log to reach back to 2 s before the dead worker's
/// checkpoint: a survivor refuses a recovery it cannot check against it,
/// and a node's worth of Resumes takes longer than 10 s to recover (at
/// 10 s, 4,429 of 40,000 in a storm were refused as unproven for this
/// alone).
const CHANGES_MS: u64 = 60_000;

/// A permission change this worker applied (pushed revocations, and the
/// recomputed access after a server change from the stream): a session
/// that arrives from a node that had not applied it yet gets it at install.
pub(in crate::worker) enum Change {
    Revoke(std::sync::Arc<crate::worker::mail::RevokeMsg>),
    Access(std::sync::Arc<crate::worker::mail::AccessUpdate>),
}

pub(in crate::worker) struct ClusterState {
    /// The recent records (None: not clustered, nothing kept).
    log: Option<Arena>,
    /// (where in `log`, when taken, its place in the stream, its digest
    /// once computed (0: not yet)), oldest first. The digest is computed
    /// when a hand-off first needs it, then kept: lining up arriving
    /// sessions hashed every retained record for every arriving session at
    /// every retry, 30 % of the node's CPU in a drain (perf, 1,333
    /// hand-offs/s).
    recent: VecDeque<(RecordRef, u64, StreamPos, Cell<u64>)>,
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
    /// (when applied, the change), oldest first.
    pub(super) changes: VecDeque<(u64, Change)>,
    /// Crash recovery: the last journal entry taken, when the next
    /// checkpoint is due (Unix ms), the fence epoch seen, a checkpoint
    /// buffer the writer's queue handed back.
    pub(super) last_number: u64,
    pub(super) next_checkpoint_ms: u64,
    pub(super) fence_epoch: u64,
    pub(super) spare_blob: Option<Vec<u8>>,
}

pub(super) struct Pending {
    pub(super) conn: ConnKey,
    pub(super) moved: Box<Moved>,
    pub(super) until_ms: u64,
    /// Rebuilt from a dead node's checkpoint (not handed over by a live one).
    pub(super) recovered: bool,
}

/// Where our log begins in each partition (the oldest position it
/// holds), computed when first needed (`ClusterState::locate`).
#[derive(Default)]
pub(super) struct Reach(Option<HashMap<i32, u64>>);

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
                let floor = holder
                    .get(&pos.partition)
                    .map_or(0, |at| at.saturating_add(1));
                // A record consumed twice (a rebalance) is offered once.
                let next = done
                    .get(&pos.partition)
                    .map_or(floor, |at| at.saturating_add(1).max(floor));
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
        let log: Option<Arena> = clustered
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
            changes: VecDeque::with_capacity(if table > 0 { RECENT_CHANGES + 1 } else { 0 }),
            last_number: 0,
            next_checkpoint_ms: 0,
            fence_epoch: 0,
            spare_blob: None,
        }
    }

    /// Keep a change this worker applied (clustered only; no allocation).
    pub(in crate::worker) fn remember(&mut self, change: Change, now_ms: u64) {
        if self.log.is_none() {
            return;
        }
        if self.changes.len() == RECENT_CHANGES {
            self.changes.pop_front();
        }
        self.changes.push_back((now_ms, change));
        while self
            .changes
            .front()
            .is_some_and(|(at, _)| at + CHANGES_MS < now_ms)
        {
            self.changes.pop_front();
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
                        self.first[p] = pos.at.saturating_add(1);
                    }
                    self.last[p] = self.last[p].max(pos.at.saturating_add(1));
                }
                None => self.positions_broken = true,
            }
        }
        match log.append(&[body]) {
            Ok(r) => {
                if self.recent.len() == RECENT_RECORDS {
                    self.recent.pop_front();
                }
                self.recent.push_back((r, now_ms, pos, Cell::new(0)));
                self.records_kept += 1;
            }
            // Too large to keep: no cut can be placed across it.
            Err(_) => self.recent.clear(),
        }
        while let Some(&(r, at, _, _)) = self.recent.front() {
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
            .filter_map(move |(r, _, pos, _)| Some((log?.get(*r)?, *pos)))
    }

    /// The digests of the records `records` yields, in the same order
    /// (each computed once, then kept).
    fn digests(&self) -> impl Iterator<Item = u64> + '_ {
        let log = self.log.as_ref();
        self.recent.iter().filter_map(move |(r, _, _, d)| {
            let body = log?.get(*r)?;
            if d.get() == 0 {
                // A digest that is 0 is computed again each time: harmless.
                d.set(moved::digest(body));
            }
            Some(d.get())
        })
    }

    /// Digests of the last `TAIL` records taken, oldest first.
    pub(super) fn tail(&self) -> Vec<u64> {
        let skip = self.recent.len().saturating_sub(TAIL);
        self.digests().skip(skip).collect()
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

    /// The same as `cut`, without allocating (for checkpoints).
    pub(super) fn cut_iter(&self) -> impl Iterator<Item = (u16, u64)> + '_ {
        self.last
            .iter()
            .enumerate()
            .filter(|(_, at)| **at != 0)
            .map(|(p, at)| (p as u16, at - 1))
    }

    /// Whether the change log may have lost a change made after `since_ms`
    /// (monotonic ms): it is full and its oldest is newer.
    pub(super) fn changes_may_miss(&self, since_ms: u64, now_ms: u64) -> bool {
        let full = self.changes.len() >= RECENT_CHANGES
            && self.changes.front().is_some_and(|(at, _)| *at > since_ms);
        full || since_ms.saturating_add(CHANGES_MS) <= now_ms
    }

    fn has_positions(&self) -> bool {
        self.positions_broken || self.last.iter().any(|at| *at != 0)
    }

    /// Where `m`'s cut is in our log. `reach` is where our log begins per
    /// partition: the same for every session placed before the log
    /// changes, so computed once (when first needed) for all of them.
    pub(super) fn locate(&self, m: &Moved, reach: &mut Reach) -> Cut {
        if self.log.is_none() {
            return Cut::Mismatch("this worker keeps no stream log");
        }
        if !m.cut.is_empty() || self.has_positions() {
            self.locate_by_position(&m.cut, reach)
        } else {
            self.locate_by_digest(&m.tail)
        }
    }

    /// The records (their index in `records`) a session placed at `cut`
    /// gets, in order.
    pub(super) fn taken(&self, cut: &Cut) -> Vec<usize> {
        let mut done = HashMap::new();
        self.records()
            .enumerate()
            .filter(|(i, (_, pos))| cut.takes(*i, *pos, &mut done))
            .map(|(i, _)| i)
            .collect()
    }

    fn locate_by_position(&self, holder: &[(i32, u64)], reach: &mut Reach) -> Cut {
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
        let oldest = reach.0.get_or_insert_with(|| {
            let mut oldest: HashMap<i32, u64> = HashMap::new();
            for (_, pos) in self.records() {
                if pos.is_some() {
                    oldest.entry(pos.partition).or_insert(pos.at);
                }
            }
            oldest
        });
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
        let ours: Vec<u64> = self.digests().collect();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::session::Identity;
    use shards::SessionId;

    fn moved(tail: Vec<u64>, cut: Vec<(i32, u64)>) -> Moved {
        Moved {
            identity: Identity {
                session_id: SessionId::on_node(1, 0, 7),
                application_id: proto::AppId(1),
                bot_user_id: 1,
                intents: 0,
                shard: [0, 1],
                token_digest: [0; 32],
                guilds: Vec::new(),
                user_json: "{}".into(),
            },
            seq: 0,
            events: Vec::new(),
            tail,
            cut,
        }
    }

    fn at(partition: i32, offset: i64) -> StreamPos {
        StreamPos::kafka(partition, offset, 0)
    }

    /// What `install` would offer the session, as (partition, offset).
    fn offered(s: &ClusterState, cut: &Cut) -> Vec<(i32, u64)> {
        let all: Vec<StreamPos> = s.records().map(|(_, pos)| pos).collect();
        s.taken(cut)
            .into_iter()
            .map(|i| (all[i].partition, all[i].at >> 16))
            .collect()
    }

    impl ClusterState {
        fn place(&self, m: &Moved) -> Cut {
            self.locate(m, &mut Reach::default())
        }
    }

    #[test]
    fn by_position_takes_exactly_what_is_past_the_holder_in_each_partition() {
        let mut b = ClusterState::new(true);
        // B took partitions 0 and 1 interleaved its own way, and one record twice.
        for (p, o) in [
            (0, 1),
            (1, 1),
            (1, 2),
            (0, 2),
            (0, 3),
            (1, 3),
            (1, 2),
            (0, 4),
        ] {
            b.keep(b"{}", at(p, o), 0);
        }
        // A had taken 0 up to offset 2 and 1 up to offset 1.
        let cut = b.place(&moved(vec![], vec![(0, 2 << 16), (1, 1 << 16)]));
        assert!(matches!(cut, Cut::Past(_)));
        assert_eq!(offered(&b, &cut), vec![(1, 2), (0, 3), (1, 3), (0, 4)]);
        // A ahead of B in a partition: wait.
        let cut = b.place(&moved(vec![], vec![(0, 9 << 16)]));
        assert!(matches!(cut, Cut::NotYet));
    }

    #[test]
    fn by_position_refuses_what_it_cannot_prove() {
        let mut b = ClusterState::new(true);
        for o in 1..=(RECENT_RECORDS as i64 + 10) {
            b.keep(b"{}", at(0, o), 0);
        }
        // Our log no longer reaches back to A's last record of partition 0.
        assert!(matches!(
            b.place(&moved(vec![], vec![(0, 3 << 16)])),
            Cut::Mismatch(_)
        ));
        // A never saw partition 0 and we no longer hold its first record.
        assert!(matches!(b.place(&moved(vec![], vec![])), Cut::Mismatch(_)));
        // A partition id beyond the table: no cut by position at all.
        let mut c = ClusterState::new(true);
        c.keep(b"{}", at(5000, 1), 0);
        assert!(matches!(c.place(&moved(vec![], vec![])), Cut::Mismatch(_)));
    }

    #[test]
    fn by_digest_lines_up_on_the_tail_and_refuses_another_order() {
        let mut b = ClusterState::new(true);
        for body in [b"{\"a\":1}", b"{\"a\":2}", b"{\"a\":3}", b"{\"a\":4}"] {
            b.keep(body, StreamPos::NONE, 0);
        }
        let d = |x: &[u8]| moved::digest(x);
        let tail = vec![d(b"{\"a\":1}"), d(b"{\"a\":2}")];
        let cut = b.place(&moved(tail, vec![]));
        assert!(matches!(cut, Cut::After(2)));
        // The same last record after another one: not the same order.
        let tail = vec![d(b"{\"a\":3}"), d(b"{\"a\":2}")];
        assert!(matches!(b.place(&moved(tail, vec![])), Cut::Mismatch(_)));
        // A record we have not taken yet: wait.
        let tail = vec![d(b"{\"a\":5}")];
        assert!(matches!(b.place(&moved(tail, vec![])), Cut::NotYet));
        // Outside a cluster nothing is kept and nothing can be lined up.
        let none = ClusterState::new(false);
        assert!(matches!(
            none.place(&moved(vec![], vec![])),
            Cut::Mismatch(_)
        ));
    }
}
