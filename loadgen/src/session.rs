//! One bot session as a sans-IO state machine: bytes in, frames out, and a
//! check of every event it receives. The fleet (fleet.rs) owns the sockets.
//!
//! Client behaviour follows what real libraries do (discord.py, twilight):
//! - heartbeat at the Hello interval, the first one after a random fraction
//!   of it; an interval without an ACK is a zombie connection: reconnect and
//!   resume;
//! - op 7: reconnect at once and resume; op 9 `d:true`: reconnect and resume;
//!   op 9 `d:false`: forget the session, wait 1-5 s, reconnect and identify
//!   (the only place a gap in the stream is allowed);
//! - closes 4004 and 4010-4014 are fatal (the session stops); 4007 and 4009
//!   start a new session; anything else (and EOF, errors) resumes;
//! - reconnect backoff: the first retry after 0-1 s, then exponential
//!   (2^n s, jittered, at most 60 s) while attempts keep failing.

use std::fmt::Write as _;

use net::ws::{self, Decoder, Message, OpCode};

use crate::world::World;

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

/// Per-thread counters, added to the fleet's shared totals now and then.
#[derive(Default, Clone, Debug)]
pub struct Counters {
    pub connects: u64,
    pub connect_errors: u64,
    pub identifies: u64,
    pub readies: u64,
    pub resumes_sent: u64,
    pub resumed: u64,
    pub invalid_resumable: u64,
    pub invalid_new_session: u64,
    pub deliveries: u64,
    pub other_dispatches: u64,
    pub duplicates: u64,
    pub gaps: u64,
    pub entitlement_violations: u64,
    pub content_violations: u64,
    pub hb_acks: u64,
    pub zombies: u64,
    pub reconnects_asked: u64,
    pub fatal: u64,
    pub protocol_errors: u64,
    /// Closes received, by code - 4000 (0..=15); [16] = other codes, [17] = EOF/error.
    pub closes: [u64; 18],
    pub bytes_in: u64,
    /// Upgrades answered 101.
    pub upgrades: u64,
    /// Connections that ended while streaming.
    pub lost: u64,
    /// Sessions that stopped for good before streaming (a fatal close, or
    /// any failure of a session that does not reconnect).
    pub failed: u64,
    /// MESSAGE_CREATE read by paced or stalled readers (also in `deliveries`).
    pub paced_deliveries: u64,
    /// Bytes of READY and GUILD_CREATE payloads received.
    pub handshake_bytes: u64,
    pub guild_creates: u64,
    /// MESSAGE_CREATE of the generated world whose event number is not
    /// above the last one the session received: the same event twice (with
    /// a fresh `s`, which the seq check cannot see) or events out of order.
    /// The producer numbers events in the order it writes them, the same
    /// order to every node, so a session's numbers only grow, across a
    /// resume, a hand-off or a new session alike (one totally ordered
    /// stream: the listener, or a one-partition topic).
    pub event_repeats: u64,
}

/// What one thread's sessions record into.
pub struct Recorder {
    pub c: Counters,
    /// Commit-to-receive latency in microseconds, while measuring.
    pub latency: hdrhistogram::Histogram<u64>,
    /// Time from losing a connection to READY/RESUMED again, microseconds.
    pub recovery: hdrhistogram::Histogram<u64>,
    pub measuring: bool,
    /// Sessions (by fleet index) whose latency is left out (e.g. the slow bot).
    pub latency_exclude_bot: Option<u32>,
    /// Only these bots' latency is recorded, when set (neighbour studies).
    pub latency_only_bots: Option<std::sync::Arc<Vec<bool>>>,
    /// Watched (bot, server): last receive time (ns) and count since `watch_from`.
    pub watch: Option<(u32, u32)>,
    pub watch_last_ns: u64,
    pub watch_count: u64,
    pub first_violation: Option<String>,
    /// The first refused upgrade (HTTP status line), for diagnostics.
    pub first_refusal: Option<String>,
    /// Set: the next GUILD_CREATE's (server id, `#general` channel id) is
    /// read into `guild` (for a run against a server loadgen did not make).
    pub want_guild: bool,
    pub guild: Option<(u64, u64)>,
    /// Set: every GUILD_CREATE's (server id, `#general` channel id, read by
    /// a session that reads every event) is queued into `guilds` (the
    /// fleet drains it into `Shared::servers`).
    pub collect_guilds: bool,
    pub guilds: Vec<(u64, u64, bool)>,
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder {
            c: Counters::default(),
            latency: hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000, 3).unwrap(),
            recovery: hdrhistogram::Histogram::new_with_bounds(1, 3_600_000_000, 3).unwrap(),
            measuring: false,
            latency_exclude_bot: None,
            latency_only_bots: None,
            watch: None,
            watch_last_ns: 0,
            watch_count: 0,
            first_violation: None,
            first_refusal: None,
            want_guild: false,
            guild: None,
            collect_guilds: false,
            guilds: Vec::new(),
        }
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
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
    session_id: Option<Box<str>>,
    seq: u64,
    /// Number of the last world event received (see `Counters::event_repeats`).
    last_event: u64,
    hb_ms: u64,
    next_hb: u64,
    awaiting_ack: bool,
    fails: u32,
    /// When the connection was lost (0: it was not, or this is the first connect).
    down_since: u64,
    /// Set when the protocol asked for a reconnect at a given time (op 7,
    /// op 9, zombie): no backoff is added to it.
    asked_at: Option<u64>,
    rbuf: Vec<u8>,
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
    rng: u64,
    dec: Option<Decoder>,
}

const MAX_MESSAGE: usize = 16 << 20;

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
        }
    }

    /// A stalled reader: stops reading once streaming.
    pub fn stalled(&self) -> bool {
        self.read_rate.is_some_and(|r| r <= 0.0)
    }

    fn rand(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }

    pub fn streaming(&self) -> bool {
        self.phase == Phase::Streaming
    }

    /// The socket is being opened.
    pub fn on_connecting(&mut self) {
        self.phase = Phase::Connecting;
        self.last_close_code = 0;
        self.dec = None;
        self.rbuf.clear();
        self.out.clear();
        self.awaiting_ack = false;
        self.next_hb = u64::MAX;
    }

    /// TCP connected: queue the upgrade request.
    pub fn on_connected(&mut self, host: &str, rec: &mut Recorder) {
        rec.c.connects += 1;
        self.phase = Phase::Upgrading;
        let key = self.rand();
        let _ = write!(
            Bytes(&mut self.out),
            "GET /?v=10&encoding=json HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n\
             Connection: Upgrade\r\nSec-WebSocket-Key: bG9hZGdlbmxvYWRn{:05x}A==\r\n\
             Sec-WebSocket-Version: 13\r\nUser-Agent: loadgen\r\n\r\n",
            key & 0xf_ffff
        );
    }

    /// The connection is gone (EOF, error, or we closed it): schedule the
    /// next attempt. `connect_failed` rotates to the next node.
    pub fn on_lost(&mut self, now: u64, connect_failed: bool, nodes: usize, rec: &mut Recorder) {
        if self.phase == Phase::Stopped {
            return;
        }
        if connect_failed {
            rec.c.connect_errors += 1;
            self.node = (self.node + 1) % nodes.max(1);
        }
        if !self.reconnect {
            self.stop(rec);
            self.rbuf.clear();
            self.out.clear();
            self.next_hb = u64::MAX;
            return;
        }
        if self.streaming() {
            rec.c.lost += 1;
        }
        if self.down_since == 0 {
            self.down_since = now;
        }
        self.phase = Phase::Idle;
        self.rbuf.clear();
        self.out.clear();
        self.next_hb = u64::MAX;
        if let Some(at) = self.asked_at.take() {
            self.reconnect_at = at;
            return;
        }
        let delay_ms = if self.fails == 0 {
            self.rand() % 1000
        } else {
            let base = 1000u64 << self.fails.min(6);
            (base / 2 + self.rand() % (base / 2)).min(60_000)
        };
        self.fails += 1;
        self.reconnect_at = now + delay_ms * 1_000_000;
    }

    /// Ends the session for good (counted as lost if it was streaming,
    /// else as failed).
    fn stop(&mut self, rec: &mut Recorder) {
        if self.phase == Phase::Stopped {
            return;
        }
        if self.streaming() {
            rec.c.lost += 1;
        } else {
            rec.c.failed += 1;
        }
        self.phase = Phase::Stopped;
    }

    fn mask(&mut self) -> [u8; 4] {
        (self.rand() as u32).to_be_bytes()
    }

    fn send_text(&mut self, text: &str) {
        let mask = self.mask();
        ws::encode_client_frame(OpCode::Text, true, mask, text.as_bytes(), &mut self.out);
    }

    /// Queues a Close with `code` and retires the session (it will not
    /// reconnect and is not counted as lost): the end of a run.
    pub fn close_and_retire(&mut self, code: u16) {
        let mask = self.mask();
        ws::encode_client_close(code, "", mask, &mut self.out);
        self.phase = Phase::Stopped;
    }

    fn send_heartbeat(&mut self) {
        let msg = if self.seq > 0 && self.ack_seq {
            format!(r#"{{"op":1,"d":{}}}"#, self.seq)
        } else {
            r#"{"op":1,"d":null}"#.to_string()
        };
        self.send_text(&msg);
    }

    /// Timers: heartbeats and zombie detection.
    pub fn tick(&mut self, now: u64, rec: &mut Recorder) -> Action {
        if now < self.next_hb {
            return Action::Continue;
        }
        // A stalled reader does not read the ACKs: no zombie check.
        if self.awaiting_ack && !self.stalled() {
            rec.c.zombies += 1;
            self.asked_at = Some(now);
            return Action::Close;
        }
        self.send_heartbeat();
        self.awaiting_ack = true;
        self.next_hb = now + self.hb_ms * 1_000_000;
        Action::Continue
    }

    /// Bytes from the socket.
    pub fn feed(&mut self, data: &[u8], now: u64, world: &World, rec: &mut Recorder) -> Action {
        rec.c.bytes_in += data.len() as u64;
        if self.rbuf.is_empty() {
            let (used, act) = self.parse(data, now, world, rec);
            if act == Action::Continue && used < data.len() {
                self.rbuf.extend_from_slice(&data[used..]);
            }
            act
        } else {
            let mut buf = std::mem::take(&mut self.rbuf);
            buf.extend_from_slice(data);
            let (used, act) = self.parse(&buf, now, world, rec);
            if act == Action::Continue {
                buf.drain(..used);
                self.rbuf = buf;
            }
            act
        }
    }

    fn protocol_error(&mut self, _now: u64, rec: &mut Recorder, what: String) -> Action {
        rec.c.protocol_errors += 1;
        if rec.first_violation.is_none() {
            rec.first_violation = Some(format!("bot {} shard {}: {what}", self.bot, self.shard));
        }
        Action::Close
    }

    fn parse(
        &mut self,
        buf: &[u8],
        now: u64,
        world: &World,
        rec: &mut Recorder,
    ) -> (usize, Action) {
        let mut off = 0;
        if self.phase == Phase::Upgrading {
            let Some(end) = find(buf, b"\r\n\r\n") else {
                if buf.len() > 16 * 1024 {
                    return (
                        0,
                        self.protocol_error(now, rec, "HTTP head too large".into()),
                    );
                }
                return (0, Action::Continue);
            };
            if !buf.starts_with(b"HTTP/1.1 101") {
                let head = String::from_utf8_lossy(&buf[..buf.len().min(400)]).to_string();
                // A 503 (node full) or similar: retry later like any failed connect.
                rec.c.connect_errors += 1;
                if rec.first_refusal.is_none() {
                    rec.first_refusal = Some(head);
                }
                return (0, Action::Close);
            }
            off = end + 4;
            rec.c.upgrades += 1;
            self.phase = Phase::Hello;
        }
        let mut dec = self
            .dec
            .take()
            .unwrap_or_else(|| Decoder::client(MAX_MESSAGE));
        let mut act = Action::Continue;
        while act == Action::Continue {
            let (n, msg) = match dec.decode_unmasked(&buf[off..]) {
                Ok(Some(x)) => x,
                Ok(None) => break,
                Err(e) => {
                    act = self.protocol_error(now, rec, format!("bad frame from the node: {e}"));
                    break;
                }
            };
            off += n;
            act = match msg {
                Some(Message::Text(t)) => self.on_text(t.as_bytes(), now, world, rec),
                Some(Message::Close(code, _)) => {
                    self.on_close_code(code.unwrap_or(1005), now, rec);
                    Action::Close
                }
                Some(Message::Ping(p)) => {
                    let mask = self.mask();
                    ws::encode_client_frame(OpCode::Pong, true, mask, p, &mut self.out);
                    Action::Continue
                }
                _ => Action::Continue,
            };
        }
        self.dec = Some(dec);
        (off, act)
    }

    /// A close frame (or a code the driver saw) from the node.
    pub fn on_close_code(&mut self, code: u16, now: u64, rec: &mut Recorder) {
        self.last_close_code = code;
        let i = match code {
            4000..=4015 => (code - 4000) as usize,
            _ => 16,
        };
        rec.c.closes[i] += 1;
        match code {
            c if proto::CloseCode::from_u16(c).is_some_and(|c| !c.may_reconnect()) => {
                rec.c.fatal += 1;
                self.stop(rec);
            }
            4007 | 4009 => {
                self.session_id = None;
                self.seq = 0;
            }
            _ => {}
        }
        let _ = now;
    }

    fn enter_streaming(&mut self, now: u64, rec: &mut Recorder) {
        self.phase = Phase::Streaming;
        self.fails = 0;
        self.consumed = 0;
        self.streaming_since = now;
        if self.down_since != 0 {
            rec.recovery
                .saturating_record((now.saturating_sub(self.down_since) / 1000).max(1));
            self.down_since = 0;
        }
    }

    fn on_text(&mut self, p: &[u8], now: u64, world: &World, rec: &mut Recorder) -> Action {
        const DISPATCH: &[u8] = b"{\"op\":0,\"t\":\"";
        if let Some(rest) = p.strip_prefix(DISPATCH) {
            return self.on_dispatch(rest, p, now, world, rec);
        }
        let v: serde_json::Value = match serde_json::from_slice(p) {
            Ok(v) => v,
            Err(_) => return self.protocol_error(now, rec, "non-JSON text frame".into()),
        };
        match v["op"].as_u64() {
            Some(10) => {
                self.hb_ms = v["d"]["heartbeat_interval"]
                    .as_u64()
                    .unwrap_or(41_250)
                    .max(100);
                self.next_hb = now + (self.rand() % 1000) * self.hb_ms * 1_000;
                self.awaiting_ack = false;
                if let (Some(id), true) = (self.session_id.clone(), self.seq > 0) {
                    rec.c.resumes_sent += 1;
                    let token = &world.bots[self.bot as usize].token;
                    let msg = format!(
                        r#"{{"op":6,"d":{{"token":"{token}","session_id":"{id}","seq":{}}}}}"#,
                        self.seq
                    );
                    self.send_text(&msg);
                    self.phase = Phase::Resuming;
                } else {
                    self.identify(world, rec);
                }
                Action::Continue
            }
            Some(11) => {
                rec.c.hb_acks += 1;
                self.awaiting_ack = false;
                Action::Continue
            }
            Some(1) => {
                self.send_heartbeat();
                Action::Continue
            }
            Some(7) => {
                rec.c.reconnects_asked += 1;
                self.asked_at = Some(now);
                self.fails = 0;
                Action::Close
            }
            Some(9) => {
                let delay = 1_000_000_000 + self.rand() % 4_000_000_000;
                if v["d"].as_bool() == Some(true) && self.session_id.is_some() {
                    rec.c.invalid_resumable += 1;
                } else {
                    // The documented gap: a new session starts from seq 0.
                    rec.c.invalid_new_session += 1;
                    self.session_id = None;
                    self.seq = 0;
                }
                self.asked_at = Some(now + delay);
                Action::Close
            }
            _ => Action::Continue,
        }
    }

    /// Whether the next connection will Identify (not Resume).
    pub fn needs_identify(&self) -> bool {
        self.session_id.is_none() || self.seq == 0
    }

    fn identify(&mut self, world: &World, rec: &mut Recorder) {
        rec.c.identifies += 1;
        self.has_grant = false;
        let bot = &world.bots[self.bot as usize];
        let shard = if self.send_shard {
            format!(r#","shard":[{},{}]"#, self.shard, self.shards)
        } else {
            String::new()
        };
        let msg = format!(
            r#"{{"op":2,"d":{{"token":"{}","intents":{}{shard},"properties":{{"os":"linux","browser":"loadgen","device":"loadgen"}}}}}}"#,
            bot.token, bot.intents
        );
        self.send_text(&msg);
        self.phase = Phase::Identifying;
    }

    fn on_dispatch(
        &mut self,
        rest: &[u8],
        whole: &[u8],
        now: u64,
        world: &World,
        rec: &mut Recorder,
    ) -> Action {
        let Some(q) = rest.iter().position(|&c| c == b'"') else {
            return self.protocol_error(now, rec, "dispatch without t".into());
        };
        let t = &rest[..q];
        let Some(after) = rest[q..].strip_prefix(b"\",\"s\":") else {
            return self.protocol_error(now, rec, "dispatch without s".into());
        };
        let (s, j) = parse_u64(after);
        if j == 0 {
            return self.protocol_error(now, rec, "dispatch with a bad s".into());
        }
        if t == b"READY" {
            rec.c.handshake_bytes += whole.len() as u64;
            let v: serde_json::Value = serde_json::from_slice(whole).unwrap_or_default();
            self.session_id = v["d"]["session_id"].as_str().map(Into::into);
            self.seq = s;
            rec.c.readies += 1;
            self.enter_streaming(now, rec);
            return Action::Continue;
        }
        // Sequence: contiguous within one session.
        if s <= self.seq {
            rec.c.duplicates += 1;
            return Action::Continue;
        }
        if s > self.seq + 1 {
            rec.c.gaps += s - self.seq - 1;
        }
        self.seq = s;
        match t {
            b"RESUMED" => {
                rec.c.resumed += 1;
                self.enter_streaming(now, rec);
            }
            b"MESSAGE_CREATE" => self.on_message(&after[j..], now, world, rec),
            b"GUILD_CREATE" => {
                rec.c.guild_creates += 1;
                rec.c.handshake_bytes += whole.len() as u64;
                rec.c.other_dispatches += 1;
                let want = rec.want_guild && rec.guild.is_none();
                if want || rec.collect_guilds {
                    let g = general_channel(whole);
                    if want {
                        rec.guild = g;
                    }
                    if let (true, Some((id, ch))) = (rec.collect_guilds, g) {
                        rec.guilds.push((id, ch, self.read_rate.is_none()));
                    }
                }
            }
            _ => rec.c.other_dispatches += 1,
        }
        Action::Continue
    }

    /// `d` as loadgen's producer writes it: `,"d":{"lg":[sched_ns,event,server,channel],...`
    /// (an event of the generated world, checked against it), or
    /// `,"d":{"ts_ns":sched_ns,...` (an event in a server loadgen did not
    /// make: only its latency is taken).
    fn on_message(&mut self, d: &[u8], now: u64, world: &World, rec: &mut Recorder) {
        rec.c.deliveries += 1;
        self.consumed += 1;
        if self.read_rate.is_some() {
            rec.c.paced_deliveries += 1;
        }
        if let Some(ts) = d.strip_prefix(b",\"d\":{\"ts_ns\":") {
            let (sched, k) = parse_u64(ts);
            if k > 0 {
                self.record_latency(sched, rec);
            } else {
                rec.c.other_dispatches += 1;
            }
            return;
        }
        let Some(d) = d.strip_prefix(b",\"d\":{\"lg\":[") else {
            rec.c.other_dispatches += 1; // not ours (e.g. demo traffic)
            return;
        };
        let (sched, a) = parse_u64(d);
        let (event, b) = parse_u64(&d[a + 1..]);
        if event <= self.last_event {
            rec.c.event_repeats += 1;
            if rec.first_violation.is_none() {
                rec.first_violation = Some(format!(
                    "bot {} shard {} got event {event} after event {}",
                    self.bot, self.shard, self.last_event
                ));
            }
        }
        self.last_event = self.last_event.max(event);
        let (server, c) = parse_u64(&d[a + 1 + b + 1..]);
        let (chan, _) = parse_u64(&d[a + 1 + b + 1 + c + 1..]);
        let (server, chan) = (server as u32, chan as u8);
        if (server as usize) >= world.servers.len() {
            rec.c.entitlement_violations += 1;
            return;
        }
        let watched = rec.watch == Some((self.bot, server));
        if watched {
            rec.watch_last_ns = rec.watch_last_ns.max(now);
            rec.watch_count += 1;
        } else if !world.entitled(self.bot, server, chan)
            || world.shard_of(self.bot, server) != self.shard
        {
            rec.c.entitlement_violations += 1;
            if rec.first_violation.is_none() {
                rec.first_violation = Some(format!(
                    "bot {} shard {} got an event of server {server} channel {chan} it is not entitled to",
                    self.bot, self.shard
                ));
            }
        }
        if !world.sees_content(self.bot) {
            if let Some(i) = find(d, b"\"content\":\"") {
                if d.get(i + 11) != Some(&b'"') {
                    rec.c.content_violations += 1;
                }
            }
        }
        self.record_latency(sched, rec);
    }

    /// Receive time - scheduled time, while measuring (paced and stalled
    /// readers left out: their delay is their own).
    fn record_latency(&self, sched: u64, rec: &mut Recorder) {
        if rec.measuring && rec.latency_exclude_bot != Some(self.bot) && self.read_rate.is_none() {
            let keep = match &rec.latency_only_bots {
                Some(only) => only.get(self.bot as usize).copied().unwrap_or(false),
                None => true,
            };
            if keep {
                rec.latency.saturating_record(
                    (crate::clock::now_ns().saturating_sub(sched) / 1000).max(1),
                );
            }
        }
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
}

/// A GUILD_CREATE's server id and its `#general` channel id.
fn general_channel(whole: &[u8]) -> Option<(u64, u64)> {
    let v: serde_json::Value = serde_json::from_slice(whole).ok()?;
    let d = &v["d"];
    let id = d["id"].as_str()?.parse().ok()?;
    let ch = d["channels"]
        .as_array()?
        .iter()
        .find(|c| c["name"] == "general")?["id"]
        .as_str()?
        .parse()
        .ok()?;
    Some((id, ch))
}

/// `write!` into a Vec<u8>.
struct Bytes<'a>(&'a mut Vec<u8>);
impl std::fmt::Write for Bytes<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
    }
}

pub fn parse_u64(b: &[u8]) -> (u64, usize) {
    let mut v = 0u64;
    let mut i = 0;
    while i < b.len() && b[i].is_ascii_digit() && i < 20 {
        v = v.wrapping_mul(10).wrapping_add((b[i] - b'0') as u64);
        i += 1;
    }
    (v, i)
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::{Bot, Server, World, GUILDS, GUILD_MESSAGES, MESSAGE_CONTENT};

    fn world() -> World {
        World {
            bots: vec![Bot {
                app_id: 1,
                token: "tok".into(),
                shards: 1,
                intents: GUILDS | GUILD_MESSAGES | MESSAGE_CONTENT,
                servers: vec![(0, false)],
            }],
            servers: vec![
                Server {
                    id: 10 << 22,
                    channels: [1, 2],
                },
                Server {
                    id: 11 << 22,
                    channels: [3, 4],
                },
            ],
            recipients: vec![[1, 0], [0, 0]],
            hot_bots: vec![],
            revoked_hot: vec![Default::default()],
        }
    }

    fn frame(text: &str) -> Vec<u8> {
        let mut v = Vec::new();
        ws::encode_frame(OpCode::Text, text.as_bytes(), &mut v);
        v
    }

    /// What the session sent, as the node decodes it.
    fn sent(s: &mut Session) -> Vec<ws::OwnedMessage> {
        let mut d = Decoder::new(1 << 20);
        let mut out = Vec::new();
        let mut buf = std::mem::take(&mut s.out);
        let mut off = 0;
        while let Some((n, m)) = d.decode(&mut buf[off..]).expect("masked client frames") {
            out.extend(m.map(ws::OwnedMessage::from));
            off += n;
        }
        assert_eq!(off, buf.len());
        out
    }

    fn msg(s: u64, server: u32, chan: u8) -> Vec<u8> {
        frame(&format!(
            r#"{{"op":0,"t":"MESSAGE_CREATE","s":{s},"d":{{"lg":[1,{s},{server},{chan}],"content":"x"}}}}"#
        ))
    }

    /// A fresh connection up to the server's Hello (upgrade request sent,
    /// 101 and op 10 fed at `at`); returns what the session does next.
    fn connect_through_hello(s: &mut Session, w: &World, r: &mut Recorder, at: u64) -> Action {
        s.on_connecting();
        s.on_connected("h", r);
        assert!(s.out.starts_with(b"GET /?v=10"));
        s.out.clear();
        let mut b = b"HTTP/1.1 101 Switching Protocols\r\n\r\n".to_vec();
        b.extend(frame(r#"{"op":10,"d":{"heartbeat_interval":41250}}"#));
        s.feed(&b, at, w, r)
    }

    fn ready(s: &mut Session, w: &World, r: &mut Recorder) {
        assert_eq!(connect_through_hello(s, w, r, 1), Action::Continue);
        assert_eq!(s.phase, Phase::Identifying);
        let m = sent(s);
        assert!(
            matches!(&m[..], [ws::OwnedMessage::Text(t)] if t.starts_with(r#"{"op":2,"#)),
            "{m:?}"
        );
        let b = frame(r#"{"op":0,"t":"READY","s":1,"d":{"session_id":"abc"}}"#);
        s.feed(&b, 2, w, r);
        assert!(s.streaming());
    }

    #[test]
    fn checks_sequence_and_entitlement() {
        let w = world();
        let mut r = Recorder::new();
        let mut s = Session::new(0, 0, 1, 7);
        ready(&mut s, &w, &mut r);
        // Split across two reads.
        let m = msg(2, 0, 0);
        s.feed(&m[..7], 3, &w, &mut r);
        s.feed(&m[7..], 3, &w, &mut r);
        assert_eq!(r.c.deliveries, 1);
        s.feed(&msg(2, 0, 0), 3, &w, &mut r);
        assert_eq!(r.c.duplicates, 1);
        s.feed(&msg(5, 0, 0), 3, &w, &mut r);
        assert_eq!(r.c.gaps, 2);
        s.feed(&msg(6, 0, 1), 3, &w, &mut r); // private channel, no admin
        s.feed(&msg(7, 1, 0), 3, &w, &mut r); // not installed
        assert_eq!(r.c.entitlement_violations, 2);
        assert!(r.first_violation.is_some());
    }

    #[test]
    fn resumes_after_a_drop_and_reidentifies_after_op9_false() {
        let w = world();
        let mut r = Recorder::new();
        let mut s = Session::new(0, 0, 1, 9);
        ready(&mut s, &w, &mut r);
        s.feed(&msg(2, 0, 0), 3, &w, &mut r);
        s.on_lost(10, false, 2, &mut r);
        assert_eq!(s.phase, Phase::Idle);
        assert!(s.reconnect_at >= 10 && s.reconnect_at < 10 + 1_000_000_001);
        connect_through_hello(&mut s, &w, &mut r, 20);
        assert_eq!(s.phase, Phase::Resuming);
        assert_eq!(r.c.resumes_sent, 1);
        // op 9 false: new session, close, identify on the next connection.
        let act = s.feed(&frame(r#"{"op":9,"d":false}"#), 30, &w, &mut r);
        assert_eq!(act, Action::Close);
        assert_eq!(r.c.invalid_new_session, 1);
        s.on_lost(30, false, 2, &mut r);
        assert!(s.reconnect_at >= 30 + 1_000_000_000);
        ready(&mut s, &w, &mut r);
        assert_eq!(r.c.identifies, 2);
        assert_eq!(r.recovery.len(), 1);
        s.feed(&msg(2, 0, 0), 3, &w, &mut r);
        assert_eq!(r.c.gaps, 0, "a new session starts from 1");
    }

    #[test]
    fn fatal_close_stops_and_zombie_reconnects() {
        let w = world();
        let mut r = Recorder::new();
        let mut s = Session::new(0, 0, 1, 3);
        ready(&mut s, &w, &mut r);
        let t = s.next_hb;
        assert_eq!(s.tick(t, &mut r), Action::Continue);
        assert!(!s.out.is_empty(), "heartbeat sent");
        assert_eq!(
            s.tick(t + 41_250_000_000, &mut r),
            Action::Close,
            "no ACK: zombie"
        );
        assert_eq!(r.c.zombies, 1);
        let mut close = Vec::new();
        ws::encode_close(4014, "Disallowed intent(s).", &mut close);
        assert_eq!(s.feed(&close, 5, &w, &mut r), Action::Close);
        assert_eq!(s.phase, Phase::Stopped);
        assert_eq!(r.c.closes[14], 1);
    }

    #[test]
    fn op7_reconnects_at_once_and_resumes() {
        let w = world();
        let mut r = Recorder::new();
        let mut s = Session::new(0, 0, 1, 5);
        ready(&mut s, &w, &mut r);
        s.feed(&msg(2, 0, 0), 3, &w, &mut r);
        assert_eq!(
            s.feed(&frame(r#"{"op":7,"d":null}"#), 50, &w, &mut r),
            Action::Close
        );
        s.on_lost(50, false, 1, &mut r);
        assert_eq!(s.reconnect_at, 50, "no backoff after op 7");
        assert!(!s.needs_identify());
        connect_through_hello(&mut s, &w, &mut r, 60);
        assert_eq!(s.phase, Phase::Resuming);
        s.feed(&msg(3, 0, 0), 61, &w, &mut r); // replayed
        s.feed(
            &frame(r#"{"op":0,"t":"RESUMED","s":4,"d":{}}"#),
            62,
            &w,
            &mut r,
        );
        assert!(s.streaming());
        assert_eq!((r.c.resumed, r.c.gaps, r.c.duplicates), (1, 0, 0));
    }

    #[test]
    fn a_paced_reader_reads_at_its_rate() {
        let w = world();
        let mut r = Recorder::new();
        let mut s = Session::new(0, 0, 1, 5);
        s.read_rate = Some(10.0);
        ready(&mut s, &w, &mut r);
        let t0 = s.streaming_since;
        assert!(s.may_read(t0));
        s.feed(&msg(2, 0, 0), t0, &w, &mut r);
        assert!(!s.may_read(t0), "one event read, none allowed yet");
        assert!(s.may_read(t0 + 100_000_000), "10/s: the next after 100 ms");
    }

    #[test]
    fn content_must_be_empty_without_the_intent() {
        let mut w = world();
        w.bots[0].intents = GUILDS | GUILD_MESSAGES;
        let mut r = Recorder::new();
        let mut s = Session::new(0, 0, 1, 3);
        ready(&mut s, &w, &mut r);
        s.feed(&msg(2, 0, 0), 3, &w, &mut r);
        assert_eq!(r.c.content_violations, 1);
        let ok = frame(r#"{"op":0,"t":"MESSAGE_CREATE","s":3,"d":{"lg":[1,3,0,0],"content":""}}"#);
        s.feed(&ok, 3, &w, &mut r);
        assert_eq!(r.c.content_violations, 1);
    }

    #[test]
    fn fragments_pings_and_bad_frames() {
        let w = world();
        let mut r = Recorder::new();
        let mut s = Session::new(0, 0, 1, 11);
        ready(&mut s, &w, &mut r);
        // A message in two fragments with a ping between them, cut anywhere.
        let m = r#"{"op":0,"t":"MESSAGE_CREATE","s":2,"d":{"lg":[1,2,0,0],"content":"x"}}"#;
        let mut b = Vec::new();
        let mut hdr = [0u8; ws::MAX_SERVER_HEADER];
        let n = ws::encode_header(OpCode::Text, false, 10, &mut hdr);
        b.extend_from_slice(&hdr[..n]);
        b.extend_from_slice(&m.as_bytes()[..10]);
        ws::encode_frame(OpCode::Ping, b"hb", &mut b);
        let n = ws::encode_header(OpCode::Continuation, true, m.len() - 10, &mut hdr);
        b.extend_from_slice(&hdr[..n]);
        b.extend_from_slice(&m.as_bytes()[10..]);
        for chunk in b.chunks(5) {
            assert_eq!(s.feed(chunk, 3, &w, &mut r), Action::Continue);
        }
        assert_eq!(r.c.deliveries, 1);
        assert_eq!(sent(&mut s), vec![ws::OwnedMessage::Pong(b"hb".to_vec())]);
        // A masked frame from the node is a protocol error.
        let mut masked = Vec::new();
        ws::encode_client_frame(OpCode::Text, true, [1, 2, 3, 4], b"{}", &mut masked);
        assert_eq!(s.feed(&masked, 4, &w, &mut r), Action::Close);
        assert_eq!(r.c.protocol_errors, 1);
    }

    #[test]
    fn ts_ns_stamps_give_latency_without_world_checks() {
        let w = world();
        let mut r = Recorder::new();
        r.measuring = true;
        let mut s = Session::new(0, 0, 1, 13);
        ready(&mut s, &w, &mut r);
        let sched = crate::clock::now_ns();
        let m = format!(
            r#"{{"op":0,"t":"MESSAGE_CREATE","s":2,"d":{{"ts_ns":{sched},"id":"1","guild_id":"99","content":"x"}}}}"#
        );
        s.feed(&frame(&m), 3, &w, &mut r);
        assert_eq!(r.c.deliveries, 1);
        assert_eq!(r.c.entitlement_violations, 0);
        assert_eq!(r.latency.len(), 1);
    }

    #[test]
    fn collect_guilds_queues_every_guild_create_and_who_read_it() {
        let w = world();
        let mut r = Recorder::new();
        r.collect_guilds = true;
        for (k, rate) in [None, Some(0.0)].into_iter().enumerate() {
            let mut s = Session::new(0, 0, 1, 17 + k as u64);
            s.read_rate = rate;
            connect_through_hello(&mut s, &w, &mut r, 1);
            s.feed(
                &frame(r#"{"op":0,"t":"READY","s":1,"d":{"session_id":"abc"}}"#),
                2,
                &w,
                &mut r,
            );
            for (seq, id) in [(2, 77), (3, 88)] {
                let g = format!(
                    r#"{{"op":0,"t":"GUILD_CREATE","s":{seq},"d":{{"id":"{id}","channels":[{{"id":"{}","name":"general"}}]}}}}"#,
                    id + 1
                );
                s.feed(&frame(&g), 2, &w, &mut r);
            }
        }
        assert_eq!(r.guild, None, "want_guild is off");
        assert_eq!(
            r.guilds,
            vec![
                (77, 78, true),
                (88, 89, true),
                (77, 78, false),
                (88, 89, false)
            ]
        );
    }

    #[test]
    fn guild_capture_ack_seq_shard_field_and_close() {
        let w = world();
        let mut r = Recorder::new();
        r.want_guild = true;
        let mut s = Session::new(0, 0, 1, 17);
        s.send_shard = false;
        s.ack_seq = false;
        connect_through_hello(&mut s, &w, &mut r, 1);
        let m = sent(&mut s);
        assert!(
            matches!(&m[..], [ws::OwnedMessage::Text(t)] if !t.contains("shard")),
            "{m:?}"
        );
        s.feed(
            &frame(r#"{"op":0,"t":"READY","s":1,"d":{"session_id":"abc"}}"#),
            2,
            &w,
            &mut r,
        );
        let g = r#"{"op":0,"t":"GUILD_CREATE","s":2,"d":{"id":"77","channels":[{"id":"5","name":"random"},{"id":"6","name":"general"}]}}"#;
        s.feed(&frame(g), 2, &w, &mut r);
        assert_eq!(r.guild, Some((77, 6)));
        assert_eq!(r.c.guild_creates, 1);
        assert!(r.guilds.is_empty(), "collect_guilds is off");
        assert!(r.c.handshake_bytes > g.len() as u64);
        let t = s.next_hb;
        s.tick(t, &mut r);
        assert_eq!(
            sent(&mut s),
            vec![ws::OwnedMessage::Text(r#"{"op":1,"d":null}"#.into())]
        );
        s.close_and_retire(1000);
        assert_eq!(
            sent(&mut s),
            vec![ws::OwnedMessage::Close(Some(1000), String::new())]
        );
        assert_eq!(s.phase, Phase::Stopped);
        s.on_lost(5, false, 1, &mut r);
        assert_eq!(
            (r.c.lost, r.c.failed),
            (0, 0),
            "a retired session is not lost"
        );
    }

    #[test]
    fn without_reconnect_a_loss_stops_the_session() {
        let w = world();
        let mut r = Recorder::new();
        let mut s = Session::new(0, 0, 1, 19);
        s.reconnect = false;
        ready(&mut s, &w, &mut r);
        s.on_lost(10, false, 1, &mut r);
        assert_eq!(s.phase, Phase::Stopped);
        assert_eq!((r.c.lost, r.c.failed), (1, 0));
        let mut s = Session::new(0, 0, 1, 23);
        s.reconnect = false;
        s.on_connecting();
        s.on_lost(10, true, 1, &mut r);
        assert_eq!((r.c.lost, r.c.failed, r.c.connect_errors), (1, 1, 1));
        // A fatal close before READY fails a reconnecting session too.
        let mut s = Session::new(0, 0, 1, 29);
        connect_through_hello(&mut s, &w, &mut r, 1);
        let mut close = Vec::new();
        ws::encode_close(4004, "Authentication failed.", &mut close);
        assert_eq!(s.feed(&close, 2, &w, &mut r), Action::Close);
        assert_eq!(r.c.failed, 2);
    }

    #[test]
    fn a_stalled_reader_stops_reading_and_is_no_zombie() {
        let w = world();
        let mut r = Recorder::new();
        let mut s = Session::new(0, 0, 1, 31);
        s.read_rate = Some(0.0);
        assert!(s.stalled());
        ready(&mut s, &w, &mut r);
        assert!(!s.may_read(s.streaming_since + 10_000_000_000));
        let t = s.next_hb;
        assert_eq!(s.tick(t, &mut r), Action::Continue);
        assert_eq!(s.tick(t + 41_250_000_000, &mut r), Action::Continue);
        assert_eq!(r.c.zombies, 0);
    }
}
