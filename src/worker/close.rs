//! Closing: drain (op 7 spread over a window), close frames after the
//! last send, our FIN and the linger for the peer's, and freeing the slot.

use super::*;

impl Worker {
    pub(super) fn all_keys(&self) -> Vec<ConnKey> {
        let mut keys = Vec::new();
        for (r, rs) in self.rings.iter().enumerate() {
            for (slot, c) in rs.conns.iter().enumerate() {
                if let Some(c) = c.as_deref() {
                    if !c.life.closed() {
                        keys.push(ConnKey {
                            ring: r as u8,
                            gen: c.gen,
                            slot: slot as u32,
                        });
                    }
                }
            }
        }
        keys
    }

    /// Drain: stop accepting, then op 7 to every session at a random moment
    /// within `spread_ms` (so a fleet's reconnects do not arrive at once),
    /// then close what is left after the grace period.
    pub(super) fn drain(&mut self, spread_ms: u64) {
        if self.draining_until.is_some() {
            return;
        }
        let now = self.now_ms();
        self.draining_until = Some(now + spread_ms + self.shared.cfg.limits.shutdown_grace_ms);
        for r in 0..self.rings.len() {
            let rs = &mut self.rings[r];
            rs.ring
                .cancel_user_data(ud(Op::Accept, r as u8, 0, 0), ud(Op::Cancel, r as u8, 0, 0));
        }
        let mut seed = [0u8; 8];
        let _ = getrandom::fill(&mut seed);
        let mut x = u64::from_le_bytes(seed) | 1;
        for key in self.all_keys() {
            let Some(conn) = self.conn(key) else { continue };
            match &mut conn.state {
                ConnState::WebSocket(..) => {
                    // xorshift: a cheap, good-enough spread.
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let due = now + if spread_ms == 0 { 0 } else { x % spread_ms };
                    self.drain_schedule.push((due, key));
                }
                ConnState::Http => {
                    if !conn.rest_pending() {
                        self.close_after_flush(key);
                    }
                }
                ConnState::Closing => {}
            }
        }
        self.drain_schedule
            .sort_unstable_by_key(|(due, _)| std::cmp::Reverse(*due));
        self.send_due_reconnects(now);
    }

    pub(super) fn close_after_flush(&mut self, key: ConnKey) {
        let now = self.now_ms();
        let Some(conn) = self.conn(key) else { return };
        conn.life.shut_after_flush();
        if !matches!(conn.state, ConnState::WebSocket(..)) {
            conn.state = ConnState::Closing;
        }
        conn.deadline_ms = now + LINGER_MS;
        self.queue_flush(key);
    }

    /// Start closing: a WebSocket close frame (if any), then FIN after the
    /// flush, then wait for the peer's FIN (bounded by LINGER_MS). The
    /// connection stops serving its session first, so nothing follows the
    /// close frame.
    pub(super) fn begin_close(&mut self, key: ConnKey, close: Option<Close>) {
        let now = self.now_ms();
        let id = self.id;
        let Some(conn) = conn_in(&mut self.rings, key) else {
            return;
        };
        if conn.life.closed() || matches!(conn.state, ConnState::Closing) {
            return;
        }
        if conn.send.in_flight() {
            // Let the send in flight finish first: it may end mid-frame, and
            // the close frame must start on a frame boundary.
            conn.close_pending = Some(DeferredClose::new(close));
            return;
        }
        let state = std::mem::replace(&mut conn.state, ConnState::Closing);
        let partial = std::mem::take(&mut conn.partial);
        if let ConnState::WebSocket(w, sid) = state {
            if let (Some(sid), true) = (sid, partial > 0) {
                // A short write left a frame half sent: finish it, then close.
                let done = match self.fan.get(sid) {
                    Some(s) => sendpath::finish_frame(
                        &s.ring,
                        &self.fan.slab,
                        &self.fan.arena,
                        partial,
                        &mut conn.out,
                    ),
                    None => false,
                };
                if done {
                    self.fan.mark_sent(sid, 1);
                }
            }
            let keep = match close {
                Some(c) => {
                    ws::encode_close(c.code, c.reason, &mut conn.out);
                    self.shared.metrics[id].close_sent(c.code);
                    if let Some(s) = sid.and_then(|i| self.fan.get(i)) {
                        let (app, sid) = (s.identity.application_id.0, s.identity.session_id);
                        self.shared.apps.closed(app, &sid, c.code, self.unix_ms);
                    }
                    c.resumable() && !w.end_session
                }
                None => !w.end_session,
            };
            self.end_session(sid, keep, now);
        }
        let Some(conn) = self.conn(key) else { return };
        conn.life.shut_after_flush();
        conn.deadline_ms = now + LINGER_MS;
        conn.inbuf = Vec::new();
        self.queue_flush(key);
    }

    pub(super) fn on_peer_close(&mut self, key: ConnKey, code: Option<u16>) {
        let now = self.now_ms();
        let Some(conn) = self.conn(key) else { return };
        let state = std::mem::replace(&mut conn.state, ConnState::Closing);
        // Echo the close (RFC 6455 handshake).
        let echo = code.unwrap_or(1000);
        ws::encode_close(
            if ws::is_valid_close_code(echo) {
                echo
            } else {
                1000
            },
            "",
            &mut conn.out,
        );
        conn.life.shut_after_flush();
        conn.deadline_ms = now + LINGER_MS;
        if let ConnState::WebSocket(w, sid) = state {
            // 1000/1001, or a close without a code (a deliberate close by the
            // library), end the session; anything else keeps it resumable.
            let keep = !matches!(code, None | Some(1000) | Some(1001)) && !w.end_session;
            self.end_session(sid, keep, now);
        }
        self.queue_flush(key);
    }

    /// A connection stops serving its session: keep the session for Resume
    /// when allowed (it goes on collecting events into its ring), else end it.
    pub(super) fn end_session(&mut self, sid: Option<SessionIdx>, resumable: bool, now: u64) {
        let Some(sid) = sid else { return };
        WorkerMetrics::dec(&self.metrics().sessions_ready);
        // Draining alone, a session has nowhere to resume; in a cluster it
        // waits for the node its client reconnects to (docs/cluster.md).
        if resumable && (self.draining_until.is_none() || self.shared.cluster.is_some()) {
            self.fan.detach(sid, now);
        } else {
            self.fan.remove(sid);
        }
    }

    /// Tear the socket down now: RDWR shutdown wakes the pending receive,
    /// then the slot is closed; the Conn is freed on the close completion.
    pub(super) fn finish(&mut self, key: ConnKey) {
        let now = self.now_ms();
        let Some(conn) = self.conn(key) else { return };
        if conn.life.closed() {
            return;
        }
        if conn.handover.as_ref().is_some_and(|h| h.passed) {
            // The socket went to another worker with its slot: a close here
            // would hit whatever the kernel puts in the slot next.
            return;
        }
        conn.life = Lifecycle::Closed;
        let state = std::mem::replace(&mut conn.state, ConnState::Closing);
        if let ConnState::WebSocket(w, sid) = state {
            let keep = !w.end_session;
            self.end_session(sid, keep, now);
        }
        self.open -= 1;
        WorkerMetrics::dec(&self.metrics().connections_open);
        let ring = &mut self.rings[key.ring as usize].ring;
        ring.shutdown_and_close(
            key.slot,
            ud(Op::Shutdown, key.ring, key.gen, key.slot),
            ud(Op::Close, key.ring, key.gen, key.slot),
        );
    }
}
