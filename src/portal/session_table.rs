//! `GET /api/sessions?after=<session id>&limit=<n>`: the signed-in
//! application's sessions one by one, across the cluster, a page at a
//! time, and the last `timeline::LEN` lifecycle events (docs/portal.md,
//! "Sessions one by one").
//!
//! - This node's sessions come from the workers' boards
//!   (`worker::session_board`, republished once a second); every other
//!   live node's from its figures (`figures::NodeFigures`, asked on the
//!   cluster link and cached as the health view's are), which carry at
//!   most `figures::MAX_ROWS` rows per node: past that, the answer says
//!   how many of a node's sessions the table cannot list.
//! - Pages follow the session id (a cursor, not an offset): a session
//!   that ends while someone pages does not shift the rest.
//! - Bounded: at most `MAX_LIMIT` rows and `timeline::LEN` events a page.

use serde_json::{json, Value};
use shards::session_id::SessionId;

use super::cluster;
use super::ctx::{now_ms, Ctx};
use super::http::{Request, Response};
use crate::worker::session_board::Row;
use crate::worker::timeline::{self, Event};

pub const PAGE: usize = 50;
pub const MAX_LIMIT: usize = 200;

pub fn json(ctx: &Ctx, app: u64, req: &Request) -> Response {
    let after = match req.field("after").filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => match SessionId::parse(&s) {
            Some(id) => Some(timeline::session_bits(&id)),
            None => {
                return Response::json(
                    400,
                    &json!({"error": "after: not a session id (32 hex digits)"}),
                )
            }
        },
    };
    let limit = match req.field("limit").map(|s| s.parse::<usize>()) {
        None => PAGE,
        Some(Ok(n)) if (1..=MAX_LIMIT).contains(&n) => n,
        Some(_) => {
            return Response::json(
                400,
                &json!({"error": format!("limit: a number from 1 to {MAX_LIMIT}")}),
            )
        }
    };
    Response::json(200, &page(ctx, app, after, limit))
}

fn page(ctx: &Ctx, app: u64, after: Option<u128>, limit: usize) -> Value {
    let shared = &ctx.v.shared;
    let me = shared.node();
    let now = now_ms();
    // One more than the page: whether a page follows.
    let local = shared.sessions.page(app, after, limit + 1);
    // (node, row) of every page candidate, then the `limit` first by id.
    let mut rows: Vec<(u16, Row)> = local.rows.iter().map(|r| (me, *r)).collect();
    let mut events: Vec<(u16, Event)> = Vec::new();
    let mut mine = Vec::new();
    shared.apps.timeline(app, &mut mine);
    events.extend(mine.into_iter().map(|e| (me, e)));
    let mut total = local.total as u64;
    let mut unlisted = Vec::new();
    let mut silent = Vec::new();
    if me != 0 {
        let remote = cluster::remote(ctx, app);
        for p in &remote.peers {
            let f = match &p.answer {
                Ok(f) => f,
                Err(why) => {
                    silent.push(json!({"node": p.node, "why": why}));
                    continue;
                }
            };
            total += u64::from(f.sessions_total);
            if (f.sessions.len() as u64) < u64::from(f.sessions_total) {
                unlisted.push(json!({
                    "node": p.node,
                    "held": f.sessions_total,
                    "listed": f.sessions.len(),
                }));
            }
            let past = |r: &&Row| after.is_none_or(|a| r.session > a);
            rows.extend(f.sessions.iter().filter(past).map(|r| (p.node, *r)));
            events.extend(f.timeline.iter().map(|e| (p.node, *e)));
        }
    }
    rows.sort_unstable_by_key(|(_, r)| r.session);
    let more = rows.len() > limit;
    rows.truncate(limit);
    events.sort_by_key(|e| std::cmp::Reverse(e.1.at_ms));
    events.truncate(timeline::LEN);
    let next = more
        .then(|| rows.last().map(|(_, r)| r.session_id().to_string()))
        .flatten();
    json!({
        "now_ms": now,
        "as_of_ms": local.as_of_ms,
        "total": total,
        "limit": limit,
        "next": next,
        "sessions": rows.iter().map(|(node, r)| row_json(*node, r, now)).collect::<Vec<_>>(),
        "unlisted": unlisted,
        "silent": silent,
        "timeline": events.iter().map(|(node, e)| event_json(*node, e)).collect::<Vec<_>>(),
    })
}

fn row_json(node: u16, r: &Row, now: u64) -> Value {
    let age = |t: u64| (t != 0).then(|| now.saturating_sub(t));
    json!({
        "session_id": r.session_id().to_string(),
        "node": node,
        "worker": r.worker,
        "shard": r.shard,
        "since_ms": r.since_ms,
        "attached": r.attached_ms != 0,
        "heartbeat_age_ms": age(r.heartbeat_ms),
        "queue_pct": r.queue_pct,
        "compression": r.compression_name(),
        "resumes": r.resumes,
    })
}

fn event_json(node: u16, e: &Event) -> Value {
    let code = match e.kind {
        timeline::Kind::Close(c) => Some(c),
        _ => None,
    };
    json!({
        "at_ms": e.at_ms,
        "node": node,
        "event": e.kind.as_str(),
        "code": code,
        "meaning": code.map(|c| super::names::close_code(c).0),
        "session_id": timeline::session_of(e.session).to_string(),
    })
}
