//! Handover: moving a connection to the worker that owns its session or
//! its (application, shard) placement: stop receiving here, pass the socket
//! with MSG_RING, send the state by message, adopt on the other side.

use super::*;

impl Worker {
    /// A socket passed to us landed in ring `r`'s table (or failed to).
    pub(super) fn on_adopt(&mut self, r: usize, c: Completion) {
        let token = c.user_data & 0xFFFF_FFFF_FFFF;
        let now = self.now_ms();
        if c.result >= 0 {
            self.add_used(r, 1);
            self.admission(r);
        }
        let a = self.adopting.entry(token).or_insert_with(|| Adoption {
            since_ms: now,
            ..Default::default()
        });
        a.slot = Some((
            r,
            if c.result >= 0 {
                Ok(c.result as u32)
            } else {
                Err(c.result)
            },
        ));
        self.try_adopt(token);
    }

    /// Begin moving a connection to worker `to`; `action` runs there.
    pub(super) fn start_handover(&mut self, key: ConnKey, to: usize, action: Action) {
        let Some(conn) = self.conn(key) else { return };
        conn.handover = Some(Box::new(Handover {
            to,
            action: Some(action),
            recv_done: false,
            passed: false,
            token: 0,
        }));
        let ring = &mut self.rings[key.ring as usize].ring;
        ring.cancel_user_data(
            ud(Op::Recv, key.ring, key.gen, key.slot),
            ud(Op::HandoverCancel, key.ring, key.gen, key.slot),
        );
    }

    /// Pass the socket once its receive has stopped and no send is running.
    pub(super) fn try_pass(&mut self, key: ConnKey) {
        let token = (self.id as u64) << 40 | (self.handovers & 0xFF_FFFF_FFFF);
        let Some(conn) = conn_in(&mut self.rings, key) else {
            return;
        };
        let ready = !conn.send.in_flight() && !conn.life.closed();
        let Some(h) = conn.handover.as_deref_mut() else {
            return;
        };
        if !ready || !h.recv_done || h.passed {
            return;
        }
        h.passed = true;
        h.token = token;
        let to = h.to;
        self.handovers += 1;
        // The target worker's emptiest ring, unless all are at their limit.
        let load = &self.shared.ring_load[to];
        let ri = (0..load.len())
            .min_by_key(|&i| load[i].load(Ordering::Relaxed))
            .unwrap_or(0);
        if load[ri].load(Ordering::Relaxed) >= self.shared.ring_limits[to][ri] {
            self.handover_refused(key.ring as usize, key);
            return;
        }
        let target_rings = &self.shared.ring_fds[to];
        self.rings[key.ring as usize].ring.pass_and_close(
            key.slot,
            target_rings[ri],
            ud_adopt(ri as u8, token),
            ud(Op::Pass, key.ring, key.gen, key.slot),
            ud(Op::Close, key.ring, key.gen, key.slot),
        );
    }

    /// Our half of the pass finished: send the state to the new owner, or,
    /// if the owner's table was full, keep serving the connection here.
    pub(super) fn on_passed(&mut self, r: usize, key: ConnKey, c: Completion) {
        if c.result < 0 {
            tracing::debug!(worker = self.id, error = %c.error().expect("negative"), "handover refused");
            self.handover_refused(r, key);
            return;
        }
        let rs = &mut self.rings[r];
        let Some(mut conn) = rs.conns[key.slot as usize].take_if(|c| c.gen == key.gen) else {
            return;
        };
        self.slot_freed(r, key.slot);
        self.open -= 1;
        WorkerMetrics::dec(&self.metrics().connections_open);
        let Some(mut h) = conn.handover.take() else {
            return;
        };
        let token = h.token;
        let action = h.action.take().expect("set at start");
        WorkerMetrics::inc(&self.metrics().handovers_out);
        if !self.shared.workers[h.to].send(ToWorker::Adopt {
            token,
            conn,
            action,
        }) {
            WorkerMetrics::inc(&self.metrics().inbox_full_drops);
        }
    }

    /// The owner worker has no room: serve the connection here after all.
    pub(super) fn handover_refused(&mut self, r: usize, key: ConnKey) {
        {
            let Some(conn) = self.conn(key) else { return };
            let Some(mut h) = conn.handover.take() else {
                return;
            };
            if matches!(conn.state, ConnState::Http) {
                conn.rest().here = true; // a REST connection: serve it here, do not ask again
            }
            WorkerMetrics::inc(&self.metrics().handover_fallbacks);
            self.rings[r]
                .ring
                .recv_multi(key.slot, ud(Op::Recv, r as u8, key.gen, key.slot));
            match h.action.take().expect("set at start") {
                // Placement is a preference: a session can live on any worker
                // (its id names the one it is on).
                Action::Identify(identify) => self.send_identify(key, identify),
                // The session is on the other worker and cannot come here.
                Action::Resume(_) => {
                    if let Some(conn) = self.conn(key) {
                        if let ConnState::WebSocket(w, _) = &mut conn.state {
                            w.session.authentication_failed();
                        }
                        payload::invalid_session(&mut conn.out, false);
                    }
                    self.resume_refused(ResumeRefusal::NotMovable);
                }
                other => self.on_action(key, other),
            }
        }
        self.queue_flush(key);
        self.process_input(key);
    }

    /// Install an adopted connection once both halves are here.
    pub(super) fn try_adopt(&mut self, token: u64) {
        let ready =
            matches!(self.adopting.get(&token), Some(a) if a.slot.is_some() && a.conn.is_some());
        let failed = matches!(
            self.adopting.get(&token),
            Some(Adoption {
                slot: Some((_, Err(_))),
                ..
            })
        );
        if failed {
            self.adopting.remove(&token);
            return;
        }
        if !ready {
            return;
        }
        let a = self.adopting.remove(&token).expect("checked");
        let (r, Ok(slot)) = a.slot.expect("checked") else {
            return;
        };
        if self.rings[r].conns[slot as usize].is_some() {
            // The kernel freed this slot (a close, ours) and gave it to the
            // passed socket before that close's completion reached us: the
            // old connection is still in our table. Wait for it
            // (`slot_freed`, called where a slot is freed).
            WorkerMetrics::inc(&self.metrics().slot_waits);
            self.adopting.insert(token, a);
            return;
        }
        let (mut conn, action) = a.conn.expect("checked");
        let rs = &mut self.rings[r];
        let gen = rs.gens[slot as usize].wrapping_add(1);
        rs.gens[slot as usize] = gen;
        conn.gen = gen;
        conn.queued = false;
        // A peer lookup still running on the old worker answers there.
        if let Some(rest) = conn.rest_state.as_deref_mut() {
            if let Peer::Pending(_) = rest.peer {
                rest.peer = Peer::Unknown;
            }
        }
        debug_assert!(rs.conns[slot as usize].is_none(), "checked above");
        rs.conns[slot as usize] = Some(conn);
        rs.ring.recv_multi(slot, ud(Op::Recv, r as u8, gen, slot));
        self.open += 1;
        WorkerMetrics::inc(&self.metrics().connections_open);
        WorkerMetrics::inc(&self.metrics().handovers_in);
        let key = ConnKey {
            ring: r as u8,
            gen,
            slot,
        };
        self.on_action(key, action);
        self.queue_flush(key);
        self.process_input(key);
    }

    /// Our slot `slot` of ring `r` was just freed: a socket the kernel
    /// placed there while the old connection was still ours (accepted or
    /// adopted) goes in now.
    pub(super) fn slot_freed(&mut self, r: usize, slot: u32) {
        if self.rings[r].conns[slot as usize].is_some() {
            // Another connection's completion (not this slot's occupant's):
            // the slot is not free in our table yet.
            return;
        }
        let waiting = &mut self.rings[r].accepts_waiting;
        if let Some(i) = waiting.iter().position(|&s| s == slot) {
            waiting.swap_remove(i);
            self.install_accepted(r, slot);
            return;
        }
        if self.adopting.is_empty() {
            return;
        }
        let waiting = self
            .adopting
            .iter()
            .find(|(_, a)| {
                a.conn.is_some() && matches!(a.slot, Some((ar, Ok(s))) if ar == r && s == slot)
            })
            .map(|(t, _)| *t);
        if let Some(token) = waiting {
            self.try_adopt(token);
        }
    }
}
