//! The admin port: `GET /metrics` (Prometheus text, the deliveries counter
//! also as `gatewayd_deliveries_total` for `loadgen measure fanout`),
//! `/healthz` and `/readyz`. One request per connection, heads up to 8 KiB.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::state::State;

pub async fn admin_accept(l: TcpListener, st: Arc<State>) {
    loop {
        let Ok((mut sock, _)) = l.accept().await else {
            continue;
        };
        let st = st.clone();
        tokio::spawn(async move {
            let mut req = Vec::new();
            let mut buf = [0u8; 1024];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 8192 {
                match sock.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            let (status, body) = if req.starts_with(b"GET /metrics") {
                ("200 OK", metrics_text(&st))
            } else if req.starts_with(b"GET /healthz") || req.starts_with(b"GET /readyz") {
                ("200 OK", "ok\n".to_string())
            } else {
                ("404 Not Found", "not found\n".to_string())
            };
            let resp = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = sock.write_all(resp.as_bytes()).await;
        });
    }
}

fn metrics_text(st: &State) -> String {
    let m = &st.metrics;
    let d = m.deliveries.load(Relaxed);
    format!(
        "# TYPE conventional_deliveries_total counter\nconventional_deliveries_total {d}\n\
         # HELP gatewayd_deliveries_total alias of conventional_deliveries_total, read by loadgen measure fanout\n\
         # TYPE gatewayd_deliveries_total counter\ngatewayd_deliveries_total {d}\n\
         # TYPE conventional_events_in_total counter\nconventional_events_in_total {}\n\
         # TYPE conventional_lagged_events_total counter\nconventional_lagged_events_total {}\n\
         # TYPE conventional_identifies_total counter\nconventional_identifies_total {}\n\
         # TYPE conventional_ingest_errors_total counter\nconventional_ingest_errors_total {}\n\
         # TYPE conventional_unknown_server_events_total counter\nconventional_unknown_server_events_total {}\n\
         # TYPE conventional_sessions gauge\nconventional_sessions {}\n\
         # TYPE conventional_connections gauge\nconventional_connections {}\n",
        m.events_in.load(Relaxed),
        m.lagged_events.load(Relaxed),
        m.identifies.load(Relaxed),
        m.ingest_errors.load(Relaxed),
        m.unknown_server_events.load(Relaxed),
        m.sessions.load(Relaxed),
        m.connections.load(Relaxed),
    )
}
