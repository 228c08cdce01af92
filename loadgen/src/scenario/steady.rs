//! `steady`: N sessions on one node (started, or attached with
//! `--attach`) under a constant event rate for `seconds` after a warm-up:
//! time to READY, RSS per session, deliveries/s, CPU per delivery, the
//! latency claims and that every entitled session got every event. With
//! `--recovery`, the node reads Kafka and has the session store
//! (recovery.rs's `KafkaSide`), for the A/B of that cost.

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use super::claims::{counter_figures, integrity_claims, latency_claims, node_figures};
use super::opts::{Common, RecoveryOpts};
use super::recovery::KafkaSide;
use super::sampler::{connect_all, Sampler};
use super::setup::{
    make_world, open_registry, owned, producer_config, start_fleet, start_node, NO_THROTTLE,
};
use crate::nodes::NodeProc;
use crate::producer::{Producer, ProducerConfig};
use crate::report::Report;

pub(super) fn steady(
    c: &Common,
    recovery: Option<&RecoveryOpts>,
    rep: &mut Report,
) -> Result<(), String> {
    let deadline = Instant::now() + c.timeout;
    let side = match recovery {
        Some(_) if c.attach.is_some() => {
            return Err("steady --recovery starts its node: not with --attach".into())
        }
        Some(_) if c.registry_url.is_none() => {
            return Err(
                "steady --recovery needs --registry-url (PostgreSQL): crash recovery \
                        needs a cluster"
                    .into(),
            )
        }
        Some(o) => Some(KafkaSide::start(c, o, rep)?),
        None => None,
    };
    let (world, node) = match c.attach {
        Some((g, a, i, pid)) => {
            let reg = open_registry(c, "registry")?;
            let w = make_world(c, reg.handle.as_ref(), 0)?;
            (w, NodeProc::attach(g, a, i, pid))
        }
        None => {
            let reg = open_registry(c, "registry")?;
            let w = make_world(c, reg.handle.as_ref(), 0)?;
            let mut args = owned(&NO_THROTTLE);
            if let Some(side) = &side {
                args.extend(side.node_args("node-a"));
            }
            let n = start_node(c, &reg.loc, "node-a", &args)?;
            (w, n)
        }
    };
    let rss0 = node.rss_bytes();
    let fleet = start_fleet(c, &world, vec![node.gateway], vec![])?;
    let mut sampler = Sampler::new(&[&node]);
    let (ready, secs) = connect_all(&fleet, c, &[&node], &mut sampler, "connect");
    let rss_ready = node.rss_bytes();
    rep.figure("", "sessions", c.sessions as f64, "");
    rep.figure("", "sessions READY", ready as f64, "");
    rep.figure("", "time to all READY", secs, "s");
    rep.figure(
        "",
        "identify rate",
        ready as f64 / secs.max(1e-3),
        "sessions/s",
    );
    if let (Some(a), Some(b)) = (rss0, rss_ready) {
        rep.figure("", "gatewayd RSS before", a as f64 / 1048576.0, "MiB");
        rep.figure(
            "",
            "gatewayd RSS with all sessions",
            b as f64 / 1048576.0,
            "MiB",
        );
        rep.figure(
            "",
            "RSS per 1,000 sessions",
            (b.saturating_sub(a)) as f64 / 1048576.0 / (ready.max(1) as f64 / 1000.0),
            "MiB",
        );
    }
    let all_ready = rep.claim(
        "every session reaches READY",
        ready == c.sessions as u64,
        &format!(
            "{} within {:.0} s",
            c.sessions,
            c.connect_timeout.as_secs_f64()
        ),
        &format!("{ready} in {secs:.1} s"),
    );
    if !all_ready {
        let _ = fleet.stop();
        return Ok(());
    }
    let pc = match &side {
        Some(side) => ProducerConfig {
            kafka: Some((side.brokers.clone(), side.topic.to_string())),
            ..producer_config(c, vec![])
        },
        None => producer_config(c, vec![node.ingest]),
    };
    let producer = Producer::start(world.clone(), pc);
    let warm_end = Instant::now() + Duration::from_secs_f64(c.warmup);
    while Instant::now() < warm_end {
        std::thread::sleep(Duration::from_secs(1));
        sampler.sample(&fleet, &[&node], "warmup");
    }
    let _ = fleet.take_histograms();
    let c0 = fleet.counters();
    let cpu0 = node.cpu_seconds();
    let self0 = crate::nodes::self_cpu_seconds();
    let t0 = Instant::now();
    fleet.set_measuring(true);
    let end = t0 + Duration::from_secs_f64(c.seconds);
    while Instant::now() < end && Instant::now() < deadline {
        std::thread::sleep(Duration::from_secs(1));
        sampler.sample(&fleet, &[&node], "steady");
    }
    fleet.set_measuring(false);
    let dt = t0.elapsed().as_secs_f64();
    let c1 = fleet.counters();
    let cpu1 = node.cpu_seconds();
    let self1 = crate::nodes::self_cpu_seconds();
    let (lat, _) = fleet.take_histograms();
    let pstats = producer.stop();
    // Let what is in flight arrive before counting what is missing.
    std::thread::sleep(Duration::from_secs(3));
    sampler.sample(&fleet, &[&node], "drain");
    let first = fleet.shared.first_violation.lock().unwrap().clone();
    let rss_end = node.rss_bytes();
    if let Some(m) = node.metrics() {
        node_figures(rep, "", &m);
    }
    let total = fleet.stop();
    let deliveries = (c1.deliveries - c0.deliveries) as f64;
    rep.add_histogram("steady", &lat);
    rep.figure("", "events produced per second", c.rate, "events/s");
    rep.figure("", "deliveries per second", deliveries / dt, "deliveries/s");
    if let (Some(a), Some(b)) = (cpu0, cpu1) {
        let cores = (b - a) / dt;
        rep.figure("", "gatewayd CPU", cores, "cores");
        rep.figure(
            "",
            "deliveries per gatewayd CPU-second",
            deliveries / (b - a).max(1e-3),
            "deliveries",
        );
    }
    rep.figure("", "loadgen CPU", (self1 - self0) / dt, "cores");
    if let Some(r) = rss_end {
        rep.figure("", "gatewayd RSS at the end", r as f64 / 1048576.0, "MiB");
    }
    rep.figure(
        "",
        "producer max lag",
        pstats.max_lag_ns.load(Relaxed) as f64 / 1e6,
        "ms",
    );
    let expected = pstats.expected_deliveries.load(Relaxed);
    rep.figure(
        "",
        "events produced",
        pstats.events.load(Relaxed) as f64,
        "",
    );
    rep.figure("", "deliveries expected (all events)", expected as f64, "");
    rep.figure(
        "",
        "deliveries received (all events)",
        total.deliveries as f64,
        "",
    );
    counter_figures(rep, "", &total);
    sampler.into_report(rep, "");
    integrity_claims(rep, &total, first);
    rep.claim(
        "every entitled session receives every event",
        total.deliveries >= expected,
        &format!("{expected} deliveries"),
        &format!(
            "{} received ({} missing)",
            total.deliveries,
            expected.saturating_sub(total.deliveries)
        ),
    );
    latency_claims(rep, c, &lat);
    Ok(())
}
