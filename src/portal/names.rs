//! Words for numbers a bot author meets: permission bits, privileged
//! intents, gateway close codes with the advice that goes with each.

/// Permission bits by name (Discord's numbering; the ones this node knows
/// of are in `proto::permissions`).
pub const PERMISSIONS: &[(u32, &str)] = &[
    (0, "CREATE_INSTANT_INVITE"),
    (1, "KICK_MEMBERS"),
    (2, "BAN_MEMBERS"),
    (3, "ADMINISTRATOR"),
    (4, "MANAGE_CHANNELS"),
    (5, "MANAGE_GUILD"),
    (6, "ADD_REACTIONS"),
    (7, "VIEW_AUDIT_LOG"),
    (8, "PRIORITY_SPEAKER"),
    (9, "STREAM"),
    (10, "VIEW_CHANNEL"),
    (11, "SEND_MESSAGES"),
    (12, "SEND_TTS_MESSAGES"),
    (13, "MANAGE_MESSAGES"),
    (14, "EMBED_LINKS"),
    (15, "ATTACH_FILES"),
    (16, "READ_MESSAGE_HISTORY"),
    (17, "MENTION_EVERYONE"),
    (18, "USE_EXTERNAL_EMOJIS"),
    (19, "VIEW_GUILD_INSIGHTS"),
    (20, "CONNECT"),
    (21, "SPEAK"),
    (22, "MUTE_MEMBERS"),
    (23, "DEAFEN_MEMBERS"),
    (24, "MOVE_MEMBERS"),
    (25, "USE_VAD"),
    (26, "CHANGE_NICKNAME"),
    (27, "MANAGE_NICKNAMES"),
    (28, "MANAGE_ROLES"),
    (29, "MANAGE_WEBHOOKS"),
    (30, "MANAGE_GUILD_EXPRESSIONS"),
    (31, "USE_APPLICATION_COMMANDS"),
    (32, "REQUEST_TO_SPEAK"),
    (33, "MANAGE_EVENTS"),
    (34, "MANAGE_THREADS"),
    (35, "CREATE_PUBLIC_THREADS"),
    (36, "CREATE_PRIVATE_THREADS"),
    (37, "USE_EXTERNAL_STICKERS"),
    (38, "SEND_MESSAGES_IN_THREADS"),
    (39, "USE_EMBEDDED_ACTIVITIES"),
    (40, "MODERATE_MEMBERS"),
];

/// The names of the bits set in `bits` (unknown bits as `bit N`).
pub fn permissions(bits: u64) -> Vec<String> {
    (0..64)
        .filter(|b| bits & (1u64 << b) != 0)
        .map(|b| {
            PERMISSIONS
                .iter()
                .find(|(n, _)| *n == b)
                .map_or_else(|| format!("bit {b}"), |(_, name)| (*name).to_string())
        })
        .collect()
}

/// The privileged intents (the ones an application must be approved for).
pub const PRIVILEGED_INTENTS: [(u64, &str); 3] = [
    (proto::intents::GUILD_MEMBERS, "GUILD_MEMBERS"),
    (proto::intents::GUILD_PRESENCES, "GUILD_PRESENCES"),
    (proto::intents::MESSAGE_CONTENT, "MESSAGE_CONTENT"),
];

/// What a gateway close code means, and what the bot's author should do.
pub fn close_code(code: u16) -> (&'static str, &'static str) {
    match code {
        4000 => (
            "unknown error / slow consumer",
            "The node closed the session because the bot did not read its events fast enough \
             (its send queue filled). Resume to continue; read the socket on its own task and \
             keep handlers off the read loop.",
        ),
        4001 => ("unknown opcode", "The bot sent an opcode the gateway does not know: check the library version."),
        4002 => ("decode error", "The bot sent a payload that is not valid JSON (or ETF): check what it sends."),
        4003 => ("not authenticated", "The bot sent a payload before Identify: identify first."),
        4004 => (
            "authentication failed",
            "The token is wrong or was reset. Put the new token in the bot's configuration; \
             do not retry with the old one.",
        ),
        4005 => ("already authenticated", "The bot sent Identify twice on one connection."),
        4007 => ("invalid seq", "Resume with the last sequence number received, or identify anew."),
        4008 => ("rate limited", "The bot sent more than 120 gateway commands a minute: slow down."),
        4009 => ("session timed out", "The session went quiet (missed heartbeats): reconnect and identify."),
        4010 => ("invalid shard", "The shard id is not below the shard count."),
        4011 => ("sharding required", "The bot is in too many servers for one shard: use more shards."),
        4012 => ("invalid API version", "Connect with ?v=10."),
        4013 => ("invalid intents", "The intents value is not a valid bitset."),
        4014 => (
            "disallowed intents",
            "The bot asked for a privileged intent it is not approved for: drop it, or have it approved.",
        ),
        _ => ("other", "A close outside the 4000-4014 range (e.g. a WebSocket-level close)."),
    }
}

/// What a refused start means, and what its author should do. `spacing_s`:
/// the seconds between two Identifies of one concurrency bucket.
pub fn start_refusal(
    why: crate::worker::app_stats::StartRefusal,
    max_concurrency: Option<u64>,
    spacing_s: u64,
) -> (&'static str, String) {
    use crate::worker::app_stats::StartRefusal as R;
    match why {
        R::DisallowedIntents => (
            "closed 4014 at Identify: a privileged intent not approved",
            "The bot's Identify asked for a privileged intent this application is not \
             approved for (each refusal below names which). Remove it from the intents the \
             bot sends, or request it under Settings, Privileged intents; the platform's \
             operator approves it (gatewayd registry intents approve, or set-intents)."
                .into(),
        ),
        R::ShardingRequired => (
            "closed 4011 at Identify: sharding required",
            "One shard of the bot holds more than 2,500 servers: start it with more shards \
             (GET /gateway/bot says how many) and give each session its [shard_id, \
             num_shards]."
                .into(),
        ),
        R::Concurrency => {
            let n = max_concurrency.unwrap_or(1).max(1);
            (
                "op 9 at Identify: two Identifies in one concurrency bucket",
                format!(
                    "This application may start one session per bucket every {spacing_s} s; a shard's \
                     bucket is shard_id % max_concurrency, and max_concurrency is {n}. Start shards \
                     {n} at a time (one per bucket) and wait {spacing_s} s before the next {n}; the \
                     op 9 means: wait, then Identify again. Libraries do this when they read \
                     max_concurrency from GET /gateway/bot."
                ),
            )
        }
        R::InvalidShard => (
            "closed 4010 at Identify: invalid shard",
            "The Identify's shard was not a pair [shard_id, num_shards] with shard_id below \
             num_shards. Send what GET /gateway/bot suggests ([0, 1] for one shard), or leave \
             shard out."
                .into(),
        ),
        R::InvalidIntents => (
            "closed 4013 at Identify: invalid intents",
            "The Identify's intents were missing, not a number, or named bits that are no \
             intent. Gateway v10 requires them: build the number from your library's intent \
             flags."
                .into(),
        ),
        R::Resume => (
            "op 9 to a Resume: the session could not be resumed",
            "A Resume was refused (each one below says why) and the bot must Identify again, \
             which libraries do on op 9 with d: false. To resume more often: resume within \
             the 120 s window, with the session id from READY, the last sequence number \
             received and the same token; read events fast enough that none are dropped \
             while away."
                .into(),
        ),
        R::DailyBudget => (
            "op 9 at Identify: the daily session-start budget is spent",
            "Every Identify spends one start of the 24-hour budget (GET /gateway/bot, \
             session_start_limit); it refills when its window resets (below). Resume instead \
             of identifying after a disconnect: a Resume spends nothing."
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_are_spelled_out() {
        assert_eq!(
            permissions(
                proto::permissions::VIEW_CHANNEL | proto::permissions::SEND_MESSAGES | (1 << 50)
            ),
            ["VIEW_CHANNEL", "SEND_MESSAGES", "bit 50"]
        );
        assert!(close_code(4014).1.contains("privileged"));
    }
}
