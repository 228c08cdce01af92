//! A survivor rebuilds a dead node's session (docs/cluster.md, "Crash
//! recovery"): its summary, the dead worker's checkpoints and the node's
//! journal from Redis (the journal and checkpoints of a dead node are
//! final, so they are read once per dead node and cached), the records
//! after the checkpoint from the topic, in the order the journal proves.
//! The worker then replays them (`worker::cluster::recover`).
//!
//! Exactly one owner: we recover only once the holder is dead (its claim
//! lapsed, or the number is held by another process: another link
//! address), waiting for the lapse within `recovery.resume_timeout_ms`;
//! then `SET gwr:o:{id} NX` decides between survivors racing for it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use super::{checkpoint_key, journal_key, owner_key, summary_key, Store};
use crate::config::Recovery as RecoveryConfig;
use crate::delivery::batch::{Batch, StreamPos};
use crate::delivery::recovery::{
    Checkpoint, Entry, Rebuilt, Summary, TopicReader, FOREIGN, STATE_BEFORE, TAINTED,
};
use crate::delivery::resume::ResumeRefusal;
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

/// Topic records fetched for one dead worker's checkpoint are reused this
/// long by the next recoveries from the same checkpoint (a storm reads each
/// range about once per interval; our own log reaches back 2 s, so the cut
/// at their end stays reachable), for at most this many checkpoints.
const FETCH_FOR: Duration = Duration::from_millis(500);
const FETCHES: usize = 64;

/// (partitions with their watermarks, the records read).
type Ranges = (Vec<(i32, i64, i64)>, Vec<Batch>);
type Read = Arc<Ranges>;
/// (dead instance, worker, checkpoint's entry number).
type ReadKey = (String, u16, u64);

#[derive(Default)]
pub(super) struct Cache {
    dead: Mutex<HashMap<String, Dead>>,
    reads: Mutex<HashMap<ReadKey, (Instant, Read)>>,
    /// Processes proven dead (node number, the link address and instance
    /// its summaries name), when proven: the death of a process is final,
    /// so the rest of a storm's recoveries from it ask the registry nothing
    /// (at most `CACHE_NODES`, for `CACHE_FOR`). A new process on the same
    /// number and address has another instance: proven afresh.
    proven: Mutex<HashMap<(u16, String, String), Instant>>,
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
    while !stop.load(Relaxed) {
        let Ok(job) = jobs.recv_timeout(Duration::from_millis(100)) else {
            continue;
        };
        let result = recover(&mut ctx, &job).map(Box::new);
        if let Err(why) = &result {
            tracing::info!(session = %job.take.session_id, %why, "recovery: not recovered");
        }
        if let Some(w) = ctx.workers.get(job.worker) {
            if !w.send(ToWorker::Recovered {
                conn: job.conn,
                result,
            }) {
                tracing::warn!(
                    worker = job.worker,
                    "recovery: worker inbox full, answer dropped"
                );
            }
        }
    }
}

fn store_down<T>(_: T) -> ResumeRefusal {
    ResumeRefusal::RecoveryStoreDown
}

fn get(store: &mut Store, key: &str) -> Result<Option<Vec<u8>>, ResumeRefusal> {
    let mut cmds = Vec::new();
    command(&mut cmds, &[b"GET", key.as_bytes()]);
    match store.round(&cmds, 1).map_err(store_down)?.pop() {
        Some(Reply::Bulk(b)) => Ok(b),
        _ => Err(ResumeRefusal::RecoveryStoreDown),
    }
}

fn recover(ctx: &mut Ctx, job: &RecoverJob) -> Result<Rebuilt, ResumeRefusal> {
    let deadline = job.since + Duration::from_millis(ctx.cfg.resume_timeout_ms);
    if Instant::now() >= deadline {
        // It waited in the queue past its budget (more Resumes than the
        // survivor threads could serve in time): refused without a Redis
        // or topic read, so the jobs behind it still have theirs.
        return Err(ResumeRefusal::NoRoom);
    }
    let sid = job.take.session_id;
    let bytes = get(&mut ctx.store, &summary_key(&sid))?.ok_or(ResumeRefusal::RecoveryNoSummary)?;
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
    let holder = (sid.node(), summary.link.as_str(), summary.instance.as_str());
    wait_dead(ctx, holder, deadline)?;
    let (journal, checkpoints) = dead_records(ctx, &summary.instance, summary.worker)?;
    // The newest checkpoint that holds the session at the summary's
    // version, at or before the client's seq.
    let mut held = false;
    let ckpt = checkpoints
        .iter()
        .filter_map(|c| Some((c, c.session(&sid)?)))
        .inspect(|_| held = true)
        .filter(|(_, (seq, v))| *v & TAINTED == 0 && *v == summary.version && *seq <= job.take.seq)
        .max_by_key(|(c, _)| c.number);
    let Some((ckpt, (checkpoint_seq, _))) = ckpt else {
        return Err(if held {
            ResumeRefusal::RecoveryUnproven
        } else {
            ResumeRefusal::RecoveryNoSummary
        });
    };
    let runs = prove(&journal, ckpt, usize::from(summary.worker))?;
    let key = (summary.instance.clone(), summary.worker, ckpt.number);
    let (proven, tail, cut) = fetch(ctx, key, ckpt, &runs, deadline)?;
    if Instant::now() >= deadline {
        return Err(ResumeRefusal::NodeUnreachable);
    }
    claim(ctx, &sid)?;
    Ok(Rebuilt {
        identity: summary.identity,
        checkpoint_seq,
        client_seq: job.take.seq,
        proven,
        tail,
        cut,
        since_unix_ms: ckpt.unix_ms,
    })
}

/// Wait until node `node` is provably not the process that wrote the
/// summary: no live claim, or a claim with another link address.
fn wait_dead(
    ctx: &Ctx,
    (node, link, instance): (u16, &str, &str),
    deadline: Instant,
) -> Result<(), ResumeRefusal> {
    let key = (node, link.to_owned(), instance.to_owned());
    let lock = || {
        ctx.cache
            .proven
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    };
    {
        let mut proven = lock();
        proven.retain(|_, at| at.elapsed() < CACHE_FOR);
        if proven.contains_key(&key) {
            return Ok(());
        }
    }
    let dead = || {
        let mut proven = lock();
        if proven.len() >= CACHE_NODES {
            proven.clear(); // asked again: a registry call each, no more
        }
        proven.insert(key.clone(), Instant::now());
        Ok(())
    };
    loop {
        let now_ms = registry::snowflake::unix_ms_now();
        ctx.stats.registry_reads.fetch_add(1, Relaxed);
        match ctx.registry.node_link(node, now_ms) {
            Ok(None) => return dead(),
            Ok(Some(addr)) if addr != link => return dead(),
            Ok(Some(_)) => {}
            Err(e) => tracing::debug!(node, error = %e, "recovery: reading the node's claim"),
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
        let mut dead = ctx
            .cache
            .dead
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
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
    let mut dead = ctx
        .cache
        .dead
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
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

/// The records the runs name, in their order, then every later record of
/// each partition (partition by partition), and the cut after them.
fn fetch(
    ctx: &Ctx,
    key: ReadKey,
    c: &Checkpoint,
    runs: &[(u16, u64, u16)],
    deadline: Instant,
) -> Result<Fetched, ResumeRefusal> {
    let cached = {
        let mut reads = ctx
            .cache
            .reads
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        reads.retain(|_, (at, _)| at.elapsed() < FETCH_FOR);
        reads.get(&key).map(|(_, r)| r.clone())
    };
    let read = match cached {
        Some(r) => r,
        None => {
            let r = Arc::new(read_ranges(ctx, c, runs, deadline)?);
            let mut reads = ctx
                .cache
                .reads
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if reads.len() < FETCHES {
                reads.insert(key, (Instant::now(), r.clone()));
            }
            r
        }
    };
    assemble(&read.0, &read.1, c, runs)
}

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

/// The first survivor to claim the session recovers it; the others op 9.
fn claim(ctx: &mut Ctx, sid: &shards::SessionId) -> Result<(), ResumeRefusal> {
    let mut cmds = Vec::new();
    let ttl = ctx.cfg.ttl_ms.to_string();
    command(
        &mut cmds,
        &[
            b"SET",
            owner_key(sid).as_bytes(),
            ctx.instance.as_bytes(),
            b"NX",
            b"PX",
            ttl.as_bytes(),
        ],
    );
    match ctx.store.round(&cmds, 1).map_err(store_down)?.pop() {
        Some(Reply::Simple(ok)) if ok == "OK" => Ok(()),
        _ => Err(ResumeRefusal::UnknownSession), // another survivor has it
    }
}
