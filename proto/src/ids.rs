//! Typed ids, so that a slot index is never taken for a snowflake or a
//! server for a channel.

/// The slot of a session in its worker's fan-out table: an index, valid
/// only on that worker and only while the session lives (a session's
/// public id is `shards::SessionId`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionIdx(pub u32);

impl SessionIdx {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

impl std::fmt::Display for SessionIdx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "#{}", self.0)
    }
}
