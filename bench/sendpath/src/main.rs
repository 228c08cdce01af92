//! sendpath-bench: what does it cost the sending thread, in CPU, to send one
//! small WebSocket frame to each of N loopback TCP sockets, per way of
//! sending it? See docs/bench/sendpath.md.
//!
//! One event is fanned out to N connections per round. Per connection a frame
//! is a per-connection header (WebSocket header + `{"op":0,..,"d":`), a
//! payload shared by all connections, and `}`. The sender (this thread, the
//! accepting side, as in the node) sends one round, then waits until a
//! receiver thread on the other core has read all of it, so every round
//! starts on quiet sockets. Only the round's send + completion work is timed,
//! with CLOCK_THREAD_CPUTIME_ID, which also counts kernel work done in the
//! sender's context (the loopback receive softirq included; softirq work the
//! kernel defers to ksoftirqd is reported beside it). Variants run
//! interleaved (each round runs every variant once, in random order), so
//! machine noise hits all of them alike.

use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

use io_uring::types::Fixed;
use io_uring::{cqueue, opcode, IoUring};

/// As the node sends: never wait for socket space, never raise SIGPIPE.
const SEND_FLAGS: i32 = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
/// Not exported by the io-uring crate: ask SEND_ZC to report in its
/// notification whether the kernel had to copy after all ...
const IORING_SEND_ZC_REPORT_USAGE: u16 = 8;
/// ... which it flags with this bit in the notification's result.
const IORING_NOTIF_USAGE_ZC_COPIED: u32 = 1 << 31;
static SUFFIX: [u8; 1] = *b"}";

// ---------------------------------------------------------------- options

struct Opts {
    conns: usize,
    rounds: usize,
    warmup: usize,
    sizes: Vec<usize>,
    frames: Vec<usize>,
    /// k-frame variants are skipped where k frames exceed this (bounds the
    /// bytes per round and the flat buffers' memory).
    max_send_bytes: usize,
    /// Only run variants whose label contains one of these (the baseline
    /// always runs).
    only: Vec<String>,
    pin: bool,
}

fn usage() -> ! {
    eprintln!(
        "usage: sendpath-bench [--conns N (1000)] [--rounds R (200)] [--warmup W (10)]\n\
         \x20      [--sizes 600,4096,16384,65536] [--frames 1,4,16]\n\
         \x20      [--max-send-bytes 262144] [--only LABEL,..] [--no-pin]"
    );
    std::process::exit(2)
}

fn parse_opts() -> Opts {
    let mut o = Opts {
        conns: 1000,
        rounds: 200,
        warmup: 10,
        sizes: vec![600, 4096, 16384, 65536],
        frames: vec![1, 4, 16],
        max_send_bytes: 256 * 1024,
        only: Vec::new(),
        pin: true,
    };
    let mut args = std::env::args().skip(1);
    let list = |s: Option<String>| -> Vec<usize> {
        s.unwrap_or_else(|| usage())
            .split(',')
            .map(|x| x.trim().parse().unwrap_or_else(|_| usage()))
            .collect()
    };
    let num =
        |s: Option<String>| -> usize { s.and_then(|x| x.parse().ok()).unwrap_or_else(|| usage()) };
    while let Some(a) = args.next() {
        match a.as_str() {
            "--conns" => o.conns = num(args.next()),
            "--rounds" => o.rounds = num(args.next()),
            "--warmup" => o.warmup = num(args.next()),
            "--sizes" => o.sizes = list(args.next()),
            "--frames" => o.frames = list(args.next()),
            "--max-send-bytes" => o.max_send_bytes = num(args.next()),
            "--only" => {
                o.only = args
                    .next()
                    .unwrap_or_else(|| usage())
                    .split(',')
                    .map(str::to_string)
                    .collect()
            }
            "--no-pin" => o.pin = false,
            _ => usage(),
        }
    }
    // One submit must hold a whole round (the SQ is at most 32768 entries).
    if o.conns == 0 || o.conns > 16384 || o.rounds == 0 || o.sizes.iter().any(|&p| p < 8) {
        usage();
    }
    if !o.frames.contains(&1) {
        o.frames.insert(0, 1);
    }
    o
}

// ---------------------------------------------------------------- variants

/// Ring setup flags under test.
#[derive(Clone, Copy, PartialEq, Eq)]
enum RingFlags {
    Default,
    SingleIssuer,
    /// SINGLE_ISSUER | DEFER_TASKRUN (the kernel requires both).
    Defer,
    /// COOP_TASKRUN | TASKRUN_FLAG.
    Coop,
}

const ALL_FLAGS: [RingFlags; 4] = [
    RingFlags::Default,
    RingFlags::SingleIssuer,
    RingFlags::Defer,
    RingFlags::Coop,
];

impl RingFlags {
    fn name(self) -> &'static str {
        match self {
            RingFlags::Default => "default",
            RingFlags::SingleIssuer => "SINGLE_ISSUER",
            RingFlags::Defer => "SINGLE_ISSUER\\|DEFER_TASKRUN",
            RingFlags::Coop => "COOP_TASKRUN\\|TASKRUN_FLAG",
        }
    }

    /// The SQ holds a whole round; the CQ holds a round of sends plus their
    /// SEND_ZC notifications with room to spare.
    fn build(self, sq: u32) -> io::Result<IoUring> {
        let mut b = IoUring::builder();
        b.setup_cqsize(sq * 4);
        match self {
            RingFlags::Default => {}
            RingFlags::SingleIssuer => {
                b.setup_single_issuer();
            }
            RingFlags::Defer => {
                b.setup_single_issuer().setup_defer_taskrun();
            }
            RingFlags::Coop => {
                b.setup_coop_taskrun().setup_taskrun_flag();
            }
        }
        b.build(sq)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Method {
    /// N SENDMSG SQEs (3k iovecs each), one submit: the node today.
    SendmsgBatch,
    /// The same, one io_uring_enter per SQE.
    SendmsgEach,
    /// Copy into a per-connection buffer, N SEND SQEs, one submit.
    FlatBatch,
    /// As FlatBatch with SEND_ZC (waits for every notification).
    ZcBatch,
    /// SENDMSG_ZC of the 3 iovecs, one submit (waits for notifications).
    SendmsgZcBatch,
    /// Plain sendmsg(2) per socket on ordinary fds.
    Syscall,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::SendmsgBatch => "sendmsg-batch",
            Method::SendmsgEach => "sendmsg-each",
            Method::FlatBatch => "send-flat-batch",
            Method::ZcBatch => "send-zc-batch",
            Method::SendmsgZcBatch => "sendmsg-zc-batch",
            Method::Syscall => "syscall-sendmsg",
        }
    }
    fn zc(self) -> bool {
        matches!(self, Method::ZcBatch | Method::SendmsgZcBatch)
    }
}

#[derive(Clone, Copy)]
struct Variant {
    method: Method,
    flags: RingFlags,
    /// Frames per send.
    k: usize,
}

impl Variant {
    fn label(&self) -> String {
        let f = match self.flags {
            RingFlags::Default => "",
            RingFlags::SingleIssuer => "+si",
            RingFlags::Defer => "+si+defer",
            RingFlags::Coop => "+coop",
        };
        format!("{}{} k={}", self.method.name(), f, self.k)
    }
}

/// The variants run at one payload size; the first is the baseline.
fn variants(o: &Opts, frame_len: usize) -> Vec<Variant> {
    let v = |method, flags, k| Variant { method, flags, k };
    use Method::*;
    use RingFlags::*;
    let mut out = vec![v(SendmsgBatch, Default, 1)];
    // Frames per send, for the two batched ways.
    for &k in o.frames.iter().filter(|&&k| k > 1) {
        if k * frame_len <= o.max_send_bytes {
            out.push(v(SendmsgBatch, Default, k));
            out.push(v(FlatBatch, Default, k));
        }
    }
    out.push(v(FlatBatch, Default, 1));
    // Ring flags, for the two batched ways at k = 1.
    for f in &ALL_FLAGS[1..] {
        out.push(v(SendmsgBatch, *f, 1));
        out.push(v(FlatBatch, *f, 1));
    }
    out.push(v(SendmsgEach, Default, 1));
    out.push(v(ZcBatch, Default, 1));
    out.push(v(ZcBatch, Defer, 1));
    out.push(v(SendmsgZcBatch, Default, 1));
    out.push(v(Syscall, Default, 1));
    let base = out[0].label();
    // A filter names a method ("send-flat-batch": all its flags and k), a
    // method with flags ("send-flat-batch+si") or one variant ("... k=1").
    let hit = |label: &str, s: &str| {
        label == s || label.starts_with(&format!("{s} ")) || label.starts_with(&format!("{s}+"))
    };
    out.retain(|x| {
        let l = x.label();
        o.only.is_empty() || l == base || o.only.iter().any(|s| hit(&l, s))
    });
    out
}

// ---------------------------------------------------------------- frames

/// What one payload size sends: headers, the shared payload, per-connection
/// flat buffers, and prebuilt msghdrs/iovecs per k (built once, outside the
/// timing: the node builds them per send too, identically for every
/// variant, and the bench crate measures that build).
struct Frames {
    n: usize,
    frame_len: usize,
    hdr_len: usize,
    /// Most frames per send for this size (headers exist for this many).
    kmax: usize,
    payload: Vec<u8>,
    /// n * kmax headers of hdr_len bytes.
    hdrs: Vec<u8>,
    /// n flat buffers of `flat_stride` bytes.
    flat: Vec<u8>,
    flat_stride: usize,
    msgs: Vec<Msgs>,
}

struct Msgs {
    k: usize,
    /// Pointed to by `msg`; never touched after the msghdrs are built.
    _iov: Vec<libc::iovec>,
    msg: Vec<libc::msghdr>,
}

const PREFIX_A: &[u8] = br#"{"op":0,"t":"MESSAGE_CREATE","s":"#;
const PREFIX_B: &[u8] = br#","d":"#;
/// Sequence numbers are 7 digits so every frame has the same length.
const SEQ_DIGITS: usize = 7;

impl Frames {
    fn new(n: usize, p: usize, kmax_wanted: usize, max_send: usize, ks: &[usize]) -> Frames {
        // A JSON object of exactly p bytes: {"c":"aaa..."}
        let mut payload = Vec::with_capacity(p);
        payload.extend_from_slice(br#"{"c":""#);
        payload.resize(p - 2, b'a');
        payload.extend_from_slice(br#""}"#);
        let body = PREFIX_A.len() + SEQ_DIGITS + PREFIX_B.len() + p + SUFFIX.len();
        let ws = match body {
            0..=125 => 2,
            126..=65535 => 4,
            _ => 10,
        };
        let hdr_len = ws + PREFIX_A.len() + SEQ_DIGITS + PREFIX_B.len();
        let frame_len = hdr_len + p + SUFFIX.len();
        let ks: Vec<usize> = ks
            .iter()
            .copied()
            .filter(|&k| k == 1 || (k <= kmax_wanted && k * frame_len <= max_send))
            .collect();
        let kmax = *ks.iter().max().unwrap();
        let mut hdrs = vec![0u8; n * kmax * hdr_len];
        for (idx, h) in hdrs.chunks_mut(hdr_len).enumerate() {
            let mut at = 0;
            let mut put = |b: &[u8]| {
                h[at..at + b.len()].copy_from_slice(b);
                at += b.len();
            };
            // Server frames are unmasked: FIN|text, then the length.
            match ws {
                2 => put(&[0x81, body as u8]),
                4 => put(&[0x81, 126, (body >> 8) as u8, body as u8]),
                _ => {
                    put(&[0x81, 127]);
                    put(&(body as u64).to_be_bytes());
                }
            }
            put(PREFIX_A);
            put(format!("{:07}", 1_000_000 + idx % 9_000_000).as_bytes());
            put(PREFIX_B);
            debug_assert_eq!(at, hdr_len);
        }
        let flat_stride = kmax * frame_len;
        let flat = vec![0u8; n * flat_stride];
        let mut f = Frames {
            n,
            frame_len,
            hdr_len,
            kmax,
            payload,
            hdrs,
            flat,
            flat_stride,
            msgs: Vec::new(),
        };
        for k in ks {
            let mut iov = Vec::with_capacity(n * 3 * k);
            for i in 0..n {
                for j in 0..k {
                    let h = f.hdr(i, j);
                    for (ptr, len) in [
                        (h.as_ptr(), h.len()),
                        (f.payload.as_ptr(), f.payload.len()),
                        (SUFFIX.as_ptr(), SUFFIX.len()),
                    ] {
                        iov.push(libc::iovec {
                            iov_base: ptr as *mut _,
                            iov_len: len,
                        });
                    }
                }
            }
            let msg = (0..n)
                .map(|i| {
                    // SAFETY: an all-zero msghdr is a valid empty header.
                    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
                    m.msg_iov = iov[i * 3 * k..].as_ptr() as *mut _;
                    m.msg_iovlen = 3 * k;
                    m
                })
                .collect();
            f.msgs.push(Msgs { k, _iov: iov, msg });
        }
        f
    }

    fn hdr(&self, conn: usize, frame: usize) -> &[u8] {
        let at = (conn * self.kmax + frame) * self.hdr_len;
        &self.hdrs[at..at + self.hdr_len]
    }

    fn msgs(&self, k: usize) -> &Msgs {
        self.msgs.iter().find(|m| m.k == k).expect("msghdrs for k")
    }

    /// Gather k frames for `conn` into its flat buffer (the memcpy a flat
    /// send pays); returns the buffer.
    fn flatten(&mut self, conn: usize, k: usize) -> (*const u8, usize) {
        let len = k * self.frame_len;
        let base = conn * self.flat_stride;
        let (hl, fl) = (self.hdr_len, self.frame_len);
        for j in 0..k {
            let at = base + j * fl;
            let h = (conn * self.kmax + j) * hl;
            self.flat[at..at + hl].copy_from_slice(&self.hdrs[h..h + hl]);
            self.flat[at + hl..at + fl - 1].copy_from_slice(&self.payload);
            self.flat[at + fl - 1] = SUFFIX[0];
        }
        (self.flat[base..].as_ptr(), len)
    }
}

// ---------------------------------------------------------------- a round

#[derive(Default, Clone, Copy)]
struct Round {
    cpu_ns: u64,
    bytes: u64,
    /// io_uring_enter calls (submits and waits).
    enters: u64,
    eagain: u64,
    short: u64,
    notifs: u64,
    copied: u64,
    /// Sender CPU until every send's own CQE was reaped (ZC: before the
    /// notifications; otherwise equal to `cpu_ns`).
    cpu_sends_ns: u64,
    /// CPU ksoftirqd on the sender's CPU ran from the round's start until the
    /// receiver had everything (0 when not pinned).
    softirqd_ns: u64,
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime into a local.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Book one send's result (bytes or -errno).
fn account(res: isize, want: usize, conn: usize, r: &mut Round, sent: &mut [u64]) {
    if res < 0 {
        if -res == libc::EAGAIN as isize {
            r.eagain += 1;
        } else {
            panic!(
                "send on connection {conn} failed: {}",
                io::Error::from_raw_os_error(-res as i32)
            );
        }
        return;
    }
    if (res as usize) < want {
        r.short += 1;
    }
    sent[conn] += res as u64;
    r.bytes += res as u64;
}

/// One round of variant `v`: one send of k frames to every connection, and
/// its completions (for ZC, also every notification, so no buffer is reused
/// early and the notification work lands in this round, not a later one).
fn round(
    v: Variant,
    f: &mut Frames,
    rings: &mut [IoUring],
    fds: &[RawFd],
    sent: &mut [u64],
) -> Round {
    let mut r = Round::default();
    let n = f.n;
    let want = v.k * f.frame_len;
    let start = thread_cpu_ns();
    if v.method == Method::Syscall {
        let msgs = f.msgs(v.k);
        for (i, &fd) in fds.iter().enumerate() {
            // SAFETY: the msghdr and everything it points to is live.
            let res = unsafe { libc::sendmsg(fd, &msgs.msg[i], SEND_FLAGS) };
            let res = if res < 0 {
                -(io::Error::last_os_error().raw_os_error().unwrap() as isize)
            } else {
                res
            };
            account(res, want, i, &mut r, sent);
        }
        r.cpu_ns = thread_cpu_ns() - start;
        r.cpu_sends_ns = r.cpu_ns;
        return r;
    }
    let ring = &mut rings[ALL_FLAGS.iter().position(|&x| x == v.flags).unwrap()];
    for i in 0..n {
        let e = match v.method {
            Method::FlatBatch | Method::ZcBatch => {
                let (ptr, len) = f.flatten(i, v.k);
                if v.method == Method::ZcBatch {
                    opcode::SendZc::new(Fixed(i as u32), ptr, len as u32)
                        .flags(SEND_FLAGS)
                        .zc_flags(IORING_SEND_ZC_REPORT_USAGE)
                        .build()
                } else {
                    opcode::Send::new(Fixed(i as u32), ptr, len as u32)
                        .flags(SEND_FLAGS)
                        .build()
                }
            }
            Method::SendmsgZcBatch => opcode::SendMsgZc::new(Fixed(i as u32), &f.msgs(v.k).msg[i])
                .flags(SEND_FLAGS as u32)
                .ioprio(IORING_SEND_ZC_REPORT_USAGE)
                .build(),
            _ => opcode::SendMsg::new(Fixed(i as u32), &f.msgs(v.k).msg[i])
                .flags(SEND_FLAGS as u32)
                .build(),
        };
        // SAFETY: every buffer, iovec and msghdr lives in `f`, untouched
        // until this round's completions (and notifications) are reaped.
        unsafe { ring.submission().push(&e.user_data(i as u64)) }.expect("SQ holds a round");
        if v.method == Method::SendmsgEach {
            ring.submit().expect("io_uring_enter");
            r.enters += 1;
        }
    }
    if v.method != Method::SendmsgEach {
        // One io_uring_enter for the whole round, as the node does.
        let done = ring.submit().expect("io_uring_enter");
        assert_eq!(done, n, "submitted fewer SQEs than pushed");
        r.enters += 1;
    }
    // Reap. Sends issued inline post their CQEs during the submit; anything
    // else (task work, which DEFER_TASKRUN runs only in an enter with
    // GETEVENTS, and ZC notifications) is waited for with GETEVENTS.
    let (mut sends, mut more) = (0, 0);
    loop {
        for cqe in ring.completion() {
            let i = cqe.user_data() as usize;
            if cqueue::notif(cqe.flags()) {
                r.notifs += 1;
                if cqe.result() as u32 & IORING_NOTIF_USAGE_ZC_COPIED != 0 {
                    r.copied += 1;
                }
                continue;
            }
            sends += 1;
            if cqueue::more(cqe.flags()) {
                more += 1; // a notification will follow
            }
            account(cqe.result() as isize, want, i, &mut r, sent);
        }
        if sends == n && r.cpu_sends_ns == 0 {
            r.cpu_sends_ns = thread_cpu_ns() - start;
        }
        if sends == n && r.notifs == more {
            break;
        }
        ring.submit_and_wait(1).expect("io_uring_enter(GETEVENTS)");
        r.enters += 1;
    }
    r.cpu_ns = thread_cpu_ns() - start;
    r
}

// ---------------------------------------------------------------- receiver

struct Shared {
    received: AtomicU64,
    /// Bytes the sender has sent so far; the receiver wakes it on reaching it.
    target: AtomicU64,
    stop: AtomicBool,
}

/// Keep every client socket drained; count bytes per connection. Returns
/// the per-connection totals when told to stop.
fn receive(
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
fn wait_drained(sh: &Shared, target: u64) {
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

// ---------------------------------------------------------------- setup

fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is empty; sched_setaffinity(0) = this thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            eprintln!(
                "warning: cannot pin to CPU {cpu}: {}",
                io::Error::last_os_error()
            );
        }
    }
}

fn raise_nofile() {
    let mut l = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on a local.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut l);
        l.rlim_cur = l.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &l);
    }
}

/// N connected pairs over loopback: (accepted server sockets, clients),
/// TCP_NODELAY on both.
fn connect_pairs(n: usize) -> io::Result<(Vec<TcpStream>, Vec<TcpStream>)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let (mut servers, mut clients) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let c = TcpStream::connect(addr)?;
        let (s, peer) = listener.accept()?;
        assert_eq!(peer, c.local_addr()?, "accepted someone else's connection");
        c.set_nodelay(true)?;
        s.set_nodelay(true)?;
        servers.push(s);
        clients.push(c);
    }
    Ok((servers, clients))
}

/// The pids of ksoftirqd/0, ksoftirqd/1, ... (index = CPU).
fn ksoftirqd_pids() -> Vec<u32> {
    let mut pids = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if let Some(cpu) = comm.trim().strip_prefix("ksoftirqd/") {
            let cpu: usize = cpu.parse().unwrap_or(usize::MAX);
            if cpu < 1024 {
                pids.resize(pids.len().max(cpu + 1), 0);
                pids[cpu] = pid;
            }
        }
    }
    pids
}

/// CPU time a thread has run, in ns (first field of /proc/PID/schedstat).
/// Network softirq work the kernel defers to ksoftirqd is not charged to
/// the sender, so it is tracked separately.
fn schedstat_ns(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// A tiny PRNG for the run order (no dependency needed).
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

// ---------------------------------------------------------------- report

fn quantile(sorted: &[f64], q: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    quantile(&v, 0.5)
}

fn report(vs: &[Variant], rounds: &[Vec<Round>], n: usize) {
    println!(
        "| variant | ring flags | k | ns/send | ns/frame | ns/frame p10–p90 | ratio | ns/frame +ksoftirqd | ratio +ksoftirqd | enters/round | EAGAIN / short | ZC notifs (copied); CPU until the send CQEs |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let frames = |v: &Variant| (n * v.k) as f64;
    let own = |v: &Variant, r: &Round| r.cpu_ns as f64 / frames(v);
    let all = |v: &Variant, r: &Round| (r.cpu_ns + r.softirqd_ns) as f64 / frames(v);
    for (v, rs) in vs.iter().zip(rounds) {
        let mut pf: Vec<f64> = rs.iter().map(|r| own(v, r)).collect();
        pf.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let per_send = median(rs.iter().map(|r| r.cpu_ns as f64 / n as f64).collect());
        // Paired: each round against the baseline's round of the same
        // interleaving pass.
        let paired = |m: &dyn Fn(&Variant, &Round) -> f64| {
            median(
                rs.iter()
                    .zip(&rounds[0])
                    .map(|(r, b)| m(v, r) / m(&vs[0], b))
                    .collect(),
            )
        };
        let sum = |g: fn(&Round) -> u64| rs.iter().map(g).sum::<u64>();
        let zc = if v.method.zc() {
            let sends_only = median(
                rs.iter()
                    .map(|r| r.cpu_sends_ns as f64 / frames(v))
                    .collect(),
            );
            format!(
                "{} ({}); {sends_only:.0} ns/frame before them",
                sum(|r| r.notifs),
                sum(|r| r.copied)
            )
        } else {
            "–".into()
        };
        println!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.0}–{:.0} | {:.2} | {:.0} | {:.2} | {:.1} | {} / {} | {} |",
            v.method.name(),
            v.flags.name(),
            v.k,
            per_send,
            quantile(&pf, 0.5),
            quantile(&pf, 0.1),
            quantile(&pf, 0.9),
            paired(&own),
            median(rs.iter().map(|r| all(v, r)).collect()),
            paired(&all),
            sum(|r| r.enters) as f64 / rs.len() as f64,
            sum(|r| r.eagain),
            sum(|r| r.short),
            zc,
        );
    }
}

// ---------------------------------------------------------------- main

fn main() {
    let o = parse_opts();
    raise_nofile();
    let cpus = thread::available_parallelism().map_or(1, |n| n.get());
    if o.pin {
        pin(0);
    }
    let (servers, clients) = connect_pairs(o.conns).expect("connecting loopback pairs");
    let fds: Vec<RawFd> = servers.iter().map(|s| s.as_raw_fd()).collect();

    // Rings are built on this thread, the one that submits (SINGLE_ISSUER).
    let sq = (o.conns as u32).next_power_of_two().max(8);
    let mut rings: Vec<IoUring> = ALL_FLAGS
        .iter()
        .map(|f| {
            let r = f
                .build(sq)
                .unwrap_or_else(|e| panic!("ring {}: {e}", f.name()));
            r.submitter()
                .register_files(&fds)
                .unwrap_or_else(|e| panic!("register_files: {e}"));
            r
        })
        .collect();

    let sh = Arc::new(Shared {
        received: AtomicU64::new(0),
        target: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let receiver = {
        let (sh, me) = (sh.clone(), thread::current());
        let cpu = (o.pin && cpus > 1).then_some(1);
        thread::spawn(move || receive(clients, sh, me, cpu))
    };

    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    // Loopback receive work is softirq work on the sending CPU: inline in the
    // sender's send calls, unless the kernel defers it to ksoftirqd there.
    let softirqd = ksoftirqd_pids();
    let soft_sender = if o.pin {
        softirqd.first().copied().unwrap_or(0)
    } else {
        0
    };
    let mut sent = vec![0u64; o.conns];
    let mut total = 0u64;
    println!(
        "# sendpath-bench: N = {} connections, {} rounds per variant (+{} warm-up), interleaved; {} CPUs; load average at start: {}\n",
        o.conns,
        o.rounds,
        o.warmup,
        cpus,
        loadavg()
    );
    for &p in &o.sizes {
        let kmax = *o.frames.iter().max().unwrap();
        let mut f = Frames::new(o.conns, p, kmax, o.max_send_bytes, &o.frames);
        let vs = variants(&o, f.frame_len);
        let mut rounds: Vec<Vec<Round>> = vec![Vec::with_capacity(o.rounds); vs.len()];
        let load_start = loadavg();
        let t0 = Instant::now();
        let soft_start: Vec<u64> = softirqd.iter().map(|&p| schedstat_ns(p)).collect();
        let mut order: Vec<usize> = (0..vs.len()).collect();
        for r in 0..o.warmup + o.rounds {
            // Every variant once per round, in a fresh random order, so no
            // variant always runs first or after the same one.
            for j in (1..order.len()).rev() {
                order.swap(j, (rng.next() % (j as u64 + 1)) as usize);
            }
            for &vi in &order {
                let soft0 = schedstat_ns(soft_sender);
                let mut out = round(vs[vi], &mut f, &mut rings, &fds, &mut sent);
                total += out.bytes;
                wait_drained(&sh, total);
                // Includes softirq work left over after the round's sends.
                out.softirqd_ns = schedstat_ns(soft_sender) - soft0;
                if r >= o.warmup {
                    rounds[vi].push(out);
                } else if out.eagain + out.short > 0 {
                    eprintln!(
                        "warm-up: {} had {} EAGAIN, {} short sends",
                        vs[vi].label(),
                        out.eagain,
                        out.short
                    );
                }
            }
        }
        println!(
            "## P = {p} B payload: frame {} B (header {} B + payload + 1), N = {}\n",
            f.frame_len, f.hdr_len, o.conns
        );
        println!(
            "{} rounds x {} variants in {:.1} s wall; load average {} at start, {} at end. Sender-thread CPU, medians over rounds; ratio = median over rounds of (variant / baseline `sendmsg-batch` default k=1 in the same pass), per frame; +ksoftirqd adds what ksoftirqd on the sender's CPU ran from the round's start until the receiver had it all.\n",
            o.rounds,
            vs.len(),
            t0.elapsed().as_secs_f64(),
            load_start,
            loadavg()
        );
        report(&vs, &rounds, o.conns);
        let sender_ms = rounds.iter().flatten().map(|r| r.cpu_ns).sum::<u64>() / 1_000_000;
        let soft: Vec<String> = softirqd
            .iter()
            .zip(&soft_start)
            .enumerate()
            .map(|(cpu, (&p, &s0))| {
                format!("ksoftirqd/{cpu} {} ms", (schedstat_ns(p) - s0) / 1_000_000)
            })
            .collect();
        println!(
            "\nCPU check: timed sender CPU {sender_ms} ms in total (measured rounds); during the whole table (warm-up and waits included): {}.",
            soft.join(", ")
        );
        println!();
    }

    sh.stop.store(true, Ordering::Release);
    let got = receiver.join().expect("receiver thread");
    let bad: Vec<usize> = (0..o.conns).filter(|&i| got[i] != sent[i]).collect();
    assert!(
        bad.is_empty(),
        "byte counts differ on {} connections (first: #{} sent {} received {})",
        bad.len(),
        bad[0],
        sent[bad[0]],
        got[bad[0]]
    );
    println!(
        "Checked: the receiver read exactly the {total} bytes sent, on every one of the {} connections.",
        o.conns
    );
    drop(servers);
}
