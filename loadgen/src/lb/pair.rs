//! A pair (client, upstream) of the balancer: its state, the two fixed
//! slots, addresses the kernel reads in place, and per direction a queue
//! bounded by [`MAX_QUEUED`] and the send in flight; plus the io_uring
//! user data naming an operation (kind, pair generation, pair index).

use std::net::{Ipv4Addr, SocketAddrV4};

/// Unsent bytes one direction of a pair may hold before the pair is closed
/// (a client that stopped reading must not grow the balancer without bound).
pub const MAX_QUEUED: usize = 8 << 20;

pub(super) const K_ACCEPT: u64 = 1;
pub(super) const K_SOCKET: u64 = 2;
pub(super) const K_BIND: u64 = 3;
pub(super) const K_CONNECT: u64 = 4;
pub(super) const K_RECV: u64 = 5; // + side
pub(super) const K_SEND: u64 = 7; // + side
pub(super) const K_SHUT: u64 = 9;
pub(super) const K_CLOSE: u64 = 10;
pub(super) const K_CLOSE_RAW: u64 = 11;
pub(super) const K_TICK: u64 = 12;

pub(super) use crate::uring_ud::{sockaddr, ud, ud_parts};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum St {
    Free,
    Connecting,
    Open,
    Closing,
}

/// Side 0: the client (a bot); side 1: the upstream (a node).
pub(super) struct Pair {
    pub(super) gen: u32,
    pub(super) st: St,
    pub(super) slot: [Option<u32>; 2],
    pub(super) bind: libc::sockaddr_in,
    pub(super) dst: libc::sockaddr_in,
    /// Bytes waiting to go to side s, and the bytes of the send in flight
    /// to it (never touched while `sending[s]`).
    pub(super) queue: [Vec<u8>; 2],
    pub(super) inflight: [Vec<u8>; 2],
    pub(super) off: [usize; 2],
    pub(super) sending: [bool; 2],
    /// Side s has closed its sending half (EOF) or failed.
    pub(super) eof: [bool; 2],
    pub(super) socket_inflight: bool,
    pub(super) connect_inflight: bool,
    pub(super) closes: u8,
}

impl Pair {
    pub(super) fn new() -> Pair {
        Pair {
            gen: 0,
            st: St::Free,
            slot: [None; 2],
            bind: sockaddr(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)),
            dst: sockaddr(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0)),
            queue: [Vec::new(), Vec::new()],
            inflight: [Vec::new(), Vec::new()],
            off: [0; 2],
            sending: [false; 2],
            eof: [false; 2],
            socket_inflight: false,
            connect_inflight: false,
            closes: 0,
        }
    }
    pub(super) fn busy(&self) -> bool {
        self.closes > 0
            || self.sending[0]
            || self.sending[1]
            || self.socket_inflight
            || self.connect_inflight
    }
}
