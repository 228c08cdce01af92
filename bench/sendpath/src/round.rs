//! One timed round of one variant: a send of k frames to every connection
//! (io_uring SENDMSG / SEND / SEND_ZC / SENDMSG_ZC, batched or one enter
//! per SQE, or plain sendmsg(2)) and its completions, ZC notifications
//! included, timed with CLOCK_THREAD_CPUTIME_ID. EAGAIN and short sends are
//! counted, never retried; any other send error panics.

use std::io;
use std::os::fd::RawFd;

use io_uring::types::Fixed;
use io_uring::{cqueue, opcode, IoUring};

use crate::frames::Frames;
use crate::variant::{Method, Variant, ALL_FLAGS};

/// As the node sends: never wait for socket space, never raise SIGPIPE.
const SEND_FLAGS: i32 = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
/// Not exported by the io-uring crate: ask SEND_ZC to report in its
/// notification whether the kernel had to copy after all ...
const IORING_SEND_ZC_REPORT_USAGE: u16 = 8;
/// ... which it flags with this bit in the notification's result.
const IORING_NOTIF_USAGE_ZC_COPIED: u32 = 1 << 31;

#[derive(Default, Clone, Copy)]
pub struct Round {
    pub cpu_ns: u64,
    pub bytes: u64,
    /// io_uring_enter calls (submits and waits).
    pub enters: u64,
    pub eagain: u64,
    pub short: u64,
    pub notifs: u64,
    pub copied: u64,
    /// Sender CPU until every send's own CQE was reaped (ZC: before the
    /// notifications; otherwise equal to `cpu_ns`).
    pub cpu_sends_ns: u64,
    /// CPU ksoftirqd on the sender's CPU ran from the round's start until the
    /// receiver had everything (0 when not pinned).
    pub softirqd_ns: u64,
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
pub fn round(
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
