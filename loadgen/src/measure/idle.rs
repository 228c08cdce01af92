//! `loadgen measure idle`: the node's RSS before opening N sessions and
//! once all are READY (per session and per 1,000), held for `hold`, then
//! every session closed with 1000 so nothing stays detached on the node.

use std::time::Duration;

use super::common::{first_problem, fmt_list, kb, rss_kb, scrape, start_fleet, wait_ready};
use super::opts::IdleOpts;
use crate::nodes;

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
