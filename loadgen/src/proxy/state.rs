//! What the proxy's handle and its threads share: [`Shared`] (upstream,
//! limits, the current fault and a condvar signalled on every change, the
//! table of open connections, counters) and per connection a [`Conn`]
//! with one FIFO of chunks per direction ([`Dir`]), each chunk stamped
//! with its arrival time. A connection is aborted with a reset (SO_LINGER
//! 0) on both sides; poisoned locks are taken over, never a panic.

use std::collections::{HashMap, VecDeque};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

use super::script::Fault;

#[derive(Default)]
pub(super) struct Counters {
    pub(super) accepted: AtomicU64,
    pub(super) refused: AtomicU64,
    pub(super) dropped: AtomicU64,
    pub(super) upstream_failures: AtomicU64,
    pub(super) bytes_up: AtomicU64,
    pub(super) bytes_down: AtomicU64,
    pub(super) pending: AtomicU64,
}

pub(super) struct Shared {
    pub(super) upstream: SocketAddr,
    pub(super) max_connections: usize,
    pub(super) max_pending: usize,
    pub(super) fault: Mutex<Fault>,
    /// Signalled on every fault change and on stop.
    pub(super) changed: Condvar,
    pub(super) stopping: AtomicBool,
    pub(super) conns: Mutex<HashMap<u64, Arc<Conn>>>,
    pub(super) next_id: AtomicU64,
    pub(super) counters: Counters,
}

impl Shared {
    pub(super) fn fault(&self) -> Fault {
        lock(&self.fault).clone()
    }
}

pub(super) enum Item {
    Data(Instant, Vec<u8>),
    Eof,
}

#[derive(Default)]
pub(super) struct DirState {
    pub(super) queue: VecDeque<Item>,
    pub(super) pending: usize,
}

#[derive(Default)]
pub(super) struct Dir {
    pub(super) state: Mutex<DirState>,
    pub(super) cv: Condvar,
}

pub(super) struct Conn {
    pub(super) id: u64,
    pub(super) client: TcpStream,
    pub(super) upstream: Mutex<Option<TcpStream>>,
    pub(super) dead: AtomicBool,
    /// [0] client -> upstream, [1] upstream -> client.
    pub(super) dirs: [Dir; 2],
    /// Worker threads still running; the last one out unregisters the connection.
    pub(super) running: AtomicUsize,
}

impl Conn {
    pub(super) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    pub(super) fn wake(&self) {
        for d in &self.dirs {
            let _g = lock(&d.state);
            d.cv.notify_all();
        }
    }

    /// Closes both sides with a reset (SO_LINGER 0) and wakes every thread
    /// of the connection. Returns false if it was already closed.
    pub(super) fn abort(&self) -> bool {
        if self.dead.swap(true, Ordering::AcqRel) {
            return false;
        }
        reset_and_wake(&self.client);
        if let Some(u) = lock(&self.upstream).as_ref() {
            reset_and_wake(u);
        }
        self.wake();
        true
    }
}

/// SO_LINGER 0 makes the final close send RST; SHUT_RD wakes blocked readers
/// without sending anything.
pub(super) fn reset_and_wake(s: &TcpStream) {
    set_linger_zero(s);
    let _ = s.shutdown(Shutdown::Read);
}

pub(super) fn set_linger_zero(s: &TcpStream) {
    use std::os::fd::AsRawFd;
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: valid fd owned by `s`, a correctly sized linger struct.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            &l as *const libc::linger as *const libc::c_void,
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
