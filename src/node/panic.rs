//! A worker that panics stops the node.
//!
//! A worker owns its sessions, their rings and its share of the REST edge;
//! nothing else can serve them, and a node that goes on a worker short
//! keeps answering `/readyz` 200 while every session that worker held is
//! gone and every event for them is dropped. So a panic on a worker thread
//! (a bug: nothing a bot sends may cause one) is treated as the node's
//! failure:
//!
//! 1. the panic hook (installed once by `node::run`, chained after the one
//!    before it, which prints the message and location) sees that the
//!    panicking thread is a worker (`mark_worker`, set when the worker
//!    starts), records which (`panicked_worker`) and sends the process
//!    SIGTERM, the same path as `POST /drain` takes;
//! 2. `node::run` drains as on any SIGTERM: `/readyz` answers 503, the
//!    other workers send op 7 to their sessions (a bot reconnects, to this
//!    node once it is back or to another), and the node exits with status 1
//!    (`Stopped::WorkerPanicked`), which a service manager restarts
//!    (`Restart=on-failure`). The dead worker's sockets close as its thread
//!    unwinds, or at the latest when the process exits.
//!
//! Only the first worker panic is recorded; a second during the drain adds
//! its message to the log and nothing else. Panics on other threads keep
//! the default behaviour (a thread that catches its own, as the chat
//! endpoint's, is unaffected: the hook only acts for worker threads).
//!
//! A drill makes one happen on purpose: `POST /fault/worker-panic?worker=N`
//! on the admin port of a node run with `--fault-injection`.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;

/// 0: no worker panicked; w + 1: worker w did (the first to).
static PANICKED: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// Which worker this thread runs, if it runs one.
    static WORKER: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Install the hook (once per process; later calls do nothing).
pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            before(info);
            let Some(w) = WORKER.with(Cell::get) else {
                return;
            };
            if PANICKED
                .compare_exchange(0, w + 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                tracing::error!(
                    worker = w,
                    "worker {w} panicked: its sessions cannot be served; the node drains the \
                     other workers and exits with status 1"
                );
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

/// The first worker that panicked, if one did.
pub fn panicked_worker() -> Option<usize> {
    PANICKED.load(Ordering::SeqCst).checked_sub(1)
}
