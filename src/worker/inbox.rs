//! The inbox: messages from other threads (registry answers, ingest
//! batches, permission changes, revocations, handed-over connections,
//! shutdown), and delivery of events to the fan-out.

use super::cluster::Change;
use super::*;

impl Worker {
    pub(super) fn on_message(&mut self, msg: ToWorker) {
        match msg {
            ToWorker::Identified { conn, result } => self.on_identified(conn, result),
            ToWorker::Attributed((app, why, detail)) => {
                self.shared
                    .apps
                    .start_refused(app, why, detail, self.unix_ms)
            }
            ToWorker::RestReply { conn, status, body } => self.on_rest_reply(conn, status, body),
            ToWorker::Chat(req) => self.commit_here(*req),
            ToWorker::Learn(changes) => {
                if let Some(chat) = self.chat.as_mut() {
                    chat.learnt(changes);
                }
            }
            ToWorker::ApiAuthed { digest, view } => self.on_api_authed(digest, view),
            ToWorker::DmOpened { conn, app, opened } => self.on_dm_opened(conn, app, opened),
            ToWorker::ApiRefreshed { app, view } => match view {
                Ok(Some(v)) => self.api.views.refreshed(*v),
                Ok(None) => self.api.views.forget_app(app),
                Err(()) => {} // the old view stands; its leases lapse as usual
            },
            ToWorker::Batch(batch) => {
                if self.fenced() {
                    return; // our claim lapsed: a survivor may hold our sessions
                }
                let take_ns = crate::delivery::latency::unix_ns();
                self.deliver_batch(&batch, take_ns);
                self.retain_batch(&batch);
            }
            // Sessions and REST views take every change at the same moment.
            ToWorker::Leases { pairs, until_ms } => {
                self.fan.renew_leases(&pairs, until_ms);
                self.api.views.renew(&pairs, until_ms);
            }
            ToWorker::Revoke(msg) => {
                self.revoke(&msg);
                let app = AppId(msg.revocation.application_id());
                self.identities_changed(Some(app), None);
                self.clu.remember(Change::Revoke(msg), self.now_ms());
            }
            ToWorker::Access(update) => {
                self.fan.update_access(update.server_id, &update.by_app);
                self.api
                    .views
                    .update_access(update.server_id, &update.by_app);
                self.identities_changed(None, Some(update.server_id));
                self.clu.remember(Change::Access(update), self.now_ms());
            }
            ToWorker::Adopt {
                token,
                conn,
                action,
            } => {
                let now = self.now_ms();
                let a = self.adopting.entry(token).or_insert_with(|| Adoption {
                    since_ms: now,
                    ..Default::default()
                });
                a.conn = Some((conn, action));
                self.try_adopt(token);
            }
            ToWorker::RestCounters(answer) => self.api.limiter.apply(&answer),
            ToWorker::Shutdown { spread_ms } => self.drain(spread_ms),
            ToWorker::PanicDrill => panic!(
                "worker {}: fault injection drill (POST /fault/worker-panic)",
                self.id
            ),
            ToWorker::HandOut { take, reply } => self.hand_out(&take, &reply),
            ToWorker::HandedIn { conn, result } => self.handed_in(conn, result),
            ToWorker::Recovered { replay, sessions } => self.recovered(&replay, sessions),
            ToWorker::NotRecovered { conn, why } => self.refuse_resume(conn, why),
            ToWorker::MembersChunk {
                conn,
                session_id,
                guild_ids,
                nonce,
            } => self.members_chunk_tainted(conn, session_id, guild_ids, nonce),
        }
    }

    /// Fan one event out (src/fanout.rs decides and appends; here the
    /// recipients' connections are scheduled for a send).
    pub(super) fn deliver(&mut self, ev: &EventIn) -> u32 {
        let now = self.now_ms();
        let unix = self.unix_ms;
        let Worker {
            fan,
            rings,
            queue,
            overflow,
            ..
        } = self;
        let d = fan.deliver(
            ev,
            now,
            unix,
            |key| {
                if let Some(conn) = conn_in(rings, key) {
                    if !conn.queued {
                        conn.queued = true;
                        queue.push(key);
                    }
                }
            },
            |sid, key| overflow.push((sid, key)),
        );
        let m = &self.shared.metrics[self.id];
        WorkerMetrics::inc(&m.events_in);
        WorkerMetrics::add(&m.deliveries, d.recipients as u64);
        WorkerMetrics::add(&m.deliveries_redacted, d.redacted as u64);
        WorkerMetrics::add(&m.arena_records, d.appended_records as u64);
        WorkerMetrics::add(&m.history_reclaims, d.history_reclaims as u64);
        while let Some((sid, key)) = self.overflow.pop() {
            self.overflowed(sid, key);
        }
        d.recipients
    }

    /// A batch of ingest records, validated by the ingest thread, taken
    /// from the inbox at `take_ns` (Unix ns).
    pub(super) fn deliver_batch(&mut self, batch: &crate::delivery::batch::Batch, take_ns: u64) {
        for (body, read_ns) in batch.bodies_read() {
            // SAFETY: the ingest thread accepted exactly these bytes.
            let rec = unsafe { ingest::access_trusted(body) };
            let mut mentions = std::mem::take(&mut self.mentions);
            let ev = EventIn::of(rec, &mut mentions).taken_at(take_ns);
            let recipients = self.deliver(&ev);
            self.shared.metrics[self.id].delivery.fanned_out(
                ev.stamp,
                read_ns,
                u64::from(recipients),
            );
            self.mentions = mentions;
        }
    }

    /// Apply a revocation pushed by the registry sidecar, then acknowledge
    /// it (the sidecar measures write-to-applied across all workers).
    pub(super) fn revoke(&mut self, msg: &RevokeMsg) {
        use registry::Revocation as R;
        let close = |code, reason| Close::new(code, reason);
        match msg.revocation {
            R::Uninstalled {
                application_id,
                server_id,
            } => {
                self.fan
                    .revoke_server(AppId(application_id), ServerId(server_id));
                self.api
                    .views
                    .revoke_server(AppId(application_id), ServerId(server_id));
            }
            R::PermissionsChanged {
                application_id,
                server_id,
            } => match &msg.access {
                Some(access) => {
                    self.fan.set_access(AppId(application_id), access);
                    self.api.views.set_access(AppId(application_id), access);
                }
                None => {
                    self.fan
                        .revoke_server(AppId(application_id), ServerId(server_id));
                    self.api
                        .views
                        .revoke_server(AppId(application_id), ServerId(server_id));
                }
            },
            R::TokenReset { application_id } => {
                let c = close(
                    CloseCode::AuthenticationFailed,
                    "authentication failed: the token was reset",
                );
                self.end_sessions(AppId(application_id), None, c);
                self.api.views.forget_app(AppId(application_id));
            }
            R::IntentsChanged { application_id } => {
                // Sessions using a privileged intent that is no longer approved end.
                let withdrawn = intents::PRIVILEGED & !msg.approved_intents;
                if withdrawn != 0 {
                    let c = close(
                        CloseCode::DisallowedIntents,
                        "disallowed intents: a privileged intent was withdrawn",
                    );
                    self.end_sessions(AppId(application_id), Some(withdrawn), c);
                }
            }
        }
        let _ = self
            .shared
            .sidecar
            .try_send(SidecarRequest::RevocationApplied {
                id: msg.id,
                applied_ms: registry::snowflake::unix_ms_now(),
            });
    }

    /// End an application's sessions for good (not resumable), closing
    /// their connections with `close`.
    pub(super) fn end_sessions(&mut self, app: AppId, using: Option<u64>, close: Close) {
        for (sid, conn) in self.fan.sessions_of(app, using) {
            // Unhook first, so the close below does not touch the session
            // (whose slot may be reused once removed).
            if let Some(key) = conn {
                self.detach_conn(key);
            }
            let id = self.fan.get(sid).map(|s| s.identity.session_id);
            self.fan.remove(sid);
            if let (Some(key), Some(id)) = (conn, id) {
                // Counted here: the close below no longer knows the session.
                self.shared
                    .apps
                    .closed(app.0, &id, close.code, self.unix_ms);
                self.begin_close(key, Some(close));
            }
        }
    }
}
