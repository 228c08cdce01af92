//! A survivor rebuilds a dead node's sessions (docs/cluster.md, "Crash
//! recovery"): their summaries, the dead worker's checkpoints and the
//! node's journal from Redis (the journal and checkpoints of a dead node
//! are final, so they are read once per dead node and cached), the records
//! after the checkpoint from the topic, in the order the journal proves.
//! The worker then replays them (`worker::cluster::recover`).
//!
//! In batches: a thread takes up to `BATCH` waiting Resumes at once, reads
//! their summaries in one Redis round, proves each holder dead once, reads
//! and assembles each dead worker's checkpoint once for all of its
//! sessions (`Replay`, shared), claims them in one round, and hands each
//! worker one message per replay. A crash of a full node costs a few
//! rounds per `BATCH` sessions and one topic read per checkpoint and
//! `FETCH_FOR`, not a read and an assembly per session (which served
//! about 600 sessions a second: docs/results/storm-recovery).
//!
//! Exactly one owner: we recover only once the holder is dead (the process
//! the summary names, its instance, holds no live claim in the registry:
//! its claim lapsed and it fenced itself, or it left), waiting for the
//! lapse within `recovery.resume_timeout_ms`. Not the number in the
//! session id: after a hand-off that names the node that created the
//! session, not the one holding it. A holder that answered the hand-off
//! itself, saying it does not hold the session, ended it: op 9 at once,
//! without a wait that would hold a survivor thread for a bot's stale id;
//! then `SET gwr:o:{id}:{dead instance} NX` decides between survivors
//! racing for it (the same crash: the same key; a later crash of the node
//! that recovered it: another key).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::store::{checkpoint_key, journal_key, owner_key, summary_key, Store};
use crate::config::Recovery as RecoveryConfig;
use crate::delivery::batch::{Batch, StreamPos};
use crate::delivery::recovery::{
    Checkpoint, Entry, Recovering, Replay, Summary, TopicReader, FOREIGN, STATE_BEFORE, TAINTED,
};
use crate::delivery::resume::ResumeRefusal;
use crate::delivery::ConnKey;
use crate::link::resp::{command, Reply};
use crate::worker::mail::{RecoverJob, ToWorker, WorkerHandle};

/// How long a dead node's journal and checkpoints are kept here, and for
/// how many dead nodes at most.
const CACHE_FOR: Duration = Duration::from_secs(60);
const CACHE_NODES: usize = 16;

/// A dead node's journal and its workers' checkpoints, as read once.
struct Dead {
    at: Instant,
    journal: Arc<Vec<Entry>>,
    checkpoints: HashMap<u16, Arc<Vec<Checkpoint>>>,
}

/// A dead worker's checkpoint replayed from the topic is reused this long
/// by the next recoveries from the same checkpoint (a storm reads each
/// range about once per interval; our own log reaches back 2 s, so the cut
/// at their end stays reachable), for at most this many checkpoints.
const FETCH_FOR: Duration = Duration::from_millis(500);
const FETCHES: usize = 64;
/// Resumes a survivor thread takes at once (one Redis round for their
/// summaries, one for their claims).
const BATCH: usize = 512;

/// (partitions with their watermarks, the records read).
type Ranges = (Vec<(i32, i64, i64)>, Vec<Batch>);
/// (dead instance, worker, checkpoint's entry number).
type ReadKey = (String, u16, u64);

#[derive(Default)]
pub(super) struct Cache {
    dead: Mutex<HashMap<String, Dead>>,
    reads: Mutex<HashMap<ReadKey, (Instant, Arc<Replay>)>>,
    /// Processes proven dead (the instance their summaries name), when
    /// proven: the death of a process is final, so the rest of a storm's
    /// recoveries from it ask the registry nothing (at most `CACHE_NODES`,
    /// for `CACHE_FOR`). A new process on the same number and address has
    /// another instance: proven afresh.
    proven: Mutex<HashMap<String, Instant>>,
}

pub(super) struct Ctx {
    pub cfg: RecoveryConfig,
    pub instance: String,
    pub workers: Arc<[WorkerHandle]>,
    pub registry: Arc<dyn registry::Registry>,
    pub topic: Arc<dyn TopicReader>,
    pub cache: Arc<Cache>,
    pub stats: Arc<crate::worker::shared::RecoveryStats>,
    pub store: Store,
}

pub(super) fn run(mut ctx: Ctx, jobs: &crossbeam_channel::Receiver<RecoverJob>, stop: &AtomicBool) {
    let mut batch = Vec::with_capacity(BATCH);
    while !stop.load(Relaxed) {
        let Ok(first) = jobs.recv_timeout(Duration::from_millis(100)) else {
            continue;
        };
        batch.push(first);
        batch.extend(jobs.try_iter().take(BATCH - 1));
        let mut out = Outbox::default();
        recover_all(&mut ctx, std::mem::take(&mut batch), &mut out);
        out.send(&ctx.workers);
    }
}

/// The answers of one batch: refusals one by one, recovered sessions in
/// one message per (worker, replay).
#[derive(Default)]
struct Outbox {
    refused: Vec<(usize, ConnKey, ResumeRefusal)>,
    groups: Vec<(usize, Arc<Replay>, Vec<Recovering>)>,
}

impl Outbox {
    fn refuse(&mut self, job: &RecoverJob, why: ResumeRefusal) {
        tracing::debug!(session = %job.take.session_id, %why, "recovery: not recovered");
        self.refused.push((job.worker, job.conn, why));
    }

    fn recovered(&mut self, worker: usize, replay: &Arc<Replay>, s: Recovering) {
        let found = self
            .groups
            .iter_mut()
            .find(|(w, r, _)| *w == worker && Arc::ptr_eq(r, replay));
        match found {
            Some((_, _, list)) => list.push(s),
            None => self.groups.push((worker, replay.clone(), vec![s])),
        }
    }

    fn send(self, workers: &[WorkerHandle]) {
        let (refused, sessions) = (
            self.refused.len(),
            self.groups.iter().map(|g| g.2.len()).sum::<usize>(),
        );
        if refused > 0 {
            tracing::info!(
                recovered = sessions,
                refused,
                "recovery: a batch of resumes answered"
            );
        }
        let mut dropped = 0;
        for (worker, conn, why) in self.refused {
            let sent = workers
                .get(worker)
                .is_some_and(|w| w.send(ToWorker::NotRecovered { conn, why }));
            dropped += usize::from(!sent);
        }
        for (worker, replay, sessions) in self.groups {
            let n = sessions.len();
            let sent = workers
                .get(worker)
                .is_some_and(|w| w.send(ToWorker::Recovered { replay, sessions }));
            dropped += if sent { 0 } else { n };
        }
        if dropped > 0 {
            tracing::warn!(dropped, "recovery: worker inbox full, answers dropped");
        }
    }
}

fn store_down<T>(_: T) -> ResumeRefusal {
    ResumeRefusal::RecoveryStoreDown
}

/// One round of `GET`s, a reply per key (None: no such key).
fn get_many<'a>(
    store: &mut Store,
    keys: impl Iterator<Item = &'a str>,
) -> Result<Vec<Option<Vec<u8>>>, ResumeRefusal> {
    let mut cmds = Vec::new();
    let mut n = 0;
    for k in keys {
        command(&mut cmds, &[b"GET", k.as_bytes()]);
        n += 1;
    }
    if n == 0 {
        return Ok(Vec::new());
    }
    store
        .round(&cmds, n)
        .map_err(store_down)?
        .into_iter()
        .map(|r| match r {
            Reply::Bulk(b) => Ok(b),
            _ => Err(ResumeRefusal::RecoveryStoreDown),
        })
        .collect()
}

/// A job whose summary checked out, with its deadline.
struct Found {
    job: RecoverJob,
    deadline: Instant,
    summary: Summary,
}

/// Recover a batch of jobs together: their summaries in one Redis round,
/// each dead holder proven dead once, each dead worker's checkpoint
/// replayed once for all of its sessions, their claims in one round.
fn recover_all(ctx: &mut Ctx, jobs: Vec<RecoverJob>, out: &mut Outbox) {
    let budget = Duration::from_millis(ctx.cfg.resume_timeout_ms);
    let now = Instant::now();
    let mut live = Vec::with_capacity(jobs.len());
    for job in jobs {
        if now >= job.since + budget {
            // It waited in the queue past its budget (more Resumes than
            // the survivor threads could serve in time): refused without a
            // Redis or topic read, so the jobs behind it still have theirs.
            out.refuse(&job, ResumeRefusal::NoRoom);
        } else {
            live.push(job);
        }
    }
    let keys: Vec<String> = live
        .iter()
        .map(|j| summary_key(&j.take.session_id))
        .collect();
    let summaries = match get_many(&mut ctx.store, keys.iter().map(String::as_str)) {
        Ok(s) => s,
        Err(why) => return live.iter().for_each(|j| out.refuse(j, why)),
    };
    let mut found = Vec::with_capacity(live.len());
    for (job, bytes) in live.into_iter().zip(summaries) {
        match check_summary(ctx, &job, bytes) {
            Ok(summary) => found.push(Found {
                deadline: job.since + budget,
                job,
                summary,
            }),
            Err(why) => out.refuse(&job, why),
        }
    }
    // Each holder proven dead once (waiting for its claim to lapse, at
    // most to the latest deadline among its sessions). Holders already
    // proven dead first: a wait for one still alive (frozen, or its link
    // broken) holds the rest of the batch, so it comes last.
    found.sort_by_cached_key(|f| {
        let h = holder(&f.summary);
        (!known_dead(ctx, h), h.to_owned())
    });
    let mut ready: Vec<(Found, ReadKey, u64)> = Vec::with_capacity(found.len());
    let mut found = found.into_iter().peekable();
    while let Some(first) = found.next() {
        let mut same = vec![first];
        while let Some(f) = found.next_if(|f| holder(&f.summary) == holder(&same[0].summary)) {
            same.push(f);
        }
        let latest = same.iter().map(|f| f.deadline).max().expect("one at least");
        if let Err(why) = wait_dead(ctx, holder(&same[0].summary), latest) {
            same.iter().for_each(|f| out.refuse(&f.job, why));
            continue;
        }
        for f in same {
            if Instant::now() >= f.deadline {
                out.refuse(&f.job, ResumeRefusal::NodeUnreachable);
                continue;
            }
            match checkpoint_for(ctx, &f) {
                Ok((key, seq)) => ready.push((f, key, seq)),
                Err(why) => out.refuse(&f.job, why),
            }
        }
    }
    // Each dead worker's checkpoint replayed once for its sessions.
    ready.sort_by(|a, b| a.1.cmp(&b.1));
    let mut claimable: Vec<(Found, Arc<Replay>, u64)> = Vec::with_capacity(ready.len());
    while let Some((first, key, _)) = ready.first() {
        let n = ready.iter().take_while(|r| r.1 == *key).count();
        let deadline = ready[..n]
            .iter()
            .map(|r| r.0.deadline)
            .max()
            .expect("at least one");
        let replay = replay_for(ctx, &key.clone(), &first.summary, deadline);
        for (f, _, seq) in ready.drain(..n) {
            match &replay {
                Ok(_) if Instant::now() >= f.deadline => {
                    out.refuse(&f.job, ResumeRefusal::NodeUnreachable)
                }
                Ok(r) => claimable.push((f, r.clone(), seq)),
                Err(why) => out.refuse(&f.job, *why),
            }
        }
    }
    // One owner per session: the first survivor to claim it.
    let claims = claim_all(
        ctx,
        claimable
            .iter()
            .map(|c| (&c.0.job.take.session_id, c.0.summary.instance.as_str())),
    );
    for ((f, replay, checkpoint_seq), claimed) in claimable.into_iter().zip(claims) {
        if let Err(why) = claimed {
            out.refuse(&f.job, why);
            continue;
        }
        out.recovered(
            f.job.worker,
            &replay,
            Recovering {
                conn: f.job.conn,
                identity: f.summary.identity,
                checkpoint_seq,
                client_seq: f.job.take.seq,
            },
        );
    }
}

/// The process a summary names as the holder (its instance).
fn holder(s: &Summary) -> &str {
    s.instance.as_str()
}

/// The job's summary, if it is the session's and the token matches.
fn check_summary(
    ctx: &Ctx,
    job: &RecoverJob,
    bytes: Option<Vec<u8>>,
) -> Result<Summary, ResumeRefusal> {
    let sid = job.take.session_id;
    let bytes = bytes.ok_or(ResumeRefusal::RecoveryNoSummary)?;
    let summary = Summary::decode(&bytes).ok_or(ResumeRefusal::RecoveryNoSummary)?;
    if summary.identity.session_id != sid {
        return Err(ResumeRefusal::RecoveryNoSummary);
    }
    if summary.identity.token_digest != job.take.token_digest {
        // Another bot's token (or a forged id that happens to exist).
        return Err(ResumeRefusal::TokenMismatch);
    }
    if summary.instance == ctx.instance {
        return Err(ResumeRefusal::UnknownSession); // ours, and not here: it ended
    }
    if job.said_unknown.contains(&summary.instance) {
        // Its holder answered the hand-off: alive, and without it (the
        // session ended there). Waiting for it to die would hold this
        // thread, and the batch, for the whole budget.
        return Err(ResumeRefusal::UnknownSession);
    }
    Ok(summary)
}

/// The newest checkpoint of the dead worker that holds the session at the
/// summary's version, at or before the client's seq: its key, and the
/// session's seq there.
fn checkpoint_for(ctx: &mut Ctx, f: &Found) -> Result<(ReadKey, u64), ResumeRefusal> {
    let (sid, s) = (&f.job.take.session_id, &f.summary);
    let (_, checkpoints) = dead_records(ctx, &s.instance, s.worker)?;
    let mut held = false;
    let ckpt = checkpoints
        .iter()
        .filter_map(|c| Some((c, c.session(sid)?)))
        .inspect(|_| held = true)
        .filter(|(_, (seq, v))| *v & TAINTED == 0 && *v == s.version && *seq <= f.job.take.seq)
        .max_by_key(|(c, _)| c.number);
    match ckpt {
        Some((c, (seq, _))) => Ok(((s.instance.clone(), s.worker, c.number), seq)),
        None if held => Err(ResumeRefusal::RecoveryUnproven),
        None => Err(ResumeRefusal::RecoveryNoSummary),
    }
}

/// What the dead worker's records say after checkpoint `key` (cached for
/// `FETCH_FOR`: one topic read and one assembly per checkpoint and
/// interval, shared by every session recovered from it).
fn replay_for(
    ctx: &mut Ctx,
    key: &ReadKey,
    s: &Summary,
    deadline: Instant,
) -> Result<Arc<Replay>, ResumeRefusal> {
    let cached = {
        let mut reads = lock(&ctx.cache.reads);
        reads.retain(|_, (at, _)| at.elapsed() < FETCH_FOR);
        reads.get(key).map(|(_, r)| r.clone())
    };
    if let Some(r) = cached {
        return Ok(r);
    }
    let (journal, checkpoints) = dead_records(ctx, &s.instance, s.worker)?;
    let c = checkpoints
        .iter()
        .find(|c| c.number == key.2)
        .ok_or(ResumeRefusal::RecoveryUnproven)?;
    let runs = prove(&journal, c, usize::from(s.worker))?;
    let (parts, got) = read_ranges(ctx, c, &runs, deadline)?;
    let (proven, tail, cut) = assemble(&parts, &got, c, &runs)?;
    ctx.stats.replays.fetch_add(1, Relaxed);
    let r = Arc::new(Replay {
        proven,
        tail,
        cut,
        since_unix_ms: c.unix_ms,
    });
    let mut reads = lock(&ctx.cache.reads);
    if reads.len() < FETCHES {
        reads.insert(key.clone(), (Instant::now(), r.clone()));
    }
    Ok(r)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether this process was proven dead lately (no registry read).
fn known_dead(ctx: &Ctx, instance: &str) -> bool {
    let mut proven = lock(&ctx.cache.proven);
    proven.retain(|_, at| at.elapsed() < CACHE_FOR);
    proven.contains_key(instance)
}

/// Wait until process `instance` provably no longer delivers: it holds no
/// live claim (on any number).
fn wait_dead(ctx: &Ctx, instance: &str, deadline: Instant) -> Result<(), ResumeRefusal> {
    if known_dead(ctx, instance) {
        return Ok(());
    }
    let dead = || {
        let mut proven = lock(&ctx.cache.proven);
        if proven.len() >= CACHE_NODES {
            proven.clear(); // asked again: a registry call each, no more
        }
        proven.insert(instance.to_owned(), Instant::now());
        Ok(())
    };
    loop {
        let now_ms = registry::snowflake::unix_ms_now();
        ctx.stats.registry_reads.fetch_add(1, Relaxed);
        match ctx.registry.instance_live(instance, now_ms) {
            Ok(false) => return dead(),
            Ok(true) => {}
            Err(e) => tracing::debug!(instance, error = %e, "recovery: reading the holder's claim"),
        }
        if Instant::now() + Duration::from_millis(200) >= deadline {
            // Still alive (or we cannot tell): never two owners.
            return Err(ResumeRefusal::NodeUnreachable);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

type Records = (Arc<Vec<Entry>>, Arc<Vec<Checkpoint>>);

/// The dead node's journal and worker `worker`'s checkpoints (cached).
fn dead_records(ctx: &mut Ctx, instance: &str, worker: u16) -> Result<Records, ResumeRefusal> {
    {
        let mut dead = lock(&ctx.cache.dead);
        dead.retain(|_, d| d.at.elapsed() < CACHE_FOR);
        if let Some(d) = dead.get(instance) {
            if let Some(c) = d.checkpoints.get(&worker) {
                return Ok((d.journal.clone(), c.clone()));
            }
        }
    }
    let mut cmds = Vec::new();
    let keys = [
        checkpoint_key(instance, usize::from(worker), 0),
        checkpoint_key(instance, usize::from(worker), 1),
    ];
    for k in &keys {
        command(&mut cmds, &[b"GET", k.as_bytes()]);
    }
    command(
        &mut cmds,
        &[b"LRANGE", journal_key(instance).as_bytes(), b"0", b"-1"],
    );
    let replies = ctx.store.round(&cmds, 3).map_err(store_down)?;
    let mut checkpoints = Vec::new();
    for r in &replies[..2] {
        if let Reply::Bulk(Some(b)) = r {
            checkpoints.extend(Checkpoint::decode(b));
        }
    }
    let journal: Vec<Entry> = match &replies[2] {
        Reply::Array(Some(items)) => items
            .iter()
            .filter_map(|r| match r {
                Reply::Bulk(Some(b)) => Entry::decode(b),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    let (journal, checkpoints) = (Arc::new(journal), Arc::new(checkpoints));
    let mut dead = lock(&ctx.cache.dead);
    if dead.len() >= CACHE_NODES && !dead.contains_key(instance) {
        return Ok((journal, checkpoints)); // not cached: too many dead nodes at once
    }
    let d = dead.entry(instance.to_owned()).or_insert_with(|| Dead {
        at: Instant::now(),
        journal: journal.clone(),
        checkpoints: HashMap::new(),
    });
    d.checkpoints.insert(worker, checkpoints.clone());
    Ok((d.journal.clone(), checkpoints))
}

/// The runs worker `w` took after checkpoint `c`, in its order, as far as
/// the journal proves: consecutive entries from the checkpoint on, ending
/// before a hole, a server change, or a batch from outside the topic;
/// entries the worker did not get (reported drops) are left out.
fn prove(
    journal: &[Entry],
    c: &Checkpoint,
    w: usize,
) -> Result<Vec<(u16, u64, u16)>, ResumeRefusal> {
    let mut expected = c.number + 1;
    let after: Vec<&Entry> = journal.iter().filter(|e| e.number >= expected).collect();
    if after.first().is_some_and(|e| e.number > expected) {
        return Err(ResumeRefusal::RecoveryUnproven); // trimmed, or a hole right after
    }
    let dropped: HashSet<u64> = journal
        .iter()
        .flat_map(|e| e.drops.iter())
        .filter(|(_, mask)| mask & (1 << w.min(63)) != 0)
        .map(|(n, _)| *n)
        .collect();
    let mut runs = Vec::new();
    for e in after {
        if e.number != expected || e.flags & (STATE_BEFORE | FOREIGN) != 0 {
            break;
        }
        expected = e.number + 1;
        if !dropped.contains(&e.number) {
            runs.extend_from_slice(&e.runs);
        }
    }
    Ok(runs)
}

type Fetched = (Batch, Batch, Vec<(i32, u64)>);
/// A partition's fetched records and how many the runs took.
type Cursor<'a> = (Vec<(&'a [u8], StreamPos)>, usize);

/// Each partition of the topic from where the checkpoint (or the first
/// run) left it to its high watermark now.
fn read_ranges(
    ctx: &Ctx,
    c: &Checkpoint,
    runs: &[(u16, u64, u16)],
    deadline: Instant,
) -> Result<Ranges, ResumeRefusal> {
    let parts = ctx.topic.partitions(deadline)?;
    let mut ranges = Vec::new();
    for &(p, low, high) in &parts {
        let first_run = runs.iter().find(|r| i32::from(r.0) == p).map(|r| r.1);
        let start = match (after_of(c, p), first_run) {
            (Some(at), _) | (None, Some(at)) => (at >> 16) as i64,
            // The dead worker had taken nothing of a partition that has
            // records: where its stream would have begun is unknown.
            (None, None) if high > low => return Err(ResumeRefusal::RecoveryUnproven),
            (None, None) => continue,
        };
        if start < low {
            return Err(ResumeRefusal::RecoveryRetention);
        }
        if start < high {
            ranges.push((p, start, high));
        }
    }
    let got = ctx.topic.read(&ranges, deadline, ctx.cfg.max_fetch_bytes)?;
    Ok((parts, got))
}

/// Where the checkpoint left partition `p`: positions after this go to the
/// session (None: all of what was read, from the first run on).
fn after_of(c: &Checkpoint, p: i32) -> Option<u64> {
    let p16 = u16::try_from(p).ok()?;
    let i = c.cut.binary_search_by_key(&p16, |x| x.0).ok()?;
    Some(c.cut[i].1)
}

/// The proven records in the runs' order, the rest by partition, the cut.
fn assemble(
    parts: &[(i32, i64, i64)],
    got: &[Batch],
    c: &Checkpoint,
    runs: &[(u16, u64, u16)],
) -> Result<Fetched, ResumeRefusal> {
    // Each partition's records past the checkpoint, with a cursor.
    let mut lists: HashMap<i32, Cursor<'_>> = HashMap::new();
    for b in got {
        for (body, pos) in b.records() {
            let keep = match after_of(c, pos.partition) {
                Some(at) => pos.at > at,
                None => true,
            };
            if keep {
                lists.entry(pos.partition).or_default().0.push((body, pos));
            }
        }
    }
    let mut proven = Batch::with_capacity(runs.len(), 1 << 16);
    for &(p, first, n) in runs {
        let (list, i) = lists.entry(i32::from(p)).or_default();
        if list.get(*i).is_none_or(|(_, pos)| pos.at != first) || *i + usize::from(n) > list.len() {
            // The topic and the journal disagree (or the fetch fell short).
            return Err(ResumeRefusal::RecoveryUnproven);
        }
        for (body, pos) in &list[*i..*i + usize::from(n)] {
            proven.push_at(body, *pos);
        }
        *i += usize::from(n);
    }
    let mut tail = Batch::with_capacity(64, 1 << 16);
    let mut cut: Vec<(i32, u64)> = Vec::new();
    for &(p, _, _) in parts {
        if let Some((list, i)) = lists.get(&p) {
            for (body, pos) in &list[*i..] {
                tail.push_at(body, *pos);
            }
            if let Some((_, pos)) = list.last() {
                cut.push((p, pos.at));
                continue;
            }
        }
        if let Some(at) = after_of(c, p) {
            cut.push((p, at));
        }
    }
    cut.sort_unstable();
    Ok((proven, tail, cut))
}

/// The first survivor to claim a session of a dead holder (id, the
/// holder's instance) recovers it; the others get op 9 (one round for the
/// whole batch).
fn claim_all<'a>(
    ctx: &mut Ctx,
    sessions: impl Iterator<Item = (&'a shards::SessionId, &'a str)>,
) -> Vec<Result<(), ResumeRefusal>> {
    let mut cmds = Vec::new();
    let ttl = ctx.cfg.ttl_ms.to_string();
    let mut n = 0;
    for (sid, dead) in sessions {
        command(
            &mut cmds,
            &[
                b"SET",
                owner_key(sid, dead).as_bytes(),
                ctx.instance.as_bytes(),
                b"NX",
                b"PX",
                ttl.as_bytes(),
            ],
        );
        n += 1;
    }
    if n == 0 {
        return Vec::new();
    }
    match ctx.store.round(&cmds, n) {
        Ok(replies) => replies
            .into_iter()
            .map(|r| match r {
                Reply::Simple(ok) if ok == "OK" => Ok(()),
                _ => Err(ResumeRefusal::UnknownSession), // another survivor has it
            })
            .collect(),
        Err(_) => vec![Err(ResumeRefusal::RecoveryStoreDown); n],
    }
}
