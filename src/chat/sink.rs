//! Where the chat service's commits go: the node's own ingest pipeline
//! (one node), or the Kafka topic the nodes consume (several nodes: every
//! node, this one included, gets the event back from the topic, so a bot on
//! another node sees it too).
//!
//! Kafka: each record is produced keyed by its server id (the partitioner
//! every producer of the topic uses, `src/ingest/kafka.rs`), with
//! `message.timeout.ms = KAFKA_TIMEOUT`; a turn's records are flushed
//! together and the turn's answers wait for the broker's acknowledgements,
//! at most `KAFKA_TIMEOUT`. A record the broker did not acknowledge in time
//! makes its request a 503 (`gatewayd_chat_commit_failures_total`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::ClientContext;

use crate::ingest::pipeline::Pipeline;

pub const KAFKA_TIMEOUT: Duration = Duration::from_secs(2);

/// The records the broker acknowledged, by their sequence number (unique
/// for the process, so a late acknowledgement never names another turn's).
#[derive(Default)]
struct Acks(Mutex<Vec<u64>>);

#[derive(Clone, Default)]
struct Ctx(Arc<Acks>);

impl ClientContext for Ctx {}

impl ProducerContext for Ctx {
    type DeliveryOpaque = Box<u64>;
    fn delivery(&self, result: &DeliveryResult<'_>, seq: Box<u64>) {
        match result {
            Ok(_) => self.0 .0.lock().expect("acks").push(*seq),
            Err((e, _)) => tracing::warn!(error = %e, "chat service: the broker refused a commit"),
        }
    }
}

pub struct KafkaSink {
    producer: BaseProducer<Ctx>,
    ctx: Ctx,
    topic: String,
    /// This turn's records: (sequence number, request index).
    sent: Vec<(u64, usize)>,
    seq: u64,
}

impl KafkaSink {
    pub fn new(
        brokers: &crate::ingest::brokers::Brokers,
        topic: &str,
    ) -> Result<KafkaSink, String> {
        let ctx = Ctx::default();
        let producer = brokers
            .client()
            .set("linger.ms", "1")
            .set("message.timeout.ms", KAFKA_TIMEOUT.as_millis().to_string())
            // One server's events keep their order even if a request is retried.
            .set("max.in.flight.requests.per.connection", "1")
            .create_with_context(ctx.clone())
            .map_err(|e| format!("chat service: Kafka producer for {}: {e}", brokers.list))?;
        Ok(KafkaSink {
            producer,
            ctx,
            topic: topic.to_string(),
            sent: Vec::new(),
            seq: 0,
        })
    }
}

pub enum Sink {
    Local(Pipeline),
    Kafka(Box<KafkaSink>),
}

impl Sink {
    /// Hand one framed record (from `ingest::encode_parts`) of request
    /// `index` of this turn to the stream. False if it cannot even be queued.
    pub fn commit(&mut self, server: u64, frame: &[u8], body: &[u8], index: usize) -> bool {
        match self {
            Sink::Local(p) => {
                p.stats()
                    .records
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                p.push(body);
                if p.is_full() {
                    p.flush();
                }
                true
            }
            Sink::Kafka(k) => {
                let key = server.to_string();
                k.seq += 1;
                let rec = BaseRecord::with_opaque_to(&k.topic, Box::new(k.seq))
                    .key(&key)
                    .payload(frame);
                match k.producer.send(rec) {
                    Ok(()) => {
                        k.sent.push((k.seq, index));
                        true
                    }
                    Err((e, _)) => {
                        tracing::warn!(error = %e, "chat service: could not queue a commit for the broker");
                        false
                    }
                }
            }
        }
    }

    /// The chat thread needs the record just committed (`Pipeline::
    /// tap_this_batch`); Kafka's records reach it from the topic.
    pub fn tap_this(&mut self) {
        if let Sink::Local(p) = self {
            p.tap_this_batch();
        }
    }

    /// End of a turn: make this turn's records visible to the workers (local)
    /// or wait for the broker (Kafka). Returns the requests whose record was
    /// NOT committed.
    pub fn finish(&mut self) -> Vec<usize> {
        match self {
            Sink::Local(p) => {
                p.flush();
                Vec::new()
            }
            Sink::Kafka(k) => {
                if k.sent.is_empty() {
                    k.producer.poll(Duration::ZERO);
                    return Vec::new();
                }
                let _ = k.producer.flush(KAFKA_TIMEOUT);
                let acked = std::mem::take(&mut *k.ctx.0 .0.lock().expect("acks"));
                let failed = k
                    .sent
                    .iter()
                    .filter(|(seq, _)| !acked.contains(seq))
                    .map(|&(_, i)| i)
                    .collect();
                k.sent.clear();
                failed
            }
        }
    }
}
