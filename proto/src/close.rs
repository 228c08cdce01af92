//! Gateway close codes (PROTOCOL.md, "Close codes"): what each means for
//! the client (resume, start over, or stop), and the close the server sends.

/// A close the server sends, with the code and the reason text it carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Close {
    pub code: u16,
    pub reason: &'static str,
}

impl Close {
    pub const fn new(code: CloseCode, reason: &'static str) -> Close {
        Close {
            code: code as u16,
            reason,
        }
    }
    /// A plain WebSocket-level close (RFC 6455 codes such as 1002).
    pub const fn websocket(code: u16, reason: &'static str) -> Close {
        Close { code, reason }
    }
    /// Whether the client may Resume after this close.
    pub fn resumable(&self) -> bool {
        CloseCode::from_u16(self.code)
            .map(|c| c.resumable())
            .unwrap_or(true)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum CloseCode {
    UnknownError = 4000,
    UnknownOpcode = 4001,
    DecodeError = 4002,
    NotAuthenticated = 4003,
    AuthenticationFailed = 4004,
    AlreadyAuthenticated = 4005,
    InvalidSeq = 4007,
    RateLimited = 4008,
    SessionTimedOut = 4009,
    InvalidShard = 4010,
    ShardingRequired = 4011,
    InvalidApiVersion = 4012,
    InvalidIntents = 4013,
    DisallowedIntents = 4014,
}

impl CloseCode {
    pub const ALL: [CloseCode; 14] = [
        CloseCode::UnknownError,
        CloseCode::UnknownOpcode,
        CloseCode::DecodeError,
        CloseCode::NotAuthenticated,
        CloseCode::AuthenticationFailed,
        CloseCode::AlreadyAuthenticated,
        CloseCode::InvalidSeq,
        CloseCode::RateLimited,
        CloseCode::SessionTimedOut,
        CloseCode::InvalidShard,
        CloseCode::ShardingRequired,
        CloseCode::InvalidApiVersion,
        CloseCode::InvalidIntents,
        CloseCode::DisallowedIntents,
    ];

    pub fn from_u16(code: u16) -> Option<CloseCode> {
        Self::ALL.iter().copied().find(|c| *c as u16 == code)
    }

    /// PROTOCOL.md: 4000-4003, 4005 and 4008 keep the session resumable;
    /// 4007 and 4009 need a new session; the rest mean do not reconnect.
    pub const fn resumable(self) -> bool {
        matches!(
            self,
            CloseCode::UnknownError
                | CloseCode::UnknownOpcode
                | CloseCode::DecodeError
                | CloseCode::NotAuthenticated
                | CloseCode::AlreadyAuthenticated
                | CloseCode::RateLimited
        )
    }

    /// Whether a client may connect again at all (resuming or not): every
    /// code but 4004 and 4010-4014, which a library treats as fatal.
    pub const fn may_reconnect(self) -> bool {
        !matches!(
            self,
            CloseCode::AuthenticationFailed
                | CloseCode::InvalidShard
                | CloseCode::ShardingRequired
                | CloseCode::InvalidApiVersion
                | CloseCode::InvalidIntents
                | CloseCode::DisallowedIntents
        )
    }

    pub const fn code(self) -> u16 {
        self as u16
    }

    pub fn name(self) -> &'static str {
        match self {
            CloseCode::UnknownError => "unknown_error",
            CloseCode::UnknownOpcode => "unknown_opcode",
            CloseCode::DecodeError => "decode_error",
            CloseCode::NotAuthenticated => "not_authenticated",
            CloseCode::AuthenticationFailed => "authentication_failed",
            CloseCode::AlreadyAuthenticated => "already_authenticated",
            CloseCode::InvalidSeq => "invalid_seq",
            CloseCode::RateLimited => "rate_limited",
            CloseCode::SessionTimedOut => "session_timed_out",
            CloseCode::InvalidShard => "invalid_shard",
            CloseCode::ShardingRequired => "sharding_required",
            CloseCode::InvalidApiVersion => "invalid_api_version",
            CloseCode::InvalidIntents => "invalid_intents",
            CloseCode::DisallowedIntents => "disallowed_intents",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resumability_matches_protocol_md() {
        let resumable: Vec<u16> = CloseCode::ALL
            .iter()
            .filter(|c| c.resumable())
            .map(|c| *c as u16)
            .collect();
        assert_eq!(resumable, vec![4000, 4001, 4002, 4003, 4005, 4008]);
        let fatal: Vec<u16> = CloseCode::ALL
            .iter()
            .filter(|c| !c.may_reconnect())
            .map(|c| c.code())
            .collect();
        assert_eq!(fatal, vec![4004, 4010, 4011, 4012, 4013, 4014]);
        assert!(Close::websocket(1006, "").resumable());
        assert!(!Close::new(CloseCode::AuthenticationFailed, "x").resumable());
    }
}
