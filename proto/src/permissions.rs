//! Permission bits (PROTOCOL.md, "Permissions"; REST.md for what each REST
//! action requires). The effective permission of a bot in a channel is
//! computed once, by gatewayd's entitlement function; these are its inputs.

pub const CREATE_INSTANT_INVITE: u64 = 1 << 0;
pub const KICK_MEMBERS: u64 = 1 << 1;
pub const BAN_MEMBERS: u64 = 1 << 2;
/// Grants every permission, overrides every overwrite.
pub const ADMINISTRATOR: u64 = 1 << 3;
pub const MANAGE_CHANNELS: u64 = 1 << 4;
pub const MANAGE_GUILD: u64 = 1 << 5;
pub const ADD_REACTIONS: u64 = 1 << 6;
/// A channel event reaches a bot only if it holds this there.
pub const VIEW_CHANNEL: u64 = 1 << 10;
pub const SEND_MESSAGES: u64 = 1 << 11;
pub const MANAGE_MESSAGES: u64 = 1 << 13;
pub const EMBED_LINKS: u64 = 1 << 14;
pub const READ_MESSAGE_HISTORY: u64 = 1 << 16;
pub const MANAGE_ROLES: u64 = 1 << 28;

/// Every bit a permission set may hold (all that Discord defines fit below
/// 2^52); what ADMINISTRATOR grants.
pub const ALL: u64 = u64::MAX >> 12;
/// What a new server's `@everyone` role is given, and what an install
/// grants when it names nothing.
pub const EVERYONE_DEFAULT: u64 = VIEW_CHANNEL | SEND_MESSAGES | READ_MESSAGE_HISTORY;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_match_the_platform() {
        assert_eq!(ADMINISTRATOR, 8);
        assert_eq!(VIEW_CHANNEL, 1024);
        assert_eq!(READ_MESSAGE_HISTORY, 65536);
        assert_eq!(MANAGE_ROLES, 268_435_456);
        assert_eq!(ALL.count_ones(), 52);
        assert_eq!(EVERYONE_DEFAULT & ALL, EVERYONE_DEFAULT);
    }
}
