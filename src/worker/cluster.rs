//! Sessions moving between nodes (docs/cluster.md). As the holder: a
//! `HandOut` from the link is answered with the session (identity, the
//! events after the client's seq, the tail of our stream) and the session
//! is forgotten here. As the taker: a Resume for a session another node
//! holds becomes a `TakeJob`; its answer is rebuilt here once our stream
//! has reached the holder's cut, the records we took beyond the cut are
//! offered to it, then RESUMED.
//!
//! The streams are lined up at the holder's cut (`cut.rs`): our records
//! past it are exactly the ones the holder never took; they go to the
//! session before it joins our live stream. Not reached yet: our stream is
//! behind the holder's, so we wait (to the hand-off deadline). A mismatch
//! (other streams, another order, too far apart) is op 9, never a silent
//! gap or duplicate.

pub(super) mod cut;
mod recover;

use super::*;
use crate::delivery::moved::{self, Moved, Take};
use crate::worker::timeline::Kind;
pub(super) use cut::Change;
use cut::{Cut, Pending, Reach, MAX_PENDING};

/// The records of our log (their index) a session placed at a cut gets.
type Taken = Vec<usize>;

impl Worker {
    fn clustered(&self) -> bool {
        self.shared.cluster.is_some()
    }

    /// Keep a copy of a delivered batch's records for lining up arriving
    /// sessions (clustered only).
    pub(super) fn retain_batch(&mut self, batch: &Batch) {
        if !self.clu.enabled() {
            return;
        }
        let now = self.now_ms();
        for (body, pos) in batch.records() {
            self.clu.keep(body, pos, now);
        }
        // At the batch boundary: the cut and the seqs include this batch.
        self.checkpoint_if_due(Some(batch.number));
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
        let answer = found.ok_or(ResumeRefusal::UnknownSession).and_then(|idx| {
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
                cut: self.clu.cut(),
            })
        });
        let mut bytes = Vec::new();
        moved::encode_answer(&answer, &mut bytes);
        // Let go only once the link thread has the answer (it may have
        // given up waiting: then the session stays ours).
        let taken = reply.try_send(bytes).is_ok();
        let now = self.now_ms();
        let (Some(idx), Ok(_), true) = (found, &answer, taken) else {
            if let Err(why) = answer {
                tracing::debug!(worker = self.id, %why, "hand-off refused");
                let expired = (found.is_none() && taken)
                    .then(|| self.expired.take(take.session_id.random_bits(), now))
                    .flatten();
                if let Some(gap) = expired {
                    self.shared.metrics[self.id].reconnect.refused_expired(gap);
                }
            }
            return;
        };
        // The session came back, on another node: its gap is counted here,
        // where it was lost (delivery/reconnect.rs).
        let away = self.fan.away_ms(idx, now);
        self.shared.metrics[self.id].reconnect.resumed(away);
        let old = self.fan.get(idx).and_then(|s| s.conn);
        if let Some(old) = old {
            self.detach_conn(old);
        }
        if let Some(s) = self.fan.get(idx) {
            let (app, sid) = (s.identity.application_id.0, s.identity.session_id);
            self.shared
                .apps
                .moved(app, &sid, Kind::HandOut, self.unix_ms);
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
                    recovered: false,
                });
                self.retry_pending();
            }
        }
    }

    /// Install every arrived session whose cut our stream has reached.
    fn retry_pending(&mut self) {
        let now = self.now_ms();
        let mut reach = Reach::default();
        // The records the last cut placed takes: sessions recovered
        // together share their cut, so it is worked out once for them.
        let mut last: Option<(Vec<(i32, u64)>, Taken)> = None;
        let mut i = 0;
        while i < self.clu.pending.len() {
            let cut = self.clu.locate(&self.clu.pending[i].moved, &mut reach);
            let expired = self.clu.pending[i].until_ms < now;
            match cut {
                Cut::NotYet if !expired => i += 1,
                Cut::After(_) | Cut::Past(_) => {
                    let p = self.clu.pending.swap_remove(i);
                    let same = matches!(cut, Cut::Past(_))
                        && last.as_ref().is_some_and(|(c, _)| *c == p.moved.cut);
                    if !same {
                        last = Some((p.moved.cut.clone(), self.clu.taken(&cut)));
                    }
                    let taken = last.as_ref().map_or(&[][..], |(_, t)| t.as_slice());
                    self.install(p.conn, &p.moved, taken, p.recovered);
                }
                Cut::NotYet | Cut::Mismatch(_) => {
                    let p = self.clu.pending.swap_remove(i);
                    let why = match cut {
                        Cut::Mismatch(why) => why,
                        _ => "its cut never reached us in time",
                    };
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
    fn install(&mut self, key: ConnKey, m: &Moved, taken: &[usize], recovered: bool) {
        let now = self.now_ms();
        let unix = self.unix_ms;
        let window = self.shared.cfg.limits.resume_window_ms;
        let idx = match self.fan.import(m, now, window) {
            Ok(idx) => idx,
            Err(why) => return self.refuse_resume(key, why),
        };
        // The permission changes we applied lately, in order: the holder
        // may not have had them yet (narrowing first, before any record).
        if let Err(close) = self.apply_recent_changes(idx) {
            self.fan.remove(idx);
            return match close {
                Some(close) => self.begin_close(key, Some(close)),
                None => self.refuse_resume(key, ResumeRefusal::StreamCut),
            };
        }
        // The live path's buffer: the replayed events are the live ones.
        let Worker {
            fan, clu, mentions, ..
        } = self;
        let mut want = taken.iter().copied().peekable();
        let first = taken.first().copied().unwrap_or(usize::MAX);
        for (i, (body, _)) in clu.records().enumerate().skip(first) {
            if want.peek() != Some(&i) {
                continue;
            }
            want.next();
            // SAFETY: the ingest thread accepted exactly these bytes; `keep`
            // copied them unchanged into the log, whose records are 8-aligned.
            let rec = unsafe { ingest::access_trusted(body) };
            fan.deliver_to(idx, &EventIn::of(rec, mentions), now, unix);
        }
        WorkerMetrics::inc(&self.metrics().handoffs_in);
        let kind = if recovered {
            Kind::Recovered
        } else {
            Kind::HandIn
        };
        let (app, sid) = (m.identity.application_id.0, m.identity.session_id);
        self.shared.apps.moved(app, &sid, kind, unix);
        if let Some(s) = self.fan.get_mut(idx) {
            s.since_ms = unix;
        }
        self.write_summary(idx);
        let waiting = self
            .conn(key)
            .is_some_and(|c| matches!(&c.state, ConnState::WebSocket(w, None) if w.session.phase() == Phase::Authenticating));
        if !waiting {
            return; // the client left meanwhile: the session stays resumable here
        }
        if let Some(s) = self.fan.get_mut(idx) {
            s.conn = Some(key);
            s.expires_ms = u64::MAX;
            s.attached_ms = unix;
            s.resumes = s.resumes.saturating_add(1);
        }
        let resumed = self
            .fan
            .dispatch(idx, "RESUMED", br#"{"_trace":["gatewayd"]}"#, now);
        if let Some(conn) = self.conn(key) {
            if let ConnState::WebSocket(w, sid) = &mut conn.state {
                *sid = Some(idx);
                w.session.authenticated();
                w.resume_token = None;
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

    /// Re-apply this worker's recent permission changes to an arrived
    /// session. Err: it must not go on (Some: close with this; None: op 9,
    /// its token was reset lately, so it cannot be told from a new one).
    fn apply_recent_changes(&mut self, idx: SessionIdx) -> Result<(), Option<Close>> {
        use registry::Revocation as R;
        let Some(s) = self.fan.get(idx) else {
            return Ok(());
        };
        let (app, uses) = (s.identity.application_id, s.identity.intents);
        let Worker { fan, clu, .. } = self;
        for (_, change) in &clu.changes {
            match change {
                Change::Access(u) => fan.update_access_of(idx, u.server_id, &u.by_app),
                Change::Revoke(msg) if msg.revocation.application_id() == app.0 => {
                    match msg.revocation {
                        R::Uninstalled { server_id, .. } => {
                            fan.revoke_server_of(idx, ServerId(server_id))
                        }
                        R::PermissionsChanged { server_id, .. } => match &msg.access {
                            Some(access) => fan.set_access_of(idx, access),
                            None => fan.revoke_server_of(idx, ServerId(server_id)),
                        },
                        R::TokenReset { .. } => return Err(None),
                        R::IntentsChanged { .. } => {
                            if uses & intents::PRIVILEGED & !msg.approved_intents != 0 {
                                return Err(Some(Close::new(
                                    CloseCode::DisallowedIntents,
                                    "disallowed intents: a privileged intent was withdrawn",
                                )));
                            }
                        }
                    }
                }
                Change::Revoke(_) => {}
            }
        }
        Ok(())
    }

    /// Arrived sessions whose cut never came are refused (the tick).
    pub(super) fn expire_pending(&mut self) {
        if !self.clu.pending.is_empty() {
            self.retry_pending();
        }
    }
}
