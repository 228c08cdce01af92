//! An HTTP/1.1 front for the small listeners beside the gateway (a node's
//! admin port, its portal): one thread polls every connection, so an idle
//! or trickling client costs a descriptor and a buffer, never a thread or
//! a turn of anyone else's.
//!
//! ```text
//!   accept ──> Reading ──(head + Content-Length body, whole)──> handler
//!                │  the whole request before `request_deadline`,      │
//!                │  or 408 and closed; too big: 431 / 413              │
//!                ▼                                                     ▼
//!          evicted when the front is full          Answer(bytes) now, or
//!          (the oldest still Reading goes,         Later: bytes through a
//!           so a new client always gets in)        `Reply` from any thread
//!                                                        │
//!                             Writing (non-blocking, before `write_deadline`) ──> closed
//! ```
//!
//! Bounds: `max_connections` open at once (beyond, the oldest connection
//! still reading its request is closed to make room: an idle flood cannot
//! lock a health check out); a request's head at most `max_head` bytes,
//! its body at most `max_body`; one request per connection (every answer
//! says `Connection: close`). Replies that come for a connection already
//! gone are dropped. Nothing here knows what the requests mean.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::http;

/// What a front allows.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_connections: usize,
    /// From accept to the request's last byte.
    pub request_deadline: Duration,
    /// From the answer to its last byte taken by the kernel.
    pub write_deadline: Duration,
    /// From the whole request to the handler's answer (a `Later` never
    /// answered gets 503).
    pub answer_deadline: Duration,
    pub max_head: usize,
    pub max_body: usize,
}

/// A whole request: its head (through the blank line) and body.
pub struct Request {
    pub peer: SocketAddr,
    pub bytes: Vec<u8>,
    pub head_len: usize,
}

impl Request {
    pub fn head(&self) -> &[u8] {
        &self.bytes[..self.head_len]
    }
    pub fn body(&self) -> &[u8] {
        &self.bytes[self.head_len..]
    }
}

/// What the handler does with a request.
pub enum Handled {
    /// The whole answer (status line, headers, body), written now.
    Answer(Vec<u8>),
    /// The answer comes later through this request's `Reply`.
    Later,
}

/// Where an answer given later goes: any thread may send it, once.
pub struct Reply {
    slot: usize,
    generation: u64,
    inbox: Arc<Inbox>,
}

impl Reply {
    pub fn send(self, answer: Vec<u8>) {
        self.inbox
            .answers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((self.slot, self.generation, answer));
        self.inbox.wake();
    }
}

/// Answers from other threads, and the eventfd that wakes the poll.
struct Inbox {
    answers: Mutex<Vec<(usize, u64, Vec<u8>)>>,
    event: OwnedFd,
}

impl Inbox {
    fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writing 8 bytes from a live u64 to our own eventfd.
        let _ = unsafe {
            libc::write(
                self.event.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
    }

    fn drain_event(&self) {
        let mut n: u64 = 0;
        // SAFETY: reading 8 bytes into a live u64 from our own non-blocking eventfd.
        let _ = unsafe {
            libc::read(
                self.event.as_raw_fd(),
                (&mut n as *mut u64).cast(),
                std::mem::size_of::<u64>(),
            )
        };
    }
}

/// What a front counted, for its owner's metrics.
#[derive(Debug, Default)]
pub struct FrontStats {
    pub accepted: std::sync::atomic::AtomicU64,
    /// Closed before a whole request: its deadline passed (408).
    pub timed_out: std::sync::atomic::AtomicU64,
    /// Closed to make room for a newer connection.
    pub evicted: std::sync::atomic::AtomicU64,
    /// Refused as malformed or too large (400, 413, 431).
    pub refused: std::sync::atomic::AtomicU64,
}

enum State {
    Reading {
        buf: Vec<u8>,
        deadline: Instant,
    },
    Waiting {
        deadline: Instant,
    },
    Writing {
        out: Vec<u8>,
        at: usize,
        deadline: Instant,
    },
}

struct Conn {
    sock: TcpStream,
    peer: SocketAddr,
    state: State,
    generation: u64,
    /// Accept order: the oldest reading connection is evicted first.
    opened: u64,
}

/// The handle of a running front: the answers' way in, for `Reply`.
pub struct Front {
    inbox: Arc<Inbox>,
}

impl Front {
    /// A front over `listener` (set non-blocking here).
    pub fn new(listener: &TcpListener) -> io::Result<Front> {
        listener.set_nonblocking(true)?;
        // SAFETY: eventfd has no memory preconditions; we own the result.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Front {
            inbox: Arc::new(Inbox {
                answers: Mutex::new(Vec::new()),
                // SAFETY: fd is a fresh descriptor nobody else owns.
                event: unsafe { OwnedFd::from_raw_fd(fd) },
            }),
        })
    }

    /// Serve until `stop`: `handle` gets each whole request, with the
    /// `Reply` for an answer it gives later (it drops it to answer now).
    pub fn run(
        self,
        listener: TcpListener,
        limits: Limits,
        stats: &FrontStats,
        stop: &AtomicBool,
        mut handle: impl FnMut(Request, Reply) -> Handled,
    ) {
        assert!(limits.max_connections > 0, "a front serves someone");
        let mut conns: Vec<Option<Conn>> = Vec::new();
        let mut generation = 0u64;
        let mut fds: Vec<libc::pollfd> = Vec::new();
        let mut slots: Vec<usize> = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            // Deadlines: a request not whole gets 408, an answer not given
            // 503; an answer not taken ends the connection.
            for c in conns.iter_mut() {
                let Some(conn) = c else { continue };
                match &conn.state {
                    State::Reading { deadline, .. } if now >= *deadline => {
                        stats.timed_out.fetch_add(1, Ordering::Relaxed);
                        answer(
                            conn,
                            plain(408, "the request did not arrive in time\n"),
                            limits,
                            now,
                        );
                    }
                    State::Waiting { deadline } if now >= *deadline => {
                        answer(
                            conn,
                            plain(503, "no answer in time: try again\n"),
                            limits,
                            now,
                        );
                    }
                    State::Writing { deadline, .. } if now >= *deadline => *c = None,
                    _ => {}
                }
            }
            // What to wait for.
            fds.clear();
            slots.clear();
            fds.push(pollfd(listener.as_raw_fd(), libc::POLLIN));
            fds.push(pollfd(self.inbox.event.as_raw_fd(), libc::POLLIN));
            let mut next = now + Duration::from_millis(100);
            for (i, c) in conns.iter().enumerate() {
                let Some(conn) = c else { continue };
                let (events, deadline) = match &conn.state {
                    State::Reading { deadline, .. } => (libc::POLLIN, *deadline),
                    State::Waiting { deadline } => (0, *deadline),
                    State::Writing { deadline, .. } => (libc::POLLOUT, *deadline),
                };
                next = next.min(deadline);
                fds.push(pollfd(conn.sock.as_raw_fd(), events));
                slots.push(i);
            }
            let wait = next
                .saturating_duration_since(now)
                .as_millis()
                .clamp(1, 100) as i32;
            // SAFETY: `fds` is a live, correctly sized array for the call.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait) };
            if n < 0 {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            let now = Instant::now();
            // Answers from other threads.
            if fds[1].revents != 0 {
                self.inbox.drain_event();
            }
            let answers =
                std::mem::take(&mut *self.inbox.answers.lock().unwrap_or_else(|p| p.into_inner()));
            for (slot, g, bytes) in answers {
                if let Some(Some(conn)) = conns.get_mut(slot) {
                    if conn.generation == g && matches!(conn.state, State::Waiting { .. }) {
                        answer(conn, bytes, limits, now);
                    }
                }
            }
            // Readable and writable connections.
            for (k, &i) in slots.iter().enumerate() {
                let revents = fds[k + 2].revents;
                if revents == 0 {
                    continue;
                }
                let Some(conn) = conns[i].as_mut() else {
                    continue;
                };
                let keep = match conn.state {
                    State::Reading { .. } => self.read(conn, i, limits, stats, now, &mut handle),
                    State::Writing { .. } => write(conn),
                    State::Waiting { .. } => revents & (libc::POLLHUP | libc::POLLERR) == 0,
                };
                if !keep {
                    conns[i] = None;
                }
            }
            // New connections.
            if fds[0].revents != 0 {
                loop {
                    let (sock, peer) = match listener.accept() {
                        Ok(a) => a,
                        // WouldBlock, or EMFILE and the like: the next poll retries.
                        Err(_) => break,
                    };
                    if sock.set_nonblocking(true).is_err() {
                        continue;
                    }
                    stats.accepted.fetch_add(1, Ordering::Relaxed);
                    let open = conns.iter().filter(|c| c.is_some()).count();
                    if open >= limits.max_connections {
                        // The oldest one still reading makes room.
                        let oldest = conns
                            .iter()
                            .enumerate()
                            .filter_map(|(i, c)| {
                                let c = c.as_ref()?;
                                matches!(c.state, State::Reading { .. }).then_some((c.opened, i))
                            })
                            .min();
                        let Some((_, i)) = oldest else {
                            continue; // all answering: this one is closed
                        };
                        conns[i] = None;
                        stats.evicted.fetch_add(1, Ordering::Relaxed);
                    }
                    generation += 1;
                    let conn = Conn {
                        sock,
                        peer,
                        state: State::Reading {
                            buf: Vec::new(),
                            deadline: now + limits.request_deadline,
                        },
                        generation,
                        opened: generation,
                    };
                    match conns.iter().position(Option::is_none) {
                        Some(i) => conns[i] = Some(conn),
                        None => conns.push(Some(conn)),
                    }
                }
            }
        }
    }

    /// Reads what is there; a whole request goes to `handle`. False: close.
    fn read(
        &self,
        conn: &mut Conn,
        slot: usize,
        limits: Limits,
        stats: &FrontStats,
        now: Instant,
        handle: &mut impl FnMut(Request, Reply) -> Handled,
    ) -> bool {
        let State::Reading { buf, .. } = &mut conn.state else {
            return true;
        };
        let mut chunk = [0u8; 4096];
        loop {
            match conn.sock.read(&mut chunk) {
                Ok(0) => return false,
                Ok(k) => buf.extend_from_slice(&chunk[..k]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return false,
            }
            if buf.len() > limits.max_head + limits.max_body {
                break;
            }
        }
        let refuse = |conn: &mut Conn, status: u16, why: &str| {
            stats.refused.fetch_add(1, Ordering::Relaxed);
            answer(conn, plain(status, why), limits, now);
            true
        };
        let (head_len, length) = match http::parse_head(buf) {
            Ok(None) if buf.len() >= limits.max_head => {
                return refuse(conn, 431, "request head too large\n")
            }
            Ok(None) => return true,
            Err(e) => return refuse(conn, e.status(), "bad request\n"),
            Ok(Some((n, _))) if n > limits.max_head => {
                return refuse(conn, 431, "request head too large\n")
            }
            Ok(Some((n, head))) => (n, head.content_length),
        };
        if length > limits.max_body {
            return refuse(conn, 413, "request body too large\n");
        }
        if buf.len() < head_len + length {
            return true; // the body is still coming
        }
        buf.truncate(head_len + length);
        let bytes = std::mem::take(buf);
        conn.state = State::Waiting {
            deadline: now + limits.answer_deadline,
        };
        let reply = Reply {
            slot,
            generation: conn.generation,
            inbox: self.inbox.clone(),
        };
        let req = Request {
            peer: conn.peer,
            bytes,
            head_len,
        };
        if let Handled::Answer(out) = handle(req, reply) {
            answer(conn, out, limits, now);
        }
        true
    }
}

fn answer(conn: &mut Conn, out: Vec<u8>, limits: Limits, now: Instant) {
    // Nothing more is read: the peer's next bytes, if any, are ignored.
    let _ = conn.sock.shutdown(std::net::Shutdown::Read);
    conn.state = State::Writing {
        out,
        at: 0,
        deadline: now + limits.write_deadline,
    };
    let _ = write(conn);
}

/// Writes what the socket takes. False: done (or failed): close.
fn write(conn: &mut Conn) -> bool {
    let State::Writing { out, at, .. } = &mut conn.state else {
        return true;
    };
    while *at < out.len() {
        match conn.sock.write(&out[*at..]) {
            Ok(0) => return false,
            Ok(k) => *at += k,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    let _ = conn.sock.flush();
    false
}

fn pollfd(fd: RawFd, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

/// A short plain-text answer that closes the connection.
pub fn plain(status: u16, body: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(128 + body.len());
    http::write_response(status, "text/plain", body.as_bytes(), false, &[], &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            max_connections: 8,
            request_deadline: Duration::from_millis(400),
            write_deadline: Duration::from_secs(2),
            answer_deadline: Duration::from_millis(500),
            max_head: 1024,
            max_body: 64,
        }
    }

    struct Running {
        addr: SocketAddr,
        stop: Arc<AtomicBool>,
        stats: Arc<FrontStats>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl Drop for Running {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }

    /// A front answering `/now` at once, `/later` from another thread,
    /// `/never` not at all, echoing the body's length.
    fn start(limits: Limits) -> Running {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(FrontStats::default());
        let (s2, st2) = (stop.clone(), stats.clone());
        let thread = std::thread::spawn(move || {
            let front = Front::new(&listener).unwrap();
            front.run(listener, limits, &st2, &s2, |req, reply| {
                let head = String::from_utf8_lossy(req.head()).into_owned();
                let body = format!("{} bytes\n", req.body().len());
                if head.starts_with("GET /later") {
                    std::thread::spawn(move || {
                        std::thread::sleep(Duration::from_millis(50));
                        reply.send(plain(200, &body));
                    });
                    Handled::Later
                } else if head.starts_with("GET /never") {
                    std::mem::forget(reply);
                    Handled::Later
                } else {
                    Handled::Answer(plain(200, &body))
                }
            });
        });
        Running {
            addr,
            stop,
            stats,
            thread: Some(thread),
        }
    }

    fn exchange(addr: SocketAddr, req: &[u8]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        s.write_all(req).unwrap();
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    #[test]
    fn answers_now_and_later_and_bodies_whole() {
        let f = start(limits());
        let r = exchange(f.addr, b"GET /now HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(
            r.starts_with("HTTP/1.1 200") && r.ends_with("0 bytes\n"),
            "{r}"
        );
        let r = exchange(f.addr, b"GET /later HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        let r = exchange(
            f.addr,
            b"POST /now HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
        );
        assert!(r.ends_with("5 bytes\n"), "{r}");
        let r = exchange(f.addr, b"GET /never HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 503"), "no answer in time: {r}");
    }

    #[test]
    fn too_big_chunked_or_malformed_get_their_status() {
        let f = start(limits());
        let r = exchange(f.addr, b"POST /now HTTP/1.1\r\nContent-Length: 65\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 413"), "{r}");
        let r = exchange(
            f.addr,
            b"POST /now HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        );
        assert!(r.starts_with("HTTP/1.1 400"), "no chunked bodies: {r}");
        let mut big = b"GET /now HTTP/1.1\r\nX: ".to_vec();
        big.extend(std::iter::repeat_n(b'a', 2000));
        let r = exchange(f.addr, &big);
        assert!(r.starts_with("HTTP/1.1 431"), "{r}");
        let r = exchange(f.addr, b"\x16\x03\x01 not http\r\n\r\n");
        assert!(r.starts_with("HTTP/1.1 400"), "{r}");
    }

    #[test]
    fn a_trickling_client_gets_408_at_its_deadline_and_delays_no_one() {
        let f = start(limits());
        let mut slow = TcpStream::connect(f.addr).unwrap();
        slow.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let t = Instant::now();
        let trickle = std::thread::spawn(move || {
            for b in b"GET /now HTTP/1.1\r\nHost: x\r\n" {
                if slow.write_all(&[*b]).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let mut out = String::new();
            let _ = slow.read_to_string(&mut out);
            out
        });
        // Others are answered meanwhile.
        for _ in 0..5 {
            let r = exchange(f.addr, b"GET /now HTTP/1.1\r\n\r\n");
            assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        }
        let r = trickle.join().unwrap();
        assert!(r.is_empty() || r.starts_with("HTTP/1.1 408"), "{r}");
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "the deadline is the whole request's"
        );
        assert_eq!(f.stats.timed_out.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_full_front_makes_room_by_closing_the_oldest_idle_connection() {
        let f = start(limits());
        let idle: Vec<TcpStream> = (0..20)
            .map(|_| TcpStream::connect(f.addr).unwrap())
            .collect();
        std::thread::sleep(Duration::from_millis(50));
        for _ in 0..3 {
            let r = exchange(f.addr, b"GET /now HTTP/1.1\r\n\r\n");
            assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        }
        assert!(
            f.stats.evicted.load(Ordering::Relaxed) >= 12,
            "{:?}",
            f.stats
        );
        drop(idle);
    }
}
