//! A node's `/metrics`, parsed into samples, and sums over them.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use super::http::http_get;
use super::node::Node;

/// (name, labels, value) of one sample line.
pub type Samples = Vec<(String, BTreeMap<String, String>, f64)>;

/// The sum of metric `name` over all its series, scraped now.
pub fn metric(node: &Node, name: &str) -> f64 {
    metric_sum(&metrics(node.admin), name, &[])
}

/// The values of metric `name`'s series, in exposition order.
pub fn metric_values(samples: &Samples, name: &str) -> Vec<f64> {
    samples
        .iter()
        .filter(|(n, _, _)| n == name)
        .map(|(_, _, v)| *v)
        .collect()
}

/// `GET /metrics` as (name, labels, value) samples (the project's one
/// parser, `promtext`, strict: a malformed line panics).
pub fn metrics(admin: SocketAddr) -> Samples {
    let (status, body) = http_get(admin, "/metrics").expect("GET /metrics");
    assert_eq!(status, 200, "GET /metrics: {body}");
    promtext::parse(&body)
        .unwrap_or_else(|e| panic!("/metrics: {e}"))
        .into_iter()
        .map(|s| {
            let labels = s.label_map();
            (s.name, labels, s.value)
        })
        .collect()
}

/// Sum of a metric over the samples whose labels include all of `with`.
pub fn metric_sum(samples: &Samples, name: &str, with: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|(n, l, _)| {
            n == name
                && with
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, _, v)| v)
        .sum()
}

/// A metric per `worker` label.
pub fn metric_by_worker(samples: &Samples, name: &str) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    for (n, l, v) in samples {
        if n == name {
            if let Some(w) = l.get("worker") {
                *m.entry(w.clone()).or_insert(0.0) += v;
            }
        }
    }
    m
}

/// Percentile (nearest rank) of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}
