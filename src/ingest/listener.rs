//! The ingest listener: producers (the chat service, loadgen, the node's own
//! demo source) write length-prefixed event records (the `ingest` crate's
//! format) to it. One thread per producer connection validates each record
//! once and forwards batches, in stream order, to every worker; a worker
//! reads the same bytes without validating again.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ingest::{DecodeError, FrameReader};
use rkyv::util::AlignedVec;

use crate::worker::mail::{SidecarRequest, ToWorker, WorkerHandle};

/// Records per batch and bytes per batch before it is sent on.
const BATCH_RECORDS: usize = 256;
const BATCH_BYTES: usize = 1 << 20;
/// Batches a connection may have out at workers before it waits.
const BATCHES_IN_FLIGHT: usize = 64;

/// Record bodies, each 8-aligned in one buffer.
pub struct Batch {
    buf: AlignedVec<16>,
    spans: Vec<(u32, u32)>,
}

impl Default for Batch {
    fn default() -> Self {
        Self::new()
    }
}

impl Batch {
    pub fn new() -> Batch {
        Batch {
            buf: AlignedVec::with_capacity(BATCH_BYTES + 64 * 1024),
            spans: Vec::with_capacity(BATCH_RECORDS),
        }
    }

    pub fn push(&mut self, body: &[u8]) {
        let pad = self.buf.len().next_multiple_of(ingest::BODY_ALIGN) - self.buf.len();
        self.buf.extend_from_slice(&[0u8; 8][..pad]);
        let start = self.buf.len();
        self.buf.extend_from_slice(body);
        self.spans.push((start as u32, body.len() as u32));
    }

    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    pub fn bodies(&self) -> impl Iterator<Item = &[u8]> {
        self.spans
            .iter()
            .map(|&(s, l)| &self.buf.as_slice()[s as usize..(s + l) as usize])
    }
}

/// Node-wide ingest counters (read by the admin endpoint).
#[derive(Default)]
pub struct IngestStats {
    pub records: AtomicU64,
    pub bytes: AtomicU64,
    pub errors: [AtomicU64; DecodeError::COUNT],
    pub connections: AtomicUsize,
    pub refused_connections: AtomicU64,
    pub dropped_batches: AtomicU64,
    pub state_changes: AtomicU64,
    pub state_changes_failed: AtomicU64,
}

pub fn start(
    addr: SocketAddr,
    max_connections: usize,
    workers: Arc<[WorkerHandle]>,
    sidecar: crossbeam_channel::Sender<SidecarRequest>,
    stats: Arc<IngestStats>,
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
                    let (workers, conn_stats, stop, sidecar) = (workers.clone(), stats.clone(), stop.clone(), sidecar.clone());
                    let spawned = std::thread::Builder::new().name("ingest-conn".into()).spawn(move || {
                        if let Err(e) = serve(stream, &workers, &sidecar, &conn_stats, &stop) {
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
    workers: &[WorkerHandle],
    sidecar: &crossbeam_channel::Sender<SidecarRequest>,
    stats: &IngestStats,
    stop: &AtomicBool,
) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_millis(200)))?;
    let _ = stream.set_nodelay(true);
    let mut reader = FrameReader::new();
    let mut buf = vec![0u8; 256 * 1024];
    // Batches handed to workers; reused once every worker is done with one.
    let mut out: std::collections::VecDeque<Arc<Batch>> = std::collections::VecDeque::new();
    let mut batch = Arc::new(Batch::new());
    while !stop.load(Relaxed) {
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
        stats.bytes.fetch_add(n as u64, Relaxed);
        reader.push(&buf[..n]);
        loop {
            match reader.next() {
                None => break,
                Some(Ok(rec)) => {
                    stats.records.fetch_add(1, Relaxed);
                    let change = if rec.is_guild_state() {
                        crate::ingest::state::parse(rec.event_type(), rec.server_id(), rec.d())
                            .map(|c| (rec.server_id(), c))
                    } else {
                        None
                    };
                    if let Some((server_id, change)) = change {
                        // Events before the change are decided on the old
                        // permissions, events after it on the new ones.
                        if !batch.is_empty() {
                            batch = send(batch, workers, stats, &mut out);
                        }
                        apply_state(server_id, change, workers, sidecar, stats);
                    }
                    let body = reader.last_body();
                    Arc::get_mut(&mut batch)
                        .expect("unshared until sent")
                        .push(body);
                    if batch.len() >= BATCH_RECORDS || batch.buf.len() >= BATCH_BYTES {
                        batch = send(batch, workers, stats, &mut out);
                    }
                }
                Some(Err(e)) => {
                    stats.errors[e.index()].fetch_add(1, Relaxed);
                    if e.is_fatal() {
                        tracing::warn!(
                            reason = e.reason(),
                            "ingest stream cannot be trusted: closing the producer connection"
                        );
                        if !batch.is_empty() {
                            send(batch, workers, stats, &mut out);
                        }
                        return Ok(());
                    }
                }
            }
        }
        if !batch.is_empty() {
            batch = send(batch, workers, stats, &mut out);
        }
    }
    if reader.buffered() > 0 {
        tracing::debug!(
            bytes = reader.buffered(),
            "ingest connection closed mid-record"
        );
    }
    Ok(())
}

/// Have the registry apply a server change and every worker take the new
/// permissions, in stream order with the batches around it.
pub fn apply_state(
    server_id: u64,
    change: registry::StateChange,
    workers: &[WorkerHandle],
    sidecar: &crossbeam_channel::Sender<SidecarRequest>,
    stats: &IngestStats,
) {
    let (tx, rx) = crossbeam_channel::bounded(1);
    let req = SidecarRequest::ApplyState {
        server_id,
        change,
        reply: tx,
    };
    if sidecar.send_timeout(req, Duration::from_secs(5)).is_err() {
        stats.state_changes_failed.fetch_add(1, Relaxed);
        return;
    }
    let Ok(Some(update)) = rx.recv_timeout(Duration::from_secs(5)) else {
        stats.state_changes_failed.fetch_add(1, Relaxed);
        return;
    };
    stats.state_changes.fetch_add(1, Relaxed);
    let update = Arc::new(update);
    for w in workers {
        let mut msg = ToWorker::Access(update.clone());
        let deadline = Instant::now() + Duration::from_secs(1);
        while let Err(back) = w.try_send(msg) {
            if Instant::now() > deadline {
                stats.state_changes_failed.fetch_add(1, Relaxed);
                break;
            }
            msg = back;
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

/// Hand a batch to every worker; return an empty batch to fill next
/// (a recycled one when all workers are done with it).
pub fn send(
    batch: Arc<Batch>,
    workers: &[WorkerHandle],
    stats: &IngestStats,
    out: &mut std::collections::VecDeque<Arc<Batch>>,
) -> Arc<Batch> {
    for w in workers {
        // A full inbox means a worker is behind: wait a little (backpressure
        // to the producer through TCP) before counting the batch as dropped.
        let deadline = Instant::now() + Duration::from_secs(1);
        let mut msg = ToWorker::Batch(batch.clone());
        loop {
            match w.try_send(msg) {
                Ok(()) => break,
                Err(back) => {
                    if Instant::now() > deadline {
                        stats.dropped_batches.fetch_add(1, Relaxed);
                        break;
                    }
                    msg = back;
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
        }
    }
    out.push_back(batch);
    // Reuse the oldest batch if every worker has let go of it.
    if let Some(front) = out.front_mut() {
        if let Some(b) = Arc::get_mut(front) {
            b.buf.clear();
            b.spans.clear();
            return out.pop_front().expect("front exists");
        }
    }
    if out.len() > BATCHES_IN_FLIGHT {
        // Workers hold too many: wait for the oldest rather than grow.
        let mut oldest = out.pop_front().expect("non-empty");
        loop {
            if let Some(b) = Arc::get_mut(&mut oldest) {
                b.buf.clear();
                b.spans.clear();
                return oldest;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    Arc::new(Batch::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_bodies_are_aligned_and_intact() {
        let mut b = Batch::new();
        let mut frame = Vec::new();
        for i in 0..5u64 {
            frame.clear();
            ingest::encode_parts(
                "MESSAGE_CREATE",
                i,
                1,
                proto::intents::GUILD_MESSAGES,
                0,
                0,
                ingest::FLAG_HAS_CONTENT,
                &[],
                br#"{"content":"x"}"#,
                &mut frame,
            );
            let mut r = FrameReader::new();
            r.push(&frame);
            assert!(matches!(r.next(), Some(Ok(_))));
            b.push(r.last_body());
        }
        for (i, body) in b.bodies().enumerate() {
            assert_eq!(body.as_ptr() as usize % ingest::BODY_ALIGN, 0);
            // SAFETY: each body was accepted by FrameReader (which validated it with `access`) and is 8-byte aligned (asserted above).
            let rec = unsafe { ingest::access_trusted(body) };
            assert_eq!(rec.server_id(), i as u64);
        }
    }
}
