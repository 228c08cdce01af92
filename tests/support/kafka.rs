//! The chat service's side of a Kafka-protocol topic, for the tests that
//! feed a node from a broker (tests/kafka_ingest.rs, tests/drills.rs): topic
//! creation and a producer that keys each record by its server id and keeps
//! the delivery reports (the records themselves: `support::events`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

/// The broker list, `GATEWAYD_TEST_KAFKA_BROKERS`. The tests that call this
/// are `#[ignore]`d (plain `cargo test` lists them, with the reason); with
/// `--include-ignored` they fail without it.
pub fn brokers() -> String {
    match std::env::var("GATEWAYD_TEST_KAFKA_BROKERS") {
        Ok(b) if !b.trim().is_empty() => b.trim().to_string(),
        _ => panic!(
            "GATEWAYD_TEST_KAFKA_BROKERS is not set: this test needs a Kafka-protocol broker. \
             scripts/test-all.sh starts one; by hand: eval \"$(scripts/tansu-test-broker.sh start)\""
        ),
    }
}

/// Partitions per test topic: several, so keying by server id matters.
pub const PARTITIONS: i32 = 3;

pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{:08x}",
        std::process::id(),
        getrandom::u32().unwrap()
    )
}

/// A fresh topic with PARTITIONS partitions.
pub fn create_topic(brokers: &str) -> String {
    create_topic_with(brokers, &[])
}

/// The same, with extra librdkafka settings (e.g. TLS's).
pub fn create_topic_with(brokers: &str, extra: &[(&str, &str)]) -> String {
    let name = unique("gatewayd-it");
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", brokers);
    for (k, v) in extra {
        cfg.set(*k, *v);
    }
    let admin: AdminClient<DefaultClientContext> = cfg.create().expect("admin client");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(20)));
    let results = rt
        .block_on(admin.create_topics(
            &[NewTopic::new(&name, PARTITIONS, TopicReplication::Fixed(1))],
            &opts,
        ))
        .expect("create_topics");
    for r in results {
        r.unwrap_or_else(|(t, e)| panic!("creating topic {t}: {e}"));
    }
    name
}

/// Delivery reports: how many succeeded and failed, and the ids (the
/// opaque given to `send_tracked`) the broker acknowledged, in report order.
#[derive(Default)]
pub struct Reports {
    pub ok: AtomicU64,
    pub failed: AtomicU64,
    pub acked: Mutex<Vec<u64>>,
}

#[derive(Clone, Default)]
pub struct Ctx(pub Arc<Reports>);

impl ClientContext for Ctx {}

impl ProducerContext for Ctx {
    type DeliveryOpaque = Box<u64>;
    fn delivery(&self, result: &DeliveryResult<'_>, id: Box<u64>) {
        match result {
            Ok(_) => {
                self.0.ok.fetch_add(1, Ordering::Relaxed);
                self.0.acked.lock().unwrap().push(*id);
            }
            Err((e, _)) => {
                eprintln!("delivery of {id} failed: {e}");
                self.0.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// What the chat service would be: a producer keying every record by its
/// server id, so a server's events stay in one partition, in order.
pub struct Kafka {
    pub producer: BaseProducer<Ctx>,
    pub ctx: Ctx,
    pub topic: String,
    pub brokers: String,
}

impl Kafka {
    pub fn new(brokers: &str, topic: &str) -> Kafka {
        Kafka::with(brokers, topic, &[])
    }

    /// With extra librdkafka settings (e.g. `message.timeout.ms`).
    pub fn with(brokers: &str, topic: &str, extra: &[(&str, &str)]) -> Kafka {
        let ctx = Ctx::default();
        let mut cfg = ClientConfig::new();
        cfg.set("bootstrap.servers", brokers)
            .set("linger.ms", "0")
            // Strict order per partition even if a request were retried.
            .set("max.in.flight.requests.per.connection", "1");
        for (k, v) in extra {
            cfg.set(*k, *v);
        }
        let producer = cfg.create_with_context(ctx.clone()).expect("producer");
        Kafka {
            producer,
            ctx,
            topic: topic.to_string(),
            brokers: brokers.to_string(),
        }
    }

    /// One message: key = the server id (decimal), value = `frame`.
    pub fn send(&self, server: u64, frame: &[u8]) {
        self.send_tracked(server, frame, 0);
    }

    /// Like `send`; `id` is listed in `Reports::acked` once the broker has it.
    pub fn send_tracked(&self, server: u64, frame: &[u8], id: u64) {
        let key = server.to_string();
        let mut record = BaseRecord::with_opaque_to(&self.topic, Box::new(id))
            .key(&key)
            .payload(frame);
        loop {
            match self.producer.send(record) {
                Ok(()) => return,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    self.producer.poll(Duration::from_millis(10));
                    record = back;
                }
                Err((e, _)) => panic!("produce: {e}"),
            }
        }
    }

    /// Wait until the broker has acknowledged everything sent.
    pub fn flush(&self) {
        self.producer
            .flush(Duration::from_secs(20))
            .expect("flush the producer");
        assert_eq!(
            self.ctx.0.failed.load(Ordering::Relaxed),
            0,
            "every record reached the broker"
        );
    }

    /// The offsets `group` has committed, summed over the topic's partitions.
    pub fn committed(&self, group: &str) -> i64 {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .set("group.id", group)
            .create()
            .expect("offset reader");
        let mut tpl = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            tpl.add_partition(&self.topic, p);
        }
        let got = c
            .committed_offsets(tpl, Duration::from_secs(10))
            .expect("fetch committed offsets");
        got.elements()
            .iter()
            .map(|e| match e.offset() {
                Offset::Offset(o) => o,
                _ => 0,
            })
            .sum()
    }
}
