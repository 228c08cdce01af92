//! `storm`: every session on node A of a cluster of `nodes`, A killed
//! with SIGKILL, the bots reconnecting to the survivors; once with the
//! node's identify throttle and once without (`--throttle`). Reports the
//! time until every session is back (bounded by `max_back_secs`), the op 9
//! and identifies, and the survivors' registry-call p99. `--recovery`
//! runs recovery.rs's variant instead.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::claims::{counter_figures, ms, time_back_figures};
use super::opts::{Common, StormOpts};
use super::recovery::storm_recovery;
use super::sampler::{connect_all, wait_until_all_back, Sampler};
use super::setup::{
    all_ready, make_world, open_registry, owned, producer_config, progress, start_fleet,
    start_node, NO_THROTTLE,
};
use crate::nodes::{quantile_between, Metrics, NodeProc, RegistryLoc};
use crate::producer::Producer;
use crate::report::Report;
use crate::session::Counters;
use crate::world::World;

pub(super) fn storm(c: &Common, o: &StormOpts, rep: &mut Report) -> Result<(), String> {
    if let Some(r) = &o.recovery {
        return storm_recovery(c, o, r, rep);
    }
    if o.nodes < 2 {
        return Err("storm needs at least 2 nodes".into());
    }
    let runs: Vec<bool> = match o.throttle.as_str() {
        "both" => vec![true, false],
        "on" => vec![true],
        "off" => vec![false],
        t => return Err(format!("--throttle {t}: use both, on or off")),
    };
    let reg = open_registry(c, "registry")?;
    let world = make_world(c, reg.handle.as_ref(), 0)?;
    let regname = match reg.loc {
        RegistryLoc::Sqlite(_) => "embedded SQLite",
        RegistryLoc::Postgres(_) => "PostgreSQL",
    };
    rep.notes.push(format!(
        "registry: {regname}, shared by all {} nodes; registry latency is each surviving node's \
         gatewayd_registry_call_seconds histogram over the storm (bucket upper bound)",
        o.nodes
    ));
    for throttle in runs {
        let group = if throttle {
            "throttle on"
        } else {
            "throttle off"
        };
        storm_once(c, o, rep, &reg.loc, world.clone(), throttle, group)?;
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
pub(super) fn storm_once(
    c: &Common,
    o: &StormOpts,
    rep: &mut Report,
    loc: &RegistryLoc,
    world: Arc<World>,
    throttle: bool,
    group: &str,
) -> Result<(), String> {
    // Throttle on = the node's shipped identify limits (per-application
    // max_concurrency buckets, node admission rate); off = none.
    let extra = if throttle {
        owned(&["--identify-limits", "on"])
    } else {
        owned(&NO_THROTTLE)
    };
    let tag = if throttle { "on" } else { "off" };
    let mut nodes = Vec::new();
    for k in 0..o.nodes {
        // Node A (the victim) starts without the throttle so the fleet
        // comes up fast; the survivors run with the setting under test.
        let e = if k == 0 {
            owned(&NO_THROTTLE)
        } else {
            extra.clone()
        };
        nodes.push(start_node(
            c,
            loc,
            &format!("storm-{tag}-{}", (b'a' + k as u8) as char),
            &e,
        )?);
    }
    let fleet = start_fleet(c, &world, nodes.iter().map(|n| n.gateway).collect(), vec![])?;
    let refs: Vec<&NodeProc> = nodes.iter().collect();
    let mut sampler = Sampler::new(&refs);
    let (ready, secs) = connect_all(&fleet, c, &refs, &mut sampler, &format!("connect {group}"));
    drop(refs);
    rep.figure(
        group,
        "sessions on node A before the kill",
        ready as f64,
        "",
    );
    rep.figure(group, "time to connect them", secs, "s");
    if !all_ready(
        rep,
        &format!("{group}: all sessions on node A before the kill"),
        c,
        ready,
    ) {
        let _ = fleet.stop();
        return Ok(());
    }
    let producer = Producer::start(
        world.clone(),
        producer_config(c, nodes.iter().map(|n| n.ingest).collect()),
    );
    std::thread::sleep(Duration::from_secs_f64(c.warmup));
    let _ = fleet.take_histograms();
    let before: Vec<Option<Metrics>> = nodes[1..].iter().map(|n| n.metrics()).collect();
    let c0 = fleet.counters();
    let rss_a = nodes[0].rss_bytes();
    progress(&format!(
        "storm {group}: SIGKILL node A (pid {}) holding {ready} sessions",
        nodes[0].pid
    ));
    let t_kill = Instant::now();
    nodes[0].kill9();
    let limit = Duration::from_secs_f64(o.max_back_secs);
    let all_back = wait_until_all_back(
        &fleet,
        &nodes,
        &mut sampler,
        ready,
        t_kill,
        limit.min(c.timeout),
        &format!("storm {group}"),
    );
    // Time for stragglers' counters, then measure.
    std::thread::sleep(Duration::from_millis(500));
    let (_, recovery) = fleet.take_histograms();
    let c1 = fleet.counters();
    let after: Vec<Option<Metrics>> = nodes[1..].iter().map(|n| n.metrics()).collect();
    let pstats = producer.stop();
    let _ = pstats;
    let first = fleet.shared.first_violation.lock().unwrap().clone();
    let total = fleet.stop();
    if let Some(r) = rss_a {
        rep.figure(
            group,
            "node A RSS before the kill",
            r as f64 / 1048576.0,
            "MiB",
        );
    }
    rep.add_histogram(&format!("{group}: time back per session"), &recovery);
    rep.figure(group, "sessions back", recovery.len() as f64, "");
    time_back_figures(rep, group, "time back", &recovery);
    rep.figure(
        group,
        "time until all back",
        all_back.unwrap_or(f64::NAN),
        "s",
    );
    let d = |f: fn(&Counters) -> u64| f(&c1) - f(&c0);
    rep.figure(
        group,
        "op 9 received during the storm (resumes of sessions that were on A + refused identifies)",
        d(|c| c.invalid_new_session + c.invalid_resumable) as f64,
        "",
    );
    rep.figure(
        group,
        "identifies sent during the storm",
        d(|c| c.identifies) as f64,
        "",
    );
    let mut refused = 0.0;
    let mut worst_p99: Option<f64> = None;
    let mut calls = 0u64;
    for (b, a) in before.iter().zip(&after) {
        let (Some(b), Some(a)) = (b, a) else { continue };
        for fam in [
            "gatewayd_identifies_refused_concurrency_total",
            "gatewayd_identifies_refused_daily_limit_total",
            "gatewayd_identifies_refused_admission_total",
            "gatewayd_identifies_refused_brownout_total",
        ] {
            refused += a.sum(fam) - b.sum(fam);
        }
        if let Some((p99, n)) = quantile_between(
            &b.buckets("gatewayd_registry_call_seconds"),
            &a.buckets("gatewayd_registry_call_seconds"),
            0.99,
        ) {
            worst_p99 = Some(worst_p99.map_or(p99, |w: f64| w.max(p99)));
            calls += n;
        }
    }
    rep.figure(group, "identifies refused by the nodes (op 9)", refused, "");
    rep.figure(group, "registry calls during the storm", calls as f64, "");
    rep.figure(
        group,
        "registry call p99 (bucket bound)",
        worst_p99.map_or(f64::NAN, |s| s * 1000.0),
        "ms",
    );
    counter_figures(rep, group, &total);
    sampler.into_report(rep, group);
    rep.claim(
        &format!("{group}: every session resumes or re-identifies"),
        all_back.is_some(),
        &format!("all {ready} back within {:.0} s", o.max_back_secs),
        &match all_back {
            Some(t) => format!(
                "all back in {t:.1} s (per session p99 {:.1} s)",
                ms(recovery.value_at_quantile(0.99)) / 1000.0
            ),
            None => format!(
                "{} of {ready} back after {:.0} s",
                fleet_back(&recovery),
                t_kill.elapsed().as_secs_f64()
            ),
        },
    );
    rep.claim(
        &format!("{group}: registry p99 during the storm"),
        worst_p99.is_some_and(|p| p * 1000.0 <= o.max_registry_p99_ms),
        &format!("<= {} ms", o.max_registry_p99_ms),
        &worst_p99.map_or("no registry calls observed".into(), |p| {
            format!("<= {:.0} ms over {calls} calls", p * 1000.0)
        }),
    );
    let viol = total.entitlement_violations + total.content_violations;
    rep.claim(
        &format!("{group}: no event a session is not entitled to"),
        viol == 0,
        "0",
        &match first {
            Some(f) if viol > 0 => format!("{viol}; first: {f}"),
            _ => viol.to_string(),
        },
    );
    for mut n in nodes {
        n.stop();
    }
    Ok(())
}

pub(super) fn fleet_back(h: &hdrhistogram::Histogram<u64>) -> u64 {
    h.len()
}
