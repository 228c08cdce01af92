//! What each io_uring submission is for, carried in its `user_data`:
//!
//! ```text
//!   63      56 55    48 47          32 31                    0
//!  +----------+--------+--------------+-----------------------+
//!  |    Op    |  ring  |  slot's gen  |       fixed slot      |
//!  +----------+--------+--------------+-----------------------+
//! ```
//!
//! `Op::Adopt` is the exception: bits 0..48 carry the handover token (the
//! sender does not know the slot the socket lands in). A completion names
//! its connection through `ConnKey`; a reused slot has a new generation, so
//! a late completion for the old connection finds nothing.

use crate::delivery::ConnKey;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Op {
    /// The multishot accept into the fixed table.
    Accept = 1,
    /// The multishot receive of a connection.
    Recv = 2,
    Send = 3,
    Close = 4,
    Shutdown = 5,
    /// The housekeeping timer (every 250 ms).
    Tick = 6,
    /// A cancellation of an accept (or reject) that must stop.
    Cancel = 7,
    /// The receive of a connection being handed over was asked to stop.
    HandoverCancel = 8,
    /// Our half of a MSG_RING socket pass.
    Pass = 9,
    /// A socket passed to us; the low 48 bits carry the handover token.
    Adopt = 10,
    /// A socket that took a short or refused send became writable again.
    Writable = 11,
    /// A connection accepted (as an ordinary fd) only to be turned away:
    /// the ring's fixed table is full.
    Reject = 12,
    /// A REST connection's peer address (`getsockopt(SO_PEERNAME)`).
    PeerName = 13,
}

impl Op {
    const ALL: [Op; 13] = [
        Op::Accept,
        Op::Recv,
        Op::Send,
        Op::Close,
        Op::Shutdown,
        Op::Tick,
        Op::Cancel,
        Op::HandoverCancel,
        Op::Pass,
        Op::Adopt,
        Op::Writable,
        Op::Reject,
        Op::PeerName,
    ];

    pub fn from_u8(b: u8) -> Option<Op> {
        let op = *Op::ALL.get(usize::from(b).checked_sub(1)?)?;
        debug_assert_eq!(op as u8, b);
        Some(op)
    }
}

pub fn ud(op: Op, ring: u8, gen: u16, slot: u32) -> u64 {
    (op as u64) << 56 | (ring as u64) << 48 | (gen as u64) << 32 | slot as u64
}

/// The `user_data` of the socket pass that lands on `ring` with `token`.
pub fn ud_adopt(ring: u8, token: u64) -> u64 {
    (Op::Adopt as u64) << 56 | (ring as u64) << 48 | token
}

/// The op (None: a kind this worker never submits) and the connection.
pub fn ud_parts(u: u64) -> (Option<Op>, ConnKey) {
    (
        Op::from_u8((u >> 56) as u8),
        ConnKey {
            ring: (u >> 48) as u8,
            gen: (u >> 32) as u16,
            slot: u as u32,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_data_round_trips() {
        for op in Op::ALL {
            let u = ud(op, 3, 0xBEEF, 0x1234_5678);
            let (back, key) = ud_parts(u);
            assert_eq!(back, Some(op));
            assert_eq!((key.ring, key.gen, key.slot), (3, 0xBEEF, 0x1234_5678));
        }
        assert_eq!(ud_parts(0).0, None);
        assert_eq!(ud_parts(14 << 56).0, None);
        assert_eq!(ud_adopt(2, 77) & 0xFFFF_FFFF_FFFF, 77);
        assert_eq!(ud_parts(ud_adopt(2, 77)).0, Some(Op::Adopt));
    }
}
