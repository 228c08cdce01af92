//! One-time setup around rings, plain libc and no io_uring: raising and
//! reading RLIMIT_NOFILE (it caps every fixed file table, see
//! [`cap_fixed_files`]), and building the non-blocking SO_REUSEPORT
//! listeners ([`listen_reuseport`], [`set_send_buffer`]) that rings accept
//! connections from. Errors are returned as `io::Error`, never panics.

use std::io;

/// Size a fixed table: the wanted number, capped by the soft RLIMIT_NOFILE
/// (the kernel refuses larger tables).
pub fn cap_fixed_files(wanted: u32) -> u32 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain getrlimit into a local.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return wanted;
    }
    let soft = lim.rlim_cur.min(u32::MAX as u64) as u32;
    wanted.min(soft)
}

/// Raise the soft RLIMIT_NOFILE to the hard limit (tables are capped by it).
pub fn raise_nofile_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write `lim`, a local that lives across both calls.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
    }
    lim.rlim_cur
}

/// Cap the kernel send buffer of sockets accepted from `listener` (they
/// inherit it). The kernel otherwise autotunes it up to tcp_wmem's max, so a
/// peer that stops reading can hold megabytes of the node's memory in the
/// kernel, outside any bound the application keeps.
pub fn set_send_buffer(listener: &std::net::TcpListener, bytes: usize) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let v = bytes.min(i32::MAX as usize) as libc::c_int;
    // SAFETY: setsockopt on a live descriptor with a local int.
    let r = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUF,
            (&v as *const libc::c_int).cast(),
            4,
        )
    };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A non-blocking TCP listener with SO_REUSEPORT (several rings can each own
/// a listener on one port; the kernel spreads connections over them) and
/// TCP_NODELAY, which accepted sockets inherit. See [`set_send_buffer`].
pub fn listen_reuseport(
    addr: std::net::SocketAddr,
    backlog: i32,
) -> io::Result<std::net::TcpListener> {
    use std::os::fd::FromRawFd;
    let domain = if addr.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: plain socket calls on a descriptor we own; errors checked.
    unsafe {
        let fd = libc::socket(
            domain,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        );
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let listener = std::net::TcpListener::from_raw_fd(fd);
        let one: libc::c_int = 1;
        for (level, name) in [
            (libc::SOL_SOCKET, libc::SO_REUSEADDR),
            (libc::SOL_SOCKET, libc::SO_REUSEPORT),
            (libc::IPPROTO_TCP, libc::TCP_NODELAY),
        ] {
            if libc::setsockopt(fd, level, name, (&one as *const libc::c_int).cast(), 4) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        let (storage, len) = sockaddr_of(addr);
        if libc::bind(fd, (&storage as *const libc::sockaddr_storage).cast(), len) != 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("bind {addr}: {e}")));
        }
        if libc::listen(fd, backlog) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(listener)
    }
}

fn sockaddr_of(addr: std::net::SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: zeroed sockaddr_storage is a valid value of the type.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        std::net::SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in and aligned for any sockaddr: the write stays inside `storage`.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
            (
                storage,
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        }
        std::net::SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: sockaddr_storage is larger than sockaddr_in6 and aligned for any sockaddr: the write stays inside `storage`.
            unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
            (
                storage,
                std::mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t,
            )
        }
    }
}
