//! Gateway intent bits (PROTOCOL.md, "Intents"): what an Identify's
//! `intents` asks for. The privileged ones (see [`PRIVILEGED`]) need the
//! application's approval, else 4014.

pub const GUILDS: u64 = 1 << 0;
/// Privileged.
pub const GUILD_MEMBERS: u64 = 1 << 1;
pub const GUILD_MODERATION: u64 = 1 << 2;
pub const GUILD_EXPRESSIONS: u64 = 1 << 3;
pub const GUILD_INTEGRATIONS: u64 = 1 << 4;
pub const GUILD_WEBHOOKS: u64 = 1 << 5;
pub const GUILD_INVITES: u64 = 1 << 6;
pub const GUILD_VOICE_STATES: u64 = 1 << 7;
/// Privileged.
pub const GUILD_PRESENCES: u64 = 1 << 8;
pub const GUILD_MESSAGES: u64 = 1 << 9;
pub const GUILD_MESSAGE_REACTIONS: u64 = 1 << 10;
pub const GUILD_MESSAGE_TYPING: u64 = 1 << 11;
pub const DIRECT_MESSAGES: u64 = 1 << 12;
pub const DIRECT_MESSAGE_REACTIONS: u64 = 1 << 13;
pub const DIRECT_MESSAGE_TYPING: u64 = 1 << 14;
/// Privileged. Without it a bot still gets message events, with `content`,
/// `embeds`, `attachments`, `components` and `poll` empty (but in DMs and
/// in messages that mention it).
pub const MESSAGE_CONTENT: u64 = 1 << 15;
pub const GUILD_SCHEDULED_EVENTS: u64 = 1 << 16;
pub const AUTO_MODERATION_CONFIGURATION: u64 = 1 << 20;
pub const AUTO_MODERATION_EXECUTION: u64 = 1 << 21;
pub const GUILD_MESSAGE_POLLS: u64 = 1 << 24;
pub const DIRECT_MESSAGE_POLLS: u64 = 1 << 25;

/// Every intent bit the protocol defines (an Identify with another: 4013).
pub const KNOWN: u64 = 0x1_FFFF | (1 << 20) | (1 << 21) | (1 << 24) | (1 << 25);
/// Intents an application must be approved for.
pub const PRIVILEGED: u64 = GUILD_MEMBERS | GUILD_PRESENCES | MESSAGE_CONTENT;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_is_exactly_the_named_bits() {
        let named = [
            GUILDS,
            GUILD_MEMBERS,
            GUILD_MODERATION,
            GUILD_EXPRESSIONS,
            GUILD_INTEGRATIONS,
            GUILD_WEBHOOKS,
            GUILD_INVITES,
            GUILD_VOICE_STATES,
            GUILD_PRESENCES,
            GUILD_MESSAGES,
            GUILD_MESSAGE_REACTIONS,
            GUILD_MESSAGE_TYPING,
            DIRECT_MESSAGES,
            DIRECT_MESSAGE_REACTIONS,
            DIRECT_MESSAGE_TYPING,
            MESSAGE_CONTENT,
            GUILD_SCHEDULED_EVENTS,
            AUTO_MODERATION_CONFIGURATION,
            AUTO_MODERATION_EXECUTION,
            GUILD_MESSAGE_POLLS,
            DIRECT_MESSAGE_POLLS,
        ];
        assert_eq!(named.iter().fold(0, |a, b| a | b), KNOWN);
        assert_eq!(KNOWN.count_ones() as usize, named.len());
        assert_eq!(PRIVILEGED, (1 << 1) | (1 << 8) | (1 << 15));
    }
}
