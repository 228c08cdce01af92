//! The ingest pipeline, one for both sources (the TCP listener and Kafka):
//! validated record bodies are batched in stream order, each batch is handed
//! to every worker, and a GUILD_STATE record is applied through the registry
//! link, with every worker taking the new permissions, between the batch
//! before it and the batch after it.
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

use crate::worker::mail::{Batch, SidecarRequest, ToWorker, WorkerHandle};

/// Where a copy of every batch goes besides the workers (the chat service
/// learns the messages other producers committed): tried once per batch,
/// skipped when full, so it never slows the stream.
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
}

impl Pipeline {
    pub fn new(
        workers: Arc<[WorkerHandle]>,
        sidecar: Sender<SidecarRequest>,
        stats: Arc<IngestStats>,
        tap: Tap,
    ) -> Pipeline {
        Pipeline {
            workers,
            sidecar,
            stats,
            out: VecDeque::with_capacity(BATCHES_IN_FLIGHT + 1),
            batch: Some(new_batch()),
            since: None,
            tap,
            journal: None,
            state_before: false,
        }
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
        self.batch().len() >= BATCH_RECORDS || self.batch().bytes() >= BATCH_BYTES
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
        if let Some(tap) = &self.tap {
            if tap.try_send(full.clone()).is_err() {
                self.stats.tap_skipped.fetch_add(1, Relaxed);
            }
        }
        let (next, dropped) = send(full, &self.workers, &self.stats, &mut self.out);
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

fn new_batch() -> Arc<Batch> {
    Arc::new(Batch::with_capacity(BATCH_RECORDS, BATCH_BYTES + 64 * 1024))
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
fn send(
    batch: Arc<Batch>,
    workers: &[WorkerHandle],
    stats: &IngestStats,
    out: &mut VecDeque<Arc<Batch>>,
) -> (Arc<Batch>, u64) {
    // Bit per worker that did not get it (63 and above share bit 63).
    let mut dropped = 0u64;
    for (i, w) in workers.iter().enumerate() {
        // A full inbox means a worker is behind: wait a little (backpressure
        // to the producer through TCP) before counting the batch as dropped.
        let deadline = Instant::now() + Duration::from_secs(1);
        let mut msg = ToWorker::Batch(batch.clone());
        loop {
            match w.try_send(msg) {
                Ok(()) => break,
                Err(back) => {
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
        // Workers hold too many: wait for the oldest rather than grow.
        let mut oldest = out.pop_front().expect("non-empty");
        loop {
            if let Some(b) = Arc::get_mut(&mut oldest) {
                b.clear();
                return (oldest, dropped);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    (new_batch(), dropped)
}
