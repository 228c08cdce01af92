//! The ingest listener: producers (the chat service, loadgen, the node's own
//! demo source) write length-prefixed event records (the `ingest` crate's
//! format) to it. One thread per producer connection validates each record
//! once and forwards batches, in stream order, to every worker; a worker
//! reads the same bytes without validating again.
//!
//! A read's records go to the workers at once, unless the stream is busy:
//! then they wait a bounded moment for more (`gather`, src/ingest/gather.rs).

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ingest::FrameReader;

use crate::ingest::gather::{Gather, Next};
use crate::ingest::pipeline::{state_change, IngestStats, Pipeline};
use crate::worker::mail::{SidecarRequest, WorkerHandle};

#[allow(clippy::too_many_arguments)]
pub fn start(
    addr: SocketAddr,
    max_connections: usize,
    gather: Duration,
    workers: Arc<[WorkerHandle]>,
    sidecar: crossbeam_channel::Sender<SidecarRequest>,
    stats: Arc<IngestStats>,
    tap: crate::ingest::pipeline::Tap,
    journal: Option<Arc<crate::delivery::recovery::Journal>>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<(SocketAddr, std::thread::JoinHandle<()>)> {
    let listener = TcpListener::bind(addr)
        .map_err(|e| std::io::Error::new(e.kind(), format!("ingest listener {addr}: {e}")))?;
    listener.set_nonblocking(true)?;
    let bound = listener.local_addr()?;
    let handle = std::thread::Builder::new().name("ingest".into()).spawn(move || {
        while !stop.load(Relaxed) {
            match listener.accept() {
                Ok((stream, peer)) => {
                    if stats.connections.load(Relaxed) >= max_connections {
                        stats.refused_connections.fetch_add(1, Relaxed);
                        tracing::warn!(%peer, max_connections, "ingest connection refused: too many producers");
                        continue;
                    }
                    stats.connections.fetch_add(1, Relaxed);
                    let (workers, conn_stats, stop, sidecar, tap, journal) = (workers.clone(), stats.clone(), stop.clone(), sidecar.clone(), tap.clone(), journal.clone());
                    let spawned = std::thread::Builder::new().name("ingest-conn".into()).spawn(move || {
                        let pipeline = Pipeline::new(workers, sidecar, conn_stats.clone(), tap).with_journal(journal);
                        if let Err(e) = serve(stream, pipeline, gather, &stop) {
                            tracing::debug!(%peer, error = %e, "ingest connection ended");
                        }
                        conn_stats.connections.fetch_sub(1, Relaxed);
                    });
                    if spawned.is_err() {
                        stats.connections.fetch_sub(1, Relaxed);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => {
                    tracing::warn!(error = %e, "ingest accept failed");
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    });
    Ok((bound, handle?))
}

fn serve(
    mut stream: TcpStream,
    mut p: Pipeline,
    window: Duration,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_millis(200)))?;
    let _ = stream.set_nodelay(true);
    let mut reader = FrameReader::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut gather = Gather::new(window);
    while !stop.load(Relaxed) {
        if let Some(until) = gather.deadline() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || !readable_within(&stream, left) {
                p.flush();
                gather.sent(Instant::now());
                continue;
            }
        }
        let n = match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => return Err(e),
        };
        p.stats().bytes.fetch_add(n as u64, Relaxed);
        reader.push(&buf[..n]);
        loop {
            match reader.next() {
                None => break,
                Some(Ok(rec)) => {
                    p.stats().records.fetch_add(1, Relaxed);
                    if p.interaction(rec) {
                        continue;
                    }
                    if let Some((server_id, change)) = state_change(rec) {
                        p.apply_state(server_id, change);
                    }
                    p.push(reader.last_body());
                    if p.is_full() {
                        p.flush();
                        gather.sent(Instant::now());
                    }
                }
                Some(Err(e)) => {
                    p.stats().errors[e.index()].fetch_add(1, Relaxed);
                    if e.is_fatal() {
                        tracing::warn!(
                            reason = e.reason(),
                            "ingest stream cannot be trusted: closing the producer connection"
                        );
                        p.flush();
                        return Ok(());
                    }
                }
            }
        }
        let now = Instant::now();
        if gather.after_read(now, !p.is_empty(), p.is_full()) == Next::Send {
            p.flush();
            gather.sent(now);
        }
    }
    p.flush();
    if reader.buffered() > 0 {
        tracing::debug!(
            bytes = reader.buffered(),
            "ingest connection closed mid-record"
        );
    }
    Ok(())
}

/// Whether `stream` has bytes to read (or an error or EOF to report) within
/// `wait`: `ppoll`, for a wait finer than poll's milliseconds.
fn readable_within(stream: &TcpStream, wait: Duration) -> bool {
    let mut fd = libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: wait.as_secs() as libc::time_t,
        tv_nsec: wait.subsec_nanos() as libc::c_long,
    };
    // SAFETY: one pollfd for a descriptor `stream` keeps open, a timespec on the stack.
    let n = unsafe { libc::ppoll(&mut fd, 1, &ts, std::ptr::null()) };
    // An interrupted wait ends the gathering early: the batch goes now.
    n > 0
}
