//! Housekeeping every 250 ms (not the event path; it may allocate):
//! deadlines, heartbeats missed, expired resumable sessions, lease
//! renewals, handovers left half done, drain progress.

use super::*;

impl Worker {
    pub(super) fn on_tick(&mut self) {
        self.metrics().ticks.fetch_add(1, Ordering::Relaxed);
        self.expire_pending();
        if !self.fenced() {
            self.checkpoint_if_due(None);
        }
        if self.unix_ms >= self.next_lease_renewal {
            // Renew well before expiry: a third of the TTL.
            self.next_lease_renewal = self.unix_ms + self.shared.cfg.registry.lease_ttl_ms / 3;
            let mut pairs = std::mem::take(&mut self.lease_pairs);
            self.fan.lease_pairs(&mut pairs);
            // The REST views' leases renew in the same batch.
            self.api.views.lease_pairs(&mut pairs);
            let (held, lapsed) = self.fan.lease_counts(self.unix_ms);
            self.metrics().leases_held.store(held, Ordering::Relaxed);
            self.metrics()
                .leases_lapsed
                .store(lapsed, Ordering::Relaxed);
            if !pairs.is_empty() {
                let req = SidecarRequest::RenewLeases {
                    worker: self.id,
                    pairs: pairs.clone(),
                };
                let _ = self.shared.sidecar.try_send(req);
            }
            self.lease_pairs = pairs;
        }
        // REST views are rebuilt now and then (new installations).
        let mut due = Vec::new();
        self.api.views.due_for_refresh(self.unix_ms, &mut due);
        for app in due {
            let _ = self.shared.sidecar.try_send(SidecarRequest::ApiRefresh {
                worker: self.id,
                app,
            });
        }
        let now = self.now_ms();
        let mut to_close: Vec<(ConnKey, Option<Close>, bool)> = Vec::new();
        let mut handshaking = 0u64;
        let mut compressed = 0u64;
        for r in 0..self.rings.len() {
            let rs = &mut self.rings[r];
            for slot in 0..rs.conns.len() {
                let Some(conn) = rs.conns[slot].as_deref_mut() else {
                    continue;
                };
                if conn.life.closed() {
                    continue;
                }
                let key = ConnKey {
                    ring: r as u8,
                    gen: conn.gen,
                    slot: slot as u32,
                };
                if matches!(conn.state, ConnState::WebSocket(..)) && !conn.life.shutting() {
                    conn.release_idle_buffers();
                }
                match &mut conn.state {
                    ConnState::Http => {
                        if now > conn.deadline_ms && !conn.rest_pending() {
                            to_close.push((key, None, true));
                        }
                    }
                    ConnState::WebSocket(w, sid) => {
                        handshaking += sid.is_none() as u64;
                        compressed += conn.compress.as_ref().is_some_and(|c| c.compresses()) as u64;
                        if conn.life.shutting() {
                            continue;
                        }
                        match w.session.on_tick(now, &mut conn.out) {
                            Ok(()) => {
                                if !conn.out.is_empty() && !conn.queued {
                                    conn.queued = true;
                                    self.queue.push(key);
                                }
                            }
                            Err(close) => to_close.push((key, Some(close), false)),
                        }
                    }
                    ConnState::Closing => {
                        if now > conn.deadline_ms {
                            to_close.push((key, None, false));
                        }
                    }
                }
            }
            if !rs.accepting && self.draining_until.is_none() {
                // A full table stopped the multishot accept; retry now that slots may be free.
                self.arm_accept(r);
            }
        }
        for (key, close, handshake) in to_close {
            let closing = matches!(self.conn(key).map(|c| &c.state), Some(ConnState::Closing));
            if handshake {
                WorkerMetrics::inc(&self.metrics().handshake_timeouts);
                if let Some(conn) = self.conn(key) {
                    http::write_response(
                        408,
                        rest::JSON,
                        br#"{"message": "request timeout", "code": 0}"#,
                        false,
                        &[],
                        &mut conn.out,
                    );
                }
                self.close_after_flush(key);
            } else if closing {
                self.finish(key);
            } else {
                self.begin_close(key, close);
            }
        }
        let expired = &mut self.expired;
        expired.expire(now);
        let (_, degraded) = self
            .fan
            .tick(now, |id, detached| expired.remember(id, detached));
        if self.shared.apps.tally_due(self.id, self.unix_ms) {
            let fan = &self.fan;
            self.shared.apps.tally(self.id, |f| fan.each_session(f));
            self.publish_sessions();
        }
        let m = &self.shared.metrics[self.id];
        m.sessions_degraded
            .store(degraded as u64, Ordering::Relaxed);
        m.sessions_detached
            .store(self.fan.detached() as u64, Ordering::Relaxed);
        let st = self.fan.arena.stats();
        m.arena_wraps.store(st.wraps, Ordering::Relaxed);
        m.arena_lost_reads.store(st.lost_reads, Ordering::Relaxed);
        m.ring_chunks_free
            .store(self.fan.slab.free_count() as u64, Ordering::Relaxed);
        m.ring_chunks_capacity
            .store(self.fan.slab.capacity() as u64, Ordering::Relaxed);
        m.sessions_handshaking.store(handshaking, Ordering::Relaxed);
        m.compressed_sessions.store(compressed, Ordering::Relaxed);
        let stale: Vec<u64> = self
            .adopting
            .iter()
            .filter(|(_, a)| now > a.since_ms + ADOPT_TIMEOUT_MS)
            .map(|(t, _)| *t)
            .collect();
        for token in stale {
            let a = self.adopting.remove(&token).expect("listed");
            tracing::warn!(
                worker = self.id,
                token,
                "handover half never arrived: dropped"
            );
            if let Some((r, Ok(slot))) = a.slot {
                self.rings[r]
                    .ring
                    .close(slot, ud(Op::Close, r as u8, 0, slot));
            }
        }
        if let Some(until) = self.draining_until {
            self.send_due_reconnects(now);
            if now > until {
                let keys: Vec<ConnKey> = self.all_keys();
                for key in keys {
                    let is_closing =
                        matches!(self.conn(key).map(|c| &c.state), Some(ConnState::Closing));
                    if is_closing {
                        if now > until + LINGER_MS {
                            self.finish(key);
                        }
                    } else {
                        self.begin_close(
                            key,
                            Some(Close::new(
                                CloseCode::UnknownError,
                                "node shutting down: resume elsewhere",
                            )),
                        );
                    }
                }
            }
        }
    }

    /// Op 7 to every session whose moment in the drain has come.
    pub(super) fn send_due_reconnects(&mut self, now: u64) {
        while let Some(&(due, key)) = self.drain_schedule.last() {
            if due > now {
                break;
            }
            self.drain_schedule.pop();
            if let Some(conn) = self.conn(key) {
                if matches!(conn.state, ConnState::WebSocket(..)) {
                    payload::reconnect(&mut conn.out);
                    WorkerMetrics::inc(&self.metrics().reconnects_sent);
                    self.queue_flush(key);
                }
            }
        }
    }

    /// This worker's sessions into its board for the portal's session
    /// table (`session_board`), with their connections' heartbeat and
    /// compression. Once a second, with the tally.
    fn publish_sessions(&self) {
        use crate::worker::session_board::{compression_byte, Row};
        let unix = self.unix_ms;
        // The worker's clock to Unix ms.
        let to_unix = unix.saturating_sub(self.now_ms());
        let (rings, worker) = (&self.rings, self.id as u8);
        self.shared.sessions.publish(self.id, unix, |push| {
            for s in self.fan.slots() {
                let conn = s.conn.and_then(|k| conn_ref(rings, k));
                let heartbeat_ms = match conn.map(|c| &c.state) {
                    Some(ConnState::WebSocket(w, _)) => w.session.last_heartbeat_ms() + to_unix,
                    _ => 0,
                };
                let compression = compression_byte(conn.and_then(|c| c.compress.as_deref()));
                let id = &s.identity;
                push(Row {
                    app: id.application_id.0,
                    session: crate::worker::timeline::session_bits(&id.session_id),
                    shard: id.shard,
                    since_ms: s.since_ms,
                    attached_ms: if s.conn.is_some() { s.attached_ms } else { 0 },
                    heartbeat_ms,
                    resumes: s.resumes,
                    queue_pct: (s.ring.fill_ratio() * 100.0).clamp(0.0, 100.0) as u8,
                    compression,
                    worker,
                });
            }
        });
    }
}
