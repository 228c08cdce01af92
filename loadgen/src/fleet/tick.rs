//! A fleet thread's 20 ms tick: pick up the handle's requests (measuring,
//! watch, close everything, histogram hand-in), coordinator grants, then
//! per slot start connects within the handshake window, abandon
//! handshakes past their timeout, run the session's timers and pacing;
//! publish the gauges and flush the counters into the shared totals.

use std::sync::atomic::Ordering::Relaxed;

use super::driver::Driver;
use super::shared::add_counters;
use super::slot::Sock;
use crate::clock::now_ns;
use crate::session::{Action, Phase};

impl Driver {
    pub(super) fn on_tick(&mut self) {
        let now = now_ns();
        self.rec.measuring = self.sh.measuring.load(Relaxed);
        let series_start = self.sh.series_start_ns.load(Relaxed);
        if series_start != 0 && self.rec.series.as_ref().map(|s| s.start_ns) != Some(series_start) {
            self.rec.series = Some(crate::series::PerSecond::new(series_start));
        }
        self.rec.latency_exclude_bot = *self.sh.latency_exclude_bot.lock().unwrap();
        self.rec.latency_only_bots = self.sh.latency_only_bots.lock().unwrap().clone();
        self.rec.want_guild = self.sh.guild.lock().unwrap().is_none();
        let close_code = self.sh.close_code.load(Relaxed) as u16;
        if close_code != 0 && !self.closed_all {
            self.closed_all = true;
            for i in 0..self.slots.len() {
                let slot = &mut self.slots[i];
                if slot.sock == Sock::Open && slot.s.phase != Phase::Stopped {
                    slot.s.close_and_retire(close_code);
                    self.flush_out(i);
                } else if slot.s.phase != Phase::Stopped {
                    slot.s.close_and_retire(close_code); // never connects again
                    slot.s.out.clear();
                }
            }
            self.sh.closed_n.fetch_add(1, Relaxed);
        }
        let watch = *self.sh.watch.lock().unwrap();
        if watch != self.rec.watch {
            self.rec.watch = watch;
            self.rec.watch_count = 0;
            self.rec.watch_last_ns = 0;
        }
        if let Some(g) = self.gate.clone() {
            let granted = std::mem::take(&mut *g.grants[self.t].lock().unwrap());
            for (i, gen) in granted {
                let slot = &mut self.slots[i];
                if slot.gen == gen {
                    slot.s.grant_requested = false;
                    slot.s.has_grant = true;
                }
            }
        }
        let hs_timeout = self.cfg.handshake_timeout.as_nanos() as u64;
        let mut handshaking = 0usize;
        for slot in self.slots.iter() {
            if slot.sock != Sock::None && !slot.s.streaming() {
                handshaking += 1;
            }
        }
        let (mut streaming, mut stopped) = (0u64, 0u64);
        for i in 0..self.slots.len() {
            let phase = self.slots[i].s.phase;
            match phase {
                Phase::Stopped => {
                    stopped += 1;
                    continue;
                }
                Phase::Idle => {
                    let slot = &mut self.slots[i];
                    let cap = if slot.s.needs_identify() {
                        self.cfg.window
                    } else {
                        self.cfg.resume_window
                    };
                    if slot.sock == Sock::None && now >= slot.s.reconnect_at && handshaking < cap {
                        if slot.s.gated && slot.s.needs_identify() && !slot.s.has_grant {
                            // Ask the coordinator first; connect once granted.
                            if !slot.s.grant_requested {
                                let app = self.sh.world.bots[slot.s.bot as usize].app_id;
                                let req = (self.t, i, slot.gen, app, slot.s.shard);
                                if self.gate.as_ref().is_some_and(|g| g.request(req)) {
                                    slot.s.grant_requested = true;
                                }
                            }
                            continue;
                        }
                        handshaking += 1;
                        self.open(i, now);
                    }
                    continue;
                }
                Phase::Streaming => streaming += 1,
                _ => {
                    if now.saturating_sub(self.slots[i].phase_since) > hs_timeout {
                        self.close(i, now, false);
                        continue;
                    }
                }
            }
            if self.slots[i].sock != Sock::Open {
                continue;
            }
            if self.slots[i].s.tick(now, &mut self.rec) == Action::Close {
                self.close(i, now, false);
                continue;
            }
            if self.slots[i].slow_buf.is_some()
                && !self.slots[i].recv_armed
                && self.slots[i].s.may_read(now)
            {
                self.arm_recv(i);
            }
            self.flush_out(i);
        }
        self.sh.streaming[self.t].store(streaming, Relaxed);
        self.sh.handshaking[self.t].store(handshaking as u64, Relaxed);
        self.sh.stopped[self.t].store(stopped, Relaxed);
        self.flush_counters();
        let want = self.sh.collect.load(Relaxed);
        if want != self.collect_seen {
            self.collect_seen = want;
            let mut g = self.sh.collected.lock().unwrap();
            let _ = g.0.add(&self.rec.latency);
            let _ = g.1.add(&self.rec.recovery);
            drop(g);
            self.rec.latency.reset();
            self.rec.recovery.reset();
            if let Some(mine) = self.rec.series.take() {
                let mut g = self.sh.collected_series.lock().unwrap();
                match &mut g.0 {
                    Some(all) if all.start_ns == mine.start_ns => all.add(&mine),
                    all => *all = Some(mine),
                }
                for slot in self.slots.iter_mut() {
                    if let Some(l) = slot.s.lat.take() {
                        g.1.push(crate::series::SessionRow::of(slot.s.bot, slot.s.shard, &l));
                    }
                }
            }
            self.sh.collected_n.fetch_add(1, Relaxed);
        }
        if let Some(w) = watch {
            let _ = w;
            self.sh
                .watch_last_ns
                .fetch_max(self.rec.watch_last_ns, Relaxed);
            self.sh
                .watch_count
                .fetch_add(std::mem::take(&mut self.rec.watch_count), Relaxed);
        }
    }

    pub(super) fn flush_counters(&mut self) {
        let c = std::mem::take(&mut self.rec.c);
        let mut t = self.sh.totals.lock().unwrap();
        add_counters(&mut t, &c);
        drop(t);
        if let Some(r) = self.rec.first_refusal.take() {
            if !self.reported_refusal {
                self.reported_refusal = true;
                eprintln!("loadgen: fleet thread {}: upgrade refused: {r}", self.t);
            }
        }
        if let Some(v) = self.rec.first_violation.take() {
            let mut f = self.sh.first_violation.lock().unwrap();
            if f.is_none() {
                *f = Some(v);
            }
        }
        if let Some(g) = self.rec.guild.take() {
            self.sh.guild.lock().unwrap().get_or_insert(g);
        }
        if !self.rec.guilds.is_empty() {
            let mut set = self.sh.servers.lock().unwrap();
            for (server, channel, reader) in self.rec.guilds.drain(..) {
                set.add(server, channel, reader);
            }
        }
    }
}
