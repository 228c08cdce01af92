//! The link listener: another node asks for one of our sessions. One
//! request per connection: a fixed-size `Take`, answered with a
//! length-prefixed answer. A request of the same size with the figures
//! magic is another node's portal asking for an application's figures
//! (`figures`).
//!
//! ```text
//!   accept ─(admitted: < MAX_ARRIVING in all, < MAX_ARRIVING_PER_SOURCE
//!   │        from its address; else closed, `crowded`)
//!   ▼
//!   arriving: TLS handshake + the request's bytes, by ONE deadline
//!   │         (handoff_timeout_ms from the accept; `handshake_timeout`)
//!   ▼
//!   served: one of `max_connections` slots (else closed: the asker sees
//!           op 9), the worker's answer and the write by the same deadline
//! ```
//!
//! A slot is taken only by a whole request: connections that trickle or
//! say nothing (a ClientHello a byte every 0.3 s held a slot past 60 s,
//! and 70 of them locked every peer out, issue 41) wait among the
//! arriving, each for one deadline at most, and one source address can
//! hold only `MAX_ARRIVING_PER_SOURCE` of those places.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::figures;
use super::stats::ClusterStats;
use super::tls::{self, Link};
use crate::delivery::moved::{self, Take, DEADLINE_MARGIN_MS, TAKE_LEN};
use crate::delivery::resume::ResumeRefusal;
use crate::worker::mail::{ToWorker, WorkerHandle};
use crate::worker::shared::home_worker;

pub(super) struct Ctx {
    pub node: u16,
    /// This process (signs "I do not hold it": `moved::sign_unknown`).
    pub instance: String,
    pub workers: Arc<[WorkerHandle]>,
    pub timeout: Duration,
    pub max_connections: usize,
    pub stats: Arc<ClusterStats>,
    /// The application figures this node answers with (the portal's).
    pub figures: figures::Provider,
    /// The link's TLS (None: plaintext).
    pub tls: tls::Tls,
}

/// Connections between accept and a whole request, at once: in all, and
/// from one source address. Each holds a thread for at most one deadline.
pub const MAX_ARRIVING: usize = 512;
pub const MAX_ARRIVING_PER_SOURCE: usize = 32;

/// Who is arriving, by source address (entries only while they arrive:
/// at most `MAX_ARRIVING`).
#[derive(Default)]
struct Arriving {
    by_source: Mutex<(usize, HashMap<IpAddr, usize>)>,
}

/// A place among the arriving, given back when dropped.
struct Arrival {
    gate: Arc<Arriving>,
    ip: IpAddr,
}

impl Arriving {
    fn admit(self: &Arc<Self>, ip: IpAddr) -> Option<Arrival> {
        let mut g = self.by_source.lock().unwrap_or_else(|p| p.into_inner());
        let (total, by) = &mut *g;
        let here = by.get(&ip).copied().unwrap_or(0);
        if *total >= MAX_ARRIVING || here >= MAX_ARRIVING_PER_SOURCE {
            return None;
        }
        *total += 1;
        by.insert(ip, here + 1);
        Some(Arrival {
            gate: self.clone(),
            ip,
        })
    }
}

impl Drop for Arrival {
    fn drop(&mut self) {
        let mut g = self
            .gate
            .by_source
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let (total, by) = &mut *g;
        *total -= 1;
        if let Some(n) = by.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                by.remove(&self.ip);
            }
        }
    }
}

pub(super) fn run(listener: TcpListener, ctx: Ctx, stop: &AtomicBool) {
    let ctx = Arc::new(ctx);
    let busy = Arc::new(AtomicUsize::new(0));
    let arriving = Arc::new(Arriving::default());
    if let Err(e) = listener.set_nonblocking(true) {
        tracing::error!(error = %e, "cluster link: cannot poll the listener");
        return;
    }
    while !stop.load(Relaxed) {
        let (stream, peer) = match listener.accept() {
            Ok(a) => a,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                // Wait for the next connection (or 100 ms, to see `stop`).
                // Sleeping a fixed step here instead cost every request up
                // to that step: with the takers one request at a time, it
                // capped a drain's hand-offs (docs/cluster.md, "Throughput").
                wait_readable(&listener, 100);
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cluster link accept");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let deadline = Instant::now() + ctx.timeout;
        let Some(arrival) = arriving.admit(peer.ip()) else {
            ctx.stats.link_refused[tls::Refusal::Crowded.index()].fetch_add(1, Relaxed);
            continue; // dropped: closed
        };
        let (ctx, busy) = (ctx.clone(), busy.clone());
        let spawned = std::thread::Builder::new()
            .name("cluster-serve".into())
            .spawn(move || {
                let Some((stream, req)) = arrive(stream, &ctx, deadline) else {
                    return;
                };
                drop(arrival);
                // A slot only for a whole request.
                if busy.fetch_add(1, Relaxed) >= ctx.max_connections {
                    busy.fetch_sub(1, Relaxed);
                    ctx.stats.served_refused_busy.fetch_add(1, Relaxed);
                    return; // dropped: closed
                }
                serve(stream, &req, &ctx);
                busy.fetch_sub(1, Relaxed);
            });
        if spawned.is_err() {
            tracing::warn!("cluster link: no thread for a request");
        }
    }
}

/// Block until `listener` has a connection waiting, at most `ms`.
fn wait_readable(listener: &TcpListener, ms: i32) {
    use std::os::fd::AsRawFd;
    let mut fds = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, for the duration of the call; the
    // listener's descriptor stays open (we hold `listener`).
    let n = unsafe { libc::poll(&mut fds, 1, ms) };
    if n < 0 {
        // EINTR or worse: do not spin.
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A connection's handshake (with TLS on) and its request, by `deadline`;
/// None: refused (counted) or not whole in time.
fn arrive(stream: TcpStream, ctx: &Ctx, deadline: Instant) -> Option<(Link, [u8; TAKE_LEN])> {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_nodelay(true);
    let peer = stream.peer_addr().ok();
    let mut stream = match tls::accept(ctx.tls.as_deref(), stream, deadline) {
        Ok(s) => s,
        Err(why) => {
            ctx.stats.link_refused[why.index()].fetch_add(1, Relaxed);
            tracing::debug!(
                ?peer,
                reason = why.as_str(),
                "cluster link: connection refused"
            );
            return None;
        }
    };
    let mut req = [0u8; TAKE_LEN];
    match stream.read_exact(&mut req) {
        Ok(()) => Some((stream, req)),
        Err(e) => {
            if matches!(
                e.kind(),
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock
            ) {
                ctx.stats.link_refused[tls::Refusal::HandshakeTimeout.index()]
                    .fetch_add(1, Relaxed);
            }
            None
        }
    }
}

/// A whole request: answered, by the stream's deadline.
fn serve(mut stream: Link, req: &[u8; TAKE_LEN], ctx: &Ctx) {
    let deadline = stream.deadline();
    if &req[..4] == figures::MAGIC {
        let stat = if figures::serve(&mut stream, req, &ctx.figures) {
            &ctx.stats.figures_served
        } else {
            &ctx.stats.figures_refused
        };
        stat.fetch_add(1, Relaxed);
        return;
    }
    let Some(take) = Take::decode(req) else {
        ctx.stats.served_bad_request.fetch_add(1, Relaxed);
        return;
    };
    // The request may have waited in the socket (we were frozen): never
    // wait longer than the taker does.
    let now = registry::snowflake::unix_ms_now();
    if !take.in_time(now) {
        ctx.stats.served_late.fetch_add(1, Relaxed);
        return;
    }
    let left = Duration::from_millis(take.deadline_unix_ms - now - DEADLINE_MARGIN_MS);
    // A deadline far in the future (a broken peer) is ours, not an overflow.
    let deadline = Instant::now()
        .checked_add(left)
        .map_or(deadline, |d| deadline.min(d));
    let mut answer = ask_worker(ctx, take, deadline);
    moved::sign_unknown(&ctx.instance, &mut answer);
    let len = (answer.len() as u32).to_le_bytes();
    if stream
        .write_all(&len)
        .and_then(|_| stream.write_all(&answer))
        .and_then(|_| stream.flush())
        .is_ok()
    {
        ctx.stats.served.fetch_add(1, Relaxed);
    }
}

/// The worker holding the session answers (or we answer why not).
fn ask_worker(ctx: &Ctx, take: Take, deadline: Instant) -> Vec<u8> {
    let refuse = |why| {
        let mut out = Vec::new();
        moved::encode_answer(&Err(why), &mut out);
        out
    };
    let Some(w) = home_worker(&take.session_id, ctx.node, ctx.workers.len()) else {
        return refuse(ResumeRefusal::UnknownSession);
    };
    let (tx, rx) = crossbeam_channel::bounded(1);
    if ctx.workers[w]
        .try_send(ToWorker::HandOut { take, reply: tx })
        .is_err()
    {
        return refuse(ResumeRefusal::NoRoom);
    }
    // If this passes, the receiver is dropped and the worker keeps the session.
    match rx.recv_deadline(deadline) {
        Ok(bytes) => bytes,
        Err(_) => refuse(ResumeRefusal::NodeUnreachable),
    }
}
