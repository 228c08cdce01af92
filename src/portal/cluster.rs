//! The health view across the cluster (docs/portal.md, "Several nodes"):
//! the signed-in application's figures from every other live node, asked
//! on the node-to-node link (`link::cluster::figures`), next to this
//! node's own.
//!
//! Bounds and cost: the live nodes are read from the registry at most once
//! a second; another node's answer for an application is kept `FRESH`
//! (1 s), so however many pages of one application poll, each other node
//! is asked at most about once a second for it; and a request carries,
//! with the application whose refresh is due, every other application
//! whose page asked in the last 5 s and whose answer is half stale, so
//! pages of many applications share one request per node and about a
//! second. At most `MAX_CACHED` applications are kept (the least recently
//! polled dropped); at most `MAX_PEERS` nodes are asked (the rest are
//! listed as not asked). Every node is asked at
//! once, on a thread of its own, all under one `LINK_DEADLINE` (300 ms).
//! A node that did not answer is not asked again, for any application,
//! for `BACKOFF` (3 s): a frozen node costs one page refresh that deadline
//! every 3 s, not every refresh of every application (which would tie up
//! the portal's four handlers). It is named on the page as not answering
//! meanwhile, never left out.

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::ctx::{lock, now_ms, Ctx};
use super::figures::NodeFigures;
use crate::link::cluster::figures;

/// How long a node has to answer (connect, request, answer).
pub const LINK_DEADLINE: Duration = Duration::from_millis(300);
/// How long a node's answer is used before it is asked again.
pub const FRESH: Duration = Duration::from_secs(1);
/// Applications whose answers are kept.
pub const MAX_CACHED: usize = 256;
/// Other nodes asked for one page refresh.
pub const MAX_PEERS: usize = 32;
/// A node that gave no answer is not asked again for this long.
pub const BACKOFF: Duration = Duration::from_secs(3);
/// Applications whose page asked within this are refreshed together.
const WATCHED: Duration = Duration::from_secs(5);
/// Live nodes, as read from the registry, kept this long.
const PEERS_FRESH: Duration = Duration::from_secs(1);
/// A node that was listed and no longer is (its claim lapsed: frozen or
/// dead for `cluster.node_ttl_ms`, or it stopped) is shown as gone this
/// long; at most `MAX_PEERS` of them are remembered.
const GONE_SHOWN: Duration = Duration::from_secs(60);
const GONE_WHY: &str = "no longer in the cluster (its registry claim lapsed, or it stopped)";

use super::cluster_state::Entry;
pub use super::cluster_state::{Peer, Remote};

/// The live nodes (at most once a second from the registry); Err: the
/// registry's error (the last list is not reused: it may name dead nodes).
fn live_nodes(ctx: &Ctx) -> Result<Vec<(u16, String)>, String> {
    let mut n = lock(&ctx.cluster.nodes);
    if n.1.is_some_and(|at| at.elapsed() < PEERS_FRESH) {
        return Ok(n.0.clone());
    }
    let list = ctx
        .registry()
        .live_nodes(now_ms())
        .map_err(|e| e.to_string())?;
    let mut gone = lock(&ctx.cluster.gone);
    gone.retain(|(g, _, at)| at.elapsed() < GONE_SHOWN && !list.iter().any(|(n, _)| n == g));
    for (node, link) in &n.0 {
        if !list.iter().any(|(l, _)| l == node) && gone.len() < MAX_PEERS {
            gone.push((*node, link.clone(), Instant::now()));
        }
    }
    *n = (list, Some(Instant::now()));
    Ok(n.0.clone())
}

/// The other nodes' figures of `app`: cached, or asked now, together with
/// every other application whose page is open and whose answer is half
/// stale (one link call per node serves them all).
pub fn remote(ctx: &Ctx, app: u64) -> Arc<Remote> {
    let batch = {
        let mut c = lock(&ctx.cluster.cache);
        if let Some(e) = c.get_mut(&app) {
            e.polled = Instant::now();
            if e.view.at.elapsed() < FRESH || e.fetching {
                ctx.v.stats.cluster_cached.fetch_add(1, Relaxed);
                return e.view.clone();
            }
        }
        let mut batch = vec![app];
        for (k, e) in c.iter() {
            if batch.len() >= figures::MAX_APPS {
                break;
            }
            let watched = e.polled.elapsed() < WATCHED;
            if *k != app && !e.fetching && watched && e.view.at.elapsed() >= FRESH / 2 {
                batch.push(*k);
            }
        }
        for k in &batch {
            if let Some(e) = c.get_mut(k) {
                e.fetching = true;
            }
        }
        batch
    };
    let views = fetch(ctx, &batch);
    let mut c = lock(&ctx.cluster.cache);
    let mut mine = None;
    for (k, view) in batch.iter().zip(views) {
        let view = Arc::new(view);
        if *k == app {
            mine = Some(view.clone());
        }
        let polled = c.get(k).map_or_else(Instant::now, |e| e.polled);
        if c.len() >= MAX_CACHED && !c.contains_key(k) {
            c.retain(|_, e| e.polled.elapsed() < WATCHED * 2);
            if c.len() >= MAX_CACHED {
                let oldest = c.iter().min_by_key(|(_, e)| e.polled).map(|(k, _)| *k);
                if let Some(o) = oldest {
                    c.remove(&o);
                }
            }
        }
        c.insert(
            *k,
            Entry {
                view,
                fetching: false,
                polled,
            },
        );
    }
    mine.unwrap_or_else(|| {
        Arc::new(Remote {
            at: Instant::now(),
            registry_error: None,
            peers: Vec::new(),
        })
    })
}

/// What one node said: per application asked, its figures or why not;
/// or why it said nothing.
type NodeAnswer = Result<Vec<Result<NodeFigures, &'static str>>, &'static str>;

/// Ask every other live node at once for `apps`, all under one deadline:
/// one `Remote` per application, in order.
fn fetch(ctx: &Ctx, apps: &[u64]) -> Vec<Remote> {
    let me = ctx.v.shared.node();
    let at = Instant::now();
    let nodes = match live_nodes(ctx) {
        Ok(n) => n,
        Err(e) => {
            let failed = |_| Remote {
                at,
                registry_error: Some(e.clone()),
                peers: Vec::new(),
            };
            return apps.iter().map(failed).collect();
        }
    };
    let others: Vec<(u16, String)> = nodes.into_iter().filter(|(n, _)| *n != me).collect();
    let deadline = Instant::now() + LINK_DEADLINE;
    let (tx, rx) = crossbeam_channel::bounded(others.len().min(MAX_PEERS));
    // (node, link, its answer, ms it took)
    let mut said: Vec<(u16, String, NodeAnswer, u64)> = Vec::with_capacity(others.len());
    let backing_off: Vec<(u16, &'static str)> = {
        let mut s = lock(&ctx.cluster.silent);
        s.retain(|(_, at, _)| at.elapsed() < BACKOFF);
        s.iter().map(|(n, _, why)| (*n, *why)).collect()
    };
    let mut asked = Vec::new();
    let list: Arc<[u64]> = apps.into();
    for (node, link) in &others {
        let i = said.len();
        let backed = backing_off.iter().find(|(n, _)| n == node).map(|b| b.1);
        let why = match backed {
            Some(why) => why, // it did not answer a moment ago: not asked again yet
            None if asked.len() >= MAX_PEERS => "not asked (more nodes than the portal asks)",
            None => figures::Silence::Timeout.as_str(),
        };
        said.push((*node, link.clone(), Err(why), 0));
        if backed.is_some() || asked.len() >= MAX_PEERS {
            continue;
        }
        asked.push(i);
        ctx.v.stats.cluster_asks.fetch_add(1, Relaxed);
        let (tx, node, link, list) = (tx.clone(), *node, link.clone(), list.clone());
        let tls = ctx.v.link_tls.clone();
        let spawned = std::thread::Builder::new()
            .name("portal-ask".into())
            .spawn(move || {
                let _ = tx.send((i, ask(tls.as_deref(), node, &link, &list, deadline)));
            });
        if spawned.is_err() {
            said[i].2 = Err("no thread to ask it");
        }
    }
    drop(tx);
    for (node, link, _) in lock(&ctx.cluster.gone).iter() {
        said.push((*node, link.clone(), Err(GONE_WHY), 0));
    }
    // Answers until the deadline; a thread still waiting on a name lookup
    // past it finds the channel gone and ends.
    while let Ok((i, answer)) = rx.recv_deadline(deadline + Duration::from_millis(20)) {
        said[i].2 = answer;
        said[i].3 = at.elapsed().as_millis() as u64;
    }
    let silent = said.iter().filter(|p| p.2.is_err()).count();
    ctx.v.stats.cluster_silent.fetch_add(silent as u64, Relaxed);
    {
        let mut s = lock(&ctx.cluster.silent);
        for p in asked.iter().map(|&i| &said[i]) {
            let Err(why) = p.2 else { continue };
            if s.len() < MAX_PEERS && !s.iter().any(|(n, _, _)| *n == p.0) {
                s.push((p.0, Instant::now(), why));
            }
        }
    }
    (0..apps.len())
        .map(|k| Remote {
            at,
            registry_error: None,
            peers: said
                .iter()
                .map(|(node, _link, answer, took_ms)| Peer {
                    node: *node,
                    answer: match answer {
                        Ok(per_app) => per_app.get(k).cloned().unwrap_or(Err("a malformed answer")),
                        Err(why) => Err(*why),
                    },
                    took_ms: *took_ms,
                })
                .collect(),
        })
        .collect()
}

fn ask(
    tls: Option<&crate::link::cluster::tls::LinkTls>,
    node: u16,
    link: &str,
    apps: &[u64],
    deadline: Instant,
) -> NodeAnswer {
    // An IP and port (the cluster refuses anything else): no DNS lookup.
    let addr: std::net::SocketAddr = link
        .parse()
        .map_err(|_| "its link address is not an IP address and port")?;
    let answers = figures::ask(tls, addr, apps, deadline).map_err(figures::Silence::as_str)?;
    Ok(answers
        .iter()
        .map(|bytes| match NodeFigures::decode(bytes) {
            Some(f) if f.node == node => Ok(f),
            Some(_) => Err("another node answers at its address"),
            None => Err("a malformed answer"),
        })
        .collect())
}

// The nodes' link addresses stay out of what a bot's author sees: they are
// the operator's (`gatewayd cluster`, the admin port), not the author's.
fn shards_json(node: u16, f: &NodeFigures, out: &mut Vec<Value>) {
    for (id, of, live, degraded) in &f.shards {
        out.push(json!({"node": node, "shard": [id, of],
                        "live": live, "degraded": degraded}));
    }
    if f.shards_other > 0 {
        out.push(json!({"node": node, "shard": null,
                        "live": f.shards_other, "degraded": null}));
    }
}

fn node_json(node: u16, f: &NodeFigures, this: bool, age_ms: u64) -> Value {
    let ix = &f.interactions;
    json!({"node": node, "this_node": this, "answered": true, "age_ms": age_ms,
           "live": f.live(), "degraded": f.degraded(), "detached": f.detached(),
           "identifies_hour": f.identifies_hour, "resumes_hour": f.resumes_hour,
           "identifies": f.identifies, "resumes": f.resumes, "events_dispatched": f.events,
           "rest_requests": f.rest.iter().map(|r| r.2).sum::<u64>() + f.rest_other,
           "rate_limited": f.limited.iter().map(|r| r.2).sum::<u64>(),
           "interactions": {"opened": ix[0], "acks": ix[2], "misses": ix[4], "deferrals": ix[3]}})
}

/// The `cluster` part of `GET /api/health` (null outside a cluster):
/// this node's figures (`local`, fresh) and every other node's (cached).
pub fn json(ctx: &Ctx, app: u64, local: &NodeFigures) -> Value {
    let me = ctx.v.shared.node();
    if me == 0 {
        return Value::Null;
    }
    let remote = remote(ctx, app);
    let age = remote.at.elapsed().as_millis() as u64;
    let mut nodes = vec![node_json(me, local, true, 0)];
    let mut shards = Vec::new();
    shards_json(me, local, &mut shards);
    let mut silent = Vec::new();
    let mut answered = vec![local];
    for p in &remote.peers {
        match &p.answer {
            Ok(f) => {
                let mut n = node_json(p.node, f, false, age);
                n["took_ms"] = p.took_ms.into();
                nodes.push(n);
                shards_json(p.node, f, &mut shards);
                answered.push(f);
            }
            Err(why) => {
                let v = json!({"node": p.node, "why": why});
                silent.push(v.clone());
                nodes.push(json!({"node": p.node, "this_node": false,
                                  "answered": false, "why": why, "age_ms": age}));
            }
        }
    }
    let sum = |f: fn(&NodeFigures) -> u64| answered.iter().map(|n| f(n)).sum::<u64>();
    json!({
        "node": me,
        "deadline_ms": LINK_DEADLINE.as_millis() as u64,
        "asked_ms_ago": age,
        "registry_error": remote.registry_error,
        "nodes": nodes,
        "by_node_shard": shards,
        "not_answering": silent,
        "totals": {
            "nodes_answered": answered.len(),
            "live": sum(|f| f.live().into()),
            "degraded": sum(|f| f.degraded().into()),
            "detached": sum(|f| f.detached().into()),
            "identifies_hour": sum(|f| f.identifies_hour),
            "resumes_hour": sum(|f| f.resumes_hour),
            "events_dispatched": sum(|f| f.events),
        },
    })
}
