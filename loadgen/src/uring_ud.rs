//! What loadgen's two io_uring drivers (the fleet's, `fleet/`, and the load
//! balancer's, `lb/`) share: the user data that names an operation (its
//! kind in the top byte, the slot's 24-bit generation, the slot's 32-bit
//! index, so a completion for a slot reused since is recognised), and the
//! IPv4 socket address the kernel reads in place for bind and connect.
//! A leaf: it names nothing of the crate.

use std::net::SocketAddrV4;

/// Packs (kind, generation, index) into a completion's user data.
pub fn ud(kind: u64, gen: u32, idx: usize) -> u64 {
    kind << 56 | ((gen as u64) & 0xff_ffff) << 32 | idx as u64
}

/// The (kind, generation, index) that [`ud`] packed.
pub fn ud_parts(u: u64) -> (u64, u32, usize) {
    (
        u >> 56,
        ((u >> 32) & 0xff_ffff) as u32,
        (u & 0xffff_ffff) as usize,
    )
}

/// `a` as the kernel's `sockaddr_in`.
pub fn sockaddr(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as u16,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_data_round_trips_and_keeps_24_bits_of_generation() {
        assert_eq!(ud_parts(ud(9, 0x12_3456, 77)), (9, 0x12_3456, 77));
        assert_eq!(ud_parts(ud(1, 0xff_ffff + 2, 5)), (1, 1, 5));
    }
}
