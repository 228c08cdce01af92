//! `revocation`: an application uninstalled from a hot server while the
//! registry is browned out by loadgen's fault proxy (proxy/) between
//! gatewayd and PostgreSQL: "pushed" (the registry answers late) and
//! "lease-bound" (it refuses connections, so only the node's leases
//! lapsing can end delivery). Claim: the revoked bot stops receiving
//! within the bound of each case, and a control bot still receives.

use std::net::SocketAddr;
use std::sync::atomic::Ordering::Relaxed;
use std::time::{Duration, Instant};

use super::claims::{counter_figures, integrity_claims};
use super::opts::{Common, RevocationOpts};
use super::sampler::{connect_all, Sampler};
use super::setup::{
    all_ready, make_world, open_registry, owned, producer_config, progress, start_fleet,
    start_node, NO_THROTTLE,
};
use crate::clock::now_ns;
use crate::nodes::RegistryLoc;
use crate::producer::{Producer, ProducerConfig};
use crate::proxy::{Fault, Proxy};
use crate::report::Report;

pub(super) fn revocation(c: &Common, o: &RevocationOpts, rep: &mut Report) -> Result<(), String> {
    let Some(url) = c.registry_url.clone() else {
        return Err(
            "revocation needs --registry-url (PostgreSQL): the brownout is injected by loadgen's proxy \
             between gatewayd and the registry, and the embedded registry has no connection to proxy"
                .into(),
        );
    };
    let reg = open_registry(c, "registry")?;
    // Hot server 0: bot 0 revoked in the pushed case, bot 1 in the
    // lease-bound case, bot 2 never revoked (shows the node still delivers).
    let world = make_world(c, reg.handle.as_ref(), 3)?;
    let pg = pg_addr(&url)?;
    let proxy = Proxy::start("127.0.0.1:0".parse().unwrap(), pg)
        .map_err(|e| format!("fault proxy: {e}"))?;
    let proxied = replace_host_port(&url, proxy.local_addr());
    let node = start_node(
        c,
        &RegistryLoc::Postgres(proxied),
        "revocation",
        &[
            NO_THROTTLE
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>(),
            owned(&["--brownout-max-ms", &o.brownout_max_ms.to_string()]),
            owned(&["--lease-ttl-ms", &o.lease_ttl_ms.to_string()]),
        ]
        .concat(),
    )?;
    let fleet = start_fleet(c, &world, vec![node.gateway], vec![])?;
    let mut sampler = Sampler::new(&[&node]);
    let (ready, _) = connect_all(&fleet, c, &[&node], &mut sampler, "connect");
    if !all_ready(rep, "all sessions READY", c, ready) {
        let _ = fleet.stop();
        return Ok(());
    }
    let producer = Producer::start(
        world.clone(),
        ProducerConfig {
            hot: Some((0, o.hot_rate)),
            private_share: 0.0,
            ..producer_config(c, vec![node.ingest])
        },
    );
    std::thread::sleep(Duration::from_secs_f64(c.warmup));
    let cases = [
        (
            "pushed",
            Fault::Latency(Duration::from_millis(o.brownout_latency_ms)),
            world.hot_bots[0],
            o.max_stop_secs,
        ),
        (
            "lease-bound",
            Fault::Drop,
            world.hot_bots[1],
            (o.brownout_max_ms + o.lease_ttl_ms) as f64 / 1000.0 + o.max_stop_secs,
        ),
    ];
    for (case, fault, bot, bound) in cases {
        progress(&format!("revocation {case}: registry fault {fault:?}"));
        proxy.set(fault.clone());
        *fleet.shared.watch.lock().unwrap() = Some((bot, 0));
        fleet.shared.watch_last_ns.store(0, Relaxed);
        fleet.shared.watch_count.store(0, Relaxed);
        // The fault settles in while we count what the bot gets before the revoke.
        std::thread::sleep(Duration::from_secs(2));
        let flowing = fleet.shared.watch_count.load(Relaxed);
        let app = world.bots[bot as usize].app_id;
        let t_revoke = now_ns();
        reg.handle
            .uninstall(app, world.servers[0].id)
            .map_err(|e| format!("uninstall: {e}"))?;
        let revoked_at = now_ns();
        progress(&format!(
            "revocation {case}: uninstalled application {app} from the hot server"
        ));
        // Done when nothing arrived for 3 s (the producer keeps posting
        // there at hot_rate), or at the bound + 10 s.
        let give_up = Instant::now() + Duration::from_secs_f64(bound + 10.0);
        let stopped = loop {
            std::thread::sleep(Duration::from_millis(250));
            let last = fleet.shared.watch_last_ns.load(Relaxed);
            let quiet_since = last.max(revoked_at);
            if now_ns().saturating_sub(quiet_since) > 3_000_000_000 {
                break Some(last.saturating_sub(t_revoke) as f64 / 1e9);
            }
            if Instant::now() > give_up {
                break None;
            }
        };
        let after = fleet.shared.watch_count.load(Relaxed);
        if stopped.is_some() {
            // From now on any event of that server to that bot is a violation.
            world.revoked_hot[bot as usize].store(true, Relaxed);
        }
        proxy.set(Fault::Pass);
        let group = case.to_string();
        rep.figure(
            &group,
            "events to the bot in the 2 s before the revoke",
            flowing as f64,
            "",
        );
        rep.figure(
            &group,
            "events received after the revoke",
            (after.saturating_sub(flowing)) as f64,
            "",
        );
        rep.figure(
            &group,
            "last event after the revoke",
            stopped.unwrap_or(f64::NAN),
            "s",
        );
        rep.claim(
            &format!("{case}: the revoked bot stops receiving"),
            flowing > 0 && stopped.is_some_and(|s| s <= bound),
            &format!(
                "last event within {bound:.1} s of the revoke (and events were flowing before)"
            ),
            &match stopped {
                Some(s) => format!(
                    "last event {s:.3} s after the revoke ({flowing} events in the 2 s before)"
                ),
                None => format!("still receiving {:.0} s after the revoke", bound + 10.0),
            },
        );
        // The registry is back: let the node leave brownout before the next case.
        std::thread::sleep(Duration::from_secs(3));
    }
    // The control bot (never revoked) must still be receiving.
    *fleet.shared.watch.lock().unwrap() = Some((world.hot_bots[2], 0));
    fleet.shared.watch_count.store(0, Relaxed);
    std::thread::sleep(Duration::from_secs(2));
    let control = fleet.shared.watch_count.load(Relaxed);
    rep.claim(
        "a bot that was not revoked still receives",
        control > 0,
        "events in the hot server after both cases",
        &format!("{control} events in 2 s"),
    );
    *fleet.shared.watch.lock().unwrap() = None;
    let _ = producer.stop();
    let first = fleet.shared.first_violation.lock().unwrap().clone();
    let total = fleet.stop();
    let ps = proxy.stats();
    rep.notes.push(format!("fault proxy: {ps:?}"));
    rep.notes.push(format!(
        "pushed case: the registry answers {} ms late (the node's NOTIFY and polls arrive late); \
         lease-bound case: the registry refuses connections, so the revocation can only take effect \
         when the node's leases lapse (brownout_max_ms {} + lease TTL {} ms)",
        o.brownout_latency_ms, o.brownout_max_ms, o.lease_ttl_ms
    ));
    counter_figures(rep, "fleet", &total);
    sampler.into_report(rep, "");
    // Watched bots are excluded from the entitlement check while watched.
    integrity_claims(rep, &total, first);
    proxy.stop();
    Ok(())
}

/// host:port of a postgres:// URL.
pub(super) fn pg_addr(url: &str) -> Result<SocketAddr, String> {
    let rest = url.split_once("://").map(|x| x.1).unwrap_or(url);
    let hostport = rest.split('/').next().unwrap_or("");
    let hostport = hostport.rsplit('@').next().unwrap_or(hostport);
    let hp = if hostport.contains(':') {
        hostport.to_string()
    } else {
        format!("{hostport}:5432")
    };
    use std::net::ToSocketAddrs;
    hp.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.find(|a| a.is_ipv4()))
        .ok_or_else(|| format!("cannot resolve the PostgreSQL address in {url}"))
}

pub(super) fn replace_host_port(url: &str, to: SocketAddr) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
    let (hostpart, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let userinfo = hostpart
        .rsplit_once('@')
        .map(|(u, _)| format!("{u}@"))
        .unwrap_or_default();
    format!("{scheme}://{userinfo}{to}{path}")
}
