//! A worker's side of crash recovery (docs/cluster.md, "Crash recovery").
//! As a writer: a checkpoint every `recovery.checkpoint_ms` at a batch
//! boundary (the last journal entry taken, every session's seq; into a
//! buffer allocated at start, never waited for), and each session's
//! summary when it is identified, arrives, or its entitlement changes.
//! As a survivor: a session rebuilt from a dead node's records is replayed
//! through the live path's entitlement decision (`deliver_to`), checked
//! against the client's seq, then joins our stream at its cut like a
//! hand-off. And the fence: a node whose claim lapsed ends its sessions.

use std::sync::atomic::Ordering::Relaxed;

use super::*;
use crate::delivery::fanout::handoff::Rebuilding;
use crate::delivery::recovery::{CheckpointWriter, Recovering, Replay, Summary, TAINTED};
use crate::worker::mail::RecoveryWrite;

/// A permission change this close before the checkpoint may still have
/// reached the dead node after it (nodes apply pushes at their own pace).
const CHANGE_MARGIN_MS: u64 = 2_000;

impl Worker {
    /// A batch (or a tick) ended: write a checkpoint if one is due.
    pub(in crate::worker) fn checkpoint_if_due(&mut self, number: Option<u64>) {
        let Some(r) = self.shared.recovery.as_ref() else {
            return;
        };
        if let Some(n) = number {
            self.clu.last_number = self.clu.last_number.max(n);
        }
        if self.unix_ms < self.clu.next_checkpoint_ms {
            return;
        }
        let cfg = &self.shared.cfg;
        self.clu.next_checkpoint_ms = self.unix_ms + cfg.recovery.checkpoint_ms;
        let blob = self
            .clu
            .spare_blob
            .take()
            .or_else(|| r.pools[self.id].try_recv().ok());
        let Some(mut blob) = blob else {
            r.stats.checkpoints_skipped.fetch_add(1, Relaxed);
            return;
        };
        // A session whose leases run out before anything the node can
        // still deliver (it fences itself a node TTL after its last
        // renewal) cannot be replayed with its leases taken as valid.
        let floor = self.unix_ms + cfg.cluster.node_ttl_ms + cfg.recovery.checkpoint_ms;
        CheckpointWriter::begin(
            &mut blob,
            self.id as u16,
            self.clu.last_number,
            self.unix_ms,
            self.clu.cut_iter(),
        );
        let at = blob.len();
        let mut n = 0u32;
        self.fan
            .each_for_checkpoint(&mut |id, seq, version, lost, lease| {
                if lost {
                    return;
                }
                let v = if lease < floor {
                    version | TAINTED
                } else {
                    version
                };
                if CheckpointWriter::session(&mut blob, id, seq, v) {
                    n += 1;
                }
            });
        CheckpointWriter::finish(&mut blob, at, n);
        let msg = RecoveryWrite::Checkpoint {
            worker: self.id,
            blob,
        };
        match r.writes.try_send(msg) {
            Ok(()) => {
                r.stats.checkpoints.fetch_add(1, Relaxed);
            }
            Err(e) => {
                r.stats.checkpoints_skipped.fetch_add(1, Relaxed);
                if let RecoveryWrite::Checkpoint { blob, .. } = e.into_inner() {
                    self.clu.spare_blob = Some(blob);
                }
            }
        }
    }

    /// Write session `idx`'s summary (identify, arrival, a change).
    pub(in crate::worker) fn write_summary(&mut self, idx: SessionIdx) {
        let Some(r) = self.shared.recovery.as_ref() else {
            return;
        };
        let Some(s) = self.fan.get(idx) else { return };
        let mut bytes = Vec::new();
        let version = s.recovery & !TAINTED;
        Summary::encode(
            &r.instance,
            self.id as u16,
            &r.link,
            version,
            &s.identity,
            &mut bytes,
        );
        let msg = RecoveryWrite::Summary {
            session_id: s.identity.session_id,
            bytes,
        };
        if r.writes.try_send(msg).is_ok() {
            r.stats.summaries.fetch_add(1, Relaxed);
        } else {
            // The stored summary (if any) is older than the checkpoints
            // will say: a survivor refuses (op 9), never replays on it.
            r.stats.summaries_skipped.fetch_add(1, Relaxed);
        }
    }

    /// The entitlement inputs of some sessions changed (a revocation of
    /// `app`, a change in `server`): new version, new summary.
    pub(in crate::worker) fn identities_changed(
        &mut self,
        app: Option<AppId>,
        server: Option<ServerId>,
    ) {
        if self.shared.recovery.is_none() {
            return;
        }
        for idx in self.fan.sessions_touching(app, server) {
            if let Some(s) = self.fan.get_mut(idx) {
                let tainted = s.recovery & TAINTED;
                s.recovery = ((s.recovery & !TAINTED).wrapping_add(1) & !TAINTED) | tainted;
            }
            self.write_summary(idx);
        }
    }

    /// Session `idx` is about to get GUILD_MEMBERS_CHUNKs, dispatches a
    /// survivor cannot reproduce (not from the topic): it is not
    /// recoverable from now on. Its checkpoints say so from the next one
    /// on; before that, a crash would leave the checkpoint before the
    /// chunks, whose replay renumbers every later dispatch. So the summary
    /// says so first (its version with `TAINTED`, which no checkpoint
    /// matches) and the chunks wait for that write (Some: send them now:
    /// recovery is off, or the writer's queue is full: counted in
    /// `summaries_skipped`, and a crash before the next checkpoint could
    /// then replay without them).
    pub(in crate::worker) fn taint_ahead(
        &mut self,
        conn: ConnKey,
        idx: SessionIdx,
        guild_ids: Vec<u64>,
        nonce: Option<String>,
    ) -> Option<(Vec<u64>, Option<String>)> {
        let Some(r) = self.shared.recovery.as_ref() else {
            return Some((guild_ids, nonce));
        };
        let s = self.fan.get_mut(idx)?;
        if s.recovery & TAINTED != 0 {
            // Written ahead of its first chunks (once per session: op 8
            // cannot make the writer's queue, which checkpoints share,
            // grow); every checkpoint since says so too.
            return Some((guild_ids, nonce));
        }
        s.recovery |= TAINTED;
        let mut bytes = Vec::new();
        Summary::encode(
            &r.instance,
            self.id as u16,
            &r.link,
            s.recovery,
            &s.identity,
            &mut bytes,
        );
        let session_id = s.identity.session_id;
        let msg = RecoveryWrite::Taint {
            session_id,
            bytes,
            worker: self.id,
            then: ToWorker::MembersChunk {
                conn,
                session_id,
                guild_ids,
                nonce,
            },
        };
        match r.writes.try_send(msg) {
            Ok(()) => {
                r.stats.summaries.fetch_add(1, Relaxed);
                None
            }
            Err(e) => {
                r.stats.summaries_skipped.fetch_add(1, Relaxed);
                match e.into_inner() {
                    RecoveryWrite::Taint {
                        then:
                            ToWorker::MembersChunk {
                                guild_ids, nonce, ..
                            },
                        ..
                    } => Some((guild_ids, nonce)),
                    _ => None,
                }
            }
        }
    }

    /// The session's taint is written (or its write failed): send the
    /// chunks it asked for, if the connection still serves it.
    pub(in crate::worker) fn members_chunk_tainted(
        &mut self,
        conn: ConnKey,
        session_id: SessionId,
        guild_ids: Vec<u64>,
        nonce: Option<String>,
    ) {
        let Some(idx) = self.session_of(conn) else {
            return;
        };
        if self.fan.get(idx).map(|s| s.identity.session_id) == Some(session_id) {
            self.members_chunk(conn, idx, &guild_ids, nonce.as_deref());
        }
    }

    /// The fence: true if this node's claim has lapsed (deliver nothing).
    /// A lapsed claim, or one the heartbeat found lapsed or taken, ends
    /// every session here: a survivor may have recovered them.
    pub(in crate::worker) fn fenced(&mut self) -> bool {
        let Some(r) = self.shared.recovery.as_ref() else {
            return false;
        };
        let epoch = r.fence.epoch.load(Relaxed);
        let lapsed = r.fence.lapsed(self.unix_ms);
        if (lapsed || epoch != self.clu.fence_epoch) && self.fan.live() > 0 {
            let stats = r.stats.clone();
            tracing::error!(
                worker = self.id,
                sessions = self.fan.live(),
                "recovery fence: our cluster claim lapsed; ending every session (a survivor may hold them)"
            );
            for (idx, conn) in self.fan.all_sessions() {
                if let Some(key) = conn {
                    self.detach_conn(key);
                }
                self.fan.remove(idx);
                stats.fenced_sessions.fetch_add(1, Relaxed);
                if let Some(key) = conn {
                    self.begin_close(
                        key,
                        Some(Close::new(
                            CloseCode::UnknownError,
                            "this node lost its cluster claim; resume elsewhere",
                        )),
                    );
                }
            }
        }
        self.clu.fence_epoch = epoch;
        lapsed
    }

    /// A recovery thread rebuilt sessions of a dead node, all from one
    /// checkpoint of its worker: replay them together, then each joins our
    /// stream at the replay's cut like a hand-off (`Pending`).
    pub(in crate::worker) fn recovered(&mut self, r: &Replay, sessions: Vec<Recovering>) {
        let until_ms = self.now_ms() + self.shared.cfg.cluster.handoff_timeout_ms;
        for (conn, result) in self.replay(r, sessions) {
            match result {
                Ok(moved) => {
                    if let Some(rs) = self.shared.recovery.as_ref() {
                        rs.stats.recovered.fetch_add(1, Relaxed);
                    }
                    self.clu.pending.push(Pending {
                        conn,
                        moved: Box::new(moved),
                        until_ms,
                        recovered: true,
                    });
                }
                Err(why) => {
                    tracing::debug!(worker = self.id, %why, "recovery refused");
                    self.refuse_resume(conn, why);
                }
            }
        }
        self.retry_pending();
    }

    /// Rebuild each session at its checkpoint seq, offer the group the
    /// dead worker's records in that worker's order, each record once (the
    /// dispatches are the ones the dead node made: same decision, same
    /// bytes, same seq), check each client's seq against what that proves,
    /// then the rest; each result is what a live holder would have answered
    /// a Take from the client's seq.
    fn replay(
        &mut self,
        r: &Replay,
        sessions: Vec<Recovering>,
    ) -> Vec<(ConnKey, Result<Moved, ResumeRefusal>)> {
        let now = self.now_ms();
        let unix_to_mono = self.unix_ms.saturating_sub(now);
        let since = r.since_unix_ms.saturating_sub(CHANGE_MARGIN_MS);
        let since_mono = since.saturating_sub(unix_to_mono);
        let cfg = &self.shared.cfg;
        let (window, max_held, max_bytes) = (
            cfg.limits.resume_window_ms,
            cfg.events.max_held,
            cfg.events.max_unsent_bytes,
        );
        let lease_until = self.unix_ms + cfg.registry.lease_ttl_ms;
        let mut out = Vec::with_capacity(sessions.len());
        let changed = self.changed_since(since_mono);
        let mut members = Vec::with_capacity(sessions.len());
        for s in sessions {
            if changed.touches(&s.identity) {
                out.push((s.conn, Err(ResumeRefusal::RecoveryUnproven)));
                continue;
            }
            match self
                .fan
                .import_at(&s.identity, s.checkpoint_seq, now, window)
            {
                Ok(idx) => members.push((idx, s)),
                Err(why) => out.push((s.conn, Err(why))),
            }
        }
        let mut group = Rebuilding::new(&self.fan, members.iter().map(|m| m.0).collect());
        let Worker { fan, mentions, .. } = self;
        // Leases count as valid in the replay (`unix` 0): the checkpoint
        // proved them valid past anything the dead node delivered.
        for body in r.proven.bodies() {
            // SAFETY: the recovery thread accepted exactly these bytes with
            // `ingest::FrameReader` and copied them into an aligned batch.
            let rec = unsafe { ingest::access_trusted(body) };
            fan.deliver_to_group(&group, &EventIn::of(rec, mentions), now, 0);
        }
        for (k, (idx, s)) in members.iter().enumerate() {
            let proven = fan.get(*idx).map_or(0, |x| x.ring.last_seq());
            if s.client_seq < s.checkpoint_seq || s.client_seq > proven {
                group.leave(k); // a gap is never silent
            }
        }
        for body in r.tail.bodies() {
            // SAFETY: as above.
            let rec = unsafe { ingest::access_trusted(body) };
            fan.deliver_to_group(&group, &EventIn::of(rec, mentions), now, 0);
        }
        for (k, (idx, s)) in members.into_iter().enumerate() {
            let result = if group.has_left(k) {
                Err(ResumeRefusal::RecoveryUnproven)
            } else {
                let take = Take {
                    session_id: s.identity.session_id,
                    token_digest: s.identity.token_digest,
                    seq: s.client_seq,
                    max_entries: max_held,
                    max_bytes,
                    deadline_unix_ms: u64::MAX,
                };
                fan.export(idx, &take).map(|events| {
                    let mut identity = s.identity;
                    for g in &mut identity.guilds {
                        g.lease_until_ms = lease_until;
                    }
                    Moved {
                        identity,
                        seq: s.client_seq,
                        events,
                        tail: Vec::new(),
                        cut: r.cut.clone(),
                    }
                })
            };
            fan.remove(idx);
            out.push((s.conn, result));
        }
        out
    }

    /// The permission changes this worker applied after `since_ms`
    /// (monotonic), or that it cannot tell.
    fn changed_since(&self, since_ms: u64) -> Changed {
        if self.clu.changes_may_miss(since_ms, self.now_ms()) {
            return Changed::Unknown;
        }
        let mut apps = Vec::new();
        let mut servers = Vec::new();
        for (_, c) in self.clu.changes.iter().filter(|(at, _)| *at >= since_ms) {
            match c {
                Change::Revoke(m) => apps.push(m.revocation.application_id()),
                Change::Access(u) => servers.push(u.server_id),
            }
        }
        apps.sort_unstable();
        servers.sort_unstable();
        Changed::Known { apps, servers }
    }
}

/// Permission changes applied since a checkpoint (`changed_since`).
enum Changed {
    /// The change log cannot tell (full, or not reaching back far enough).
    Unknown,
    Known {
        apps: Vec<u64>,
        servers: Vec<ServerId>,
    },
}

impl Changed {
    /// Whether a change may have touched this session.
    fn touches(&self, id: &Identity) -> bool {
        match self {
            Changed::Unknown => true,
            Changed::Known { apps, servers } => {
                apps.binary_search(&id.application_id.0).is_ok()
                    || id
                        .guilds
                        .iter()
                        .any(|g| servers.binary_search(&g.id).is_ok())
            }
        }
    }
}
