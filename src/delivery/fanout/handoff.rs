//! A session leaving this worker for another node (`export`), and one
//! arriving (`import`, then `deliver_to` for the records the holder had not
//! taken yet). docs/cluster.md has the rule that lines the two nodes'
//! streams up; this file only moves a ring's contents.

use ringbuf::{Entry, SessionRing};

use super::{unlist, FanOut, SessionSlot};
use crate::delivery::entitlement::{self, Requirement, Variant};
use crate::delivery::fanout::EventIn;
use crate::delivery::moved::{Moved, Take};
use crate::delivery::record;
use crate::delivery::resume::ResumeRefusal;
use crate::protocol::session::GuildAccess;
use proto::SessionIdx;
use proto::{AppId, ServerId};

impl FanOut {
    /// The events after `take.seq` of session `idx`, as (t, d), if a Resume
    /// from there would be served here and the taker can hold them. The
    /// session is not touched.
    pub fn export(
        &self,
        idx: SessionIdx,
        take: &Take,
    ) -> Result<Vec<(String, Vec<u8>)>, ResumeRefusal> {
        let s = self.get(idx).ok_or(ResumeRefusal::UnknownSession)?;
        if s.lost {
            return Err(ResumeRefusal::EventsLost);
        }
        s.ring
            .check_resume(take.seq)
            .map_err(|_| ResumeRefusal::SeqNotHeld)?;
        let n = s.ring.last_seq() - take.seq;
        if n > u64::from(take.max_entries) {
            return Err(ResumeRefusal::NoRoom);
        }
        let mut out = Vec::with_capacity(n as usize);
        let mut bytes = 0u64;
        for seq in take.seq + 1..=s.ring.last_seq() {
            let e = s
                .ring
                .get(&self.slab, seq)
                .ok_or(ResumeRefusal::SeqNotHeld)?;
            let rec = self.arena.get(e.record).ok_or(ResumeRefusal::Overwritten)?;
            let (t, d) = record::parts(rec);
            bytes += d.len() as u64;
            if bytes > take.max_bytes {
                return Err(ResumeRefusal::NoRoom);
            }
            out.push((t.to_owned(), d.to_vec()));
        }
        Ok(out)
    }

    /// A session arriving from another node, detached: its ring continues
    /// at `m.seq` and holds `m.events` as unsent (the replay). On error
    /// nothing is left behind.
    pub fn import(
        &mut self,
        m: &Moved,
        now_ms: u64,
        window_ms: u64,
    ) -> Result<SessionIdx, ResumeRefusal> {
        if self.by_id.contains_key(&m.identity.session_id) || m.seq >= u64::MAX / 4 {
            return Err(ResumeRefusal::UnknownSession);
        }
        let idx = self.insert(SessionSlot {
            ring: SessionRing::new(&self.cfg.ring, m.seq),
            identity: Box::new(m.identity.clone()),
            conn: None,
            expires_ms: now_ms.saturating_add(window_ms),
            lost: false,
            recovery: 0,
        });
        for (t, d) in &m.events {
            let pushed = record::append(&mut self.arena, t, d)
                .map_err(|_| ResumeRefusal::NoRoom)
                .and_then(|record| {
                    let s = self.sessions[idx.index()].as_mut().expect("just inserted");
                    let entry = Entry {
                        record,
                        seq: s.ring.next_seq(),
                        at_ms: now_ms,
                    };
                    s.ring
                        .push_over_bound(&mut self.slab, entry)
                        .map_err(|_| ResumeRefusal::NoRoom)
                });
            if let Err(why) = pushed {
                self.remove(idx);
                return Err(why);
            }
        }
        // The replay must still be whole in the arena (a small arena could
        // have wrapped over its own start while copying it in).
        let s = self.get(idx).expect("just inserted");
        if let Some(first) = s.ring.get(&self.slab, m.seq + 1) {
            if !self.arena.contains(first.record) {
                self.remove(idx);
                return Err(ResumeRefusal::Overwritten);
            }
        }
        Ok(idx)
    }

    /// Offer one event to session `idx` only (the records a moved session
    /// must still get before it joins this worker's stream). False if it
    /// could not be kept (the session then has a hole: `lost`).
    pub fn deliver_to(&mut self, idx: SessionIdx, ev: &EventIn, now_ms: u64, unix_ms: u64) -> bool {
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
        let Some(s) = self.get(idx) else { return false };
        let Some(variant) = entitlement::decide(&s.identity, &req) else {
            return true;
        };
        let appended = match variant {
            Variant::Full => record::append(&mut self.arena, ev.t, ev.d).ok(),
            Variant::Redacted => {
                self.redacted.clear();
                match ingest::redact_message_content(ev.d, &mut self.redacted) {
                    Ok(_) => record::append(&mut self.arena, ev.t, &self.redacted).ok(),
                    Err(_) => return true, // never leak content; nothing to keep
                }
            }
        };
        let s = self.sessions[idx.index()].as_mut().expect("checked above");
        let kept = appended.is_some_and(|record| {
            let entry = Entry {
                record,
                seq: s.ring.next_seq(),
                at_ms: now_ms,
            };
            s.ring.push_over_bound(&mut self.slab, entry).is_ok()
        });
        if !kept {
            s.lost = true;
        }
        kept
    }

    /// A server's recomputed access (after a server change), for session
    /// `idx` only (the lease carries over).
    pub fn update_access_of(
        &mut self,
        idx: SessionIdx,
        server_id: ServerId,
        by_app: &[(AppId, GuildAccess)],
    ) {
        let Some(s) = self.get_mut(idx) else { return };
        let Ok(i) = by_app.binary_search_by_key(&s.identity.application_id, |(a, _)| *a) else {
            return;
        };
        if let Ok(g) = s.identity.guilds.binary_search_by_key(&server_id, |g| g.id) {
            let lease = s.identity.guilds[g].lease_until_ms;
            s.identity.guilds[g] = by_app[i].1.clone();
            s.identity.guilds[g].lease_until_ms = lease;
        }
    }

    /// A changed grant in one server, for session `idx` only.
    pub fn set_access_of(&mut self, idx: SessionIdx, access: &GuildAccess) {
        let Some(s) = self.get_mut(idx) else { return };
        if let Ok(g) = s.identity.guilds.binary_search_by_key(&access.id, |g| g.id) {
            let lease = s.identity.guilds[g].lease_until_ms;
            s.identity.guilds[g] = access.clone();
            s.identity.guilds[g].lease_until_ms = lease;
        }
    }

    /// Session `idx` loses a server (its application was uninstalled).
    pub fn revoke_server_of(&mut self, idx: SessionIdx, server_id: ServerId) {
        let Some(s) = self.sessions.get_mut(idx.index()).and_then(Option::as_mut) else {
            return;
        };
        if let Ok(g) = s.identity.guilds.binary_search_by_key(&server_id, |g| g.id) {
            s.identity.guilds.remove(g);
            unlist(&mut self.index, server_id, idx.0);
        }
    }

    /// Every session as (id, last seq, recovery version, lost, the earliest
    /// lease of its servers), for a checkpoint (no allocation).
    pub fn each_for_checkpoint(&self, f: &mut dyn FnMut(&shards::SessionId, u64, u32, bool, u64)) {
        for s in self.sessions.iter().flatten() {
            let lease = s.identity.guilds.iter().map(|g| g.lease_until_ms).min();
            f(
                &s.identity.session_id,
                s.ring.last_seq(),
                s.recovery,
                s.lost,
                lease.unwrap_or(u64::MAX),
            );
        }
    }

    /// The sessions of `app` (any), or receiving `server`'s events.
    pub fn sessions_touching(
        &self,
        app: Option<AppId>,
        server: Option<ServerId>,
    ) -> Vec<SessionIdx> {
        let mut out: Vec<SessionIdx> = match server {
            Some(id) => self
                .index
                .get(&id)
                .map_or_else(Vec::new, |v| v.iter().map(|i| SessionIdx(*i)).collect()),
            None => Vec::new(),
        };
        if let Some(app) = app {
            out.extend(
                self.sessions
                    .iter()
                    .enumerate()
                    .filter(|(_, s)| s.as_ref().is_some_and(|s| s.identity.application_id == app))
                    .map(|(i, _)| SessionIdx(i as u32)),
            );
        }
        out
    }

    /// Every session with its connection (the fence ends them all).
    pub fn all_sessions(&self) -> Vec<(SessionIdx, Option<crate::delivery::ConnKey>)> {
        self.sessions
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((SessionIdx(i as u32), s.as_ref()?.conn)))
            .collect()
    }
}
