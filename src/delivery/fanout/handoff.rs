//! A session leaving this worker for another node (`export`), and one
//! arriving (`import`, then `deliver_to` for the records the holder had not
//! taken yet). docs/cluster.md has the rule that lines the two nodes'
//! streams up; this file only moves a ring's contents.

use std::collections::HashMap;

use ringbuf::{Entry, SessionRing};

use super::{unlist, FanOut, SessionSlot};
use crate::delivery::entitlement::{self, Requirement, Variant};
use crate::delivery::fanout::{EventIn, Stamp};
use crate::delivery::moved::{Moved, Take};
use crate::delivery::record;
use crate::delivery::resume::ResumeRefusal;
use crate::protocol::session::{GuildAccess, Identity};
use proto::SessionIdx;
use proto::{AppId, ServerId};

/// Sessions rebuilt together from the same records (crash recovery): each
/// record is read once and offered to the members it may concern, found
/// as the live path finds recipients (by server; by bot for a direct
/// message), not to every member.
pub struct Rebuilding {
    members: Vec<SessionIdx>,
    /// Members (their place in `members`) by server and by bot user.
    by_server: HashMap<ServerId, Vec<u32>>,
    by_bot: HashMap<u64, Vec<u32>>,
    /// Members that get nothing more (their replay failed).
    left: Vec<bool>,
}

impl Rebuilding {
    /// The group of `members`, sessions of `fan`.
    pub fn new(fan: &FanOut, members: Vec<SessionIdx>) -> Rebuilding {
        let mut g = Rebuilding {
            by_server: HashMap::new(),
            by_bot: HashMap::new(),
            left: vec![false; members.len()],
            members,
        };
        for (k, idx) in g.members.iter().enumerate() {
            let Some(s) = fan.get(*idx) else { continue };
            for guild in &s.identity.guilds {
                g.by_server.entry(guild.id).or_default().push(k as u32);
            }
            g.by_bot
                .entry(s.identity.bot_user_id)
                .or_default()
                .push(k as u32);
        }
        g
    }

    /// Member `k` gets nothing more.
    pub fn leave(&mut self, k: usize) {
        self.left[k] = true;
    }

    pub fn has_left(&self, k: usize) -> bool {
        self.left[k]
    }
}

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
        let idx = self.import_at(&m.identity, m.seq, now_ms, window_ms)?;
        for (t, d) in &m.events {
            let pushed = record::append(&mut self.arena, Stamp::NONE, t, d)
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

    /// A session arriving with an empty ring that continues at `seq`,
    /// detached (crash recovery rebuilds it from there).
    pub fn import_at(
        &mut self,
        identity: &Identity,
        seq: u64,
        now_ms: u64,
        window_ms: u64,
    ) -> Result<SessionIdx, ResumeRefusal> {
        if self.by_id.contains_key(&identity.session_id) || seq >= u64::MAX / 4 {
            return Err(ResumeRefusal::UnknownSession);
        }
        Ok(self.insert(SessionSlot {
            ring: SessionRing::new(&self.cfg.ring, seq),
            identity: Box::new(identity.clone()),
            conn: None,
            expires_ms: now_ms.saturating_add(window_ms),
            lost: false,
            recovery: 0,
            since_ms: 0,
            attached_ms: 0,
            resumes: 0,
            timed_seq: 0,
        }))
    }

    /// Offer one event to the members of `g` that `deliver` would consider
    /// (the sessions of its server, or of the bots a direct message names,
    /// in the same order), each as `deliver_to` does.
    pub fn deliver_to_group(&mut self, g: &Rebuilding, ev: &EventIn, now_ms: u64, unix_ms: u64) {
        let mut offer = |list: Option<&Vec<u32>>| {
            for &k in list.map_or(&[][..], Vec::as_slice) {
                if !g.left[k as usize] {
                    self.deliver_to(g.members[k as usize], ev, now_ms, unix_ms);
                }
            }
        };
        if ev.server_id == ServerId::NONE {
            for bot in ev.mentions {
                offer(g.by_bot.get(bot));
            }
        } else {
            offer(g.by_server.get(&ev.server_id));
        }
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
            Variant::Full => record::append(&mut self.arena, ev.stamp, ev.t, ev.d).ok(),
            Variant::Redacted => {
                self.redacted.clear();
                match ingest::redact_message_content(ev.d, &mut self.redacted) {
                    Ok(_) => record::append(&mut self.arena, ev.stamp, ev.t, &self.redacted).ok(),
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
            self.interest.remove(server_id);
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
