//! [`Lb`]: the handle of a running balancer. [`Lb::start`] binds one
//! SO_REUSEPORT listener and one ring per thread (enough for the expected
//! connections with head room) and the health-check thread (each
//! backend's `/readyz` every 200 ms); the handle switches and replaces
//! backends, reads [`LbStats`] and stops the threads (also on drop).

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use net::uring::{cap_fixed_files, Ring, RingConfig};

use super::driver::Driver;
use super::shared::{Backend, BackendState, Shared};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LbStats {
    pub accepted: u64,
    pub open: u64,
    /// Connections closed at once: no node was usable.
    pub no_backend: u64,
    /// Connections closed at once: the ring's table was full.
    pub refused_full: u64,
    pub upstream_failures: u64,
    /// Pairs closed because one direction queued more than MAX_QUEUED.
    pub overflows: u64,
    pub bytes_up: u64,
    pub bytes_down: u64,
    /// New connections sent to each backend.
    pub per_backend: Vec<u64>,
}

pub struct Lb {
    addr: SocketAddrV4,
    sh: Arc<Shared>,
    handles: Vec<JoinHandle<()>>,
}

/// Most backends a balancer holds (the per-backend counters are fixed).
pub const MAX_BACKENDS: usize = 16;

impl Lb {
    /// Listens on `listen` (port 0: a free port) with enough rings for
    /// `connections` pairs (at least 2), upstream sockets bound round robin
    /// to `sources` (empty: the kernel's choice).
    pub fn start(
        listen: SocketAddrV4,
        backends: Vec<Backend>,
        connections: usize,
        sources: Vec<Ipv4Addr>,
    ) -> std::io::Result<Lb> {
        if backends.len() > MAX_BACKENDS {
            return Err(std::io::Error::other("too many backends"));
        }
        let table = cap_fixed_files(20_000).saturating_sub(64).max(64);
        let pairs_per_ring = (table / 2) as usize;
        // Head room: SO_REUSEPORT spreads by hash, not evenly, and a moved
        // session's old pair may still be closing when its new one opens.
        let rings = (connections * 3 / 2).div_ceil(pairs_per_ring).max(2);
        let sh = Arc::new(Shared {
            stop: AtomicBool::new(false),
            backends: Mutex::new(
                backends
                    .into_iter()
                    .map(|b| BackendState { b, healthy: true })
                    .collect(),
            ),
            version: AtomicU64::new(1),
            accepted: AtomicU64::new(0),
            open: AtomicU64::new(0),
            no_backend: AtomicU64::new(0),
            refused_full: AtomicU64::new(0),
            upstream_failures: AtomicU64::new(0),
            overflows: AtomicU64::new(0),
            bytes_up: AtomicU64::new(0),
            bytes_down: AtomicU64::new(0),
            per_backend: (0..MAX_BACKENDS).map(|_| AtomicU64::new(0)).collect(),
        });
        let first = net::uring::listen_reuseport(SocketAddr::V4(listen), 4096)?;
        let addr = match first.local_addr()? {
            SocketAddr::V4(a) => a,
            a => return Err(std::io::Error::other(format!("{a} is not IPv4"))),
        };
        let mut listeners = vec![first];
        for _ in 1..rings {
            listeners.push(net::uring::listen_reuseport(SocketAddr::V4(addr), 4096)?);
        }
        let mut handles = Vec::new();
        for (t, l) in listeners.into_iter().enumerate() {
            let ring = Ring::new(&RingConfig {
                sq_entries: 4096,
                cq_entries: 32768,
                fixed_files: table,
                recv_buffers: 2048,
                recv_buffer_size: 4096,
                coop_taskrun: true,
            })?;
            let (sh, sources) = (sh.clone(), sources.clone());
            handles.push(
                std::thread::Builder::new()
                    .name(format!("lb-{t}"))
                    .spawn(move || Driver::new(t, ring, l, pairs_per_ring, sources, sh).run())?,
            );
        }
        let hsh = sh.clone();
        handles.push(
            std::thread::Builder::new()
                .name("lb-health".into())
                .spawn(move || health(hsh))?,
        );
        Ok(Lb { addr, sh, handles })
    }

    pub fn local_addr(&self) -> SocketAddrV4 {
        self.addr
    }

    /// `ws://ADDR`: what the nodes' `public_url` must say.
    pub fn url(&self) -> String {
        format!("ws://{}", self.addr)
    }

    /// Turn backend `i` on or off for new connections.
    pub fn set_enabled(&self, i: usize, on: bool) {
        if let Some(b) = self.sh.backends.lock().unwrap().get_mut(i) {
            b.b.enabled = on;
        }
        self.sh.version.fetch_add(1, Relaxed);
    }

    /// Replace backend `i` (a node restarted on new ports); it starts
    /// healthy if enabled, until its first check says otherwise.
    pub fn set_backend(&self, i: usize, b: Backend) {
        let mut g = self.sh.backends.lock().unwrap();
        if let Some(x) = g.get_mut(i) {
            *x = BackendState { b, healthy: true };
        }
        drop(g);
        self.sh.version.fetch_add(1, Relaxed);
    }

    pub fn stats(&self) -> LbStats {
        let s = &self.sh;
        let n = s.backends.lock().unwrap().len();
        LbStats {
            accepted: s.accepted.load(Relaxed),
            open: s.open.load(Relaxed),
            no_backend: s.no_backend.load(Relaxed),
            refused_full: s.refused_full.load(Relaxed),
            upstream_failures: s.upstream_failures.load(Relaxed),
            overflows: s.overflows.load(Relaxed),
            bytes_up: s.bytes_up.load(Relaxed),
            bytes_down: s.bytes_down.load(Relaxed),
            per_backend: s.per_backend[..n].iter().map(|a| a.load(Relaxed)).collect(),
        }
    }

    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.sh.stop.store(true, Relaxed);
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

impl Drop for Lb {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Health checks: each backend's `/readyz` every 200 ms.
fn health(sh: Arc<Shared>) {
    while !sh.stop.load(Relaxed) {
        let admins: Vec<Option<SocketAddr>> = sh
            .backends
            .lock()
            .unwrap()
            .iter()
            .map(|b| b.b.admin)
            .collect();
        for (i, a) in admins.into_iter().enumerate() {
            let Some(a) = a else { continue };
            let ok = crate::nodes::http_get(a, "/readyz").is_ok_and(|(s, _)| s == 200);
            let mut g = sh.backends.lock().unwrap();
            if let Some(b) = g.get_mut(i) {
                // A backend replaced meanwhile is checked next round.
                if b.b.admin == Some(a) && b.healthy != ok {
                    b.healthy = ok;
                    sh.version.fetch_add(1, Relaxed);
                }
            }
        }
        for _ in 0..4 {
            if sh.stop.load(Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
