//! A session's connection lifecycle: opening (the upgrade request),
//! heartbeats and zombie detection ([`Session::tick`]), closes from the
//! node (fatal codes stop the session; 4007 and 4009 start a new one),
//! the loss of a connection and the reconnect backoff (0-1 s, then 2^n s
//! jittered, at most 60 s; no backoff where the protocol asked for a
//! reconnect), and the end of a run.

use std::fmt::Write as _;

use net::ws;

use super::bytes::Bytes;
use super::recorder::Recorder;
use super::state::{Action, Phase, Session};

impl Session {
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
    pub(super) fn stop(&mut self, rec: &mut Recorder) {
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

    /// Queues a Close with `code` and retires the session (it will not
    /// reconnect and is not counted as lost): the end of a run.
    pub fn close_and_retire(&mut self, code: u16) {
        let mask = self.mask();
        ws::encode_client_close(code, "", mask, &mut self.out);
        self.phase = Phase::Stopped;
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

    pub(super) fn enter_streaming(&mut self, now: u64, rec: &mut Recorder) {
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
}
