//! [`Session`]: one bot session's state (phase, node, sequence, session
//! id, heartbeat timer, reconnect time, read pacing, the frames waiting to
//! be sent) and the small operations the other files share: the xorshift
//! random numbers, masked text frames, heartbeats, whether it may read,
//! protocol errors.
//! The behaviour is split by concern: lifecycle.rs, inbound.rs,
//! dispatch.rs.

use net::ws::{self, Decoder, OpCode};

use super::recorder::Recorder;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Not connected; (re)connect at `reconnect_at`.
    Idle,
    Connecting,
    Upgrading,
    Hello,
    Identifying,
    Resuming,
    Streaming,
    /// Fatal close: never reconnects.
    Stopped,
}

/// What the driver must do after feeding bytes or a tick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Continue,
    /// Close the socket; the session reconnects at `reconnect_at`.
    Close,
}

pub struct Session {
    pub bot: u32,
    pub shard: u32,
    pub shards: u32,
    pub phase: Phase,
    /// Index of the node address this session uses now.
    pub node: usize,
    pub reconnect_at: u64,
    /// Reads at most this many MESSAGE_CREATE per second (None: as fast as
    /// they come; 0: stalled, reads nothing once streaming).
    pub read_rate: Option<f64>,
    /// MESSAGE_CREATE consumed since `streaming_since` (paces slow readers).
    pub consumed: u64,
    pub streaming_since: u64,
    pub(super) session_id: Option<Box<str>>,
    pub(super) seq: u64,
    /// Number of the last world event received (see `Counters::event_repeats`).
    pub(super) last_event: u64,
    pub(super) hb_ms: u64,
    pub(super) next_hb: u64,
    pub(super) awaiting_ack: bool,
    pub(super) fails: u32,
    /// When the connection was lost (0: it was not, or this is the first connect).
    pub(super) down_since: u64,
    /// Set when the protocol asked for a reconnect at a given time (op 7,
    /// op 9, zombie): no backoff is added to it.
    pub(super) asked_at: Option<u64>,
    pub(super) rbuf: Vec<u8>,
    /// Frames waiting to be sent (the driver takes them).
    pub out: Vec<u8>,
    /// The code of the last close frame read (0: none since connecting).
    pub last_close_code: u16,
    /// Identify only with a grant from the fleet coordinator (gate.rs):
    /// asked for before connecting, used by the next Identify.
    pub gated: bool,
    pub grant_requested: bool,
    pub has_grant: bool,
    /// Heartbeats carry the last `s` (false: always `null`, which
    /// acknowledges nothing on the node).
    pub ack_seq: bool,
    /// Identify says `shard` (false: the field is left out, as bots of one
    /// shard often do).
    pub send_shard: bool,
    /// Reconnect after a loss (false: the session stops, counted in
    /// `lost` or `failed`).
    pub reconnect: bool,
    pub(super) rng: u64,
    pub(super) dec: Option<Decoder>,
    /// This session's latency while the fleet records series (series.rs).
    pub lat: Option<Box<crate::series::SessionLatency>>,
}

pub(super) const MAX_MESSAGE: usize = 16 << 20;

impl Session {
    pub fn new(bot: u32, shard: u32, shards: u32, seed: u64) -> Session {
        Session {
            bot,
            shard,
            shards,
            phase: Phase::Idle,
            node: 0,
            reconnect_at: 0,
            read_rate: None,
            consumed: 0,
            streaming_since: 0,
            session_id: None,
            seq: 0,
            last_event: 0,
            hb_ms: 0,
            next_hb: u64::MAX,
            awaiting_ack: false,
            fails: 0,
            down_since: 0,
            asked_at: None,
            rbuf: Vec::new(),
            out: Vec::new(),
            last_close_code: 0,
            gated: false,
            grant_requested: false,
            has_grant: false,
            ack_seq: true,
            send_shard: true,
            reconnect: true,
            rng: seed | 1,
            dec: None,
            lat: None,
        }
    }

    /// A stalled reader: stops reading once streaming.
    pub fn stalled(&self) -> bool {
        self.read_rate.is_some_and(|r| r <= 0.0)
    }

    pub(super) fn rand(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    pub fn streaming(&self) -> bool {
        self.phase == Phase::Streaming
    }

    pub(super) fn mask(&mut self) -> [u8; 4] {
        (self.rand() as u32).to_be_bytes()
    }

    pub(super) fn send_text(&mut self, text: &str) {
        let mask = self.mask();
        ws::encode_client_frame(OpCode::Text, true, mask, text.as_bytes(), &mut self.out);
    }

    pub(super) fn send_heartbeat(&mut self) {
        let msg = if self.seq > 0 && self.ack_seq {
            format!(r#"{{"op":1,"d":{}}}"#, self.seq)
        } else {
            r#"{"op":1,"d":null}"#.to_string()
        };
        self.send_text(&msg);
    }

    /// Whether the next connection will Identify (not Resume).
    pub fn needs_identify(&self) -> bool {
        self.session_id.is_none() || self.seq == 0
    }

    /// Whether a paced reader may read more now.
    pub fn may_read(&self, now: u64) -> bool {
        match self.read_rate {
            None => true,
            Some(r) if r <= 0.0 && self.phase == Phase::Streaming => false,
            Some(r) if self.phase == Phase::Streaming => {
                let allowed = (now.saturating_sub(self.streaming_since)) as f64 / 1e9 * r + 1.0;
                (self.consumed as f64) < allowed
            }
            Some(_) => true,
        }
    }

    pub(super) fn protocol_error(&mut self, _now: u64, rec: &mut Recorder, what: String) -> Action {
        rec.c.protocol_errors += 1;
        if rec.first_violation.is_none() {
            rec.first_violation = Some(format!("bot {} shard {}: {what}", self.bot, self.shard));
        }
        Action::Close
    }
}
