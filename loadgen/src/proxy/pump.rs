//! The proxy's threads: one accept thread (connection limit, immediate
//! reset under [`Fault::Drop`]) and per connection four: a reader and a
//! writer per direction. Readers stop reading while their direction holds
//! `max_pending` bytes; writers forward a chunk when the current fault
//! allows (at once, after its latency, never while stalled). Blocking
//! calls wake every `POLL` to notice a closed connection; the last thread
//! of a connection out removes it from the table.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::script::Fault;
use super::state::{lock, reset_and_wake, set_linger_zero, Conn, Dir, Item, Shared};

/// Timeout of the upstream connect.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

pub(super) const CHUNK: usize = 16 * 1024;
/// Blocking reads and writes wake up this often to notice a closed connection.
const POLL: Duration = Duration::from_millis(200);
const THREAD_STACK: usize = 128 * 1024;

pub(super) fn accept_loop(listener: TcpListener, sh: Arc<Shared>) {
    loop {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) => {
                if sh.stopping.load(Ordering::Acquire) {
                    return;
                }
                // EMFILE and friends: back off instead of spinning.
                if e.kind() != ErrorKind::Interrupted && e.kind() != ErrorKind::ConnectionAborted {
                    thread::sleep(Duration::from_millis(20));
                }
                continue;
            }
        };
        if sh.stopping.load(Ordering::Acquire) {
            return;
        }
        let c = &sh.counters;
        c.accepted.fetch_add(1, Ordering::Relaxed);
        if sh.fault() == Fault::Drop {
            set_linger_zero(&stream);
            c.dropped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let client_clone = match stream.try_clone() {
            Ok(s) => s,
            Err(_) => continue,
        };
        let id = sh.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn {
            id,
            client: client_clone,
            upstream: Mutex::new(None),
            dead: AtomicBool::new(false),
            dirs: [Dir::default(), Dir::default()],
            running: AtomicUsize::new(1),
        });
        {
            let mut conns = lock(&sh.conns);
            if conns.len() >= sh.max_connections {
                drop(conns);
                c.refused.fetch_add(1, Ordering::Relaxed);
                continue; // both handles close here
            }
            conns.insert(id, conn.clone());
        }
        let sh2 = sh.clone();
        let conn2 = conn.clone();
        let spawned = thread::Builder::new()
            .name("proxy-conn".into())
            .stack_size(THREAD_STACK)
            .spawn(move || connection(sh2, conn2, stream));
        if spawned.is_err() {
            conn.abort();
            lock(&sh.conns).remove(&id);
        }
    }
}

/// Called by each connection thread as it ends.
pub(super) fn thread_done(sh: &Shared, conn: &Conn) {
    if conn.running.fetch_sub(1, Ordering::AcqRel) == 1 {
        // Forget what was never forwarded.
        for d in &conn.dirs {
            let mut st = lock(&d.state);
            sh.counters
                .pending
                .fetch_sub(st.pending as u64, Ordering::Relaxed);
            st.pending = 0;
            st.queue.clear();
        }
        lock(&sh.conns).remove(&conn.id);
    }
}

pub(super) fn connection(sh: Arc<Shared>, conn: Arc<Conn>, client: TcpStream) {
    let upstream = match open_upstream(&sh, &conn) {
        Some(u) => u,
        None => {
            conn.abort();
            drop(client);
            thread_done(&sh, &conn);
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    for s in [&client, &upstream] {
        let _ = s.set_read_timeout(Some(POLL));
        let _ = s.set_write_timeout(Some(POLL));
    }
    // Handles: each thread owns clones of the sockets it uses.
    let clones = (|| -> io::Result<_> {
        Ok((
            client.try_clone()?,
            upstream.try_clone()?,
            upstream.try_clone()?,
        ))
    })();
    let (client_r, upstream_w, upstream_r) = match clones {
        Ok(c) => c,
        Err(_) => {
            conn.abort();
            thread_done(&sh, &conn);
            return;
        }
    };
    conn.running.fetch_add(3, Ordering::AcqRel);
    let mut spawn_failed = false;
    let jobs: Vec<Box<dyn FnOnce() + Send>> = {
        let (s1, c1) = (sh.clone(), conn.clone());
        let (s2, c2) = (sh.clone(), conn.clone());
        let (s3, c3) = (sh.clone(), conn.clone());
        vec![
            Box::new(move || reader(&s1, &c1, 0, client_r)),
            Box::new(move || writer(&s2, &c2, 0, upstream_w)),
            Box::new(move || reader(&s3, &c3, 1, upstream_r)),
        ]
    };
    for job in jobs {
        let (sh2, conn2) = (sh.clone(), conn.clone());
        let r = thread::Builder::new()
            .name("proxy-io".into())
            .stack_size(THREAD_STACK)
            .spawn(job);
        if r.is_err() {
            // The job (and its socket clone) was dropped; account for it.
            spawn_failed = true;
            conn2.abort();
            thread_done(&sh2, &conn2);
        }
    }
    if spawn_failed {
        conn.abort();
    }
    writer(&sh, &conn, 1, client);
}

/// Waits out a stall, then connects upstream. None: the connection is to
/// be closed (drop, stop, or connect failure).
pub(super) fn open_upstream(sh: &Shared, conn: &Conn) -> Option<TcpStream> {
    {
        let mut g = lock(&sh.fault);
        loop {
            if conn.is_dead() || sh.stopping.load(Ordering::Acquire) {
                return None;
            }
            match *g {
                Fault::Stall => {
                    g = sh
                        .changed
                        .wait_timeout(g, POLL)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                Fault::Drop => {
                    drop(g);
                    if conn.abort() {
                        sh.counters.dropped.fetch_add(1, Ordering::Relaxed);
                    }
                    return None;
                }
                _ => break,
            }
        }
    }
    let up = match TcpStream::connect_timeout(&sh.upstream, CONNECT_TIMEOUT) {
        Ok(u) => u,
        Err(_) => {
            sh.counters
                .upstream_failures
                .fetch_add(1, Ordering::Relaxed);
            return None;
        }
    };
    let clone = up.try_clone().ok()?;
    *lock(&conn.upstream) = Some(clone);
    // An abort between the connect and the line above missed this socket.
    if conn.is_dead() {
        reset_and_wake(&up);
        return None;
    }
    Some(up)
}

pub(super) fn reader(sh: &Shared, conn: &Conn, dir: usize, mut src: TcpStream) {
    let d = &conn.dirs[dir];
    let mut buf = vec![0u8; CHUNK];
    loop {
        {
            let mut st = lock(&d.state);
            while st.pending >= sh.max_pending && !conn.is_dead() {
                st =
                    d.cv.wait_timeout(st, POLL)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
            }
        }
        if conn.is_dead() {
            break;
        }
        match src.read(&mut buf) {
            Ok(0) => {
                if !conn.is_dead() {
                    let mut st = lock(&d.state);
                    st.queue.push_back(Item::Eof);
                    d.cv.notify_all();
                }
                break;
            }
            Ok(n) => {
                let mut st = lock(&d.state);
                st.queue
                    .push_back(Item::Data(Instant::now(), buf[..n].to_vec()));
                st.pending += n;
                sh.counters.pending.fetch_add(n as u64, Ordering::Relaxed);
                d.cv.notify_all();
            }
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) => {
                conn.abort();
                break;
            }
        }
    }
    thread_done(sh, conn);
}

pub(super) fn writer(sh: &Shared, conn: &Conn, dir: usize, mut dst: TcpStream) {
    let d = &conn.dirs[dir];
    let bytes = if dir == 0 {
        &sh.counters.bytes_up
    } else {
        &sh.counters.bytes_down
    };
    'outer: loop {
        // Wait until the head of the queue may go.
        let item = {
            let mut st = lock(&d.state);
            loop {
                if conn.is_dead() {
                    break 'outer;
                }
                let delay = match sh.fault() {
                    Fault::Pass => Duration::ZERO,
                    Fault::Latency(l) => l,
                    Fault::Stall => {
                        st =
                            d.cv.wait_timeout(st, POLL)
                                .unwrap_or_else(|e| e.into_inner())
                                .0;
                        continue;
                    }
                    Fault::Drop => {
                        drop(st);
                        if conn.abort() {
                            sh.counters.dropped.fetch_add(1, Ordering::Relaxed);
                        }
                        break 'outer;
                    }
                };
                let due = match st.queue.front() {
                    None => {
                        st =
                            d.cv.wait_timeout(st, POLL)
                                .unwrap_or_else(|e| e.into_inner())
                                .0;
                        continue;
                    }
                    Some(Item::Eof) => None,
                    Some(Item::Data(t, _)) => Some(*t + delay),
                };
                if let Some(due) = due {
                    let now = Instant::now();
                    if now < due {
                        st =
                            d.cv.wait_timeout(st, due - now)
                                .unwrap_or_else(|e| e.into_inner())
                                .0;
                        continue;
                    }
                }
                break st.queue.pop_front();
            }
        };
        match item {
            None => continue,
            Some(Item::Eof) => {
                let _ = dst.shutdown(Shutdown::Write);
                break;
            }
            Some(Item::Data(_, data)) => {
                let ok = write_all(conn, &mut dst, &data);
                {
                    let mut st = lock(&d.state);
                    st.pending = st.pending.saturating_sub(data.len());
                    d.cv.notify_all();
                }
                sh.counters
                    .pending
                    .fetch_sub(data.len() as u64, Ordering::Relaxed);
                if !ok {
                    conn.abort();
                    break;
                }
                bytes.fetch_add(data.len() as u64, Ordering::Relaxed);
            }
        }
    }
    thread_done(sh, conn);
}

/// Writes everything unless the connection dies or the peer fails.
pub(super) fn write_all(conn: &Conn, dst: &mut TcpStream, mut data: &[u8]) -> bool {
    while !data.is_empty() {
        if conn.is_dead() {
            return false;
        }
        match dst.write(data) {
            Ok(0) => return false,
            Ok(n) => data = &data[n..],
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
                ) => {}
            Err(_) => return false,
        }
    }
    true
}
