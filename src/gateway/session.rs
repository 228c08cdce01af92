//! One gateway session's protocol state: what the client may send when, the
//! heartbeat clock, the command rate limit and the sequence counter.

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
        Limits { heartbeat_interval_ms: 41_250, commands_per_window: 120, command_window_ms: 60_000 }
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
    pub id: u64,
    pub channels: Vec<(u64, u64)>,
}

impl GuildAccess {
    pub fn channel_permissions(&self, channel: u64) -> Option<u64> {
        self.channels.binary_search_by_key(&channel, |c| c.0).ok().map(|i| self.channels[i].1)
    }
}

/// Who the session is, fixed at READY; survives a disconnect for Resume.
#[derive(Clone, Debug)]
pub struct Identity {
    pub session_id: SessionId,
    pub application_id: u64,
    pub bot_user_id: u64,
    pub intents: u64,
    pub shard: (u32, u32),
    pub token_digest: [u8; 32],
    /// Sorted by server id.
    pub guilds: Vec<GuildAccess>,
    /// The bot user object (JSON), for member chunks.
    pub user_json: std::sync::Arc<str>,
}

impl Identity {
    pub fn guild(&self, id: u64) -> Option<&GuildAccess> {
        self.guilds.binary_search_by_key(&id, |g| g.id).ok().map(|i| &self.guilds[i])
    }
}

/// What the worker must do after a client payload.
#[derive(Debug)]
pub enum Action {
    None,
    Identify(Identify),
    Resume(Resume),
    MembersChunk { guild_ids: Vec<u64>, nonce: Option<String> },
}

pub struct Session {
    phase: Phase,
    limits: Limits,
    last_heartbeat_ms: u64,
    heartbeat_requested: bool,
    window_start_ms: u64,
    commands: u32,
    /// Last sequence number sent on this session.
    pub seq: u64,
    pub identity: Option<Box<Identity>>,
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
            seq: 0,
            identity: None,
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Apply one decoded client payload.
    pub fn on_payload(&mut self, p: ClientPayload, now_ms: u64, out: &mut Vec<u8>) -> Result<Action, Close> {
        self.count_command(now_ms)?;
        match p {
            ClientPayload::Heartbeat { .. } => {
                self.last_heartbeat_ms = now_ms;
                self.heartbeat_requested = false;
                payload::heartbeat_ack(out);
                Ok(Action::None)
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
            _ => Err(Close::new(CloseCode::AlreadyAuthenticated, "already authenticated: identify or resume sent twice")),
        }
    }

    fn expect_ready(&self) -> Result<(), Close> {
        match self.phase {
            Phase::Ready => Ok(()),
            _ => Err(Close::new(CloseCode::NotAuthenticated, "not authenticated: identify first")),
        }
    }

    fn count_command(&mut self, now_ms: u64) -> Result<(), Close> {
        if now_ms.saturating_sub(self.window_start_ms) >= self.limits.command_window_ms {
            self.window_start_ms = now_ms;
            self.commands = 0;
        }
        self.commands += 1;
        if self.commands > self.limits.commands_per_window {
            return Err(Close::new(CloseCode::RateLimited, "rate limited: more than 120 commands in 60 s"));
        }
        Ok(())
    }

    /// Zombie detection, called on the worker's tick. Asks for a heartbeat
    /// (op 1) a little after one interval, closes after 1.5 intervals.
    pub fn on_tick(&mut self, now_ms: u64, out: &mut Vec<u8>) -> Result<(), Close> {
        let interval = self.limits.heartbeat_interval_ms;
        let quiet = now_ms.saturating_sub(self.last_heartbeat_ms);
        if quiet > interval + interval / 2 {
            return Err(Close::new(CloseCode::UnknownError, "heartbeat timeout: no heartbeat for 1.5 intervals"));
        }
        if quiet > interval + interval / 10 && !self.heartbeat_requested && self.phase == Phase::Ready {
            self.heartbeat_requested = true;
            payload::heartbeat_request(out);
        }
        Ok(())
    }

    /// Identify was refused by the registry (close) or deferred (op 9).
    pub fn authentication_failed(&mut self) {
        self.phase = Phase::AwaitingIdentify;
    }

    /// READY (s = 1) and one GUILD_CREATE per server; `ready_d` and each
    /// GUILD_CREATE `d` are complete JSON.
    pub fn become_ready<'a>(
        &mut self,
        identity: Box<Identity>,
        ready_d: &[u8],
        guild_creates: impl Iterator<Item = &'a [u8]>,
        out: &mut Vec<u8>,
    ) {
        debug_assert_eq!(self.phase, Phase::Authenticating);
        self.phase = Phase::Ready;
        self.identity = Some(identity);
        self.seq = 0;
        self.dispatch("READY", &[ready_d], out);
        for g in guild_creates {
            self.dispatch("GUILD_CREATE", &[g], out);
        }
    }

    /// Continue a session after Resume: RESUMED is the next dispatch.
    pub fn resumed(&mut self, identity: Box<Identity>, seq: u64, out: &mut Vec<u8>) {
        self.phase = Phase::Ready;
        self.identity = Some(identity);
        self.seq = seq;
        self.dispatch("RESUMED", &[b"{\"_trace\":[\"gatewayd\"]}"], out);
    }

    /// Append a dispatch and advance the sequence by exactly one.
    pub fn dispatch(&mut self, t: &str, d_parts: &[&[u8]], out: &mut Vec<u8>) -> u64 {
        self.seq += 1;
        payload::dispatch(out, t, self.seq, d_parts);
        self.seq
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::identify::parse;

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
        assert!(matches!(cmd(&mut s, r#"{"op":1,"d":null}"#, 1), Ok(Action::None)));
        assert_eq!(cmd(&mut s, r#"{"op":3,"d":{}}"#, 2).unwrap_err().code, 4003);
        assert!(matches!(cmd(&mut s, r#"{"op":2,"d":{"token":"t","intents":1}}"#, 3), Ok(Action::Identify(_))));
        assert_eq!(cmd(&mut s, r#"{"op":2,"d":{"token":"t","intents":1}}"#, 4).unwrap_err().code, 4005);
        assert_eq!(cmd(&mut s, r#"{"op":6,"d":{"token":"t","session_id":"x","seq":1}}"#, 4).unwrap_err().code, 4005);
    }

    #[test]
    fn rate_limit_is_120_per_minute() {
        let mut out = Vec::new();
        let mut s = Session::new(Limits::default(), 0, &mut out);
        for i in 0..120 {
            assert!(cmd(&mut s, r#"{"op":1,"d":null}"#, i).is_ok(), "command {i}");
        }
        assert_eq!(cmd(&mut s, r#"{"op":1,"d":null}"#, 200).unwrap_err().code, 4008);
        let mut s = Session::new(Limits::default(), 0, &mut out);
        for i in 0..120 {
            cmd(&mut s, r#"{"op":1,"d":null}"#, i).unwrap();
        }
        assert!(cmd(&mut s, r#"{"op":1,"d":null}"#, 60_001).is_ok(), "a new window");
    }

    #[test]
    fn zombie_detection() {
        let mut out = Vec::new();
        let limits = Limits { heartbeat_interval_ms: 1000, ..Limits::default() };
        let mut s = Session::new(limits, 0, &mut out);
        assert!(s.on_tick(1000, &mut out).is_ok());
        assert!(s.on_tick(1400, &mut out).is_ok());
        let e = s.on_tick(1501, &mut out).unwrap_err();
        assert_eq!(e.code, 4000);
        assert!(e.resumable());
    }

    #[test]
    fn sequence_starts_at_ready() {
        let mut out = Vec::new();
        let mut s = Session::new(Limits::default(), 0, &mut out);
        cmd(&mut s, r#"{"op":2,"d":{"token":"t","intents":1}}"#, 1).unwrap();
        let id = Identity {
            session_id: SessionId::new(0, 1),
            application_id: 1,
            bot_user_id: 1,
            intents: 1,
            shard: (0, 1),
            token_digest: [0; 32],
            guilds: vec![],
            user_json: "{}".into(),
        };
        s.become_ready(Box::new(id), b"{}", [&b"{}"[..], &b"{}"[..]].into_iter(), &mut out);
        assert_eq!(s.seq, 3);
        assert_eq!(s.dispatch("MESSAGE_CREATE", &[b"{}"], &mut out), 4);
    }
}
