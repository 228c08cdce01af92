//! Events from a Kafka-protocol topic (Apache Kafka, Redpanda, Azure Event
//! Hubs, MSK, Tansu), as an alternative or an addition to the embedded
//! ingest listener (`src/ingest_listener.rs`), whose path this mirrors.
//!
//! # Topic and records
//!
//! One topic, partitioned by server id: producers key every message by its
//! server id (any stable bytes, e.g. the decimal id; all producers must use
//! the same partitioner), so all events of one server are in one partition
//! and keep their commit order. Each message value is one framed ingest
//! record, exactly what `ingest::encode_parts` writes (a value holding
//! several whole frames is taken frame by frame). Records are validated once
//! with `ingest::FrameReader`: a malformed one is counted by reason in
//! `gatewayd_ingest_rejected_total` and skipped; a Kafka message boundary
//! always resynchronises, so even a "fatal" framing error only costs that
//! message. Server changes (GUILD_STATE records) are applied exactly as the
//! listener does: the batch so far is handed to the workers, the registry
//! and every worker take the change, then the record follows in the next
//! batch.
//!
//! # Consumer group and offsets
//!
//! One consumer group per node (`--kafka-group`, default
//! `gatewayd-<gateway port>`): every node needs every event of its servers,
//! so nodes must never share a group. A group without committed offsets
//! starts at the beginning of the topic (`auto.offset.reset=earliest`):
//! whatever the topic still retains is delivered, nothing is skipped.
//!
//! Auto-commit is off. Batches are handed to the workers like the
//! listener's; a partition's offset is committed (asynchronously) only once
//! every worker has released the batch holding its last message, i.e. each
//! worker has copied those events into its arena and its sessions' rings
//! (the batch's `Arc` is back to one owner). Messages that carry no deliverable
//! record (malformed, empty) are committed with the batch they were read
//! alongside, or, when no batch is open, once every earlier batch is
//! released.
//!
//! Delivery guarantee: **at-least-once** per node across a node restart or
//! a rebalance: the events after the group's last commit (at most the
//! batches still at the workers plus the one being filled, a few ms worth)
//! are consumed again by the next consumer of the group and delivered as new
//! events with new sequence numbers. It is never at-most-once by design: an
//! offset is not committed before its events reached the workers. The
//! exceptions are the listener's own: a worker whose inbox stays full for
//! 1 s refuses a batch (`gatewayd_ingest_dropped_batches_total`; its
//! sessions miss those events, the offset still advances), and a worker
//! that has shut down releases what it had not delivered (its sessions are
//! gone by then).
//!
//! # Threading
//!
//! The design puts the stream link on the sidecar thread; here the consumer
//! has a dedicated thread ("kafka-ingest") instead, with the same role and
//! the same messages: librdkafka's poll loop blocks, and registry requests
//! (GUILD_STATE) go to the sidecar over its channel exactly like the
//! listener's. The thread stops within ~100 ms of `stop` being set, commits
//! (synchronously) what the workers have released, and leaves the group.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ingest::{DecodeError, FrameReader};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::KafkaResult;
use rdkafka::message::Message;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::ingest::pipeline::{state_change, IngestStats, Pipeline};
use crate::worker::mail::{SidecarRequest, WorkerHandle};

pub struct KafkaConfig {
    pub brokers: crate::ingest::brokers::Brokers,
    pub topic: String,
    pub group: String,
    pub session_timeout_ms: u32,
    /// Crash recovery's journal (None: off).
    pub journal: Option<Arc<crate::delivery::recovery::Journal>>,
}

/// Poll timeout when there is nothing to flush or commit.
const IDLE_POLL: Duration = Duration::from_millis(100);
/// Poll timeout while batches wait to be released (commit promptly).
const INFLIGHT_POLL: Duration = Duration::from_millis(10);

/// Next offset to read, per partition (the value Kafka commits).
type Offsets = Vec<(i32, i64)>;

fn note(offsets: &mut Offsets, partition: i32, next: i64) {
    match offsets.iter_mut().find(|(p, _)| *p == partition) {
        Some((_, o)) => *o = (*o).max(next),
        None => offsets.push((partition, next)),
    }
}

/// Logs rebalances and failed commits.
struct Ctx {
    group: String,
}

impl ClientContext for Ctx {}

impl ConsumerContext for Ctx {
    fn post_rebalance(&self, _consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let parts = |tpl: &TopicPartitionList| {
            tpl.elements()
                .iter()
                .map(|e| format!("{}/{}", e.topic(), e.partition()))
                .collect::<Vec<_>>()
                .join(",")
        };
        match rebalance {
            Rebalance::Assign(tpl) => {
                tracing::info!(group = %self.group, partitions = %parts(tpl), "kafka partitions assigned")
            }
            Rebalance::Revoke(tpl) => {
                tracing::info!(group = %self.group, partitions = %parts(tpl), "kafka partitions revoked")
            }
            Rebalance::Error(e) => {
                tracing::warn!(group = %self.group, error = %e, "kafka rebalance failed")
            }
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        if let Err(e) = result {
            // The next commit carries newer offsets; a lost one only widens
            // what a restart redelivers.
            tracing::warn!(group = %self.group, error = %e, partitions = offsets.count(), "kafka offset commit failed");
        }
    }
}

pub fn start(
    cfg: KafkaConfig,
    workers: Arc<[WorkerHandle]>,
    sidecar: crossbeam_channel::Sender<SidecarRequest>,
    stats: Arc<IngestStats>,
    tap: crate::ingest::pipeline::Tap,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let session_ms = cfg.session_timeout_ms.max(1);
    let consumer: BaseConsumer<Ctx> = cfg
        .brokers
        .client()
        .set("group.id", &cfg.group)
        .set("client.id", "gatewayd")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", session_ms.to_string())
        .set("heartbeat.interval.ms", (session_ms / 3).max(1).to_string())
        .set("enable.partition.eof", "false")
        // Brokers answer a fetch as soon as data arrives; this bounds the
        // wait on any that do not.
        .set("fetch.wait.max.ms", "100")
        // Notice a topic created after the node, or new partitions, soon.
        .set("topic.metadata.refresh.interval.ms", "30000")
        .create_with_context(Ctx {
            group: cfg.group.clone(),
        })
        .map_err(|e| std::io::Error::other(format!("creating the consumer: {e}")))?;
    consumer
        .subscribe(&[cfg.topic.as_str()])
        .map_err(|e| std::io::Error::other(format!("subscribing to {}: {e}", cfg.topic)))?;
    tracing::info!(brokers = %cfg.brokers.list, tls = cfg.brokers.tls(), topic = %cfg.topic, group = %cfg.group, "kafka ingest subscribed");
    std::thread::Builder::new()
        .name("kafka-ingest".into())
        .spawn(move || {
            let mut link = Link {
                topic: cfg.topic,
                pipeline: Pipeline::new(workers, sidecar, stats, tap).with_journal(cfg.journal),
                pending: VecDeque::new(),
                open: Offsets::new(),
                to_commit: Offsets::new(),
            };
            link.run(&consumer, &stop);
            // The workers have stopped: the unsent partial batch is left
            // uncommitted (redelivered after a restart).
            link.release(&consumer, CommitMode::Sync);
            // Dropping the consumer leaves the group (its partitions go to
            // the next member at once instead of after the session timeout).
            drop(consumer);
            tracing::info!("kafka ingest stopped");
        })
}

struct Link {
    topic: String,
    /// Batching and hand-off to the workers; its `held()` batches are the
    /// ones whose offsets wait in `pending`.
    pipeline: Pipeline,
    /// Offsets of each batch the pipeline holds, same order; `None` once committed.
    pending: VecDeque<Option<Offsets>>,
    /// Offsets of the messages read into the batch being filled.
    open: Offsets,
    /// Released, not yet committed.
    to_commit: Offsets,
}

impl Link {
    fn run(&mut self, consumer: &BaseConsumer<Ctx>, stop: &AtomicBool) {
        let mut reader = FrameReader::new();
        let mut last_error_log: Option<Instant> = None;
        while !stop.load(Relaxed) {
            let timeout = if !self.pipeline.is_empty() {
                Duration::ZERO
            } else if self.pending.iter().any(Option::is_some) || !self.open.is_empty() {
                INFLIGHT_POLL
            } else {
                IDLE_POLL
            };
            match consumer.poll(timeout) {
                None => {
                    // Nothing more buffered: deliver what we have now.
                    self.flush();
                    self.release(consumer, CommitMode::Async);
                }
                Some(Err(e)) => {
                    // librdkafka retries by itself (broker down, topic not
                    // yet created, rebalance in progress): log, at most every 10 s.
                    if last_error_log.is_none_or(|t| t.elapsed() > Duration::from_secs(10)) {
                        tracing::warn!(error = %e, topic = %self.topic, "kafka consumer error");
                        last_error_log = Some(Instant::now());
                    }
                    self.flush();
                }
                Some(Ok(msg)) => {
                    let (partition, offset) = (msg.partition(), msg.offset());
                    match msg.payload() {
                        Some(value) => self.take(value, &mut reader, partition, offset),
                        None => self.take(&[], &mut reader, partition, offset),
                    }
                    // Committed with the batch the message's record went to
                    // (a GUILD_STATE record goes to the batch after the flush).
                    note(&mut self.open, partition, offset + 1);
                    if self.pipeline.is_full() || self.pipeline.is_stale() {
                        self.flush();
                        self.release(consumer, CommitMode::Async);
                    }
                }
            }
        }
    }

    /// Validate a message value and add its record(s) to the batch, each
    /// with its place in the topic (partition, offset, frame in the value).
    fn take(&mut self, value: &[u8], reader: &mut FrameReader, partition: i32, offset: i64) {
        let mut frame: u16 = 0;
        self.pipeline
            .stats()
            .bytes
            .fetch_add(value.len() as u64, Relaxed);
        let mut change = None;
        let mut taken = false;
        read_value(reader, value, |item| match item {
            ValueItem::Record(rec) => {
                self.pipeline.stats().records.fetch_add(1, Relaxed);
                taken = self.pipeline.interaction(rec);
                change = state_change(rec);
            }
            ValueItem::Body(_) if taken => {}
            ValueItem::Body(body) => {
                if let Some((server_id, change)) = change.take() {
                    // Our flush first: the batch before the change takes
                    // the offsets read so far.
                    self.flush();
                    self.pipeline.apply_state(server_id, change);
                }
                let at = crate::delivery::batch::StreamPos::kafka(partition, offset, frame);
                frame = frame.saturating_add(1);
                self.pipeline.push_at(body, at);
            }
            ValueItem::Rejected(e) => {
                self.pipeline.stats().errors[e.index()].fetch_add(1, Relaxed);
            }
        });
    }

    /// Hand the batch being filled to every worker, with its offsets.
    fn flush(&mut self) {
        if self.pipeline.is_empty() {
            return;
        }
        self.pending.push_back(Some(std::mem::take(&mut self.open)));
        self.pipeline.flush();
        // The pipeline pops (recycles) the oldest batches once released.
        while self.pending.len() > self.pipeline.held().len() {
            if let Some(Some(offsets)) = self.pending.pop_front() {
                merge(&mut self.to_commit, offsets);
            }
        }
    }

    /// Commit the offsets of every batch the workers have released, oldest
    /// first, stopping at the first still held (commits never skip ahead of
    /// an unreleased batch).
    fn release(&mut self, consumer: &BaseConsumer<Ctx>, mode: CommitMode) {
        let mut released_all = true;
        for (b, p) in self.pipeline.held().iter().zip(self.pending.iter_mut()) {
            if Arc::strong_count(b) != 1 {
                released_all = false;
                break;
            }
            if let Some(offsets) = p.take() {
                merge(&mut self.to_commit, offsets);
            }
        }
        // Messages that produced nothing to deliver (malformed) while no
        // batch is open: due once everything before them is released.
        if released_all && self.pipeline.is_empty() && !self.open.is_empty() {
            let open = std::mem::take(&mut self.open);
            merge(&mut self.to_commit, open);
        }
        if self.to_commit.is_empty() {
            return;
        }
        let mut tpl = TopicPartitionList::new();
        for &(partition, next) in &self.to_commit {
            if let Err(e) = tpl.add_partition_offset(&self.topic, partition, Offset::Offset(next)) {
                tracing::warn!(error = %e, partition, "kafka offset not committable");
            }
        }
        match consumer.commit(&tpl, mode) {
            Ok(()) => self.to_commit.clear(),
            // No assignment (rebalance in progress) or the broker is away:
            // keep them for the next try.
            Err(e) => tracing::debug!(error = %e, "kafka offset commit not sent"),
        }
    }
}

/// What [`read_value`] finds in a message value, in order.
pub enum ValueItem<'a> {
    /// An accepted record (validated once, here)...
    Record(&'a ingest::ArchivedRecord),
    /// ...then its body bytes, to copy into a batch.
    Body(&'a [u8]),
    /// A rejected frame (a fatal one ends the value), an empty value, or a
    /// value ending inside a frame (counted as `Malformed`).
    Rejected(DecodeError),
}

/// Reads one message value frame by frame with `reader`: every frame in it
/// is validated by `ingest::FrameReader`, and the value is its own stream (a
/// bad frame cannot desynchronise the next message). This is all the
/// consumer does with a value's bytes before batching (fuzzed:
/// `fuzz/fuzz_targets/kafka_value.rs`).
pub fn read_value(reader: &mut FrameReader, value: &[u8], mut on: impl FnMut(ValueItem<'_>)) {
    if value.is_empty() {
        on(ValueItem::Rejected(DecodeError::Malformed));
        return;
    }
    reader.reset();
    reader.push(value);
    loop {
        match reader.next() {
            None => break,
            Some(Ok(rec)) => {
                on(ValueItem::Record(rec));
                on(ValueItem::Body(reader.last_body()));
            }
            Some(Err(e)) => {
                on(ValueItem::Rejected(e));
                if e.is_fatal() {
                    break;
                }
            }
        }
    }
    if reader.fatal().is_none() && reader.buffered() > 0 {
        // The value ends inside a frame.
        on(ValueItem::Rejected(DecodeError::Malformed));
    }
}

/// Later offsets win (batches are merged oldest first).
fn merge(into: &mut Offsets, from: Offsets) {
    for (p, o) in from {
        note(into, p, o);
    }
}
