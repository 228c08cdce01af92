//! The ways of sending under test: ring setup flags ([`RingFlags`]), send
//! methods ([`Method`]) and frames per send, combined into the
//! [`Variant`]s one payload size runs (the first is the baseline every
//! ratio is taken against), filtered by `--only`.

use std::io;

use io_uring::IoUring;

use crate::opts::Opts;

/// Ring setup flags under test.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum RingFlags {
    Default,
    SingleIssuer,
    /// SINGLE_ISSUER | DEFER_TASKRUN (the kernel requires both).
    Defer,
    /// COOP_TASKRUN | TASKRUN_FLAG.
    Coop,
}

pub const ALL_FLAGS: [RingFlags; 4] = [
    RingFlags::Default,
    RingFlags::SingleIssuer,
    RingFlags::Defer,
    RingFlags::Coop,
];

impl RingFlags {
    pub fn name(self) -> &'static str {
        match self {
            RingFlags::Default => "default",
            RingFlags::SingleIssuer => "SINGLE_ISSUER",
            RingFlags::Defer => "SINGLE_ISSUER\\|DEFER_TASKRUN",
            RingFlags::Coop => "COOP_TASKRUN\\|TASKRUN_FLAG",
        }
    }

    /// The SQ holds a whole round; the CQ holds a round of sends plus their
    /// SEND_ZC notifications with room to spare.
    pub fn build(self, sq: u32) -> io::Result<IoUring> {
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
pub enum Method {
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
    pub fn name(self) -> &'static str {
        match self {
            Method::SendmsgBatch => "sendmsg-batch",
            Method::SendmsgEach => "sendmsg-each",
            Method::FlatBatch => "send-flat-batch",
            Method::ZcBatch => "send-zc-batch",
            Method::SendmsgZcBatch => "sendmsg-zc-batch",
            Method::Syscall => "syscall-sendmsg",
        }
    }
    pub fn zc(self) -> bool {
        matches!(self, Method::ZcBatch | Method::SendmsgZcBatch)
    }
}

#[derive(Clone, Copy)]
pub struct Variant {
    pub method: Method,
    pub flags: RingFlags,
    /// Frames per send.
    pub k: usize,
}

impl Variant {
    pub fn label(&self) -> String {
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
pub fn variants(o: &Opts, frame_len: usize) -> Vec<Variant> {
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
