//! Events from a Kafka-protocol topic (placeholder until the consumer lands).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::ingest_listener::IngestStats;
use crate::messages::{SidecarRequest, WorkerHandle};

pub struct KafkaConfig {
    pub brokers: String,
    pub topic: String,
    pub group: String,
    pub session_timeout_ms: u32,
}

pub fn start(
    _cfg: KafkaConfig,
    _workers: Arc<[WorkerHandle]>,
    _sidecar: crossbeam_channel::Sender<SidecarRequest>,
    _stats: Arc<IngestStats>,
    _stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    Err(std::io::Error::other("Kafka ingest is not built yet"))
}
