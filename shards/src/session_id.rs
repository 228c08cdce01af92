//! Session ids: 32 lowercase hex chars (like Discord's) that encode the
//! worker and the node that created the session, so a Resume is routed by
//! arithmetic. The id is a hint, never a credential: whoever holds the
//! session checks the token, and a forged id only finds no session.

use std::fmt;
use std::str::FromStr;

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Length of a session id in characters.
pub const SESSION_ID_LEN: usize = 32;

/// `wwnnnnrrrrrrrrrrrrrrrrrrrrrrrrrr`: 2 hex digits of worker index, 4 of
/// node number (0: a node outside a cluster), then 26 hex digits (104 bits)
/// of caller-supplied randomness. Stored inline, no heap.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionId([u8; SESSION_ID_LEN]);

impl SessionId {
    /// Builds the id of a session owned by `worker` of node 0; only the low
    /// 104 bits of `random` are used (pass a value from a CSPRNG).
    pub fn new(worker: u8, random: u128) -> SessionId {
        SessionId::on_node(0, worker, random)
    }

    /// Builds the id of a session created by `worker` of node `node`.
    pub fn on_node(node: u16, worker: u8, random: u128) -> SessionId {
        let value = (u128::from(worker) << 120)
            | (u128::from(node) << 104)
            | (random & ((1u128 << 104) - 1));
        let mut buf = [0u8; SESSION_ID_LEN];
        for (i, b) in buf.iter_mut().enumerate() {
            let shift = 4 * (SESSION_ID_LEN - 1 - i);
            *b = HEX[((value >> shift) & 0xF) as usize];
        }
        SessionId(buf)
    }

    /// Strict parse: exactly 32 chars of `[0-9a-f]`, anything else is `None`.
    pub fn parse(s: &str) -> Option<SessionId> {
        let bytes: &[u8; SESSION_ID_LEN] = s.as_bytes().try_into().ok()?;
        if bytes
            .iter()
            .all(|&b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            Some(SessionId(*bytes))
        } else {
            None
        }
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        match std::str::from_utf8(&self.0) {
            Ok(s) => s,
            // Only ever constructed from ASCII hex digits.
            Err(_) => unreachable!("session id is always ASCII hex"),
        }
    }

    /// Index of the worker that owns the session.
    pub fn worker(&self) -> u8 {
        (nibble(self.0[0]) << 4) | nibble(self.0[1])
    }

    /// Number of the node that created the session (0: no cluster).
    pub fn node(&self) -> u16 {
        self.0[2..6]
            .iter()
            .fold(0u16, |acc, &b| (acc << 4) | u16::from(nibble(b)))
    }

    /// The 104 random bits.
    pub fn random_bits(&self) -> u128 {
        self.0[6..]
            .iter()
            .fold(0u128, |acc, &b| (acc << 4) | u128::from(nibble(b)))
    }
}

#[inline]
fn nibble(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        _ => b - b'a' + 10,
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SessionId({})", self.as_str())
    }
}

impl AsRef<str> for SessionId {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

/// Error of [`SessionId::from_str`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvalidSessionId;

impl fmt::Display for InvalidSessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("session id must be 32 lowercase hex characters")
    }
}

impl std::error::Error for InvalidSessionId {}

impl FromStr for SessionId {
    type Err = InvalidSessionId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SessionId::parse(s).ok_or(InvalidSessionId)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn layout() {
        let id = SessionId::new(0x2a, 0x0123_4567_89ab_cdef_0011_2233_4455_6677);
        // Bits above 104 of `random` are dropped; node 0.
        assert_eq!(id.as_str(), "2a00006789abcdef0011223344556677");
        assert_eq!(id.worker(), 0x2a);
        assert_eq!(id.node(), 0);
        assert_eq!(id.random_bits(), 0x0000_0067_89ab_cdef_0011_2233_4455_6677);
        let id = SessionId::on_node(0xbeef, 3, u128::MAX);
        assert_eq!(id.as_str(), "03beefffffffffffffffffffffffffff");
        assert_eq!((id.node(), id.worker()), (0xbeef, 3));
        assert_eq!(SessionId::new(0, 0).as_str(), "0".repeat(32));
        // Node 0 stays zero whatever the randomness.
        assert_eq!(
            SessionId::new(255, u128::MAX).as_str(),
            format!("ff0000{}", "f".repeat(26))
        );
        assert_eq!(SessionId::new(255, u128::MAX).worker(), 255);
    }

    #[test]
    fn round_trip() {
        for (w, r) in [(0u8, 0u128), (1, 42), (7, u128::MAX), (200, 1 << 119)] {
            let id = SessionId::new(w, r);
            let parsed = SessionId::parse(id.as_str()).unwrap();
            assert_eq!(parsed, id);
            assert_eq!(parsed.worker(), w);
            assert_eq!(parsed.random_bits(), r & ((1 << 104) - 1));
            assert_eq!(parsed.node(), 0);
            assert_eq!(id.to_string().parse::<SessionId>(), Ok(id));
        }
    }

    #[test]
    fn rejects() {
        let good = "0123456789abcdef0123456789abcdef";
        assert!(SessionId::parse(good).is_some());
        for bad in [
            "",
            "0123456789abcdef0123456789abcde",   // 31
            "0123456789abcdef0123456789abcdef0", // 33
            "0123456789ABCDEF0123456789abcdef",  // uppercase
            "0123456789abcdef0123456789abcdeg",  // non-hex
            " 123456789abcdef0123456789abcdef",  // space
            "0123456789abcdef0123456789abcdé",   // 32 bytes, non-ASCII
        ] {
            assert!(SessionId::parse(bad).is_none(), "{bad:?}");
        }
        assert_eq!("xyz".parse::<SessionId>(), Err(InvalidSessionId));
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in any::<String>()) {
            if let Some(id) = SessionId::parse(&s) {
                prop_assert_eq!(id.as_str(), s.as_str());
            }
        }

        #[test]
        fn parse_hexlike(s in "[0-9a-fA-F]{30,34}") {
            let ok = s.len() == 32 && !s.bytes().any(|b| b.is_ascii_uppercase());
            prop_assert_eq!(SessionId::parse(&s).is_some(), ok);
        }

        #[test]
        fn new_round_trips(n in any::<u16>(), w in any::<u8>(), r in any::<u128>()) {
            let id = SessionId::on_node(n, w, r);
            let back = SessionId::parse(id.as_str()).unwrap();
            prop_assert_eq!(back, id);
            prop_assert_eq!(back.worker(), w);
            prop_assert_eq!(back.node(), n);
            prop_assert_eq!(back.random_bits(), r & ((1u128 << 104) - 1));
        }
    }
}
