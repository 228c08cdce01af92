//! The application's health as JSON (`GET /api/health`, polled by the
//! page every 2 s): read from what the node already keeps, for the signed-
//! in application only (`worker::app_stats` for its sessions, closes and
//! REST answers; `chat::board` for its interactions; the registry for its
//! identify budget); and the sessions-over-time history this module keeps.

use std::time::Duration;

use serde_json::{json, Value};

use super::ctx::{lock, now_ms, Ctx};
use super::names;
use crate::api::route::ROUTE_NAMES;
use crate::chat::board::{AppStats, FAILURE_REASONS};
use crate::worker::app_stats::{AppSnapshot, AppTable, StartRefusal};

pub const SAMPLE_EVERY: Duration = Duration::from_secs(10);
fn live_of(t: &AppTable, app: u64, now: u64) -> Option<u32> {
    t.snapshot(app, now)
        .map(|s| s.workers.iter().map(|w| w.0).sum())
}

/// One sample of every tracked application's live sessions.
pub fn sample(ctx: &Ctx) {
    let t = &ctx.v.shared.apps;
    let now = now_ms();
    let minute = (now / 60_000) as u32;
    let mut h = lock(&ctx.history);
    let mut apps = std::mem::take(&mut h.scratch);
    t.apps(&mut apps);
    for &app in &apps {
        if let Some(live) = live_of(t, app, now) {
            h.record(app, minute, live);
        }
    }
    h.scratch = apps;
    h.record_delivery(minute, delivery_now(ctx));
}

/// The node's end-to-end delivery buckets, summed over workers.
fn delivery_now(ctx: &Ctx) -> [u64; crate::delivery::latency::BUCKETS] {
    let mut c = [0u64; crate::delivery::latency::BUCKETS];
    for w in ctx.v.shared.metrics.iter() {
        let (b, _) = w.delivery.end_to_end.read();
        for (x, y) in c.iter_mut().zip(b) {
            *x += y;
        }
    }
    c
}

/// The node's reconnect-time distribution (delivery/reconnect.rs) as the
/// page shows it: resumes by time away, and what each window would have
/// refused.
fn reconnects(ctx: &Ctx) -> Value {
    use crate::delivery::reconnect::{GAP_BOUNDS_MS, WINDOWS_S};
    use std::sync::atomic::Ordering::Relaxed;
    let ms = &ctx.v.shared.metrics;
    let gaps: Vec<Value> = (0..=GAP_BOUNDS_MS.len())
        .map(|i| {
            let n: u64 = ms.iter().map(|w| w.reconnect.gaps[i].load(Relaxed)).sum();
            json!({"le_ms": GAP_BOUNDS_MS.get(i), "resumes": n})
        })
        .collect();
    let windows: Vec<Value> = WINDOWS_S
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let n: u64 = ms.iter().map(|m| m.reconnect.beyond[i].load(Relaxed)).sum();
            json!({"window_s": w, "would_refuse": n})
        })
        .collect();
    let attempts: u64 = ms.iter().map(|w| w.reconnect.attempts.load(Relaxed)).sum();
    let expired: u64 = ms
        .iter()
        .map(|w| w.reconnect.expired_refused.load(Relaxed))
        .sum();
    json!({"by_gap": gaps, "windows": windows, "timed_attempts": attempts,
           "refused_expired": expired,
           "window_s": ctx.v.shared.cfg.limits.resume_window_ms / 1000})
}

fn interactions(a: &AppStats) -> Value {
    let mut v = a.to_json(0);
    if let Value::Object(m) = &mut v {
        m.remove("application_id");
        let failures: serde_json::Map<String, Value> = FAILURE_REASONS
            .iter()
            .zip(a.failures.iter())
            .filter(|(_, n)| **n > 0)
            .map(|(r, n)| ((*r).to_string(), (*n).into()))
            .collect();
        m.insert("endpoint_failures".into(), failures.into());
    }
    v
}

/// The JSON of `GET /api/health` for `app`.
pub fn json(ctx: &Ctx, app: u64) -> Value {
    let now = now_ms();
    let snap = ctx.v.shared.apps.snapshot(app, now).unwrap_or_default();
    let workers = ctx.v.shared.metrics.len();
    let by_worker: Vec<Value> = (0..workers)
        .map(|w| {
            let (live, degraded, detached) = snap.workers.get(w).copied().unwrap_or_default();
            json!({"worker": w, "live": live, "degraded": degraded, "detached": detached})
        })
        .collect();
    let sum = |f: fn(&(u32, u32, u32)) -> u32| snap.workers.iter().map(f).sum::<u32>();
    let by_shard: Vec<Value> = snap
        .shards
        .iter()
        .map(|(id, of, live, degraded)| json!({"shard": [id, of], "live": live, "degraded": degraded}))
        .collect();
    let closes: Vec<Value> = snap
        .closes_hour
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(i, n)| {
            let code = if i < 15 { 4000 + i as u16 } else { 0 };
            let (meaning, advice) = names::close_code(code);
            json!({"code": code, "count": n, "meaning": meaning, "advice": advice})
        })
        .collect();
    let mut rest: Vec<_> = snap.rest.clone();
    rest.sort_unstable_by_key(|r| std::cmp::Reverse(r.2));
    let rest: Vec<Value> = rest
        .iter()
        .map(|(r, st, n)| json!({"route": ROUTE_NAMES.get(*r).copied().unwrap_or("?"), "status": st, "count": n}))
        .collect();
    let limited: Vec<Value> = snap
        .limited
        .iter()
        .map(|(r, scope, n)| {
            let scope = ["user", "global", "shared"][(*scope as usize).min(2)];
            json!({"route": ROUTE_NAMES.get(*r).copied().unwrap_or("?"), "scope": scope, "count": n})
        })
        .collect();
    let stats = ctx.v.board.app(app).unwrap_or_default();
    let now_minute = (now / 60_000) as u32;
    let acks: Vec<Value> = stats
        .minutes(now_minute)
        .iter()
        .map(|(m, n, p50, p99)| json!({"minute": m, "acks": n, "p50_ms": p50, "p99_ms": p99}))
        .collect();
    let sessions: Vec<Value> = lock(&ctx.history)
        .series(app, now_minute)
        .iter()
        .map(|(m, live)| json!({"minute": m, "live": live}))
        .collect();
    let delivery: Vec<Value> = lock(&ctx.history)
        .delivery_series(now_minute, &delivery_now(ctx))
        .iter()
        .map(|d| {
            json!({"minute": d.minute, "deliveries": d.deliveries,
                        "p50_ms": d.p50_ms, "p99_ms": d.p99_ms})
        })
        .collect();
    let here = super::figures::NodeFigures::of(ctx.v.shared.node(), now, &snap, &stats);
    let cluster = super::cluster::json(ctx, app, &here);
    let budget = match ctx.registry().session_start_remaining(app, now) {
        Ok(l) => json!({"total": l.total, "remaining": l.remaining,
                        "reset_after_ms": l.reset_after_ms, "max_concurrency": l.max_concurrency}),
        Err(_) => Value::Null,
    };
    let start_refusals = start_refusals(ctx, &snap, &budget, now);
    json!({
        "application_id": app.to_string(),
        "now_ms": now,
        "sessions": {"live": sum(|w| w.0), "degraded": sum(|w| w.1), "detached": sum(|w| w.2),
                     "by_worker": by_worker, "by_shard": by_shard,
                     "other_shards": snap.shards_other},
        "events_dispatched": snap.events,
        "identifies": snap.identifies, "resumes": snap.resumes,
        "identifies_hour": snap.identifies_hour, "resumes_hour": snap.resumes_hour,
        "closes_hour": closes,
        "identify_budget": budget,
        "start_refusals": start_refusals,
        "rest": rest, "rest_other": snap.rest_other, "rate_limited": limited,
        "rest_window": format!(
            "since this node started, {} ago (answers to the bot's token; interaction callbacks and \
             follow-ups, authenticated by the interaction's token, are under Interactions)",
            ago_words(ctx.v.shared.started.elapsed().as_secs())
        ),
        "interactions": interactions(&stats),
        "ack_minutes": acks,
        "sessions_minutes": sessions,
        "delivery_minutes": delivery,
        "reconnects": reconnects(ctx),
        "cluster": cluster,
    })
}

/// "3 h 12 min", "41 min", "12 s".
fn ago_words(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs} s"),
        60..3600 => format!("{} min", secs / 60),
        _ => format!("{} h {} min", secs / 3600, secs / 60 % 60),
    }
}

/// Identifies refused before a session began (4014, 4011, op 9 for the
/// concurrency bucket or the daily budget): counts since the node started
/// with their meaning and advice, and the last few with their times.
fn start_refusals(ctx: &Ctx, snap: &AppSnapshot, budget: &Value, now: u64) -> Value {
    let max_concurrency = budget["max_concurrency"].as_u64();
    let spacing_s = ctx.v.shared.cfg.registry.identify_spacing_ms.div_ceil(1000);
    let counts: Vec<Value> = StartRefusal::ALL
        .iter()
        .filter(|w| snap.refused[w.index()] > 0)
        .map(|w| {
            let (meaning, advice) = names::start_refusal(*w, max_concurrency, spacing_s);
            json!({"why": w.as_str(), "count": snap.refused[w.index()],
                   "meaning": meaning, "advice": advice})
        })
        .collect();
    let recent: Vec<Value> = snap
        .recent_refusals
        .iter()
        .map(|r| {
            let asked: Vec<&str> = names::PRIVILEGED_INTENTS
                .iter()
                .filter(|(b, _)| r.privileged & b != 0)
                .map(|(_, n)| *n)
                .collect();
            let detail = match (r.why, r.resume) {
                (_, Some(why)) => why.to_string(),
                (StartRefusal::DisallowedIntents, _) if asked.is_empty() => "none".into(),
                (StartRefusal::DisallowedIntents, _) => asked.join(", "),
                _ => String::new(),
            };
            json!({"why": r.why.as_str(), "at_ms": r.at_ms,
                   "ago_ms": now.saturating_sub(r.at_ms),
                   "privileged_intents_asked": asked,
                   "resume_refusal": r.resume.map(|x| x.label()),
                   "detail": detail})
        })
        .collect();
    json!({"counts": counts, "recent": recent})
}
