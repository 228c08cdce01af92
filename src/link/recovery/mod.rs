//! Crash recovery's Redis side (docs/cluster.md, "Crash recovery"): the
//! journal appends of the ingest threads (`RedisJournal`, on their own
//! connection, under `recovery.journal_timeout_ms`), the writer thread
//! that stores the workers' checkpoints and the sessions' summaries
//! ("recovery-write"), and the survivor threads that rebuild a dead node's
//! sessions ("recovery-N", `rebuild.rs`).
//!
//! Keys (all with a TTL): `gwr:j:{instance}` (a list, one entry per batch,
//! trimmed to `recovery.journal_max`), `gwr:c:{instance}:{worker}:{0|1}`
//! (a worker's last two checkpoints, alternating), `gwr:s:{session id}`
//! (a summary), `gwr:o:{session id}:{dead instance}` (a survivor's claim
//! on a session of that dead holder: `SET NX`, the first wins; one per
//! crash, so a session recovered once can be recovered again when its
//! new holder dies).
//!
//! Failure: every round has a deadline; after a failure the store is left
//! alone for `BACKOFF` (journal appends and writes in that time are
//! skipped and counted), so a frozen Redis costs the stream at most one
//! deadline per second. Nothing here ever holds up delivery beyond that.

mod rebuild;
mod store;

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use super::resp::command;
use crate::config::Recovery as RecoveryConfig;
use crate::delivery::recovery::JournalStore;
use crate::worker::mail::{RecoverJob, RecoveryWrite, WorkerHandle};
use crate::worker::shared::RecoveryStats;

pub use crate::delivery::recovery::TopicReader;
use store::Store;
pub use store::{checkpoint_key, journal_key, owner_key, summary_key};

/// Writes the writer thread sends in one round.
const ROUND: usize = 256;
/// Survivor threads (each one Redis round trip at a time: the summary,
/// then the owner claim, per session).
const REBUILD_THREADS: usize = 4;
/// Recovery jobs waiting for a survivor thread (op 9 `no_room` beyond).
/// A crash's Resumes all arrive within the dead node's claim TTL, before
/// any can be served (its death is not proven yet): the queue holds as
/// many as this node can hold sessions (about 150 B each: 7.5 MB at the
/// default 2 x 25,000), at most `MAX_JOB_QUEUE`.
pub fn job_queue(max_sessions_per_worker: u32, workers: usize) -> usize {
    (max_sessions_per_worker as usize)
        .saturating_mul(workers)
        .clamp(1_024, MAX_JOB_QUEUE)
}
const MAX_JOB_QUEUE: usize = 131_072;
/// The writer's queue (checkpoints and summaries).
pub const WRITE_QUEUE: usize = 16_384;

/// The journal of one node in Redis (used by the ingest pipelines).
pub struct RedisJournal {
    store: Store,
    key: Vec<u8>,
    max: String,
    ttl: String,
    cmds: Vec<u8>,
    stats: Arc<RecoveryStats>,
}

impl RedisJournal {
    pub fn new(
        cfg: &RecoveryConfig,
        instance: &str,
        stats: Arc<RecoveryStats>,
    ) -> Result<RedisJournal, String> {
        Ok(RedisJournal {
            store: Store::new(&cfg.redis_url, cfg.journal_timeout_ms)?,
            key: journal_key(instance).into_bytes(),
            max: format!("-{}", cfg.journal_max),
            ttl: cfg.ttl_ms.to_string(),
            cmds: Vec::with_capacity(64 << 10),
            stats,
        })
    }
}

impl JournalStore for RedisJournal {
    fn append(&mut self, entry: &[u8]) -> bool {
        self.cmds.clear();
        command(&mut self.cmds, &[b"RPUSH", &self.key, entry]);
        command(
            &mut self.cmds,
            &[b"LTRIM", &self.key, self.max.as_bytes(), b"-1"],
        );
        command(
            &mut self.cmds,
            &[b"PEXPIRE", &self.key, self.ttl.as_bytes()],
        );
        match self.store.round(&self.cmds, 3) {
            Ok(_) => {
                self.stats.journal_appends.fetch_add(1, Relaxed);
                true
            }
            Err(e) => {
                if self
                    .stats
                    .journal_failures
                    .fetch_add(1, Relaxed)
                    .is_multiple_of(1000)
                {
                    tracing::warn!(error = %e, "recovery: journal append failed (the batch goes on; recovery past it is refused)");
                }
                false
            }
        }
    }
}

/// What the recovery threads need.
pub struct Setup {
    pub cfg: RecoveryConfig,
    pub instance: String,
    pub node: u16,
    pub workers: Arc<[WorkerHandle]>,
    pub writes: crossbeam_channel::Receiver<RecoveryWrite>,
    /// Per worker: where its checkpoint buffers go back.
    pub pools: Vec<crossbeam_channel::Sender<Vec<u8>>>,
    pub jobs: crossbeam_channel::Receiver<RecoverJob>,
    pub registry: Arc<dyn registry::Registry>,
    pub topic: Arc<dyn TopicReader>,
    pub stats: Arc<RecoveryStats>,
}

/// Start the writer and the survivor threads.
pub fn start(s: Setup, stop: Arc<AtomicBool>) -> Result<Vec<std::thread::JoinHandle<()>>, String> {
    let mut threads = Vec::new();
    let mut store = Store::new(&s.cfg.redis_url, s.cfg.timeout_ms)?;
    {
        let w = Writer {
            cfg: s.cfg.clone(),
            instance: s.instance.clone(),
            writes: s.writes,
            pools: s.pools,
            workers: s.workers.clone(),
            stats: s.stats.clone(),
        };
        let stop = stop.clone();
        let t = std::thread::Builder::new()
            .name("recovery-write".into())
            .spawn(move || w.run(&mut store, &stop))
            .map_err(|e| e.to_string())?;
        threads.push(t);
    }
    let cache = Arc::new(rebuild::Cache::default());
    for i in 0..REBUILD_THREADS {
        let ctx = rebuild::Ctx {
            cfg: s.cfg.clone(),
            instance: s.instance.clone(),
            workers: s.workers.clone(),
            registry: s.registry.clone(),
            topic: s.topic.clone(),
            cache: cache.clone(),
            stats: s.stats.clone(),
            // A dead node's journal may be megabytes: its read gets longer
            // (once per dead node; the resume's own budget still bounds it).
            store: Store::new(&s.cfg.redis_url, (s.cfg.timeout_ms * 10).min(2_000))?,
        };
        let (jobs, stop) = (s.jobs.clone(), stop.clone());
        let t = std::thread::Builder::new()
            .name(format!("recovery-{i}"))
            .spawn(move || rebuild::run(ctx, &jobs, &stop))
            .map_err(|e| e.to_string())?;
        threads.push(t);
    }
    Ok(threads)
}

/// The writer thread's part: up to `ROUND` writes per pipelined round.
struct Writer {
    cfg: RecoveryConfig,
    instance: String,
    writes: crossbeam_channel::Receiver<RecoveryWrite>,
    /// Per worker: where its checkpoint buffers go back.
    pools: Vec<crossbeam_channel::Sender<Vec<u8>>>,
    /// Where the dispatches waiting for a taint go once it is written.
    workers: Arc<[WorkerHandle]>,
    stats: Arc<RecoveryStats>,
}

impl Writer {
    fn run(self, store: &mut Store, stop: &AtomicBool) {
        let mut slots = vec![0u8; self.pools.len()];
        let (ttl, summary_ttl) = (
            self.cfg.ttl_ms.to_string(),
            self.cfg.summary_ttl_ms.to_string(),
        );
        let mut cmds = Vec::with_capacity(1 << 20);
        let mut blobs = Vec::new();
        let mut then = Vec::new();
        while !stop.load(Relaxed) {
            let Ok(first) = self.writes.recv_timeout(Duration::from_millis(100)) else {
                continue;
            };
            cmds.clear();
            let mut n = 0;
            let mut next = Some(first);
            while let Some(w) = next.take() {
                match w {
                    RecoveryWrite::Checkpoint { worker, blob } => {
                        let slot = slots.get_mut(worker).map_or(0, |s| {
                            *s ^= 1;
                            *s
                        });
                        let key = checkpoint_key(&self.instance, worker, slot);
                        command(
                            &mut cmds,
                            &[b"SET", key.as_bytes(), &blob, b"PX", ttl.as_bytes()],
                        );
                        blobs.push((worker, blob));
                    }
                    RecoveryWrite::Summary { session_id, bytes } => {
                        set_summary(&mut cmds, &session_id, &bytes, &summary_ttl);
                    }
                    RecoveryWrite::Taint {
                        session_id,
                        bytes,
                        worker,
                        then: msg,
                    } => {
                        set_summary(&mut cmds, &session_id, &bytes, &summary_ttl);
                        then.push((worker, msg));
                    }
                }
                n += 1;
                if n < ROUND {
                    next = self.writes.try_recv().ok();
                }
            }
            if let Err(e) = store.round(&cmds, n) {
                if self
                    .stats
                    .store_failures
                    .fetch_add(1, Relaxed)
                    .is_multiple_of(100)
                {
                    tracing::warn!(error = %e, writes = n, "recovery: writing checkpoints and summaries failed");
                }
            }
            for (worker, blob) in blobs.drain(..) {
                if let Some(p) = self.pools.get(worker) {
                    let _ = p.try_send(blob);
                }
            }
            // Written or not, what waited for a taint goes out now (a
            // failed round is counted above: Redis down costs recovery,
            // never a bot's answer).
            for (worker, msg) in then.drain(..) {
                if let Some(w) = self.workers.get(worker) {
                    if !w.send(msg) {
                        tracing::warn!(
                            worker,
                            "recovery: worker inbox full, a members chunk dropped"
                        );
                    }
                }
            }
        }
    }
}

/// A summary's `SET` with its TTL.
fn set_summary(cmds: &mut Vec<u8>, sid: &shards::SessionId, bytes: &[u8], ttl: &str) {
    let key = summary_key(sid);
    command(
        cmds,
        &[b"SET", key.as_bytes(), bytes, b"PX", ttl.as_bytes()],
    );
}
