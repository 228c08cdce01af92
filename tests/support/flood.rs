//! Strangers holding a listener's connections: silent ones (connected,
//! nothing sent) and trickling ones (a request's first bytes, then one
//! byte every so often), each from a loopback source address of its own
//! (127.0.0.2, .3, ...: what another host looks like here), so a listener
//! that bounds connections per source can be seen doing it.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A TCP connection to `to` from the source address `from` (any port).
pub fn connect_from(from: IpAddr, to: SocketAddr) -> io::Result<TcpStream> {
    let (IpAddr::V4(src), IpAddr::V4(dst)) = (from, to.ip()) else {
        return Err(io::Error::other("IPv4 only"));
    };
    let sa = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: plain socket calls on a descriptor we own; the sockaddrs are
    // live for each call and sized as passed.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let s = TcpStream::from_raw_fd(fd);
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let a = sa(src, 0);
        if libc::bind(fd, (&a as *const libc::sockaddr_in).cast(), len) < 0 {
            return Err(io::Error::last_os_error());
        }
        let b = sa(dst, to.port());
        if libc::connect(fd, (&b as *const libc::sockaddr_in).cast(), len) < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(s)
    }
}

/// Connections held open until dropped, some of them trickling.
pub struct Flood {
    stop: Arc<AtomicBool>,
    /// Connections opened (the listener may have closed some since).
    pub opened: usize,
    /// Connections the listener has ended (EOF or reset seen while trickling).
    pub ended: Arc<AtomicUsize>,
    silent: Vec<TcpStream>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Flood {
    /// `n` connections from `from` to `to` that send nothing.
    pub fn silent(from: IpAddr, to: SocketAddr, n: usize) -> Flood {
        let silent: Vec<TcpStream> = (0..n).filter_map(|_| connect_from(from, to).ok()).collect();
        Flood {
            stop: Arc::new(AtomicBool::new(false)),
            opened: silent.len(),
            ended: Arc::new(AtomicUsize::new(0)),
            silent,
            thread: None,
        }
    }

    /// `n` connections from `from` to `to`, each sending `first`, then one
    /// byte of `rest` every `every` (round and round), until dropped. A
    /// connection the listener ends is counted in `ended` and not reopened.
    pub fn trickle(
        from: IpAddr,
        to: SocketAddr,
        n: usize,
        first: &[u8],
        rest: &[u8],
        every: Duration,
    ) -> Flood {
        let mut socks: Vec<Option<TcpStream>> = Vec::new();
        for _ in 0..n {
            if let Ok(mut s) = connect_from(from, to) {
                let _ = s.set_nonblocking(true);
                let _ = s.write(first);
                socks.push(Some(s));
            }
        }
        let opened = socks.len();
        let stop = Arc::new(AtomicBool::new(false));
        let ended = Arc::new(AtomicUsize::new(0));
        let (stop2, ended2, rest) = (stop.clone(), ended.clone(), rest.to_vec());
        let thread = std::thread::spawn(move || {
            let mut i = 0usize;
            let mut next = Instant::now();
            while !stop2.load(Ordering::Relaxed) {
                if Instant::now() >= next {
                    let b = [rest[i % rest.len().max(1)]];
                    i += 1;
                    for slot in socks.iter_mut() {
                        let Some(s) = slot else { continue };
                        let mut buf = [0u8; 512];
                        let gone = match s.read(&mut buf) {
                            Ok(0) => true,
                            Ok(_) => false, // an answer (408, an alert): it ends next
                            Err(e) => e.kind() != io::ErrorKind::WouldBlock,
                        } || s
                            .write(&b)
                            .is_err_and(|e| e.kind() != io::ErrorKind::WouldBlock);
                        if gone {
                            *slot = None;
                            ended2.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    next += every;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        Flood {
            stop,
            opened,
            ended,
            silent: Vec::new(),
            thread: Some(thread),
        }
    }

    /// How many of the silent connections the listener has ended.
    pub fn silent_ended(&self) -> usize {
        self.silent
            .iter()
            .filter(|s| {
                let _ = s.set_nonblocking(true);
                let mut b = [0u8; 512];
                let mut s: &TcpStream = s;
                loop {
                    match s.read(&mut b) {
                        Ok(0) => return true,
                        Ok(_) => continue,
                        Err(e) => return e.kind() != io::ErrorKind::WouldBlock,
                    }
                }
            })
            .count()
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The source address of the `i`th stranger (127.0.0.2 up).
pub fn stranger(i: u8) -> IpAddr {
    IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2 + i))
}
