//! The service manager's view of a node: sd_notify(3) messages and the
//! process's exit status.
//!
//! - `READY=1` once every listener is bound, every worker listens and the
//!   registry answered (it is opened and seeded before the workers start):
//!   the moment `/readyz` first answers 200. `STOPPING=1` when a drain
//!   starts. `WATCHDOG=1` every half of `WATCHDOG_USEC` from the watchdog
//!   thread, but only while every worker has turned since the last
//!   message: a worker that stops turning (a loop that never yields, a
//!   blocked system call) withholds it, and systemd (`WatchdogSec=`) kills
//!   and restarts the node. A worker turns at least every 250 ms (its
//!   housekeeping tick), so `WatchdogSec=` below 1 s is refused with a
//!   warning (no watchdog).
//! - No `NOTIFY_SOCKET`: nothing is sent, nothing fails. A failed send is
//!   logged once and never stops the node: the notification is advice.
//! - Bounds: one datagram per message, at most one per half interval.
//!
//! Exit statuses (docs/reliability.md, "Exit statuses"; deploy/systemd):
//!
//! | status | meaning | systemd unit |
//! |---|---|---|
//! | 0 | drained on a signal (SIGTERM, SIGINT): someone asked it to stop | stays stopped |
//! | 1 | failed: a service could not start, or stopped the node, or a thread it cannot run without panicked (src/node/panic.rs: it drained first) | `Restart=on-failure` restarts it |
//! | 2 | the command line is wrong (clap) | - |
//! | 75 | drained on request (`POST /drain`): restart me (a release, a rebalance) | `RestartForceExitStatus=75`, `SuccessExitStatus=75` |
//! | 78 | the configuration is invalid (also `run --check` finding a bad config) | `RestartPreventExitStatus=78` |

use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::worker::shared::Shared;

/// Drained on a signal (SIGTERM, SIGINT).
pub const EXIT_STOPPED: i32 = 0;
/// Failed.
pub const EXIT_FAILED: i32 = 1;
/// Drained on request (`POST /drain`): the service manager restarts it.
pub const EXIT_DRAINED_ON_REQUEST: i32 = 75;
/// The configuration is invalid (sysexits' EX_CONFIG).
pub const EXIT_CONFIG: i32 = 78;

/// How a node that ran ended (its exit status: `code`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// SIGTERM or SIGINT.
    Signal,
    /// `POST /drain` on the admin port.
    DrainRequested,
    /// A worker or an essential service thread panicked
    /// (src/node/panic.rs): the node drained.
    Panicked(super::panic::Panicked),
}

impl Stopped {
    pub fn code(self) -> i32 {
        match self {
            Stopped::Signal => EXIT_STOPPED,
            Stopped::DrainRequested => EXIT_DRAINED_ON_REQUEST,
            Stopped::Panicked(_) => EXIT_FAILED,
        }
    }
}

/// The service manager's socket, when there is one.
pub struct Notifier {
    socket: UnixDatagram,
    addr: std::os::unix::net::SocketAddr,
    failed: AtomicBool,
}

impl Notifier {
    /// From `NOTIFY_SOCKET` (a path, or `@name` in the abstract namespace).
    pub fn from_env() -> Option<Notifier> {
        let name = std::env::var_os("NOTIFY_SOCKET")?;
        let name = name.to_string_lossy();
        let addr = if let Some(abs) = name.strip_prefix('@') {
            use std::os::linux::net::SocketAddrExt;
            std::os::unix::net::SocketAddr::from_abstract_name(abs.as_bytes())
        } else {
            std::os::unix::net::SocketAddr::from_pathname(&*name)
        };
        let addr = match addr {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(socket = %name, error = %e, "NOTIFY_SOCKET is not a usable address: no sd_notify");
                return None;
            }
        };
        match UnixDatagram::unbound() {
            Ok(socket) => Some(Notifier {
                socket,
                addr,
                failed: AtomicBool::new(false),
            }),
            Err(e) => {
                tracing::warn!(error = %e, "sd_notify socket: no sd_notify");
                None
            }
        }
    }

    /// Send one message (`READY=1`, ...); a failure is logged once.
    pub fn send(&self, msg: &str) {
        if let Err(e) = self.socket.send_to_addr(msg.as_bytes(), &self.addr) {
            if !self.failed.swap(true, Ordering::Relaxed) {
                tracing::warn!(error = %e, msg, "sd_notify failed (the node goes on)");
            }
        }
    }
}

/// Send `msg` if a service manager listens.
pub fn notify(n: &Option<Arc<Notifier>>, msg: &str) {
    if let Some(n) = n {
        n.send(msg);
    }
}

/// The watchdog interval systemd asked for, if it is meant for this process.
fn watchdog_interval() -> Option<Duration> {
    let usec: u64 = std::env::var("WATCHDOG_USEC").ok()?.parse().ok()?;
    if let Ok(pid) = std::env::var("WATCHDOG_PID") {
        if pid.parse::<u32>().ok() != Some(std::process::id()) {
            return None;
        }
    }
    let interval = Duration::from_micros(usec);
    if interval < Duration::from_secs(1) {
        tracing::warn!(
            ?interval,
            "WatchdogSec below 1 s: a worker turns every 250 ms when idle; no watchdog"
        );
        return None;
    }
    Some(interval)
}

/// Start the watchdog thread when systemd asked for one: `WATCHDOG=1`
/// every half interval while every worker's tick counter moved since the
/// last look. Stops with `stop`.
pub fn start_watchdog(
    n: &Option<Arc<Notifier>>,
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
) -> Result<Option<std::thread::JoinHandle<()>>, String> {
    let (Some(n), Some(interval)) = (n.clone(), watchdog_interval()) else {
        return Ok(None);
    };
    let every = interval / 2;
    std::thread::Builder::new()
        .name("watchdog".into())
        .spawn(move || {
            let turns = |s: &Shared| -> Vec<u64> {
                s.metrics
                    .iter()
                    .map(|m| m.ticks.load(Ordering::Relaxed))
                    .collect()
            };
            let mut last = turns(&shared);
            let step = Duration::from_millis(50);
            'outer: loop {
                let mut slept = Duration::ZERO;
                while slept < every {
                    if stop.load(Ordering::Relaxed) {
                        break 'outer;
                    }
                    std::thread::sleep(step);
                    slept += step;
                }
                let now = turns(&shared);
                let stuck: Vec<usize> = (0..now.len()).filter(|&w| now[w] == last[w]).collect();
                // A draining worker that finished turns no more: the drain
                // has its own bound (TimeoutStopSec=).
                if stuck.is_empty() || shared.shutting_down.load(Ordering::Relaxed) {
                    n.send("WATCHDOG=1");
                } else {
                    tracing::error!(
                        workers = ?stuck,
                        ?every,
                        "a worker has not turned: WATCHDOG=1 withheld"
                    );
                }
                last = now;
            }
        })
        .map(Some)
        .map_err(|e| format!("starting the watchdog thread: {e}"))
}
