//! `loadgen hold-sessions`: opens and holds sessions of one token until
//! stdin closes (or `hold`), printing `KEY N` progress lines, for tests
//! that need many sessions from several processes.

use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::common::{close_codes, token_world};
use super::opts::HoldOpts;
use crate::fleet::{Fleet, FleetConfig};

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
