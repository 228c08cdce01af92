//! A thread the node cannot run without that panics stops the node.
//!
//! A worker owns its sessions, their rings and its share of the REST edge;
//! nothing else can serve them. The sidecar makes every registry call
//! (identify, token checks), `ingest` and `kafka-ingest` bring the event
//! stream in, `chat` commits the bots' actions, `registry-listen` applies
//! revocations. A node that goes on without one keeps answering `/readyz`
//! 200 while sessions are gone, identifies hang or revoked tokens keep
//! working. So a panic on one of those threads (a bug: nothing a bot sends
//! may cause one) is treated as the node's failure:
//!
//! 1. the panic hook (installed once by `node::run`, chained after the one
//!    before it, which prints the message and location) sees that the
//!    panicking thread is essential (a worker: `mark_worker`, set as the
//!    worker starts; a service: its thread's name is in [`ESSENTIAL`]),
//!    records which (`panicked`) and sends the process SIGTERM, the same
//!    path as `POST /drain` takes;
//! 2. `node::run` drains as on any SIGTERM: `/readyz` answers 503, the
//!    workers send op 7 to their sessions (a bot reconnects, to this node
//!    once it is back or to another), and the node exits with status 1
//!    (`Stopped::Panicked`), which a service manager restarts
//!    (`Restart=on-failure`). A dead worker's sockets close as its thread
//!    unwinds, or at the latest when the process exits.
//!
//! Only the first such panic is recorded; a second during the drain adds
//! its message to the log and nothing else. Panics on other threads keep
//! the default behaviour: one producer's `ingest-conn` (the producer
//! reconnects), `deliver` (catches and restarts its own), the portal's.
//!
//! A drill makes a worker's happen on purpose: `POST
//! /fault/worker-panic?worker=N` on the admin port of a node run with
//! `--fault-injection`.

use std::cell::Cell;
use std::sync::{Once, OnceLock};

/// The service threads the node cannot run without, by the name they are
/// spawned with.
pub const ESSENTIAL: [&str; 5] = [
    "sidecar",
    "ingest",
    "kafka-ingest",
    "chat",
    "registry-listen",
];

/// The essential thread that panicked first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Panicked {
    Worker(usize),
    Service(&'static str),
}

static FIRST: OnceLock<Panicked> = OnceLock::new();

thread_local! {
    /// Which worker this thread runs, if it runs one.
    static WORKER: Cell<Option<usize>> = const { Cell::new(None) };
}

/// What a panic on this thread means: the worker it runs, the essential
/// service its name says, or nothing.
fn essential(worker: Option<usize>, name: Option<&str>) -> Option<Panicked> {
    if let Some(w) = worker {
        return Some(Panicked::Worker(w));
    }
    let name = name?;
    ESSENTIAL
        .iter()
        .find(|&&e| e == name)
        .map(|&e| Panicked::Service(e))
}

/// Install the hook (once per process; later calls do nothing).
pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            before(info);
            let thread = std::thread::current();
            let Some(who) = essential(WORKER.with(Cell::get), thread.name()) else {
                return;
            };
            if FIRST.set(who).is_ok() {
                match who {
                    Panicked::Worker(w) => tracing::error!(
                        worker = w,
                        "worker {w} panicked: its sessions cannot be served; the node drains the \
                         other workers and exits with status 1"
                    ),
                    Panicked::Service(name) => tracing::error!(
                        thread = name,
                        "the {name} thread panicked: the node cannot run without it; it drains \
                         and exits with status 1"
                    ),
                }
                // SAFETY: signalling our own process.
                unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
            }
        }));
    });
}

/// Called on a worker's thread before it runs the worker.
pub fn mark_worker(w: usize) {
    WORKER.with(|c| c.set(Some(w)));
}

/// The first essential thread that panicked, if one did.
pub fn panicked() -> Option<Panicked> {
    FIRST.get().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_and_the_named_services_are_essential_and_nothing_else_is() {
        assert_eq!(
            essential(Some(3), Some("worker-3-4")),
            Some(Panicked::Worker(3))
        );
        for name in ESSENTIAL {
            assert_eq!(essential(None, Some(name)), Some(Panicked::Service(name)));
        }
        for name in [
            "ingest-conn",
            "deliver",
            "portal-0",
            "admin",
            "main",
            "chat-up-w0-1",
        ] {
            assert_eq!(essential(None, Some(name)), None, "{name}");
        }
        assert_eq!(essential(None, None), None);
    }
}
