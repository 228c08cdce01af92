//! A Discord-Gateway-style node built the way most teams would build one:
//! the baseline of the side-by-side benchmark (issue 6, `docs/bench/side-by-side.md`).
//!
//! - tokio multi-thread runtime (one worker thread per core by default);
//! - tokio-tungstenite, one task per WebSocket connection, `SinkExt::send`
//!   per outgoing message;
//! - one `tokio::sync::broadcast` channel per server (made at start), each
//!   carrying that server's events to the tasks of its sessions;
//! - serde_json: each ingest record's `d` is parsed into a `serde_json::Value`
//!   once, and every recipient task serialises its own
//!   `{"op":0,"t":..,"s":..,"d":..}` (the `s` differs per session).
//!
//! The protocol subset is what `loadgen measure` and ordinary bots use:
//! HTTP upgrade on any path, op 10 Hello, op 2 Identify (token checked
//! against `--tokens-file` or, without it, any token accepted; intents),
//! READY (`s` = 1) and one GUILD_CREATE (`s` = 2) for the bot's server
//! (channels `general`, `random`, `announcements`), op 1
//! Heartbeat -> op 11, MESSAGE_CREATE and any other dispatch from the ingest
//! port with a per-session `s`, filtered by intents, server membership and
//! channel permissions, with MESSAGE_CONTENT redaction. No resume, no
//! sharding beyond `[0, 1]`, no rate limits: a baseline, not a product.
//!
//! Servers: `--servers S` (default 1) serves S servers, ids `--server-id` +
//! 16·j (j < S; channels are the server id + 1, 2, 3, so they are distinct);
//! the bot of token line i (0-based) is in server j = i % S alone (without
//! `--tokens-file`, a made-up bot's server is a hash of its token mod S).
//! An ingest record for a server the node does not serve is counted and
//! dropped.
//!
//! Events come in on `--ingest-addr` in the same record format as gatewayd's
//! ingest port (the `ingest` crate's `FrameReader` decodes them).
//! `--admin-addr` serves `GET /metrics` (Prometheus text): deliveries,
//! sessions, events in, events skipped by lagging receivers. The deliveries
//! counter is also exported as `gatewayd_deliveries_total` so that
//! `loadgen measure fanout --admin` reports the same node-side figures for both nodes.
//!
//! ```text
//! conventional-gateway [--gateway-addr 127.0.0.1:28080] [--ingest-addr 127.0.0.1:28081]
//!     [--admin-addr 127.0.0.1:29090] [--tokens-file F] [--server-id ID] [--servers 1]
//!     [--heartbeat-interval-ms 41250] [--broadcast-capacity 4096 (per server)] [--workers N]
//! ```
//!
//! Files: `config.rs` (command line), `state.rs` (shared state, bots,
//! events), `gateway.rs` (one WebSocket session), `ingest_port.rs` (the
//! ingest listener), `admin.rs` (metrics); this file builds the runtime,
//! binds the listeners and accepts gateway connections.

#![recursion_limit = "256"]

mod admin;
mod config;
mod gateway;
mod ingest_port;
mod state;

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::broadcast;

use admin::admin_accept;
use config::{die, parse_args, Config};
use gateway::connection;
use ingest_port::ingest_accept;
use state::{load_bots, server_of, Metrics, State};

fn main() {
    let cfg = parse_args();
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    rt.enable_all();
    if let Some(n) = cfg.workers {
        rt.worker_threads(n.max(1));
    }
    let rt = rt.build().expect("tokio runtime");
    rt.block_on(run(cfg));
}

async fn run(cfg: Config) {
    let bots = cfg.tokens_file.as_deref().map(|p| load_bots(p, &cfg));
    let servers = (0..cfg.servers)
        .map(|j| {
            let (tx, _) = broadcast::channel(cfg.broadcast_capacity.max(1));
            (server_of(&cfg, j), tx)
        })
        .collect();
    let gw = TcpListener::bind(&cfg.gateway_addr)
        .await
        .unwrap_or_else(|e| die(&format!("gateway listener {}: {e}", cfg.gateway_addr)));
    let ing = TcpListener::bind(&cfg.ingest_addr)
        .await
        .unwrap_or_else(|e| die(&format!("ingest listener {}: {e}", cfg.ingest_addr)));
    let gateway_url = format!("ws://{}", gw.local_addr().unwrap());
    let admin = match &cfg.admin_addr {
        Some(a) => Some(
            TcpListener::bind(a)
                .await
                .unwrap_or_else(|e| die(&format!("admin listener {a}: {e}"))),
        ),
        None => None,
    };
    eprintln!(
        "conventional-gateway: gateway={} ingest={} admin={} tokens={} server={} servers={}",
        gw.local_addr().unwrap(),
        ing.local_addr().unwrap(),
        admin
            .as_ref()
            .map(|a| a.local_addr().unwrap().to_string())
            .unwrap_or_else(|| "-".into()),
        bots.as_ref()
            .map(|b| b.len().to_string())
            .unwrap_or_else(|| "any".into()),
        cfg.server_id,
        cfg.servers
    );
    let state = Arc::new(State {
        cfg,
        bots,
        servers,
        metrics: Metrics::default(),
        gateway_url,
    });
    tokio::spawn(ingest_accept(ing, state.clone()));
    if let Some(a) = admin {
        tokio::spawn(admin_accept(a, state.clone()));
    }
    loop {
        match gw.accept().await {
            Ok((sock, _)) => {
                let st = state.clone();
                tokio::spawn(async move {
                    st.metrics.connections.fetch_add(1, Relaxed);
                    let _ = connection(sock, &st).await;
                    st.metrics.connections.fetch_sub(1, Relaxed);
                });
            }
            Err(e) => {
                eprintln!("conventional-gateway: accept: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}
