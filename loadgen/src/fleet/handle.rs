//! [`Fleet`]: the handle of a running fleet. [`Fleet::start`] checks the
//! sessions against the world and the fixed-table limit per ring, splits
//! them over threads (one io_uring each, driver.rs) and starts them; the
//! handle then reads gauges, counters and histograms (bounded waits of at
//! most 5 s) and stops the threads, optionally closing every session
//! first.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use hdrhistogram::Histogram;
use net::uring::{cap_fixed_files, Ring, RingConfig};

use super::config::FleetConfig;
use super::driver::Driver;
use super::shared::Shared;
use crate::servers::ServerSet;
use crate::session::Counters;
use crate::world::World;

pub struct Fleet {
    pub shared: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
}

impl Fleet {
    /// Starts the threads; sessions begin connecting at once.
    pub fn start(world: Arc<World>, cfg: FleetConfig) -> std::io::Result<Fleet> {
        if cfg.nodes.is_empty() {
            return Err(std::io::Error::other("no gateway address"));
        }
        let all = cfg.sessions.clone().unwrap_or_else(|| world.sessions());
        if let Some(&(b, _)) = all.iter().find(|(b, _)| *b as usize >= world.bots.len()) {
            return Err(std::io::Error::other(format!(
                "session of bot {b}: no such bot"
            )));
        }
        let per_ring = cap_fixed_files(20_000).saturating_sub(64).max(64) as usize;
        let threads = if cfg.threads > 0 {
            cfg.threads
        } else {
            all.len().div_ceil(per_ring).max(2)
        };
        if all.len().div_ceil(threads) > per_ring {
            return Err(std::io::Error::other(format!(
                "{} sessions over {threads} rings is more than {per_ring} per ring \
                 (the fixed table is capped by RLIMIT_NOFILE); use more threads",
                all.len()
            )));
        }
        let mk = |n: usize| (0..n).map(|_| AtomicU64::new(0)).collect::<Vec<_>>();
        let hist = || Histogram::new_with_bounds(1, 3_600_000_000, 3).unwrap();
        let shared = Arc::new(Shared {
            world: world.clone(),
            stop: AtomicBool::new(false),
            measuring: AtomicBool::new(false),
            streaming: mk(threads),
            handshaking: mk(threads),
            stopped: mk(threads),
            totals: Mutex::new(Counters::default()),
            collect: AtomicU64::new(0),
            collected_n: AtomicU64::new(0),
            collected: Mutex::new((hist(), hist())),
            series_start_ns: AtomicU64::new(0),
            collected_series: Mutex::new((None, Vec::new())),
            watch: Mutex::new(None),
            watch_last_ns: AtomicU64::new(0),
            watch_count: AtomicU64::new(0),
            latency_exclude_bot: Mutex::new(None),
            latency_only_bots: Mutex::new(None),
            first_violation: Mutex::new(None),
            slow_lost_ns: AtomicU64::new(0),
            slow_lost_code: AtomicU64::new(0),
            guild: Mutex::new(None),
            servers: Mutex::new(ServerSet::default()),
            close_code: AtomicU64::new(0),
            closed_n: AtomicU64::new(0),
            sessions: all.len(),
            threads,
        });
        let mut parts: Vec<Vec<(u32, u32, usize)>> = vec![Vec::new(); threads];
        for (k, &(b, sh)) in all.iter().enumerate() {
            parts[k % threads].push((b, sh, k));
        }
        let gate = match cfg.coordinator {
            Some(addr) => Some(crate::gate::Gate::start(addr, 32, threads)?),
            None => None,
        };
        let mut handles = Vec::new();
        for (t, part) in parts.into_iter().enumerate() {
            let (sh, cfg, gate) = (shared.clone(), cfg.clone(), gate.clone());
            let ring = Ring::new(&RingConfig {
                sq_entries: 4096,
                cq_entries: 32768,
                fixed_files: (part.len() as u32 + 8).min(per_ring as u32 + 64),
                recv_buffers: 4096,
                recv_buffer_size: 4096,
                coop_taskrun: true,
            })?;
            handles.push(
                std::thread::Builder::new()
                    .name(format!("fleet-{t}"))
                    .spawn(move || Driver::new(t, ring, part, cfg, sh, gate).run())?,
            );
        }
        Ok(Fleet { shared, handles })
    }

    pub fn streaming(&self) -> u64 {
        self.shared.streaming.iter().map(|a| a.load(Relaxed)).sum()
    }
    pub fn handshaking(&self) -> u64 {
        self.shared
            .handshaking
            .iter()
            .map(|a| a.load(Relaxed))
            .sum()
    }
    pub fn stopped(&self) -> u64 {
        self.shared.stopped.iter().map(|a| a.load(Relaxed)).sum()
    }

    /// Counters summed over threads (as of their last tick, <= 50 ms old).
    pub fn counters(&self) -> Counters {
        self.shared.totals.lock().unwrap().clone()
    }

    pub fn set_measuring(&self, on: bool) {
        self.shared.measuring.store(on, Relaxed);
    }

    /// Record latency by scheduled second and by session as well, from
    /// now (series.rs); call before `set_measuring(true)`.
    pub fn start_series(&self) -> u64 {
        let t = crate::clock::now_ns();
        self.shared.series_start_ns.store(t, Relaxed);
        t
    }

    /// What `start_series` recorded, handed in by the last
    /// `take_histograms`: by second (None: nothing), and by session.
    pub fn take_series(
        &self,
    ) -> (
        Option<crate::series::PerSecond>,
        Vec<crate::series::SessionRow>,
    ) {
        std::mem::take(&mut *self.shared.collected_series.lock().unwrap())
    }

    /// Everything recorded since the last call: (latency, recovery), in us.
    pub fn take_histograms(&self) -> (Histogram<u64>, Histogram<u64>) {
        let before = self.shared.collected_n.load(Relaxed);
        self.shared.collect.fetch_add(1, Relaxed);
        let want = before + self.shared.threads as u64;
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while self.shared.collected_n.load(Relaxed) < want && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let mut g = self.shared.collected.lock().unwrap();
        let out = (g.0.clone(), g.1.clone());
        g.0.reset();
        g.1.reset();
        out
    }

    /// Waits until `n` sessions stream, or `timeout`; returns the count.
    pub fn wait_streaming(&self, n: u64, timeout: Duration, mut progress: impl FnMut(u64)) -> u64 {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let s = self.streaming();
            progress(s);
            if s >= n || std::time::Instant::now() >= deadline {
                return s;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Sends a Close with `code` on every open session (1000 ends a
    /// session on the node instead of leaving it resumable), gives the
    /// frames `linger` to go out, then stops.
    pub fn stop_closing(self, code: u16, linger: Duration) -> Counters {
        self.shared.close_code.store(code.max(1) as u64, Relaxed);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while self.shared.closed_n.load(Relaxed) < self.shared.threads as u64
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(linger);
        self.stop()
    }

    pub fn stop(self) -> Counters {
        self.shared.stop.store(true, Relaxed);
        for h in self.handles {
            let _ = h.join();
        }
        let c = self.shared.totals.lock().unwrap().clone();
        c
    }
}
