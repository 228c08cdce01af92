//! One gateway session's protocol state: what the client may send when, the
//! heartbeat clock, the command rate limit and the sequence counter.

use proto::{AppId, ChannelId, ServerId};
use shards::SessionId;

use super::close::{Close, CloseCode};
use super::identify::{ClientPayload, Identify, Resume};
use super::payload;

#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub heartbeat_interval_ms: u64,
    pub commands_per_window: u32,
    pub command_window_ms: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            heartbeat_interval_ms: 41_250,
            commands_per_window: 120,
            command_window_ms: 60_000,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Hello sent; only heartbeats, Identify and Resume are allowed.
    AwaitingIdentify,
    /// Identify or Resume handed to the registry sidecar / session table.
    Authenticating,
    /// READY (or RESUMED) sent; dispatches flow.
    Ready,
}

/// A server a session receives events for, with the bot's effective
/// permissions per channel (sorted by channel id), computed at identify.
#[derive(Clone, Debug, Default)]
pub struct GuildAccess {
    pub id: ServerId,
    /// (channel, the bot's permissions in it), sorted by channel.
    pub channels: Vec<(ChannelId, u64)>,
    /// The (application, server) lease: events are delivered only until
    /// then (Unix ms). Renewed in batches by the registry sidecar.
    pub lease_until_ms: u64,
}

impl GuildAccess {
    pub fn channel_permissions(&self, channel: ChannelId) -> Option<u64> {
        self.channels
            .binary_search_by_key(&channel, |c| c.0)
            .ok()
            .map(|i| self.channels[i].1)
    }
}

/// Who the session is, fixed at READY; survives a disconnect for Resume.
#[derive(Clone, Debug)]
pub struct Identity {
    pub session_id: SessionId,
    pub application_id: AppId,
    pub bot_user_id: u64,
    pub intents: u64,
    /// `[shard_id, num_shards]` from its Identify (`[0, 1]` without one).
    pub shard: [u32; 2],
    pub token_digest: [u8; 32],
    /// Sorted by server id.
    pub guilds: Vec<GuildAccess>,
    /// The bot user object (JSON), for member chunks.
    pub user_json: std::sync::Arc<str>,
}

impl Identity {
    pub fn guild(&self, id: ServerId) -> Option<&GuildAccess> {
        self.guilds
            .binary_search_by_key(&id, |g| g.id)
            .ok()
            .map(|i| &self.guilds[i])
    }
}

/// What the worker must do after a client payload.
#[derive(Debug)]
pub enum Action {
    None,
    /// A heartbeat acknowledged everything up to this seq: history before
    /// it need not be kept for Resume.
    Ack(u64),
    Identify(Identify),
    Resume(Resume),
    MembersChunk {
        guild_ids: Vec<u64>,
        nonce: Option<String>,
    },
}

/// The per-connection protocol state. Who the session is and what it was
/// sent live in the worker's fan-out (src/fanout.rs), which outlives a
/// connection so that Resume can continue it.
pub struct Session {
    phase: Phase,
    limits: Limits,
    last_heartbeat_ms: u64,
    heartbeat_requested: bool,
    window_start_ms: u64,
    commands: u32,
}

impl Session {
    /// Starts the session and writes Hello.
    pub fn new(limits: Limits, now_ms: u64, out: &mut Vec<u8>) -> Session {
        payload::hello(out, limits.heartbeat_interval_ms);
        Session {
            phase: Phase::AwaitingIdentify,
            limits,
            last_heartbeat_ms: now_ms,
            heartbeat_requested: false,
            window_start_ms: now_ms,
            commands: 0,
        }
    }

    /// When the bot last heartbeat (the worker's clock, ms; Hello's time
    /// before the first).
    pub fn last_heartbeat_ms(&self) -> u64 {
        self.last_heartbeat_ms
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Apply one decoded client payload.
    pub fn on_payload(
        &mut self,
        p: ClientPayload,
        now_ms: u64,
        out: &mut Vec<u8>,
    ) -> Result<Action, Close> {
        self.count_command(now_ms)?;
        match p {
            ClientPayload::Heartbeat { seq } => {
                self.last_heartbeat_ms = now_ms;
                self.heartbeat_requested = false;
                payload::heartbeat_ack(out);
                Ok(match (seq, self.phase) {
                    (Some(s), Phase::Ready) => Action::Ack(s),
                    _ => Action::None,
                })
            }
            ClientPayload::Identify(i) => {
                self.expect_unauthenticated()?;
                self.phase = Phase::Authenticating;
                Ok(Action::Identify(i))
            }
            ClientPayload::Resume(r) => {
                self.expect_unauthenticated()?;
                self.phase = Phase::Authenticating;
                Ok(Action::Resume(r))
            }
            ClientPayload::PresenceUpdate | ClientPayload::VoiceStateUpdate => {
                self.expect_ready()?;
                Ok(Action::None)
            }
            ClientPayload::RequestGuildMembers { guild_ids, nonce } => {
                self.expect_ready()?;
                Ok(Action::MembersChunk { guild_ids, nonce })
            }
        }
    }

    fn expect_unauthenticated(&self) -> Result<(), Close> {
        match self.phase {
            Phase::AwaitingIdentify => Ok(()),
            _ => Err(Close::new(
                CloseCode::AlreadyAuthenticated,
                "already authenticated: identify or resume sent twice",
            )),
        }
    }

    fn expect_ready(&self) -> Result<(), Close> {
        match self.phase {
            Phase::Ready => Ok(()),
            _ => Err(Close::new(
                CloseCode::NotAuthenticated,
                "not authenticated: identify first",
            )),
        }
    }

    fn count_command(&mut self, now_ms: u64) -> Result<(), Close> {
        if now_ms.saturating_sub(self.window_start_ms) >= self.limits.command_window_ms {
            self.window_start_ms = now_ms;
            self.commands = 0;
        }
        self.commands += 1;
        if self.commands > self.limits.commands_per_window {
            return Err(Close::new(
                CloseCode::RateLimited,
                "rate limited: more than 120 commands in 60 s",
            ));
        }
        Ok(())
    }

    /// Zombie detection, called on the worker's tick. Asks for a heartbeat
    /// (op 1) a little after one interval, closes after 1.5 intervals.
    pub fn on_tick(&mut self, now_ms: u64, out: &mut Vec<u8>) -> Result<(), Close> {
        let interval = self.limits.heartbeat_interval_ms;
        let quiet = now_ms.saturating_sub(self.last_heartbeat_ms);
        if quiet > interval + interval / 2 {
            return Err(Close::new(
                CloseCode::UnknownError,
                "heartbeat timeout: no heartbeat for 1.5 intervals",
            ));
        }
        if quiet > interval + interval / 10
            && !self.heartbeat_requested
            && self.phase == Phase::Ready
        {
            self.heartbeat_requested = true;
            payload::heartbeat_request(out);
        }
        Ok(())
    }

    /// Identify was refused by the registry (close) or deferred (op 9).
    pub fn authentication_failed(&mut self) {
        self.phase = Phase::AwaitingIdentify;
    }

    /// READY or RESUMED is queued: dispatches flow from now on.
    pub fn authenticated(&mut self) {
        debug_assert_eq!(self.phase, Phase::Authenticating);
        self.phase = Phase::Ready;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::identify::parse;

    fn cmd(s: &mut Session, json: &str, now: u64) -> Result<Action, Close> {
        let mut out = Vec::new();
        let p = parse(json.as_bytes(), &mut Vec::new())?;
        s.on_payload(p, now, &mut out)
    }

    #[test]
    fn order_rules() {
        let mut out = Vec::new();
        let mut s = Session::new(Limits::default(), 0, &mut out);
        assert!(!out.is_empty(), "hello written");
        assert!(matches!(
            cmd(&mut s, r#"{"op":1,"d":null}"#, 1),
            Ok(Action::None)
        ));
        assert_eq!(cmd(&mut s, r#"{"op":3,"d":{}}"#, 2).unwrap_err().code, 4003);
        assert!(matches!(
            cmd(&mut s, r#"{"op":2,"d":{"token":"t","intents":1}}"#, 3),
            Ok(Action::Identify(_))
        ));
        assert_eq!(
            cmd(&mut s, r#"{"op":2,"d":{"token":"t","intents":1}}"#, 4)
                .unwrap_err()
                .code,
            4005
        );
        assert_eq!(
            cmd(
                &mut s,
                r#"{"op":6,"d":{"token":"t","session_id":"x","seq":1}}"#,
                4
            )
            .unwrap_err()
            .code,
            4005
        );
    }

    #[test]
    fn rate_limit_is_120_per_minute() {
        let mut out = Vec::new();
        let mut s = Session::new(Limits::default(), 0, &mut out);
        for i in 0..120 {
            assert!(
                cmd(&mut s, r#"{"op":1,"d":null}"#, i).is_ok(),
                "command {i}"
            );
        }
        assert_eq!(
            cmd(&mut s, r#"{"op":1,"d":null}"#, 200).unwrap_err().code,
            4008
        );
        let mut s = Session::new(Limits::default(), 0, &mut out);
        for i in 0..120 {
            cmd(&mut s, r#"{"op":1,"d":null}"#, i).unwrap();
        }
        assert!(
            cmd(&mut s, r#"{"op":1,"d":null}"#, 60_001).is_ok(),
            "a new window"
        );
    }

    #[test]
    fn zombie_detection() {
        let mut out = Vec::new();
        let limits = Limits {
            heartbeat_interval_ms: 1000,
            ..Limits::default()
        };
        let mut s = Session::new(limits, 0, &mut out);
        assert!(s.on_tick(1000, &mut out).is_ok());
        assert!(s.on_tick(1400, &mut out).is_ok());
        let e = s.on_tick(1501, &mut out).unwrap_err();
        assert_eq!(e.code, 4000);
        assert!(e.resumable());
    }

    #[test]
    fn heartbeats_ack_history_once_ready() {
        let mut out = Vec::new();
        let mut s = Session::new(Limits::default(), 0, &mut out);
        assert!(
            matches!(cmd(&mut s, r#"{"op":1,"d":5}"#, 1), Ok(Action::None)),
            "nothing to ack before READY"
        );
        cmd(&mut s, r#"{"op":2,"d":{"token":"t","intents":1}}"#, 2).unwrap();
        s.authenticated();
        assert!(matches!(
            cmd(&mut s, r#"{"op":1,"d":5}"#, 3),
            Ok(Action::Ack(5))
        ));
        assert!(
            matches!(cmd(&mut s, r#"{"op":3,"d":{}}"#, 4), Ok(Action::None)),
            "presence accepted when ready"
        );
    }
}
