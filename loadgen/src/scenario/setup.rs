//! What a scenario starts: the registry (PostgreSQL or a scratch SQLite
//! file), the generated world, gatewayd nodes, the producer's settings and
//! the bot fleet, all from the [`Common`] options; plus progress lines on
//! stderr. Every start is bounded by its callee (node readiness, fleet
//! connect) and errors come back as text for the report.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant};

use registry::Registry;

use super::opts::Common;
use crate::fleet::{Fleet, FleetConfig};
use crate::nodes::{gatewayd_bin, NodeProc, RegistryLoc};
use crate::producer::ProducerConfig;
use crate::report::Report;
use crate::world::{World, WorldParams};

pub(super) fn progress(line: &str) {
    eprintln!("{line}");
}

/// The registry of a run: where nodes find it and a handle for loadgen.
pub(super) struct Reg {
    pub(super) loc: RegistryLoc,
    pub(super) handle: Box<dyn Registry>,
}

pub(super) fn open_registry(c: &Common, sub: &str) -> Result<Reg, String> {
    match &c.registry_url {
        Some(url) => {
            let r = registry::PostgresRegistry::connect(url, Duration::from_secs(30))
                .map_err(|e| format!("PostgreSQL registry {url}: {e}"))?;
            Ok(Reg {
                loc: RegistryLoc::Postgres(url.clone()),
                handle: Box::new(r),
            })
        }
        None => {
            let dir = c.out.join("work").join(sub);
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            let path = dir.join("registry.sqlite");
            for ext in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{ext}", path.display()));
            }
            let r = registry::SqliteRegistry::open(&path)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            Ok(Reg {
                loc: RegistryLoc::Sqlite(path),
                handle: Box::new(r),
            })
        }
    }
}

pub(super) fn make_world(
    c: &Common,
    reg: &dyn Registry,
    hot_bots: u32,
) -> Result<Arc<World>, String> {
    let t = Instant::now();
    let mut p = WorldParams::for_sessions(c.sessions);
    p.hot_bots = hot_bots;
    let w = World::generate(reg, &p, |done, total| {
        if total > 2000 && done % 5000 == 0 {
            progress(&format!("world: {done}/{total} bots written"));
        }
    })?;
    if let Some(url) = &c.registry_url {
        // Fresh tables have no planner statistics until autovacuum gets to
        // them (minutes): without this the first identifies of a run are
        // planned as sequential scans. A real registry has its statistics.
        let mut client = postgres::Client::connect(url, postgres::NoTls)
            .map_err(|e| format!("PostgreSQL {url}: {e}"))?;
        client
            .batch_execute("ANALYZE")
            .map_err(|e| format!("ANALYZE: {e}"))?;
    }
    progress(&format!(
        "world: {} bots, {} sessions, {} servers, {:.1} recipients per event, written in {:.1} s",
        w.bots.len(),
        c.sessions,
        w.servers.len(),
        w.recipients
            .iter()
            .map(|r| (r[0] + r[1]) as f64 / 2.0)
            .sum::<f64>()
            / w.servers.len() as f64,
        t.elapsed().as_secs_f64()
    ));
    Ok(Arc::new(w))
}

pub(super) fn start_node(
    c: &Common,
    reg: &RegistryLoc,
    dir: &str,
    extra: &[String],
) -> Result<NodeProc, String> {
    let bin = gatewayd_bin(c.gatewayd.as_deref())?;
    let d = c.out.join("work").join(dir);
    let logs = c.out.join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    let mut args: Vec<String> = vec!["--workers".into(), c.workers.to_string()];
    args.extend(extra.iter().cloned());
    args.extend(c.node_args.iter().cloned());
    let n = NodeProc::start(&bin, &d, reg, &args, &logs.join(format!("{dir}.log")))?;
    progress(&format!(
        "node {dir}: pid {}, gateway {}, admin {}",
        n.pid, n.gateway, n.admin
    ));
    Ok(n)
}

/// The producer's settings from the common options, writing to `ingest`.
pub(super) fn producer_config(c: &Common, ingest: Vec<SocketAddr>) -> ProducerConfig {
    ProducerConfig {
        ingest,
        rate: c.rate,
        dist: c.dist.clone(),
        payload: c.payload,
        ..ProducerConfig::default()
    }
}

/// False (with a failed claim in the report) unless every session is READY.
pub(super) fn all_ready(rep: &mut Report, claim: &str, c: &Common, ready: u64) -> bool {
    let ok = ready >= c.sessions as u64;
    if !ok {
        rep.claim(claim, false, &c.sessions.to_string(), &ready.to_string());
    }
    ok
}

/// The fleet for `world` on `nodes`, as the common options say.
pub(super) fn start_fleet(
    c: &Common,
    world: &Arc<World>,
    nodes: Vec<SocketAddrV4>,
    slow: Vec<(u32, f64)>,
) -> Result<Fleet, String> {
    Fleet::start(
        world.clone(),
        FleetConfig {
            nodes,
            sources: sources(c, c.sessions),
            threads: c.threads,
            coordinator: c.coordinator,
            slow,
            ..FleetConfig::default()
        },
    )
    .map_err(|e| format!("fleet: {e}"))
}

/// Source addresses: given, or one 127.0.0.x per 4,000 sessions. One
/// address has ~28,000 ports, but every connection a bot closes itself
/// (after an op 9, a zombie, a storm) holds its port in TIME_WAIT for 60 s:
/// a 40,000-session storm ran out of ports with 20,000 per address.
pub(super) fn sources(c: &Common, sessions: u32) -> Vec<Ipv4Addr> {
    if !c.sources.is_empty() {
        return c.sources.clone();
    }
    let n = sessions.div_ceil(4_000).clamp(1, 200);
    (0..n)
        .map(|i| Ipv4Addr::new(127, 0, 0, 2 + i as u8))
        .collect()
}

pub(super) const NO_THROTTLE: [&str; 4] =
    ["--identify-limits", "off", "--admission-per-second", "0"];

pub(super) fn owned(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}
