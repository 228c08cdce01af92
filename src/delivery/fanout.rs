//! Where an event is appended: one worker's event arena, its sessions (each
//! an identity plus a ring of references into the arena) and the index from
//! server to sessions. No sockets here: the worker asks, this decides.
//!
//! An event is copied into the arena at most once per variant (full, and
//! MESSAGE_CONTENT-redacted) and only if this worker has a recipient; each
//! recipient's ring gets a 24-byte reference. The ring is the send queue and
//! the resume buffer, so a session that is disconnected keeps receiving into
//! it and a Resume replays from it.

use std::collections::HashMap;
use std::sync::Arc;

/// Sessions leaving and arriving (hand-offs), and rebuilt together (crash
/// recovery, `handoff::Rebuilding`, named by its path: `handoff` uses this
/// file's `FanOut`, so a re-export here would be an import circle).
pub mod handoff;

use ringbuf::{Arena, ArenaConfig, Entry, PushError, RecordRef, RingConfig, RingSlab, SessionRing};
use shards::SessionId;

use crate::delivery::entitlement::{self, Requirement, Variant};
use crate::delivery::interest::Interest;
pub use crate::delivery::latency::Stamp;
use crate::delivery::record;
use crate::delivery::resume::ResumeRefusal;
use crate::delivery::ConnKey;
use crate::protocol::session::Identity;
use proto::{AppId, ChannelId, ServerId, SessionIdx};

/// One gateway session on this worker: who it is, what it was sent and
/// what it still has to send, and the connection it is on (if any).
pub struct SessionSlot {
    pub identity: Box<Identity>,
    pub ring: SessionRing,
    pub conn: Option<ConnKey>,
    /// When a detached session stops being resumable (ms).
    pub expires_ms: u64,
    /// An event could not be kept for this session (its ring was full while
    /// it was away): a Resume would leave a gap, so it is refused.
    pub lost: bool,
    /// Crash recovery: its summary's version, `recovery::TAINTED` once it got a dispatch not from the topic.
    pub recovery: u32,
    /// For the portal's session table (set by the worker, Unix ms; 0:
    /// unknown): when it began on this node (its Identify, or its arrival
    /// by hand-off or recovery), when its connection attached, and how
    /// many Resumes it has had here.
    pub since_ms: u64,
    pub attached_ms: u64,
    pub resumes: u32,
    /// The highest seq whose delivery was timed (delivery/latency.rs): a
    /// frame sent again after a Resume is not timed twice.
    pub timed_seq: u64,
}

/// An event as the fan-out sees it (borrowed from an ingest record).
pub struct EventIn<'a> {
    pub t: &'a str,
    pub server_id: ServerId,
    pub channel_id: ChannelId,
    pub intent: u64,
    pub permissions: u64,
    pub has_content: bool,
    /// Only the bots named in `mentions` may get it (an INTERACTION_CREATE).
    pub addressed: bool,
    pub mentions: &'a [u64],
    pub d: &'a [u8],
    /// Its commit time, and when this worker took it from its inbox (0:
    /// a replay, not timed; delivery/latency.rs).
    pub stamp: Stamp,
}

impl<'a> EventIn<'a> {
    /// The event of an ingest record. Its mentions are copied into
    /// `mentions` (cleared first), at most its capacity, so the event path
    /// never reallocates and live delivery and a hand-off's replay see the
    /// same event.
    pub fn of(rec: &'a ingest::ArchivedRecord, mentions: &'a mut Vec<u64>) -> EventIn<'a> {
        mentions.clear();
        let cap = mentions.capacity().max(1);
        mentions.extend(rec.mentions().iter().take(cap).map(|m| m.to_native()));
        let mentions: &'a Vec<u64> = mentions;
        EventIn {
            t: rec.event_type(),
            server_id: ServerId(rec.server_id()),
            channel_id: ChannelId(rec.channel_id()),
            intent: rec.intent(),
            permissions: rec.permissions(),
            has_content: rec.has_content(),
            addressed: rec.is_addressed(),
            mentions,
            d: rec.d(),
            stamp: Stamp {
                commit_ns: rec.commit_unix_ns(),
                take_ns: 0,
            },
        }
    }

    /// The same event, taken from the inbox at `take_ns` (Unix ns): timed.
    pub fn taken_at(mut self, take_ns: u64) -> Self {
        self.stamp.take_ns = take_ns;
        self
    }
}

/// What `deliver` did, for metrics.
#[derive(Default, Clone, Copy, Debug)]
pub struct Delivered {
    /// Times ring storage ran out and resume history was trimmed to make room.
    pub history_reclaims: u32,
    pub recipients: u32,
    pub redacted: u32,
    pub appended_records: u32,
}

#[derive(Clone, Debug)]
pub struct FanOutConfig {
    pub arena_bytes: u64,
    pub ring_chunks: u32,
    pub ring: RingConfig,
    pub resume_window_ms: u64,
}

pub struct FanOut {
    pub arena: Arena,
    pub slab: RingSlab,
    cfg: FanOutConfig,
    sessions: Vec<Option<SessionSlot>>,
    free: Vec<u32>,
    by_id: HashMap<SessionId, u32>,
    /// Sessions (attached or not) per server they receive events for.
    index: HashMap<ServerId, Vec<u32>>,
    /// Sessions per bot user, for direct messages.
    by_bot: HashMap<u64, Vec<u32>>,
    /// The redacted variant of the event being delivered.
    redacted: Vec<u8>,
    /// `index` and `by_bot` as counters other threads read: whether this
    /// worker wants a server's events (`interest.rs`).
    interest: Arc<Interest>,
}

/// Ring storage ran out: drop the older half of every session's *sent*
/// history (the resume window shrinks under memory pressure; what is still
/// unsent is never touched). Amortised: it frees many chunks at once.
fn reclaim_history(sessions: &mut [Option<SessionSlot>], slab: &mut RingSlab) {
    for s in sessions.iter_mut().flatten() {
        let sent = u64::from(s.ring.len_held() - s.ring.len_unsent());
        if sent > 0 {
            let first = s.ring.first_held_seq();
            s.ring.ack(slab, first + sent.div_ceil(2) - 1);
        }
    }
}

fn unlist<K: std::hash::Hash + Eq>(map: &mut HashMap<K, Vec<u32>>, key: K, idx: u32) {
    if let Some(v) = map.get_mut(&key) {
        if let Some(p) = v.iter().position(|i| *i == idx) {
            v.swap_remove(p);
        }
        if v.is_empty() {
            map.remove(&key);
        }
    }
}

impl FanOut {
    pub fn new(cfg: FanOutConfig, max_sessions: usize) -> Result<FanOut, String> {
        let arena = Arena::new(ArenaConfig::new(cfg.arena_bytes))
            .map_err(|e| format!("event arena: {e}"))?;
        Ok(FanOut {
            arena,
            slab: RingSlab::new(cfg.ring_chunks),
            sessions: Vec::with_capacity(max_sessions),
            free: Vec::with_capacity(max_sessions),
            by_id: HashMap::with_capacity(max_sessions),
            index: HashMap::new(),
            by_bot: HashMap::new(),
            redacted: Vec::with_capacity(64 * 1024),
            interest: Arc::default(),
            cfg,
        })
    }

    /// Which servers this fan-out has sessions in, for the event sources.
    pub fn interest(&self) -> Arc<Interest> {
        self.interest.clone()
    }

    pub fn get(&self, idx: SessionIdx) -> Option<&SessionSlot> {
        self.sessions.get(idx.index())?.as_ref()
    }

    pub fn get_mut(&mut self, idx: SessionIdx) -> Option<&mut SessionSlot> {
        self.sessions.get_mut(idx.index())?.as_mut()
    }

    pub fn lookup(&self, id: &SessionId) -> Option<SessionIdx> {
        self.by_id.get(id).copied().map(SessionIdx)
    }

    /// A new session after Identify; it is indexed under its servers.
    pub fn create(&mut self, identity: Box<Identity>, conn: ConnKey) -> SessionIdx {
        self.insert(SessionSlot {
            ring: SessionRing::new(&self.cfg.ring, 0),
            identity,
            conn: Some(conn),
            expires_ms: u64::MAX,
            lost: false,
            recovery: 0,
            since_ms: 0,
            attached_ms: 0,
            resumes: 0,
            timed_seq: 0,
        })
    }

    /// Sessions held (attached or not).
    pub fn live(&self) -> usize {
        self.by_id.len()
    }

    fn insert(&mut self, slot: SessionSlot) -> SessionIdx {
        let idx = match self.free.pop() {
            Some(i) => {
                self.sessions[i as usize] = Some(slot);
                i
            }
            None => {
                self.sessions.push(Some(slot));
                (self.sessions.len() - 1) as u32
            }
        };
        let s = self.sessions[idx as usize].as_ref().expect("just set");
        self.by_id.insert(s.identity.session_id, idx);
        for g in &s.identity.guilds {
            self.index.entry(g.id).or_default().push(idx);
            self.interest.add(g.id);
        }
        self.interest.add(ServerId::NONE);
        self.by_bot
            .entry(s.identity.bot_user_id)
            .or_default()
            .push(idx);
        SessionIdx(idx)
    }

    /// End a session for good: its ring's chunks go back to the slab.
    pub fn remove(&mut self, idx: SessionIdx) {
        let idx = idx.0;
        let Some(mut s) = self.sessions.get_mut(idx as usize).and_then(Option::take) else {
            return;
        };
        s.ring.clear(&mut self.slab);
        self.by_id.remove(&s.identity.session_id);
        unlist(&mut self.by_bot, s.identity.bot_user_id, idx);
        for g in &s.identity.guilds {
            unlist(&mut self.index, g.id, idx);
            self.interest.remove(g.id);
        }
        self.interest.remove(ServerId::NONE);
        self.free.push(idx);
    }

    /// `n` more entries of a session's ring went out on its connection;
    /// returns how many are still unsent.
    pub fn mark_sent(&mut self, idx: SessionIdx, n: u32) -> u32 {
        match self.sessions.get_mut(idx.index()).and_then(Option::as_mut) {
            Some(s) => {
                s.ring.mark_sent(&self.slab, n);
                s.ring.len_unsent()
            }
            None => 0,
        }
    }

    /// The client has everything up to `seq` (from its heartbeat).
    pub fn ack(&mut self, idx: SessionIdx, seq: u64) {
        if let Some(s) = self.sessions.get_mut(idx.index()).and_then(Option::as_mut) {
            s.ring.ack(&mut self.slab, seq);
        }
    }

    /// A server's permissions changed: give every session of an affected
    /// application its recomputed access (later events are decided on it).
    pub fn update_access(
        &mut self,
        server_id: ServerId,
        by_app: &[(AppId, crate::protocol::session::GuildAccess)],
    ) {
        let Some(list) = self.index.get(&server_id) else {
            return;
        };
        for &idx in list {
            let Some(s) = self.sessions[idx as usize].as_mut() else {
                continue;
            };
            let app = s.identity.application_id;
            let Ok(i) = by_app.binary_search_by_key(&app, |(a, _)| *a) else {
                continue;
            };
            if let Ok(g) = s.identity.guilds.binary_search_by_key(&server_id, |g| g.id) {
                let lease = s.identity.guilds[g].lease_until_ms;
                s.identity.guilds[g] = by_app[i].1.clone();
                s.identity.guilds[g].lease_until_ms = lease;
            }
        }
    }

    /// Every (application, server) pair this worker's sessions hold a lease
    /// for, sorted and without duplicates: one lease renewal batch.
    pub fn lease_pairs(&self, out: &mut Vec<(AppId, ServerId)>) {
        out.clear();
        for s in self.sessions.iter().flatten() {
            let app = s.identity.application_id;
            out.extend(s.identity.guilds.iter().map(|g| (app, g.id)));
        }
        out.sort_unstable();
        out.dedup();
    }

    /// (held, lapsed): the sessions' (application, server) leases still
    /// valid at `now_ms` (unix ms) and those past their lease (for metrics).
    pub fn lease_counts(&self, now_ms: u64) -> (u64, u64) {
        let (mut held, mut lapsed) = (0, 0);
        for s in self.sessions.iter().flatten() {
            for g in &s.identity.guilds {
                if g.lease_until_ms >= now_ms {
                    held += 1;
                } else {
                    lapsed += 1;
                }
            }
        }
        (held, lapsed)
    }

    /// Extend the leases of the pairs the registry confirmed (sorted).
    pub fn renew_leases(&mut self, pairs: &[(AppId, ServerId)], until_ms: u64) {
        for s in self.sessions.iter_mut().flatten() {
            let app = s.identity.application_id;
            for g in &mut s.identity.guilds {
                if pairs.binary_search(&(app, g.id)).is_ok() {
                    g.lease_until_ms = g.lease_until_ms.max(until_ms);
                }
            }
        }
    }

    /// An application lost a server: its sessions stop receiving that
    /// server's events at once. Returns how many sessions were affected.
    pub fn revoke_server(&mut self, app: AppId, server_id: ServerId) -> usize {
        let mut n = 0;
        for (i, slot) in self.sessions.iter_mut().enumerate() {
            let Some(s) = slot.as_mut() else { continue };
            if s.identity.application_id != app {
                continue;
            }
            if let Ok(g) = s.identity.guilds.binary_search_by_key(&server_id, |g| g.id) {
                s.identity.guilds.remove(g);
                unlist(&mut self.index, server_id, i as u32);
                self.interest.remove(server_id);
                n += 1;
            }
        }
        n
    }

    /// An application's grant in a server changed: new channel permissions
    /// (the lease carries over).
    pub fn set_access(
        &mut self,
        app: AppId,
        access: &crate::protocol::session::GuildAccess,
    ) -> usize {
        let mut n = 0;
        for s in self.sessions.iter_mut().flatten() {
            if s.identity.application_id != app {
                continue;
            }
            if let Ok(g) = s.identity.guilds.binary_search_by_key(&access.id, |g| g.id) {
                let lease = s.identity.guilds[g].lease_until_ms;
                s.identity.guilds[g] = access.clone();
                s.identity.guilds[g].lease_until_ms = lease;
                n += 1;
            }
        }
        n
    }

    /// Sessions of an application, optionally only those using any of
    /// `intents` (for a token reset: all; for withdrawn intents: the users).
    pub fn sessions_of(
        &self,
        app: AppId,
        intents: Option<u64>,
    ) -> Vec<(SessionIdx, Option<ConnKey>)> {
        self.sessions
            .iter()
            .enumerate()
            .filter_map(|(i, s)| {
                let s = s.as_ref()?;
                let uses = intents
                    .map(|bits| s.identity.intents & bits != 0)
                    .unwrap_or(true);
                (s.identity.application_id == app && uses).then_some((SessionIdx(i as u32), s.conn))
            })
            .collect()
    }

    /// The connection went away; the session stays resumable for the window.
    pub fn detach(&mut self, idx: SessionIdx, now_ms: u64) {
        let window = self.cfg.resume_window_ms;
        if let Some(s) = self.get_mut(idx) {
            s.conn = None;
            s.expires_ms = now_ms.saturating_add(window);
        }
    }

    /// Queue a dispatch the node itself produces (READY, GUILD_CREATE,
    /// RESUMED, ...): its `d` goes into the arena like an event's.
    pub fn dispatch(
        &mut self,
        idx: SessionIdx,
        t: &str,
        d: &[u8],
        now_ms: u64,
    ) -> Result<u64, PushError> {
        let record = self.append(t, d).map_err(|_| PushError::Full)?;
        let s = self
            .sessions
            .get_mut(idx.index())
            .and_then(Option::as_mut)
            .ok_or(PushError::Full)?;
        let seq = s.ring.next_seq();
        // The node's own dispatches may pass the unsent bound (RESUMED after
        // a full replay); `max_held` still bounds them.
        s.ring.push_over_bound(
            &mut self.slab,
            Entry {
                record,
                seq,
                at_ms: now_ms,
            },
        )?;
        Ok(seq)
    }

    fn append(&mut self, t: &str, d: &[u8]) -> Result<RecordRef, ringbuf::ArenaError> {
        record::append(&mut self.arena, Stamp::NONE, t, d)
    }

    /// Fan one event out to this worker's entitled sessions. `queued` is
    /// called with the connection of every attached recipient (to schedule a
    /// send), `overflow` with every attached session whose ring is full.
    pub fn deliver(
        &mut self,
        ev: &EventIn,
        now_ms: u64,
        unix_ms: u64,
        mut queued: impl FnMut(ConnKey),
        mut overflow: impl FnMut(SessionIdx, ConnKey),
    ) -> Delivered {
        let mut out = Delivered::default();
        let req = Requirement {
            server_id: ev.server_id,
            channel_id: ev.channel_id,
            intent: ev.intent,
            permissions: ev.permissions,
            has_content: ev.has_content,
            addressed: ev.addressed,
            mentions: ev.mentions,
            now_ms: unix_ms,
        };
        let (mut full, mut redacted): (Option<RecordRef>, Option<RecordRef>) = (None, None);
        // The body below runs once per candidate recipient; a macro keeps it
        // in one place for both ways of finding candidates.
        macro_rules! offer {
            ($idx:expr) => {{
                let idx: u32 = $idx;
                let Some(s) = self.sessions[idx as usize].as_mut() else {
                    continue;
                };
                if s.lost {
                    continue; // nothing more can be kept for a session with a hole
                }
                let Some(variant) = entitlement::decide(&s.identity, &req) else {
                    continue;
                };
                // Copy into the arena on the first recipient of each variant only.
                let record = match variant {
                    Variant::Full => match full {
                        Some(r) => r,
                        None => {
                            match record::append(&mut self.arena, ev.stamp, ev.t, ev.d) {
                                Ok(r) => {
                                    out.appended_records += 1;
                                    *full.insert(r)
                                }
                                Err(_) => return out, // larger than any record can be: counted by the arena
                            }
                        }
                    },
                    Variant::Redacted => match redacted {
                        Some(r) => r,
                        None => {
                            self.redacted.clear();
                            if ingest::redact_message_content(ev.d, &mut self.redacted).is_err() {
                                // Unparseable message: never leak content to a bot without the intent.
                                continue;
                            }
                            match record::append(&mut self.arena, ev.stamp, ev.t, &self.redacted) {
                                Ok(r) => {
                                    out.appended_records += 1;
                                    *redacted.insert(r)
                                }
                                Err(_) => continue,
                            }
                        }
                    },
                };
                if variant == Variant::Redacted {
                    out.redacted += 1;
                }
                let entry = Entry {
                    record,
                    seq: s.ring.next_seq(),
                    at_ms: now_ms,
                };
                let mut pushed = s.ring.push(&mut self.slab, entry);
                if pushed == Err(PushError::NoChunks) {
                    // The worker's ring storage is full of resume history:
                    // trim every session's sent history by half, then retry.
                    out.history_reclaims += 1;
                    reclaim_history(&mut self.sessions, &mut self.slab);
                    let s = self.sessions[idx as usize].as_mut().expect("a live recipient");
                    pushed = s.ring.push(&mut self.slab, entry);
                }
                let s = self.sessions[idx as usize].as_mut().expect("a live recipient");
                match pushed {
                    Ok(()) => {
                        out.recipients += 1;
                        if let Some(c) = s.conn {
                            queued(c);
                        }
                    }
                    Err(_) => {
                        match s.conn {
                            Some(c) => {
                                // The event that finds the bound is still kept, so
                                // closing the session here loses nothing: a Resume
                                // replays it.
                                if s.ring.push_over_bound(&mut self.slab, entry).is_err() {
                                    s.lost = true;
                                }
                                overflow(SessionIdx(idx), c)
                            }
                            None => s.lost = true,
                        }
                    }
                }
            }};
        }
        if ev.server_id == ServerId::NONE {
            // A direct message: the producer names the recipient bots in `mentions`.
            for &bot in ev.mentions {
                if let Some(list) = self.by_bot.get(&bot) {
                    for &idx in list {
                        offer!(idx);
                    }
                }
            }
        } else if let Some(list) = self.index.get(&ev.server_id) {
            for &idx in list {
                offer!(idx);
            }
        }
        out
    }

    /// Prepare a Resume from the client's `seq`: everything after it is
    /// still held (and still in the arena), so moving the send cursor back
    /// replays it. Err: answer op 9.
    pub fn rewind_for_resume(&mut self, idx: SessionIdx, seq: u64) -> Result<(), ResumeRefusal> {
        let s = self
            .sessions
            .get_mut(idx.index())
            .and_then(Option::as_mut)
            .ok_or(ResumeRefusal::UnknownSession)?;
        if s.lost {
            return Err(ResumeRefusal::EventsLost);
        }
        s.ring
            .check_resume(seq)
            .map_err(|_| ResumeRefusal::SeqNotHeld)?;
        if let Some(first) = s.ring.get(&self.slab, seq + 1) {
            // Arena positions grow with seq: if the first is intact, all are.
            if !self.arena.contains(first.record) {
                return Err(ResumeRefusal::Overwritten);
            }
        }
        s.ring
            .rewind_for_resume(&mut self.slab, seq)
            .map_err(|_| ResumeRefusal::SeqNotHeld)
    }

    /// How long a session has been away (ms, by the clock of `detach`): 0
    /// while it is attached.
    pub fn away_ms(&self, idx: SessionIdx, now_ms: u64) -> u64 {
        match self.get(idx) {
            Some(s) if s.conn.is_none() && s.expires_ms != u64::MAX => {
                now_ms.saturating_sub(s.expires_ms.saturating_sub(self.cfg.resume_window_ms))
            }
            _ => 0,
        }
    }

    /// Periodic upkeep: forget sent history older than the window, end
    /// detached sessions whose window passed (each given to `expired` with
    /// its id's random bits and when it was detached). Returns (ended,
    /// degraded).
    pub fn tick(&mut self, now_ms: u64, mut expired: impl FnMut(u128, u64)) -> (usize, usize) {
        let window = self.cfg.resume_window_ms;
        let mut gone = 0;
        let mut degraded = 0;
        for i in 0..self.sessions.len() {
            let Some(s) = self.sessions[i].as_mut() else {
                continue;
            };
            s.ring.expire(&mut self.slab, now_ms, window);
            if s.conn.is_some() && s.ring.fill_ratio() >= 0.8 {
                degraded += 1;
            }
            if s.conn.is_none() && now_ms > s.expires_ms {
                expired(
                    s.identity.session_id.random_bits(),
                    s.expires_ms.saturating_sub(window),
                );
                self.remove(SessionIdx(i as u32));
                gone += 1;
            }
        }
        (gone, degraded)
    }

    /// Every session as (application, degraded: ring at 80 %, attached,
    /// last seq, its shard), for the per-application gauges (`worker::app_stats`).
    pub fn each_session(&self, f: &mut dyn FnMut(u64, bool, bool, u64, [u32; 2])) {
        for s in self.sessions.iter().flatten() {
            let on = s.conn.is_some();
            let degraded = on && s.ring.fill_ratio() >= 0.8;
            let id = &s.identity;
            f(
                id.application_id.0,
                degraded,
                on,
                s.ring.last_seq(),
                id.shard,
            );
        }
    }

    /// Every session held, attached or not.
    pub fn slots(&self) -> impl Iterator<Item = &SessionSlot> {
        self.sessions.iter().flatten()
    }

    /// Sessions currently detached (resumable).
    pub fn detached(&self) -> usize {
        self.sessions
            .iter()
            .flatten()
            .filter(|s| s.conn.is_none())
            .count()
    }
}

#[cfg(test)]
mod tests;
