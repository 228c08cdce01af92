//! Unit tests of the ring against the kernel: a loopback connection
//! accepted into the fixed table, read through a provided buffer, written
//! and closed by slot; and the fixed table capped by RLIMIT_NOFILE.

use super::*;
use std::io::{Read, Write};

/// A small ring with one loopback connection accepted into its fixed table
/// by a multishot accept (user data 1): the ring, the listener, the client's
/// end and the connection's slot.
fn ring_with_one_accepted() -> (Ring, std::net::TcpListener, std::net::TcpStream, u32) {
    use std::os::fd::AsRawFd;
    let listener = listen_reuseport("127.0.0.1:0".parse().unwrap(), 128).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut ring = Ring::new(&RingConfig {
        sq_entries: 64,
        cq_entries: 256,
        fixed_files: 8,
        recv_buffers: 8,
        recv_buffer_size: 64,
        coop_taskrun: true,
    })
    .unwrap();
    ring.accept_multi(listener.as_raw_fd(), 1);
    ring.submit().unwrap();
    let client = std::net::TcpStream::connect(addr).unwrap();
    let mut done = Vec::with_capacity(16);
    let slot = loop {
        ring.submit_and_wait(1).unwrap();
        done.clear();
        ring.drain(&mut done);
        if let Some(c) = done.iter().find(|c| c.user_data == 1) {
            assert!(c.result >= 0, "accept failed: {:?}", c.error());
            assert!(c.more());
            break c.result as u32;
        }
    };
    (ring, listener, client, slot)
}

#[test]
fn accept_recv_send_close_on_direct_descriptors() {
    let (mut ring, _listener, mut client, slot) = ring_with_one_accepted();
    let mut done = Vec::with_capacity(16);
    // The socket is not in the process fd table: only the slot names it.
    assert!(slot < 8);
    ring.recv_multi(slot, 2);
    client.write_all(b"hello ring").unwrap();
    let got = loop {
        ring.submit_and_wait(1).unwrap();
        done.clear();
        ring.drain(&mut done);
        if let Some(c) = done.iter().find(|c| c.user_data == 2) {
            let bid = c.buffer_id().expect("provided buffer");
            let bytes = ring.buffer(bid, c.result as usize).to_vec();
            ring.recycle(bid);
            break bytes;
        }
    };
    assert_eq!(got, b"hello ring");
    let msg = b"hello client".to_vec();
    // SAFETY: `msg` lives, unchanged, until the completion awaited just below.
    unsafe { ring.send(slot, msg.as_ptr(), msg.len() as u32, 3) };
    loop {
        ring.submit_and_wait(1).unwrap();
        done.clear();
        ring.drain(&mut done);
        if let Some(c) = done.iter().find(|c| c.user_data == 3) {
            assert_eq!(c.result, msg.len() as i32);
            break;
        }
    }
    let mut buf = [0u8; 12];
    client.read_exact(&mut buf).unwrap();
    assert_eq!(&buf, b"hello client");
    ring.shutdown_and_close(slot, 4, 5);
    let mut closed = false;
    for _ in 0..10 {
        ring.submit_and_wait(1).unwrap();
        done.clear();
        ring.drain(&mut done);
        if done.iter().any(|c| c.user_data == 5 && c.result == 0) {
            closed = true;
            break;
        }
    }
    assert!(closed);
    let mut rest = Vec::new();
    client.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "peer sees EOF after close");
}

#[test]
fn table_is_capped_by_nofile() {
    let soft = raise_nofile_limit();
    assert!(cap_fixed_files(u32::MAX) as u64 <= soft);
}

/// What gatewayd's workers rely on with `coop_taskrun`: a thread asleep in
/// a blocking `read(2)` of the ring's registered eventfd (the worker's park)
/// is woken when a peer's data arrives for a multishot receive, though the
/// receive's completion needs this thread's task work and COOP_TASKRUN never
/// interrupts a running thread for it. If it were not woken, the read would
/// block until the watchdog's write, and the test fails saying so.
#[test]
fn a_parked_reader_of_the_eventfd_is_woken_by_a_peers_data_with_coop_taskrun() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let (mut ring, _listener, mut client, slot) = ring_with_one_accepted();
    let mut done = Vec::with_capacity(16);
    ring.recv_multi(slot, 2);
    ring.submit().unwrap();
    // SAFETY: a fresh blocking eventfd, as the worker's; closed at the end.
    let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    assert!(efd >= 0);
    ring.register_eventfd(efd).unwrap();

    let by_watchdog = Arc::new(AtomicBool::new(false));
    let peer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(200));
        client.write_all(b"wake up").unwrap();
        client
    });
    // Writes the eventfd only if nobody else woke the read within 30 s.
    let (woken, woken_rx) = std::sync::mpsc::channel::<()>();
    let watchdog = {
        let by_watchdog = by_watchdog.clone();
        std::thread::spawn(move || {
            if woken_rx
                .recv_timeout(std::time::Duration::from_secs(30))
                .is_err()
            {
                by_watchdog.store(true, Ordering::SeqCst);
                let one = 1u64;
                // SAFETY: 8 bytes from a live u64 to our eventfd (closed only after this thread is joined).
                unsafe { libc::write(efd, (&one as *const u64).cast(), 8) };
            }
        })
    };
    let mut count = 0u64;
    // SAFETY: 8 bytes into a live u64, from the blocking eventfd above.
    let n = unsafe { libc::read(efd, (&mut count as *mut u64).cast(), 8) };
    assert_eq!(n, 8);
    let _ = woken.send(());
    assert!(
        !by_watchdog.load(Ordering::SeqCst),
        "the parked read was not woken by the peer's data within 30 s (COOP_TASKRUN left the task work unrun)"
    );
    done.clear();
    ring.drain(&mut done);
    let c = done
        .iter()
        .find(|c| c.user_data == 2)
        .expect("the receive's completion is in the queue when the read returns");
    assert_eq!(c.result, 7);
    let _client = peer.join().unwrap();
    watchdog.join().unwrap();
    // SAFETY: our eventfd, no longer used by anyone (the watchdog has ended).
    unsafe { libc::close(efd) };
}
