//! Input: received bytes (through TLS) into HTTP heads and WebSocket
//! frames, frames into the session state machine, and its actions.

use super::*;
use crate::worker::start_refusal::StartRefusal;

enum Step {
    Consumed(usize),
    Act(Action, usize),
    Close(Close, usize),
    /// An Identify refused while it was read (4010, 4013), with its token
    /// if it had one (the refusal is attributed to its application).
    Refused(Close, usize, Option<String>, StartRefusal),
    PeerClose(Option<u16>, usize),
}

impl Worker {
    pub(super) fn on_recv(&mut self, r: usize, key: ConnKey, c: Completion) {
        let bid = c.buffer_id();
        if !c.more() {
            let handing_over = match self.conn(key).and_then(|c| c.handover.as_deref_mut()) {
                Some(h) => {
                    h.recv_done = true;
                    true
                }
                None => false,
            };
            if handing_over {
                if c.result > 0 {
                    let b = bid.expect("a receive with data has a buffer");
                    let data = self.rings[r].ring.buffer(b, c.result as usize).to_vec();
                    if let Some(conn) = self.conn(key) {
                        conn.inbuf.extend_from_slice(&data);
                    }
                    self.rings[r].ring.recycle(b);
                }
                self.try_pass(key);
                return;
            }
        }
        let alive = self.conn(key).map(|c| !c.life.closed()).unwrap_or(false);
        if !alive {
            if let Some(b) = bid {
                self.rings[r].ring.recycle(b);
            }
            return;
        }
        if c.result > 0 {
            let b = bid.expect("a receive with data has a buffer");
            // Copy out of the provided buffer so it goes straight back to the kernel.
            let max_ws = http::MAX_HEAD.max(self.shared.cfg.limits.inbound_message_bytes + 14) * 2;
            // A REST request: its head and a body of up to MAX_BODY.
            let max_rest = http::MAX_HEAD + crate::api::body::MAX_BODY;
            let (rs_ring, conns) = {
                let rs = &mut self.rings[r];
                (&mut rs.ring, &mut rs.conns)
            };
            let conn = conns[key.slot as usize].as_deref_mut().expect("alive");
            let max_in = if matches!(conn.state, ConnState::Http) {
                max_rest
            } else {
                max_ws
            };
            let data = rs_ring.buffer(b, c.result as usize);
            let mut fail = None;
            match conn.tls.as_deref_mut() {
                Some(tls) => {
                    if let Err(e) = tls.receive(data, &mut conn.inbuf, max_in) {
                        tracing::debug!(error = %e, "TLS error");
                        fail = Some(());
                    }
                }
                None => {
                    if matches!(conn.state, ConnState::Closing) {
                        // Draining the peer's leftovers while we linger.
                    } else if conn.inbuf.len() + data.len() > max_in {
                        fail = Some(());
                    } else {
                        conn.inbuf.extend_from_slice(data);
                    }
                }
            }
            rs_ring.recycle(b);
            if fail.is_some() {
                self.begin_close(
                    key,
                    Some(Close::new(
                        CloseCode::DecodeError,
                        "decode error: input exceeds limits",
                    )),
                );
            } else {
                self.queue_flush(key);
                self.process_input(key);
            }
            if !c.more() {
                if let Some(conn) = self.conn(key) {
                    if !conn.life.closed() && conn.handover.is_none() {
                        self.rings[r].ring.recv_multi(key.slot, c.user_data);
                    }
                }
            }
            return;
        }
        if c.result == -libc::ENOBUFS {
            // Every provided buffer was in use; ask again.
            self.rings[r].ring.recv_multi(key.slot, c.user_data);
            return;
        }
        // EOF or error: the peer is gone (resumable unless it said otherwise).
        self.finish(key);
    }

    /// Parse everything buffered for a connection.
    pub(super) fn process_input(&mut self, key: ConnKey) {
        loop {
            let now = self.now_ms();
            let Some(conn) = conn_in(&mut self.rings, key) else {
                return;
            };
            if conn.life.closed() || conn.life.shutting() || conn.handover.is_some() {
                return;
            }
            match &mut conn.state {
                ConnState::Closing => {
                    conn.inbuf.clear();
                    return;
                }
                ConnState::Http => {
                    if conn.rest_pending() || conn.inbuf.is_empty() {
                        return;
                    }
                    match http::parse_head(&conn.inbuf) {
                        Ok(None) => return,
                        Err(e) => {
                            let status = e.status();
                            http::write_response(
                                status,
                                rest::JSON,
                                br#"{"message": "bad request", "code": 0}"#,
                                false,
                                &[],
                                &mut conn.out,
                            );
                            conn.inbuf.clear();
                            self.close_after_flush(key);
                            return;
                        }
                        Ok(Some((n, head))) if rest::is_api(&head.path) => {
                            let total = n.saturating_add(head.content_length);
                            if head.content_length > crate::api::body::MAX_BODY {
                                conn.inbuf.clear();
                                conn.keep_alive = false;
                                let e = crate::api::body::ApiError::new(
                                    413,
                                    40005,
                                    "Request entity too large",
                                );
                                http::write_response(
                                    413,
                                    rest::JSON,
                                    &e.to_bytes(),
                                    false,
                                    &[],
                                    &mut conn.out,
                                );
                                self.close_after_flush(key);
                                return;
                            }
                            if conn.inbuf.len() < total {
                                return; // the body is still coming
                            }
                            let elsewhere = if conn.rest().here {
                                None
                            } else {
                                self.rest_owner_elsewhere(&head)
                            };
                            if let Some(to) = elsewhere {
                                // Its token's worker parses it again from the same bytes.
                                self.start_handover(key, to, Action::None);
                                return;
                            }
                            let conn = conn_in(&mut self.rings, key).expect("live");
                            conn.keep_alive = head.keep_alive;
                            let body = conn.inbuf[n..total].to_vec();
                            conn.inbuf.drain(..total);
                            self.on_api_request(key, rest_edge::ApiRequest { head, body });
                        }
                        Ok(Some((n, head))) => {
                            conn.inbuf.drain(..n);
                            self.on_http_request(key, head, now);
                        }
                    }
                }
                ConnState::WebSocket(wsc, _) => {
                    let step = {
                        let WsConn {
                            decoder, session, ..
                        } = &mut **wsc;
                        match decoder.decode(&mut conn.inbuf) {
                            Ok(None) => return,
                            Err(e) => Step::Close(ws_error_close(e), 0),
                            Ok(Some((n, None))) => Step::Consumed(n),
                            Ok(Some((n, Some(msg)))) => match msg {
                                // A JSON payload may come in a text or a binary frame
                                // (hikari sends every payload binary; Discord takes
                                // both): the same checks, limits and close codes.
                                Message::Text(t) => Self::client_payload(session, t.as_bytes(), n, now, &mut conn.out, &mut self.scratch),
                                Message::Binary(b) => match std::str::from_utf8(b) {
                                    Ok(t) => Self::client_payload(session, t.as_bytes(), n, now, &mut conn.out, &mut self.scratch),
                                    Err(_) => Step::Close(
                                        Close::new(CloseCode::DecodeError, "decode error: a binary payload must be UTF-8 JSON (encoding=json)"),
                                        n,
                                    ),
                                },
                                Message::Ping(p) => {
                                    ws::encode_frame(OpCode::Pong, p, &mut conn.out);
                                    Step::Consumed(n)
                                }
                                Message::Pong(_) => Step::Consumed(n),
                                Message::Close(code, _) => Step::PeerClose(code, n),
                            },
                        }
                    };
                    let n = match &step {
                        Step::Consumed(n)
                        | Step::Act(_, n)
                        | Step::Close(_, n)
                        | Step::Refused(_, n, _, _)
                        | Step::PeerClose(_, n) => *n,
                    };
                    conn.inbuf.drain(..n.min(conn.inbuf.len()));
                    if conn.inbuf.capacity() > KEEP_BUFFER && conn.inbuf.is_empty() {
                        conn.inbuf = Vec::new();
                    }
                    self.queue_flush(key);
                    match step {
                        Step::Consumed(_) => {}
                        Step::Act(a, _) => self.on_action(key, a),
                        Step::Close(close, _) => {
                            self.begin_close(key, Some(close));
                            return;
                        }
                        Step::Refused(close, _, token, why) => {
                            if let Some(token) = token {
                                self.attribute(token.into(), why, 0);
                            }
                            self.begin_close(key, Some(close));
                            return;
                        }
                        Step::PeerClose(code, _) => {
                            self.on_peer_close(key, code);
                            return;
                        }
                    }
                }
            }
        }
    }

    /// One client payload (JSON, from a text or a binary frame of `n`
    /// bytes on the wire) through the session state machine.
    fn client_payload(
        session: &mut Session,
        text: &[u8],
        n: usize,
        now: u64,
        out: &mut Vec<u8>,
        scratch: &mut Vec<u8>,
    ) -> Step {
        match identify::parse(text, scratch) {
            Err(close) => match StartRefusal::of_parse_close(close.code) {
                Some(why) => Step::Refused(close, n, identify::token_of(text, scratch), why),
                None => Step::Close(close, n),
            },
            Ok(p) => match session.on_payload(p, now, out) {
                Ok(Action::None) => Step::Consumed(n),
                Ok(a) => Step::Act(a, n),
                Err(close) => Step::Close(close, n),
            },
        }
    }

    pub(super) fn on_action(&mut self, key: ConnKey, action: Action) {
        match action {
            Action::None => {}
            Action::Identify(identify) => {
                // The session belongs on the worker its (application, shard) is placed on.
                let workers = self.shared.workers.len() as u32;
                if let Some(app) = registry::token::parse_app_id(&identify.token) {
                    let to = shards::worker_for(app, identify.shard.0, workers) as usize;
                    if to != self.id {
                        self.start_handover(key, to, Action::Identify(identify));
                        return;
                    }
                }
                self.send_identify(key, identify);
            }
            Action::Resume(r) => self.on_resume(key, r),
            Action::Ack(seq) => {
                let Some(sid) = self.session_of(key) else {
                    return;
                };
                self.fan.ack(sid, seq);
            }
            Action::MembersChunk { guild_ids, nonce } => {
                let Some(sid) = self.session_of(key) else {
                    return;
                };
                // Not from the topic: a survivor could not reproduce it.
                // With crash recovery on, the chunks go out once the
                // session's taint is in the store (`members_chunk_tainted`).
                if let Some((guild_ids, nonce)) = self.taint_ahead(key, sid, guild_ids, nonce) {
                    self.members_chunk(key, sid, &guild_ids, nonce.as_deref());
                }
            }
        }
    }

    /// Queue a session's GUILD_MEMBERS_CHUNKs (one per requested server
    /// it is in).
    pub(super) fn members_chunk(
        &mut self,
        key: ConnKey,
        sid: SessionIdx,
        guild_ids: &[u64],
        nonce: Option<&str>,
    ) {
        let Some(id) = self.fan.get(sid).map(|s| s.identity.clone()) else {
            return;
        };
        let now = self.now_ms();
        for &g in guild_ids {
            if id.guild(ServerId(g)).is_none() {
                continue;
            }
            let d = payload::members_chunk_d(ServerId(g), &id.user_json, nonce);
            if self
                .fan
                .dispatch(sid, "GUILD_MEMBERS_CHUNK", &d, now)
                .is_err()
            {
                self.overflowed(sid, key);
                return;
            }
        }
        self.queue_flush(key);
    }

    /// The fan-out session a connection serves, if it is READY.
    pub(super) fn session_of(&mut self, key: ConnKey) -> Option<SessionIdx> {
        match &self.conn(key)?.state {
            ConnState::WebSocket(_, sid) => *sid,
            _ => None,
        }
    }

    /// A session's queue hit its bound: close its connection resumably; the
    /// session keeps what it holds for a Resume.
    pub(super) fn overflowed(&mut self, _sid: SessionIdx, key: ConnKey) {
        WorkerMetrics::inc(&self.metrics().slow_consumer_closes);
        self.begin_close(
            key,
            Some(Close::new(
                CloseCode::UnknownError,
                "send queue full: the client is not reading fast enough; resume to continue",
            )),
        );
    }
}
