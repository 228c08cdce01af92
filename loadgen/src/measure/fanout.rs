//! `loadgen measure fanout`: N sessions, then the producer writes
//! MESSAGE_CREATE open-loop at `rate` for `seconds` (to one server, or
//! round-robin to the servers the GUILD_CREATEs named); reports
//! deliveries, gaps, latency from the scheduled time, node CPU, RSS and
//! metrics, as `key value` lines.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use super::common::{
    close_codes, first_problem, fmt_list, kb, rss_kb, scrape, start_fleet, wait_ready,
};
use super::opts::{FanoutOpts, SessionOpts};
use super::timeline;
use crate::fleet::Fleet;
use crate::nodes::{self, Metrics};
use crate::producer::{Producer, ProducerConfig};
use crate::servers;
use crate::session::Counters;
use crate::world::World;

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
    if o.series_dir.is_some() {
        fleet.start_series();
    }
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
    // Once a second while the producer runs and the fleet drains: what
    // was handed over, read, and the node's CPU (timeline.rs).
    let read_now = |fleet: &Fleet| {
        let c = fleet.counters();
        c.deliveries - c.paced_deliveries
    };
    let mut sampler =
        timeline::Sampler::new(s0.t, prod.stats.events.load(Relaxed), s0.read(), s0.cpu);
    let sample = |sampler: &mut timeline::Sampler| {
        sampler.poll(|| {
            (
                prod.stats.events.load(Relaxed),
                read_now(&fleet),
                s.node_pid.and_then(nodes::cpu_seconds),
            )
        })
    };
    let produce_deadline = Instant::now() + Duration::from_secs_f64(o.seconds * 2.0 + 30.0);
    let produced = loop {
        if prod.stats.done.load(Relaxed) {
            break true;
        }
        if Instant::now() >= produce_deadline {
            break false;
        }
        sample(&mut sampler);
        std::thread::sleep(Duration::from_millis(2));
    };
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
    while read_now(&fleet) < expected && Instant::now() < dl {
        sample(&mut sampler);
        std::thread::sleep(Duration::from_millis(10));
    }
    let drained_after = s1.t.elapsed().as_secs_f64();
    let s2 = Snap::take(&fleet, s);
    let (hist, _) = fleet.take_histograms();
    let (per_second, mut per_session) = fleet.take_series();
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
    // How many records each ingest batch (one wake-up of the workers it
    // concerns) carried (gatewayd only).
    let (batches, records) = (
        delta("gatewayd_ingest_batches_total"),
        delta("gatewayd_ingest_records_total"),
    );
    if batches > 0.0 {
        println!(
            "node_ingest_batches {batches:.0} records_per_batch {:.2}",
            records / batches
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
    // Where the node says the time went (gatewayd's stage histograms,
    // src/delivery/latency.rs): bucket upper bounds, over the whole run.
    let node_q = |name: &str, labels: &[(&str, &str)], q: f64| {
        nodes::quantile_between(
            &s0.m.buckets_with(name, labels),
            &s2.m.buckets_with(name, labels),
            q,
        )
        .map(|(b, _)| format!("{:.3}", b * 1e3))
        .unwrap_or_else(|| "-".into())
    };
    if !s2
        .m
        .buckets_with("gatewayd_delivery_seconds", &[])
        .is_empty()
    {
        println!(
            "node_delivery_ms p50 {} p99 {} p99.9 {} (commit to socket, the node's histogram: bucket bounds)",
            node_q("gatewayd_delivery_seconds", &[], 0.5),
            node_q("gatewayd_delivery_seconds", &[], 0.99),
            node_q("gatewayd_delivery_seconds", &[], 0.999)
        );
        let stages: Vec<String> = [
            "commit_to_read",
            "read_to_inbox",
            "inbox_to_submit",
            "submit_to_sent",
        ]
        .iter()
        .map(|st| {
            format!(
                "{st} {}",
                node_q("gatewayd_delivery_stage_seconds", &[("stage", st)], 0.99)
            )
        })
        .collect();
        println!("node_stage_p99_ms {}", stages.join(" "));
    }
    if let Some(dir) = &o.series_dir {
        let per_event = if sent > 0 {
            expected as f64 / sent as f64
        } else {
            0.0
        };
        let rows = timeline::join(&sampler.rows, per_second.as_ref(), per_event);
        let command: Vec<String> = std::env::args().collect();
        if let Err(e) = timeline::write(
            dir,
            &command.join(" "),
            &rows,
            &mut per_session,
            &hist,
            o.p99_target_ms,
        ) {
            eprintln!("loadgen measure: writing {}: {e}", dir.display());
        }
    }
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
