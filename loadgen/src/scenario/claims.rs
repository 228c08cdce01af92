//! Figures and claims every scenario reports the same way: the fleet's
//! counters, the node's own counters, the stream-integrity claims
//! (entitlement, contiguity), the delivery-latency claims and the
//! time-back figures of the scenarios that end a node.

use super::opts::Common;
use crate::nodes::Metrics;
use crate::report::Report;
use crate::session::Counters;

pub(super) fn integrity_claims(rep: &mut Report, c: &Counters, first: Option<String>) {
    let viol = c.entitlement_violations + c.content_violations;
    rep.claim(
        "every event is one the session is entitled to",
        viol == 0,
        "0 entitlement or content violations",
        &match first {
            Some(f) if viol > 0 => format!("{viol} violations; first: {f}"),
            _ => format!(
                "{} entitlement, {} content violations",
                c.entitlement_violations, c.content_violations
            ),
        },
    );
    rep.claim(
        "streams are contiguous",
        c.gaps == 0 && c.duplicates == 0 && c.event_repeats == 0,
        "0 gaps, 0 duplicates (gaps only across op 9), no event twice or out of order",
        &format!(
            "{} missing seq, {} duplicates, {} repeated or reordered events",
            c.gaps, c.duplicates, c.event_repeats
        ),
    );
}

pub(super) fn counter_figures(rep: &mut Report, group: &str, c: &Counters) {
    for (name, v) in [
        ("connects", c.connects),
        ("connect errors", c.connect_errors),
        ("identifies sent", c.identifies),
        ("READY", c.readies),
        ("resumes sent", c.resumes_sent),
        ("RESUMED", c.resumed),
        ("op 9 (resumable)", c.invalid_resumable),
        ("op 9 (new session)", c.invalid_new_session),
        ("op 7 reconnects", c.reconnects_asked),
        ("MESSAGE_CREATE received", c.deliveries),
        ("closes 4000 received", c.closes[0]),
        ("fatal closes", c.fatal),
        ("zombie connections", c.zombies),
        ("heartbeat ACKs", c.hb_acks),
        ("gaps (missing seq)", c.gaps),
        ("duplicates (seq)", c.duplicates),
        ("repeated or reordered events", c.event_repeats),
    ] {
        rep.figure(group, name, v as f64, "");
    }
}

/// What the node itself counted (its /metrics at the end of a phase).
pub(super) fn node_figures(rep: &mut Report, group: &str, m: &Metrics) {
    for (name, fam) in [
        ("node: records in", "gatewayd_ingest_records_total"),
        ("node: records rejected", "gatewayd_ingest_rejected_total"),
        (
            "node: batches dropped",
            "gatewayd_ingest_dropped_batches_total",
        ),
        ("node: deliveries queued", "gatewayd_deliveries_total"),
        ("node: drops (all reasons)", "gatewayd_drops_total"),
        (
            "node: slow-consumer closes",
            "gatewayd_slow_consumer_closes_total",
        ),
        (
            "node: handshake timeouts",
            "gatewayd_handshake_timeouts_total",
        ),
        ("node: identifies", "gatewayd_identifies_total"),
        ("node: resumes", "gatewayd_resumes_total"),
    ] {
        rep.figure(group, name, m.sum(fam), "");
    }
}

pub(super) fn ms(us: u64) -> f64 {
    us as f64 / 1000.0
}

/// "`name` p50", "`name` p99" and "`name` max" of a histogram of µs, in
/// seconds (how long sessions took to come back after their node ended).
pub(super) fn time_back_figures(
    rep: &mut Report,
    group: &str,
    name: &str,
    back: &hdrhistogram::Histogram<u64>,
) {
    for (q, v) in [
        ("p50", back.value_at_quantile(0.5)),
        ("p99", back.value_at_quantile(0.99)),
        ("max", back.max()),
    ] {
        rep.figure(group, &format!("{name} {q}"), ms(v) / 1000.0, "s");
    }
}

pub(super) fn latency_claims(rep: &mut Report, c: &Common, lat: &hdrhistogram::Histogram<u64>) {
    let (p50, p99) = (
        ms(lat.value_at_quantile(0.5)),
        ms(lat.value_at_quantile(0.99)),
    );
    rep.claim(
        "delivery latency p50",
        !lat.is_empty() && p50 <= c.max_p50_ms,
        &format!("<= {} ms", c.max_p50_ms),
        &format!("{p50:.2} ms over {} deliveries", lat.len()),
    );
    rep.claim(
        "delivery latency p99",
        !lat.is_empty() && p99 <= c.max_p99_ms,
        &format!("<= {} ms", c.max_p99_ms),
        &format!("{p99:.2} ms"),
    );
}
