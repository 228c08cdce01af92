//! `gatewayd egress`: the process that makes the calls. It reads request
//! frames from each connection, runs each call on a thread of its own (at
//! most `max_in_flight` at once, node-wide; beyond, `busy` at once), and
//! writes each answer when it is ready, so a hanging endpoint holds one
//! thread until its deadline and slows no other call.
//!
//! It is given nothing but its flags: no registry URL, no token (the node
//! starts it with an empty environment), and it never reads proxy
//! variables (no HTTP library here does).

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::client::Addr;
use super::fetch::{self, Bounds};
use super::guard::Policy;
use super::reason::Reason;
use super::wire::{self, Answer, Http, Refusal, Request};

/// Connections served at once (the node keeps one; the CLI one).
const MAX_CONNECTIONS: usize = 64;
/// A node that stops reading answers: writing one gives up after this
/// (the connection then ends), so call threads cannot pile up behind it.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(clap::Args, Debug, Clone)]
pub struct EgressArgs {
    /// Where the node reaches it: a Unix socket path (containing `/`), or
    /// host:port for TCP (a remote egress in its own network zone).
    #[arg(long)]
    pub listen: String,
    /// Private or loopback ranges to allow anyway (development and tests
    /// only; logged loudly at start), comma-separated: 127.0.0.0/8,::1.
    #[arg(long, value_delimiter = ',')]
    pub allow_private_cidrs: Vec<String>,
    /// Calls in flight at once; more are answered `busy`.
    #[arg(long, default_value_t = 256)]
    pub max_in_flight: usize,
}

struct State {
    policy: Policy,
    max_in_flight: usize,
    in_flight: AtomicUsize,
    connections: AtomicUsize,
    served: AtomicU64,
}

/// None once a write failed (a frame may be cut: nothing more is written).
type Writer = Arc<Mutex<Option<Box<dyn Write + Send>>>>;

pub fn run(args: EgressArgs) -> Result<(), String> {
    let policy = Policy::new(&args.allow_private_cidrs)?;
    if !policy.allow.is_empty() {
        let ranges: Vec<String> = policy.allow.iter().map(|c| c.to_string()).collect();
        let msg = format!(
            "EGRESS ALLOWS PRIVATE RANGES {}: bot-supplied URLs may reach these addresses. \
             For development and tests only; never in production.",
            ranges.join(", ")
        );
        tracing::warn!("{msg}");
        eprintln!("gatewayd egress: WARNING: {msg}");
    }
    let state = Arc::new(State {
        policy,
        max_in_flight: args.max_in_flight.clamp(1, 4096),
        in_flight: AtomicUsize::new(0),
        connections: AtomicUsize::new(0),
        served: AtomicU64::new(0),
    });
    let addr = Addr::parse(&args.listen)?;
    match &addr {
        Addr::Unix(path) => {
            // A socket left by an earlier run (it exited without unlinking).
            if std::fs::symlink_metadata(path)
                .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()))
            {
                let _ = std::fs::remove_file(path);
            }
            let l = UnixListener::bind(path)
                .map_err(|e| format!("egress: listening on {}: {e}", path.display()))?;
            tracing::info!(addr = %path.display(), "egress listening");
            announce(&path.display().to_string());
            for s in l.incoming().flatten() {
                let _ = s.set_write_timeout(Some(WRITE_TIMEOUT));
                let Ok(r) = s.try_clone() else { continue };
                serve(&state, Box::new(r), Box::new(s));
            }
        }
        Addr::Tcp(a) => {
            let l = TcpListener::bind(a).map_err(|e| format!("egress: listening on {a}: {e}"))?;
            let bound = l.local_addr().map_err(|e| e.to_string())?;
            tracing::info!(addr = %bound, "egress listening");
            announce(&bound.to_string());
            for s in l.incoming().flatten() {
                let _ = s.set_nodelay(true);
                let _ = s.set_write_timeout(Some(WRITE_TIMEOUT));
                let Ok(r) = s.try_clone() else { continue };
                serve(&state, Box::new(r), Box::new(s));
            }
        }
    }
    Ok(())
}

/// Its one stdout line (`wire::LISTENING`): the address it listens on.
fn announce(addr: &str) {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    // A closed stdout (nobody reads it) is not the egress's failure.
    let _ = writeln!(out, "{}{addr}", super::wire::LISTENING).and_then(|_| out.flush());
}

/// Starts the reader thread of one connection (or refuses it when full).
fn serve(state: &Arc<State>, reader: Box<dyn Read + Send>, writer: Box<dyn Write + Send>) {
    if state.connections.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
        state.connections.fetch_sub(1, Ordering::SeqCst);
        tracing::warn!("egress: connection refused (at {MAX_CONNECTIONS})");
        return;
    }
    let state = state.clone();
    let writer: Writer = Arc::new(Mutex::new(Some(writer)));
    let spawned = std::thread::Builder::new()
        .name("egress-conn".into())
        .spawn(move || {
            let mut reader = reader;
            loop {
                match wire::read_frame::<Request>(&mut reader) {
                    Ok(Some(req)) => dispatch(&state, req, &writer),
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!(error = %e, "egress: bad frame; closing the connection");
                        break;
                    }
                }
            }
            state.connections.fetch_sub(1, Ordering::SeqCst);
        });
    if spawned.is_err() {
        tracing::warn!("egress: cannot start a connection thread");
    }
}

fn refusal(id: u64, reason: Reason, detail: impl Into<String>) -> Answer {
    Answer {
        id,
        ok: None,
        error: Some(Refusal {
            reason: reason.as_str().into(),
            detail: detail.into(),
        }),
    }
}

fn dispatch(state: &Arc<State>, req: Request, writer: &Writer) {
    let id = req.id;
    if state.in_flight.fetch_add(1, Ordering::SeqCst) >= state.max_in_flight {
        state.in_flight.fetch_sub(1, Ordering::SeqCst);
        answer(
            writer,
            &refusal(id, Reason::Busy, "egress at max_in_flight"),
        );
        return;
    }
    let st = state.clone();
    let w = writer.clone();
    let spawned = std::thread::Builder::new()
        .name("egress-call".into())
        .spawn(move || {
            let a = call(&st.policy, req);
            st.in_flight.fetch_sub(1, Ordering::SeqCst);
            st.served.fetch_add(1, Ordering::Relaxed);
            answer(&w, &a);
        });
    if spawned.is_err() {
        state.in_flight.fetch_sub(1, Ordering::SeqCst);
        answer(
            writer,
            &refusal(id, Reason::Busy, "cannot start a call thread"),
        );
    }
}

/// Runs one request as the wire describes it, clamped to the wire's bounds.
pub(crate) fn call(policy: &Policy, req: Request) -> Answer {
    let start = Instant::now();
    let Some(body) = wire::unb64(&req.body) else {
        return refusal(req.id, Reason::BadUrl, "body is not base64");
    };
    if body.len() > wire::MAX_REQUEST_BODY || req.headers.len() > wire::MAX_HEADERS {
        return refusal(
            req.id,
            Reason::BadUrl,
            "request body or headers over the bound",
        );
    }
    let total = req.total_ms.clamp(1, wire::MAX_TOTAL_MS);
    let bounds = Bounds {
        connect: Duration::from_millis(req.connect_ms.clamp(1, total)),
        total: Duration::from_millis(total),
        max_response_bytes: req.max_response_bytes.min(wire::MAX_RESPONSE_CAP),
    };
    let r = fetch::fetch(policy, &req.method, &req.url, &req.headers, &body, bounds);
    let elapsed_ms = start.elapsed().as_millis() as u64;
    match r {
        Ok(resp) => {
            tracing::debug!(url = %req.url, status = resp.status, elapsed_ms, "egress: answered");
            Answer {
                id: req.id,
                ok: Some(Http {
                    status: resp.status,
                    headers: resp.headers,
                    body: wire::b64(&resp.body),
                    elapsed_ms,
                }),
                error: None,
            }
        }
        Err((reason, detail)) => {
            tracing::info!(url = %req.url, %reason, %detail, elapsed_ms, "egress: refused or failed");
            refusal(req.id, reason, detail)
        }
    }
}

fn answer(writer: &Writer, a: &Answer) {
    let mut slot = writer.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(w) = slot.as_mut() {
        if let Err(e) = wire::write_frame(w, a) {
            tracing::warn!(error = %e, "egress: writing an answer failed; no more answers on this connection");
            *slot = None;
        }
    }
}
