//! Wiring of crash recovery (docs/cluster.md, "Crash recovery"): what the
//! workers get (`RecoveryLink`), the journal the ingest sources share, and
//! the threads started once the workers exist (`link::recovery`).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;
use crate::delivery::moved::MAX_PARTITIONS;
use crate::delivery::recovery::{Journal, SESSION_BYTES};
use crate::worker::mail::{RecoverJob, RecoveryWrite, WorkerHandle};
use crate::worker::shared::{Fence, RecoveryLink, RecoveryStats};

/// Checkpoint buffers per worker (one being written, one being sent).
const BUFFERS: usize = 2;

/// Made before the workers: their link, the journal, and what the
/// threads started after them need.
pub(super) struct Prepared {
    /// Taken into `Shared`.
    pub link: Option<RecoveryLink>,
    pub stats: Arc<RecoveryStats>,
    pub journal: Arc<Journal>,
    pub fence: Arc<Fence>,
    pub jobs: (
        crossbeam_channel::Sender<RecoverJob>,
        crossbeam_channel::Receiver<RecoverJob>,
    ),
    writes: crossbeam_channel::Receiver<RecoveryWrite>,
    pools: Vec<crossbeam_channel::Sender<Vec<u8>>>,
    instance: String,
    node: u16,
}

pub(super) fn prepare(
    cfg: &Config,
    joined: Option<&crate::link::cluster::Joined>,
    workers: usize,
) -> Result<Option<Prepared>, String> {
    if !cfg.recovery.enabled {
        return Ok(None);
    }
    let j = joined.ok_or("[recovery] needs the node to be in a cluster ([cluster] enabled, a PostgreSQL registry_url)")?;
    crate::link::resp::refuse_unverified(
        &cfg.recovery.redis_url,
        cfg.recovery.timeout_ms,
        "recovery.redis_url",
    )?;
    let stats = Arc::new(RecoveryStats::default());
    let fence = Arc::new(Fence {
        epoch: AtomicU64::new(0),
        last_ok_ms: AtomicU64::new(registry::snowflake::unix_ms_now()),
        ttl_ms: cfg.cluster.node_ttl_ms,
    });
    let (writes_tx, writes) = crossbeam_channel::bounded(crate::link::recovery::WRITE_QUEUE);
    // A checkpoint of a full worker, allocated now (the worker never does).
    let blob =
        cfg.limits.max_sessions_per_worker as usize * SESSION_BYTES + MAX_PARTITIONS * 10 + 64;
    let mut pools = Vec::with_capacity(workers);
    let mut returns = Vec::with_capacity(workers);
    for _ in 0..workers {
        let (tx, rx) = crossbeam_channel::bounded(BUFFERS);
        for _ in 0..BUFFERS {
            let _ = tx.try_send(Vec::with_capacity(blob));
        }
        pools.push(rx);
        returns.push(tx);
    }
    let store =
        crate::link::recovery::RedisJournal::new(&cfg.recovery, &j.instance, stats.clone())?;
    Ok(Some(Prepared {
        link: Some(RecoveryLink {
            instance: j.instance.clone(),
            link: j.advertised.clone(),
            writes: writes_tx,
            pools,
            fence: fence.clone(),
            stats: stats.clone(),
        }),
        stats,
        journal: Arc::new(Journal::new(Box::new(store))),
        fence,
        jobs: crossbeam_channel::bounded(crate::link::recovery::job_queue(
            cfg.limits.max_sessions_per_worker,
            workers,
        )),
        writes,
        pools: returns,
        instance: j.instance.clone(),
        node: j.node,
    }))
}

/// Start the writer and survivor threads (after the workers).
pub(super) fn start(
    cfg: &Config,
    p: Prepared,
    workers: Arc<[WorkerHandle]>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> Result<Vec<std::thread::JoinHandle<()>>, String> {
    let ms = cfg.registry.timeout_ms.clamp(50, 1_000);
    let reg = registry::PostgresRegistry::connect(&cfg.registry_url, Duration::from_millis(ms))
        .map_err(|e| format!("connecting to the PostgreSQL registry (recovery): {e}"))?;
    let topic = crate::ingest::replay::TopicReplay {
        brokers: crate::ingest::brokers::Brokers::new(&cfg.events),
        topic: cfg.events.kafka_topic.clone(),
    };
    crate::link::recovery::start(
        crate::link::recovery::Setup {
            cfg: cfg.recovery.clone(),
            instance: p.instance,
            node: p.node,
            workers,
            writes: p.writes,
            pools: p.pools,
            jobs: p.jobs.1,
            registry: Arc::new(reg),
            topic: Arc::new(topic),
            stats: p.stats,
        },
        stop,
    )
}
