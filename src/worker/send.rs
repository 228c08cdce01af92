//! The worker's half of the send path: queueing connections to flush,
//! one gathered send per connection per turn (plain, TLS or compressed),
//! short writes, POLLOUT waits and the send completions.

use super::*;
use crate::delivery::latency;

impl Worker {
    pub(super) fn on_send(&mut self, key: ConnKey, c: Completion) {
        if !self.graveyard.is_empty() {
            if let Some((_buf, slot)) = self.graveyard.remove(&c.user_data) {
                // The kernel is done with a dead connection's buffers.
                if let Some(id) = slot {
                    self.pool.put(id);
                }
                return;
            }
        }
        let oldest = self.fan.arena.oldest();
        let metrics = &self.shared.metrics[self.id];
        let Some(conn) = conn_in(&mut self.rings, key) else {
            return;
        };
        let slot_id = match std::mem::replace(&mut conn.send, SendState::Idle) {
            SendState::InFlight(slot) => slot,
            _ => None,
        };
        if c.result == -libc::EAGAIN {
            // Socket buffer full: nothing went; wait until it drains.
            if let Some(id) = slot_id {
                self.pool.put(id);
            }
            self.wait_writable(key);
            return;
        }
        if c.result < 0 {
            if let Some(id) = slot_id {
                self.pool.put(id);
            }
            self.finish(key);
            return;
        }
        let sent = c.result as usize;
        WorkerMetrics::add(&metrics.bytes_out, sent as u64);
        WorkerMetrics::inc(&metrics.sends);
        let short;
        // Ring entries still unsent after this send (u32::MAX: not known).
        let mut unsent = u32::MAX;
        match slot_id {
            None => {
                // TLS or compression: wire-form bytes from `wire`.
                conn.wire_off += sent;
                short = conn.wire_off < conn.wire.len();
                if !short {
                    conn.wire.clear();
                    conn.wire_off = 0;
                    if conn.wire_timed > 0 {
                        metrics.delivery.sent(
                            u64::from(conn.wire_timed),
                            conn.wire_submit_ns,
                            latency::unix_ns(),
                        );
                        conn.wire_timed = 0;
                    }
                }
            }
            Some(id) => {
                let slot = self.pool.slot(id);
                let (control, entries, partial) = sendpath::account(slot, sent, conn.partial);
                WorkerMetrics::add(&metrics.sent_frames, entries as u64);
                if let (ConnState::WebSocket(_, Some(sid)), true) = (&conn.state, entries > 0) {
                    if let Some(s) = self.fan.get_mut(*sid) {
                        let (e, now) = (entries as usize, latency::unix_ns());
                        let n = metrics.delivery.frames_done(
                            &slot.stamps[..e],
                            &slot.seqs[..e],
                            &mut s.timed_seq,
                            slot.submit_ns,
                            now,
                        );
                        metrics.delivery.sent(n, slot.submit_ns, now);
                    }
                }
                let torn = slot.entries > 0 && slot.min_pos < oldest;
                let total_entries = slot.entries;
                let wanted = slot.msg.msg_iovlen;
                self.pool.put(id);
                conn.wire_off += control;
                if conn.wire_off >= conn.wire.len() {
                    conn.wire.clear();
                    conn.wire_off = 0;
                }
                conn.partial = partial;
                short = entries < total_entries || conn.wire_off > 0 || (wanted > 0 && sent == 0);
                let sid = match &conn.state {
                    ConnState::WebSocket(_, sid) => *sid,
                    _ => None,
                };
                unsent = match sid {
                    Some(sid) => self.fan.mark_sent(sid, entries),
                    None => 0,
                };
                if torn {
                    // The arena wrapped while the kernel read from it: what
                    // went out may be corrupt. The session can Resume.
                    self.begin_close(
                        key,
                        Some(Close::new(
                            CloseCode::UnknownError,
                            "send raced an arena wrap: resume",
                        )),
                    );
                    return;
                }
            }
        }
        let Some(conn) = conn_in(&mut self.rings, key) else {
            return;
        };
        if conn.wire.capacity() > KEEP_BUFFER && conn.wire.is_empty() {
            conn.wire = Vec::new();
        }
        if let Some(close) = conn.close_pending.take() {
            self.begin_close(key, close.into_close());
            return;
        }
        if conn.handover.is_some() {
            self.try_pass(key);
        } else if short {
            self.wait_writable(key);
        } else if unsent > 0
            || !conn.out.is_empty()
            || !conn.wire.is_empty()
            || conn.life.shutting()
        {
            self.queue_flush(key);
        }
        // Else nothing is left to send: the next delivery queues the connection.
    }

    pub(super) fn wait_writable(&mut self, key: ConnKey) {
        let Some(conn) = self.conn(key) else { return };
        if conn.send == SendState::WaitingWritable || conn.life.closed() {
            return;
        }
        conn.send = SendState::WaitingWritable;
        self.rings[key.ring as usize]
            .ring
            .poll_writable(key.slot, ud(Op::Writable, key.ring, key.gen, key.slot));
    }

    /// Note that a connection has something to send; sends go out at the end of the turn.
    pub(super) fn queue_flush(&mut self, key: ConnKey) {
        if let Some(conn) = self.conn(key) {
            if !conn.queued {
                conn.queued = true;
                self.queue.push(key);
            }
        }
    }

    /// One send per connection per turn: its control frames, then a batch of
    /// its ring's unsent entries, in one vectored send (plain) or one
    /// encrypted buffer (TLS).
    pub(super) fn flush(&mut self) -> bool {
        // Connections deferred for lack of a send slot go first. The three
        // lists keep their capacity (every connection fits in each), so
        // queueing never allocates; completions reaped below queue into
        // `queue` for the next flush.
        debug_assert!(self.flushing.is_empty());
        std::mem::swap(&mut self.flushing, &mut self.deferred);
        self.flushing.append(&mut self.queue);
        let mut reaped = false;
        for i in 0..self.flushing.len() {
            let key = self.flushing[i];
            if self.unreaped >= REAP_EVERY {
                reaped |= self.reap();
            }
            let Some(conn) = conn_in(&mut self.rings, key) else {
                continue;
            };
            conn.queued = false;
            if conn.send != SendState::Idle || conn.life.closed() || conn.handover.is_some() {
                continue;
            }
            // Most visits from here push a send.
            self.unreaped += 1;
            let ud_send = ud(Op::Send, key.ring, key.gen, key.slot);
            if (conn.tls.is_some() || conn.compress.is_some()) && !conn.wire.is_empty() {
                // A short send left bytes that are already in wire form
                // (ciphertext, compressed frames): they go first, as they are.
                conn.send = SendState::InFlight(None);
                let rest = &conn.wire[conn.wire_off..];
                let (ptr, len) = (rest.as_ptr(), rest.len() as u32);
                // SAFETY: `wire` is untouched until the completion (or the graveyard holds it).
                unsafe {
                    self.rings[key.ring as usize]
                        .ring
                        .send(key.slot, ptr, len, ud_send)
                };
                continue;
            }
            if conn.compress.is_some() {
                self.flush_compressed(key);
                continue;
            }
            if conn.wire.is_empty() && !conn.out.is_empty() {
                std::mem::swap(&mut conn.out, &mut conn.wire);
                conn.wire_off = 0;
            }
            let sid = match &conn.state {
                ConnState::WebSocket(_, sid) => *sid,
                _ => None,
            };
            let ring = sid
                .and_then(|sid| self.fan.get(sid))
                .map(|s| (&s.ring, &self.fan.slab));
            let has_entries = ring.map(|(r, _)| r.len_unsent() > 0).unwrap_or(false);
            if conn.wire.is_empty()
                && !has_entries
                && conn.tls.as_ref().map(|t| !t.wants_write()).unwrap_or(true)
            {
                if conn.life.take_write_shut() {
                    let r = &mut self.rings[key.ring as usize].ring;
                    r.shutdown(
                        key.slot,
                        libc::SHUT_WR,
                        ud(Op::Shutdown, key.ring, key.gen, key.slot),
                    );
                }
                continue;
            }
            let Some(id) = self.pool.take() else {
                // Every slot is in the kernel: try again next turn.
                conn.queued = true;
                self.deferred.extend_from_slice(&self.flushing[i..]);
                break;
            };
            let slot = self.pool.slot(id);
            let built = sendpath::build(
                slot,
                &conn.wire[conn.wire_off..],
                ring,
                &self.fan.arena,
                conn.partial,
            );
            let total = match built {
                Ok(t) => t,
                Err(sendpath::Lost) => {
                    self.pool.put(id);
                    self.begin_close(
                        key,
                        Some(Close::new(
                            CloseCode::UnknownError,
                            "events were overwritten before they could be sent: resume",
                        )),
                    );
                    continue;
                }
            };
            match conn.tls.as_deref_mut() {
                Some(tls) => {
                    // TLS encrypts a copy: everything in the batch counts as sent now.
                    self.gather.clear();
                    sendpath::gather(slot, &mut self.gather);
                    let (_, entries, _) = sendpath::account(slot, total, conn.partial);
                    if let Some(s) = sid
                        .and_then(|sid| self.fan.get_mut(sid))
                        .filter(|_| entries > 0)
                    {
                        let (e, now) = (entries as usize, latency::unix_ns());
                        conn.wire_timed += self.shared.metrics[self.id].delivery.frames_done(
                            &slot.stamps[..e],
                            &slot.seqs[..e],
                            &mut s.timed_seq,
                            now,
                            now,
                        ) as u32;
                        conn.wire_submit_ns = now;
                    }
                    self.pool.put(id);
                    conn.wire.clear();
                    conn.wire_off = 0;
                    conn.partial = 0;
                    if !self.gather.is_empty() && tls.write_plaintext(&[&self.gather]).is_err() {
                        self.begin_close(key, None);
                        continue;
                    }
                    tls.take_ciphertext(&mut conn.wire);
                    if let Some(sid) = sid {
                        self.fan.mark_sent(sid, entries);
                    }
                    if conn.wire.is_empty() {
                        continue;
                    }
                    conn.send = SendState::InFlight(None);
                    let (ptr, len) = (conn.wire.as_ptr(), conn.wire.len() as u32);
                    // SAFETY: `wire` is untouched until the completion (or the graveyard holds it).
                    unsafe {
                        self.rings[key.ring as usize]
                            .ring
                            .send(key.slot, ptr, len, ud_send)
                    };
                }
                None => {
                    if total == 0 {
                        self.pool.put(id);
                        continue;
                    }
                    conn.send = SendState::InFlight(Some(id));
                    // Only frames are timed: a REST answer or a control
                    // frame alone costs no clock read.
                    if slot.entries > 0 {
                        slot.submit_ns = latency::unix_ns();
                    }
                    let msg = &slot.msg as *const libc::msghdr;
                    // SAFETY: the slot, `wire` and the arena bytes stay valid until the
                    // completion: the slot is held, `wire` is not touched while sending,
                    // and a non-waiting send finishes before the arena can move on.
                    unsafe {
                        self.rings[key.ring as usize]
                            .ring
                            .sendmsg_nowait(key.slot, msg, ud_send)
                    };
                }
            }
        }
        self.flushing.clear();
        reaped
    }

    /// `flush` for a connection with transport compression (its `wire` is
    /// empty): its control frames, then a batch of its ring's unsent entries,
    /// each compressed into one binary frame in `wire` (or, under TLS, in
    /// the worker's scratch and then encrypted into `wire`), sent in one send.
    pub(super) fn flush_compressed(&mut self, key: ConnKey) {
        let Some(conn) = conn_in(&mut self.rings, key) else {
            return;
        };
        let sid = match &conn.state {
            ConnState::WebSocket(_, sid) => *sid,
            _ => None,
        };
        let tls = conn.tls.is_some();
        let dst = if tls {
            self.gather.clear();
            &mut self.gather
        } else {
            &mut conn.wire
        };
        let comp = conn
            .compress
            .as_deref_mut()
            .expect("a compressed connection");
        let raw = conn.out_raw.min(conn.out.len());
        dst.extend_from_slice(&conn.out[..raw]);
        let mut failed = false;
        let (mut bytes_in, mut bytes_out) = (0, 0);
        match compress::reframe(comp, &conn.out[raw..], dst) {
            Ok((i, o)) => (bytes_in, bytes_out) = (i, o),
            Err(e) => {
                tracing::warn!(error = %e, "compressing control frames");
                failed = true;
            }
        }
        conn.out.clear();
        conn.out_raw = 0;
        let mut done = sendpath::Compressed::default();
        if !failed {
            if let Some(s) = sid.and_then(|sid| self.fan.get(sid)) {
                match sendpath::build_compressed(
                    comp,
                    &s.ring,
                    &self.fan.slab,
                    &self.fan.arena,
                    dst,
                ) {
                    Ok(d) => done = d,
                    Err(e) => {
                        tracing::warn!(error = %e, "compressing dispatches");
                        failed = true;
                    }
                }
            }
        }
        let m = &self.shared.metrics[self.id];
        WorkerMetrics::add(&m.compress_bytes_in, bytes_in + done.bytes_in);
        WorkerMetrics::add(&m.compress_bytes_out, bytes_out + done.bytes_out);
        let mut timed = 0;
        let now = if done.entries > 0 {
            latency::unix_ns()
        } else {
            0
        };
        if let (Some(sid), true) = (sid, done.entries > 0) {
            if let Some(s) = self.fan.get_mut(sid) {
                let e = done.entries as usize;
                timed = m.delivery.frames_done(
                    &done.stamps[..e],
                    &done.seqs[..e],
                    &mut s.timed_seq,
                    now,
                    now,
                );
            }
            self.fan.mark_sent(sid, done.entries);
        }
        let conn = conn_in(&mut self.rings, key).expect("live");
        if timed > 0 {
            conn.wire_timed += timed as u32;
            conn.wire_submit_ns = now;
        }
        if let Some(tls) = conn.tls.as_deref_mut() {
            if !self.gather.is_empty() && tls.write_plaintext(&[&self.gather]).is_err() {
                self.begin_close(key, None);
                return;
            }
            tls.take_ciphertext(&mut conn.wire);
        }
        conn.wire_off = 0;
        if conn.wire.is_empty() {
            if failed || done.lost {
                self.compressed_failed(key, failed);
            } else if conn.life.take_write_shut() {
                self.rings[key.ring as usize].ring.shutdown(
                    key.slot,
                    libc::SHUT_WR,
                    ud(Op::Shutdown, key.ring, key.gen, key.slot),
                );
            }
            return;
        }
        conn.send = SendState::InFlight(None);
        let (ptr, len) = (conn.wire.as_ptr(), conn.wire.len() as u32);
        // SAFETY: `wire` is untouched until the completion (or the graveyard holds it).
        unsafe {
            self.rings[key.ring as usize].ring.send(
                key.slot,
                ptr,
                len,
                ud(Op::Send, key.ring, key.gen, key.slot),
            )
        };
        if failed || done.lost {
            // Closes once this send completes (begin_close waits for it).
            self.compressed_failed(key, failed);
        }
    }

    pub(super) fn compressed_failed(&mut self, key: ConnKey, failed: bool) {
        self.begin_close(
            key,
            Some(Close::new(
                CloseCode::UnknownError,
                if failed {
                    "compression failed: resume"
                } else {
                    "events were overwritten before they could be sent: resume"
                },
            )),
        );
    }
}
