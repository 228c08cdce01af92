//! Starting and stopping a node: the registry, the sidecar, one worker per
//! core, the admin endpoint and the demo source, wired by messages.

mod recovery;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use registry::{Registry, SqliteRegistry};

use crate::config::Config;
use crate::worker::mail::*;
use crate::worker::metrics::WorkerMetrics;
use crate::worker::shared::Shared;
use crate::worker::{Worker, WorkerSetup};

/// Sidecar queue bound: identifies and REST calls waiting for the registry.
const SIDECAR_QUEUE: usize = 16_384;
/// Worker inbox bound.
const INBOX: usize = 65_536;

/// The registry, on a connection of its own (the sidecar's; the chat
/// thread's for open interactions).
fn open_registry(cfg: &Config) -> Result<Box<dyn Registry>, String> {
    let timeout = Duration::from_millis(cfg.registry.timeout_ms);
    Ok(if cfg.registry_url.is_empty() {
        let reg = SqliteRegistry::open(&cfg.registry_file())
            .map_err(|e| format!("opening registry {}: {e}", cfg.registry_file().display()))?;
        reg.set_busy_timeout(timeout)
            .map_err(|e| format!("registry busy timeout: {e}"))?;
        Box::new(reg)
    } else {
        Box::new(
            registry::PostgresRegistry::connect(&cfg.registry_url, timeout)
                .map_err(|e| format!("connecting to the PostgreSQL registry: {e}"))?,
        )
    })
}

/// This node's name in the shared interaction state: an embedded registry
/// is this node's alone; a shared one tells nodes apart by host and port.
fn interaction_node(cfg: &Config) -> String {
    if cfg.registry_url.is_empty() {
        return "local".into();
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    format!("{}:{}", host.trim(), cfg.gateway_addr.port())
}

pub fn run(mut cfg: Config) -> Result<(), String> {
    std::fs::create_dir_all(&cfg.data_dir)
        .map_err(|e| format!("creating data dir {}: {e}", cfg.data_dir.display()))?;
    let nofile = net::uring::raise_nofile_limit();
    // Every registry call is bounded by timeout_ms: PostgreSQL by a
    // client-side deadline per call, SQLite by its busy timeout (a writer
    // stuck holding the lock, e.g. a stopped CLI).
    let registry = open_registry(&cfg)?;
    // The demo data is always seeded (it is how a fresh node is usable);
    // `--no-demo` only stops the traffic source.
    let demo_target = seed_demo(&cfg, &*registry)?;
    // Outbound calls to bot-supplied URLs go through the egress process
    // (ADR-11): the node's own child, or a remote one.
    let (egress, egress_child) = start_egress(&cfg)?;

    // The chat service: embedded (None), or the upstream one at this URL.
    let upstream = (!cfg.chat.upstream_url.is_empty())
        .then(|| crate::chat::upstream::Url::parse(&cfg.chat.upstream_url))
        .transpose()?;

    let tls = match (&cfg.tls.cert, &cfg.tls.key) {
        (Some(c), Some(k)) => {
            Some(net::tls::load_server_config(c, k).map_err(|e| format!("TLS: {e}"))?)
        }
        _ => None,
    };
    let workers = cfg.worker_count();
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

    // Port 0 means "any free port": pick it once, so every ring's listener
    // joins the same SO_REUSEPORT group. The placeholder closes once they exist.
    let placeholder = if cfg.gateway_addr.port() == 0 {
        let l = net::uring::listen_reuseport(cfg.gateway_addr, 1).map_err(|e| e.to_string())?;
        cfg.gateway_addr = l.local_addr().map_err(|e| e.to_string())?;
        Some(l)
    } else {
        None
    };
    let mut setups = Vec::with_capacity(workers);
    for w in 0..workers {
        let setup = WorkerSetup::new(&cfg, rings, slots).map_err(|e| {
            format!(
                "worker {w}: setting up io_uring on {}: {e} (io_uring with direct descriptors is required; \
                 check the kernel version, RLIMIT_NOFILE and RLIMIT_MEMLOCK)",
                cfg.gateway_addr
            )
        })?;
        setups.push(setup);
    }
    let mut inboxes = Vec::with_capacity(workers);
    let mut handles = Vec::with_capacity(workers);
    for s in &setups {
        let (tx, rx) = crossbeam_channel::bounded(INBOX);
        handles.push(WorkerHandle {
            tx,
            wake_fd: s.wake_fd,
        });
        inboxes.push(rx);
    }
    let handles: Arc<[WorkerHandle]> = handles.into();
    let (sidecar_tx, sidecar_rx) = crossbeam_channel::bounded(SIDECAR_QUEUE);
    // A shared registry makes a cluster: claim a node number (it goes into
    // every session id) before the workers start (docs/cluster.md).
    let joined = join_cluster(&cfg)?;
    let (take_tx, take_rx) = crossbeam_channel::bounded(cfg.cluster.handoff_queue.max(1));
    let mut recovery = recovery::prepare(&cfg, joined.as_ref(), workers)?;
    let journal = recovery.as_ref().map(|r| r.journal.clone());
    let (chat_tx, chat_rx) = crossbeam_channel::bounded(crate::chat::QUEUE);
    drop(placeholder);
    let gateway_url = cfg.gateway_url();
    let ingest_stats: Arc<crate::ingest::pipeline::IngestStats> = Arc::new(Default::default());
    let link_stats: Arc<crate::link::LinkStats> = Arc::new(Default::default());
    // REST limits shared with other nodes through Redis: the workers' queue
    // to the counters thread (started below, once the inboxes exist).
    let (counters, counter_deltas) = if cfg.rest.redis_url.is_empty() {
        (None, None)
    } else {
        let (outbox, rx) = crate::api::shared::Outbox::new(crate::api::shared::OUTBOX);
        (Some(outbox), Some(rx))
    };
    let redis_stats = Arc::new(crate::link::counters::RedisStats {
        unshared: counters
            .as_ref()
            .map_or_else(Default::default, |o| o.unshared.clone()),
        ..Default::default()
    });
    let shared = Arc::new(Shared {
        gateway_url: gateway_url.clone(),
        tls,
        sidecar: sidecar_tx,
        counters,
        rest_addrs: crate::api::addr::AddressTable::new(cfg.rest.invalid_per_address),
        chat: chat_tx,
        workers: handles.clone(),
        ring_fds: setups
            .iter()
            .map(|s| s.rings.iter().map(|(r, _)| r.ring_fd()).collect())
            .collect(),
        ring_load: setups
            .iter()
            .map(|s| s.rings.iter().map(|_| Default::default()).collect())
            .collect(),
        ring_limits: setups
            .iter()
            .map(|s| {
                s.rings
                    .iter()
                    .map(|(r, _)| crate::worker::admit_limit(r.fixed_files()))
                    .collect()
            })
            .collect(),
        metrics: (0..workers).map(|_| WorkerMetrics::default()).collect(),
        apps: crate::worker::app_stats::AppTable::new(workers),
        ready_workers: AtomicUsize::new(0),
        compress_budget: crate::protocol::compress::Budget::new(cfg.limits.max_compressed_sessions),
        shutting_down: AtomicBool::new(false),
        started: Instant::now(),
        cluster: joined.as_ref().map(|j| crate::worker::shared::ClusterLink {
            node: j.node,
            jobs: take_tx,
        }),
        recovery: recovery.as_mut().and_then(|r| r.link.take()),
        cfg: cfg.clone(),
    });

    let stop = Arc::new(AtomicBool::new(false));
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
        handles.clone(),
        gateway_url.clone(),
        cfg.registry.clone(),
        link_stats.clone(),
    );
    sidecar.chat = Some(shared.chat.clone());
    let sidecar_stop = stop.clone();
    let sidecar_thread = std::thread::Builder::new()
        .name("sidecar".into())
        .spawn(move || sidecar.run(sidecar_rx, sidecar_stop))
        .map_err(|e| e.to_string())?;

    let counters_thread = match counter_deltas {
        None => None,
        Some(rx) => {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            let node_id = format!(
                "{}:{}:{}",
                host.trim(),
                cfg.gateway_addr.port(),
                std::process::id()
            );
            let c = crate::link::counters::CountersConfig {
                url: cfg.rest.redis_url.clone(),
                sync_ms: cfg.rest.redis_sync_ms,
                timeout_ms: cfg.rest.redis_timeout_ms,
                nodes: cfg.rest.nodes,
                node_id,
            };
            let t = crate::link::counters::start(
                c,
                rx,
                handles.clone(),
                redis_stats.clone(),
                stop.clone(),
            )?;
            Some(t)
        }
    };

    let cores = shards::worker_cores(workers);
    let mut worker_threads = Vec::with_capacity(workers);
    for (w, (setup, inbox)) in setups.into_iter().zip(inboxes).enumerate() {
        let shared = shared.clone();
        let core = cores.get(w).copied();
        let wake_fd = setup.wake_fd;
        let builder = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .name(&format!("worker-{w}"));
        let handle = builder
            .spawn(move || async move {
                if let Some(core) = core {
                    if !shards::pin_current_thread(core) {
                        tracing::warn!(worker = w, core, "could not pin worker to its core");
                    }
                }
                Worker::new(w, shared, inbox, setup).run(wake_fd).await
            })
            .map_err(|e| format!("starting worker {w} (glommio): {e}"))?;
        worker_threads.push(handle);
    }

    let cluster_stats: Arc<crate::link::cluster::ClusterStats> = Arc::new(Default::default());
    let interaction_board: Arc<crate::chat::interactions::Board> = Arc::new(Default::default());
    let link_addr = joined.as_ref().map(|j| j.link_addr);
    let to_recover = recovery
        .as_ref()
        .map(|r| (r.jobs.0.clone(), r.fence.clone()));
    let cluster = joined
        .map(|j| {
            crate::link::cluster::start(
                j,
                handles.clone(),
                take_rx,
                cluster_stats.clone(),
                to_recover,
                stop.clone(),
                // Other nodes' portals ask for an application's figures.
                crate::portal::figures_provider(shared.clone(), interaction_board.clone()),
            )
        })
        .transpose()?;
    let recovery_threads = match recovery {
        Some(r) => recovery::start(&cfg, r, handles.clone(), stop.clone())?,
        None => Vec::new(),
    };
    let chat_stats: Arc<crate::chat::ChatStats> = Arc::new(Default::default());
    let interaction_stats: Arc<crate::chat::interactions::InteractionStats> =
        Arc::new(Default::default());
    let endpoint_stats: Arc<crate::chat::endpoint::EndpointStats> = Arc::new(Default::default());
    let portal_stats: Arc<crate::portal::PortalStats> = Arc::new(Default::default());
    let admin = crate::ops::admin::start(
        cfg.admin_addr,
        crate::ops::admin::Views {
            shared: shared.clone(),
            ingest: ingest_stats.clone(),
            link: link_stats.clone(),
            chat: chat_stats.clone(),
            redis: redis_stats.clone(),
            board: interaction_board.clone(),
            interactions: interaction_stats.clone(),
            endpoint: endpoint_stats.clone(),
            egress: egress.stats.clone(),
            portal: portal_stats.clone(),
            cluster: cluster_stats.clone(),
        },
    )
    .map_err(|e| format!("admin {}: {e}", cfg.admin_addr))?;
    // Every other source's batches are also offered to the embedded chat
    // service, so its window holds the messages people (other producers)
    // committed. An upstream chat service keeps its own: no tap.
    let (tap_tx, tap_rx) = crossbeam_channel::bounded(crate::chat::TAP_QUEUE);
    let tap = upstream.is_none().then_some(tap_tx);
    let (ingest_addr, ingest_thread) = crate::ingest::listener::start(
        cfg.events.ingest_addr,
        cfg.events.ingest_max_connections,
        handles.clone(),
        shared.sidecar.clone(),
        ingest_stats.clone(),
        tap.clone(),
        journal.clone(),
        stop.clone(),
    )
    .map_err(|e| e.to_string())?;
    let kafka_thread = if cfg.events.kafka_brokers.is_empty() {
        None
    } else {
        let group = if cfg.events.kafka_group.is_empty() {
            // One group per node: the host name and gateway port tell nodes apart.
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            format!("gatewayd-{}-{}", host.trim(), cfg.gateway_addr.port())
        } else {
            cfg.events.kafka_group.clone()
        };
        Some(
            crate::ingest::kafka::start(
                crate::ingest::kafka::KafkaConfig {
                    brokers: cfg.events.kafka_brokers.clone(),
                    topic: cfg.events.kafka_topic.clone(),
                    group,
                    session_timeout_ms: cfg.events.kafka_session_timeout_ms,
                    journal: journal.clone(),
                },
                handles.clone(),
                shared.sidecar.clone(),
                ingest_stats.clone(),
                tap.clone(),
                stop.clone(),
            )
            .map_err(|e| format!("kafka ingest: {e}"))?,
        )
    };
    drop(tap);
    let chat_thread = match upstream {
        // The upstream chat service commits; the node relays its answers.
        Some(url) => crate::chat::upstream::start(
            crate::chat::upstream::Settings {
                url,
                connections: cfg.chat.upstream_connections,
                timeout: Duration::from_millis(cfg.chat.upstream_timeout_ms),
            },
            chat_rx,
            handles.clone(),
            chat_stats.upstream.clone(),
            stop.clone(),
        ),
        // The embedded one commits REST actions as events into the same
        // stream: it is a source of it, like a producer connection (its own
        // batches are not tapped: it knows them).
        None => crate::chat::start(
            embedded_sink(&cfg, &handles, &shared, &ingest_stats)?,
            chat_rx,
            tap_rx,
            handles.clone(),
            chat_stats.clone(),
            {
                let mut ix = crate::chat::interactions::Interactions::new(
                    cfg.chat.interaction_token_ttl_ms,
                    interaction_board.clone(),
                    interaction_stats.clone(),
                );
                ix.store = crate::chat::store::Store::new(
                    open_registry(&cfg)?,
                    interaction_node(&cfg),
                    interaction_stats.store_failures.clone(),
                );
                ix.deliver = Some(crate::chat::endpoint::start(
                    egress.clone(),
                    shared.chat.clone(),
                    interaction_board.clone(),
                    endpoint_stats.clone(),
                ));
                ix
            },
            stop.clone(),
        ),
    }
    .map_err(|e| format!("starting the chat service: {e}"))?;
    // The demo source is a producer like any other: it writes records to the ingest listener.
    let demo_thread = cfg.demo.enabled.then(|| {
        crate::ingest::demo::start(demo_target, cfg.demo.interval_ms, ingest_addr, stop.clone())
    });

    let portal = start_portal(
        &cfg,
        &shared,
        &interaction_board,
        &egress,
        ingest_addr,
        portal_stats,
    )?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while shared.ready_workers.load(Ordering::SeqCst) < workers {
        if Instant::now() > deadline {
            return Err("workers did not start within 10 s".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let scheme = if cfg.tls_enabled() { "https" } else { "http" };
    println!("gatewayd is up");
    println!("  gateway:  {gateway_url}");
    println!("  REST:     {scheme}://{}/api/v10", cfg.gateway_addr);
    println!("  ingest:   {ingest_addr} (length-prefixed event records)");
    println!("  admin:    http://{}/metrics", admin.addr);
    if let Some(p) = &portal {
        println!("  portal:   http://{}/ (developer portal)", p.addr);
        // Its own file: gatewayd.addrs keeps its three lines (tests and
        // scripts read exactly those).
        std::fs::write(
            cfg.data_path("gatewayd.portal-addr"),
            format!("{}\n", p.addr),
        )
        .map_err(|e| format!("writing gatewayd.portal-addr: {e}"))?;
    }
    // The addresses actually bound (ports chosen by the kernel when the config said 0).
    let mut addrs = format!(
        "gateway={}\nadmin={}\ningest={}\n",
        cfg.gateway_addr, admin.addr, ingest_addr
    );
    if let Some(a) = link_addr {
        addrs.push_str(&format!("link={a}\n"));
    }
    // Written whole, then renamed: a reader never sees half of it.
    let tmp = cfg.data_path("gatewayd.addrs.tmp");
    std::fs::write(&tmp, addrs)
        .and_then(|_| std::fs::rename(&tmp, cfg.data_path("gatewayd.addrs")))
        .map_err(|e| format!("writing gatewayd.addrs: {e}"))?;
    println!(
        "  demo bot token: stored in {}",
        cfg.data_path("demo-token").display()
    );

    // Block until SIGTERM or SIGINT, then drain.
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])
    .map_err(|e| e.to_string())?;
    let sig = signals.forever().next();
    // SIGTERM (an orchestrator, or POST /drain) spreads the reconnects; SIGINT (a person) does not wait.
    let spread_ms = if sig == Some(signal_hook::consts::SIGINT) {
        0
    } else {
        cfg.limits.drain_spread_ms
    };
    tracing::info!(?sig, spread_ms, "draining: op 7 to every session");
    shared.shutting_down.store(true, Ordering::SeqCst);
    for h in handles.iter() {
        h.send(ToWorker::Shutdown { spread_ms });
    }
    for t in worker_threads {
        let _ = t.join();
    }
    stop.store(true, Ordering::SeqCst);
    let _ = sidecar_thread.join();
    if let Some(c) = cluster {
        c.join();
    }
    for t in recovery_threads {
        let _ = t.join();
    }
    let _ = chat_thread.join();
    if let Some(t) = counters_thread {
        let _ = t.join();
    }
    if let Some(t) = demo_thread {
        let _ = t.join();
    }
    let _ = ingest_thread.join();
    if let Some(t) = kafka_thread {
        let _ = t.join();
    }
    drop(admin);
    drop(egress);
    drop(egress_child);
    tracing::info!("stopped");
    Ok(())
}

/// The developer portal on its own listener, with its own registry
/// connection (None when `portal.enabled` is off).
fn start_portal(
    cfg: &Config,
    shared: &Arc<Shared>,
    board: &Arc<crate::chat::interactions::Board>,
    egress: &Arc<crate::egress::EgressClient>,
    ingest_addr: std::net::SocketAddr,
    stats: Arc<crate::portal::PortalStats>,
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
    };
    let secure = cfg.tls_enabled() || cfg.portal.secure_cookie;
    crate::portal::start(cfg.portal.clone(), secure, views, open_registry(cfg)?)
        .map(Some)
        .map_err(|e| format!("portal {}: {e}", cfg.portal.addr))
}

/// Join the cluster when the registry is shared and `cluster.enabled`: its
/// own registry connection, whose calls fit in a hand-off's deadline.
fn join_cluster(cfg: &Config) -> Result<Option<crate::link::cluster::Joined>, String> {
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
fn start_egress(
    cfg: &Config,
) -> Result<
    (
        Arc<crate::egress::EgressClient>,
        Option<crate::egress::client::EgressChild>,
    ),
    String,
> {
    use crate::egress::client::{Addr, Defaults, EgressChild};
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
    handles: &Arc<[WorkerHandle]>,
    shared: &Shared,
    ingest_stats: &Arc<crate::ingest::pipeline::IngestStats>,
) -> Result<crate::chat::Sink, String> {
    Ok(if cfg.events.kafka_brokers.is_empty() {
        crate::chat::Sink::Local(crate::ingest::pipeline::Pipeline::new(
            handles.clone(),
            shared.sidecar.clone(),
            ingest_stats.clone(),
            None,
        ))
    } else {
        crate::chat::Sink::Kafka(Box::new(crate::chat::sink::KafkaSink::new(
            &cfg.events.kafka_brokers,
            &cfg.events.kafka_topic,
        )?))
    })
}

/// Seed the demo application on first start and publish its token.
fn seed_demo(
    cfg: &Config,
    registry: &dyn Registry,
) -> Result<crate::ingest::demo::DemoTarget, String> {
    let token_path = cfg.data_path("demo-token");
    let seed = match registry.seed_demo().map_err(|e| format!("seeding demo data: {e}"))? {
        Some(s) => s,
        None => return Err("demo data is incomplete (demo-bot exists without its server); use a fresh --data-dir or --no-demo".into()),
    };
    match &seed.token {
        Some(token) => {
            write_secret(&token_path, token)
                .map_err(|e| format!("writing {}: {e}", token_path.display()))?;
            println!(
                "demo bot token (shown once, also in {}): {token}",
                token_path.display()
            );
        }
        None if !cfg.registry_url.is_empty() => {
            // A shared registry: another node (or an earlier run) holds the
            // token; resetting it here would end that node's demo sessions.
            if !token_path.exists() {
                println!("demo bot exists in the shared registry; its token is where it was first written (or use `gatewayd registry reset-token`)");
            }
        }
        None => {
            if !token_path.exists() {
                // The token was lost: issue a new one rather than leave the demo unusable.
                let token = registry
                    .reset_token(seed.app.id)
                    .map_err(|e| e.to_string())?;
                write_secret(&token_path, &token)
                    .map_err(|e| format!("writing {}: {e}", token_path.display()))?;
                println!(
                    "demo bot token reset (in {}): {token}",
                    token_path.display()
                );
            }
        }
    }
    let owner = registry
        .server_snapshot(seed.server_id)
        .ok()
        .flatten()
        .map(|s| s.server.owner_id);
    let person = owner
        .and_then(|o| registry.user(o).ok().flatten())
        .map(|u| crate::protocol::guild::person(&u));
    Ok(crate::ingest::demo::DemoTarget {
        server_id: seed.server_id,
        channel_id: seed.general_channel_id,
        bot_user_id: seed.app.bot_user_id,
        person,
    })
}

fn write_secret(path: &std::path::Path, secret: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    writeln!(f, "{secret}")
}
