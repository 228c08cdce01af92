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
use crate::delivery::recovery::{CheckpointWriter, Rebuilt, Summary, TAINTED};
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

    /// Session `idx` got a dispatch a survivor cannot reproduce (not from
    /// the topic): it is not recoverable from now on.
    pub(in crate::worker) fn taint(&mut self, idx: SessionIdx) {
        if self.shared.recovery.is_some() {
            if let Some(s) = self.fan.get_mut(idx) {
                s.recovery |= TAINTED;
            }
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

    /// A recovery thread rebuilt a dead node's session (or could not).
    pub(in crate::worker) fn recovered(
        &mut self,
        conn: ConnKey,
        result: Result<Box<Rebuilt>, ResumeRefusal>,
    ) {
        let r = match result {
            Ok(r) => r,
            Err(why) => return self.refuse_resume(conn, why),
        };
        match self.replay(&r) {
            Ok(moved) => {
                if let Some(rs) = self.shared.recovery.as_ref() {
                    rs.stats.recovered.fetch_add(1, Relaxed);
                }
                let until_ms = self.now_ms() + self.shared.cfg.cluster.handoff_timeout_ms;
                self.clu.pending.push(Pending {
                    conn,
                    moved: Box::new(moved),
                    until_ms,
                });
                self.retry_pending();
            }
            Err(why) => {
                tracing::info!(worker = self.id, session = %r.identity.session_id, %why, "recovery refused");
                self.refuse_resume(conn, why);
            }
        }
    }

    /// Rebuild the session at its checkpoint seq, offer it the dead
    /// worker's records in that worker's order (the dispatches are the ones
    /// the dead node made: same decision, same bytes, same seq), check the
    /// client's seq against what that proves, then the rest; the result is
    /// what a live holder would have answered a Take from the client's seq.
    fn replay(&mut self, r: &Rebuilt) -> Result<Moved, ResumeRefusal> {
        let now = self.now_ms();
        let unix_to_mono = self.unix_ms.saturating_sub(now);
        let since = r.since_unix_ms.saturating_sub(CHANGE_MARGIN_MS);
        let since_mono = since.saturating_sub(unix_to_mono);
        if self.changed_since(&r.identity, since_mono) {
            return Err(ResumeRefusal::RecoveryUnproven);
        }
        let cfg = &self.shared.cfg;
        let (window, max_held, max_bytes) = (
            cfg.limits.resume_window_ms,
            cfg.events.max_held,
            cfg.events.max_unsent_bytes,
        );
        let lease_until = self.unix_ms + cfg.registry.lease_ttl_ms;
        let base = Moved {
            identity: r.identity.clone(),
            seq: r.checkpoint_seq,
            events: Vec::new(),
            tail: Vec::new(),
            cut: Vec::new(),
        };
        let idx = self.fan.import(&base, now, window)?;
        let Worker { fan, mentions, .. } = self;
        // Leases count as valid in the replay (`unix` 0): the checkpoint
        // proved them valid past anything the dead node delivered.
        for body in r.proven.bodies() {
            // SAFETY: the recovery thread accepted exactly these bytes with
            // `ingest::FrameReader` and copied them into an aligned batch.
            let rec = unsafe { ingest::access_trusted(body) };
            fan.deliver_to(idx, &EventIn::of(rec, mentions), now, 0);
        }
        let proven = fan.get(idx).map_or(0, |s| s.ring.last_seq());
        if r.client_seq < r.checkpoint_seq || r.client_seq > proven {
            fan.remove(idx);
            return Err(ResumeRefusal::RecoveryUnproven);
        }
        for body in r.tail.bodies() {
            // SAFETY: as above.
            let rec = unsafe { ingest::access_trusted(body) };
            fan.deliver_to(idx, &EventIn::of(rec, mentions), now, 0);
        }
        let take = Take {
            session_id: r.identity.session_id,
            token_digest: r.identity.token_digest,
            seq: r.client_seq,
            max_entries: max_held,
            max_bytes,
            deadline_unix_ms: u64::MAX,
        };
        let events = fan.export(idx, &take);
        fan.remove(idx);
        let mut identity = r.identity.clone();
        for g in &mut identity.guilds {
            g.lease_until_ms = lease_until;
        }
        Ok(Moved {
            identity,
            seq: r.client_seq,
            events: events?,
            tail: Vec::new(),
            cut: r.cut.clone(),
        })
    }

    /// Whether this worker applied a permission change touching the
    /// session after `since_ms` (monotonic), or cannot tell.
    fn changed_since(&self, id: &Identity, since_ms: u64) -> bool {
        if self.clu.changes_may_miss(since_ms, self.now_ms()) {
            return true;
        }
        let has = |s: ServerId| id.guilds.binary_search_by_key(&s, |g| g.id).is_ok();
        self.clu
            .changes
            .iter()
            .filter(|(at, _)| *at >= since_ms)
            .any(|(_, c)| match c {
                Change::Revoke(m) => m.revocation.application_id() == id.application_id.0,
                Change::Access(u) => has(u.server_id),
            })
    }
}
