//! Sessions moving between nodes (docs/cluster.md). As the holder: a
//! `HandOut` from the link is answered with the session (identity, the
//! events after the client's seq, the tail of our stream) and the session
//! is forgotten here. As the taker: a Resume for a session another node
//! holds becomes a `TakeJob`; its answer is rebuilt here once our stream
//! has reached the holder's cut, the records we took beyond the cut are
//! offered to it, then RESUMED.
//!
//! The streams are lined up by record identity (`moved::digest`): the
//! holder sends the digests of the last records its worker took; we find
//! the last of them among the batches we still retain and check that the
//! ones before it match in order. Our records after it are exactly the
//! ones the holder never took: they go to the session before it joins our
//! live stream. No match yet: our stream is behind the holder's, so we
//! wait (to the hand-off deadline) for it to catch up. A mismatch (other
//! streams, another order) is op 9, never a silent gap or duplicate.

use std::collections::VecDeque;

use ringbuf::{Arena, ArenaConfig, RecordRef};

use super::*;
use crate::delivery::moved::{self, Moved, Take, TAIL};

/// Bytes of recent stream records a clustered worker keeps (a copy of
/// each record body, in a log of its own: the ingest batches are never
/// held, so the pipeline's recycling and Kafka's commits are unchanged).
const RECENT_BYTES: u64 = 8 << 20;
/// ... at most this many records ...
const RECENT_RECORDS: usize = 8_192;
/// ... and for this long (the last `TAIL` are kept regardless).
const RECENT_MS: u64 = 2_000;
/// Arrived sessions waiting for our stream to reach their cut.
const MAX_PENDING: usize = 1_024;

pub(super) struct ClusterState {
    /// The recent records (None: not clustered, nothing kept).
    log: Option<Arena>,
    /// (where in `log`, when taken), oldest first.
    recent: VecDeque<(RecordRef, u64)>,
    /// Records taken from the stream since start.
    records_seen: u64,
    /// Records kept in `recent` since start (equal to `records_seen` as
    /// long as none was too large to keep and none was dropped).
    records_kept: u64,
    pending: Vec<Pending>,
}

struct Pending {
    conn: ConnKey,
    moved: Box<Moved>,
    until_ms: u64,
}

/// Where a holder's cut is in our retained stream.
enum Cut {
    /// Our records from this index of `recent` on came after the holder's cut.
    After(usize),
    NotYet,
    Mismatch,
}

impl ClusterState {
    pub(super) fn new(clustered: bool) -> ClusterState {
        let log = clustered
            .then(|| Arena::new(ArenaConfig::new(RECENT_BYTES)))
            .and_then(|a| match a {
                Ok(a) => Some(a),
                Err(e) => {
                    tracing::error!(error = %e, "cluster: no recent-stream log; hand-offs to this node will get op 9");
                    None
                }
            });
        ClusterState {
            recent: VecDeque::with_capacity(if log.is_some() { RECENT_RECORDS + 1 } else { 0 }),
            log,
            records_seen: 0,
            records_kept: 0,
            pending: Vec::new(),
        }
    }

    /// Keep a copy of one record taken from the stream (no allocation).
    fn keep(&mut self, body: &[u8], now_ms: u64) {
        let Some(log) = self.log.as_mut() else { return };
        self.records_seen += 1;
        match log.append(&[body]) {
            Ok(r) => {
                if self.recent.len() == RECENT_RECORDS {
                    self.recent.pop_front();
                }
                self.recent.push_back((r, now_ms));
                self.records_kept += 1;
            }
            // Too large to keep: no cut can be placed across it.
            Err(_) => self.recent.clear(),
        }
        while let Some(&(r, at)) = self.recent.front() {
            let stale = self.recent.len() > TAIL && at + RECENT_MS < now_ms;
            if stale || !log.contains(r) {
                self.recent.pop_front();
            } else {
                break;
            }
        }
    }

    fn bodies(&self) -> impl Iterator<Item = &[u8]> {
        let log = self.log.as_ref();
        self.recent
            .iter()
            .filter_map(move |(r, _)| log.and_then(|l| l.get(*r)))
    }

    /// Digests of the last `TAIL` records taken, oldest first.
    fn tail(&self) -> Vec<u64> {
        let skip = self.recent.len().saturating_sub(TAIL);
        self.bodies().skip(skip).map(moved::digest).collect()
    }

    fn locate(&self, tail: &[u64]) -> Cut {
        if self.log.is_none() {
            return Cut::Mismatch;
        }
        let ours: Vec<u64> = self.bodies().map(moved::digest).collect();
        let Some((&last, before)) = tail.split_last() else {
            // The holder had taken nothing: all we took is after its cut,
            // if we still have all of it.
            return if self.records_seen == ours.len() as u64 && self.records_kept == self.records_seen {
                Cut::After(0)
            } else {
                Cut::Mismatch
            };
        };
        let Some(p) = ours.iter().rposition(|&d| d == last) else {
            return Cut::NotYet;
        };
        // The records before the cut must be the holder's, in its order, as
        // far as both still have them.
        let k = before.len().min(p);
        if ours[p - k..p] != before[before.len() - k..] {
            return Cut::Mismatch;
        }
        Cut::After(p + 1)
    }
}

impl Worker {
    fn clustered(&self) -> bool {
        self.shared.cluster.is_some()
    }

    /// Keep a copy of a delivered batch's records for lining up arriving
    /// sessions (clustered only).
    pub(super) fn retain_batch(&mut self, batch: &Batch) {
        if self.clu.log.is_none() {
            return;
        }
        let now = self.now_ms();
        for body in batch.bodies() {
            self.clu.keep(body, now);
        }
        if !self.clu.pending.is_empty() {
            self.retry_pending();
        }
    }

    /// After a drain, how much longer the worker stays for other nodes to
    /// take its sessions (0: nothing to wait for).
    pub(super) fn handoff_grace_ms(&self, drain_until: u64) -> u64 {
        let grace = self.shared.cfg.cluster.drain_handoff_ms;
        if !self.clustered() || self.fan.live() == 0 || self.now_ms() > drain_until + grace {
            0
        } else {
            grace
        }
    }

    /// A Resume for a session another node holds: ask it (if we have room).
    pub(super) fn ask_holder(&mut self, key: ConnKey, sid: SessionId, r: &Resume) {
        let cfg = &self.shared.cfg;
        if self.fan.live() >= cfg.limits.max_sessions_per_worker as usize
            || self.clu.pending.len() >= MAX_PENDING
        {
            return self.refuse_resume(key, ResumeRefusal::NoRoom);
        }
        let job = TakeJob {
            worker: self.id,
            conn: key,
            node: sid.node(),
            take: Take {
                session_id: sid,
                token_digest: identify::token_digest(&r.token),
                seq: r.seq,
                max_entries: cfg.events.max_held,
                max_bytes: cfg.events.max_unsent_bytes,
                deadline_unix_ms: self.unix_ms + cfg.cluster.handoff_timeout_ms,
            },
            since: Instant::now(),
        };
        let sent = self
            .shared
            .cluster
            .as_ref()
            .is_some_and(|c| c.jobs.try_send(job).is_ok());
        if !sent {
            self.refuse_resume(key, ResumeRefusal::NoRoom);
        }
    }

    /// Another node asks for one of our sessions.
    pub(super) fn hand_out(&mut self, take: &Take, reply: &crossbeam_channel::Sender<Vec<u8>>) {
        let found = self.fan.lookup(&take.session_id);
        let answer = found
            .ok_or(ResumeRefusal::UnknownSession)
            .and_then(|idx| {
                let s = self.fan.get(idx).ok_or(ResumeRefusal::UnknownSession)?;
                if s.identity.token_digest != take.token_digest {
                    // A wrong token must not end, or even disturb, someone's session.
                    return Err(ResumeRefusal::TokenMismatch);
                }
                if !take.in_time(registry::snowflake::unix_ms_now()) {
                    // The taker has given up by now: keep it.
                    return Err(ResumeRefusal::NodeUnreachable);
                }
                let events = self.fan.export(idx, take)?;
                Ok(Moved {
                    identity: (*s.identity).clone(),
                    seq: take.seq,
                    events,
                    tail: self.clu.tail(),
                })
            });
        let mut bytes = Vec::new();
        moved::encode_answer(&answer, &mut bytes);
        // Let go only once the link thread has the answer (it may have
        // given up waiting: then the session stays ours).
        let taken = reply.try_send(bytes).is_ok();
        let (Some(idx), Ok(_), true) = (found, &answer, taken) else {
            if let Err(why) = answer {
                tracing::debug!(worker = self.id, %why, "hand-off refused");
            }
            return;
        };
        let old = self.fan.get(idx).and_then(|s| s.conn);
        if let Some(old) = old {
            self.detach_conn(old);
        }
        self.fan.remove(idx);
        if let Some(old) = old {
            self.begin_close(
                old,
                Some(Close::new(
                    CloseCode::UnknownError,
                    "session resumed on another node",
                )),
            );
        }
        WorkerMetrics::inc(&self.metrics().handoffs_out);
    }

    /// The holder answered a `TakeJob` of ours.
    pub(super) fn handed_in(&mut self, conn: ConnKey, result: Result<Box<Moved>, ResumeRefusal>) {
        match result {
            Err(why) => self.refuse_resume(conn, why),
            Ok(moved) => {
                let until_ms = self.now_ms() + self.shared.cfg.cluster.handoff_timeout_ms;
                self.clu.pending.push(Pending {
                    conn,
                    moved,
                    until_ms,
                });
                self.retry_pending();
            }
        }
    }

    /// Install every arrived session whose cut our stream has reached.
    fn retry_pending(&mut self) {
        let now = self.now_ms();
        let mut i = 0;
        while i < self.clu.pending.len() {
            let cut = self.clu.locate(&self.clu.pending[i].moved.tail);
            let expired = self.clu.pending[i].until_ms < now;
            match cut {
                Cut::NotYet if !expired => i += 1,
                Cut::After(from) => {
                    let p = self.clu.pending.swap_remove(i);
                    self.install(p.conn, &p.moved, from);
                }
                Cut::NotYet | Cut::Mismatch => {
                    let p = self.clu.pending.swap_remove(i);
                    let why = if matches!(cut, Cut::NotYet) { "its cut never reached us" } else { "the records before its cut differ" };
                    tracing::warn!(
                        worker = self.id,
                        session = %p.moved.identity.session_id,
                        why,
                        "hand-off: streams could not be lined up; the session is lost (op 9)"
                    );
                    self.refuse_resume(p.conn, ResumeRefusal::StreamCut);
                }
            }
        }
    }

    /// Rebuild a moved session, give it our records after its cut, attach
    /// the connection (if it is still there) and send RESUMED.
    fn install(&mut self, key: ConnKey, m: &Moved, from: usize) {
        let now = self.now_ms();
        let unix = self.unix_ms;
        let window = self.shared.cfg.limits.resume_window_ms;
        let idx = match self.fan.import(m, now, window) {
            Ok(idx) => idx,
            Err(why) => return self.refuse_resume(key, why),
        };
        let Worker { fan, clu, .. } = self;
        let mut mentions = Vec::new();
        for body in clu.bodies().skip(from) {
            // SAFETY: the ingest thread accepted exactly these bytes; `keep`
            // copied them unchanged into the log, whose records are 8-aligned.
            let rec = unsafe { ingest::access_trusted(body) };
            mentions.clear();
            mentions.extend(rec.mentions().iter().map(|m| m.to_native()));
            let ev = EventIn {
                t: rec.event_type(),
                server_id: ServerId(rec.server_id()),
                channel_id: ChannelId(rec.channel_id()),
                intent: rec.intent(),
                permissions: rec.permissions(),
                has_content: rec.has_content(),
                addressed: rec.is_addressed(),
                mentions: &mentions,
                d: rec.d(),
            };
            fan.deliver_to(idx, &ev, now, unix);
        }
        WorkerMetrics::inc(&self.metrics().handoffs_in);
        let waiting = self
            .conn(key)
            .is_some_and(|c| matches!(&c.state, ConnState::WebSocket(w, None) if w.session.phase() == Phase::Authenticating));
        if !waiting {
            return; // the client left meanwhile: the session stays resumable here
        }
        if let Some(s) = self.fan.get_mut(idx) {
            s.conn = Some(key);
            s.expires_ms = u64::MAX;
        }
        let resumed = self
            .fan
            .dispatch(idx, "RESUMED", br#"{"_trace":["gatewayd"]}"#, now);
        if let Some(conn) = self.conn(key) {
            if let ConnState::WebSocket(w, sid) = &mut conn.state {
                *sid = Some(idx);
                w.session.authenticated();
                conn.partial = 0;
            }
        }
        WorkerMetrics::inc(&self.metrics().resumes);
        WorkerMetrics::inc(&self.metrics().sessions_ready);
        if resumed.is_err() {
            self.overflowed(idx, key);
        }
        self.queue_flush(key);
    }

    /// Arrived sessions whose cut never came are refused (the tick).
    pub(super) fn expire_pending(&mut self) {
        if !self.clu.pending.is_empty() {
            self.retry_pending();
        }
    }
}
