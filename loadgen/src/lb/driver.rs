//! One balancer thread: a [`Driver`] owns a ring, its listener and its
//! pairs; it accepts (multishot; a full table waits for the next tick),
//! picks a usable backend round robin for each new connection, binds the
//! upstream to the next source address and connects, and dispatches the
//! pairs' completions to relay.rs. Every 50 ms it re-reads the backends
//! when their version changed.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use net::uring::{Completion, Ring};

use super::pair::{
    sockaddr, ud, ud_parts, Pair, St, K_ACCEPT, K_CLOSE_RAW, K_RECV, K_SHUT, K_SOCKET, K_TICK,
};
use super::shared::Shared;

pub(super) struct Driver {
    pub(super) ring: Ring,
    pub(super) listener: std::net::TcpListener,
    pub(super) accept_armed: bool,
    /// Boxed: the kernel holds pointers to `bind`, `dst` and the buffers.
    pub(super) pairs: Box<[Pair]>,
    pub(super) free: Vec<usize>,
    pub(super) sources: Vec<Ipv4Addr>,
    pub(super) next_source: usize,
    pub(super) next_backend: usize,
    pub(super) sh: Arc<Shared>,
    pub(super) version: u64,
    pub(super) usable: Vec<(usize, SocketAddrV4)>,
}

impl Driver {
    pub(super) fn new(
        t: usize,
        ring: Ring,
        listener: std::net::TcpListener,
        pairs: usize,
        sources: Vec<Ipv4Addr>,
        sh: Arc<Shared>,
    ) -> Driver {
        Driver {
            ring,
            listener,
            accept_armed: false,
            pairs: (0..pairs).map(|_| Pair::new()).collect(),
            free: (0..pairs).rev().collect(),
            sources,
            next_source: t,
            next_backend: t,
            sh,
            version: 0,
            usable: Vec::new(),
        }
    }

    pub(super) fn run(mut self) {
        self.ring.tick(Duration::from_millis(50), ud(K_TICK, 0, 0));
        self.arm_accept();
        let mut cqes: Vec<Completion> = Vec::with_capacity(4096);
        loop {
            if self.ring.submit_and_wait(1).is_err() {
                std::thread::sleep(Duration::from_millis(1));
            }
            cqes.clear();
            self.ring.drain(&mut cqes);
            for &c in &cqes {
                self.on_completion(c);
            }
            if self.sh.stop.load(Relaxed) {
                // The ring's drop closes every socket in its table.
                let open = self.pairs.iter().filter(|p| p.st != St::Free).count() as u64;
                self.sh
                    .open
                    .fetch_sub(open.min(self.sh.open.load(Relaxed)), Relaxed);
                return;
            }
        }
    }

    pub(super) fn arm_accept(&mut self) {
        if !self.accept_armed {
            self.accept_armed = true;
            self.ring
                .accept_multi(self.listener.as_raw_fd(), ud(K_ACCEPT, 0, 0));
        }
    }

    pub(super) fn refresh(&mut self) {
        let v = self.sh.version.load(Relaxed);
        if v == self.version {
            return;
        }
        self.version = v;
        self.usable = self
            .sh
            .backends
            .lock()
            .unwrap()
            .iter()
            .enumerate()
            .filter(|(_, b)| b.b.enabled && b.healthy)
            .map(|(i, b)| (i, b.b.gateway))
            .collect();
    }

    pub(super) fn on_completion(&mut self, c: Completion) {
        let (kind, gen, i) = ud_parts(c.user_data);
        match kind {
            K_TICK => {
                self.refresh();
                if !self.accept_armed && !self.free.is_empty() {
                    self.arm_accept();
                }
            }
            K_ACCEPT => {
                if !c.more() {
                    self.accept_armed = false;
                    // ENFILE (table full) waits for the next tick.
                    if c.result != -libc::ENFILE {
                        self.arm_accept();
                    }
                }
                if c.result >= 0 {
                    self.on_accept(c.result as u32);
                }
            }
            K_CLOSE_RAW | K_SHUT => {}
            _ => {
                if i >= self.pairs.len() || self.pairs[i].gen != gen {
                    if kind == K_SOCKET && c.result >= 0 {
                        self.ring.close(c.result as u32, ud(K_CLOSE_RAW, 0, 0));
                    }
                    return;
                }
                self.on_pair(kind, i, c);
            }
        }
    }

    pub(super) fn on_accept(&mut self, slot: u32) {
        self.sh.accepted.fetch_add(1, Relaxed);
        self.refresh();
        let Some(i) = self.free.pop() else {
            self.sh.refused_full.fetch_add(1, Relaxed);
            self.ring.close(slot, ud(K_CLOSE_RAW, 0, 0));
            return;
        };
        if self.usable.is_empty() {
            self.free.push(i);
            self.sh.no_backend.fetch_add(1, Relaxed);
            self.ring.close(slot, ud(K_CLOSE_RAW, 0, 0));
            return;
        }
        let (b, dst) = self.usable[self.next_backend % self.usable.len()];
        self.next_backend = self.next_backend.wrapping_add(1);
        self.sh.per_backend[b].fetch_add(1, Relaxed);
        self.sh.open.fetch_add(1, Relaxed);
        let src = if self.sources.is_empty() {
            Ipv4Addr::UNSPECIFIED
        } else {
            self.next_source = self.next_source.wrapping_add(1);
            self.sources[self.next_source % self.sources.len()]
        };
        let p = &mut self.pairs[i];
        debug_assert_eq!(p.st, St::Free);
        p.st = St::Connecting;
        p.slot = [Some(slot), None];
        p.bind = sockaddr(SocketAddrV4::new(src, 0));
        p.dst = sockaddr(dst);
        for s in 0..2 {
            p.queue[s].clear();
            p.inflight[s].clear();
            p.off[s] = 0;
            p.sending[s] = false;
            p.eof[s] = false;
        }
        p.socket_inflight = true;
        p.connect_inflight = false;
        p.closes = 0;
        let gen = p.gen;
        self.ring.recv_multi(slot, ud(K_RECV, gen, i));
        self.ring.socket_alloc(ud(K_SOCKET, gen, i));
    }
}
