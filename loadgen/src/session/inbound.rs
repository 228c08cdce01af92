//! Bytes from the node into a session: the HTTP upgrade answer (a refusal
//! is retried like a failed connect), WebSocket frames (bounded by
//! `MAX_MESSAGE`; pings answered), and the gateway ops: Hello (identify or
//! resume), heartbeat ACK and request, op 7 and op 9. Dispatches go to
//! dispatch.rs. A malformed frame or op is a protocol error: counted,
//! the first one kept, the connection closed.

use net::ws::{self, Decoder, Message, OpCode};

use super::bytes::find;
use super::recorder::Recorder;
use super::state::{Action, Phase, Session, MAX_MESSAGE};
use crate::world::World;

impl Session {
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

    pub(super) fn parse(
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

    pub(super) fn on_text(
        &mut self,
        p: &[u8],
        now: u64,
        world: &World,
        rec: &mut Recorder,
    ) -> Action {
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

    pub(super) fn identify(&mut self, world: &World, rec: &mut Recorder) {
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
}
