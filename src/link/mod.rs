//! The registry sidecar: one thread per node owns the registry link. Workers
//! ask it for Identify and authenticated REST answers by message; it never
//! sits on the event path (Resume and dispatch never reach it). The REST
//! limits' Redis link is a thread of its own (`counters`, over `resp`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use crate::protocol::identify::token_digest;
use crossbeam_channel::{Receiver, RecvTimeoutError};
use proto::{AppId, ServerId};
use registry::Registry;
use serde_json::json;

use crate::config::RegistryLink;
use crate::delivery::entitlement::guild_access;
use crate::histogram::Histogram;
use crate::protocol::guild::{bot_user, guild_create};
use crate::protocol::intents;
use crate::protocol::{Close, CloseCode};
use crate::worker::app_stats::StartRefusal;
use crate::worker::mail::*;

pub mod cluster;
mod commands;
pub mod counters;
mod enrich;
mod interactions;
mod interned;
mod members;
pub mod recovery;
pub mod resp;
mod resp_tls;
mod rest;

/// Identify buckets remembered before stale ones are pruned.
const MAX_BUCKETS: usize = 65_536;

/// PROTOCOL.md: at most 2500 servers per shard.
const MAX_SERVERS_PER_SHARD: usize = 2500;

pub struct Sidecar {
    pub registry: Box<dyn Registry>,
    pub workers: Arc<[WorkerHandle]>,
    pub gateway_url: String,
    pub cfg: RegistryLink,
    pub stats: Arc<LinkStats>,
    /// Last identify per (application, max_concurrency bucket), Unix ms.
    pub buckets: HashMap<(u64, u32), u64>,
    /// Node-wide admission: tokens left and when they were last topped up.
    pub tokens: f64,
    pub tokens_at: Instant,
    /// When the current brownout began (Unix ms).
    pub brownout_since: Option<u64>,
    /// In a brownout, registry calls before this instant fail at once
    /// (without waiting for a registry that may be frozen); the first one
    /// after it is the probe that ends the brownout or pushes this on.
    pub next_probe: Instant,
    /// The outbox id read up to, and revocations waiting for worker acks:
    /// id -> (written at, acks missing, latest apply time).
    pub last_revocation: u64,
    pub pending: HashMap<u64, (u64, usize, u64)>,
    pub next_poll: Instant,
    /// Where moderation changes are committed as events (set by the node).
    pub chat: Option<crossbeam_channel::Sender<ChatRequest>>,
    /// This process among the nodes sharing the registry (interaction claims).
    pub node_id: String,
    /// The registry rows interactions are completed from (`enrich.rs`).
    enrich: enrich::Enrich,
    /// Bot user objects shared by the sessions that carry them.
    bot_users: interned::Interned,
}

/// What the registry link does, for metrics (shared with the admin port).
#[derive(Default)]
pub struct LinkStats {
    pub brownout: AtomicBool,
    /// Set by POST /fault/registry: every registry call fails (a drill).
    pub fault_down: AtomicBool,
    pub refused_brownout: AtomicU64,
    pub refused_concurrency: AtomicU64,
    pub refused_daily_limit: AtomicU64,
    pub refused_admission: AtomicU64,
    pub lease_batches: AtomicU64,
    pub leases_renewed: AtomicU64,
    pub leases_lost: AtomicU64,
    pub leases_extended_in_brownout: AtomicU64,
    pub revocations: AtomicU64,
    /// Registry calls that failed as unavailable (or timed out).
    pub calls_failed: AtomicU64,
    /// Registry calls not made because a brownout's probe was not yet due.
    pub calls_skipped_brownout: AtomicU64,
    /// Admin requests refused for a missing or wrong bearer token.
    pub admin_refused: AtomicU64,
    pub registry_latency: Histogram,
    pub revocation_latency: Histogram,
}

/// A thread that LISTENs for the PostgreSQL registry's revocation pushes
/// and wakes the sidecar to read them (its own connection and thread, so a
/// wait never blocks an identify; a (re)connection is bounded by `timeout`).
pub fn listen_revocations(
    url: String,
    timeout: Duration,
    sidecar: crossbeam_channel::Sender<SidecarRequest>,
    stop: Arc<AtomicBool>,
) {
    let spawned = std::thread::Builder::new().name("registry-listen".into()).spawn(move || {
        let mut listener = None;
        while !stop.load(Ordering::Relaxed) {
            let l = match listener.as_mut() {
                Some(l) => l,
                None => match registry::PostgresRegistry::listen_revocations(&url, timeout) {
                    Ok(l) => listener.insert(l),
                    Err(e) => {
                        tracing::warn!(error = %e, "revocation LISTEN failed; retrying (polling covers the gap)");
                        std::thread::sleep(Duration::from_secs(1));
                        continue;
                    }
                },
            };
            match l.wait(Duration::from_millis(500)) {
                Ok(Some(_)) => {
                    let _ = sidecar.try_send(SidecarRequest::PollRevocations);
                }
                Ok(None) => {}
                Err(_) => {
                    // Reconnects on the next wait; catch up on what was missed meanwhile.
                    let _ = sidecar.try_send(SidecarRequest::PollRevocations);
                    std::thread::sleep(Duration::from_millis(200));
                }
            }
        }
    });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "could not start the revocation listener");
    }
}

fn now_ms() -> u64 {
    registry::snowflake::unix_ms_now()
}

impl Sidecar {
    pub fn new(
        registry: Box<dyn Registry>,
        workers: Arc<[WorkerHandle]>,
        gateway_url: String,
        cfg: RegistryLink,
        stats: Arc<LinkStats>,
    ) -> Sidecar {
        // Follow revocations from now on; older ones are already in what identifies read.
        let last_revocation = registry.last_revocation_id().unwrap_or(0);
        Sidecar {
            registry,
            workers,
            gateway_url,
            tokens: cfg.admission_per_second as f64,
            cfg,
            stats,
            buckets: HashMap::new(),
            tokens_at: Instant::now(),
            brownout_since: None,
            next_probe: Instant::now(),
            last_revocation,
            pending: HashMap::new(),
            next_poll: Instant::now(),
            chat: None,
            node_id: {
                let mut b = [0u8; 8];
                let _ = getrandom::fill(&mut b);
                b.iter().map(|x| format!("{x:02x}")).collect()
            },
            enrich: Default::default(),
            bot_users: Default::default(),
        }
    }

    pub fn run(mut self, rx: Receiver<SidecarRequest>, stop: Arc<std::sync::atomic::AtomicBool>) {
        loop {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(req) => self.handle(req),
                Err(RecvTimeoutError::Timeout) => {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
            if self.cfg.revocation_poll_ms > 0 && Instant::now() >= self.next_poll {
                self.next_poll =
                    Instant::now() + Duration::from_millis(self.cfg.revocation_poll_ms);
                self.poll_revocations();
            }
        }
    }

    /// Time a registry call; a failure or a slow answer is a brownout.
    ///
    /// The backends bound every call by `timeout_ms` (PostgreSQL: a
    /// client-side deadline that abandons the connection; SQLite: the busy
    /// timeout), so a frozen registry costs one call at most `timeout_ms`.
    /// In a brownout only one call per probe interval (`max(timeout_ms, 1 s)`)
    /// goes to the registry; the others fail at once, so identifies get op 9
    /// and leases are extended without queueing behind a frozen server.
    fn call<T>(
        &mut self,
        f: impl FnOnce(&dyn Registry) -> registry::Result<T>,
    ) -> registry::Result<T> {
        if self.brownout_since.is_some() && Instant::now() < self.next_probe {
            self.stats
                .calls_skipped_brownout
                .fetch_add(1, Ordering::Relaxed);
            return Err(registry::RegistryError::Unavailable(
                "registry brownout: waiting for the next probe".into(),
            ));
        }
        self.call_now(f)
    }

    /// Like [`call`](Self::call), but made even in a brownout before the
    /// probe is due: for writes that would otherwise be lost (a server change
    /// from the event stream). Each costs at most `timeout_ms`.
    fn call_now<T>(
        &mut self,
        f: impl FnOnce(&dyn Registry) -> registry::Result<T>,
    ) -> registry::Result<T> {
        if self.stats.fault_down.load(Ordering::Relaxed) {
            self.brownout(true);
            return Err(registry::RegistryError::Unavailable(
                "registry outage (fault injection)".into(),
            ));
        }
        let t0 = Instant::now();
        let r = f(&*self.registry);
        let took = t0.elapsed();
        self.stats
            .registry_latency
            .record_us(took.as_micros() as u64);
        let slow = took > Duration::from_millis(self.cfg.timeout_ms);
        let failed = matches!(r, Err(registry::RegistryError::Unavailable(_)));
        if failed {
            self.stats.calls_failed.fetch_add(1, Ordering::Relaxed);
        }
        self.brownout(slow || failed);
        if slow || failed {
            self.next_probe = Instant::now() + self.probe_interval();
        }
        r
    }

    fn probe_interval(&self) -> Duration {
        Duration::from_millis(self.cfg.timeout_ms.max(1000))
    }

    fn brownout(&mut self, now_bad: bool) {
        match (now_bad, self.brownout_since) {
            (true, None) => {
                tracing::warn!("registry brownout: existing sessions keep their leases, new identifies are refused");
                self.brownout_since = Some(now_ms());
            }
            (false, Some(_)) => {
                tracing::info!("registry recovered");
                self.brownout_since = None;
            }
            _ => {}
        }
        self.stats
            .brownout
            .store(self.brownout_since.is_some(), Ordering::Relaxed);
    }

    /// Node-wide identify admission: a token bucket refilled per second.
    fn admit(&mut self) -> bool {
        let rate = self.cfg.admission_per_second as f64;
        if rate == 0.0 {
            return true;
        }
        let now = Instant::now();
        self.tokens =
            (self.tokens + now.duration_since(self.tokens_at).as_secs_f64() * rate).min(rate);
        self.tokens_at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    fn reply(&self, worker: usize, msg: ToWorker) {
        if let Some(w) = self.workers.get(worker) {
            match w.deliver(msg) {
                Ok(()) => {}
                Err(crossbeam_channel::TrySendError::Full(_)) => {
                    tracing::warn!(worker, "worker inbox full: sidecar reply dropped");
                }
                Err(crossbeam_channel::TrySendError::Disconnected(_)) => {
                    tracing::warn!(worker, "worker gone: sidecar reply dropped");
                }
            }
        }
    }

    fn handle(&mut self, req: SidecarRequest) {
        match req {
            SidecarRequest::Attribute {
                worker,
                token,
                why,
                detail,
            } => {
                // A token that is no application's (or a registry that did
                // not answer) leaves the refusal unattributed.
                if let Ok(Some(app)) = self.call(|r| r.authenticate(&token)) {
                    self.reply(worker, ToWorker::Attributed((app.id, why, detail)));
                }
            }
            SidecarRequest::Identify {
                worker,
                conn,
                identify,
            } => {
                let result = self.identify(&identify).map(Box::new);
                if let Err(IdentifyRefusal::Close(c, _)) = &result {
                    tracing::debug!(code = c.code, reason = c.reason, "identify refused");
                }
                self.reply(worker, ToWorker::Identified { conn, result });
            }
            SidecarRequest::Rest {
                worker,
                conn,
                app,
                route,
            } => {
                let (status, body) = self.rest(route, app);
                self.reply(worker, ToWorker::RestReply { conn, status, body });
            }
            SidecarRequest::ApiAuth {
                worker,
                digest,
                token,
            } => {
                let view = self.api_auth(&token).map(|v| v.map(Box::new));
                self.reply(worker, ToWorker::ApiAuthed { digest, view });
            }
            SidecarRequest::ApiRefresh { worker, app } => {
                let view = self.api_refresh(app).map(|v| v.map(Box::new));
                self.reply(worker, ToWorker::ApiRefreshed { app, view });
            }
            SidecarRequest::ApiRead {
                worker,
                conn,
                app,
                route,
                target,
            } => {
                let (status, body) = self.api_read(app, &route, target);
                self.reply(worker, ToWorker::RestReply { conn, status, body });
            }
            SidecarRequest::ApiMember(req) => self.api_member(*req),
            SidecarRequest::Interaction(raw) => self.interaction(*raw),
            SidecarRequest::ApiCommands(req) => self.api_commands(*req),
            SidecarRequest::ApiDm {
                worker,
                conn,
                app,
                bot_user_id,
                recipient,
            } => {
                let opened = self.api_dm(bot_user_id, recipient);
                self.reply(worker, ToWorker::DmOpened { conn, app, opened });
            }
            SidecarRequest::RenewLeases { worker, pairs } => {
                let reply = self.renew_leases(pairs);
                self.reply(worker, reply);
            }
            SidecarRequest::PollRevocations => self.poll_revocations(),
            SidecarRequest::RevocationApplied { id, applied_ms } => {
                if let Some(p) = self.pending.get_mut(&id) {
                    p.1 -= 1;
                    p.2 = p.2.max(applied_ms);
                    if p.1 == 0 {
                        let (at, _, applied) = self.pending.remove(&id).expect("present");
                        self.stats
                            .revocation_latency
                            .record_us(applied.saturating_sub(at) * 1000);
                    }
                }
            }
            SidecarRequest::ApplyState {
                server_id,
                change,
                reply,
            } => {
                let _ = reply.send(self.apply_state(server_id, &change));
            }
        }
    }

    fn identify(
        &mut self,
        id: &crate::protocol::identify::Identify,
    ) -> Result<IdentifyOk, IdentifyRefusal> {
        if !self.admit() {
            self.stats.refused_admission.fetch_add(1, Ordering::Relaxed);
            return Err(IdentifyRefusal::InvalidSession(None));
        }
        let stats = self.stats.clone();
        let unavailable = move |e: registry::RegistryError| {
            tracing::debug!(error = %e, "registry error during identify");
            stats.refused_brownout.fetch_add(1, Ordering::Relaxed);
            IdentifyRefusal::InvalidSession(None)
        };
        if self.brownout_since.is_some() {
            // Lease renewals and revocation polls keep probing the registry;
            // identifies would only add load to a struggling one.
            return Err(unavailable(registry::RegistryError::Unavailable(
                "brownout".into(),
            )));
        }
        let token = id.token.clone();
        let app = self
            .call(|r| r.authenticate(&token))
            .map_err(&unavailable)?
            .ok_or(IdentifyRefusal::Close(
                Close::new(
                    CloseCode::AuthenticationFailed,
                    "authentication failed: invalid token",
                ),
                None,
            ))?;
        if id.intents & intents::PRIVILEGED & !app.approved_intents != 0 {
            return Err(IdentifyRefusal::Close(
                Close::new(
                    CloseCode::DisallowedIntents,
                    "disallowed intents: privileged intent not approved for this application",
                ),
                Some((app.id, StartRefusal::DisallowedIntents, id.intents)),
            ));
        }
        let now = now_ms();
        if self.cfg.identify_limits {
            // One identify per max_concurrency bucket per spacing, and the daily budget.
            let bucket = (app.id, id.shard.0 % app.max_concurrency.max(1));
            if let Some(last) = self.buckets.get(&bucket) {
                if now.saturating_sub(*last) < self.cfg.identify_spacing_ms {
                    self.stats
                        .refused_concurrency
                        .fetch_add(1, Ordering::Relaxed);
                    return Err(IdentifyRefusal::InvalidSession(Some((
                        app.id,
                        StartRefusal::Concurrency,
                        id.intents,
                    ))));
                }
            }
            let limit = self
                .call(|r| r.session_start_remaining(app.id, now))
                .map_err(&unavailable)?;
            if limit.remaining == 0 {
                self.stats
                    .refused_daily_limit
                    .fetch_add(1, Ordering::Relaxed);
                return Err(IdentifyRefusal::InvalidSession(Some((
                    app.id,
                    StartRefusal::DailyBudget,
                    id.intents,
                ))));
            }
            if self.buckets.len() >= MAX_BUCKETS {
                // Only buckets inside their spacing matter; forget the rest.
                let spacing = self.cfg.identify_spacing_ms;
                self.buckets
                    .retain(|_, last| now.saturating_sub(*last) < spacing);
            }
            self.buckets.insert(bucket, now);
        }
        let servers = self
            .call(|r| r.servers_for_shard(app.id, id.shard.0, id.shard.1))
            .map_err(&unavailable)?;
        if servers.len() > MAX_SERVERS_PER_SHARD {
            return Err(IdentifyRefusal::Close(
                Close::new(
                    CloseCode::ShardingRequired,
                    "sharding required: more than 2500 servers on this shard",
                ),
                Some((app.id, StartRefusal::ShardingRequired, id.intents)),
            ));
        }
        let mut guilds = Vec::with_capacity(servers.len());
        for server_id in servers {
            let (Some(snap), Some(inst)) = (
                self.call(|r| r.server_snapshot(server_id))
                    .map_err(&unavailable)?,
                self.call(|r| r.installation(app.id, server_id))
                    .map_err(&unavailable)?,
            ) else {
                continue; // uninstalled between the two reads
            };
            let mut access = guild_access(&snap, &inst, app.bot_user_id);
            access.lease_until_ms = now + self.cfg.lease_ttl_ms;
            // Which bot each managed role belongs to (its tags name it).
            let managed: Vec<(u64, u64)> = self
                .call(|r| r.installations_in_server(server_id))
                .map_err(&unavailable)?
                .iter()
                .filter_map(|i| i.managed_role_id.map(|r| (r, i.application_id)))
                .collect();
            let d = serde_json::to_vec(&guild_create(&snap, &inst, &app, &managed)).expect("json");
            guilds.push((access, d));
        }
        guilds.sort_by_key(|g| g.0.id);
        self.call(|r| r.record_session_start(app.id, now))
            .map_err(&unavailable)?;
        Ok(IdentifyOk {
            application_id: AppId(app.id),
            application_flags: app.flags,
            bot_user_id: app.bot_user_id,
            user_json: self.bot_users.get(bot_user(&app).to_string()),
            intents: id.intents,
            shard: id.shard,
            token_digest: token_digest(&id.token),
            guilds,
        })
    }

    /// Write a server change to the registry, then recompute what every bot
    /// installed there may see.
    fn apply_state(
        &mut self,
        server_id: u64,
        change: &registry::StateChange,
    ) -> Option<AccessUpdate> {
        // Never skipped in a brownout: a change the stream reported once is
        // lost if it is not written now.
        if let Err(e) = self.call_now(|r| r.apply_state(change)) {
            tracing::warn!(server_id, error = %e, "server change from the event stream not applied");
        }
        let snap = self.call(|r| r.server_snapshot(server_id)).ok()??;
        let installs = self.call(|r| r.installations_in_server(server_id)).ok()?;
        let mut by_app = Vec::with_capacity(installs.len());
        for inst in installs {
            // Applications created here have bot user id == application id.
            let bot_user_id = self
                .call(|r| r.application(inst.application_id))
                .ok()
                .flatten()
                .map(|a| a.bot_user_id);
            if let Some(bot) = bot_user_id {
                by_app.push((AppId(inst.application_id), guild_access(&snap, &inst, bot)));
            }
        }
        Some(AccessUpdate {
            server_id: ServerId(server_id),
            by_app,
        })
    }

    /// One registry round trip for a worker's batch of leases. In brownout
    /// the leases are extended instead, up to `brownout_max_ms` after it began.
    fn renew_leases(&mut self, pairs: Vec<(AppId, ServerId)>) -> ToWorker {
        self.stats.lease_batches.fetch_add(1, Ordering::Relaxed);
        let now = now_ms();
        let raw: Vec<(u64, u64)> = pairs.iter().map(|(a, s)| (a.get(), s.get())).collect();
        match self.call(|r| r.installed(&raw)) {
            Ok(ok) => {
                let renewed: Vec<(AppId, ServerId)> = pairs
                    .iter()
                    .zip(ok)
                    .filter(|(_, ok)| *ok)
                    .map(|(p, _)| *p)
                    .collect();
                self.stats
                    .leases_renewed
                    .fetch_add(renewed.len() as u64, Ordering::Relaxed);
                self.stats
                    .leases_lost
                    .fetch_add((pairs.len() - renewed.len()) as u64, Ordering::Relaxed);
                ToWorker::Leases {
                    pairs: renewed,
                    until_ms: now + self.cfg.lease_ttl_ms,
                }
            }
            Err(_) => {
                let since = self.brownout_since.unwrap_or(now);
                let until = (now + self.cfg.lease_ttl_ms).min(since + self.cfg.brownout_max_ms);
                self.stats
                    .leases_extended_in_brownout
                    .fetch_add(pairs.len() as u64, Ordering::Relaxed);
                ToWorker::Leases {
                    pairs,
                    until_ms: until,
                }
            }
        }
    }

    /// Read new rows of the revocation outbox and push them to every worker.
    fn poll_revocations(&mut self) {
        let after = self.last_revocation;
        let Ok(batch) = self.call(|r| r.revocations_since(after, 256)) else {
            return;
        };
        for rec in batch {
            self.last_revocation = rec.id;
            let (app, server) = (rec.revocation.application_id(), rec.revocation.server_id());
            let access = match rec.revocation {
                registry::Revocation::PermissionsChanged { .. } => {
                    let snap = self.call(|r| r.server_snapshot(server)).ok().flatten();
                    let inst = self.call(|r| r.installation(app, server)).ok().flatten();
                    snap.zip(inst).map(|(s, i)| guild_access(&s, &i, app))
                }
                _ => None,
            };
            let approved_intents = match rec.revocation {
                registry::Revocation::IntentsChanged { .. } => self
                    .call(|r| r.application(app))
                    .ok()
                    .flatten()
                    .map(|a| a.approved_intents)
                    .unwrap_or(0),
                _ => 0,
            };
            self.stats.revocations.fetch_add(1, Ordering::Relaxed);
            let msg = Arc::new(RevokeMsg {
                id: rec.id,
                revocation: rec.revocation,
                access,
                approved_intents,
            });
            self.pending
                .insert(rec.id, (rec.at_ms, self.workers.len(), 0));
            for w in self.workers.iter() {
                // A revocation must not be lost to a full inbox: wait for room.
                let mut m = ToWorker::Revoke(msg.clone());
                while let Err(back) = w.try_send(m) {
                    m = back;
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
    }
}
