//! `rolling-release`: two or more clustered nodes (one PostgreSQL
//! registry) behind loadgen's load balancer (lb/), every bot connected
//! through it, the producer writing the same records to every node
//! throughout; then each node in turn is taken out of the balancer,
//! drained (`POST /drain`: op 7 spread over `drain_spread_ms`), waited for
//! until it exits, and started again (a new process, new ports) before the
//! next one drains: a release rolling over the cluster. A drained bot
//! reconnects through the balancer, lands on a node that is not draining
//! and resumes there (docs/cluster.md): the report says, per drain, how
//! many sessions got RESUMED and how many op 9, the identifies, the
//! registry calls, the time until every session of the node was back, and
//! what the fleet's stream checks saw.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use super::claims::{counter_figures, integrity_claims, ms, time_back_figures};
use super::opts::{Common, RollingOpts};
use super::sampler::{connect_all, Sampler};
use super::setup::{
    all_ready, make_world, open_registry, owned, producer_config, progress, sources, start_node,
    NO_THROTTLE,
};
use crate::fleet::{Fleet, FleetConfig};
use crate::lb::{Backend, Lb};
use crate::nodes::{Metrics, NodeProc};
use crate::producer::Producer;
use crate::report::Report;
use crate::session::Counters;

fn letter(k: usize) -> char {
    (b'A' + k as u8) as char
}

/// Upstream source addresses of the balancer: 127.0.1.x, one per 4,000
/// connections (a node may hold every session at the end of a drain, and
/// each moved session leaves a port in TIME_WAIT for 60 s).
fn lb_sources(sessions: u32) -> Vec<Ipv4Addr> {
    let n = sessions.div_ceil(4_000).clamp(1, 200);
    (0..n)
        .map(|i| Ipv4Addr::new(127, 0, 1, 1 + i as u8))
        .collect()
}

fn backend(n: &NodeProc) -> Backend {
    Backend {
        gateway: n.gateway,
        admin: Some(n.admin),
        enabled: true,
    }
}

/// Sums of a family over several scrapes (None: that node could not be read).
fn fam(ms: &[Option<Metrics>], name: &str) -> f64 {
    ms.iter().flatten().map(|m| m.sum(name)).sum()
}

/// Registry calls of all nodes (`Metrics::registry_calls`).
fn calls(ms: &[Option<Metrics>]) -> f64 {
    ms.iter().flatten().map(|m| m.registry_calls()).sum()
}

pub(super) fn rolling_release(c: &Common, o: &RollingOpts, rep: &mut Report) -> Result<(), String> {
    if o.nodes < 2 {
        return Err("rolling-release needs at least 2 nodes".into());
    }
    if c.registry_url.is_none() {
        return Err(
            "rolling-release needs --registry-url (PostgreSQL): nodes form a cluster, and so hand \
             sessions over, only on a shared PostgreSQL registry (scripts/pg-test-server.sh start DIR \
             runs a throwaway server)"
                .into(),
        );
    }
    let reg = open_registry(c, "registry")?;
    let world = make_world(c, reg.handle.as_ref(), 0)?;
    let placeholder = Backend {
        gateway: SocketAddrV4::new(Ipv4Addr::LOCALHOST, 1),
        admin: None,
        enabled: false,
    };
    let lb = Lb::start(
        SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0),
        vec![placeholder; o.nodes],
        c.sessions as usize,
        lb_sources(c.sessions),
    )
    .map_err(|e| format!("load balancer: {e}"))?;
    progress(&format!("load balancer: {}", lb.url()));
    let node_args = |extra: &[String]| -> Vec<String> {
        let mut a = owned(&NO_THROTTLE);
        a.extend(owned(&[
            "--public-url",
            &lb.url(),
            "--drain-spread-ms",
            &o.drain_spread_ms.to_string(),
        ]));
        a.extend(extra.iter().cloned());
        a
    };
    let dir = |k: usize, gen: usize| {
        if gen == 0 {
            format!("rr-{}", (b'a' + k as u8) as char)
        } else {
            format!("rr-{}-{}", (b'a' + k as u8) as char, gen + 1)
        }
    };
    let mut nodes: Vec<NodeProc> = Vec::new();
    for k in 0..o.nodes {
        let n = start_node(c, &reg.loc, &dir(k, 0), &node_args(&[]))?;
        lb.set_backend(k, backend(&n));
        nodes.push(n);
    }
    rep.notes.push(format!(
        "{} gatewayd nodes ({} workers each) on one PostgreSQL registry (a cluster), behind loadgen's \
         io_uring load balancer at {} (every node's public_url, so READY's resume_gateway_url); the \
         fleet connects to the balancer only. Identify limits off on every node (the fleet comes up \
         fast; identifies are counted either way). drain_spread_ms {}",
        o.nodes,
        c.workers,
        lb.url(),
        o.drain_spread_ms
    ));
    rep.notes.push(format!(
        "load average at the start: {}",
        crate::nodes::loadavg()
    ));
    let fleet = Fleet::start(
        world.clone(),
        FleetConfig {
            nodes: vec![lb.local_addr()],
            sources: sources(c, c.sessions),
            threads: c.threads,
            coordinator: c.coordinator,
            // Drained bots reconnect and resume at once, each on its own,
            // as real ones do (identifies keep the fleet's window).
            resume_window: 1 << 16,
            ..FleetConfig::default()
        },
    )
    .map_err(|e| format!("fleet: {e}"))?;
    let mut sampler = Sampler::new(&nodes.iter().collect::<Vec<_>>());
    let refs: Vec<&NodeProc> = nodes.iter().collect();
    let (ready, secs) = connect_all(&fleet, c, &refs, &mut sampler, "connect");
    drop(refs);
    let n_all = c.sessions as u64;
    rep.figure("", "sessions", n_all as f64, "");
    rep.figure("", "time to connect them (through the balancer)", secs, "s");
    for (k, n) in nodes.iter().enumerate() {
        if let Some(m) = n.metrics() {
            rep.figure(
                "",
                &format!("sessions on node {} at the start", letter(k)),
                m.sum("gatewayd_sessions"),
                "",
            );
        }
    }
    if !all_ready(rep, "all sessions READY through the balancer", c, ready) {
        let _ = fleet.stop();
        return Ok(());
    }
    let producer = Producer::start(
        world.clone(),
        producer_config(c, nodes.iter().map(|n| n.ingest).collect()),
    );
    std::thread::sleep(Duration::from_secs_f64(c.warmup));
    // The registry calls the nodes make anyway (lease renewals, polls,
    // heartbeats), to set the drains' figures against.
    let b0: Vec<Option<Metrics>> = nodes.iter().map(|n| n.metrics()).collect();
    let tb = Instant::now();
    std::thread::sleep(Duration::from_secs(5));
    let b1: Vec<Option<Metrics>> = nodes.iter().map(|n| n.metrics()).collect();
    let background = (calls(&b1) - calls(&b0)) / tb.elapsed().as_secs_f64();
    rep.figure(
        "",
        "registry calls per second before the drains (all nodes, background)",
        background,
        "calls/s",
    );
    let _ = fleet.take_histograms();
    let spread_s = o.drain_spread_ms as f64 / 1000.0;
    let back_bound = spread_s + o.back_margin_secs;
    // A drained node stops at the latest after the spread + shutdown grace
    // (3 s) + drain_handoff_ms (8 s); give it a little more before calling
    // it stuck.
    let exit_bound = spread_s + 3.0 + 8.0 + 20.0;
    let mut identifies_in_drains = 0u64;
    let mut worst: Vec<(String, bool)> = Vec::new();
    for k in 0..o.nodes {
        let group = format!("drain {}", letter(k));
        let before: Vec<Option<Metrics>> = nodes.iter().map(|n| n.metrics()).collect();
        let held = before[k]
            .as_ref()
            .map_or(0.0, |m| m.sum("gatewayd_sessions")) as u64;
        let c0 = fleet.counters();
        let _ = fleet.take_histograms();
        progress(&format!(
            "{group}: out of the balancer, POST /drain to node {} (pid {}) holding {held} sessions",
            letter(k),
            nodes[k].pid
        ));
        lb.set_enabled(k, false);
        let t0 = Instant::now();
        let drained = crate::nodes::http_request(nodes[k].admin, "POST", "/drain")
            .map(|(s, _)| s)
            .unwrap_or(0);
        if drained != 200 && drained != 202 {
            return Err(format!(
                "POST /drain to node {}: status {drained}",
                letter(k)
            ));
        }
        let mut all_back: Option<f64> = None;
        let mut exited: Option<f64> = None;
        let mut last_k: Option<Metrics> = before[k].clone();
        let mut last_sample = Instant::now();
        loop {
            std::thread::sleep(Duration::from_millis(100));
            let t = t0.elapsed().as_secs_f64();
            let cur = fleet.counters();
            let asked = cur.reconnects_asked - c0.reconnects_asked;
            if all_back.is_none()
                && (asked >= held || exited.is_some())
                && fleet.streaming() >= n_all
            {
                all_back = Some(t);
                progress(&format!(
                    "{group}: all {n_all} sessions streaming again after {t:.1} s"
                ));
            }
            if exited.is_none() && !nodes[k].alive() {
                exited = Some(t);
                progress(&format!(
                    "{group}: node {} exited after {t:.1} s",
                    letter(k)
                ));
            }
            if last_sample.elapsed() >= Duration::from_secs(1) {
                last_sample = Instant::now();
                if exited.is_none() {
                    if let Some(m) = nodes[k].metrics() {
                        last_k = Some(m);
                    }
                }
                let refs: Vec<&NodeProc> = nodes.iter().collect();
                sampler.sample(&fleet, &refs, &group);
            }
            if (all_back.is_some() && exited.is_some()) || t > exit_bound.max(back_bound + 30.0) {
                break;
            }
        }
        // Stragglers' counters (they tick every 50 ms).
        std::thread::sleep(Duration::from_millis(300));
        let (_, back) = fleet.take_histograms();
        let c1 = fleet.counters();
        let after: Vec<Option<Metrics>> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| if i == k { last_k.clone() } else { n.metrics() })
            .collect();
        let others = |v: &[Option<Metrics>]| -> Vec<Option<Metrics>> {
            v.iter()
                .enumerate()
                .filter(|(i, _)| *i != k)
                .map(|(_, m)| m.clone())
                .collect()
        };
        let d = |f: fn(&Counters) -> u64| f(&c1).saturating_sub(f(&c0));
        let resumed = d(|c| c.resumed);
        let op9_new = d(|c| c.invalid_new_session);
        let op9_res = d(|c| c.invalid_resumable);
        let identifies = d(|c| c.identifies);
        identifies_in_drains += identifies;
        let h_in = fam(&others(&after), "gatewayd_handoffs_in_total")
            - fam(&others(&before), "gatewayd_handoffs_in_total");
        let h_out = after[k]
            .as_ref()
            .map_or(f64::NAN, |m| m.sum("gatewayd_handoffs_out_total"))
            - before[k]
                .as_ref()
                .map_or(0.0, |m| m.sum("gatewayd_handoffs_out_total"));
        let calls = calls(&after) - calls(&before);
        rep.figure(&group, "sessions on the drained node", held as f64, "");
        rep.figure(
            &group,
            "op 7 received",
            d(|c| c.reconnects_asked) as f64,
            "",
        );
        rep.figure(&group, "resumes sent", d(|c| c.resumes_sent) as f64, "");
        rep.figure(&group, "RESUMED", resumed as f64, "");
        rep.figure(
            &group,
            "RESUMED share of the drained node's sessions",
            100.0 * resumed as f64 / held.max(1) as f64,
            "%",
        );
        rep.figure(&group, "hand-offs in (other nodes)", h_in, "");
        rep.figure(
            &group,
            "hand-offs out (drained node, last scrape)",
            h_out,
            "",
        );
        rep.figure(&group, "op 9 (new session)", op9_new as f64, "");
        rep.figure(&group, "op 9 (resumable)", op9_res as f64, "");
        rep.figure(&group, "identifies sent", identifies as f64, "");
        rep.figure(&group, "registry calls (all nodes)", calls, "");
        let mut refusals: std::collections::BTreeMap<String, f64> = Default::default();
        for (b, a) in before.iter().zip(&after) {
            let (Some(b), Some(a)) = (b, a) else { continue };
            let was = b.by_label("gatewayd_resume_refusals_total", "reason");
            for (r, v) in a.by_label("gatewayd_resume_refusals_total", "reason") {
                let dv = v - was.get(&r).copied().unwrap_or(0.0);
                if dv > 0.0 {
                    *refusals.entry(r).or_default() += dv;
                }
            }
        }
        for (r, v) in &refusals {
            rep.figure(&group, &format!("op 9 by the nodes: {r}"), *v, "");
        }
        rep.figure(
            &group,
            "time until all back",
            all_back.unwrap_or(f64::NAN),
            "s",
        );
        time_back_figures(rep, &group, "time back per session", &back);
        rep.figure(
            &group,
            "drained node exited after",
            exited.unwrap_or(f64::NAN),
            "s",
        );
        rep.figure(&group, "gaps (missing seq)", d(|c| c.gaps) as f64, "");
        rep.figure(&group, "duplicates (seq)", d(|c| c.duplicates) as f64, "");
        rep.figure(
            &group,
            "repeated or reordered events",
            d(|c| c.event_repeats) as f64,
            "",
        );
        rep.figure(&group, "zombie connections", d(|c| c.zombies) as f64, "");
        if !back.is_empty() {
            rep.add_histogram(&format!("{group}: time back per session"), &back);
        }
        let share = 100.0 * resumed as f64 / held.max(1) as f64;
        rep.claim(
            &format!("{group}: the drained node's sessions get RESUMED on another node"),
            held > 0 && share >= o.min_resumed_pct && h_in >= resumed as f64,
            &format!(">= {} % RESUMED, taken by the other nodes", o.min_resumed_pct),
            &format!(
                "{resumed} of {held} RESUMED ({share:.2} %), {h_in} hand-offs in on the other nodes; \
                 op 9: {op9_new} new-session, {op9_res} resumable{}",
                if refusals.is_empty() {
                    String::new()
                } else {
                    format!(" (nodes: {refusals:?})")
                }
            ),
        );
        rep.claim(
            &format!(
                "{group}: all back within drain_spread + {} s",
                o.back_margin_secs
            ),
            all_back.is_some_and(|t| t <= back_bound),
            &format!("<= {back_bound:.1} s"),
            &match all_back {
                Some(t) => format!(
                    "{t:.1} s (per session p99 {:.2} s)",
                    ms(back.value_at_quantile(0.99)) / 1000.0
                ),
                None => format!(
                    "not all back after {:.0} s ({} streaming of {n_all})",
                    t0.elapsed().as_secs_f64(),
                    fleet.streaming()
                ),
            },
        );
        worst.push((group.clone(), exited.is_some()));
        if exited.is_none() {
            progress(&format!(
                "{group}: node {} did not exit; stopping it",
                letter(k)
            ));
            nodes[k].stop();
        }
        // The release: the node comes back (a new process on new ports).
        let n = start_node(c, &reg.loc, &dir(k, 1), &node_args(&[]))?;
        lb.set_backend(k, backend(&n));
        nodes[k] = n;
        producer.set_ingest(nodes.iter().map(|n| n.ingest).collect());
        // Let the new node take records (its stream log lines up hand-offs)
        // and renew its cluster claim before the next drain.
        let settle = Instant::now() + Duration::from_secs_f64(o.settle_secs);
        while Instant::now() < settle {
            std::thread::sleep(Duration::from_millis(500));
        }
        progress(&format!(
            "{group}: node {} back (pid {})",
            letter(k),
            nodes[k].pid
        ));
    }
    for (g, ok) in worst {
        rep.claim(
            &format!("{g}: the drained node stops by itself"),
            ok,
            "exits once its sessions are taken (or drain_handoff_ms after the spread)",
            if ok {
                "exited"
            } else {
                "still running: stopped by loadgen"
            },
        );
    }
    let pstats = producer.stop();
    // Let what is in flight arrive before counting.
    std::thread::sleep(Duration::from_secs(3));
    let refs: Vec<&NodeProc> = nodes.iter().collect();
    sampler.sample(&fleet, &refs, "end");
    drop(refs);
    let first = fleet.shared.first_violation.lock().unwrap().clone();
    let total = fleet.stop();
    let ls = lb.stats();
    rep.notes.push(format!("load balancer: {ls:?}"));
    rep.notes.push(format!(
        "load average at the end: {}",
        crate::nodes::loadavg()
    ));
    let expected = pstats.expected_deliveries.load(Relaxed);
    rep.figure(
        "",
        "events produced",
        pstats.events.load(Relaxed) as f64,
        "",
    );
    rep.figure("", "deliveries expected", expected as f64, "");
    rep.figure("", "deliveries received", total.deliveries as f64, "");
    rep.figure(
        "",
        "producer disconnects (node restarts)",
        pstats.node_disconnects.load(Relaxed) as f64,
        "",
    );
    rep.figure(
        "",
        "identifies during the drains",
        identifies_in_drains as f64,
        "",
    );
    counter_figures(rep, "fleet", &total);
    sampler.into_report(rep, "");
    let id_share = 100.0 * identifies_in_drains as f64 / n_all.max(1) as f64;
    rep.claim(
        "identifies during the release",
        id_share < o.max_identify_pct,
        &format!("< {} % of the sessions", o.max_identify_pct),
        &format!("{identifies_in_drains} ({id_share:.3} % of {n_all})"),
    );
    integrity_claims(rep, &total, first);
    let new_sessions = total.invalid_new_session;
    rep.claim(
        "every entitled session receives every event exactly once",
        total.deliveries == expected
            || (new_sessions > 0 && total.deliveries < expected && total.event_repeats == 0),
        &format!("{expected} deliveries (fewer only for sessions that had to identify again)"),
        &format!(
            "{} received ({} missing, {} sessions identified again)",
            total.deliveries,
            expected as i64 - total.deliveries as i64,
            new_sessions
        ),
    );
    for mut n in nodes {
        n.stop();
    }
    lb.stop();
    Ok(())
}
