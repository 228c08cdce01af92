//! The Markdown table of one payload size: per variant, sender CPU per send
//! and per frame (medians and p10-p90 over rounds), paired ratios against
//! the baseline, with and without ksoftirqd, enters per round, EAGAIN and
//! short sends, and ZC notifications.

use crate::round::Round;
use crate::variant::Variant;

fn quantile(sorted: &[f64], q: f64) -> f64 {
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    quantile(&v, 0.5)
}

pub fn report(vs: &[Variant], rounds: &[Vec<Round>], n: usize) {
    println!(
        "| variant | ring flags | k | ns/send | ns/frame | ns/frame p10–p90 | ratio | ns/frame +ksoftirqd | ratio +ksoftirqd | enters/round | EAGAIN / short | ZC notifs (copied); CPU until the send CQEs |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let frames = |v: &Variant| (n * v.k) as f64;
    let own = |v: &Variant, r: &Round| r.cpu_ns as f64 / frames(v);
    let all = |v: &Variant, r: &Round| (r.cpu_ns + r.softirqd_ns) as f64 / frames(v);
    for (v, rs) in vs.iter().zip(rounds) {
        let mut pf: Vec<f64> = rs.iter().map(|r| own(v, r)).collect();
        pf.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let per_send = median(rs.iter().map(|r| r.cpu_ns as f64 / n as f64).collect());
        // Paired: each round against the baseline's round of the same
        // interleaving pass.
        let paired = |m: &dyn Fn(&Variant, &Round) -> f64| {
            median(
                rs.iter()
                    .zip(&rounds[0])
                    .map(|(r, b)| m(v, r) / m(&vs[0], b))
                    .collect(),
            )
        };
        let sum = |g: fn(&Round) -> u64| rs.iter().map(g).sum::<u64>();
        let zc = if v.method.zc() {
            let sends_only = median(
                rs.iter()
                    .map(|r| r.cpu_sends_ns as f64 / frames(v))
                    .collect(),
            );
            format!(
                "{} ({}); {sends_only:.0} ns/frame before them",
                sum(|r| r.notifs),
                sum(|r| r.copied)
            )
        } else {
            "–".into()
        };
        println!(
            "| {} | {} | {} | {:.0} | {:.0} | {:.0}–{:.0} | {:.2} | {:.0} | {:.2} | {:.1} | {} / {} | {} |",
            v.method.name(),
            v.flags.name(),
            v.k,
            per_send,
            quantile(&pf, 0.5),
            quantile(&pf, 0.1),
            quantile(&pf, 0.9),
            paired(&own),
            median(rs.iter().map(|r| all(v, r)).collect()),
            paired(&all),
            sum(|r| r.enters) as f64 / rs.len() as f64,
            sum(|r| r.eagain),
            sum(|r| r.short),
            zc,
        );
    }
}
