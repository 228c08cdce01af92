//! The link listener: another node asks for one of our sessions. One
//! request per connection: a fixed-size `Take`, answered with a
//! length-prefixed answer. Reads, the worker's answer and the write are
//! each bounded by the hand-off deadline; at most `max_connections` are
//! served at once (the rest are closed at once: the asker sees op 9).
//! A request of the same size with the figures magic is another node's
//! portal asking for an application's figures (`figures`).
//! With TLS on (`tls`), the handshake comes first, under the same deadline;
//! a connection refused there is counted and closed, nothing read.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::figures;
use super::stats::ClusterStats;
use super::tls;
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

pub(super) fn run(listener: TcpListener, ctx: Ctx, stop: &AtomicBool) {
    let ctx = Arc::new(ctx);
    let busy = Arc::new(AtomicUsize::new(0));
    if let Err(e) = listener.set_nonblocking(true) {
        tracing::error!(error = %e, "cluster link: cannot poll the listener");
        return;
    }
    while !stop.load(Relaxed) {
        let stream = match listener.accept() {
            Ok((s, _)) => s,
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
        if busy.fetch_add(1, Relaxed) >= ctx.max_connections {
            busy.fetch_sub(1, Relaxed);
            ctx.stats.served_refused_busy.fetch_add(1, Relaxed);
            continue; // dropped: closed
        }
        let (ctx, busy) = (ctx.clone(), busy.clone());
        let spawned = std::thread::Builder::new()
            .name("cluster-serve".into())
            .spawn(move || {
                serve(stream, &ctx);
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

fn serve(stream: TcpStream, ctx: &Ctx) {
    let deadline = Instant::now() + ctx.timeout;
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_nodelay(true);
    let _ = stream.set_write_timeout(Some(ctx.timeout));
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
            return;
        }
    };
    // What is left of the deadline bounds each read and write.
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1));
    let _ = stream.tcp().set_read_timeout(Some(left));
    let _ = stream.tcp().set_write_timeout(Some(left));
    let mut req = [0u8; TAKE_LEN];
    if stream.read_exact(&mut req).is_err() {
        return;
    }
    if &req[..4] == figures::MAGIC {
        let stat = if figures::serve(&mut stream, &req, &ctx.figures) {
            &ctx.stats.figures_served
        } else {
            &ctx.stats.figures_refused
        };
        stat.fetch_add(1, Relaxed);
        return;
    }
    let Some(take) = Take::decode(&req) else {
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
