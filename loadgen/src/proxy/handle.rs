//! [`Proxy`]: the handle of a running proxy. It binds the listener,
//! starts the accept thread (pump.rs), applies faults now or on a script's
//! schedule, reads the counters ([`ProxyStats`]) and on stop or drop
//! resets every open connection and waits (up to a second) for the
//! threads to end.

use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::pump::accept_loop;
use super::script::{Fault, Step};
use super::state::{lock, Conn, Counters, Shared};

/// Default limit on concurrent proxied connections.
pub const MAX_CONNECTIONS: usize = 256;
/// Default limit on bytes read but not yet forwarded, per direction of a
/// connection.
pub const MAX_PENDING: usize = 1 << 20;

/// Counters since the proxy started.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Connections accepted from clients (including ones closed at once).
    pub accepted: u64,
    /// Connections currently open (being proxied or waiting out a stall).
    pub open: u64,
    /// Connections closed at once because `max_connections` were open.
    pub refused: u64,
    /// Connections reset by [`Fault::Drop`] (open ones and new ones).
    pub dropped: u64,
    /// Upstream connects that failed (the client was then closed).
    pub upstream_failures: u64,
    /// Bytes forwarded client -> upstream.
    pub bytes_up: u64,
    /// Bytes forwarded upstream -> client.
    pub bytes_down: u64,
    /// Bytes read but not yet forwarded, all connections and directions.
    pub pending: u64,
}

/// A running proxy. Dropping it stops it, like [`Proxy::stop`].
pub struct Proxy {
    shared: Arc<Shared>,
    local: SocketAddr,
    accept: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Listens on `listen` (port 0 picks a free port) and forwards each
    /// connection to `upstream`, with the default limits.
    pub fn start(listen: SocketAddr, upstream: SocketAddr) -> io::Result<Proxy> {
        Proxy::start_with_limits(listen, upstream, MAX_CONNECTIONS, MAX_PENDING)
    }

    /// [`Proxy::start`] with explicit limits: concurrent connections, and
    /// bytes buffered per direction of a connection.
    pub fn start_with_limits(
        listen: SocketAddr,
        upstream: SocketAddr,
        max_connections: usize,
        max_pending: usize,
    ) -> io::Result<Proxy> {
        let listener = TcpListener::bind(listen)?;
        let local = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            max_connections: max_connections.max(1),
            max_pending: max_pending.max(1),
            fault: Mutex::new(Fault::Pass),
            changed: Condvar::new(),
            stopping: AtomicBool::new(false),
            conns: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            counters: Counters::default(),
        });
        let sh = shared.clone();
        let accept = thread::Builder::new()
            .name("proxy-accept".into())
            .spawn(move || accept_loop(listener, sh))?;
        Ok(Proxy {
            shared,
            local,
            accept: Some(accept),
        })
    }

    /// The address clients connect to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// The current fault.
    pub fn fault(&self) -> Fault {
        self.shared.fault()
    }

    /// Applies a fault now. [`Fault::Drop`] resets every open connection.
    pub fn set(&self, f: Fault) {
        set_fault(&self.shared, f);
    }

    /// Applies each step at its time from now, in a new thread; the thread
    /// ends after the last step or when the proxy stops.
    pub fn run_script(&self, steps: Vec<Step>) -> JoinHandle<()> {
        let sh = self.shared.clone();
        let start = Instant::now();
        thread::spawn(move || {
            for step in steps {
                let due = start + step.at;
                let mut g = lock(&sh.fault);
                loop {
                    if sh.stopping.load(Ordering::Acquire) {
                        return;
                    }
                    let now = Instant::now();
                    if now >= due {
                        break;
                    }
                    g = sh
                        .changed
                        .wait_timeout(g, due - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                drop(g);
                set_fault(&sh, step.fault);
            }
        })
    }

    /// Counters since the start.
    pub fn stats(&self) -> ProxyStats {
        let c = &self.shared.counters;
        ProxyStats {
            accepted: c.accepted.load(Ordering::Relaxed),
            open: lock(&self.shared.conns).len() as u64,
            refused: c.refused.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            upstream_failures: c.upstream_failures.load(Ordering::Relaxed),
            bytes_up: c.bytes_up.load(Ordering::Relaxed),
            bytes_down: c.bytes_down.load(Ordering::Relaxed),
            pending: c.pending.load(Ordering::Relaxed),
        }
    }

    /// Stops accepting, resets every open connection and waits (up to a
    /// second) for the connection threads to finish.
    pub fn stop(self) {
        // Drop does the work.
    }

    fn shutdown(&mut self) {
        let sh = &self.shared;
        if sh.stopping.swap(true, Ordering::AcqRel) {
            return;
        }
        {
            let _g = lock(&sh.fault);
            sh.changed.notify_all();
        }
        let conns: Vec<Arc<Conn>> = lock(&sh.conns).values().cloned().collect();
        for c in conns {
            c.abort();
        }
        // Wake the accept thread with a connection of our own.
        let mut wake = self.local;
        if wake.ip().is_unspecified() {
            wake.set_ip(match wake {
                SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
            });
        }
        let woke = TcpStream::connect_timeout(&wake, Duration::from_secs(1)).is_ok();
        if let Some(h) = self.accept.take() {
            if woke {
                let _ = h.join();
            }
        }
        let deadline = Instant::now() + Duration::from_secs(1);
        while !lock(&sh.conns).is_empty() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn set_fault(sh: &Arc<Shared>, f: Fault) {
    let is_drop = f == Fault::Drop;
    {
        let mut g = lock(&sh.fault);
        *g = f;
        sh.changed.notify_all();
    }
    let conns: Vec<Arc<Conn>> = lock(&sh.conns).values().cloned().collect();
    for c in conns {
        if is_drop {
            if c.abort() {
                sh.counters.dropped.fetch_add(1, Ordering::Relaxed);
            }
        } else {
            c.wake();
        }
    }
}
