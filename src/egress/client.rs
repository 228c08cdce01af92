//! The node's side of the egress: [`EgressClient`] (thread-safe; called
//! from helper threads, never from an io_uring worker), the outcome
//! counters it keeps for `/metrics`, and the child `gatewayd egress`
//! process the node (or the CLI) starts by default.
//!
//! Calls share one connection: each request frame carries an id, the
//! connection's reader thread hands each answer to the [`Calls`] queue of
//! the caller that started it. [`EgressClient::request`] starts one call
//! and waits for it; [`EgressClient::start`] only starts it, so that one
//! thread can have many calls in flight (the interaction deliverer,
//! `chat/endpoint.rs`) and take their outcomes as they come.

use std::collections::{BTreeSet, HashMap};
use std::io::Write;
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use super::reason::Reason;
use super::sign;
use super::wire::{self, Answer, Request};

/// Calls one client may have waiting at once; more are `busy` at once.
pub const MAX_PENDING: usize = 4096;
/// Transport slack on top of a call's own deadline (the egress enforces
/// the deadline; this only covers the frames' way back).
/// With `ENDPOINT_MARGIN_MS` (300) it ends a call 200 ms before the
/// interaction's 3.0 s, so its failure is noted before the miss is shown.
const GRACE: Duration = Duration::from_millis(100);

/// Where an egress listens: a Unix socket path (anything with a `/`), or
/// `host:port` over TCP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Addr {
    Unix(PathBuf),
    Tcp(String),
}

impl Addr {
    pub fn parse(s: &str) -> Result<Addr, String> {
        let s = s.trim();
        if s.contains('/') {
            Ok(Addr::Unix(PathBuf::from(s)))
        } else if s
            .rsplit_once(':')
            .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok())
        {
            Ok(Addr::Tcp(s.to_string()))
        } else {
            Err(format!(
                "egress address {s:?}: expected a Unix socket path or host:port"
            ))
        }
    }
}

impl std::fmt::Display for Addr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Addr::Unix(p) => write!(f, "{}", p.display()),
            Addr::Tcp(a) => f.write_str(a),
        }
    }
}

/// A call that got no HTTP answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EgressError {
    pub reason: Reason,
    pub detail: String,
}

impl std::fmt::Display for EgressError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.reason, self.detail)
    }
}

impl std::error::Error for EgressError {}

pub(super) fn err(reason: Reason, detail: impl Into<String>) -> EgressError {
    EgressError {
        reason,
        detail: detail.into(),
    }
}

/// An HTTP answer relayed by the egress (any status; a 3xx is not followed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Outcomes of the calls made through one client: the
/// `gatewayd_egress_requests_total{outcome}` family.
#[derive(Debug, Default)]
pub struct EgressStats {
    /// Answers by status class: 2xx, 3xx, 4xx, 5xx.
    pub answered: [AtomicU64; 4],
    /// Failures, indexed like [`Reason::ALL`].
    pub failed: [AtomicU64; Reason::ALL.len()],
}

impl EgressStats {
    /// Every (outcome label, count), in a fixed order.
    pub fn outcomes(&self) -> Vec<(&'static str, u64)> {
        let classes = ["status_2xx", "status_3xx", "status_4xx", "status_5xx"];
        let mut v: Vec<(&'static str, u64)> = classes
            .iter()
            .zip(&self.answered)
            .map(|(l, c)| (*l, c.load(Relaxed)))
            .collect();
        v.extend(
            Reason::ALL
                .iter()
                .zip(&self.failed)
                .map(|(r, c)| (r.as_str(), c.load(Relaxed))),
        );
        v
    }

    fn count(&self, r: &Result<Reply, EgressError>) {
        match r {
            Ok(rep) => {
                let i = (rep.status / 100).clamp(2, 5) as usize - 2;
                self.answered[i].fetch_add(1, Relaxed);
            }
            Err(e) => {
                self.failed[e.reason.index()].fetch_add(1, Relaxed);
            }
        }
    }
}

/// Per-call defaults (config `[egress]`).
#[derive(Clone, Copy, Debug)]
pub struct Defaults {
    pub connect: Duration,
    pub max_response_bytes: usize,
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            connect: Duration::from_millis(1_000),
            max_response_bytes: 64 << 10,
        }
    }
}

/// One connection: its write half and the calls waiting on its reader.
struct Conn {
    writer: Mutex<Box<dyn Write + Send>>,
    /// Each waiting call's id, and the queue of the [`Calls`] it is in.
    pending: Mutex<HashMap<u64, Sender<Arrived>>>,
    dead: AtomicBool,
}

impl Conn {
    fn forget(&self, id: u64) {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }
}

/// What a connection's reader hands a waiting call: its answer, or none
/// when the connection ended first. Turned into the call's outcome by
/// [`Calls::finish`].
pub struct Arrived {
    id: u64,
    answer: Option<Answer>,
}

/// A call of a [`Calls`] that has no outcome yet.
struct Waiting {
    tag: u64,
    give_up: Instant,
    conn: Arc<Conn>,
}

/// The calls one caller (one thread) started with [`EgressClient::start`]
/// and that have no outcome yet. Their answers arrive on one queue
/// ([`Calls::receiver`]) that the caller waits on beside its other work,
/// until [`Calls::next_due`] at the latest: [`Calls::finish`] turns an
/// arrival into its call's outcome, [`Calls::expire`] gives up each call
/// whose deadline and [`GRACE`] have passed (`timeout`, as a blocking call
/// would). Every outcome is counted in the client's stats, once; an answer
/// that arrives for a call already given up is dropped, never an outcome.
/// Dropping it forgets its calls (their answers, if any come, are dropped).
pub struct Calls {
    tx: Sender<Arrived>,
    rx: Receiver<Arrived>,
    waiting: HashMap<u64, Waiting>,
    /// (give-up time, call id) of every waiting call.
    due: BTreeSet<(Instant, u64)>,
    stats: Arc<EgressStats>,
}

/// A finished call: the tag it was started with, and its outcome.
pub type Outcome = (u64, Result<Reply, EgressError>);

impl Calls {
    /// Where the answers arrive: wait on it (or select it with other
    /// channels) until `next_due`, then hand each arrival to `finish`.
    pub fn receiver(&self) -> &Receiver<Arrived> {
        &self.rx
    }

    /// Calls waiting for their outcome.
    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// When the earliest waiting call is to be given up (`expire`).
    pub fn next_due(&self) -> Option<Instant> {
        self.due.first().map(|(t, _)| *t)
    }

    /// The outcome of the call `a` answers; None if that call is no longer
    /// waiting (given up at its deadline: a late answer is dropped).
    pub fn finish(&mut self, a: Arrived) -> Option<Outcome> {
        let w = self.waiting.remove(&a.id)?;
        self.due.remove(&(w.give_up, a.id));
        let r = match a.answer {
            Some(answer) => reply_of(answer),
            None => Err(err(Reason::Unavailable, "the egress connection ended")),
        };
        self.stats.count(&r);
        Some((w.tag, r))
    }

    /// Gives up the earliest call due by `now` (its deadline and `GRACE`
    /// passed with no answer): `timeout`. None when no call is due.
    pub fn expire(&mut self, now: Instant) -> Option<Outcome> {
        while let Some(&(t, id)) = self.due.first() {
            if t > now {
                return None;
            }
            self.due.pop_first();
            if let Some(w) = self.waiting.remove(&id) {
                w.conn.forget(id);
                let r = Err(err(
                    Reason::Timeout,
                    "no answer from the egress by the deadline",
                ));
                self.stats.count(&r);
                return Some((w.tag, r));
            }
        }
        None
    }
}

impl Drop for Calls {
    fn drop(&mut self) {
        for (id, w) in self.waiting.drain() {
            w.conn.forget(id);
        }
    }
}

/// An answer frame as the call's outcome.
fn reply_of(answer: Answer) -> Result<Reply, EgressError> {
    match (answer.ok, answer.error) {
        (Some(h), _) => Ok(Reply {
            status: h.status,
            headers: h.headers,
            body: wire::unb64(&h.body).ok_or_else(|| {
                err(
                    Reason::MalformedResponse,
                    "egress answer body is not base64",
                )
            })?,
        }),
        (None, Some(r)) => Err(err(
            Reason::parse(&r.reason).unwrap_or(Reason::MalformedResponse),
            r.detail,
        )),
        (None, None) => Err(err(Reason::MalformedResponse, "empty egress answer")),
    }
}

pub struct EgressClient {
    addr: Addr,
    conn: Mutex<Option<Arc<Conn>>>,
    next_id: AtomicU64,
    defaults: Defaults,
    pub stats: Arc<EgressStats>,
}

impl EgressClient {
    pub fn new(addr: Addr, defaults: Defaults) -> EgressClient {
        EgressClient {
            addr,
            conn: Mutex::new(None),
            next_id: AtomicU64::new(1),
            defaults,
            stats: Arc::default(),
        }
    }

    pub fn addr(&self) -> &Addr {
        &self.addr
    }

    /// The live connection, or a new one (connecting by `deadline`).
    fn connection(&self, deadline: Instant) -> Result<Arc<Conn>, EgressError> {
        let mut slot = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = slot.as_ref().filter(|c| !c.dead.load(Relaxed)) {
            return Ok(c.clone());
        }
        let unavailable =
            |e: std::io::Error| err(Reason::Unavailable, format!("egress {}: {e}", self.addr));
        let (reader, writer): (Box<dyn std::io::Read + Send>, Box<dyn Write + Send>) = match &self
            .addr
        {
            Addr::Unix(p) => {
                let s = UnixStream::connect(p).map_err(unavailable)?;
                let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
                (Box::new(s.try_clone().map_err(unavailable)?), Box::new(s))
            }
            Addr::Tcp(a) => {
                let sa = a
                    .to_socket_addrs()
                    .map_err(unavailable)?
                    .next()
                    .ok_or_else(|| err(Reason::Unavailable, format!("egress {a}: no address")))?;
                let left = deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1));
                let s = TcpStream::connect_timeout(&sa, left).map_err(unavailable)?;
                let _ = s.set_nodelay(true);
                let _ = s.set_write_timeout(Some(Duration::from_secs(1)));
                (Box::new(s.try_clone().map_err(unavailable)?), Box::new(s))
            }
        };
        let conn = Arc::new(Conn {
            writer: Mutex::new(writer),
            pending: Mutex::new(HashMap::new()),
            dead: AtomicBool::new(false),
        });
        let c = conn.clone();
        std::thread::Builder::new()
            .name("egress-client".into())
            .spawn(move || read_answers(reader, &c))
            .map_err(|e| err(Reason::Unavailable, format!("reader thread: {e}")))?;
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// An empty queue for calls started with [`EgressClient::start`].
    pub fn calls(&self) -> Calls {
        let (tx, rx) = crossbeam_channel::unbounded();
        Calls {
            tx,
            rx,
            waiting: HashMap::new(),
            due: BTreeSet::new(),
            stats: self.stats.clone(),
        }
    }

    /// One call through the egress, answered by `deadline` (the egress
    /// gives up then; the answer's way back has [`GRACE`]). Blocks.
    pub fn request(
        &self,
        method: &str,
        url: &str,
        headers: &[(String, String)],
        body: &[u8],
        deadline: Instant,
    ) -> Result<Reply, EgressError> {
        let mut calls = self.calls();
        self.start(&mut calls, 0, method, url, headers, body, deadline)?;
        loop {
            let due = calls.next_due().expect("the call is waiting");
            let done = match calls.rx.recv_deadline(due) {
                Ok(a) => calls.finish(a),
                Err(_) => calls.expire(Instant::now()),
            };
            if let Some((_, r)) = done {
                return r;
            }
        }
    }

    /// Starts one call through the egress without waiting for its answer:
    /// its outcome comes from `calls`, tagged `tag`, when the answer
    /// arrives or when `deadline` and [`GRACE`] have passed. `Err` (counted
    /// like any outcome): it could not start (the deadline passed already,
    /// a body over the wire's bound, `busy` with [`MAX_PENDING`] calls
    /// waiting, the egress unreachable). It blocks only to connect (when
    /// there is no live connection: a Unix socket at once, TCP by
    /// `deadline`) and to write the request frame into the socket.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        &self,
        calls: &mut Calls,
        tag: u64,
        method: &str,
        url: &str,
        headers: &[(String, String)],
        body: &[u8],
        deadline: Instant,
    ) -> Result<(), EgressError> {
        let r = self.start_uncounted(calls, tag, method, url, headers, body, deadline);
        if let Err(e) = &r {
            self.stats.count(&Err(e.clone()));
        }
        r
    }

    #[allow(clippy::too_many_arguments)]
    fn start_uncounted(
        &self,
        calls: &mut Calls,
        tag: u64,
        method: &str,
        url: &str,
        headers: &[(String, String)],
        body: &[u8],
        deadline: Instant,
    ) -> Result<(), EgressError> {
        let total = deadline.saturating_duration_since(Instant::now());
        if total < Duration::from_millis(1) {
            return Err(err(Reason::Timeout, "deadline passed before the call"));
        }
        if body.len() > wire::MAX_REQUEST_BODY {
            return Err(err(Reason::BadUrl, "request body over 256 KiB"));
        }
        let conn = self.connection(deadline)?;
        let id = self.next_id.fetch_add(1, Relaxed);
        let req = Request {
            id,
            method: method.into(),
            url: url.into(),
            headers: headers.to_vec(),
            body: wire::b64(body),
            connect_ms: (self.defaults.connect.min(total).as_millis() as u64).max(1),
            total_ms: (total.as_millis() as u64).max(1),
            max_response_bytes: self.defaults.max_response_bytes,
        };
        {
            let mut p = conn.pending.lock().unwrap_or_else(|p| p.into_inner());
            if p.len() >= MAX_PENDING {
                return Err(err(Reason::Busy, "too many calls waiting on the egress"));
            }
            p.insert(id, calls.tx.clone());
        }
        let sent = {
            let mut w = conn.writer.lock().unwrap_or_else(|p| p.into_inner());
            wire::write_frame(&mut *w, &req)
        };
        if let Err(e) = sent {
            conn.dead.store(true, Relaxed);
            conn.forget(id);
            return Err(err(
                Reason::Unavailable,
                format!("sending to the egress: {e}"),
            ));
        }
        let give_up = deadline.max(Instant::now()) + GRACE;
        calls.due.insert((give_up, id));
        calls.waiting.insert(id, Waiting { tag, give_up, conn });
        Ok(())
    }

    /// [`EgressClient::start`] for one signed interaction POST (ADR-12):
    /// `X-Signature-Ed25519` over the current unix time and `body`.
    pub fn start_delivery(
        &self,
        calls: &mut Calls,
        tag: u64,
        url: &str,
        seed: &[u8; 32],
        body: &[u8],
        deadline: Instant,
    ) -> Result<(), EgressError> {
        let ts = sign::timestamp_now();
        let headers = sign::headers(&sign::sign(seed, &ts, body), &ts);
        self.start(calls, tag, "POST", url, &headers, body, deadline)
    }

    /// One signed interaction POST (ADR-12): `X-Signature-Ed25519` over the
    /// current unix time and `body`, answered by `deadline`.
    pub fn deliver(
        &self,
        url: &str,
        seed: &[u8; 32],
        body: &[u8],
        deadline: Instant,
    ) -> Result<(u16, Vec<u8>), EgressError> {
        let ts = sign::timestamp_now();
        let headers = sign::headers(&sign::sign(seed, &ts, body), &ts);
        self.request("POST", url, &headers, body, deadline)
            .map(|r| (r.status, r.body))
    }

    /// What the platform does before it accepts an endpoint URL: a signed
    /// PING must get 200 `{"type":1}`, and the same PING with a wrong
    /// signature must get 401. Each check has `each` to answer. The error
    /// names the check that failed.
    pub fn verify_endpoint(
        &self,
        url: &str,
        seed: &[u8; 32],
        each: Duration,
    ) -> Result<(), String> {
        let ping = br#"{"type":1}"#;
        let (status, body) = self
            .deliver(url, seed, ping, Instant::now() + each)
            .map_err(|e| format!("signed PING: {}", e.in_words()))?;
        let pong = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("type").and_then(|t| t.as_u64()));
        if status != 200 || pong != Some(1) {
            return Err(format!(
                "signed PING: expected 200 {{\"type\":1}}, got {status} {}",
                String::from_utf8_lossy(&body[..body.len().min(200)])
            ));
        }
        let ts = sign::timestamp_now();
        let headers = sign::headers(&sign::corrupt(&sign::sign(seed, &ts, ping)), &ts);
        let bad = self
            .request("POST", url, &headers, ping, Instant::now() + each)
            .map_err(|e| format!("PING with a bad signature: {}", e.in_words()))?;
        if bad.status != 401 {
            return Err(format!(
                "PING with a bad signature: expected 401, got {} (the endpoint must verify X-Signature-Ed25519)",
                bad.status
            ));
        }
        Ok(())
    }
}

/// The reader of one connection: hands each answer to its caller; at the
/// end, every waiting caller learns the connection is gone.
fn read_answers(mut reader: Box<dyn std::io::Read + Send>, conn: &Conn) {
    while let Ok(Some(a)) = wire::read_frame::<Answer>(&mut reader) {
        let tx = conn
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&a.id);
        if let Some(tx) = tx {
            let _ = tx.send(Arrived {
                id: a.id,
                answer: Some(a),
            });
        }
    }
    conn.dead.store(true, Relaxed);
    let gone: Vec<_> = conn
        .pending
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .drain()
        .collect();
    for (id, tx) in gone {
        let _ = tx.send(Arrived { id, answer: None });
    }
}
