//! Starting and stopping a node: the registry, the sidecar, one worker per
//! core, the admin endpoint and the demo source, wired by messages.

pub mod check;
mod demo;
pub mod notify;
mod panic;
mod parts;
mod recovery;
mod services;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::worker::mail::*;
use crate::worker::metrics::WorkerMetrics;
use crate::worker::shared::Shared;
use parts::{open_registry, Stats};

/// Sidecar queue bound: identifies and REST calls waiting for the registry.
const SIDECAR_QUEUE: usize = 16_384;
/// Worker inbox bound.
const INBOX: usize = 65_536;

/// A started service's thread, joined at the end of a drain. Every one of
/// them stops on `stop`, none waits for another: the order is immaterial.
type Join = Box<dyn FnOnce()>;

fn joiner<T: Send + 'static>(t: std::thread::JoinHandle<T>) -> Join {
    Box::new(move || {
        let _ = t.join();
    })
}

/// Start every service of a node, in the order each needs the others, say
/// where they listen, then wait for SIGTERM/SIGINT and drain.
pub fn run(mut cfg: Config) -> Result<notify::Stopped, String> {
    let notifier = notify::Notifier::from_env().map(Arc::new);
    std::fs::create_dir_all(&cfg.data_dir)
        .map_err(|e| format!("creating data dir {}: {e}", cfg.data_dir.display()))?;
    let nofile = net::uring::raise_nofile_limit();
    // Every registry call is bounded by timeout_ms: PostgreSQL by a
    // client-side deadline per call, SQLite by its busy timeout (a writer
    // stuck holding the lock, e.g. a stopped CLI).
    let registry = open_registry(&cfg)?;
    // The demo data (how a fresh node is usable) only with the demo on;
    // with it off, nothing is seeded and an earlier start's is named.
    let demo_target = demo::prepare(&cfg, &*registry)?;
    // Outbound calls to bot-supplied URLs go through the egress process
    // (ADR-11): the node's own child, or a remote one.
    let (egress, egress_child) = services::start_egress(&cfg)?;
    // The chat service: embedded (None), or the upstream one at this URL.
    let upstream = (!cfg.chat.upstream_url.is_empty())
        .then(|| crate::chat::upstream::Url::parse(&cfg.chat.upstream_url))
        .transpose()?
        .map(|url| crate::chat::upstream::Settings {
            url,
            connections: cfg.chat.upstream_connections,
            timeout: Duration::from_millis(cfg.chat.upstream_timeout_ms),
        });
    let workers = cfg.worker_count();
    let (setups, placeholder) = services::set_up_workers(&mut cfg, workers, nofile)?;
    let mut inboxes = Vec::with_capacity(workers);
    let mut handles = Vec::with_capacity(workers);
    for s in &setups {
        let (tx, rx) = crossbeam_channel::bounded(INBOX);
        handles.push(WorkerHandle {
            tx,
            wake_fd: s.wake_fd,
            interest: s.fan.interest(),
        });
        inboxes.push(rx);
    }
    let handles: Arc<[WorkerHandle]> = handles.into();
    let (sidecar_tx, sidecar_rx) = crossbeam_channel::bounded(SIDECAR_QUEUE);
    // A shared registry makes a cluster: claim a node number (it goes into
    // every session id) before the workers start (docs/cluster.md).
    let joined = services::join_cluster(&cfg)?;
    let (take_tx, take_rx) = crossbeam_channel::bounded(cfg.cluster.handoff_queue.max(1));
    let mut recovery = recovery::prepare(&cfg, joined.as_ref(), workers)?;
    let journal = recovery.as_ref().map(|r| r.journal.clone());
    let (chat_tx, chat_rx) = crossbeam_channel::bounded(crate::chat::QUEUE);
    drop(placeholder);
    let stats = Stats::default();
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
        gateway_url: cfg.gateway_url(),
        tls: services::load_tls(&cfg)?,
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
        ring_slots: setups
            .iter()
            .map(|s| s.rings.iter().map(|(r, _)| r.fixed_files()).collect())
            .collect(),
        metrics: (0..workers).map(|_| WorkerMetrics::default()).collect(),
        apps: crate::worker::app_stats::AppTable::new(workers),
        sessions: crate::worker::session_board::SessionBoard::new(
            workers,
            cfg.limits.max_sessions_per_worker as usize,
        ),
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
    // Joined after the workers.
    let mut joins: Vec<Join> = Vec::new();
    joins.push(joiner(services::start_sidecar(
        &cfg, registry, &shared, sidecar_rx, &stats, &stop,
    )?));
    if let Some(rx) = counter_deltas {
        joins.push(joiner(services::start_counters(
            &cfg,
            rx,
            &handles,
            &redis_stats,
            &stop,
        )?));
    }
    // Every other source's batches are also offered to the embedded chat
    // service, so its window holds the messages people (other producers)
    // committed. An upstream chat service keeps its own: no tap.
    let (tap_tx, tap_rx) = crossbeam_channel::bounded(crate::chat::TAP_QUEUE);
    // The embedded chat service on one node's own stream: each worker
    // commits the message actions of its servers itself (docs/rest.md,
    // "Where a request is committed"); with Kafka the chat thread commits
    // everything; with an upstream service each worker forwards its bots'
    // actions from its own connections (docs/chat-upstream.md).
    let per_worker = upstream.is_none() && cfg.events.kafka_brokers.is_empty();
    // Each chat service's snowflake generator is unique in the cluster
    // (api/ids.rs): a node whose block does not fit refuses to start.
    let node_number = joined.as_ref().map_or(0, |j| j.node);
    crate::api::ids::generator(node_number, workers, workers)?;
    let chats = (0..workers)
        .map(|w| match &upstream {
            Some(settings) => {
                let f = crate::chat::upstream::Forwarder::start(
                    settings,
                    w,
                    handles.clone(),
                    stats.chat.upstream.clone(),
                    &stop,
                )
                .map_err(|e| format!("starting worker {w}'s upstream connections: {e}"))?;
                Ok(Some(
                    Box::new(f) as Box<dyn crate::worker::local_chat::LocalChat>
                ))
            }
            None => per_worker
                .then(|| {
                    services::worker_chat(&cfg, &shared, &stats, &tap_tx, &journal, node_number, w)
                })
                .transpose(),
        })
        .collect::<Result<_, String>>()?;
    // SIGTERM and SIGINT are ours from before the workers start: an
    // essential thread that panics sends SIGTERM (panic.rs) and must meet
    // the drain, not the default action.
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ])
    .map_err(|e| e.to_string())?;
    panic::install();
    let worker_threads = services::start_workers(&shared, setups, inboxes, chats)?;

    let link_addr = joined.as_ref().map(|j| j.link_addr);
    let link_tls = joined.as_ref().and_then(|j| j.tls.clone());
    if let Some(j) = joined {
        let to_recover = recovery
            .as_ref()
            .map(|r| (r.jobs.0.clone(), r.fence.clone()));
        let c = crate::link::cluster::start(
            j,
            handles.clone(),
            take_rx,
            stats.cluster.clone(),
            to_recover,
            stop.clone(),
            // Other nodes' portals ask for an application's figures.
            crate::portal::figures_provider(shared.clone(), stats.board.clone()),
        )?;
        joins.push(Box::new(move || c.join()));
    }
    if let Some(r) = recovery {
        for t in recovery::start(&cfg, r, handles.clone(), stop.clone())? {
            joins.push(joiner(t));
        }
    }
    let admin = services::start_admin(&cfg, &shared, &stats, &redis_stats, &egress)?;
    // With per-worker chat services, the chat thread also learns its own
    // batches (interaction responses), to hand them to their servers' workers.
    let own_tap = per_worker.then(|| tap_tx.clone());
    let tap = upstream.is_none().then_some(tap_tx);
    let (ingest_addr, ingest_thread) = crate::ingest::listener::start(
        cfg.events.ingest_addr,
        cfg.events.ingest_max_connections,
        std::time::Duration::from_micros(cfg.events.ingest_gather_us),
        handles.clone(),
        shared.sidecar.clone(),
        stats.ingest.clone(),
        tap.clone(),
        journal.clone(),
        stop.clone(),
    )
    .map_err(|e| e.to_string())?;
    let kafka_thread = services::start_kafka(&cfg, &shared, &stats, tap, &journal, &stop)?;
    let chat_thread = match upstream {
        // The upstream chat service commits; the node relays its answers.
        Some(settings) => crate::chat::upstream::start(
            settings,
            chat_rx,
            handles.clone(),
            stats.chat.upstream.clone(),
            stop.clone(),
        )
        .map_err(|e| format!("starting the chat service: {e}"))?,
        None => services::start_chat_thread(
            &cfg,
            &shared,
            &stats,
            &egress,
            chat_rx,
            tap_rx,
            own_tap,
            per_worker,
            node_number,
            &stop,
        )?,
    };
    joins.push(joiner(chat_thread));
    // The demo source is a producer like any other: it writes records to the ingest listener.
    if let Some(target) = demo_target.filter(|_| cfg.demo.traffic) {
        let t = crate::ingest::demo::start(target, cfg.demo.interval_ms, ingest_addr, stop.clone());
        joins.push(joiner(t));
    }
    joins.push(joiner(ingest_thread));
    joins.extend(kafka_thread.map(joiner));

    let portal = services::start_portal(
        &cfg,
        &shared,
        &stats.board,
        &egress,
        ingest_addr,
        stats.portal.clone(),
        link_tls,
    )?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while shared.ready_workers.load(Ordering::SeqCst) < workers {
        if Instant::now() > deadline {
            return Err("workers did not start within 10 s".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let listening = Listening {
        admin: admin.addr,
        ingest: ingest_addr,
        link: link_addr,
        egress: egress.addr(),
    };
    announce(&cfg, &listening, portal.as_ref())?;
    // Every listener bound, every worker listening, the registry answered.
    notify::notify(&notifier, "READY=1");
    if let Some(t) = notify::start_watchdog(&notifier, shared.clone(), stop.clone())? {
        joins.push(joiner(t));
    }

    // Block until SIGTERM or SIGINT, then drain.
    let sig = signals.forever().next();
    // SIGTERM (an orchestrator, or POST /drain) spreads the reconnects; SIGINT (a person) does not wait.
    let spread_ms = if sig == Some(signal_hook::consts::SIGINT) {
        0
    } else {
        cfg.limits.drain_spread_ms
    };
    let stopped = stopped_by();
    tracing::info!(?sig, ?stopped, spread_ms, "draining: op 7 to every session");
    notify::notify(&notifier, "STOPPING=1");
    shared.shutting_down.store(true, Ordering::SeqCst);
    for h in handles.iter() {
        h.send(ToWorker::Shutdown { spread_ms });
    }
    for t in worker_threads {
        let _ = t.join();
    }
    stop.store(true, Ordering::SeqCst);
    for join in joins {
        join();
    }
    drop(admin);
    drop(egress);
    drop(egress_child);
    // An essential thread that panicked during the drain fails the node too.
    let stopped = stopped_by();
    tracing::info!(?stopped, exit = stopped.code(), "stopped");
    Ok(stopped)
}

/// Why the node is stopping: an essential thread's panic over a drain
/// request over a signal.
fn stopped_by() -> notify::Stopped {
    if let Some(thread) = panic::panicked() {
        notify::Stopped::Panicked(thread)
    } else if crate::ops::admin::DRAIN_REQUESTED.load(Ordering::SeqCst) {
        notify::Stopped::DrainRequested
    } else {
        notify::Stopped::Signal
    }
}

/// The addresses the node's listeners are bound to (the ports the kernel
/// chose where the config said 0), and its egress's.
struct Listening<'a> {
    admin: std::net::SocketAddr,
    ingest: std::net::SocketAddr,
    link: Option<std::net::SocketAddr>,
    egress: &'a crate::egress::client::Addr,
}

/// Say where the node listens: on stdout for a person, and in
/// `gatewayd.addrs` (and `gatewayd.portal-addr`) for tests and scripts.
fn announce(
    cfg: &Config,
    at: &Listening,
    portal: Option<&crate::portal::Portal>,
) -> Result<(), String> {
    let Listening {
        admin,
        ingest,
        link,
        egress,
    } = at;
    let scheme = if cfg.tls_enabled() { "https" } else { "http" };
    println!("gatewayd is up");
    println!("  gateway:  {}", cfg.gateway_url());
    println!("  REST:     {scheme}://{}/api/v10", cfg.gateway_addr);
    println!("  ingest:   {ingest} (length-prefixed event records)");
    println!("  admin:    http://{admin}/metrics");
    if let Some(p) = portal {
        println!("  portal:   http://{}/ (developer portal)", p.addr);
        // Its own file (written before the portal existed; kept for the
        // scripts that read it).
        std::fs::write(
            cfg.data_path("gatewayd.portal-addr"),
            format!("{}\n", p.addr),
        )
        .map_err(|e| format!("writing gatewayd.portal-addr: {e}"))?;
    }
    // The addresses actually bound (ports chosen by the kernel when the
    // config said 0), one `name=address` line each: readers look lines up
    // by name.
    let mut addrs = format!(
        "gateway={}\nadmin={admin}\ningest={ingest}\n",
        cfg.gateway_addr
    );
    if let Some(a) = link {
        addrs.push_str(&format!("link={a}\n"));
    }
    addrs.push_str(&format!("egress={egress}\n"));
    // Written whole, then renamed: a reader never sees half of it.
    let tmp = cfg.data_path("gatewayd.addrs.tmp");
    std::fs::write(&tmp, addrs)
        .and_then(|_| std::fs::rename(&tmp, cfg.data_path("gatewayd.addrs")))
        .map_err(|e| format!("writing gatewayd.addrs: {e}"))?;
    if cfg.demo.enabled {
        println!(
            "  demo bot token: stored in {}",
            cfg.data_path("demo-token").display()
        );
    }
    Ok(())
}
