//! Gateway opcodes (PROTOCOL.md, "Opcodes").

/// The `op` of a gateway payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Op {
    /// Server to bot: `t`, `s`, `d`.
    Dispatch = 0,
    /// Both ways: a bot's heartbeat (`d` = last seq or null), or the server
    /// asking for one.
    Heartbeat = 1,
    Identify = 2,
    PresenceUpdate = 3,
    /// Accepted and ignored.
    VoiceStateUpdate = 4,
    Resume = 6,
    /// Server: close and resume (how a node drains).
    Reconnect = 7,
    RequestGuildMembers = 8,
    /// Server: `d` says whether the session may be resumed.
    InvalidSession = 9,
    /// Server, first: `heartbeat_interval` in ms.
    Hello = 10,
    HeartbeatAck = 11,
}

impl Op {
    pub const ALL: [Op; 11] = [
        Op::Dispatch,
        Op::Heartbeat,
        Op::Identify,
        Op::PresenceUpdate,
        Op::VoiceStateUpdate,
        Op::Resume,
        Op::Reconnect,
        Op::RequestGuildMembers,
        Op::InvalidSession,
        Op::Hello,
        Op::HeartbeatAck,
    ];

    /// The opcode with this number, if the protocol defines one (5 is not).
    pub fn from_u64(op: u64) -> Option<Op> {
        Self::ALL.iter().copied().find(|o| *o as u64 == op)
    }

    pub const fn code(self) -> u8 {
        self as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_match_protocol_md() {
        let codes: Vec<u8> = Op::ALL.iter().map(|o| o.code()).collect();
        assert_eq!(codes, [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11]);
        assert_eq!(Op::from_u64(5), None);
        assert_eq!(Op::from_u64(12), None);
        assert_eq!(Op::from_u64(6), Some(Op::Resume));
    }
}
