//! The REST edge's families: responses by route and status, 429s by
//! scope, bans and restrictions (summed over workers), the chat service's
//! commits and history (embedded) or calls (upstream), and the counters
//! shared through Redis.

use std::fmt::Write;
use std::sync::atomic::Ordering::Relaxed;

use crate::api::route::{ROUTE_CLASSES, ROUTE_NAMES};
use crate::chat::upstream::REASONS;
use crate::chat::ChatStats;
use crate::ingest::pipeline::IngestStats;
use crate::worker::metrics::{WorkerMetrics, REST_STATUSES};

/// A family of one unlabelled series.
fn scalar(out: &mut String, name: &str, kind: &str, help: &str, value: u64) {
    family(out, name, kind, help);
    let _ = writeln!(out, "{name} {value}");
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

pub fn render(workers: &[WorkerMetrics], chat: &ChatStats, ingest: &IngestStats, out: &mut String) {
    family(
        out,
        "gatewayd_rest_responses_total",
        "counter",
        "REST responses by route (path template) and status.",
    );
    for (r, route) in ROUTE_NAMES.iter().enumerate() {
        for s in 0..=REST_STATUSES.len() {
            let v: u64 = workers
                .iter()
                .map(|w| w.rest_responses[r][s].load(Relaxed))
                .sum();
            if v == 0 {
                continue;
            }
            let status = REST_STATUSES
                .get(s)
                .map_or("other".to_string(), |s| s.to_string());
            let _ = writeln!(
                out,
                "gatewayd_rest_responses_total{{route=\"{route}\",status=\"{status}\"}} {v}"
            );
        }
    }
    family(
        out,
        "gatewayd_rest_request_duration_seconds",
        "histogram",
        "REST latency on the node, from the request read to its answer written, by route class.",
    );
    for (c, class) in ROUTE_CLASSES.iter().enumerate() {
        let parts: Vec<&crate::histogram::Histogram> =
            workers.iter().map(|w| &w.rest_latency[c]).collect();
        crate::histogram::Histogram::render_series(
            &parts,
            "gatewayd_rest_request_duration_seconds",
            &format!("class=\"{class}\""),
            out,
        );
    }
    family(
        out,
        "gatewayd_rest_limited_total",
        "counter",
        "REST requests answered 429, by X-RateLimit-Scope.",
    );
    for (i, scope) in ["user", "global", "shared"].iter().enumerate() {
        let v: u64 = workers
            .iter()
            .map(|w| w.rest_limited[i].load(Relaxed))
            .sum();
        let _ = writeln!(out, "gatewayd_rest_limited_total{{scope=\"{scope}\"}} {v}");
    }
    let sum = |f: fn(&WorkerMetrics) -> u64| -> u64 { workers.iter().map(f).sum() };
    scalar(
        out,
        "gatewayd_rest_bans_total",
        "counter",
        "Bot tokens banned for a while for sending on after 429s.",
        sum(|w| w.rest_bans.load(Relaxed)),
    );
    scalar(
        out,
        "gatewayd_rest_restrictions_total",
        "counter",
        "Bot tokens restricted for too many invalid requests (401, 403, 429) in 10 minutes.",
        sum(|w| w.rest_restrictions.load(Relaxed)),
    );
    scalar(
        out,
        "gatewayd_rest_address_restrictions_total",
        "counter",
        "Source addresses restricted for too many invalid requests (across their tokens) in 10 minutes.",
        sum(|w| w.rest_address_restrictions.load(Relaxed)),
    );
    scalar(
        out,
        "gatewayd_rest_address_refused_total",
        "counter",
        "REST requests answered 429 because their source address was restricted.",
        sum(|w| w.rest_address_refused.load(Relaxed)),
    );
    scalar(
        out,
        "gatewayd_chat_commits_total",
        "counter",
        "Actions the embedded chat service committed as events.",
        chat.committed.load(Relaxed),
    );
    scalar(
        out,
        "gatewayd_chat_commit_failures_total",
        "counter",
        "Actions answered 503 (or 500) because their commit did not reach the event stream.",
        chat.commit_failed.load(Relaxed),
    );
    scalar(
        out,
        "gatewayd_chat_history_messages",
        "gauge",
        "Messages the embedded chat services keep for reads and edits (the chat thread's window and each worker's, so a message can count twice).",
        chat.history_messages.load(Relaxed),
    );
    scalar(out, "gatewayd_chat_learn_dropped_total", "counter", "Messages of other sources the chat thread learnt for a worker whose inbox was full (that worker's bots cannot reply to or react to them).", chat.learn_dropped.load(Relaxed));
    scalar(out, "gatewayd_chat_tap_skipped_total", "counter", "Batches of other sources the chat service was too busy to read into its history (those messages cannot be replied to or reacted to).", ingest.tap_skipped.load(Relaxed));
    scalar(
        out,
        "gatewayd_chat_history_bytes",
        "gauge",
        "Bytes of message JSON in that history (bounded by chat::history::MAX_BYTES).",
        chat.history_bytes.load(Relaxed),
    );
    family(
        out,
        "gatewayd_chat_upstream_failures_total",
        "counter",
        "Calls to the upstream chat service with no answer to relay, by reason (malformed: 502; the others 503).",
    );
    for (i, reason) in REASONS.iter().enumerate() {
        let v = chat.upstream.failures[i].load(Relaxed);
        let _ = writeln!(
            out,
            "gatewayd_chat_upstream_failures_total{{reason=\"{reason}\"}} {v}"
        );
    }
    scalar(
        out,
        "gatewayd_chat_upstream_relayed_total",
        "counter",
        "Answers of the upstream chat service relayed to bots as they came (status and body).",
        chat.upstream.relayed.load(Relaxed),
    );
}

/// The counters thread (`link::counters`); all zero when `rest.redis_url` is empty.
pub fn render_redis(r: &crate::link::counters::RedisStats, out: &mut String) {
    let fams: [(&str, &str, &str, u64); 6] = [
        ("gatewayd_rest_redis_up", "gauge", "1 while the last round with Redis succeeded (REST limits shared between nodes); 0 when it failed, or no Redis is configured.", r.up.load(Relaxed)),
        ("gatewayd_rest_redis_nodes", "gauge", "Nodes sharing the REST limits as last known (live heartbeats in Redis, or rest.nodes): N of the fallback share.", r.nodes.load(Relaxed)),
        ("gatewayd_rest_redis_rounds_total", "counter", "Rounds with Redis that succeeded (pushed this node's admissions, read the others').", r.rounds.load(Relaxed)),
        ("gatewayd_rest_redis_errors_total", "counter", "Redis connects and rounds that failed or passed rest.redis_timeout_ms.", r.errors.load(Relaxed)),
        ("gatewayd_rest_redis_fallback_total", "counter", "Times the node fell back to local REST limits (its 1/N share) because Redis was unreachable.", r.fallbacks.load(Relaxed)),
        ("gatewayd_rest_redis_unshared_total", "counter", "Admissions not shared with the other nodes (the counters queue or table was full).", r.unshared.load(Relaxed) + r.untracked.load(Relaxed)),
    ];
    for (name, kind, help, v) in fams {
        scalar(out, name, kind, help, v);
    }
}

/// The interactions of the embedded chat service (node-wide).
pub fn render_interactions(
    st: &crate::chat::interactions::InteractionStats,
    ep: &crate::chat::endpoint::EndpointStats,
    out: &mut String,
) {
    let fams: [(&str, &str, u64); 10] = [
        ("gatewayd_interactions_opened_total", "Interactions delivered to their bot (INTERACTION_CREATE), each with its 3-second timer.", st.opened.load(Relaxed)),
        ("gatewayd_interactions_refused_total", "Interactions not opened (application not installed or not entitled, unknown command, registry or table full): the person saw the failure at once.", st.refused.load(Relaxed)),
        ("gatewayd_interactions_acks_total", "First responses (callbacks) within 3 s.", st.acked.load(Relaxed)),
        ("gatewayd_interactions_deferrals_total", "First responses that deferred (types 5 and 6).", st.deferred.load(Relaxed)),
        ("gatewayd_interactions_misses_total", "Interactions with no first response within 3 s: the person saw the failure.", st.missed.load(Relaxed)),
        ("gatewayd_interactions_late_callbacks_total", "Callbacks after the 3 s (answered 404 code 10062).", st.late.load(Relaxed)),
        ("gatewayd_interactions_double_acks_total", "Second first-responses (answered 400 code 40060).", st.double.load(Relaxed)),
        ("gatewayd_interactions_followups_total", "Follow-up messages sent with an interaction's token.", st.followups.load(Relaxed)),
        ("gatewayd_interactions_answered_elsewhere_total", "Interactions this node opened whose first response was taken on another node (their miss lost the settle).", st.answered_elsewhere.load(Relaxed)),
        ("gatewayd_interactions_store_failures_total", "Registry calls for the interactions' shared state that failed (decided from memory where possible, else 503 or refused).", st.store_failures.load(Relaxed)),
    ];
    for (name, help, v) in fams {
        scalar(out, name, "counter", help, v);
    }
    family(
        out,
        "gatewayd_interactions_endpoint_total",
        "counter",
        "Interactions POSTed to HTTP interactions endpoints, by outcome: inline (answered in the POST), callback (202/204: answered on the callback route), retry (a second attempt made), failed (no response after the retry), refused_app_queue_full and refused_queue_full (not queued: the application's queue or the whole queue was full; the person saw the failure at once), expired (not called: the window passed while it waited in the queue).",
    );
    for (outcome, v) in [
        ("inline", &ep.inline),
        ("callback", &ep.deferred_to_callback),
        ("retry", &ep.retries),
        ("failed", &ep.failed),
        ("refused_app_queue_full", &ep.refused_app_queue_full),
        ("refused_queue_full", &ep.refused_queue_full),
        ("expired", &ep.expired),
    ] {
        let _ = writeln!(
            out,
            "gatewayd_interactions_endpoint_total{{outcome=\"{outcome}\"}} {}",
            v.load(Relaxed)
        );
    }
    scalar(
        out,
        "gatewayd_interactions_endpoint_queued",
        "gauge",
        "Interactions waiting for their endpoint call (at most 1,024; 64 per application).",
        ep.queued.load(Relaxed),
    );
    scalar(
        out,
        "gatewayd_interactions_endpoint_in_flight",
        "gauge",
        "Calls to interactions endpoints in flight (at most 64; 4 per application).",
        ep.in_flight.load(Relaxed),
    );
    st.ack_latency.render(
        "gatewayd_interaction_ack_seconds",
        "Time from an interaction's opening to its first response.",
        out,
    );
}

/// The egress's outcomes (ADR-11): every outbound call to a bot-supplied
/// URL, by how it ended (an HTTP status class, or why it gave none).
pub fn render_egress(e: &crate::egress::EgressStats, out: &mut String) {
    let _ = writeln!(
        out,
        "# HELP gatewayd_egress_requests_total Outbound calls to bot-supplied URLs through the egress, by outcome: \
status_2xx..status_5xx (answered), or the refusal or failure (refused_address, dns_failed, timeout, too_large, ...).\n\
# TYPE gatewayd_egress_requests_total counter"
    );
    for (outcome, n) in e.outcomes() {
        let _ = writeln!(
            out,
            "gatewayd_egress_requests_total{{outcome=\"{outcome}\"}} {n}"
        );
    }
}

/// The developer portal's counters (docs/portal.md), and how many
/// applications hold a slot of the per-application table.
pub fn render_portal(
    p: &crate::portal::PortalStats,
    apps: &crate::worker::app_stats::AppTable,
    out: &mut String,
) {
    let _ = writeln!(
        out,
        "# HELP gatewayd_portal_signins_total Developer portal sign-ins, by outcome (ok, bad_token: a wrong bot token or a developer name and password that do not match, refused: over the flood limit).\n\
# TYPE gatewayd_portal_signins_total counter\n\
gatewayd_portal_signins_total{{outcome=\"ok\"}} {}\n\
gatewayd_portal_signins_total{{outcome=\"bad_token\"}} {}\n\
gatewayd_portal_signins_total{{outcome=\"refused\"}} {}",
        p.signins.load(Relaxed),
        p.signins_failed.load(Relaxed),
        p.signins_refused.load(Relaxed)
    );
    let mut one = |name: &str, kind: &str, help: &str, v: u64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
        );
    };
    one(
        "gatewayd_portal_requests_total",
        "counter",
        "Requests to the developer portal.",
        p.requests.load(Relaxed),
    );
    one(
        "gatewayd_portal_csrf_refused_total",
        "counter",
        "Portal POSTs refused: missing or wrong CSRF token, or a foreign Origin.",
        p.csrf_refused.load(Relaxed),
    );
    one(
        "gatewayd_portal_bad_sessions_total",
        "counter",
        "Portal requests with an unknown, forged or expired session cookie.",
        p.bad_sessions.load(Relaxed),
    );
    one(
        "gatewayd_portal_busy_total",
        "counter",
        "Portal connections answered 503 because every handler was busy.",
        p.busy.load(Relaxed),
    );
    one(
        "gatewayd_portal_sessions",
        "gauge",
        "Signed-in portal sessions (as of the last sign-in).",
        p.sessions.load(Relaxed),
    );
    one(
        "gatewayd_portal_cluster_asks_total",
        "counter",
        "Other nodes asked on the cluster link for an application's figures (at most one per node and application a second).",
        p.cluster_asks.load(Relaxed),
    );
    one(
        "gatewayd_portal_cluster_silent_total",
        "counter",
        "Of those, nodes that gave no figures within the 300 ms deadline (named on the page as not answering).",
        p.cluster_silent.load(Relaxed),
    );
    one(
        "gatewayd_portal_cluster_cached_total",
        "counter",
        "Health polls answered with the other nodes' figures from the one-second cache.",
        p.cluster_cached.load(Relaxed),
    );
    one(
        "gatewayd_app_stats_untracked_total",
        "counter",
        "Per-application updates not counted: the application table (4,096) was full.",
        apps.untracked.load(Relaxed),
    );
}
