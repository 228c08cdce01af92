//! Admission: accepting into the ring's fixed table while it has room,
//! answering 503 past the admission limit, and the slot accounting other
//! workers read before handing a connection to this ring.

use super::*;

impl Worker {
    /// Accept into the fixed table while it has room below the admission
    /// limit; past it, turn connections away with a 503 instead of leaving
    /// them in the listen queue (an accept into a full table fails only
    /// after taking the connection off the queue, losing it silently).
    pub(super) fn admission(&mut self, r: usize) {
        if self.draining_until.is_some() {
            return;
        }
        let ud_accept = ud(Op::Accept, r as u8, 0, 0);
        let ud_reject = ud(Op::Reject, r as u8, 0, 0);
        let rs = &mut self.rings[r];
        if rs.used >= rs.admit_limit {
            if rs.accepting && !rs.cancelling_accept {
                rs.cancelling_accept = true;
                rs.ring
                    .cancel_user_data(ud_accept, ud(Op::Cancel, r as u8, 0, 0));
            }
            if !rs.accepting && !rs.rejecting {
                rs.rejecting = true;
                rs.ring.accept_plain(rs.listener.as_raw_fd(), ud_reject);
            }
        } else {
            if rs.rejecting && !rs.cancelling_reject {
                rs.cancelling_reject = true;
                rs.ring
                    .cancel_user_data(ud_reject, ud(Op::Cancel, r as u8, 0, 0));
            }
            if !rs.rejecting && !rs.accepting {
                self.arm_accept(r);
            }
        }
    }

    /// Track the slots in use in ring `r`'s table, and publish it so other
    /// workers do not hand connections to a full ring.
    pub(super) fn add_used(&mut self, r: usize, delta: i32) {
        let rs = &mut self.rings[r];
        rs.used = rs.used.checked_add_signed(delta).expect("slot accounting");
        self.shared.ring_load[self.id][r].store(rs.used, Ordering::Relaxed);
    }

    pub(super) fn arm_accept(&mut self, r: usize) {
        let rs = &mut self.rings[r];
        if rs.accepting || self.draining_until.is_some() {
            return;
        }
        rs.accepting = true;
        rs.ring
            .accept_multi(rs.listener.as_raw_fd(), ud(Op::Accept, r as u8, 0, 0));
    }

    pub(super) fn on_accept(&mut self, r: usize, c: Completion) {
        if !c.more() {
            self.rings[r].accepting = false;
            self.rings[r].cancelling_accept = false;
        }
        if c.result >= 0 {
            self.add_used(r, 1);
        }
        if c.result < 0 {
            WorkerMetrics::inc(&self.metrics().accept_errors);
            let err = c.error().expect("negative");
            if c.result == -libc::ENFILE || c.result == -libc::EMFILE {
                tracing::warn!(
                    worker = self.id,
                    ring = r,
                    "fixed file table full: answering 503 on this ring until a slot frees"
                );
                // Adoptions took the headroom: turn connections away until slots free.
                self.admission(r);
            } else if c.result != -libc::ECANCELED {
                tracing::warn!(worker = self.id, ring = r, error = %err, "accept failed");
            }
            self.admission(r);
            return;
        }
        self.admission(r);
        let slot = c.result as u32;
        if self.rings[r].conns[slot as usize].is_some() {
            // The kernel freed this slot (a close or a handover of ours) and
            // gave it to this socket before that completion reached us: the
            // old connection is still in our table. Wait for it to leave.
            WorkerMetrics::inc(&self.metrics().slot_waits);
            self.rings[r].accepts_waiting.push(slot);
            return;
        }
        self.install_accepted(r, slot);
    }

    /// A socket accepted into `slot` (free in our table) becomes a connection.
    pub(super) fn install_accepted(&mut self, r: usize, slot: u32) {
        let now = self.now_ms();
        let tls = match &self.shared.tls {
            Some(cfg) => match TlsSession::new(cfg.clone()) {
                Ok(t) => Some(Box::new(t)),
                Err(e) => {
                    tracing::error!(error = %e, "TLS session setup failed");
                    self.rings[r]
                        .ring
                        .close(slot, ud(Op::Close, r as u8, 0, slot));
                    return;
                }
            },
            None => None,
        };
        let rs = &mut self.rings[r];
        let gen = rs.gens[slot as usize].wrapping_add(1);
        rs.gens[slot as usize] = gen;
        assert!(
            rs.conns[slot as usize].is_none(),
            "an accepted socket is installed only in a slot our table has freed"
        );
        rs.conns[slot as usize] = Some(Box::new(Conn::new(
            gen,
            tls,
            now + self.shared.cfg.limits.handshake_timeout_ms,
        )));
        rs.ring.recv_multi(slot, ud(Op::Recv, r as u8, gen, slot));
        self.open += 1;
        WorkerMetrics::inc(&self.metrics().connections_accepted);
        WorkerMetrics::inc(&self.metrics().connections_open);
        if self.draining_until.is_some() {
            self.begin_close(
                ConnKey {
                    ring: r as u8,
                    gen,
                    slot,
                },
                None,
            );
        }
    }
}
