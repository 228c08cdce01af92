//! Admin endpoint: Prometheus metrics and health on their own port, served by
//! a small blocking thread so it never competes with the workers' rings.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::node::Shared;

pub struct Admin {
    _thread: std::thread::JoinHandle<()>,
}

pub fn start(addr: SocketAddr, shared: Arc<Shared>) -> std::io::Result<Admin> {
    let listener = TcpListener::bind(addr)?;
    let thread = std::thread::Builder::new()
        .name("admin".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                let _ = serve(stream, &shared);
            }
        })?;
    Ok(Admin { _thread: thread })
}

fn serve(mut s: TcpStream, shared: &Shared) -> std::io::Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut buf = [0u8; 4096];
    let mut n = 0;
    loop {
        let r = s.read(&mut buf[n..])?;
        if r == 0 {
            break;
        }
        n += r;
        if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") || n == buf.len() {
            break;
        }
    }
    let (method, path) = match net::http::parse_head(&buf[..n]) {
        Ok(Some((_, head))) => (head.method, head.path),
        _ => (String::new(), String::new()),
    };
    let workers = shared.metrics.len();
    let method = method.as_str();
    let (status, ctype, body) = match path.as_str() {
        "/metrics" => {
            let mut out = String::with_capacity(8192);
            crate::metrics::render(
                &shared.metrics,
                shared.started.elapsed().as_secs_f64(),
                &mut out,
            );
            render_ingest(&shared.ingest, &mut out);
            (200, "text/plain; version=0.0.4; charset=utf-8", out)
        }
        "/healthz" => (200, "text/plain", "ok\n".to_string()),
        "/drain" if method == "POST" => {
            // The same path as SIGTERM: op 7 spread over the drain window, then exit.
            // SAFETY: signalling our own process.
            unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
            (202, "text/plain", "draining\n".to_string())
        }
        "/readyz" => {
            let ready = shared.ready_workers.load(Ordering::SeqCst) == workers
                && !shared.shutting_down.load(Ordering::SeqCst);
            if ready {
                (200, "text/plain", "ready\n".to_string())
            } else {
                (503, "text/plain", "not ready\n".to_string())
            }
        }
        _ => (
            404,
            "text/plain",
            "not found: try /metrics, /healthz, /readyz\n".to_string(),
        ),
    };
    let mut out = Vec::with_capacity(body.len() + 128);
    net::http::write_response(status, ctype, body.as_bytes(), false, &[], &mut out);
    s.write_all(&out)
}

fn render_ingest(st: &crate::ingest_listener::IngestStats, out: &mut String) {
    use std::fmt::Write;
    use std::sync::atomic::Ordering::Relaxed;
    let mut one = |name: &str, kind: &str, help: &str, v: u64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
        );
    };
    one(
        "gatewayd_ingest_records_total",
        "counter",
        "Event records accepted by the ingest listener.",
        st.records.load(Relaxed),
    );
    one(
        "gatewayd_ingest_bytes_total",
        "counter",
        "Bytes read by the ingest listener.",
        st.bytes.load(Relaxed),
    );
    one(
        "gatewayd_ingest_connections",
        "gauge",
        "Producer connections open.",
        st.connections.load(Relaxed) as u64,
    );
    one(
        "gatewayd_ingest_refused_connections_total",
        "counter",
        "Producer connections refused (over the limit).",
        st.refused_connections.load(Relaxed),
    );
    one(
        "gatewayd_ingest_dropped_batches_total",
        "counter",
        "Batches a worker could not take within 1 s.",
        st.dropped_batches.load(Relaxed),
    );
    one(
        "gatewayd_ingest_state_changes_total",
        "counter",
        "Server changes applied from the stream.",
        st.state_changes.load(Relaxed),
    );
    one(
        "gatewayd_ingest_state_changes_failed_total",
        "counter",
        "Server changes that could not be applied.",
        st.state_changes_failed.load(Relaxed),
    );
    let _ = writeln!(out, "# HELP gatewayd_ingest_rejected_total Records rejected, by reason.\n# TYPE gatewayd_ingest_rejected_total counter");
    for (i, reason) in ingest::DecodeError::REASONS.iter().enumerate() {
        let _ = writeln!(
            out,
            "gatewayd_ingest_rejected_total{{reason=\"{reason}\"}} {}",
            st.errors[i].load(Relaxed)
        );
    }
}
