//! One start function per service of a node (`node::run` calls them in
//! order): each takes what it needs of the configuration and the shared
//! parts, starts its thread(s), and says what went wrong in words.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use super::parts::{interaction_node, open_registry, Stats};
use crate::config::Config;
use crate::worker::local_chat::LocalChat;
use crate::worker::mail::*;
use crate::worker::shared::Shared;
use crate::worker::{Worker, WorkerSetup};

/// The gateway's TLS configuration, when a certificate and key are set.
pub(super) fn load_tls(cfg: &Config) -> Result<Option<Arc<rustls::ServerConfig>>, String> {
    match (&cfg.tls.cert, &cfg.tls.key) {
        (Some(c), Some(k)) => net::tls::load_server_config(c, k)
            .map(Some)
            .map_err(|e| format!("TLS: {e}")),
        _ => Ok(None),
    }
}

/// Size the workers (rings per worker, slots per ring) and set up each
/// one's rings, listeners and arena. Port 0 is resolved here, once, so every
/// ring's listener joins one SO_REUSEPORT group: the returned placeholder
/// holds the port until they all exist (drop it then).
pub(super) fn set_up_workers(
    cfg: &mut Config,
    workers: usize,
    nofile: u64,
) -> Result<(Vec<WorkerSetup>, Option<std::net::TcpListener>), String> {
    // Rings per worker: each fixed file table is capped by RLIMIT_NOFILE, so a
    // worker holding more sessions than one table allows opens several.
    let want =
        cfg.limits.max_sessions_per_worker as u64 * (100 + cfg.ring.headroom_percent as u64) / 100;
    let table_cap = net::uring::cap_fixed_files(u32::MAX).max(64) as u64;
    let rings = want.div_ceil(table_cap).max(1) as usize;
    let slots = want.div_ceil(rings as u64).max(64) as u32;
    tracing::info!(
        workers,
        rings_per_worker = rings,
        slots_per_ring = slots,
        nofile,
        "sizing workers"
    );
    let placeholder = if cfg.gateway_addr.port() == 0 {
        let l = net::uring::listen_reuseport(cfg.gateway_addr, 1).map_err(|e| e.to_string())?;
        cfg.gateway_addr = l.local_addr().map_err(|e| e.to_string())?;
        Some(l)
    } else {
        None
    };
    let mut setups = Vec::with_capacity(workers);
    for w in 0..workers {
        let setup = WorkerSetup::new(cfg, rings, slots).map_err(|e| {
            format!(
                "worker {w}: setting up io_uring on {}: {e} (io_uring with direct descriptors is required; \
                 check the kernel version, RLIMIT_NOFILE and RLIMIT_MEMLOCK)",
                cfg.gateway_addr
            )
        })?;
        setups.push(setup);
    }
    Ok((setups, placeholder))
}

/// The registry sidecar: every registry call of the workers, on its own
/// connection; with PostgreSQL, also the revocation listener (NOTIFY).
pub(super) fn start_sidecar(
    cfg: &Config,
    registry: Box<dyn registry::Registry>,
    shared: &Arc<Shared>,
    rx: crossbeam_channel::Receiver<SidecarRequest>,
    stats: &Stats,
    stop: &Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>, String> {
    if !cfg.registry_url.is_empty() && cfg.registry.revocation_poll_ms > 0 {
        // PostgreSQL pushes revocations with NOTIFY: wake the sidecar at once
        // (its periodic poll stays as the backstop for a lost notification).
        crate::link::listen_revocations(
            cfg.registry_url.clone(),
            Duration::from_millis(cfg.registry.timeout_ms),
            shared.sidecar.clone(),
            stop.clone(),
        );
    }
    let mut sidecar = crate::link::Sidecar::new(
        registry,
        shared.workers.clone(),
        shared.gateway_url.clone(),
        cfg.registry.clone(),
        stats.link.clone(),
    );
    sidecar.chat = Some(shared.chat.clone());
    let stop = stop.clone();
    std::thread::Builder::new()
        .name("sidecar".into())
        .spawn(move || sidecar.run(rx, stop))
        .map_err(|e| e.to_string())
}

/// The counters thread: the REST limiter's windows shared with the other
/// nodes through Redis (`rest.redis_url`).
pub(super) fn start_counters(
    cfg: &Config,
    rx: crossbeam_channel::Receiver<crate::api::shared::Delta>,
    handles: &Arc<[WorkerHandle]>,
    redis_stats: &Arc<crate::link::counters::RedisStats>,
    stop: &Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>, String> {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let node_id = format!(
        "{}:{}:{}",
        host.trim(),
        cfg.gateway_addr.port(),
        std::process::id()
    );
    crate::link::resp::refuse_unverified(
        &cfg.rest.redis_url,
        cfg.rest.redis_timeout_ms,
        "rest.redis_url",
    )?;
    let c = crate::link::counters::CountersConfig {
        url: cfg.rest.redis_url.clone(),
        sync_ms: cfg.rest.redis_sync_ms,
        timeout_ms: cfg.rest.redis_timeout_ms,
        nodes: cfg.rest.nodes,
        node_id,
    };
    crate::link::counters::start(c, rx, handles.clone(), redis_stats.clone(), stop.clone())
}

/// Worker `w`'s own chat service: it commits through its own pipeline
/// (its batches tapped for the chat thread, journaled with recovery on).
pub(super) fn worker_chat(
    cfg: &Config,
    shared: &Arc<Shared>,
    stats: &Stats,
    tap: &crossbeam_channel::Sender<Arc<Batch>>,
    journal: &Option<Arc<crate::delivery::recovery::Journal>>,
    node: u16,
    w: usize,
) -> Result<Box<dyn LocalChat>, String> {
    let pipeline = crate::ingest::pipeline::Pipeline::for_worker(
        shared.workers.clone(),
        shared.sidecar.clone(),
        stats.ingest.clone(),
        Some(tap.clone()),
        w,
    )
    .with_journal(journal.clone());
    let ix = crate::chat::interactions::Interactions::new(
        cfg.chat.interaction_token_ttl_ms,
        stats.board.clone(),
        stats.interactions.clone(),
    );
    let workers = shared.workers.len();
    let generator = crate::api::ids::generator(node, workers, w)?;
    Ok(Box::new(crate::chat::Chat::for_worker(
        pipeline,
        ix,
        stats.chat.clone(),
        (w, workers),
        generator,
    )))
}

/// One pinned glommio executor per worker, each running its `Worker`.
pub(super) fn start_workers(
    shared: &Arc<Shared>,
    setups: Vec<WorkerSetup>,
    inboxes: Vec<crossbeam_channel::Receiver<ToWorker>>,
    mut chats: Vec<Option<Box<dyn LocalChat>>>,
) -> Result<Vec<glommio::ExecutorJoinHandle<()>>, String> {
    let workers = setups.len();
    let cores = shards::worker_cores(workers);
    let mut threads = Vec::with_capacity(workers);
    for (w, (setup, inbox)) in setups.into_iter().zip(inboxes).enumerate() {
        let shared = shared.clone();
        let chat = chats[w].take();
        let core = cores.get(w).copied();
        let wake_fd = setup.wake_fd;
        let builder = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .name(&format!("worker-{w}"));
        let handle = builder
            .spawn(move || async move {
                super::panic::mark_worker(w);
                if let Some(core) = core {
                    if !shards::pin_current_thread(core) {
                        tracing::warn!(worker = w, core, "could not pin worker to its core");
                    }
                }
                Worker::new(w, shared, inbox, setup, chat)
                    .run(wake_fd)
                    .await
            })
            .map_err(|e| format!("starting worker {w} (glommio): {e}"))?;
        threads.push(handle);
    }
    Ok(threads)
}

/// The admin port: metrics, health, drain; it reads every service's figures.
pub(super) fn start_admin(
    cfg: &Config,
    shared: &Arc<Shared>,
    stats: &Stats,
    redis: &Arc<crate::link::counters::RedisStats>,
    egress: &Arc<crate::egress::EgressClient>,
) -> Result<crate::ops::admin::Admin, String> {
    crate::ops::admin::start(
        cfg.admin_addr,
        crate::ops::admin::Views {
            shared: shared.clone(),
            ingest: stats.ingest.clone(),
            link: stats.link.clone(),
            chat: stats.chat.clone(),
            redis: redis.clone(),
            board: stats.board.clone(),
            interactions: stats.interactions.clone(),
            endpoint: stats.endpoint.clone(),
            egress: egress.stats.clone(),
            portal: stats.portal.clone(),
            cluster: stats.cluster.clone(),
        },
    )
    .map_err(|e| format!("admin {}: {e}", cfg.admin_addr))
}

/// The Kafka consumer, when `events.kafka_brokers` is set: one group per
/// node unless `events.kafka_group` names one.
pub(super) fn start_kafka(
    cfg: &Config,
    shared: &Arc<Shared>,
    stats: &Stats,
    tap: crate::ingest::pipeline::Tap,
    journal: &Option<Arc<crate::delivery::recovery::Journal>>,
    stop: &Arc<AtomicBool>,
) -> Result<Option<std::thread::JoinHandle<()>>, String> {
    if cfg.events.kafka_brokers.is_empty() {
        return Ok(None);
    }
    let brokers = crate::ingest::brokers::Brokers::new(&cfg.events);
    if brokers.tls() {
        // A certificate that does not verify will not heal by retrying:
        // refuse to start (src/ingest/brokers.rs). A broker that is down is
        // waited for in the background, as without TLS.
        use crate::ingest::brokers::ProbeError;
        let deadline = std::time::Duration::from_millis(cfg.registry.timeout_ms);
        match brokers.probe(&cfg.events.kafka_topic, deadline) {
            Ok(_) => {}
            Err(ProbeError::Unreachable(e)) => tracing::warn!(
                brokers = %brokers.list,
                error = %e,
                "kafka brokers not answering at start; consuming once they do"
            ),
            Err(e) => {
                return Err(format!(
                    "kafka (events.kafka_brokers) at {}: {e}",
                    brokers.list
                ))
            }
        }
    }
    let group = if cfg.events.kafka_group.is_empty() {
        // One group per node: the host name and gateway port tell nodes apart.
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        format!("gatewayd-{}-{}", host.trim(), cfg.gateway_addr.port())
    } else {
        cfg.events.kafka_group.clone()
    };
    crate::ingest::kafka::start(
        crate::ingest::kafka::KafkaConfig {
            brokers,
            topic: cfg.events.kafka_topic.clone(),
            group,
            session_timeout_ms: cfg.events.kafka_session_timeout_ms,
            journal: journal.clone(),
        },
        shared.workers.clone(),
        shared.sidecar.clone(),
        stats.ingest.clone(),
        tap,
        stop.clone(),
    )
    .map(Some)
    .map_err(|e| format!("kafka ingest: {e}"))
}

/// The embedded chat thread: it commits REST actions as events into the
/// same stream (a source of it, like a producer connection; its own
/// batches are tapped only to hand them to per-worker chat services), and
/// holds the open interactions, their store and their HTTP deliveries.
// Each argument is one input of the thread or a part it shares.
#[allow(clippy::too_many_arguments)]
pub(super) fn start_chat_thread(
    cfg: &Config,
    shared: &Arc<Shared>,
    stats: &Stats,
    egress: &Arc<crate::egress::EgressClient>,
    rx: crossbeam_channel::Receiver<ChatRequest>,
    tap: crossbeam_channel::Receiver<Arc<Batch>>,
    own_tap: crate::ingest::pipeline::Tap,
    per_worker: bool,
    node: u16,
    stop: &Arc<AtomicBool>,
) -> Result<std::thread::JoinHandle<()>, String> {
    let workers = shared.workers.len();
    let generator = crate::api::ids::generator(node, workers, workers)?;
    let mut ix = crate::chat::interactions::Interactions::new(
        cfg.chat.interaction_token_ttl_ms,
        stats.board.clone(),
        stats.interactions.clone(),
    );
    ix.store = crate::chat::store::Store::new(
        open_registry(cfg)?,
        interaction_node(cfg),
        stats.interactions.store_failures.clone(),
    );
    ix.deliver = Some(crate::chat::endpoint::start(
        egress.clone(),
        shared.chat.clone(),
        stats.board.clone(),
        stats.endpoint.clone(),
    ));
    crate::chat::start(
        embedded_sink(cfg, shared, &stats.ingest, own_tap)?,
        rx,
        tap,
        shared.workers.clone(),
        stats.chat.clone(),
        ix,
        per_worker.then(|| crate::chat::Forward::new(shared.workers.clone())),
        generator,
        stop.clone(),
    )
    .map_err(|e| format!("starting the chat service: {e}"))
}

/// The developer portal on its own listener, with its own registry
/// connection (None when `portal.enabled` is off).
pub(super) fn start_portal(
    cfg: &Config,
    shared: &Arc<Shared>,
    board: &Arc<crate::chat::interactions::Board>,
    egress: &Arc<crate::egress::EgressClient>,
    ingest_addr: std::net::SocketAddr,
    stats: Arc<crate::portal::PortalStats>,
    link_tls: crate::link::cluster::tls::Tls,
) -> Result<Option<crate::portal::Portal>, String> {
    if !cfg.portal.enabled {
        return Ok(None);
    }
    let views = crate::portal::Views {
        shared: shared.clone(),
        board: board.clone(),
        egress: egress.clone(),
        ingest_addr,
        stats,
        link_tls,
    };
    let secure = cfg.tls_enabled() || cfg.portal.secure_cookie;
    crate::portal::start(cfg.portal.clone(), secure, views, open_registry(cfg)?)
        .map(Some)
        .map_err(|e| format!("portal {}: {e}", cfg.portal.addr))
}

/// Join the cluster when the registry is shared and `cluster.enabled`: its
/// own registry connection, whose calls fit in a hand-off's deadline.
pub(super) fn join_cluster(cfg: &Config) -> Result<Option<crate::link::cluster::Joined>, String> {
    if !cfg.cluster.enabled || cfg.registry_url.is_empty() {
        return Ok(None);
    }
    let ms = cfg
        .registry
        .timeout_ms
        .min(cfg.cluster.handoff_timeout_ms)
        .max(50);
    let reg = registry::PostgresRegistry::connect(&cfg.registry_url, Duration::from_millis(ms))
        .map_err(|e| format!("connecting to the PostgreSQL registry (cluster): {e}"))?;
    crate::link::cluster::join(&cfg.cluster, Arc::new(reg)).map(Some)
}

/// The egress client, and the child egress it talks to unless
/// `egress.remote` names one (stopped when dropped, at shutdown).
pub(super) fn start_egress(
    cfg: &Config,
) -> Result<
    (
        Arc<crate::egress::EgressClient>,
        Option<crate::egress::child::EgressChild>,
    ),
    String,
> {
    use crate::egress::child::EgressChild;
    use crate::egress::client::{Addr, Defaults};
    let e = &cfg.egress;
    let defaults = Defaults {
        connect: Duration::from_millis(e.connect_timeout_ms),
        max_response_bytes: e.max_response_bytes,
    };
    if !e.remote.is_empty() {
        let addr = Addr::parse(&e.remote)?;
        tracing::info!(%addr, "using a remote egress");
        return Ok((
            Arc::new(crate::egress::EgressClient::new(addr, defaults)),
            None,
        ));
    }
    let addr = if e.addr.is_empty() {
        Addr::Unix(cfg.data_path("egress.sock"))
    } else {
        Addr::parse(&e.addr)?
    };
    let exe = if e.program.is_empty() {
        std::env::current_exe().map_err(|err| format!("egress: own executable: {err}"))?
    } else {
        std::path::PathBuf::from(&e.program)
    };
    let child = EgressChild::spawn(&exe, &addr, &e.allow_private_cidrs, e.max_in_flight)?;
    // Where it really listens (`host:0` resolved).
    let addr = child.addr.clone();
    tracing::info!(%addr, pid = child.id(), "egress started");
    Ok((
        Arc::new(crate::egress::EgressClient::new(addr, defaults)),
        Some(child),
    ))
}

/// Where the embedded chat service's commits go: this node's pipeline, or
/// the Kafka topic when the node ingests from Kafka (several nodes: every
/// one, this one too, gets the commit from the topic).
fn embedded_sink(
    cfg: &Config,
    shared: &Shared,
    ingest_stats: &Arc<crate::ingest::pipeline::IngestStats>,
    tap: crate::ingest::pipeline::Tap,
) -> Result<crate::chat::Sink, String> {
    Ok(if cfg.events.kafka_brokers.is_empty() {
        crate::chat::Sink::Local(crate::ingest::pipeline::Pipeline::new(
            shared.workers.clone(),
            shared.sidecar.clone(),
            ingest_stats.clone(),
            tap,
        ))
    } else {
        crate::chat::Sink::Kafka(Box::new(crate::chat::sink::KafkaSink::new(
            &crate::ingest::brokers::Brokers::new(&cfg.events),
            &cfg.events.kafka_topic,
        )?))
    })
}
