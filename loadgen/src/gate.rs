//! Identify gating through a fleet coordinator (`loadgen coordinator`), so
//! several loadgen processes or machines respect each application's
//! max_concurrency together. Sessions that want to identify queue a
//! request; a small pool of client threads (one in-flight request per
//! connection, as the protocol requires) asks `identify_acquire` with the
//! shard and the application as `key`, and hands grants back to the fleet
//! thread that owns the session.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// (fleet thread, slot, connection generation, application, shard).
pub type Request = (usize, usize, u32, u64, u32);

pub struct Gate {
    tx: SyncSender<Request>,
    /// Per fleet thread: granted (slot, generation).
    pub grants: Vec<Mutex<Vec<(usize, u32)>>>,
    pub granted: AtomicU64,
    pub errors: AtomicU64,
    stop: Arc<AtomicBool>,
}

impl Gate {
    /// `clients` connections to the coordinator at `addr`.
    pub fn start(addr: SocketAddr, clients: usize, threads: usize) -> std::io::Result<Arc<Gate>> {
        // Fail early and clearly when the coordinator is not there.
        let probe = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
            .map_err(|e| std::io::Error::new(e.kind(), format!("coordinator {addr}: {e}")))?;
        drop(probe);
        let (tx, rx) = sync_channel::<Request>(65_536);
        let rx = Arc::new(Mutex::new(rx));
        let gate = Arc::new(Gate {
            tx,
            grants: (0..threads).map(|_| Mutex::new(Vec::new())).collect(),
            granted: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            stop: Arc::new(AtomicBool::new(false)),
        });
        for i in 0..clients.max(1) {
            let (g, rx) = (gate.clone(), rx.clone());
            std::thread::Builder::new()
                .name(format!("gate-{i}"))
                .spawn(move || client(addr, &g, &rx))?;
        }
        Ok(gate)
    }

    /// Queue a request; false if the queue is full (try again next tick).
    pub fn request(&self, r: Request) -> bool {
        !matches!(
            self.tx.try_send(r),
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_))
        )
    }

    pub fn stop(&self) {
        self.stop.store(true, Relaxed);
    }
}

fn client(addr: SocketAddr, g: &Gate, rx: &Mutex<Receiver<Request>>) {
    let mut conn: Option<(TcpStream, BufReader<TcpStream>)> = None;
    let mut line = String::new();
    while !g.stop.load(Relaxed) {
        let req = {
            let rx = rx.lock().unwrap();
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(r) => r,
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
                Err(_) => return,
            }
        };
        let (t, slot, gen, app, shard) = req;
        loop {
            if g.stop.load(Relaxed) {
                return;
            }
            if conn.is_none() {
                match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
                    Ok(s) => {
                        let _ = s.set_nodelay(true);
                        let r = BufReader::new(s.try_clone().expect("clone"));
                        conn = Some((s, r));
                    }
                    Err(_) => {
                        g.errors.fetch_add(1, Relaxed);
                        std::thread::sleep(Duration::from_secs(1));
                        continue;
                    }
                }
            }
            let (w, r) = conn.as_mut().unwrap();
            let msg =
                format!("{{\"op\":\"identify_acquire\",\"shard_id\":{shard},\"key\":\"{app}\"}}\n");
            line.clear();
            let ok = w.write_all(msg.as_bytes()).is_ok()
                && r.read_line(&mut line).map(|n| n > 0).unwrap_or(false);
            if ok && line.contains("\"ok\":true") {
                g.granted.fetch_add(1, Relaxed);
                g.grants[t].lock().unwrap().push((slot, gen));
                break;
            }
            // An error answer or a lost connection: count, back off, retry.
            g.errors.fetch_add(1, Relaxed);
            if !ok {
                conn = None;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}
