//! What the measurements share: a world of the given tokens, the fleet
//! that opens the sessions (no reconnects, so a lost session stays
//! counted), the wait for READY (bounded by `timeout`), the node's
//! /metrics and RSS, and formatting of counts, lists and close codes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::opts::{SessionOpts, SESSIONS_PER_SOURCE};
use crate::fleet::{spread_sources, Fleet, FleetConfig};
use crate::nodes::{self, Metrics};
use crate::session::Counters;
use crate::world::{Bot, World};

/// A world of the given tokens (one bot each), no servers: loadgen only
/// measures, it cannot check entitlement in a server it did not make.
pub(super) fn token_world(tokens: &[String], intents: u64, shards: u32) -> World {
    World {
        bots: tokens
            .iter()
            .enumerate()
            .map(|(i, t)| Bot {
                app_id: i as u64 + 1,
                token: t.clone(),
                shards: shards.max(1),
                intents,
                servers: Vec::new(),
            })
            .collect(),
        ..World::default()
    }
}

pub(super) fn start_fleet(
    o: &SessionOpts,
    stall: usize,
    stall_rcvbuf: Option<i32>,
    collect_servers: bool,
) -> Result<Fleet, String> {
    if o.tokens.is_empty() {
        return Err("no token".into());
    }
    let world = Arc::new(token_world(&o.tokens, o.intents, 1));
    let plan = (0..o.sessions)
        .map(|k| ((k % o.tokens.len()) as u32, 0))
        .collect();
    Fleet::start(
        world,
        FleetConfig {
            nodes: vec![o.addr],
            sources: o
                .bind_base
                .map(|b| spread_sources(b, o.sessions, SESSIONS_PER_SOURCE))
                .unwrap_or_default(),
            threads: o.threads.max(1),
            window: o.window.max(1),
            handshake_timeout: o.ready_timeout,
            sessions: Some(plan),
            stall,
            stall_rcvbuf,
            ack_seq: o.ack_seq,
            send_shard: false,
            reconnect: false,
            collect_servers,
            ..FleetConfig::default()
        },
    )
    .map_err(|e| format!("fleet: {e}"))
}

/// Waits until every session is READY or failed (or `timeout`), printing
/// progress once a second; returns the seconds it took.
pub(super) fn wait_ready(fleet: &Fleet, n: usize, timeout: Duration) -> f64 {
    let t0 = Instant::now();
    let mut last_print = Instant::now();
    loop {
        let c = fleet.counters();
        let (r, f) = (c.readies, c.failed + c.lost);
        if r + f >= n as u64 || t0.elapsed() > timeout {
            let secs = t0.elapsed().as_secs_f64();
            println!(
                "progress opened={} ready={r} failed={f} identify_retries={} t={secs:.1}s",
                c.connects,
                c.invalid_new_session + c.invalid_resumable,
            );
            return secs;
        }
        if last_print.elapsed() >= Duration::from_secs(1) {
            last_print = Instant::now();
            println!(
                "progress opened={} ready={r} failed={f} t={:.0}s",
                c.connects,
                t0.elapsed().as_secs_f64()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(super) fn scrape(admin: Option<SocketAddr>) -> Metrics {
    let Some(admin) = admin else {
        return Metrics::default();
    };
    match nodes::http_get(admin, "/metrics") {
        Ok((200, body)) => Metrics::parse(&body),
        Ok((status, _)) => {
            eprintln!("loadgen measure: {admin}/metrics answered {status}");
            Metrics::default()
        }
        Err(e) => {
            eprintln!("loadgen measure: scraping {admin}/metrics: {e}");
            Metrics::default()
        }
    }
}

pub(super) fn rss_kb(pid: Option<u32>) -> Option<u64> {
    nodes::rss_bytes(pid?).map(|b| b / 1024)
}

pub(super) fn kb(v: Option<u64>) -> String {
    v.map_or("?".into(), |v| v.to_string())
}

pub(super) fn fmt_list(v: &[f64]) -> String {
    v.iter()
        .map(|x| format!("{x:.0}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Close codes the sessions received, e.g. `{1000: 2, 4000: 1}`.
pub(super) fn close_codes(c: &Counters) -> String {
    let mut parts: Vec<String> = (0..16)
        .filter(|&i| c.closes[i] > 0)
        .map(|i| format!("{}: {}", 4000 + i, c.closes[i]))
        .collect();
    if c.closes[16] > 0 {
        parts.push(format!("other: {}", c.closes[16]));
    }
    format!("{{{}}}", parts.join(", "))
}

pub(super) fn first_problem(fleet: &Fleet) {
    if let Some(v) = fleet.shared.first_violation.lock().unwrap().as_ref() {
        eprintln!("loadgen measure: first problem: {v}");
    }
}

/// Tokens of a file, one a line (blank lines skipped).
pub fn read_tokens(path: &std::path::Path) -> Result<Vec<String>, String> {
    let t: Vec<String> = std::fs::read_to_string(path)
        .map_err(|e| format!("reading {}: {e}", path.display()))?
        .lines()
        .map(|l| l.trim().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    if t.is_empty() {
        return Err(format!("{} holds no token", path.display()));
    }
    Ok(t)
}
