//! The ingest pipeline, one for both sources (the TCP listener and Kafka):
//! validated record bodies are batched in stream order, each batch is handed
//! to every worker, and a GUILD_STATE record is applied through the registry
//! link, with every worker taking the new permissions, between the batch
//! before it and the batch after it. A worker is woken for a batch only if
//! one of its sessions is in one of the batch's servers
//! (`delivery::interest`); the others find it, in order, at their next
//! wakeup (after `NUDGE_EVERY` such batches at the latest).
//!
//! Bounds: a batch holds at most `BATCH_RECORDS` records or `BATCH_BYTES`
//! bytes before it is sent (or, for a source that polls, once it is
//! `FLUSH_AFTER` old); a source has at most `BATCHES_IN_FLIGHT` batches out
//! at workers before it waits (backpressure to the producer); a full worker
//! inbox is retried for 1 s, then the batch is counted as dropped for that
//! worker. A state change waits at most 5 s for the registry link, then is
//! counted as failed (events keep flowing on the old permissions).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use ingest::DecodeError;

use crate::delivery::interest::NUDGE_EVERY;
use crate::worker::mail::{Batch, SidecarRequest, ToWorker, WorkerHandle};

/// Where a copy of a batch goes besides the workers (the chat service
/// learns the messages other producers committed): tried once per batch,
/// skipped when full, so it never slows the stream. Every batch of a
/// producer or Kafka; of a worker's chat service, only the batches it marks
/// (`tap_this_batch`: what the chat thread's interactions act on).
pub type Tap = Option<Sender<Arc<Batch>>>;

/// Records per batch and bytes per batch before it is sent on.
pub const BATCH_RECORDS: usize = 256;
pub const BATCH_BYTES: usize = 1 << 20;
/// A partial batch waits at most this long for more records (a source that
/// polls, like Kafka; the listener sends what one read brought).
pub const FLUSH_AFTER: Duration = Duration::from_millis(5);
/// Batches a source may have out at workers before it waits.
const BATCHES_IN_FLIGHT: usize = 64;

/// Node-wide ingest counters (read by the admin endpoint).
#[derive(Default)]
pub struct IngestStats {
    pub records: AtomicU64,
    /// Batches handed to the workers (every source).
    pub batches: AtomicU64,
    pub bytes: AtomicU64,
    pub errors: [AtomicU64; DecodeError::COUNT],
    pub connections: AtomicUsize,
    pub refused_connections: AtomicU64,
    pub dropped_batches: AtomicU64,
    pub state_changes: AtomicU64,
    pub state_changes_failed: AtomicU64,
    /// Batches the chat service's tap was too busy to take.
    pub tap_skipped: AtomicU64,
    /// Interaction records handed to the registry link, and those dropped
    /// because its queue was full (the person sees the failure at 3 s).
    pub interactions: AtomicU64,
    pub interactions_dropped: AtomicU64,
}

/// The GUILD_STATE change a record carries, if it is one the registry
/// understands.
pub fn state_change(rec: &ingest::ArchivedRecord) -> Option<(u64, registry::StateChange)> {
    if !rec.is_guild_state() {
        return None;
    }
    crate::ingest::state::parse(rec.event_type(), rec.server_id(), rec.d())
        .map(|c| (rec.server_id(), c))
}

/// One source's pipeline: the batch being filled and the batches out at
/// workers (oldest first), recycled once every worker has let go.
pub struct Pipeline {
    workers: Arc<[WorkerHandle]>,
    sidecar: Sender<SidecarRequest>,
    stats: Arc<IngestStats>,
    out: VecDeque<Arc<Batch>>,
    /// The batch being filled: always `Some` outside `flush`.
    batch: Option<Arc<Batch>>,
    since: Option<Instant>,
    tap: Tap,
    /// Crash recovery's journal (docs/cluster.md): every batch is numbered
    /// and its order appended before it goes out. None: off.
    journal: Option<Arc<crate::delivery::recovery::Journal>>,
    /// A server change was applied since the last batch went out.
    state_before: bool,
    /// `Some(w)`: worker `w`'s own chat service fills this pipeline, on the
    /// worker's thread, which must never wait (`for_worker`).
    worker: Option<usize>,
    /// Bounds of this source: records and bytes per batch, batches out.
    max_records: usize,
    max_bytes: usize,
    max_in_flight: usize,
    /// Every batch goes to the tap (other sources), or only those marked.
    tap_all: bool,
    /// The batch being filled is marked for the tap.
    tap_marked: bool,
    /// Batches queued for each worker without waking it since it was last
    /// woken (`send`, `send_from_worker`).
    quiet: Vec<u32>,
}

/// A worker's chat service's batches: it flushes once per turn, so they
/// are small; at most this many are out before it refuses commits (503).
/// 256 turns: at one request per turn and 10,000 requests/s, 25 ms of a
/// worker not letting go (descheduled on a busy core), where 64 (6 ms)
/// answered steady single-connection load with 503s. Worst case held:
/// 256 x 64 KiB = 16 MiB per worker.
pub const WORKER_BATCH_RECORDS: usize = 256;
pub const WORKER_BATCH_BYTES: usize = 64 << 10;
pub const WORKER_BATCHES_IN_FLIGHT: usize = 256;
/// What a worker's batch is allocated with (it grows to what a turn needs
/// and keeps it): at one request per turn most hold one event.
const WORKER_BATCH_START_BYTES: usize = 8 << 10;

impl Pipeline {
    pub fn new(
        workers: Arc<[WorkerHandle]>,
        sidecar: Sender<SidecarRequest>,
        stats: Arc<IngestStats>,
        tap: Tap,
    ) -> Pipeline {
        let quiet = vec![0; workers.len()];
        Pipeline {
            quiet,
            workers,
            sidecar,
            stats,
            out: VecDeque::with_capacity(BATCHES_IN_FLIGHT + 1),
            batch: Some(new_batch(
                BATCH_RECORDS,
                BATCH_BYTES + 64 * 1024,
                crate::delivery::batch::ORIGIN_OTHER,
            )),
            since: None,
            tap,
            journal: None,
            state_before: false,
            worker: None,
            max_records: BATCH_RECORDS,
            max_bytes: BATCH_BYTES,
            max_in_flight: BATCHES_IN_FLIGHT,
            tap_all: true,
            tap_marked: false,
        }
    }

    /// Worker `me`'s chat service's pipeline. It runs on the worker's
    /// thread, so it never waits: a full inbox drops the batch for that
    /// worker at once (counted in `dropped_batches`, as after the 1 s of
    /// other sources), its own copy goes to its own inbox without a wakeup
    /// (the worker is in its turn), and with `WORKER_BATCHES_IN_FLIGHT`
    /// batches out `busy()` says so and the chat service refuses the
    /// commit (503) instead of waiting for workers to let go.
    pub fn for_worker(
        workers: Arc<[WorkerHandle]>,
        sidecar: Sender<SidecarRequest>,
        stats: Arc<IngestStats>,
        tap: Tap,
        me: usize,
    ) -> Pipeline {
        let origin = crate::delivery::batch::origin_of_worker(me);
        // Every batch it may have out, allocated now: a commit allocates
        // none (tests/no_alloc_worker.rs counts a send's allocations).
        let mut out = VecDeque::with_capacity(WORKER_BATCHES_IN_FLIGHT + 2);
        out.extend(
            (0..WORKER_BATCHES_IN_FLIGHT).map(|_| new_batch(64, WORKER_BATCH_START_BYTES, origin)),
        );
        Pipeline {
            out,
            batch: Some(new_batch(64, WORKER_BATCH_START_BYTES, origin)),
            worker: Some(me),
            max_records: WORKER_BATCH_RECORDS,
            max_bytes: WORKER_BATCH_BYTES,
            max_in_flight: WORKER_BATCHES_IN_FLIGHT,
            tap_all: false,
            ..Pipeline::new(workers, sidecar, stats, tap)
        }
    }

    /// Offer the batch being filled to the tap when it goes out (a worker's
    /// pipeline taps only the batches so marked).
    pub fn tap_this_batch(&mut self) {
        self.tap_marked = true;
    }

    /// A worker's pipeline has as many batches out as it may: the next
    /// commit is refused rather than waited for (`for_worker`).
    pub fn busy(&self) -> bool {
        self.out.len() >= self.max_in_flight && self.out.iter().all(|b| Arc::strong_count(b) > 1)
    }

    /// Journal every batch of this source (`[recovery]` on).
    pub fn with_journal(
        mut self,
        journal: Option<Arc<crate::delivery::recovery::Journal>>,
    ) -> Self {
        self.journal = journal;
        self
    }

    pub fn stats(&self) -> &IngestStats {
        &self.stats
    }

    /// Add a validated record body to the batch being filled.
    pub fn push(&mut self, body: &[u8]) {
        self.push_at(body, crate::delivery::batch::StreamPos::NONE);
    }

    /// The same, with the record's place in its stream (Kafka).
    pub fn push_at(&mut self, body: &[u8], at: crate::delivery::batch::StreamPos) {
        Arc::get_mut(self.batch.as_mut().expect("batch"))
            .expect("unshared until sent")
            .push_at(body, at);
        self.since.get_or_insert_with(Instant::now);
    }

    fn batch(&self) -> &Batch {
        self.batch.as_ref().expect("batch")
    }

    pub fn is_empty(&self) -> bool {
        self.batch().is_empty()
    }

    /// The batch has reached a size bound: send it now.
    pub fn is_full(&self) -> bool {
        self.batch().len() >= self.max_records || self.batch().bytes() >= self.max_bytes
    }

    /// The batch has waited `FLUSH_AFTER` for more records.
    pub fn is_stale(&self) -> bool {
        self.since.is_some_and(|t| t.elapsed() >= FLUSH_AFTER)
    }

    /// Hand the batch being filled (if any) to every worker. True if one was sent.
    pub fn flush(&mut self) -> bool {
        if self.is_empty() {
            return false;
        }
        let mut full = self.batch.take().expect("batch");
        self.stats.batches.fetch_add(1, Relaxed);
        // With a journal: number it, append its order, hand it to every
        // worker, note who missed it, all under the journal's lock.
        let mut journal = self.journal.as_ref().map(|j| j.lock());
        if let Some(j) = journal.as_mut() {
            let flags = if std::mem::take(&mut self.state_before) {
                crate::delivery::recovery::STATE_BEFORE
            } else {
                0
            };
            let b = Arc::get_mut(&mut full).expect("unshared until sent");
            j.write(b, flags, registry::snowflake::unix_ms_now());
        }
        let number = full.number;
        let tapped = self.tap_all || std::mem::take(&mut self.tap_marked);
        if let Some(tap) = self.tap.as_ref().filter(|_| tapped) {
            if tap.try_send(full.clone()).is_err() {
                self.stats.tap_skipped.fetch_add(1, Relaxed);
            }
        }
        let (next, dropped) = match self.worker {
            None => send(
                full,
                &self.workers,
                &self.stats,
                &mut self.out,
                &mut self.quiet,
            ),
            Some(me) => send_from_worker(
                full,
                me,
                &self.workers,
                &self.stats,
                &mut self.out,
                &mut self.quiet,
            ),
        };
        if let Some(j) = journal.as_mut() {
            j.dropped(number, dropped);
        }
        drop(journal);
        self.batch = Some(next);
        self.since = None;
        true
    }

    /// A person's interaction record: to the registry link, which checks
    /// the application and enriches it for the chat service (never fanned
    /// out as it is). True if `rec` was one (the caller skips `push`).
    pub fn interaction(&mut self, rec: &ingest::ArchivedRecord) -> bool {
        if !rec.is_interaction() {
            return false;
        }
        let Some(app_user) = rec.mentions().first().map(|m| m.to_native()) else {
            self.stats.interactions_dropped.fetch_add(1, Relaxed);
            return true;
        };
        let req = SidecarRequest::Interaction(Box::new(crate::worker::mail::RawInteraction {
            server: rec.server_id(),
            channel: rec.channel_id(),
            app_user,
            permissions: rec.permissions(),
            d: rec.d().to_vec(),
        }));
        if self.sidecar.try_send(req).is_ok() {
            self.stats.interactions.fetch_add(1, Relaxed);
        } else {
            self.stats.interactions_dropped.fetch_add(1, Relaxed);
        }
        true
    }

    /// Apply a server change: flush first, so events before it are decided
    /// on the old permissions and events after it on the new ones.
    pub fn apply_state(&mut self, server_id: u64, change: registry::StateChange) {
        self.flush();
        self.state_before = true;
        apply_state(server_id, change, &self.workers, &self.sidecar, &self.stats);
    }

    /// The batches out at workers, oldest first (a batch whose `Arc` is
    /// unique again has been released by every worker).
    pub fn held(&self) -> &VecDeque<Arc<Batch>> {
        &self.out
    }
}

/// Whether worker `w` is woken for `batch`: a session of its may want it,
/// or it was not woken for the `NUDGE_EVERY - 1` batches before (`quiet`).
fn wakes(batch: &Batch, w: &WorkerHandle, quiet: u32) -> bool {
    quiet + 1 >= NUDGE_EVERY || wanted_by(batch, w)
}

/// Whether a record of `batch` may reach a session of worker `w`.
fn wanted_by(batch: &Batch, w: &WorkerHandle) -> bool {
    batch.bodies().any(|body| {
        // SAFETY: the pipeline accepted exactly these bytes.
        let rec = unsafe { ingest::access_trusted(body) };
        w.interest.wants(rec.server_id())
    })
}

/// A batch with room for `records` bodies of `bytes` without growing.
fn new_batch(records: usize, bytes: usize, origin: u32) -> Arc<Batch> {
    let mut b = Batch::with_capacity(records, bytes);
    b.origin = origin;
    Arc::new(b)
}

/// `send` for a worker's own pipeline: never waits. A full inbox drops the
/// batch for that worker at once. The worker's own copy is queued without
/// a wakeup (it is in its turn and drains its inbox before it parks); so is
/// another worker's when none of its sessions is in a server of the batch
/// (`delivery::interest`): it takes the batch, in order, at its next
/// wakeup, and it is woken after `NUDGE_EVERY` such batches so it lets go
/// of them (`quiet` counts them per worker). The batch to fill next is the
/// oldest one every worker let go of (all of them are allocated by
/// `for_worker`), else a new one (only past the bound, which `Pipeline::
/// busy` then refuses).
fn send_from_worker(
    batch: Arc<Batch>,
    me: usize,
    workers: &[WorkerHandle],
    stats: &IngestStats,
    out: &mut VecDeque<Arc<Batch>>,
    quiet: &mut [u32],
) -> (Arc<Batch>, u64) {
    let mut dropped = 0u64;
    for (i, w) in workers.iter().enumerate() {
        let msg = ToWorker::Batch(batch.clone());
        let sent = if i == me {
            w.push_quiet(msg).is_ok()
        } else if wakes(&batch, w, quiet[i]) {
            quiet[i] = 0;
            w.try_send(msg).is_ok()
        } else {
            quiet[i] += 1;
            w.push_quiet(msg).is_ok()
        };
        if !sent {
            stats.dropped_batches.fetch_add(1, Relaxed);
            dropped |= 1 << i.min(63);
        }
    }
    let origin = batch.origin;
    out.push_back(batch);
    // Any batch every worker let go of (the chat thread's tap may still
    // hold an older one than another's).
    if let Some(i) = out.iter().position(|b| Arc::strong_count(b) == 1) {
        let mut b = out.remove(i).expect("position is in range");
        Arc::get_mut(&mut b).expect("unique").clear();
        return (b, dropped);
    }
    (new_batch(64, WORKER_BATCH_START_BYTES, origin), dropped)
}

/// Have the registry apply a server change and every worker take the new
/// permissions, in stream order with the batches around it.
fn apply_state(
    server_id: u64,
    change: registry::StateChange,
    workers: &[WorkerHandle],
    sidecar: &Sender<SidecarRequest>,
    stats: &IngestStats,
) {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let req = SidecarRequest::ApplyState {
        server_id,
        change,
        reply: tx,
    };
    if sidecar.send_timeout(req, Duration::from_secs(5)).is_err() {
        stats.state_changes_failed.fetch_add(1, Relaxed);
        return;
    }
    let Ok(Some(update)) = rx.recv_timeout(Duration::from_secs(5)) else {
        stats.state_changes_failed.fetch_add(1, Relaxed);
        return;
    };
    stats.state_changes.fetch_add(1, Relaxed);
    let update = Arc::new(update);
    for w in workers {
        let mut msg = ToWorker::Access(update.clone());
        let deadline = Instant::now() + Duration::from_secs(1);
        while let Err(back) = w.try_send(msg) {
            if Instant::now() > deadline {
                stats.state_changes_failed.fetch_add(1, Relaxed);
                break;
            }
            msg = back;
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// Hand a batch to every worker; return an empty batch to fill next
/// (a recycled one when all workers are done with it).
/// Hand `batch` to every worker: woken if one of its sessions is in a
/// server of the batch (`delivery::interest`), or after `NUDGE_EVERY`
/// batches queued for it quietly (`quiet` counts them), else queued without
/// a wakeup (taken, in order, at its next one).
fn send(
    batch: Arc<Batch>,
    workers: &[WorkerHandle],
    stats: &IngestStats,
    out: &mut VecDeque<Arc<Batch>>,
    quiet: &mut [u32],
) -> (Arc<Batch>, u64) {
    // Bit per worker that did not get it (63 and above share bit 63).
    let mut dropped = 0u64;
    for (i, w) in workers.iter().enumerate() {
        let wake = wakes(&batch, w, quiet[i]);
        // A full inbox means a worker is behind: wait a little (backpressure
        // to the producer through TCP) before counting the batch as dropped.
        let deadline = Instant::now() + Duration::from_secs(1);
        let mut msg = ToWorker::Batch(batch.clone());
        loop {
            let sent = if wake {
                w.try_send(msg)
            } else {
                w.push_quiet(msg)
            };
            match sent {
                Ok(()) => {
                    quiet[i] = if wake { 0 } else { quiet[i] + 1 };
                    break;
                }
                Err(back) => {
                    // Behind: make sure it is awake to catch up.
                    w.wake();
                    if Instant::now() > deadline {
                        stats.dropped_batches.fetch_add(1, Relaxed);
                        dropped |= 1 << i.min(63);
                        break;
                    }
                    msg = back;
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
    }
    out.push_back(batch);
    // Reuse the oldest batch if every worker has let go of it.
    if let Some(front) = out.front_mut() {
        if let Some(b) = Arc::get_mut(front) {
            b.clear();
            return (out.pop_front().expect("front exists"), dropped);
        }
    }
    if out.len() > BATCHES_IN_FLIGHT {
        // Workers hold too many: wait for the oldest rather than grow (and
        // wake them all: one may hold batches it was not woken for).
        for w in workers {
            w.wake();
        }
        let mut oldest = out.pop_front().expect("non-empty");
        loop {
            if let Some(b) = Arc::get_mut(&mut oldest) {
                b.clear();
                return (oldest, dropped);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    (
        new_batch(
            BATCH_RECORDS,
            BATCH_BYTES + 64 * 1024,
            crate::delivery::batch::ORIGIN_OTHER,
        ),
        dropped,
    )
}
