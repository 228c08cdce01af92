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

macro_rules! snowflake {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[repr(transparent)]
        pub struct $name(pub u64);

        impl $name {
            pub fn get(self) -> u64 {
                self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

snowflake!(
    /// An application (a bot), by its snowflake.
    AppId
);
snowflake!(
    /// A server ("guild" on the wire), by its snowflake.
    ServerId
);
snowflake!(
    /// A channel, by its snowflake; `ChannelId::NONE` for a server-wide event.
    ChannelId
);

impl ServerId {
    /// No server: a direct message.
    pub const NONE: ServerId = ServerId(0);
}

impl ChannelId {
    /// No channel: the event concerns the whole server.
    pub const NONE: ChannelId = ChannelId(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_print_as_their_numbers_and_order_as_them() {
        assert_eq!(ServerId(42).to_string(), "42");
        assert_eq!(SessionIdx(3).to_string(), "#3");
        assert!(ChannelId(1) < ChannelId(2));
        assert_eq!(ChannelId::NONE.get(), 0);
        assert_eq!(AppId::default(), AppId(0));
    }
}
