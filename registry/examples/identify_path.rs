//! The registry's identify path, timed: the calls the node's sidecar makes
//! for one Identify (src/link/mod.rs: authenticate, session_start_remaining,
//! servers_for_shard, server_snapshot, installation, installations_in_server,
//! record_session_start), in a loop against an embedded SQLite registry, or
//! against PostgreSQL with `--url postgres://...` (a fresh database).
//!
//!   cargo run --release -p registry --example identify_path -- [--rounds 7] [--n 5000] [--url URL]
//!
//! Prints, per round, the mean µs per Identify's calls, then the median and
//! the spread of the rounds. One thread, nothing else running: a figure to
//! compare two builds of the registry with, in one run (A B A B ...).

use std::time::Instant;

use registry::{PostgresRegistry, Registry, SqliteRegistry};

fn arg(name: &str) -> Option<String> {
    let mut it = std::env::args();
    while let Some(a) = it.next() {
        if a == name {
            return it.next();
        }
    }
    None
}

fn main() {
    let rounds: usize = arg("--rounds").map_or(7, |v| v.parse().expect("--rounds N"));
    let n: usize = arg("--n").map_or(5000, |v| v.parse().expect("--n N"));
    let dir = tempfile::tempdir().expect("a temp dir");
    let reg: Box<dyn Registry> = match arg("--url") {
        Some(url) => Box::new(
            PostgresRegistry::connect(&url, std::time::Duration::from_secs(5)).expect("PostgreSQL"),
        ),
        None => Box::new(SqliteRegistry::open(&dir.path().join("registry.db")).expect("SQLite")),
    };
    let (app, token) = reg.create_application("identify-bench", 0, 1).expect("app");
    let mut servers = Vec::new();
    for i in 0..8 {
        let s = reg.create_server(&format!("s{i}"), 1).expect("server");
        reg.install(app.id, s.id, 3072).expect("install");
        servers.push(s.id);
    }
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    let mut per = Vec::new();
    for round in 0..rounds {
        let t = Instant::now();
        for _ in 0..n {
            let a = reg
                .authenticate(&token)
                .unwrap()
                .expect("the token authenticates");
            let _ = reg.session_start_remaining(a.id, now()).unwrap();
            let ids = reg.servers_for_shard(a.id, 0, 1).unwrap();
            let s = ids[0];
            let _ = reg.server_snapshot(s).unwrap().expect("snapshot");
            let _ = reg.installation(a.id, s).unwrap().expect("installed");
            let _ = reg.installations_in_server(s).unwrap();
            let _ = reg.record_session_start(a.id, now()).unwrap();
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / n as f64;
        println!("round {round}: {us:.1} µs per identify's registry calls");
        per.push(us);
    }
    per.sort_by(f64::total_cmp);
    println!(
        "median {:.1} µs (min {:.1}, max {:.1}) over {rounds} rounds of {n}",
        per[per.len() / 2],
        per[0],
        per[per.len() - 1]
    );
}
