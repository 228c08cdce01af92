//! One node's figures of one application, as another node's portal asks
//! for them on the cluster link (`link::cluster::figures` carries the
//! bytes; this is what they say). Everything the health view has that is
//! counted per node: sessions by worker and by shard, events, identifies
//! and resumes, closes of the last hour, REST answers and 429s, the
//! interactions counters. Sans-IO; every count read is checked against the
//! bytes left before anything is allocated, and bounded on its own.

use crate::api::route::ROUTE_NAMES;
use crate::chat::board::AppStats;
use crate::delivery::wire::Reader;
use crate::worker::app_stats::{AppSnapshot, LIMITED_ENTRIES, REST_ENTRIES};
use crate::worker::session_board::Row;
use crate::worker::timeline::{self, Event, Kind};

/// 2 added the timeline and the session rows at the end; an answer of 1
/// (a node of the release before) is read without them.
const VERSION: u8 = 2;
/// Bounds a decoded answer respects (an encoder past them is refused).
pub const MAX_WORKERS: usize = 256;
/// Session rows one node sends per application (the first by session id;
/// `sessions_total` says how many it holds): 55 bytes each, 55 KiB.
pub const MAX_ROWS: usize = 1000;
const ROW_LEN: usize = 16 + 8 + 8 * 3 + 4 + 3;
const EVENT_LEN: usize = 8 + 1 + 2 + 16;
pub const MAX_SHARDS: usize = 2048;
const MAX_ROUTE_NAME: usize = 64;

/// One node's figures of the application.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeFigures {
    /// The answering node's number (the asker checks it is the one asked).
    pub node: u16,
    pub now_ms: u64,
    /// Per worker: (live, degraded, detached).
    pub workers: Vec<(u32, u32, u32)>,
    /// (shard_id, num_shards, live, degraded).
    pub shards: Vec<(u32, u32, u32, u32)>,
    pub shards_other: u32,
    pub events: u64,
    pub identifies: u64,
    pub resumes: u64,
    pub identifies_hour: u64,
    pub resumes_hour: u64,
    pub closes_hour: [u64; 16],
    /// (route name, status, count): names, not indexes, so nodes of two
    /// releases agree.
    pub rest: Vec<(String, u16, u64)>,
    /// (route name, scope 0 user / 1 global / 2 shared, count).
    pub limited: Vec<(String, u8, u64)>,
    pub rest_other: u64,
    /// opened, refused, acks, deferrals, misses, late, double, followups.
    pub interactions: [u64; 8],
    /// The application's last lifecycle events there, newest first.
    pub timeline: Vec<Event>,
    /// Its first `MAX_ROWS` sessions there by id, and how many it holds.
    pub sessions: Vec<Row>,
    pub sessions_total: u32,
}

impl NodeFigures {
    /// What this node counts of `app` (zeros if nothing); the timeline
    /// and the sessions are left empty (`with_sessions`).
    pub fn of(node: u16, now_ms: u64, snap: &AppSnapshot, ix: &AppStats) -> NodeFigures {
        let name = |r: usize| ROUTE_NAMES.get(r).copied().unwrap_or("?").to_string();
        NodeFigures {
            timeline: Vec::new(),
            sessions: Vec::new(),
            sessions_total: 0,
            node,
            now_ms,
            workers: snap.workers.iter().take(MAX_WORKERS).copied().collect(),
            shards: snap.shards.iter().take(MAX_SHARDS).copied().collect(),
            shards_other: snap.shards_other,
            events: snap.events,
            identifies: snap.identifies,
            resumes: snap.resumes,
            identifies_hour: snap.identifies_hour,
            resumes_hour: snap.resumes_hour,
            closes_hour: snap.closes_hour,
            rest: snap
                .rest
                .iter()
                .map(|(r, s, n)| (name(*r), *s, *n))
                .collect(),
            limited: snap
                .limited
                .iter()
                .map(|(r, s, n)| (name(*r), *s, *n))
                .collect(),
            rest_other: snap.rest_other,
            interactions: [
                ix.opened,
                ix.refused,
                ix.acks,
                ix.deferrals,
                ix.misses,
                ix.late,
                ix.double,
                ix.followups,
            ],
        }
    }

    pub fn live(&self) -> u32 {
        self.workers.iter().map(|w| w.0).sum()
    }
    pub fn degraded(&self) -> u32 {
        self.workers.iter().map(|w| w.1).sum()
    }
    pub fn detached(&self) -> u32 {
        self.workers.iter().map(|w| w.2).sum()
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        out.push(VERSION);
        out.extend_from_slice(&self.node.to_le_bytes());
        for v in [self.now_ms, self.events, self.identifies, self.resumes] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for v in [self.identifies_hour, self.resumes_hour, self.rest_other] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for v in self.closes_hour.iter().chain(&self.interactions) {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.shards_other.to_le_bytes());
        let u32s = |out: &mut Vec<u8>, vs: &[u32]| {
            for v in vs {
                out.extend_from_slice(&v.to_le_bytes());
            }
        };
        out.extend_from_slice(&(self.workers.len() as u32).to_le_bytes());
        for w in &self.workers {
            u32s(out, &[w.0, w.1, w.2]);
        }
        out.extend_from_slice(&(self.shards.len() as u32).to_le_bytes());
        for s in &self.shards {
            u32s(out, &[s.0, s.1, s.2, s.3]);
        }
        let name = |out: &mut Vec<u8>, n: &str| {
            let n = &n.as_bytes()[..n.len().min(MAX_ROUTE_NAME)];
            out.push(n.len() as u8);
            out.extend_from_slice(n);
        };
        out.extend_from_slice(&(self.rest.len() as u32).to_le_bytes());
        for (r, st, n) in &self.rest {
            name(out, r);
            out.extend_from_slice(&st.to_le_bytes());
            out.extend_from_slice(&n.to_le_bytes());
        }
        out.extend_from_slice(&(self.limited.len() as u32).to_le_bytes());
        for (r, scope, n) in &self.limited {
            name(out, r);
            out.push(*scope);
            out.extend_from_slice(&n.to_le_bytes());
        }
        let events = &self.timeline[..self.timeline.len().min(timeline::LEN)];
        out.extend_from_slice(&(events.len() as u32).to_le_bytes());
        for e in events {
            out.extend_from_slice(&e.at_ms.to_le_bytes());
            out.push(e.kind.tag() as u8);
            out.extend_from_slice(&e.kind.code().to_le_bytes());
            out.extend_from_slice(&e.session.to_le_bytes());
        }
        out.extend_from_slice(&self.sessions_total.to_le_bytes());
        let rows = &self.sessions[..self.sessions.len().min(MAX_ROWS)];
        out.extend_from_slice(&(rows.len() as u32).to_le_bytes());
        for r in rows {
            out.extend_from_slice(&r.session.to_le_bytes());
            u32s(out, &r.shard);
            for v in [r.since_ms, r.attached_ms, r.heartbeat_ms] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            out.extend_from_slice(&r.resumes.to_le_bytes());
            out.extend_from_slice(&[r.queue_pct, r.compression, r.worker]);
        }
    }

    /// None: not a whole, valid answer (nothing past it is trusted).
    pub fn decode(b: &[u8]) -> Option<NodeFigures> {
        let mut r = Reader(b);
        let version = r.u8()?;
        if version != 1 && version != VERSION {
            return None;
        }
        let node = u16::from_le_bytes(r.bytes(2)?.try_into().ok()?);
        let mut f = NodeFigures {
            node,
            now_ms: r.u64()?,
            events: r.u64()?,
            identifies: r.u64()?,
            resumes: r.u64()?,
            identifies_hour: r.u64()?,
            resumes_hour: r.u64()?,
            rest_other: r.u64()?,
            ..Default::default()
        };
        for c in f.closes_hour.iter_mut() {
            *c = r.u64()?;
        }
        for c in f.interactions.iter_mut() {
            *c = r.u64()?;
        }
        f.shards_other = r.u32()?;
        let n = r.count_at_most(MAX_WORKERS, 12)?;
        f.workers = (0..n)
            .map(|_| Some((r.u32()?, r.u32()?, r.u32()?)))
            .collect::<Option<_>>()?;
        let n = r.count_at_most(MAX_SHARDS, 16)?;
        f.shards = (0..n)
            .map(|_| Some((r.u32()?, r.u32()?, r.u32()?, r.u32()?)))
            .collect::<Option<_>>()?;
        let n = r.count_at_most(REST_ENTRIES, 1 + 2 + 8)?;
        f.rest = (0..n)
            .map(|_| Some((read_name(&mut r)?, r.u16()?, r.u64()?)))
            .collect::<Option<_>>()?;
        let n = r.count_at_most(LIMITED_ENTRIES, 1 + 1 + 8)?;
        f.limited = (0..n)
            .map(|_| Some((read_name(&mut r)?, r.u8()?, r.u64()?)))
            .collect::<Option<_>>()?;
        if version >= 2 {
            let u128 = |r: &mut Reader| Some(u128::from_le_bytes(r.bytes(16)?.try_into().ok()?));
            let n = r.count_at_most(timeline::LEN, EVENT_LEN)?;
            f.timeline = (0..n)
                .map(|_| {
                    let at_ms = r.u64()?;
                    let (tag, code) = (r.u8()?, r.u16()?);
                    Some(Event {
                        at_ms,
                        kind: Kind::from_parts(u64::from(tag), code)?,
                        session: u128(&mut r)?,
                    })
                })
                .collect::<Option<_>>()?;
            f.sessions_total = r.u32()?;
            let n = r.count_at_most(MAX_ROWS, ROW_LEN)?;
            f.sessions = (0..n)
                .map(|_| {
                    Some(Row {
                        app: 0,
                        session: u128(&mut r)?,
                        shard: [r.u32()?, r.u32()?],
                        since_ms: r.u64()?,
                        attached_ms: r.u64()?,
                        heartbeat_ms: r.u64()?,
                        resumes: r.u32()?,
                        queue_pct: r.u8()?,
                        compression: r.u8()?,
                        worker: r.u8()?,
                    })
                })
                .collect::<Option<_>>()?;
        }
        r.0.is_empty().then_some(f)
    }
}

/// A route or bucket name: a u8 length (at most `MAX_ROUTE_NAME`), then UTF-8.
fn read_name(r: &mut Reader) -> Option<String> {
    let n = r.u8()? as usize;
    if n > MAX_ROUTE_NAME {
        return None;
    }
    String::from_utf8(r.bytes(n)?.to_vec()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> NodeFigures {
        NodeFigures {
            node: 3,
            now_ms: 1_700_000_000_000,
            workers: vec![(2, 1, 0), (1, 0, 1)],
            shards: vec![(0, 2, 2, 1), (1, 2, 1, 0)],
            shards_other: 4,
            events: 99,
            identifies: 5,
            resumes: 2,
            identifies_hour: 3,
            resumes_hour: 1,
            closes_hour: std::array::from_fn(|i| i as u64),
            rest: vec![("get_gateway_bot".into(), 200, 7), ("x".into(), 429, 1)],
            limited: vec![("x".into(), 1, 1)],
            rest_other: 6,
            interactions: [1, 2, 3, 4, 5, 6, 7, 8],
            timeline: vec![
                Event {
                    at_ms: 1_700_000_000_500,
                    kind: Kind::Close(4009),
                    session: 7 << 120 | 3 << 104 | 99,
                },
                Event {
                    at_ms: 1_700_000_000_100,
                    kind: Kind::HandIn,
                    session: 1,
                },
            ],
            sessions: vec![Row {
                app: 0,
                session: 7 << 120 | 3 << 104 | 99,
                shard: [1, 4],
                since_ms: 1_700_000_000_000,
                attached_ms: 1_700_000_000_100,
                heartbeat_ms: 1_700_000_000_400,
                resumes: 2,
                queue_pct: 13,
                compression: 2,
                worker: 7,
            }],
            sessions_total: 1500,
        }
    }

    #[test]
    fn figures_round_trip_and_every_cut_is_refused() {
        let f = sample();
        let mut b = Vec::new();
        f.encode(&mut b);
        assert_eq!(NodeFigures::decode(&b), Some(f));
        for cut in 0..b.len() {
            assert_eq!(NodeFigures::decode(&b[..cut]), None, "cut at {cut}");
        }
        let mut longer = b.clone();
        longer.push(0);
        assert_eq!(NodeFigures::decode(&longer), None, "trailing bytes");
    }

    #[test]
    fn an_answer_of_the_release_before_is_read_without_sessions() {
        let mut f = sample();
        f.timeline.clear();
        f.sessions.clear();
        f.sessions_total = 0;
        let mut b = Vec::new();
        f.encode(&mut b);
        // Version 1 ended before the timeline's count, the total and the rows' count.
        b.truncate(b.len() - 12);
        b[0] = 1;
        assert_eq!(NodeFigures::decode(&b), Some(f));
        b[0] = 3;
        assert_eq!(NodeFigures::decode(&b), None, "a version from the future");
    }

    #[test]
    fn a_forged_count_costs_nothing() {
        let f = NodeFigures::default();
        let mut b = Vec::new();
        f.encode(&mut b);
        // The workers' count sits after the fixed part: forge it huge.
        let at = 1 + 2 + 7 * 8 + 24 * 8 + 4;
        assert_eq!(&b[at..at + 4], &0u32.to_le_bytes());
        b[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(NodeFigures::decode(&b), None);
        b[at..at + 4].copy_from_slice(&(MAX_WORKERS as u32).to_le_bytes());
        assert_eq!(NodeFigures::decode(&b), None, "more than the bytes left");
    }
}
