//! What each application's sessions and REST requests came to, for the
//! developer portal (issue 16, docs/portal.md): the per-application view
//! the node-wide metrics (`metrics.rs`) do not have.
//!
//! Bounded and allocated at start: `SLOTS` applications (an application
//! takes a slot the first time it is counted and keeps it until the node
//! stops; one past the bound is not counted, only `untracked` is). Every
//! update is a few relaxed atomic operations on the slot, never a lock or
//! an allocation, so the paths that feed it (identify, resume, close, the
//! REST answer) stay as they were.
//!
//! Per slot (about 770 bytes, 3.2 MiB in all, plus 64 KiB per worker):
//! - the last hour in `BUCKETS` ten-minute buckets: identifies, resumes,
//!   and the gateway closes sent by code (4000-4014, then any other);
//! - REST answers by (route, status) in `REST_ENTRIES` claimed entries,
//!   429s by (route, scope) in `LIMITED_ENTRIES`; past those, `rest_other`;
//! - Identifies refused before a session began (4014, 4011, op 9 for the
//!   concurrency bucket or the daily budget), by reason, and the last
//!   `RECENT` with their times (a ring; a reader may see one mid-write);
//! - per worker, its live, degraded (ring at 80 %) and detached sessions,
//!   recounted by that worker once a second (`tally`), double-buffered so a
//!   reader never sees a half-done count; with them its live sessions by
//!   shard (`[shard_id, num_shards]` of their Identify) in `SHARD_ENTRIES`
//!   claimed entries per worker (more shards than that on one worker are
//!   counted together as `shards_other`; 512 KiB per worker), and how many
//!   of those are degraded (256 KiB per worker more).

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering::Relaxed};

use crate::delivery::resume::ResumeRefusal;
use crate::worker::metrics::REST_STATUSES;
pub use crate::worker::start_refusal::StartRefusal;
use crate::worker::timeline::{session_bits, Event, Kind, Timelines};
use shards::session_id::SessionId;

pub const SLOTS: usize = 4096;
/// Slots tried for one application before it is left uncounted.
const PROBES: usize = 16;
pub const BUCKETS: usize = 6;
pub const BUCKET_MS: u64 = 10 * 60 * 1000;
pub const REST_ENTRIES: usize = 24;
pub const LIMITED_ENTRIES: usize = 8;
/// Shards told apart per (application, worker).
pub const SHARD_ENTRIES: usize = 8;
const SHARD_COUNT_BITS: u32 = 24;
/// Columns of a bucket: identifies, resumes, then closes 4000..=4014, other.
const COLS: usize = 2 + 16;
const COUNT_BITS: u32 = 48;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

struct Bucket {
    /// `unix_ms / BUCKET_MS + 1` of what the counts are for (0: never used).
    stamp: AtomicU32,
    counts: [AtomicU32; COLS],
}

struct Slot {
    app: AtomicU64,
    hour: [Bucket; BUCKETS],
    identifies: AtomicU64,
    resumes: AtomicU64,
    /// `tag << 48 | count`; tag = (route + 1) << 4 | status index.
    rest: [AtomicU64; REST_ENTRIES],
    /// tag = (route + 1) << 2 | scope (0 user, 1 global, 2 shared).
    limited: [AtomicU64; LIMITED_ENTRIES],
    rest_other: AtomicU64,
    /// Identifies refused before a session began, by `StartRefusal`.
    refused: [AtomicU64; StartRefusal::COUNT],
    /// The last `RECENT` of them, a ring: `unix_ms << 16 | denied << 8 |
    /// (kind + 1)`, `denied` the privileged intents a 4014 asked for
    /// (`PRIVILEGED_BITS` order).
    recent: [AtomicU64; RECENT],
    recent_next: AtomicU32,
}

/// Refused starts kept per application with their times.
pub const RECENT: usize = 4;

/// The privileged intents, in the order of a recent refusal's `denied` bits.
pub const PRIVILEGED_BITS: [u64; 3] = [
    proto::intents::GUILD_MEMBERS,
    proto::intents::GUILD_PRESENCES,
    proto::intents::MESSAGE_CONTENT,
];

pub struct AppTable {
    slots: Box<[Slot]>,
    workers: usize,
    /// Per (bank, slot, worker): live | degraded << 21 | detached << 42.
    gauges: Box<[AtomicU64]>,
    /// Per (bank, slot, worker): the sum of the sessions' last sequence
    /// numbers (events dispatched to them; its growth is events per second).
    seqs: Box<[AtomicU64]>,
    /// Per (bank, slot, worker, entry): `tag << 24 | live sessions`, tag =
    /// (shard_id + 1) << 20 | num_shards; 0: unused.
    shards: Box<[AtomicU64]>,
    /// Per (bank, slot, worker, entry): of the entry's live sessions, the
    /// degraded ones.
    shards_degraded: Box<[AtomicU32]>,
    /// Per (bank, slot, worker): live sessions on shards past the entries.
    shards_other: Box<[AtomicU64]>,
    /// Per worker: the bank readers use.
    published: Box<[AtomicU8]>,
    /// Per worker: the Unix second of its last tally.
    tallied: Box<[AtomicU64]>,
    /// Applications not counted because every slot they could take is held.
    pub untracked: AtomicU64,
    /// Per slot: its sessions' last lifecycle events.
    timeline: Timelines,
}

/// One application's figures, as read (`AppTable::snapshot`).
#[derive(Clone, Debug, Default)]
pub struct AppSnapshot {
    /// Per worker: (live, degraded, detached) sessions.
    pub workers: Vec<(u32, u32, u32)>,
    pub identifies: u64,
    pub resumes: u64,
    pub identifies_hour: u64,
    pub resumes_hour: u64,
    /// Closes sent in the last hour: index code - 4000 (0..=14), 15 other.
    pub closes_hour: [u64; 16],
    /// (route index, status, count), REST answers since the start.
    pub rest: Vec<(usize, u16, u64)>,
    /// (route index, scope 0 user / 1 global / 2 shared, count) of 429s.
    pub limited: Vec<(usize, u8, u64)>,
    pub rest_other: u64,
    /// Events dispatched to the application's sessions held now (the sum
    /// of their sequence numbers).
    pub events: u64,
    /// (shard_id, num_shards, live sessions, of them degraded), by shard id.
    pub shards: Vec<(u32, u32, u32, u32)>,
    /// Live sessions on shards past `SHARD_ENTRIES` on their worker.
    pub shards_other: u32,
    /// Identifies refused before a session began, by `StartRefusal::index`.
    pub refused: [u64; StartRefusal::COUNT],
    /// The last few of them, newest first.
    pub recent_refusals: Vec<RecentRefusal>,
}

/// One refused start, as kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecentRefusal {
    pub at_ms: u64,
    pub why: StartRefusal,
    /// The privileged intents the Identify asked for (a 4014's culprits
    /// are those not approved).
    pub privileged: u64,
    /// A refused Resume's reason.
    pub resume: Option<ResumeRefusal>,
}

/// The entry tag of a shard (None: beyond what an entry holds).
fn shard_tag([id, n]: [u32; 2]) -> Option<u64> {
    (id < n && n < 1 << 20).then(|| (u64::from(id) + 1) << 20 | u64::from(n))
}

/// One more live session under `tag`: the entry's index (None: every
/// entry is taken). Only the tallying worker writes its entries, so no
/// compare-and-swap.
fn bump_shard(entries: &[AtomicU64], tag: u64) -> Option<usize> {
    for (i, e) in entries.iter().enumerate() {
        let v = e.load(Relaxed);
        if v >> SHARD_COUNT_BITS == tag || v == 0 {
            e.store(
                (tag << SHARD_COUNT_BITS) | ((v & ((1 << SHARD_COUNT_BITS) - 1)) + 1),
                Relaxed,
            );
            return Some(i);
        }
    }
    None
}

fn hash(app: u64) -> usize {
    let mut x = app ^ 0x9E37_79B9_7F4A_7C15;
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    (x ^ (x >> 31)) as usize
}

fn pack3(a: u32, b: u32, c: u32) -> u64 {
    let m = (1u64 << 21) - 1;
    (a as u64 & m) | (b as u64 & m) << 21 | (c as u64 & m) << 42
}

fn unpack3(v: u64) -> (u32, u32, u32) {
    let m = (1u64 << 21) - 1;
    ((v & m) as u32, (v >> 21 & m) as u32, (v >> 42 & m) as u32)
}

/// Count one under `tag` in a claimed-entry array; false if it is full.
fn bump_tagged(entries: &[AtomicU64], tag: u64) -> bool {
    for e in entries {
        let v = e.load(Relaxed);
        if v >> COUNT_BITS == tag {
            e.fetch_add(1, Relaxed);
            return true;
        }
        if v == 0 {
            match e.compare_exchange(0, tag << COUNT_BITS | 1, Relaxed, Relaxed) {
                Ok(_) => return true,
                Err(now) if now >> COUNT_BITS == tag => {
                    e.fetch_add(1, Relaxed);
                    return true;
                }
                Err(_) => continue,
            }
        }
    }
    false
}

impl AppTable {
    pub fn new(workers: usize) -> AppTable {
        let workers = workers.max(1);
        AppTable {
            slots: (0..SLOTS)
                .map(|_| Slot {
                    app: AtomicU64::new(0),
                    hour: std::array::from_fn(|_| Bucket {
                        stamp: AtomicU32::new(0),
                        counts: Default::default(),
                    }),
                    identifies: AtomicU64::new(0),
                    resumes: AtomicU64::new(0),
                    rest: Default::default(),
                    limited: Default::default(),
                    rest_other: AtomicU64::new(0),
                    refused: Default::default(),
                    recent: Default::default(),
                    recent_next: AtomicU32::new(0),
                })
                .collect(),
            workers,
            gauges: (0..2 * SLOTS * workers)
                .map(|_| AtomicU64::new(0))
                .collect(),
            seqs: (0..2 * SLOTS * workers)
                .map(|_| AtomicU64::new(0))
                .collect(),
            shards: (0..2 * SLOTS * workers * SHARD_ENTRIES)
                .map(|_| AtomicU64::new(0))
                .collect(),
            shards_degraded: (0..2 * SLOTS * workers * SHARD_ENTRIES)
                .map(|_| AtomicU32::new(0))
                .collect(),
            shards_other: (0..2 * SLOTS * workers)
                .map(|_| AtomicU64::new(0))
                .collect(),
            published: (0..workers).map(|_| AtomicU8::new(0)).collect(),
            tallied: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            untracked: AtomicU64::new(0),
            timeline: Timelines::new(SLOTS),
        }
    }

    /// The slot an application holds, if it holds one.
    fn find(&self, app: u64) -> Option<usize> {
        let h = hash(app);
        (0..PROBES)
            .map(|i| (h + i) % SLOTS)
            .take_while(|&i| self.slots[i].app.load(Relaxed) != 0)
            .find(|&i| self.slots[i].app.load(Relaxed) == app)
    }

    /// The application's slot, taking a free one the first time.
    fn claim(&self, app: u64) -> Option<usize> {
        if app == 0 {
            return None;
        }
        let h = hash(app);
        for i in 0..PROBES {
            let at = (h + i) % SLOTS;
            match self.slots[at].app.load(Relaxed) {
                a if a == app => return Some(at),
                0 => match self.slots[at]
                    .app
                    .compare_exchange(0, app, Relaxed, Relaxed)
                {
                    Ok(_) => return Some(at),
                    Err(a) if a == app => return Some(at),
                    Err(_) => continue,
                },
                _ => continue,
            }
        }
        self.untracked.fetch_add(1, Relaxed);
        None
    }

    fn slot(&self, app: u64) -> Option<&Slot> {
        self.claim(app).map(|i| &self.slots[i])
    }

    /// This ten-minute bucket of the slot, emptied first if it held an
    /// older one (an increment racing the turn-over may be lost: the
    /// figures are for a person to read, not for billing).
    fn bucket(s: &Slot, now_ms: u64) -> &Bucket {
        let n = (now_ms / BUCKET_MS) as u32 + 1;
        let b = &s.hour[n as usize % BUCKETS];
        let old = b.stamp.load(Relaxed);
        if old != n && b.stamp.compare_exchange(old, n, Relaxed, Relaxed).is_ok() {
            for c in &b.counts {
                c.store(0, Relaxed);
            }
        }
        b
    }

    /// An Identify or Resume of the application refused before a session
    /// (re)started. `detail`: for a 4014, the intents the Identify asked
    /// for (which privileged ones are kept); for a Resume, its
    /// `ResumeRefusal::index`; otherwise unused.
    pub fn start_refused(&self, app: u64, why: StartRefusal, detail: u64, now_ms: u64) {
        if let Some(s) = self.slot(app) {
            s.refused[why.index()].fetch_add(1, Relaxed);
            let byte = match why {
                StartRefusal::DisallowedIntents => PRIVILEGED_BITS
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| detail & **b != 0)
                    .fold(0u64, |m, (i, _)| m | 1 << i),
                StartRefusal::Resume => detail & 0xff,
                _ => 0,
            };
            let at = s.recent_next.fetch_add(1, Relaxed) as usize % RECENT;
            s.recent[at].store(now_ms << 16 | byte << 8 | (why.index() as u64 + 1), Relaxed);
        }
    }

    pub fn identified(&self, app: u64, session: &SessionId, now_ms: u64) {
        if let Some(i) = self.claim(app) {
            let s = &self.slots[i];
            s.identifies.fetch_add(1, Relaxed);
            Self::bucket(s, now_ms).counts[0].fetch_add(1, Relaxed);
            self.timeline
                .push(i, now_ms, Kind::Identify, session_bits(session));
        }
    }

    pub fn resumed(&self, app: u64, session: &SessionId, now_ms: u64) {
        if let Some(i) = self.claim(app) {
            let s = &self.slots[i];
            s.resumes.fetch_add(1, Relaxed);
            Self::bucket(s, now_ms).counts[1].fetch_add(1, Relaxed);
            self.timeline
                .push(i, now_ms, Kind::Resume, session_bits(session));
        }
    }

    /// A gateway close sent to one of the application's sessions.
    pub fn closed(&self, app: u64, session: &SessionId, code: u16, now_ms: u64) {
        if let Some(i) = self.claim(app) {
            let c = code.checked_sub(4000).filter(|i| *i < 15).unwrap_or(15) as usize;
            Self::bucket(&self.slots[i], now_ms).counts[2 + c].fetch_add(1, Relaxed);
            self.timeline
                .push(i, now_ms, Kind::Close(code), session_bits(session));
        }
    }

    /// A session of the application moved between nodes, or recovered
    /// (the timeline only: identifies and resumes count the rest).
    pub fn moved(&self, app: u64, session: &SessionId, kind: Kind, now_ms: u64) {
        if let Some(i) = self.claim(app) {
            self.timeline.push(i, now_ms, kind, session_bits(session));
        }
    }

    /// The application's last lifecycle events on this node, newest first.
    pub fn timeline(&self, app: u64, out: &mut Vec<Event>) {
        match self.find(app) {
            Some(i) => self.timeline.read(i, out),
            None => out.clear(),
        }
    }

    /// A REST answer to the application's token; `scope` for a 429.
    pub fn rest(&self, app: u64, route: usize, status: u16, scope: Option<u8>) {
        let Some(s) = self.slot(app) else { return };
        let st = REST_STATUSES
            .iter()
            .position(|&x| x == status)
            .unwrap_or(REST_STATUSES.len()) as u64;
        let route = (route as u64 + 1) & 0x7ff;
        if !bump_tagged(&s.rest, route << 4 | st) {
            s.rest_other.fetch_add(1, Relaxed);
        }
        if let Some(scope) = scope {
            if !bump_tagged(&s.limited, route << 2 | scope.min(2) as u64) {
                s.rest_other.fetch_add(1, Relaxed);
            }
        }
    }

    /// A REST answer written by the edge (the scope of a 429 is read from
    /// its `X-RateLimit-Scope` header).
    pub fn answered(&self, app: u64, route: usize, status: u16, scope: Option<&str>) {
        let scope = (status == 429).then_some(match scope {
            Some("global") => 1,
            Some("shared") => 2,
            _ => 0,
        });
        self.rest(app, route, status, scope);
    }

    /// Whether `worker` is due to recount its sessions (once a second).
    pub fn tally_due(&self, worker: usize, now_ms: u64) -> bool {
        let Some(t) = self.tallied.get(worker) else {
            return false;
        };
        let sec = now_ms / 1000;
        t.load(Relaxed) != sec && t.swap(sec, Relaxed) != sec
    }

    fn shard_entries(&self, col: usize) -> &[AtomicU64] {
        &self.shards[col * SHARD_ENTRIES..(col + 1) * SHARD_ENTRIES]
    }

    fn shard_degraded(&self, col: usize) -> &[AtomicU32] {
        &self.shards_degraded[col * SHARD_ENTRIES..(col + 1) * SHARD_ENTRIES]
    }

    /// `worker` recounts its sessions: `each` calls its argument once per
    /// session with (application, degraded, attached, its last sequence
    /// number, its `[shard_id, num_shards]`).
    pub fn tally(
        &self,
        worker: usize,
        each: impl FnOnce(&mut dyn FnMut(u64, bool, bool, u64, [u32; 2])),
    ) {
        if worker >= self.workers {
            return;
        }
        let bank = 1 - self.published[worker].load(Relaxed) as usize;
        let col = |slot: usize| (bank * SLOTS + slot) * self.workers + worker;
        for slot in 0..SLOTS {
            self.gauges[col(slot)].store(0, Relaxed);
            self.seqs[col(slot)].store(0, Relaxed);
            self.shards_other[col(slot)].store(0, Relaxed);
            for e in self.shard_entries(col(slot)) {
                e.store(0, Relaxed);
            }
            for e in self.shard_degraded(col(slot)) {
                e.store(0, Relaxed);
            }
        }
        each(&mut |app, degraded, attached, seq, shard| {
            let Some(slot) = self.claim(app) else {
                return;
            };
            if attached {
                let entries = self.shard_entries(col(slot));
                match shard_tag(shard).and_then(|t| bump_shard(entries, t)) {
                    Some(i) if degraded => {
                        self.shard_degraded(col(slot))[i].fetch_add(1, Relaxed);
                    }
                    Some(_) => {}
                    None => {
                        self.shards_other[col(slot)].fetch_add(1, Relaxed);
                    }
                }
            }
            let add = if attached {
                pack3(1, degraded as u32, 0)
            } else {
                pack3(0, 0, 1)
            };
            self.gauges[col(slot)].fetch_add(add, Relaxed);
            self.seqs[col(slot)].fetch_add(seq, Relaxed);
        });
        self.published[worker].store(bank as u8, Relaxed);
    }

    /// Everything counted of one application (None: never counted).
    pub fn snapshot(&self, app: u64, now_ms: u64) -> Option<AppSnapshot> {
        let i = self.find(app)?;
        let s = &self.slots[i];
        let mut out = AppSnapshot {
            identifies: s.identifies.load(Relaxed),
            resumes: s.resumes.load(Relaxed),
            rest_other: s.rest_other.load(Relaxed),
            refused: std::array::from_fn(|k| s.refused[k].load(Relaxed)),
            ..Default::default()
        };
        // Newest first: by time, and within one millisecond by the order
        // they were written (slot k was last written as number `w`).
        let next = s.recent_next.load(Relaxed) as usize;
        let written = |k: usize| next.wrapping_sub(1 + (next.wrapping_sub(1 + k) % RECENT));
        let mut recent: Vec<(usize, RecentRefusal)> = s
            .recent
            .iter()
            .map(|r| r.load(Relaxed))
            .enumerate()
            .filter_map(|(k, v)| {
                let kind = (v & 0xff) as usize;
                let byte = (v >> 8) & 0xff;
                (kind > 0 && kind <= StartRefusal::COUNT)
                    .then(|| {
                        let why = StartRefusal::ALL[kind - 1];
                        let intents = why == StartRefusal::DisallowedIntents;
                        RecentRefusal {
                            at_ms: v >> 16,
                            why,
                            privileged: PRIVILEGED_BITS
                                .iter()
                                .enumerate()
                                .filter(|(i, _)| intents && byte & (1 << i) != 0)
                                .fold(0, |m, (_, b)| m | b),
                            resume: (why == StartRefusal::Resume)
                                .then(|| ResumeRefusal::from_index(byte as usize))
                                .flatten(),
                        }
                    })
                    .map(|r| (written(k), r))
            })
            .collect();
        recent.sort_unstable_by_key(|(w, r)| std::cmp::Reverse((r.at_ms, *w)));
        out.recent_refusals = recent.into_iter().map(|(_, r)| r).collect();
        for w in 0..self.workers {
            let bank = self.published[w].load(Relaxed) as usize;
            let at = (bank * SLOTS + i) * self.workers + w;
            out.workers.push(unpack3(self.gauges[at].load(Relaxed)));
            out.events += self.seqs[at].load(Relaxed);
            out.shards_other += self.shards_other[at].load(Relaxed) as u32;
            let degraded = self.shard_degraded(at);
            for (k, e) in self.shard_entries(at).iter().enumerate() {
                let v = e.load(Relaxed);
                let (tag, n) = (
                    v >> SHARD_COUNT_BITS,
                    (v & ((1 << SHARD_COUNT_BITS) - 1)) as u32,
                );
                if tag == 0 {
                    continue;
                }
                let (id, of) = ((tag >> 20) as u32 - 1, (tag & ((1 << 20) - 1)) as u32);
                let d = degraded[k].load(Relaxed);
                match out.shards.iter_mut().find(|s| (s.0, s.1) == (id, of)) {
                    Some(s) => (s.2, s.3) = (s.2 + n, s.3 + d),
                    None => out.shards.push((id, of, n, d)),
                }
            }
        }
        out.shards.sort_unstable();
        let now = (now_ms / BUCKET_MS) as u32 + 1;
        for b in &s.hour {
            let stamp = b.stamp.load(Relaxed);
            if stamp == 0 || now.saturating_sub(stamp) >= BUCKETS as u32 {
                continue;
            }
            out.identifies_hour += b.counts[0].load(Relaxed) as u64;
            out.resumes_hour += b.counts[1].load(Relaxed) as u64;
            for (k, c) in out.closes_hour.iter_mut().enumerate() {
                *c += b.counts[2 + k].load(Relaxed) as u64;
            }
        }
        for e in &s.rest {
            let v = e.load(Relaxed);
            let (tag, n) = (v >> COUNT_BITS, v & COUNT_MASK);
            if tag != 0 {
                let st = REST_STATUSES
                    .get((tag & 0xf) as usize)
                    .copied()
                    .unwrap_or(0);
                out.rest.push(((tag >> 4) as usize - 1, st, n));
            }
        }
        for e in &s.limited {
            let v = e.load(Relaxed);
            let (tag, n) = (v >> COUNT_BITS, v & COUNT_MASK);
            if tag != 0 {
                out.limited
                    .push(((tag >> 2) as usize - 1, (tag & 3) as u8, n));
            }
        }
        Some(out)
    }

    /// Applications holding a slot (for the cost measurement and tests).
    pub fn tracked(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.app.load(Relaxed) != 0)
            .count()
    }

    /// Every application holding a slot, into `out` (cleared first).
    pub fn apps(&self, out: &mut Vec<u64>) {
        out.clear();
        out.extend(
            self.slots
                .iter()
                .map(|s| s.app.load(Relaxed))
                .filter(|&a| a != 0),
        );
    }
}

#[cfg(test)]
mod tests {
    // By its crate path: `super` would be an arrow to `worker` (tests/layout.rs).
    use crate::worker::app_stats::*;
    use std::sync::atomic::Ordering::Relaxed;

    #[test]
    fn counts_stay_with_their_application() {
        let t = AppTable::new(2);
        let (s7, s8) = (SessionId::new(1, 7), SessionId::new(0, 8));
        t.identified(7, &s7, 1_000);
        t.resumed(7, &s7, 1_100);
        t.closed(7, &s7, 4000, 1_200);
        t.closed(8, &s8, 4004, 1_000);
        t.rest(7, 3, 200, None);
        t.rest(7, 3, 429, Some(0));
        t.tally(1, |f| {
            f(7, true, true, 5, [0, 2]);
            f(7, false, true, 6, [1, 2]);
            f(8, false, false, 1, [0, 1]);
        });
        let a = t.snapshot(7, 2_000).unwrap();
        assert_eq!((a.identifies_hour, a.resumes_hour), (1, 1));
        let mut line = Vec::new();
        t.timeline(7, &mut line);
        let kinds: Vec<Kind> = line.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, [Kind::Close(4000), Kind::Resume, Kind::Identify]);
        assert!(line.iter().all(|e| e.session == session_bits(&s7)));
        t.timeline(8, &mut line);
        assert_eq!(line.len(), 1, "8's close only");
        assert_eq!(a.closes_hour[0], 1);
        assert_eq!(a.closes_hour[4], 0);
        assert_eq!(a.workers, vec![(0, 0, 0), (2, 1, 0)]);
        assert_eq!(a.events, 11);
        assert_eq!(
            a.shards,
            vec![(0, 2, 1, 1), (1, 2, 1, 0)],
            "live sessions by shard, and the degraded of them"
        );
        assert!(a.rest.contains(&(3, 200, 1)) && a.rest.contains(&(3, 429, 1)));
        assert_eq!(a.limited, vec![(3, 0, 1)]);
        let b = t.snapshot(8, 2_000).unwrap();
        assert_eq!((b.closes_hour[4], b.workers[1]), (1, (0, 0, 1)));
        assert!(t.snapshot(9, 0).is_none());
        // An hour later the buckets have aged out.
        let later = t.snapshot(7, 1_000 + BUCKETS as u64 * BUCKET_MS).unwrap();
        assert_eq!(later.closes_hour[0], 0);
        assert_eq!(later.identifies, 1);
    }

    #[test]
    fn refused_starts_are_newest_first_and_in_write_order_within_a_millisecond() {
        let t = AppTable::new(1);
        t.identified(7, &SessionId::new(0, 1), 1_000); // the slot
                                                       // Six into a ring of four, the last three in one millisecond.
        for (i, ms) in [100, 200, 300, 400, 400, 400].iter().enumerate() {
            t.start_refused(7, StartRefusal::ALL[i % 2], 0, *ms);
        }
        let got: Vec<(u64, StartRefusal)> = t
            .snapshot(7, 500)
            .unwrap()
            .recent_refusals
            .iter()
            .map(|r| (r.at_ms, r.why))
            .collect();
        let (a, b) = (StartRefusal::ALL[0], StartRefusal::ALL[1]);
        assert_eq!(got, [(400, b), (400, a), (400, b), (300, a)]);
    }

    #[test]
    fn shards_past_the_entries_are_counted_together() {
        let t = AppTable::new(1);
        t.tally(0, |f| {
            for id in 0..(SHARD_ENTRIES as u32 + 3) {
                f(7, false, true, 1, [id, 64]);
            }
            f(7, false, true, 1, [5, 3]); // not a shard: id >= count
            f(7, false, false, 1, [0, 64]); // detached: not live
        });
        let a = t.snapshot(7, 0).unwrap();
        assert_eq!(a.shards.len(), SHARD_ENTRIES);
        assert_eq!(a.shards_other, 4);
        assert!(a.shards.iter().all(|s| s.1 == 64 && s.2 == 1 && s.3 == 0));
    }

    #[test]
    fn the_table_is_bounded() {
        let t = AppTable::new(1);
        for app in 1..=(SLOTS as u64 * 2) {
            t.identified(app, &SessionId::new(0, 1), 0);
        }
        assert!(t.tracked() <= SLOTS);
        assert!(t.untracked.load(Relaxed) >= SLOTS as u64);
        // A full entry list overflows into rest_other instead of growing.
        for route in 0..(REST_ENTRIES + 5) {
            t.rest(1, route, 200, None);
        }
        let s = t.snapshot(1, 0).unwrap();
        assert_eq!((s.rest.len(), s.rest_other), (REST_ENTRIES, 5));
    }
}
