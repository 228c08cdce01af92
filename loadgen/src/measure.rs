//! Measurements of a running node that loadgen neither started nor
//! provisioned (gatewayd, or bench/conventional for the side-by-side
//! benchmark), given tokens of applications installed in one server:
//!
//! - [`idle`] (`loadgen measure idle`): node RSS before opening N sessions
//!   and once all are READY, per session and per 1,000; then every session
//!   is closed with 1000 (which ends it on the node: nothing is left
//!   detached);
//! - [`fanout`] (`loadgen measure fanout`): N sessions, then the producer
//!   writes MESSAGE_CREATE to the ingest port open-loop at `rate` for
//!   `seconds`, each `d` about `payload` bytes starting with `"ts_ns":T`
//!   (T the *scheduled* time, so a producer that falls behind shows up as
//!   latency); deliveries, gaps, latency (receive time - T), node CPU,
//!   RSS and metrics. `stall` sessions stop reading once READY (they still
//!   heartbeat) and are left out of latency and gaps. With `servers` S > 1
//!   the tokens are of applications each in its own server: the events go
//!   round-robin to the S servers seen in the GUILD_CREATEs, `rate` per
//!   server (see `servers`), so one event reaches only that server's sessions;
//! - [`hold`] (`loadgen hold-sessions`): holds sessions until stdin closes
//!   (or `hold_secs`), printing progress as `KEY N` lines, for tests that
//!   need many sessions from several processes.
//!
//! Sessions are the fleet's (io_uring direct descriptors, the producer's
//! schedule, the node's /proc and /metrics from `nodes`), run without
//! reconnecting so that a lost session stays counted as lost. Output is
//! `key value` lines on stdout (scripts/side-by-side.sh and the docs read
//! them), notes on stderr.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::fleet::{spread_sources, Fleet, FleetConfig};
use crate::nodes::{self, Metrics};
use crate::producer::{Producer, ProducerConfig};
use crate::servers;
use crate::session::Counters;
use crate::world::{Bot, World};

/// Sessions per source address with `bind_base` (one address has ~28,000 ports).
pub const SESSIONS_PER_SOURCE: usize = 25_000;

/// GUILDS | GUILD_MESSAGES | MESSAGE_CONTENT.
pub const DEFAULT_INTENTS: u64 =
    proto::intents::GUILDS | proto::intents::GUILD_MESSAGES | proto::intents::MESSAGE_CONTENT;

/// How the sessions of `idle` and `fanout` are opened.
#[derive(Clone, Debug)]
pub struct SessionOpts {
    pub addr: SocketAddrV4,
    /// Session `k` identifies with token `k % tokens.len()`.
    pub tokens: Vec<String>,
    pub sessions: usize,
    pub intents: u64,
    pub threads: usize,
    /// Sessions per thread between connect and READY at a time.
    pub window: usize,
    /// Source addresses from here, one per [`SESSIONS_PER_SOURCE`].
    pub bind_base: Option<Ipv4Addr>,
    /// Heartbeats carry the last `s` (false: `null`, which releases nothing).
    pub ack_seq: bool,
    /// A session not READY this long after its connect has failed.
    pub ready_timeout: Duration,
    /// How long to wait for all to be READY.
    pub timeout: Duration,
    /// The node's pid (RSS, CPU) and admin address (/metrics), when known.
    pub node_pid: Option<u32>,
    pub admin: Option<SocketAddr>,
}

pub struct IdleOpts {
    pub s: SessionOpts,
    pub settle: Duration,
    pub hold: Duration,
}

pub struct FanoutOpts {
    pub s: SessionOpts,
    pub ingest: SocketAddr,
    pub rate: f64,
    pub seconds: f64,
    pub payload: usize,
    pub stall: usize,
    pub stall_rcvbuf: Option<i32>,
    pub drain: Duration,
    /// (server id, channel id); None: from the first GUILD_CREATE (`#general`).
    pub target: Option<(u64, u64)>,
    /// Servers to send to, `rate` events/s each (1: the one of `target`).
    pub servers: usize,
    /// Events per burst (`ProducerConfig::burst`).
    pub burst: u64,
}

/// A world of the given tokens (one bot each), no servers: loadgen only
/// measures, it cannot check entitlement in a server it did not make.
fn token_world(tokens: &[String], intents: u64, shards: u32) -> World {
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

fn start_fleet(
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
fn wait_ready(fleet: &Fleet, n: usize, timeout: Duration) -> f64 {
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

fn scrape(admin: Option<SocketAddr>) -> Metrics {
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

fn rss_kb(pid: Option<u32>) -> Option<u64> {
    nodes::rss_bytes(pid?).map(|b| b / 1024)
}

fn kb(v: Option<u64>) -> String {
    v.map_or("?".into(), |v| v.to_string())
}

fn fmt_list(v: &[f64]) -> String {
    v.iter()
        .map(|x| format!("{x:.0}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Close codes the sessions received, e.g. `{1000: 2, 4000: 1}`.
fn close_codes(c: &Counters) -> String {
    let mut parts: Vec<String> = (0..16)
        .filter(|&i| c.closes[i] > 0)
        .map(|i| format!("{}: {}", 4000 + i, c.closes[i]))
        .collect();
    if c.closes[16] > 0 {
        parts.push(format!("other: {}", c.closes[16]));
    }
    format!("{{{}}}", parts.join(", "))
}

fn first_problem(fleet: &Fleet) {
    if let Some(v) = fleet.shared.first_violation.lock().unwrap().as_ref() {
        eprintln!("loadgen measure: first problem: {v}");
    }
}

// ---------------------------------------------------------------- idle

pub fn idle(o: &IdleOpts) -> Result<(), String> {
    let s = &o.s;
    println!("load_before {}", nodes::loadavg());
    let rss0 = rss_kb(s.node_pid);
    let m0 = scrape(s.admin);
    println!("node_rss_before_kb {}", kb(rss0));
    let fleet = start_fleet(s, 0, None, false)?;
    let secs = wait_ready(&fleet, s.sessions, s.timeout);
    let ready = fleet.counters().readies;
    println!(
        "all_ready {} of {} in {:.1}s ({:.0} identifies/s)",
        ready,
        s.sessions,
        secs,
        ready as f64 / secs.max(1e-9)
    );
    std::thread::sleep(o.settle);
    let rss1 = rss_kb(s.node_pid);
    let m1 = scrape(s.admin);
    println!("node_rss_after_kb {}", kb(rss1));
    if let (Some(r0), Some(r1)) = (rss0, rss1) {
        let delta = (r1 as f64 - r0 as f64) * 1024.0;
        println!("node_rss_delta_bytes {delta:.0}");
        if ready > 0 {
            println!(
                "node_rss_per_1000_sessions_bytes {:.0}",
                delta / ready as f64 * 1000.0
            );
            println!("node_rss_per_session_bytes {:.0}", delta / ready as f64);
        }
    }
    let c = fleet.counters();
    if ready > 0 {
        println!(
            "ready_plus_guild_create_bytes_per_session {:.0}",
            c.handshake_bytes as f64 / ready as f64
        );
    }
    if s.admin.is_some() {
        println!(
            "node_sessions_by_worker {}",
            fmt_list(&m1.by_worker("gatewayd_sessions"))
        );
        println!(
            "node_ring_chunks_free_by_worker {} -> {}",
            fmt_list(&m0.by_worker("gatewayd_ring_chunks_free")),
            fmt_list(&m1.by_worker("gatewayd_ring_chunks_free"))
        );
    }
    if !o.hold.is_zero() {
        std::thread::sleep(o.hold);
        let c = fleet.counters();
        println!(
            "after_hold_secs {} ready={} lost={} heartbeat_acks={} node_rss_kb={}",
            o.hold.as_secs(),
            c.readies,
            c.lost,
            c.hb_acks,
            kb(rss_kb(s.node_pid))
        );
    }
    println!("load_after {}", nodes::loadavg());
    first_problem(&fleet);
    let c = fleet.stop_closing(1000, Duration::from_millis(200));
    println!("sessions_failed {} sessions_lost {}", c.failed, c.lost);
    Ok(())
}

// ---------------------------------------------------------------- fanout

struct Snap {
    t: Instant,
    m: Metrics,
    cpu: Option<f64>,
    rss: Option<u64>,
    self_cpu: f64,
    softirqd: f64,
    c: Counters,
    tcp_mem: Option<u64>,
}

impl Snap {
    fn take(fleet: &Fleet, s: &SessionOpts) -> Snap {
        Snap {
            t: Instant::now(),
            m: scrape(s.admin),
            cpu: s.node_pid.and_then(nodes::cpu_seconds),
            rss: rss_kb(s.node_pid),
            self_cpu: nodes::self_cpu_seconds(),
            softirqd: nodes::ksoftirqd_seconds(),
            c: fleet.counters(),
            tcp_mem: nodes::tcp_mem_pages(),
        }
    }
    /// MESSAGE_CREATE read by the sessions that read.
    fn read(&self) -> u64 {
        self.c.deliveries - self.c.paced_deliveries
    }
}

fn pct(h: &Histogram<u64>, q: f64) -> f64 {
    h.value_at_quantile(q) as f64 / 1e3
}

pub fn fanout(o: &FanoutOpts) -> Result<(), String> {
    let s = &o.s;
    let n = s.sessions;
    let stall = o.stall.min(n);
    println!("load_before {}", nodes::loadavg());
    let rss_start = rss_kb(s.node_pid);
    let many = o.servers > 1;
    let fleet = start_fleet(s, stall, o.stall_rcvbuf, many)?;
    let ready_secs = wait_ready(&fleet, n, s.timeout);
    let ready = fleet.counters().readies;
    println!("all_ready {ready} of {n} in {ready_secs:.1}s");
    if ready == 0 {
        first_problem(&fleet);
        fleet.stop();
        return Err("no session became READY".into());
    }
    let readers = ready.saturating_sub(stall as u64);
    let mut targets = if many {
        match servers::wait_for(
            &fleet.shared.servers,
            o.servers,
            readers,
            Duration::from_secs(10),
        ) {
            Ok(t) => t,
            Err(e) => {
                fleet.stop();
                return Err(e);
            }
        }
    } else {
        Vec::new()
    };
    let target = match (o.target, targets.first()) {
        (_, Some(t)) => (t.server, t.channel),
        (Some(t), None) => t,
        (None, None) => {
            // The GUILD_CREATE follows READY; give the last one a moment.
            let deadline = Instant::now() + Duration::from_secs(2);
            loop {
                if let Some(g) = *fleet.shared.guild.lock().unwrap() {
                    break g;
                }
                if Instant::now() > deadline {
                    fleet.stop();
                    return Err("no GUILD_CREATE with #general seen".into());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    let (server, channel) = target;
    std::thread::sleep(Duration::from_secs(1));
    // Many servers: the readers each server's GUILD_CREATE found (counted
    // again after the second, for GUILD_CREATEs that were still on their way).
    servers::recount(&fleet.shared.servers, &mut targets);
    let readers = if many {
        targets.iter().map(|t| t.readers).sum()
    } else {
        readers
    };
    let nserv = o.servers.max(1);
    let s0 = Snap::take(&fleet, s);
    fleet.set_measuring(true);
    // The fleet threads see the flag at their next tick (20 ms).
    std::thread::sleep(Duration::from_millis(50));
    let per_server = (o.rate * o.seconds).round() as u64;
    let total = per_server * nserv as u64;
    let prod = Producer::start(
        Arc::new(World::default()),
        ProducerConfig {
            ingest: vec![o.ingest],
            rate: o.rate * nserv as f64,
            payload: o.payload,
            targets: if many {
                targets.iter().map(|t| (t.server, t.channel)).collect()
            } else {
                vec![(server, channel)]
            },
            limit: Some(total),
            burst: o.burst.max(1),
            ..ProducerConfig::default()
        },
    );
    let produced = prod.wait_done(Duration::from_secs_f64(o.seconds * 2.0 + 30.0));
    let s1 = Snap::take(&fleet, s);
    if !produced {
        eprintln!("loadgen measure: the producer did not hand over every event in time");
    }
    let sent = prod.stats.events.load(Relaxed);
    let expected = if many {
        servers::expected_deliveries(sent, o.burst.max(1), &targets)
    } else {
        sent * readers
    };
    let dl = Instant::now() + o.drain;
    while fleet.counters().deliveries - fleet.counters().paced_deliveries < expected
        && Instant::now() < dl
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    let drained_after = s1.t.elapsed().as_secs_f64();
    let s2 = Snap::take(&fleet, s);
    let (hist, _) = fleet.take_histograms();
    first_problem(&fleet);
    let io_errors = prod.errors.lock().unwrap().clone();
    let pst = prod.stop();
    for e in io_errors.iter().chain(&prod_errors(&pst)) {
        eprintln!("loadgen measure: producer: {e}");
    }
    fleet.stop_closing(1000, Duration::from_millis(200));

    let win = s1.t.duration_since(s0.t).as_secs_f64();
    let all = s2.t.duration_since(s0.t).as_secs_f64();
    let recv_win = s1.read() - s0.read();
    let recv_all = s2.read() - s0.read();
    let dsum = |m: &Metrics| m.sum("gatewayd_deliveries_total");
    let node_del = dsum(&s2.m) - dsum(&s0.m);
    let node_del_win = dsum(&s1.m) - dsum(&s0.m);
    let node_sent_bytes =
        s2.m.sum("gatewayd_sent_bytes_total") - s0.m.sum("gatewayd_sent_bytes_total");
    let cpu = match (s0.cpu, s2.cpu) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    let minus =
        |a: Vec<f64>, b: Vec<f64>| -> Vec<f64> { a.iter().zip(&b).map(|(x, y)| x - y).collect() };
    let busy = minus(
        s2.m.by_worker("gatewayd_worker_busy_seconds_total"),
        s0.m.by_worker("gatewayd_worker_busy_seconds_total"),
    );
    let del_w = minus(
        s2.m.by_worker("gatewayd_deliveries_total"),
        s0.m.by_worker("gatewayd_deliveries_total"),
    );

    println!("server {server} channel {channel}");
    if many {
        let r = targets.iter().map(|t| t.readers);
        println!(
            "servers {nserv} events_per_server {} events_per_s_per_server {} events_per_s_total {} readers_per_server_min {} max {}",
            sent / nserv as u64,
            o.rate,
            o.rate * nserv as f64,
            r.clone().min().unwrap_or(0),
            r.max().unwrap_or(0)
        );
    }
    println!(
        "sessions {n} ready {ready} stalled {stall} readers {readers} tokens {}",
        s.tokens.len()
    );
    println!(
        "node_sessions_by_worker {}",
        fmt_list(&s0.m.by_worker("gatewayd_sessions"))
    );
    println!("rate_offered_events_per_s {}", o.rate);
    println!("seconds {}", o.seconds);
    println!("payload_d_bytes {}", pst.d_bytes.load(Relaxed));
    println!(
        "events_sent {sent} producer_max_lag_ms {:.1} producer_bytes {}",
        pst.max_lag_ns.load(Relaxed) as f64 / 1e6,
        pst.bytes.load(Relaxed)
    );
    println!("offered_deliveries_per_s {:.0}", o.rate * readers as f64);
    println!("expected_deliveries {expected}");
    println!(
        "received_deliveries {recv_all} missing {}",
        expected as i64 - recv_all as i64
    );
    println!(
        "received_within_send_window {recv_win} ({:.0}/s over {win:.2}s)",
        recv_win as f64 / win
    );
    println!(
        "received_deliveries_per_s {:.0} (all received / send window)",
        recv_all as f64 / win
    );
    println!("drained_secs_after_producer {drained_after:.2}");
    println!(
        "client_rx_mbytes_per_s {:.1}",
        (s2.c.bytes_in - s0.c.bytes_in) as f64 / all / 1e6
    );
    println!(
        "node_deliveries_delta {node_del:.0} ({:.0}/s over send window+drain {all:.2}s; {node_del_win:.0} within send window = {:.0}/s)",
        node_del / all,
        node_del_win / win
    );
    println!("node_deliveries_by_worker {}", fmt_list(&del_w));
    println!("node_sent_mbytes {:.1}", node_sent_bytes / 1e6);
    // How much queued events coalesced: event frames per plain-text send
    // (gatewayd only; a node without the counters prints nothing).
    let delta = |name: &str| s2.m.sum(name) - s0.m.sum(name);
    let (sends, frames) = (
        delta("gatewayd_sends_total"),
        delta("gatewayd_sent_frames_total"),
    );
    if sends > 0.0 {
        println!(
            "node_sends {sends:.0} node_sent_frames {frames:.0} frames_per_send {:.3}",
            frames / sends
        );
    }
    println!(
        "gaps {} reorders {}",
        s2.c.gaps - s0.c.gaps,
        s2.c.duplicates - s0.c.duplicates
    );
    println!("sessions_lost_during_run {}", s2.c.lost);
    if let Some(c) = cpu {
        println!(
            "node_cpu_secs {c:.2} (over {all:.2}s = {:.2} cores)",
            c / all
        );
        println!(
            "deliveries_per_node_cpu_second {:.0}",
            node_del / c.max(1e-9)
        );
        let k = s2.softirqd - s0.softirqd;
        println!("ksoftirqd_cpu_secs {k:.2}");
        println!(
            "deliveries_per_node_and_ksoftirqd_cpu_second {:.0}",
            node_del / (c + k).max(1e-9)
        );
    }
    println!(
        "worker_busy_secs {}",
        busy.iter()
            .map(|b| format!("{b:.2}"))
            .collect::<Vec<_>>()
            .join(",")
    );
    println!("client_cpu_secs {:.2}", s2.self_cpu - s0.self_cpu);
    println!(
        "latency_ms p50 {:.2} p90 {:.2} p99 {:.2} p99.9 {:.2} max {:.2} (n={})",
        pct(&hist, 0.5),
        pct(&hist, 0.9),
        pct(&hist, 0.99),
        pct(&hist, 0.999),
        hist.max() as f64 / 1e3,
        hist.len()
    );
    println!(
        "node_rss_kb before_connect {} before_send {} after_send {} after_drain {}",
        kb(rss_start),
        kb(s0.rss),
        kb(s1.rss),
        kb(s2.rss)
    );
    println!(
        "tcp_mem_pages before_send {} after_send {} after_drain {}",
        kb(s0.tcp_mem),
        kb(s1.tcp_mem),
        kb(s2.tcp_mem)
    );
    println!(
        "ring_chunks_free_by_worker before {} after_send {} after_drain {}",
        fmt_list(&s0.m.by_worker("gatewayd_ring_chunks_free")),
        fmt_list(&s1.m.by_worker("gatewayd_ring_chunks_free")),
        fmt_list(&s2.m.by_worker("gatewayd_ring_chunks_free"))
    );
    for name in [
        "gatewayd_slow_consumer_closes_total",
        "gatewayd_arena_wraps_total",
        "gatewayd_arena_lost_reads_total",
        "gatewayd_worker_inbox_drops_total",
        "gatewayd_sessions_degraded",
        "gatewayd_arena_records_total",
    ] {
        let base = if name.ends_with("_total") {
            s0.m.sum(name)
        } else {
            0.0
        };
        println!("{name} {:.0}", s2.m.sum(name) - base);
    }
    let dropped = s2.m.sum("gatewayd_ingest_dropped_batches_total")
        - s0.m.sum("gatewayd_ingest_dropped_batches_total");
    println!("ingest_dropped_batches {dropped:.0}");
    let c0 = s0.m.by_label("gatewayd_closes_total", "code");
    let closes: Vec<String> =
        s2.m.by_label("gatewayd_closes_total", "code")
            .iter()
            .map(|(k, v)| (k, v - c0.get(k).copied().unwrap_or(0.0)))
            .filter(|(_, v)| *v > 0.0)
            .map(|(k, v)| format!("{k}:{v:.0}"))
            .collect();
    println!("node_closes_during_run {}", closes.join(" "));
    println!("client_close_codes {}", close_codes(&s2.c));
    if stall > 0 {
        println!(
            "stalled_sessions_read {} of {} offered to them",
            s2.c.paced_deliveries - s0.c.paced_deliveries,
            sent / nserv as u64 * stall as u64
        );
    }
    println!("heartbeat_acks {}", s2.c.hb_acks);
    println!("load_after {}", nodes::loadavg());
    Ok(())
}

fn prod_errors(st: &crate::producer::ProducerStats) -> Vec<String> {
    let mut v = Vec::new();
    let (d, b) = (
        st.node_disconnects.load(Relaxed),
        st.dropped_bytes.load(Relaxed),
    );
    if d > 0 || b > 0 {
        // Events written while the ingest port was unreachable are lost
        // (and still counted in events_sent: they were due).
        v.push(format!("{d} ingest disconnects, {b} bytes dropped"));
    }
    v
}

// ---------------------------------------------------------------- hold

pub struct HoldOpts {
    pub gateway: SocketAddrV4,
    pub token: String,
    pub count: usize,
    pub source: Option<Ipv4Addr>,
    pub threads: usize,
    pub window: usize,
    pub intents: u64,
    pub hold: Option<Duration>,
    /// A session not READY this long after its connect has failed.
    pub stall: Duration,
    /// Session `k` identifies as `[(first_index + k) % N, N]`; None: no
    /// `shard` in Identify (shard `[0, 1]`).
    pub shards: Option<u32>,
    pub first_index: usize,
}

/// Opens and holds `count` sessions until stdin is closed (or `hold`
/// passes). Prints `opened`, `ready`, `failed`, `lost`, `acks` lines when
/// they change (every 200 ms), `all_ready N MS` once every session is
/// READY, and `stopped` at the end.
pub fn hold(o: &HoldOpts) -> Result<(), String> {
    let shards = o.shards.unwrap_or(1).max(1);
    let world = Arc::new(token_world(
        std::slice::from_ref(&o.token),
        o.intents,
        shards,
    ));
    let plan = (0..o.count)
        .map(|k| (0, ((o.first_index + k) % shards as usize) as u32))
        .collect();
    let fleet = Fleet::start(
        world,
        FleetConfig {
            nodes: vec![o.gateway],
            sources: o.source.into_iter().collect(),
            threads: o.threads.max(1),
            window: o.window.max(1),
            handshake_timeout: o.stall,
            sessions: Some(plan),
            send_shard: o.shards.is_some(),
            reconnect: false,
            ..FleetConfig::default()
        },
    )
    .map_err(|e| format!("fleet: {e}"))?;
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut sink = [0u8; 256];
            let mut stdin = std::io::stdin();
            while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
            stop.store(true, Relaxed);
        });
    }
    let t0 = Instant::now();
    let mut last = [u64::MAX; 5];
    let mut all_ready_printed = false;
    let mut noted = String::new();
    let out = std::io::stdout();
    loop {
        let c = fleet.counters();
        let now = [c.upgrades, c.readies, c.failed, c.lost, c.hb_acks];
        {
            let mut o2 = out.lock();
            for (i, key) in ["opened", "ready", "failed", "lost", "acks"]
                .iter()
                .enumerate()
            {
                if now[i] != last[i] {
                    let _ = writeln!(o2, "{key} {}", now[i]);
                }
            }
            if !all_ready_printed && now[1] == o.count as u64 {
                let _ = writeln!(o2, "all_ready {} {}", now[1], t0.elapsed().as_millis());
                all_ready_printed = true;
            }
            let _ = o2.flush();
        }
        if (now[2], now[3]) != (last[2], last[3]) && now[2] + now[3] > 0 {
            let why = fleet
                .shared
                .first_violation
                .lock()
                .unwrap()
                .clone()
                .unwrap_or_default();
            let note = format!(
                "{} failed, {} lost; closes received {}; connect errors {}; zombies {}; op 7 {}; op 9 {}{}",
                now[2],
                now[3],
                close_codes(&c),
                c.connect_errors,
                c.zombies,
                c.reconnects_asked,
                c.invalid_new_session + c.invalid_resumable,
                if why.is_empty() {
                    String::new()
                } else {
                    format!("; first problem: {why}")
                }
            );
            if note != noted {
                eprintln!("loadgen hold-sessions: {note}");
                noted = note;
            }
        }
        last = now;
        if stop.load(Relaxed) || o.hold.is_some_and(|h| t0.elapsed() >= h) {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = fleet.stop();
    println!("stopped");
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_codes_and_token_world() {
        let mut c = Counters::default();
        c.closes[0] = 2;
        c.closes[16] = 1;
        assert_eq!(close_codes(&c), "{4000: 2, other: 1}");
        let w = token_world(&["a".into(), "b".into()], DEFAULT_INTENTS, 4);
        assert_eq!(w.bots.len(), 2);
        assert_eq!(w.bots[1].token, "b");
        assert_eq!(w.bots[0].shards, 4);
        assert!(w.sees_content(0));
        assert_eq!(
            spread_sources(Ipv4Addr::new(127, 0, 0, 2), 60_000, SESSIONS_PER_SOURCE),
            vec![
                Ipv4Addr::new(127, 0, 0, 2),
                Ipv4Addr::new(127, 0, 0, 3),
                Ipv4Addr::new(127, 0, 0, 4)
            ]
        );
    }
}
