//! The slot table's types: one [`Slot`] per session of a fleet thread
//! (the session, its socket's state and generation, addresses and send
//! buffer, which the kernel reads in place), and the io_uring user data
//! that names an operation: kind, slot generation, slot index.

use crate::session::Session;

pub(super) const K_SOCKET: u64 = 1;
pub(super) const K_BIND: u64 = 2;
pub(super) const K_CONNECT: u64 = 3;
pub(super) const K_SEND: u64 = 4;
pub(super) const K_RECV: u64 = 5;
pub(super) const K_RECV1: u64 = 6;
pub(super) const K_SHUT: u64 = 7;
pub(super) const K_CLOSE: u64 = 8;
pub(super) const K_TICK: u64 = 9;
pub(super) const K_SOCKOPT: u64 = 10;

pub(super) use crate::uring_ud::{sockaddr, ud, ud_parts};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Sock {
    /// Slot free.
    None,
    /// Socket/bind/connect chain in flight.
    Opening,
    Open,
    /// Shutdown + close in flight: the slot is not reusable yet.
    Closing,
}

pub(super) struct Slot {
    pub(super) s: Session,
    pub(super) gen: u32,
    pub(super) sock: Sock,
    pub(super) bind: libc::sockaddr_in,
    pub(super) dst: libc::sockaddr_in,
    pub(super) send_buf: Vec<u8>,
    pub(super) send_off: usize,
    pub(super) sending: bool,
    pub(super) recv_armed: bool,
    /// Own receive buffer of a paced reader.
    pub(super) slow_buf: Option<Box<[u8]>>,
    pub(super) phase_since: u64,
    /// SO_RCVBUF set before connect (the kernel reads it from here).
    pub(super) rcvbuf: Option<i32>,
}
