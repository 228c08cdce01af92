//! Intent and permission bits (PROTOCOL.md). Some are named only for tests
//! and readers; the protocol defines them all.
#![allow(dead_code)]

pub const GUILDS: u64 = 1 << 0;
pub const GUILD_MEMBERS: u64 = 1 << 1;
pub const GUILD_PRESENCES: u64 = 1 << 8;
pub const GUILD_MESSAGES: u64 = 1 << 9;
pub const DIRECT_MESSAGES: u64 = 1 << 12;
pub const MESSAGE_CONTENT: u64 = 1 << 15;

/// Every intent bit the protocol defines.
pub const KNOWN: u64 = 0x1_FFFF | (1 << 20) | (1 << 21) | (1 << 24) | (1 << 25);
/// Intents an application must be approved for.
pub const PRIVILEGED: u64 = GUILD_MEMBERS | GUILD_PRESENCES | MESSAGE_CONTENT;

pub mod perm {
    pub const ADMINISTRATOR: u64 = 1 << 3;
    pub const VIEW_CHANNEL: u64 = 1 << 10;
    pub const SEND_MESSAGES: u64 = 1 << 11;
    pub const READ_MESSAGE_HISTORY: u64 = 1 << 16;
    pub const ALL: u64 = u64::MAX >> 12; // every bit Discord currently defines fits below 2^52
}
