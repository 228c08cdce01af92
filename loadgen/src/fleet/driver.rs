//! One fleet thread: a [`Driver`] owns an io_uring, its sessions' slots
//! (slot index == fixed-file index) and a [`Recorder`]; it runs until the
//! fleet stops, turning completions into session input (multishot receive
//! into provided buffers, a plain receive for paced readers), the results
//! of connects and sends, and the 20 ms tick (tick.rs). Operations of an
//! earlier connection of a slot are told apart by the generation.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use net::uring::{Completion, Ring};

use super::config::FleetConfig;
use super::shared::Shared;
use super::slot::{
    sockaddr, ud, ud_parts, Slot, Sock, K_BIND, K_CLOSE, K_CONNECT, K_RECV, K_RECV1, K_SEND,
    K_SOCKET, K_SOCKOPT, K_TICK,
};
use crate::clock::now_ns;
use crate::session::{Phase, Recorder, Session};

pub(super) struct Driver {
    pub(super) t: usize,
    pub(super) ring: Ring,
    /// Boxed so the addresses given to the kernel never move.
    pub(super) slots: Box<[Slot]>,
    pub(super) cfg: FleetConfig,
    pub(super) sh: Arc<Shared>,
    pub(super) rec: Recorder,
    pub(super) hosts: Vec<String>,
    pub(super) collect_seen: u64,
    pub(super) reported_socket_error: bool,
    pub(super) reported_refusal: bool,
    pub(super) gate: Option<Arc<crate::gate::Gate>>,
    pub(super) scratch: Vec<u8>,
    pub(super) closed_all: bool,
}

impl Driver {
    pub(super) fn new(
        t: usize,
        ring: Ring,
        part: Vec<(u32, u32, usize)>,
        cfg: FleetConfig,
        sh: Arc<Shared>,
        gate: Option<Arc<crate::gate::Gate>>,
    ) -> Driver {
        let world = &sh.world;
        let slots: Vec<Slot> = part
            .iter()
            .map(|&(b, shard, k)| {
                let mut s = Session::new(
                    b,
                    shard,
                    world.bots[b as usize].shards,
                    0x9e37_79b9 ^ (k as u64) << 17,
                );
                s.node = if cfg.spread { k % cfg.nodes.len() } else { 0 };
                s.read_rate = cfg.slow.iter().find(|(sb, _)| *sb == b).map(|&(_, r)| r);
                let stalled = k < cfg.stall;
                if stalled {
                    s.read_rate = Some(0.0);
                }
                s.gated = gate.is_some();
                s.ack_seq = cfg.ack_seq;
                s.send_shard = cfg.send_shard;
                s.reconnect = cfg.reconnect;
                let src = if cfg.sources.is_empty() {
                    Ipv4Addr::UNSPECIFIED
                } else {
                    cfg.sources[k % cfg.sources.len()]
                };
                Slot {
                    slow_buf: s.read_rate.map(|_| vec![0u8; 1024].into_boxed_slice()),
                    s,
                    gen: 0,
                    sock: Sock::None,
                    bind: sockaddr(SocketAddrV4::new(src, 0)),
                    dst: sockaddr(cfg.nodes[0]),
                    send_buf: Vec::new(),
                    send_off: 0,
                    sending: false,
                    recv_armed: false,
                    phase_since: 0,
                    rcvbuf: cfg.stall_rcvbuf.filter(|_| stalled),
                }
            })
            .collect();
        let hosts = cfg.nodes.iter().map(|a| a.to_string()).collect();
        let collect_guilds = cfg.collect_servers;
        Driver {
            t,
            ring,
            slots: slots.into_boxed_slice(),
            cfg,
            sh,
            rec: Recorder {
                collect_guilds,
                ..Recorder::new()
            },
            hosts,
            collect_seen: 0,
            reported_socket_error: false,
            reported_refusal: false,
            gate,
            scratch: Vec::with_capacity(4096),
            closed_all: false,
        }
    }

    pub(super) fn run(mut self) {
        self.ring.tick(Duration::from_millis(20), ud(K_TICK, 0, 0));
        let mut cqes: Vec<Completion> = Vec::with_capacity(8192);
        self.on_tick();
        while !self.sh.stop.load(Relaxed) {
            if let Err(e) = self.ring.submit_and_wait(1) {
                if e.raw_os_error() != Some(libc::EINTR) && e.raw_os_error() != Some(libc::EBUSY) {
                    eprintln!("loadgen: fleet thread {}: ring: {e}", self.t);
                    break;
                }
            }
            loop {
                cqes.clear();
                if self.ring.drain(&mut cqes) == 0 {
                    break;
                }
                for c in &cqes {
                    self.on_completion(*c);
                }
            }
        }
        self.flush_counters();
        // Dropping the ring closes every fixed socket.
    }

    pub(super) fn on_completion(&mut self, c: Completion) {
        let (kind, gen, i) = ud_parts(c.user_data);
        if kind == K_TICK {
            self.on_tick();
            return;
        }
        let now = now_ns();
        if kind == K_RECV {
            let current = i < self.slots.len() && self.slots[i].gen & 0xff_ffff == gen;
            if let Some(bid) = c.buffer_id() {
                if current && c.result > 0 && self.slots[i].sock == Sock::Open {
                    let n = c.result as usize;
                    // Copy out (into a reused scratch buffer) so the
                    // provided buffer goes back before parsing.
                    let mut data = std::mem::take(&mut self.scratch);
                    data.clear();
                    data.extend_from_slice(self.ring.buffer(bid, n));
                    self.ring.recycle(bid);
                    self.feed(i, &data, now);
                    self.scratch = data;
                } else {
                    self.ring.recycle(bid);
                }
            }
            if !current || self.slots[i].sock != Sock::Open {
                return;
            }
            if !c.more() {
                self.slots[i].recv_armed = false;
                // EOF, or an error other than running out of buffers: gone.
                if c.result == 0 || (c.result < 0 && c.result != -libc::ENOBUFS) {
                    self.close(i, now, false);
                } else {
                    self.arm_recv(i);
                }
            }
            return;
        }
        if i >= self.slots.len() {
            return;
        }
        if kind == K_CLOSE {
            if self.slots[i].gen & 0xff_ffff == gen && self.slots[i].sock == Sock::Closing {
                self.slots[i].sock = Sock::None;
            }
            return;
        }
        if self.slots[i].gen & 0xff_ffff != gen {
            return; // an operation of an earlier connection
        }
        match kind {
            K_SOCKET | K_BIND | K_SOCKOPT
                if c.result < 0 && c.result != -libc::ECANCELED && !self.reported_socket_error =>
            {
                // Reported once per thread; the connect completes with -ECANCELED.
                self.reported_socket_error = true;
                let what = match kind {
                    K_SOCKET => "socket",
                    K_BIND => "bind",
                    _ => "setsockopt(SO_RCVBUF)",
                };
                let e = std::io::Error::from_raw_os_error(-c.result);
                eprintln!("loadgen: fleet thread {}: {what} failed: {e}", self.t);
            }
            K_CONNECT => {
                if c.result < 0 {
                    self.close(i, now, true);
                } else if self.slots[i].s.phase == Phase::Stopped {
                    // Retired while connecting (the end of a run).
                    self.close(i, now, false);
                } else {
                    let slot = &mut self.slots[i];
                    slot.sock = Sock::Open;
                    let host = &self.hosts[slot.s.node % self.hosts.len()];
                    slot.s.on_connected(host, &mut self.rec);
                    self.arm_recv(i);
                    self.flush_out(i);
                }
            }
            K_SEND => {
                let slot = &mut self.slots[i];
                slot.sending = false;
                if c.result < 0 {
                    self.close(i, now, false);
                    return;
                }
                slot.send_off += c.result as usize;
                if slot.send_off < slot.send_buf.len() {
                    self.submit_send(i);
                } else {
                    slot.send_buf.clear();
                    slot.send_off = 0;
                    self.flush_out(i);
                }
            }
            K_RECV1 => {
                self.slots[i].recv_armed = false;
                if self.slots[i].sock != Sock::Open {
                    return;
                }
                if c.result <= 0 {
                    self.close(i, now, false);
                    return;
                }
                let buf = self.slots[i].slow_buf.take().unwrap();
                self.feed(i, &buf[..c.result as usize], now);
                self.slots[i].slow_buf = Some(buf);
                if self.slots[i].sock == Sock::Open && self.slots[i].s.may_read(now) {
                    self.arm_recv(i);
                }
            }
            _ => {}
        }
    }
}
