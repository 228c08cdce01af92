//! The node in its cluster (docs/cluster.md): its claim in the shared
//! registry (a node number, the address of its link, renewed by a
//! heartbeat), the link listener that answers other nodes' hand-off
//! requests (`serve`), and the threads that make ours (`take`). The same
//! listener answers other nodes' portals asking for an application's
//! figures (`figures`: the developer portal's cluster view).
//!
//! Threads: "cluster-beat" (the heartbeat, its own registry connection),
//! "cluster-link" (accepts; one thread per served request, at most
//! `cluster.max_link_connections`), "cluster-take-N"
//! (`cluster.handoff_threads`, 16, each one request at a time, every one
//! under `cluster.handoff_timeout_ms`).
//! "cluster-tls" (with TLS on: re-reads the certificates on SIGHUP and
//! when their files change, checked every `cluster.tls_reload_ms`).
//! None of them is a worker: a frozen peer costs a hand-off thread one
//! deadline, never a worker anything.

use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use registry::Registry;

use crate::config::Cluster as ClusterConfig;
use crate::worker::mail::{TakeJob, WorkerHandle};

pub mod figures;
mod serve;
mod stats;
mod take;
pub mod tls;

pub use stats::ClusterStats;

/// Hand-off threads of this node, at most.
const MAX_TAKE_THREADS: usize = 256;

/// A node that has joined: its number and what to start once workers exist.
pub struct Joined {
    pub node: u16,
    pub link_addr: SocketAddr,
    /// This process (random per start) and the link address others dial.
    pub instance: String,
    pub advertised: String,
    /// The link's TLS (None: plaintext).
    pub tls: tls::Tls,
    listener: TcpListener,
    registry: Arc<dyn Registry>,
    cfg: ClusterConfig,
}

/// Bind the link listener and claim a node number (before the workers
/// start: the number goes into every session id they issue).
pub fn join(cfg: &ClusterConfig, registry: Arc<dyn Registry>) -> Result<Joined, String> {
    let listener = TcpListener::bind(cfg.link_addr)
        .map_err(|e| format!("cluster link {}: {e}", cfg.link_addr))?;
    let link_addr = listener.local_addr().map_err(|e| e.to_string())?;
    let advertised = if cfg.advertise_addr.is_empty() {
        link_addr.to_string()
    } else if cfg.advertise_addr.parse::<SocketAddr>().is_err() {
        // Other nodes dial it with no DNS lookup (which has no deadline).
        return Err(format!(
            "cluster.advertise_addr {:?}: expected an IP address and port, e.g. 10.0.0.5:7070",
            cfg.advertise_addr
        ));
    } else {
        cfg.advertise_addr.clone()
    };
    let tls = match cfg.tls_cert.is_empty() {
        false => Some(Arc::new(tls::LinkTls::load(tls::Paths {
            cert: cfg.tls_cert.clone().into(),
            key: cfg.tls_key.clone().into(),
            ca: cfg.tls_ca.clone().into(),
        })?)),
        true => {
            if !link_addr.ip().is_loopback() {
                // Config validation let it through: allow_plaintext_link.
                tracing::warn!(
                    link = %link_addr,
                    "CLUSTER LINK WITHOUT TLS on a non-loopback address \
                     (cluster.allow_plaintext_link = true): anyone who can reach it can \
                     take sessions and read figures; set cluster.tls_cert/tls_key/tls_ca \
                     (docs/cluster.md)"
                );
            }
            None
        }
    };
    let mut random = [0u8; 16];
    getrandom::fill(&mut random).map_err(|e| format!("random instance id: {e}"))?;
    let instance: String = random.iter().map(|b| format!("{b:02x}")).collect();
    let now = registry::snowflake::unix_ms_now();
    let node = registry
        .register_node(&instance, &advertised, now, cfg.node_ttl_ms)
        .map_err(|e| format!("joining the cluster: {e}"))?;
    tracing::info!(node, link = %advertised, tls = tls.is_some(), "joined the cluster");
    Ok(Joined {
        node,
        link_addr,
        instance,
        advertised,
        tls,
        listener,
        registry,
        cfg: cfg.clone(),
    })
}

/// The running cluster threads; `stop` ends them, then the claim is given up.
pub struct Running {
    threads: Vec<JoinHandle<()>>,
    leave: Box<dyn FnOnce() + Send>,
}

impl Running {
    pub fn join(self) {
        for t in self.threads {
            let _ = t.join();
        }
        (self.leave)();
    }
}

/// Start the heartbeat, the link listener and the hand-off threads.
pub fn start(
    j: Joined,
    workers: Arc<[WorkerHandle]>,
    jobs: crossbeam_channel::Receiver<TakeJob>,
    stats: Arc<ClusterStats>,
    recovery: Option<(
        crossbeam_channel::Sender<crate::worker::mail::RecoverJob>,
        Arc<crate::worker::shared::Fence>,
    )>,
    stop: Arc<AtomicBool>,
    figures: figures::Provider,
) -> Result<Running, String> {
    let (recover, fence) = recovery.unzip();
    stats.node.store(u64::from(j.node), Relaxed);
    let mut threads = Vec::new();
    let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
        std::thread::Builder::new()
            .name(name)
            .spawn(f)
            .map_err(|e| e.to_string())
    };
    {
        let (reg, stats, stop) = (j.registry.clone(), stats.clone(), stop.clone());
        let (node, instance, addr, cfg) = (
            j.node,
            j.instance.clone(),
            j.advertised.clone(),
            j.cfg.clone(),
        );
        let fence = fence.clone();
        threads.push(spawn(
            "cluster-beat".into(),
            Box::new(move || {
                let me = Me {
                    node,
                    instance: &instance,
                    addr: &addr,
                };
                heartbeat(&*reg, &me, &cfg, &stats, fence.as_deref(), &stop)
            }),
        )?);
    }
    {
        let ctx = serve::Ctx {
            node: j.node,
            instance: j.instance.clone(),
            workers: workers.clone(),
            timeout: Duration::from_millis(j.cfg.handoff_timeout_ms),
            max_connections: j.cfg.max_link_connections,
            stats: stats.clone(),
            figures,
            tls: j.tls.clone(),
        };
        let (listener, stop) = (j.listener, stop.clone());
        threads.push(spawn(
            "cluster-link".into(),
            Box::new(move || serve::run(listener, ctx, &stop)),
        )?);
    }
    let resolver = Arc::new(take::Resolver::new(j.registry.clone(), stats.clone()));
    for i in 0..j.cfg.handoff_threads.clamp(1, MAX_TAKE_THREADS) {
        let ctx = take::Ctx {
            node: j.node,
            workers: workers.clone(),
            timeout: Duration::from_millis(j.cfg.handoff_timeout_ms),
            resolver: resolver.clone(),
            stats: stats.clone(),
            recover: recover.clone(),
            tls: j.tls.clone(),
        };
        let (jobs, stop) = (jobs.clone(), stop.clone());
        threads.push(spawn(
            format!("cluster-take-{i}"),
            Box::new(move || take::run(jobs, ctx, &stop)),
        )?);
    }
    if let Some(t) = j.tls.clone() {
        let hup = Arc::new(AtomicBool::new(false));
        signal_hook::flag::register(signal_hook::consts::SIGHUP, hup.clone())
            .map_err(|e| format!("SIGHUP: {e}"))?;
        let (stats, stop) = (stats.clone(), stop.clone());
        let every = Duration::from_millis(j.cfg.tls_reload_ms.max(100));
        threads.push(spawn(
            "cluster-tls".into(),
            Box::new(move || tls::reloader(&t, &hup, every, &stats, &stop)),
        )?);
    }
    let (reg, node, instance) = (j.registry, j.node, j.instance);
    Ok(Running {
        threads,
        leave: Box::new(move || {
            if let Err(e) = reg.leave_node(node, &instance) {
                tracing::warn!(node, error = %e, "leaving the cluster");
            }
        }),
    })
}

/// This node's claim.
struct Me<'a> {
    node: u16,
    instance: &'a str,
    addr: &'a str,
}

fn heartbeat(
    reg: &dyn Registry,
    me: &Me<'_>,
    cfg: &ClusterConfig,
    stats: &ClusterStats,
    fence: Option<&crate::worker::shared::Fence>,
    stop: &AtomicBool,
) {
    let (node, instance, addr) = (me.node, me.instance, me.addr);
    let every = Duration::from_millis(cfg.heartbeat_ms.max(50));
    let fence_up = || {
        if let Some(f) = fence {
            f.epoch.fetch_add(1, Relaxed);
        }
    };
    while !stop.load(Relaxed) {
        sleep_unless(stop, every);
        let now = registry::snowflake::unix_ms_now();
        if fence.is_some_and(|f| f.lapsed(now)) {
            // We were frozen (or the registry unreachable) past our TTL: a
            // survivor may have recovered our sessions. End them (the
            // workers see the epoch) before renewing.
            tracing::error!(node, "cluster: our claim lapsed; fencing our sessions");
            fence_up();
        }
        match reg.heartbeat_node(node, instance, addr, now, cfg.node_ttl_ms) {
            Ok(true) => {
                if let Some(f) = fence {
                    f.last_ok_ms.store(now, Relaxed);
                }
            }
            Ok(false) => {
                fence_up();
                // Our claim lapsed and another node took the number: its
                // sessions and ours share ids' node part now. Ours stay
                // served here; hand-offs for them reach the other node,
                // which knows none of them (op 9). Loud, counted.
                stats.claim_lost.fetch_add(1, Relaxed);
                tracing::error!(node, "cluster: our node number was claimed by another node");
            }
            Err(e) => {
                stats.heartbeat_failures.fetch_add(1, Relaxed);
                tracing::warn!(node, error = %e, "cluster heartbeat failed");
            }
        }
    }
}

/// Sleep `d`, waking early (in 50 ms steps) when `stop` is set.
fn sleep_unless(stop: &AtomicBool, d: Duration) {
    let end = std::time::Instant::now() + d;
    while !stop.load(Relaxed) {
        let left = end.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            break;
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
}
