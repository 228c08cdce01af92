//! A pair's traffic: the upstream socket and connect, bytes received on
//! one side queued for the other (a queue over [`MAX_QUEUED`] closes the
//! pair), one send in flight per direction, half-closes passed on, and
//! the teardown (shutdown + close of both slots) once both directions are
//! done or one failed; the pair is freed when nothing is in flight.

use std::sync::atomic::Ordering::Relaxed;

use net::uring::Completion;

use super::driver::Driver;
use super::pair::{
    ud, St, K_BIND, K_CLOSE, K_CONNECT, K_RECV, K_SEND, K_SHUT, K_SOCKET, MAX_QUEUED,
};

impl Driver {
    pub(super) fn on_pair(&mut self, kind: u64, i: usize, c: Completion) {
        let gen = self.pairs[i].gen;
        match kind {
            K_SOCKET => {
                self.pairs[i].socket_inflight = false;
                if c.result < 0 {
                    self.sh.upstream_failures.fetch_add(1, Relaxed);
                    self.teardown(i);
                    return;
                }
                let slot = c.result as u32;
                let p = &mut self.pairs[i];
                if p.st != St::Connecting {
                    self.ring.close(slot, ud(K_CLOSE, gen, i));
                    self.pairs[i].closes += 1;
                    return;
                }
                p.slot[1] = Some(slot);
                p.connect_inflight = true;
                let bind =
                    (!self.sources.is_empty()).then_some(&p.bind as *const libc::sockaddr_in);
                // SAFETY: bind and dst live in the boxed pair slice, which is
                // not reused until the connect has completed (busy()).
                unsafe {
                    self.ring.bind_connect(
                        slot,
                        bind,
                        &p.dst,
                        [ud(K_BIND, gen, i), ud(K_CONNECT, gen, i)],
                    )
                };
            }
            K_BIND => {}
            K_CONNECT => {
                self.pairs[i].connect_inflight = false;
                if self.pairs[i].st != St::Connecting {
                    self.maybe_free(i);
                    return;
                }
                if c.result < 0 {
                    self.sh.upstream_failures.fetch_add(1, Relaxed);
                    self.teardown(i);
                    return;
                }
                self.pairs[i].st = St::Open;
                let slot = self.pairs[i].slot[1].expect("connected");
                self.ring.recv_multi(slot, ud(K_RECV + 1, gen, i));
                self.flush(i, 1);
                self.maybe_finish(i);
            }
            k if k == K_RECV || k == K_RECV + 1 => {
                let side = (k - K_RECV) as usize;
                if let Some(bid) = c.buffer_id() {
                    if c.result > 0 && matches!(self.pairs[i].st, St::Connecting | St::Open) {
                        let n = c.result as usize;
                        let data = self.ring.buffer(bid, n).to_vec();
                        self.ring.recycle(bid);
                        if side == 0 {
                            self.sh.bytes_up.fetch_add(n as u64, Relaxed);
                        } else {
                            self.sh.bytes_down.fetch_add(n as u64, Relaxed);
                        }
                        let p = &mut self.pairs[i];
                        p.queue[1 - side].extend_from_slice(&data);
                        if p.queue[1 - side].len() > MAX_QUEUED {
                            self.sh.overflows.fetch_add(1, Relaxed);
                            self.teardown(i);
                            return;
                        }
                        self.flush(i, 1 - side);
                    } else {
                        self.ring.recycle(bid);
                    }
                }
                if !c.more() && matches!(self.pairs[i].st, St::Connecting | St::Open) {
                    if c.result == -libc::ENOBUFS {
                        if let Some(slot) = self.pairs[i].slot[side] {
                            self.ring.recv_multi(slot, ud(K_RECV + side as u64, gen, i));
                        }
                    } else {
                        self.pairs[i].eof[side] = true;
                        self.maybe_finish(i);
                    }
                }
            }
            k if k == K_SEND || k == K_SEND + 1 => {
                let side = (k - K_SEND) as usize;
                self.pairs[i].sending[side] = false;
                if self.pairs[i].st == St::Closing {
                    self.maybe_free(i);
                    return;
                }
                if c.result < 0 {
                    self.teardown(i);
                    return;
                }
                let p = &mut self.pairs[i];
                p.off[side] += c.result as usize;
                if p.off[side] < p.inflight[side].len() {
                    self.submit_send(i, side);
                } else {
                    p.inflight[side].clear();
                    p.off[side] = 0;
                    self.flush(i, side);
                    self.maybe_finish(i);
                }
            }
            K_CLOSE => {
                let p = &mut self.pairs[i];
                p.closes = p.closes.saturating_sub(1);
                self.maybe_free(i);
            }
            _ => {}
        }
    }

    /// Start sending what is queued for `side`, if nothing is in flight.
    pub(super) fn flush(&mut self, i: usize, side: usize) {
        let p = &mut self.pairs[i];
        if p.sending[side] || p.queue[side].is_empty() || p.slot[side].is_none() {
            return;
        }
        if side == 1 && p.st != St::Open {
            return; // the upstream is not connected yet
        }
        std::mem::swap(&mut p.queue[side], &mut p.inflight[side]);
        p.off[side] = 0;
        self.submit_send(i, side);
    }

    pub(super) fn submit_send(&mut self, i: usize, side: usize) {
        let p = &mut self.pairs[i];
        let Some(slot) = p.slot[side] else { return };
        p.sending[side] = true;
        let rest = &p.inflight[side][p.off[side]..];
        // SAFETY: `inflight[side]` is not touched until the completion
        // (`sending`), and the pair is not reused while a send is in flight.
        unsafe {
            self.ring.send(
                slot,
                rest.as_ptr(),
                rest.len() as u32,
                ud(K_SEND + side as u64, p.gen, i),
            )
        };
    }

    /// A side that closed: once what it sent has reached the other side,
    /// the pair is done.
    pub(super) fn maybe_finish(&mut self, i: usize) {
        let p = &self.pairs[i];
        let drained = |s: usize| !p.sending[s] && p.queue[s].is_empty();
        let done = (p.eof[0] && (p.st != St::Open || drained(1))) || (p.eof[1] && drained(0));
        if done {
            self.teardown(i);
        }
    }

    pub(super) fn teardown(&mut self, i: usize) {
        let p = &mut self.pairs[i];
        if matches!(p.st, St::Closing | St::Free) {
            return;
        }
        p.st = St::Closing;
        let gen = p.gen;
        for s in 0..2 {
            if let Some(slot) = p.slot[s].take() {
                p.closes += 1;
                self.ring
                    .shutdown_and_close(slot, ud(K_SHUT, gen, i), ud(K_CLOSE, gen, i));
            }
        }
        self.sh.open.fetch_sub(1, Relaxed);
        self.maybe_free(i);
    }

    pub(super) fn maybe_free(&mut self, i: usize) {
        let p = &mut self.pairs[i];
        if p.st == St::Closing && !p.busy() {
            p.st = St::Free;
            p.gen = p.gen.wrapping_add(1) & 0xff_ffff;
            p.queue[0] = Vec::new();
            p.queue[1] = Vec::new();
            p.inflight[0] = Vec::new();
            p.inflight[1] = Vec::new();
            self.free.push(i);
        }
    }
}
