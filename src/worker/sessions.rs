//! Sessions: Identify through the registry sidecar (with its admission
//! bound) to READY, and Resume of a session this worker holds.

use super::*;
use crate::worker::start_refusal::StartRefusal;

impl Worker {
    pub(super) fn on_resume(&mut self, key: ConnKey, r: Resume) {
        let now = self.now_ms();
        // Kept until the Resume is answered: a refusal (here, or later from
        // another node or crash recovery) is attributed to its application.
        if let Some(ConnState::WebSocket(w, _)) = self.conn(key).map(|c| &mut c.state) {
            w.resume_token = Some(r.token.as_str().into());
        }
        let sid = SessionId::parse(&r.session_id);
        let node = self.shared.node();
        // The session lives on the worker its id names (modulo ours, if it
        // came from another node): move the connection there.
        if let Some(to) = sid.and_then(|s| home_worker(&s, node, self.shared.workers.len())) {
            if to != self.id {
                self.start_handover(key, to, Action::Resume(r));
                return;
            }
        }
        let idx = sid.and_then(|s| self.fan.lookup(&s));
        if let (None, Some(s)) = (idx, sid) {
            // Not here: another node of the cluster may hold it. That holds
            // for an id naming this node too: a restarted node takes the
            // lowest free number, often its predecessor's, whose sessions
            // moved to the other nodes when it drained.
            if s.node() != 0 && self.shared.cluster.is_some() {
                self.ask_holder(key, s, &r);
                return;
            }
        }
        let outcome: Result<SessionIdx, ResumeRefusal> = match idx {
            None => {
                // A session whose window passed is still counted: its gap
                // says what a longer window would have kept.
                if let Some(gap) = sid.and_then(|s| self.expired.take(s.random_bits(), now)) {
                    self.shared.metrics[self.id].reconnect.refused_expired(gap);
                }
                Err(ResumeRefusal::UnknownSession)
            }
            Some(idx) => {
                let s = self.fan.get(idx).expect("indexed");
                if s.identity.token_digest != identify::token_digest(&r.token) {
                    // A wrong token must not end, or even disturb, someone's session.
                    Err(ResumeRefusal::TokenMismatch)
                } else {
                    // A connection still holding the session (the client saw the
                    // drop before we did) is ended; the session is not.
                    if let Some(old) = s.conn.filter(|c| *c != key) {
                        self.detach_conn(old);
                        self.begin_close(
                            old,
                            Some(Close::new(
                                CloseCode::UnknownError,
                                "session resumed on another connection",
                            )),
                        );
                    }
                    self.fan.rewind_for_resume(idx, r.seq).map(|()| idx)
                }
            }
        };
        match outcome {
            Ok(idx) => {
                let away = self.fan.away_ms(idx, now);
                self.shared.metrics[self.id].reconnect.resumed(away);
                let attached = self.fan.get_mut(idx).map(|s| {
                    s.conn = Some(key);
                    s.expires_ms = u64::MAX;
                });
                debug_assert!(attached.is_some());
                let resumed = self
                    .fan
                    .dispatch(idx, "RESUMED", br#"{"_trace":["gatewayd"]}"#, now);
                let Some(conn) = self.conn(key) else { return };
                let ConnState::WebSocket(w, sid) = &mut conn.state else {
                    return;
                };
                *sid = Some(idx);
                w.session.authenticated();
                w.resume_token = None;
                conn.partial = 0;
                WorkerMetrics::inc(&self.metrics().resumes);
                if let Some(s) = self.fan.get_mut(idx) {
                    s.resumes = s.resumes.saturating_add(1);
                    s.attached_ms = self.unix_ms;
                    let app = s.identity.application_id.0;
                    let sid = s.identity.session_id;
                    self.shared.apps.resumed(app, &sid, self.unix_ms);
                }
                WorkerMetrics::inc(&self.metrics().sessions_ready);
                if resumed.is_err() {
                    self.overflowed(idx, key);
                }
            }
            Err(why) => return self.refuse_resume(key, why),
        }
        self.queue_flush(key);
    }

    /// Op 9 for a Resume, counted by reason.
    pub(super) fn refuse_resume(&mut self, key: ConnKey, why: ResumeRefusal) {
        tracing::debug!(worker = self.id, %why, "resume refused");
        self.resume_refused(why);
        let Some(conn) = self.conn(key) else { return };
        let ConnState::WebSocket(w, _) = &mut conn.state else {
            return;
        };
        w.session.authentication_failed();
        let token = w.resume_token.take();
        payload::invalid_session(&mut conn.out, false);
        self.queue_flush(key);
        if let Some(token) = token {
            self.attribute(token, StartRefusal::Resume, why.index() as u64);
        }
    }

    /// A start refused before its application was known (an Identify's
    /// 4010 or 4013, a Resume's op 9): the sidecar looks its token up and,
    /// if it is an application's, that application counts it
    /// (`ToWorker::Attributed`). Never waited for: a full sidecar queue
    /// leaves it uncounted (`gatewayd_start_refusals_unattributed_total`).
    pub(super) fn attribute(&mut self, token: Box<str>, why: StartRefusal, detail: u64) {
        let ask = SidecarRequest::Attribute {
            worker: self.id,
            token,
            why,
            detail,
        };
        if self.shared.sidecar.try_send(ask).is_err() {
            WorkerMetrics::inc(&self.metrics().refusals_unattributed);
        }
    }

    /// Unhook a connection from its session (the session stays).
    pub(super) fn detach_conn(&mut self, key: ConnKey) {
        if let Some(conn) = self.conn(key) {
            if let ConnState::WebSocket(_, sid) = &mut conn.state {
                if sid.take().is_some() {
                    WorkerMetrics::dec(&self.metrics().sessions_ready);
                }
            }
        }
    }

    pub(super) fn on_identified(
        &mut self,
        key: ConnKey,
        result: Result<Box<IdentifyOk>, IdentifyRefusal>,
    ) {
        let worker = self.id;
        let gateway_url = self.shared.gateway_url.clone();
        let now = self.now_ms();
        let Some(conn) = self.conn(key) else { return };
        let ConnState::WebSocket(w, _) = &mut conn.state else {
            return;
        };
        if w.session.phase() != Phase::Authenticating {
            return;
        }
        let ok = match result {
            Err(IdentifyRefusal::Close(close, app)) => {
                if let Some((app, why, intents)) = app {
                    self.shared
                        .apps
                        .start_refused(app, why, intents, self.unix_ms);
                }
                WorkerMetrics::inc(&self.metrics().identifies_refused);
                WorkerMetrics::inc(&self.metrics().identifies_refused_closed);
                self.begin_close(key, Some(close));
                return;
            }
            Err(IdentifyRefusal::InvalidSession(app)) => {
                if let Some((app, why, intents)) = app {
                    self.shared
                        .apps
                        .start_refused(app, why, intents, self.unix_ms);
                }
                let Some(conn) = self.conn(key) else { return };
                let ConnState::WebSocket(w, _) = &mut conn.state else {
                    return;
                };
                w.session.authentication_failed();
                payload::invalid_session(&mut conn.out, false);
                WorkerMetrics::inc(&self.metrics().identifies_refused);
                self.queue_flush(key);
                return;
            }
            Ok(ok) => ok,
        };
        w.session.authenticated();
        let mut random = [0u8; 16];
        let _ = getrandom::fill(&mut random);
        let session_id = SessionId::on_node(
            self.shared.node(),
            worker as u8,
            u128::from_le_bytes(random),
        );
        let ready_d = payload::ready_d(
            &payload::Ready {
                user_json: &ok.user_json,
                session_id: session_id.as_str(),
                resume_gateway_url: &gateway_url,
                shard: ok.shard,
                application_id: ok.application_id,
                application_flags: ok.application_flags,
            },
            ok.guilds.iter().map(|g| g.0.id),
        );
        let identity = Box::new(Identity {
            session_id,
            application_id: ok.application_id,
            bot_user_id: ok.bot_user_id,
            intents: ok.intents,
            shard: [ok.shard.0, ok.shard.1],
            token_digest: ok.token_digest,
            guilds: ok.guilds.iter().map(|g| g.0.clone()).collect(),
            user_json: ok.user_json.clone(),
        });
        let idx = self.fan.create(identity, key);
        if let Some(s) = self.fan.get_mut(idx) {
            s.since_ms = self.unix_ms;
            s.attached_ms = self.unix_ms;
        }
        if let Some(ConnState::WebSocket(_, sid)) = self.conn(key).map(|c| &mut c.state) {
            *sid = Some(idx);
        }
        WorkerMetrics::inc(&self.metrics().identifies);
        let app = ok.application_id.0;
        self.shared.apps.identified(app, &session_id, self.unix_ms);
        WorkerMetrics::inc(&self.metrics().sessions_ready);
        // READY (s = 1), then one GUILD_CREATE per server: dispatches like any
        // other, so a Resume can replay them too.
        let mut pushed = self.fan.dispatch(idx, "READY", &ready_d, now);
        for g in &ok.guilds {
            if pushed.is_ok() {
                pushed = self.fan.dispatch(idx, "GUILD_CREATE", &g.1, now);
            }
        }
        match pushed {
            Ok(_) => self.write_summary(idx),
            Err(ringbuf::PushError::NoChunks) => {
                // The worker's ring storage is used up: this is capacity, not
                // the client's fault. Undo the session and ask it to retry.
                tracing::warn!(
                    worker = self.id,
                    "ring storage exhausted (events.ring_chunks): identify refused"
                );
                WorkerMetrics::inc(&self.metrics().ring_exhausted);
                self.detach_conn(key);
                self.fan.remove(idx);
                self.refuse_identify(key);
                return;
            }
            Err(ringbuf::PushError::Full) => self.overflowed(idx, key),
        }
        self.queue_flush(key);
    }

    /// Hand an Identify to the registry sidecar, unless its queue is at the
    /// node's admission bound: then op 9 at once, so a storm queues nowhere.
    pub(super) fn send_identify(
        &mut self,
        key: ConnKey,
        identify: crate::protocol::identify::Identify,
    ) {
        if self.shared.sidecar.len() >= self.shared.cfg.registry.admission_queue {
            WorkerMetrics::inc(&self.metrics().identifies_refused_admission);
            self.refuse_identify(key);
            return;
        }
        let req = SidecarRequest::Identify {
            worker: self.id,
            conn: key,
            identify,
        };
        if self.shared.sidecar.try_send(req).is_err() {
            self.refuse_identify(key);
        }
    }

    /// The registry link is saturated: tell the client to back off (op 9).
    pub(super) fn refuse_identify(&mut self, key: ConnKey) {
        if let Some(conn) = self.conn(key) {
            if let ConnState::WebSocket(w, _) = &mut conn.state {
                w.session.authentication_failed();
                payload::invalid_session(&mut conn.out, false);
            }
        }
        WorkerMetrics::inc(&self.metrics().identifies_refused);
        self.queue_flush(key);
    }

    /// Count a refused Resume (in total and by reason).
    pub(super) fn resume_refused(&self, why: ResumeRefusal) {
        WorkerMetrics::inc(&self.metrics().resumes_refused);
        WorkerMetrics::inc(&self.metrics().resume_refusals[why.index()]);
    }
}
