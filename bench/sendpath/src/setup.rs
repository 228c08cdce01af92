//! The machine around the benchmark: pinning to a CPU, RLIMIT_NOFILE, the
//! N loopback connection pairs, ksoftirqd's CPU time from /proc, the load
//! average, and the small PRNG that shuffles the run order. A leaf.

use std::io;
use std::net::{TcpListener, TcpStream};

pub fn pin(cpu: usize) {
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

pub fn raise_nofile() {
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
pub fn connect_pairs(n: usize) -> io::Result<(Vec<TcpStream>, Vec<TcpStream>)> {
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
pub fn ksoftirqd_pids() -> Vec<u32> {
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
pub fn schedstat_ns(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/schedstat"))
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// A tiny PRNG for the run order (no dependency needed).
pub struct XorShift(pub u64);

impl XorShift {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
