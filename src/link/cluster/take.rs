//! Our side of a hand-off: find the node a session id names (its link
//! address from the registry, cached for a second), ask it, and hand the
//! answer to the worker that asked. A session may have moved on from the
//! node that created it (a rolling release moves it more than once): when
//! that node does not have it, or is gone, the other live nodes are asked
//! in turn. Everything from the Resume's arrival to the answer is under
//! one deadline; past it, or on any failure of the link, op 9
//! (`NodeUnreachable`), counted.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use registry::Registry;

use super::stats::ClusterStats;
use super::tls::{self, Link};
use crate::delivery::moved::{self, MAX_FRAME};
use crate::delivery::resume::ResumeRefusal;
use crate::worker::mail::{Moved, TakeJob, ToWorker, WorkerHandle};

/// How long a node's link address is trusted without asking again.
const ADDRESS_TTL: Duration = Duration::from_secs(1);
/// ... and after it failed.
const RETRY: Duration = Duration::from_millis(250);

pub(super) struct Ctx {
    /// Our own node number (never asked).
    pub node: u16,
    pub workers: Arc<[WorkerHandle]>,
    pub timeout: Duration,
    pub resolver: Arc<Resolver>,
    pub stats: Arc<ClusterStats>,
    /// Crash recovery's threads (None: off): a session no live node holds
    /// is asked of them instead of op 9.
    pub recover: Option<crossbeam_channel::Sender<crate::worker::mail::RecoverJob>>,
    /// The link's TLS (None: plaintext).
    pub tls: tls::Tls,
}

/// The live nodes as last read, and when.
type Peers = (Vec<(u16, SocketAddr)>, Option<Instant>);
/// A node's link address as last read (None: no live claim), and until
/// when it is trusted.
type Cached = HashMap<u16, (Option<SocketAddr>, Instant)>;

/// Node number to link address, from the registry (at most 65,535 entries).
pub(super) struct Resolver {
    registry: Arc<dyn Registry>,
    stats: Arc<ClusterStats>,
    cache: Mutex<Cached>,
    /// Every live node, as last read.
    peers: Mutex<Peers>,
}

impl Resolver {
    pub(super) fn new(registry: Arc<dyn Registry>, stats: Arc<ClusterStats>) -> Resolver {
        Resolver {
            registry,
            stats,
            cache: Mutex::new(HashMap::new()),
            peers: Mutex::new((Vec::new(), None)),
        }
    }

    /// Every live node (read at most once a second).
    fn peers(&self) -> Vec<(u16, SocketAddr)> {
        let now = Instant::now();
        let mut p = self.peers.lock().unwrap_or_else(PoisonError::into_inner);
        if p.1.is_some_and(|at| now.duration_since(at) < ADDRESS_TTL) {
            return p.0.clone();
        }
        self.stats.registry_reads.fetch_add(1, Relaxed);
        match self.registry.live_nodes(registry::snowflake::unix_ms_now()) {
            Ok(list) => {
                p.0 = list
                    .into_iter()
                    .filter_map(|(n, a)| Some((n, a.parse().ok()?)))
                    .collect();
                p.1 = Some(now);
            }
            Err(e) => tracing::warn!(error = %e, "cluster: listing the live nodes"),
        }
        p.0.clone()
    }

    fn lookup(&self, node: u16) -> Option<SocketAddr> {
        let now = Instant::now();
        if let Some((addr, until)) = self.lock().get(&node) {
            if now < *until {
                return *addr;
            }
        }
        let unix = registry::snowflake::unix_ms_now();
        self.stats.registry_reads.fetch_add(1, Relaxed);
        let addr = match self.registry.node_link(node, unix) {
            // An IP and port (`join` refuses anything else): no DNS
            // lookup, which would have no deadline.
            Ok(a) => a.and_then(|a| a.parse().ok()),
            Err(e) => {
                tracing::warn!(node, error = %e, "cluster: looking a node up");
                return None; // not cached: the registry may be back soon
            }
        };
        self.lock().insert(node, (addr, now + ADDRESS_TTL));
        addr
    }

    /// The address failed: ask the registry again soon (within `RETRY`),
    /// not at once: a dead node's storm of Resumes would otherwise cost
    /// the registry one call each.
    fn forget(&self, node: u16) {
        if let Some((_, until)) = self.lock().get_mut(&node) {
            *until = (*until).min(Instant::now() + RETRY);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cached> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

pub(super) fn run(jobs: crossbeam_channel::Receiver<TakeJob>, ctx: Ctx, stop: &AtomicBool) {
    while !stop.load(Relaxed) {
        let Ok(job) = jobs.recv_timeout(Duration::from_millis(100)) else {
            continue;
        };
        let deadline = job.since + ctx.timeout;
        let mut said_unknown = Vec::new();
        let mut result = take(&ctx, &job, deadline, &mut said_unknown);
        if let Err(ResumeRefusal::NodeUnreachable) = result {
            ctx.stats.take_unreachable.fetch_add(1, Relaxed);
        }
        if let (Err(ResumeRefusal::NodeUnreachable | ResumeRefusal::UnknownSession), Some(r)) =
            (&result, &ctx.recover)
        {
            // No live node holds it: its node may be dead (recovery waits
            // for that to be proven) and the session in the store.
            let job = crate::worker::mail::RecoverJob {
                worker: job.worker,
                conn: job.conn,
                take: job.take.clone(),
                since: job.since,
                said_unknown,
            };
            match r.try_send(job) {
                Ok(()) => continue,
                Err(_) => result = Err(ResumeRefusal::NoRoom),
            }
        }
        if let Err(why) = &result {
            tracing::debug!(
                session = %job.take.session_id,
                named = job.node,
                %why,
                waited_ms = job.since.elapsed().as_millis() as u64,
                "cluster: hand-off failed"
            );
        }
        let msg = ToWorker::HandedIn {
            conn: job.conn,
            result,
        };
        if let Some(w) = ctx.workers.get(job.worker) {
            if !w.send(msg) {
                tracing::warn!(
                    worker = job.worker,
                    "cluster: worker inbox full, hand-off answer dropped"
                );
            }
        }
    }
}

/// `said_unknown`: the processes that answered that they do not hold it.
fn take(
    ctx: &Ctx,
    job: &TakeJob,
    deadline: Instant,
    said_unknown: &mut Vec<String>,
) -> Result<Box<Moved>, ResumeRefusal> {
    let first = if job.node == ctx.node {
        // The id names us (an earlier process with our number): we looked.
        Err(ResumeRefusal::UnknownSession)
    } else {
        match ctx.resolver.lookup(job.node) {
            Some(addr) => ask(ctx, job, (job.node, addr), deadline, said_unknown),
            None => {
                tracing::debug!(node = job.node, "cluster: the named node has no live claim");
                Err(ResumeRefusal::UnknownSession) // the node is gone
            }
        }
    };
    if !matches!(
        first,
        Err(ResumeRefusal::UnknownSession) | Err(ResumeRefusal::NodeUnreachable)
    ) {
        return first;
    }
    // Not (or no longer) there, or that node is gone: the session may have
    // moved on to another node.
    for (node, addr) in ctx.resolver.peers() {
        if node == job.node || node == ctx.node {
            continue;
        }
        if Instant::now() >= deadline {
            return Err(ResumeRefusal::NodeUnreachable);
        }
        match ask(ctx, job, (node, addr), deadline, said_unknown) {
            Err(ResumeRefusal::UnknownSession) | Err(ResumeRefusal::NodeUnreachable) => {}
            other => return other,
        }
    }
    first
}

/// One node, asked once (an unknown_session signed by the answering
/// process adds it to `said_unknown`).
fn ask(
    ctx: &Ctx,
    job: &TakeJob,
    (node, addr): (u16, SocketAddr),
    deadline: Instant,
    said_unknown: &mut Vec<String>,
) -> Result<Box<Moved>, ResumeRefusal> {
    let unreachable = ResumeRefusal::NodeUnreachable;
    let answer = exchange(
        ctx.tls.as_deref(),
        addr,
        &job.take.encode(),
        job.take.max_bytes,
        deadline,
    );
    let Some(bytes) = answer else {
        ctx.resolver.forget(node);
        return Err(unreachable);
    };
    match moved::decode_answer(&bytes) {
        Some(Ok(m)) if m.identity.session_id == job.take.session_id && m.seq == job.take.seq => {
            Ok(Box::new(m))
        }
        Some(Ok(_)) | None => {
            tracing::warn!(node, "cluster: a malformed hand-off answer");
            Err(unreachable)
        }
        Some(Err(why)) => {
            if let Some(instance) = moved::answering_instance(&bytes) {
                said_unknown.push(instance.to_owned());
            }
            tracing::debug!(node, %why, session = %job.take.session_id, "cluster: refused by the node asked");
            Err(why)
        }
    }
}

/// One request, one answer, all before `deadline` (connect and TLS
/// handshake included); None on any failure.
fn exchange(
    tls: Option<&tls::LinkTls>,
    addr: SocketAddr,
    req: &[u8],
    max_bytes: u64,
    deadline: Instant,
) -> Option<Vec<u8>> {
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
    };
    let mut s = match tls::dial(tls, addr, deadline) {
        Ok(s) => s,
        Err(e) => {
            if tls::is_handshake_error(&e) {
                tracing::warn!(%addr, error = %e, "cluster: TLS handshake with a node failed");
            }
            return None;
        }
    };
    s.tcp().set_write_timeout(Some(left()?)).ok()?;
    s.write_all(req).and_then(|_| s.flush()).ok()?;
    let mut len = [0u8; 4];
    read_by(&mut s, &mut len, &left)?;
    let len = u32::from_le_bytes(len) as usize;
    // The answer holds at most what we said we could take, plus framing.
    let cap = (max_bytes as usize)
        .saturating_mul(2)
        .saturating_add(1 << 20)
        .min(MAX_FRAME);
    if len > cap {
        return None;
    }
    let mut buf = vec![0u8; len];
    read_by(&mut s, &mut buf, &left)?;
    Some(buf)
}

/// Fill `buf`, re-arming the read timeout to what is left of the deadline.
fn read_by(s: &mut Link, buf: &mut [u8], left: &impl Fn() -> Option<Duration>) -> Option<()> {
    let mut got = 0;
    while got < buf.len() {
        s.tcp().set_read_timeout(Some(left()?)).ok()?;
        match s.read(&mut buf[got..]) {
            Ok(0) => return None,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(())
}
