//! A fleet thread's socket operations on a slot: open (socket, bind,
//! SO_RCVBUF and connect as one linked chain on a fixed slot), arm the
//! receive, send what the session queued (one send in flight per slot),
//! feed received bytes to the session, and close (shutdown + close; the
//! session schedules its reconnect).

use std::sync::atomic::Ordering::Relaxed;

use super::driver::Driver;
use super::slot::{
    sockaddr, ud, Sock, K_BIND, K_CLOSE, K_CONNECT, K_RECV, K_RECV1, K_SEND, K_SHUT, K_SOCKET,
    K_SOCKOPT,
};
use crate::session::{Action, Phase};

impl Driver {
    pub(super) fn feed(&mut self, i: usize, data: &[u8], now: u64) {
        let world = self.sh.world.clone();
        let slot = &mut self.slots[i];
        let before = slot.s.phase;
        let act = slot.s.feed(data, now, &world, &mut self.rec);
        if slot.s.phase != before {
            slot.phase_since = now;
        }
        if act == Action::Close {
            self.close(i, now, false);
        } else {
            self.flush_out(i);
        }
    }

    pub(super) fn arm_recv(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        if slot.recv_armed || slot.sock != Sock::Open {
            return;
        }
        slot.recv_armed = true;
        let gen = slot.gen;
        if let Some(buf) = slot.slow_buf.as_mut() {
            // SAFETY: the buffer is owned by the slot, which lives in a boxed
            // slice for the life of the ring.
            unsafe {
                self.ring.recv(
                    i as u32,
                    buf.as_mut_ptr(),
                    buf.len() as u32,
                    ud(K_RECV1, gen, i),
                )
            };
        } else {
            self.ring.recv_multi(i as u32, ud(K_RECV, gen, i));
        }
    }

    pub(super) fn flush_out(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        if slot.sending || slot.sock != Sock::Open || slot.s.out.is_empty() {
            return;
        }
        std::mem::swap(&mut slot.send_buf, &mut slot.s.out);
        slot.s.out.clear();
        slot.send_off = 0;
        self.submit_send(i);
    }

    pub(super) fn submit_send(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        slot.sending = true;
        let rest = &slot.send_buf[slot.send_off..];
        // SAFETY: send_buf is not touched until the completion (sending).
        unsafe {
            self.ring.send(
                i as u32,
                rest.as_ptr(),
                rest.len() as u32,
                ud(K_SEND, slot.gen, i),
            )
        };
    }

    pub(super) fn open(&mut self, i: usize, now: u64) {
        let slot = &mut self.slots[i];
        slot.gen = slot.gen.wrapping_add(1) & 0xff_ffff;
        slot.sock = Sock::Opening;
        slot.recv_armed = false;
        slot.sending = false;
        slot.send_buf.clear();
        slot.send_off = 0;
        slot.phase_since = now;
        slot.dst = sockaddr(self.cfg.nodes[slot.s.node % self.cfg.nodes.len()]);
        slot.s.on_connecting();
        let bind = (!self.cfg.sources.is_empty()).then_some(&slot.bind as *const libc::sockaddr_in);
        let rcvbuf = slot.rcvbuf.as_ref().map(|v| v as *const i32);
        let gen = slot.gen;
        // SAFETY: the addresses and the option value live in the boxed slot slice.
        unsafe {
            self.ring.socket_connect_with(
                i as u32,
                bind,
                rcvbuf,
                &slot.dst,
                [
                    ud(K_SOCKET, gen, i),
                    ud(K_BIND, gen, i),
                    ud(K_SOCKOPT, gen, i),
                    ud(K_CONNECT, gen, i),
                ],
            )
        };
    }

    pub(super) fn close(&mut self, i: usize, now: u64, connect_failed: bool) {
        let nodes = self.cfg.nodes.len();
        let slot = &mut self.slots[i];
        if matches!(slot.sock, Sock::None | Sock::Closing) {
            return;
        }
        let gen = slot.gen;
        self.ring
            .shutdown_and_close(i as u32, ud(K_SHUT, gen, i), ud(K_CLOSE, gen, i));
        slot.sock = Sock::Closing;
        slot.recv_armed = false;
        if slot.slow_buf.is_some()
            && slot.s.streaming()
            && self
                .sh
                .slow_lost_ns
                .compare_exchange(0, now, Relaxed, Relaxed)
                .is_ok()
        {
            self.sh
                .slow_lost_code
                .store(slot.s.last_close_code as u64, Relaxed);
        }
        if connect_failed || slot.s.phase == Phase::Connecting || slot.s.phase == Phase::Upgrading {
            // Count a refused upgrade (e.g. 503) like a failed connect.
            slot.s.on_lost(now, connect_failed, nodes, &mut self.rec);
        } else {
            slot.s.on_lost(now, false, nodes, &mut self.rec);
        }
    }
}
