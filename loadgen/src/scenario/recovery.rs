//! `storm --recovery resume`: the storm with crash recovery configured.
//! Every node consumes one Kafka-protocol topic (a Tansu broker loadgen
//! starts; the producer writes only there) and has the session store
//! (a Redis loadgen starts, the node's `[recovery]` section); all sessions
//! are on node A, A is killed with SIGKILL, the bots reconnect to the
//! survivors and Resume: a survivor that rebuilds the session from the
//! store and replays the topic answers RESUMED, anything else is op 9
//! (counted). The report has the same figures as the storm plus what the
//! fleet's stream checks saw across the recovery.
//!
//! The node's side is issue 15's second half. The `[recovery]` keys are
//! passed as written in `RecoveryOpts::config` (`{redis_url}` replaced), so
//! they are easy to change once final; a node that refuses them fails the
//! first claim with its own error message instead of the run passing.

use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use super::claims::{counter_figures, integrity_claims, ms, time_back_figures};
use super::opts::{Common, RecoveryOpts, StormOpts};
use super::sampler::{connect_all, wait_until_all_back, Sampler};
use super::setup::{
    all_ready, make_world, open_registry, owned, producer_config, progress, sources, start_node,
    NO_THROTTLE,
};
use crate::fleet::{Fleet, FleetConfig};
use crate::nodes::{Metrics, NodeProc};
use crate::producer::{Producer, ProducerConfig};
use crate::report::Report;
use crate::session::Counters;

/// The node config file of a recovery run (TOML).
pub fn recovery_toml(o: &RecoveryOpts, redis_url: &str) -> String {
    let mut t = String::from("[recovery]\n");
    for l in &o.config {
        t.push_str(&l.replace("{redis_url}", redis_url));
        t.push('\n');
    }
    t
}

/// What a Kafka-fed run with the session store adds to the nodes: a
/// Redis and a Tansu broker loadgen started (stopped on drop), the topic,
/// the node config file with the `[recovery]` section.
pub(super) struct KafkaSide {
    pub brokers: String,
    pub topic: &'static str,
    /// False: `--recovery-config ''`, no `[recovery]` section (Kafka
    /// ingest alone: the baseline of an A/B).
    pub with_section: bool,
    cfg_path: std::path::PathBuf,
    /// The run's extra node flags (`RecoveryOpts::node_args`).
    extra: Vec<String>,
    _redis: crate::services::Service,
    _tansu: crate::services::Service,
}

impl KafkaSide {
    pub(super) fn start(
        c: &Common,
        o: &RecoveryOpts,
        rep: &mut Report,
    ) -> Result<KafkaSide, String> {
        let logs = c.out.join("logs");
        std::fs::create_dir_all(&logs).map_err(|e| e.to_string())?;
        let work = c.out.join("work");
        let redis = crate::services::start_redis(&work.join("redis"), &logs.join("redis.log"))?;
        let tansu = crate::services::start_tansu(&work.join("tansu"), &logs.join("tansu.log"))?;
        let redis_url = format!("redis://{}", redis.addr());
        let brokers = tansu.addr();
        let topic = "loadgen-events";
        crate::services::create_topic(&brokers, topic, o.partitions)?;
        progress(&format!(
            "recovery: redis {redis_url} (pid {}), tansu {brokers} (pid {}), topic {topic} ({} partitions)",
            redis.pid(),
            tansu.pid(),
            o.partitions
        ));
        // `--recovery-config ''`: no [recovery] section at all (Kafka
        // ingest without crash recovery: every plumbing step, no recovery).
        let with_section = o.config.iter().any(|l| !l.trim().is_empty());
        let toml = if with_section {
            recovery_toml(o, &redis_url)
        } else {
            "(none)\n".into()
        };
        let cfg_path = work.join("recovery.toml");
        std::fs::write(&cfg_path, &toml).map_err(|e| e.to_string())?;
        rep.notes.push(format!(
            "nodes: Kafka ingest from topic {topic} ({} partitions) on a Tansu broker, the producer \
             writing only there; session store Redis {redis_url}; node config file: {}",
            o.partitions,
            toml.trim().replace('\n', "; ")
        ));
        rep.notes.push(format!(
            "load average at the start: {}",
            crate::nodes::loadavg()
        ));
        Ok(KafkaSide {
            brokers,
            topic,
            with_section,
            cfg_path,
            extra: o.node_args.clone(),
            _redis: redis,
            _tansu: tansu,
        })
    }

    /// The flags of node `name`: Kafka ingest (its own group), the config
    /// file, the run's extra flags.
    pub(super) fn node_args(&self, name: &str) -> Vec<String> {
        let mut a = owned(&[
            "--kafka-brokers",
            &self.brokers,
            "--kafka-topic",
            self.topic,
            "--kafka-group",
            &format!("loadgen-{name}"),
        ]);
        if self.with_section {
            a.push("--config".into());
            a.push(self.cfg_path.display().to_string());
        }
        a.extend(self.extra.iter().cloned());
        a
    }
}

pub(super) fn storm_recovery(
    c: &Common,
    so: &StormOpts,
    o: &RecoveryOpts,
    rep: &mut Report,
) -> Result<(), String> {
    if so.nodes < 2 {
        return Err("storm needs at least 2 nodes".into());
    }
    if c.registry_url.is_none() {
        return Err(
            "storm --recovery needs --registry-url (PostgreSQL): the survivors find the dead node's \
             sessions through the cluster, which needs a shared PostgreSQL registry \
             (scripts/pg-test-server.sh start DIR runs a throwaway server)"
                .into(),
        );
    }
    let group = "recovery";
    let side = KafkaSide::start(c, o, rep)?;
    let (brokers, topic) = (side.brokers.clone(), side.topic);
    let logs = c.out.join("logs");
    let reg = open_registry(c, "registry")?;
    let world = make_world(c, reg.handle.as_ref(), 0)?;
    let mut nodes = Vec::new();
    for k in 0..so.nodes {
        let name = format!("recovery-{}", (b'a' + k as u8) as char);
        // Node A starts without the identify throttle (the fleet comes up
        // fast); the survivors run with the shipped limits, as in the storm.
        let mut extra = if k == 0 {
            owned(&NO_THROTTLE)
        } else {
            owned(&["--identify-limits", "on"])
        };
        extra.extend(side.node_args(&name));
        match start_node(c, &reg.loc, &name, &extra) {
            Ok(n) => nodes.push(n),
            Err(e) => {
                let tail = crate::services::log_tail(&logs.join(format!("{name}.log")), 6);
                rep.claim(
                    "the nodes accept the crash-recovery configuration",
                    false,
                    "gatewayd starts with [recovery] (session store) and Kafka ingest",
                    &format!("node {name}: {e}: {}", tail.replace('\n', " | ")),
                );
                rep.notes.push(
                    "crash recovery is not in this gatewayd (it refused the [recovery] section): \
                     nothing was measured"
                        .into(),
                );
                return Ok(());
            }
        }
    }
    rep.claim(
        "the nodes accept the crash-recovery configuration",
        true,
        "gatewayd starts with [recovery] (session store) and Kafka ingest",
        if side.with_section {
            "all nodes started"
        } else {
            "all nodes started, without a [recovery] section (--recovery-config '')"
        },
    );
    let fleet = Fleet::start(
        world.clone(),
        FleetConfig {
            nodes: nodes.iter().map(|n| n.gateway).collect(),
            sources: sources(c, c.sessions),
            threads: c.threads,
            coordinator: c.coordinator,
            // The bots of the dead node resume at once, each on its own
            // (identifies keep the fleet's window).
            resume_window: 1 << 16,
            ..FleetConfig::default()
        },
    )
    .map_err(|e| format!("fleet: {e}"))?;
    let refs: Vec<&NodeProc> = nodes.iter().collect();
    let mut sampler = Sampler::new(&refs);
    let (ready, secs) = connect_all(&fleet, c, &refs, &mut sampler, "connect");
    drop(refs);
    rep.figure(
        group,
        "sessions on node A before the kill",
        ready as f64,
        "",
    );
    rep.figure(group, "time to connect them", secs, "s");
    if !all_ready(rep, "all sessions on node A before the kill", c, ready) {
        let _ = fleet.stop();
        return Ok(());
    }
    let producer = Producer::start(
        world.clone(),
        ProducerConfig {
            kafka: Some((brokers.clone(), topic.to_string())),
            ..producer_config(c, vec![])
        },
    );
    // The survivors' own upkeep (heartbeats, lease renewals, revocation
    // polls) is measured over the same wait, so that the recovery is
    // charged only with the registry calls it caused.
    let pre: Vec<Option<Metrics>> = nodes[1..].iter().map(|n| n.metrics()).collect();
    let t_pre = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(c.warmup + o.checkpoint_secs));
    let _ = fleet.take_histograms();
    let before: Vec<Option<Metrics>> = nodes[1..].iter().map(|n| n.metrics()).collect();
    let upkeep_secs = t_pre.elapsed().as_secs_f64();
    let upkeep_calls: f64 = pre
        .iter()
        .zip(&before)
        .filter_map(|(p, b)| Some((p.as_ref()?, b.as_ref()?)))
        .map(|(p, b)| b.sidecar_calls() - p.sidecar_calls())
        .sum();
    let c0 = fleet.counters();
    progress(&format!(
        "recovery: SIGKILL node A (pid {}) holding {ready} sessions",
        nodes[0].pid
    ));
    let t_kill = Instant::now();
    nodes[0].kill9();
    let limit = Duration::from_secs_f64((o.max_back_secs * 3.0).max(60.0)).min(c.timeout);
    let all_back = wait_until_all_back(&fleet, &nodes, &mut sampler, ready, t_kill, limit, group);
    std::thread::sleep(Duration::from_millis(500));
    let (_, back) = fleet.take_histograms();
    let c1 = fleet.counters();
    let after: Vec<Option<Metrics>> = nodes[1..].iter().map(|n| n.metrics()).collect();
    let window_secs = t_kill.elapsed().as_secs_f64();
    let pstats = producer.stop();
    std::thread::sleep(Duration::from_secs(3));
    let first = fleet.shared.first_violation.lock().unwrap().clone();
    let total = fleet.stop();
    let d = |f: fn(&Counters) -> u64| f(&c1).saturating_sub(f(&c0));
    let resumed = d(|c| c.resumed);
    let share = 100.0 * resumed as f64 / ready.max(1) as f64;
    let mut calls = 0.0;
    let mut reads = 0.0;
    let mut h_in = 0.0;
    let (mut recovered, mut replays) = (0.0, 0.0);
    let mut refusals: std::collections::BTreeMap<String, f64> = Default::default();
    for (b, a) in before.iter().zip(&after) {
        let (Some(b), Some(a)) = (b, a) else { continue };
        calls += a.sidecar_calls() - b.sidecar_calls();
        reads += a.cluster_reads() - b.cluster_reads();
        h_in += a.sum("gatewayd_handoffs_in_total") - b.sum("gatewayd_handoffs_in_total");
        recovered +=
            a.sum("gatewayd_recovery_recovered_total") - b.sum("gatewayd_recovery_recovered_total");
        replays +=
            a.sum("gatewayd_recovery_replays_total") - b.sum("gatewayd_recovery_replays_total");
        let was = b.by_label("gatewayd_resume_refusals_total", "reason");
        for (r, v) in a.by_label("gatewayd_resume_refusals_total", "reason") {
            let dv = v - was.get(&r).copied().unwrap_or(0.0);
            if dv > 0.0 {
                *refusals.entry(r).or_default() += dv;
            }
        }
    }
    rep.figure(group, "RESUMED", resumed as f64, "");
    rep.figure(group, "RESUMED share of node A's sessions", share, "%");
    rep.figure(
        group,
        "op 9 (new session)",
        d(|c| c.invalid_new_session) as f64,
        "",
    );
    rep.figure(
        group,
        "op 9 (resumable)",
        d(|c| c.invalid_resumable) as f64,
        "",
    );
    for (r, v) in &refusals {
        rep.figure(group, &format!("op 9 by the nodes: {r}"), *v, "");
    }
    rep.figure(
        group,
        "identifies sent during the recovery",
        d(|c| c.identifies) as f64,
        "",
    );
    rep.figure(group, "hand-offs in (survivors)", h_in, "");
    rep.figure(
        group,
        "sessions rebuilt by the survivors (gatewayd_recovery_recovered_total)",
        recovered,
        "",
    );
    // Each replay is one topic read and assembly of a dead worker's
    // checkpoint, shared by the sessions recovered from it.
    rep.figure(
        group,
        "checkpoint replays (gatewayd_recovery_replays_total)",
        replays,
        "",
    );
    rep.figure(group, "registry calls during the recovery", calls, "");
    let upkeep = upkeep_calls / upkeep_secs.max(0.001) * window_secs;
    rep.figure(
        group,
        "of which the survivors' upkeep (their rate before the kill)",
        upkeep,
        "",
    );
    let caused = (calls - upkeep).max(0.0);
    rep.figure(group, "registry calls the recovery caused", caused, "");
    // The hand-off and survivor threads read the registry directly (node
    // addresses, the dead node's claim): a cost per crash more than per
    // session, and one the plain storm (no cluster) has not. Shown, and
    // left out of the claim, which compares like with like.
    rep.figure(
        group,
        "registry reads by the hand-off and survivor threads (not in the claim)",
        reads,
        "",
    );
    rep.figure(
        group,
        "time until all back",
        all_back.unwrap_or(f64::NAN),
        "s",
    );
    rep.figure(group, "time back min", ms(back.min()) / 1000.0, "s");
    time_back_figures(rep, group, "time back", &back);
    rep.figure(
        group,
        "records produced to the topic",
        pstats.kafka_sent.load(Relaxed) as f64,
        "",
    );
    rep.figure(
        group,
        "records the producer could not hand over",
        pstats.kafka_failed.load(Relaxed) as f64,
        "",
    );
    if !back.is_empty() {
        rep.add_histogram("recovery: time back per session", &back);
    }
    counter_figures(rep, group, &total);
    sampler.into_report(rep, group);
    rep.claim(
        "node A's sessions get RESUMED on the survivors",
        share >= o.min_resumed_pct,
        &format!(
            ">= {} % RESUMED (every other one op 9, counted)",
            o.min_resumed_pct
        ),
        &format!(
            "{resumed} of {ready} ({share:.2} %); op 9: {} new-session, {} resumable{}",
            d(|c| c.invalid_new_session),
            d(|c| c.invalid_resumable),
            if refusals.is_empty() {
                String::new()
            } else {
                format!(" (nodes: {refusals:?})")
            }
        ),
    );
    rep.claim(
        "every session back after the kill",
        all_back.is_some_and(|t| t < o.max_back_secs),
        &format!("< {} s (the plain storm: 89.5 s)", o.max_back_secs),
        &match all_back {
            Some(t) => format!(
                "{t:.1} s (per session p99 {:.1} s)",
                ms(back.value_at_quantile(0.99)) / 1000.0
            ),
            None => format!(
                "{} of {ready} back after {:.0} s",
                back.len(),
                t_kill.elapsed().as_secs_f64()
            ),
        },
    );
    let bound =
        o.baseline_registry_calls * c.sessions as f64 / 40_000.0 * o.max_registry_pct / 100.0;
    rep.claim(
        "registry calls the recovery caused",
        caused < bound,
        &format!(
            "< {} % of the plain storm's {:.0} sidecar calls (scaled to {} sessions: < {bound:.0})",
            o.max_registry_pct, o.baseline_registry_calls, c.sessions
        ),
        &format!(
            "{caused:.0} ({calls:.0} in {window_secs:.1} s, less the survivors' upkeep of {upkeep:.0} at their rate before the kill; the cluster threads' own reads, {reads:.0}, are a figure)"
        ),
    );
    integrity_claims(rep, &total, first);
    let expected = pstats.expected_deliveries.load(Relaxed);
    let new_sessions = total.invalid_new_session;
    rep.claim(
        "every entitled session receives every event exactly once",
        total.deliveries == expected
            || (new_sessions > 0 && total.deliveries < expected && total.event_repeats == 0),
        &format!("{expected} deliveries (fewer only for sessions that had to identify again)"),
        &format!(
            "{} received ({} missing, {new_sessions} sessions identified again)",
            total.deliveries,
            expected as i64 - total.deliveries as i64
        ),
    );
    rep.notes.push(format!(
        "load average at the end: {}",
        crate::nodes::loadavg()
    ));
    for mut n in nodes {
        n.stop();
    }
    drop(side);
    Ok(())
}
