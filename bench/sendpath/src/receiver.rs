//! The receiving side, on its own thread (and core): keeps every client
//! socket drained through level-triggered epoll, counts bytes per
//! connection, and wakes the sender once it has read everything sent so
//! far, which [`wait_drained`] waits for (30 s at most, then it panics).

use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use crate::setup::pin;

pub struct Shared {
    pub received: AtomicU64,
    /// Bytes the sender has sent so far; the receiver wakes it on reaching it.
    pub target: AtomicU64,
    pub stop: AtomicBool,
}

/// Keep every client socket drained; count bytes per connection. Returns
/// the per-connection totals when told to stop.
pub fn receive(
    clients: Vec<TcpStream>,
    sh: Arc<Shared>,
    sender: Thread,
    cpu: Option<usize>,
) -> Vec<u64> {
    if let Some(c) = cpu {
        pin(c);
    }
    // SAFETY: plain epoll calls on descriptors we own; errors checked.
    let ep = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    assert!(ep >= 0, "epoll_create1: {}", io::Error::last_os_error());
    for (i, c) in clients.iter().enumerate() {
        c.set_nonblocking(true).unwrap();
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: i as u64,
        };
        // SAFETY: `ep` is our epoll fd, the socket is open (owned by `c`) and `ev` lives across the call.
        let r = unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, c.as_raw_fd(), &mut ev) };
        assert!(r == 0, "epoll_ctl: {}", io::Error::last_os_error());
    }
    let mut per_conn = vec![0u64; clients.len()];
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 1024];
    let mut buf = vec![0u8; 1 << 20];
    loop {
        // SAFETY: epoll_wait writes at most `events.len()` entries into the vector it is given.
        let n = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), events.len() as i32, 50) };
        if n < 0 {
            let e = io::Error::last_os_error();
            assert!(e.kind() == io::ErrorKind::Interrupted, "epoll_wait: {e}");
            continue;
        }
        if n == 0 && sh.stop.load(Ordering::Acquire) {
            break;
        }
        let mut got = 0u64;
        for ev in &events[..n as usize] {
            let i = ev.u64 as usize;
            loop {
                // SAFETY: reads at most `buf.len()` bytes into `buf`, from a socket `clients[i]` keeps open.
                let r = unsafe {
                    libc::read(clients[i].as_raw_fd(), buf.as_mut_ptr().cast(), buf.len())
                };
                if r > 0 {
                    per_conn[i] += r as u64;
                    got += r as u64;
                    if (r as usize) < buf.len() {
                        break; // drained; level-triggered epoll reports more
                    }
                } else if r == 0 {
                    panic!("connection {i} closed by the sender");
                } else {
                    let e = io::Error::last_os_error();
                    assert!(e.kind() == io::ErrorKind::WouldBlock, "read: {e}");
                    break;
                }
            }
        }
        if got > 0 {
            let total = sh.received.fetch_add(got, Ordering::AcqRel) + got;
            if total >= sh.target.load(Ordering::Acquire) {
                sender.unpark();
            }
        }
    }
    // SAFETY: closes our own epoll fd, once; nothing uses it after.
    unsafe { libc::close(ep) };
    per_conn
}

/// Block (no CPU) until the receiver has read everything sent so far.
pub fn wait_drained(sh: &Shared, target: u64) {
    sh.target.store(target, Ordering::Release);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let got = sh.received.load(Ordering::Acquire);
        if got == target {
            return;
        }
        assert!(
            got < target,
            "received {got} bytes, more than the {target} sent"
        );
        assert!(
            Instant::now() < deadline,
            "receiver stuck: {got} of {target} bytes after 30 s"
        );
        thread::park_timeout(Duration::from_millis(10));
    }
}
