//! `gatewayd stats`: a live one-screen view of a running node, read from its
//! admin port's `/metrics` (Prometheus text). Rates come from two scrapes an
//! interval apart; the screen is cleared and redrawn every interval, or
//! printed once with `--once`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct StatsArgs {
    /// The node's admin address (its `admin_addr`).
    #[arg(long, default_value = "127.0.0.1:9090")]
    pub admin: String,
    /// Time between scrapes; rates are over it (e.g. 1s, 500ms, 2m).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub interval: Duration,
    /// Print one view (two scrapes an interval apart) and exit.
    #[arg(long)]
    pub once: bool,
}

pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("not a duration: {s:?} (e.g. 1s, 500ms, 2m)"))?;
    let secs = match unit.trim() {
        "" | "s" => n,
        "ms" => n / 1000.0,
        "m" => n * 60.0,
        other => return Err(format!("unknown unit {other:?} in {s:?} (ms, s or m)")),
    };
    if !(secs > 0.0 && secs.is_finite()) {
        return Err(format!("the interval must be positive: {s:?}"));
    }
    Ok(Duration::from_secs_f64(secs))
}

pub use promtext::Sample;
use promtext::SampleSet;

/// Parse Prometheus text exposition (comments skipped). Errors name the line.
pub fn parse(text: &str) -> Result<Vec<Sample>, String> {
    promtext::parse(text).map_err(|e| e.to_string())
}

/// A scrape and when it was taken.
pub struct Scrape {
    pub at: Instant,
    pub samples: Vec<Sample>,
}

impl Scrape {
    /// Sum of a family's samples (None: not exposed).
    pub fn sum(&self, name: &str) -> Option<f64> {
        self.samples.try_sum(name)
    }

    /// Sum per value of `label`.
    pub fn by(&self, name: &str, label: &str) -> BTreeMap<String, f64> {
        self.samples.by_label(name, label)
    }

    /// Sum of the samples with every `label` = `value` of `pairs`.
    pub fn with(&self, name: &str, pairs: &[(&str, &str)]) -> f64 {
        self.samples.sum_with(name, pairs)
    }

    /// Cumulative histogram buckets (upper bound, count), sorted.
    fn buckets(&self, name: &str) -> Vec<(f64, f64)> {
        self.samples.buckets(name)
    }
}

/// The `q` quantile's bucket upper bound: over the observations between
/// the two scrapes when there were any, else over the node's lifetime.
/// None when nothing was observed.
pub fn quantile(prev: &Scrape, cur: &Scrape, name: &str, q: f64) -> Option<f64> {
    let now = cur.buckets(name);
    let before = prev.buckets(name);
    let delta: Vec<(f64, f64)> = now
        .iter()
        .map(|(le, c)| {
            let p = before
                .iter()
                .find(|(l, _)| l == le)
                .map_or(0.0, |(_, c)| *c);
            (*le, c - p)
        })
        .collect();
    let pick = |b: &[(f64, f64)]| -> Option<f64> {
        let total = b.last()?.1;
        if total <= 0.0 {
            return None;
        }
        b.iter().find(|(_, c)| *c >= q * total).map(|(le, _)| *le)
    };
    pick(&delta).or_else(|| pick(&now))
}

fn resolve(admin: &str) -> Result<Vec<SocketAddr>, String> {
    let addrs: Vec<SocketAddr> = admin
        .to_socket_addrs()
        .map_err(|e| format!("--admin {admin:?}: {e} (expected HOST:PORT, e.g. 127.0.0.1:9090)"))?
        .collect();
    if addrs.is_empty() {
        return Err(format!("--admin {admin:?}: no address"));
    }
    Ok(addrs)
}

/// GET /metrics from the admin port.
pub fn scrape(admin: &str) -> Result<Scrape, String> {
    let unreachable = |e: &dyn std::fmt::Display| {
        format!(
            "cannot reach the admin port at {admin} (GET /metrics): {e}. Is the node running? \
             Point --admin at its admin_addr (see <data dir>/gatewayd.addrs)."
        )
    };
    let mut last_err = None;
    let mut stream = None;
    for addr in resolve(admin)? {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last_err = Some(e),
        }
    }
    let mut s = match stream {
        Some(s) => s,
        None => return Err(unreachable(&last_err.expect("one address tried"))),
    };
    let io = |e: std::io::Error| unreachable(&e);
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(io)?;
    s.set_write_timeout(Some(Duration::from_secs(5)))
        .map_err(io)?;
    s.write_all(
        format!("GET /metrics HTTP/1.1\r\nHost: {admin}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .map_err(io)?;
    let mut buf = Vec::with_capacity(32 * 1024);
    s.read_to_end(&mut buf).map_err(io)?;
    let at = Instant::now();
    let text = String::from_utf8_lossy(&buf);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{admin}: not an HTTP response (is it the admin port?)"))?;
    let status = head.split(' ').nth(1).unwrap_or("");
    if status != "200" {
        return Err(format!(
            "{admin}: GET /metrics answered {} (is it the admin port?)",
            head.lines().next().unwrap_or("")
        ));
    }
    let samples = parse(body).map_err(|e| format!("{admin}: unreadable /metrics: {e}"))?;
    Ok(Scrape { at, samples })
}

fn fmt_secs(s: f64) -> String {
    if s.is_infinite() {
        ">60 s".into()
    } else if s < 1.0 {
        format!("<={} ms", (s * 1000.0).round())
    } else {
        format!("<={s} s")
    }
}

fn fmt_bytes(b: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn fmt_uptime(s: f64) -> String {
    let s = s as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// The screen for two scrapes (`prev` before `cur`).
pub fn render(admin: &str, prev: &Scrape, cur: &Scrape) -> String {
    let dt = cur
        .at
        .saturating_duration_since(prev.at)
        .as_secs_f64()
        .max(1e-3);
    let rate = |name: &str| -> f64 {
        match (cur.sum(name), prev.sum(name)) {
            (Some(c), Some(p)) => ((c - p) / dt).max(0.0),
            _ => 0.0,
        }
    };
    let mut o = String::new();
    let _ = write!(o, "gatewayd stats  {admin}");
    if let Some(up) = cur.sum("gatewayd_uptime_seconds") {
        let _ = write!(o, "  up {}", fmt_uptime(up));
    }
    if let Some(rss) = cur.sum("process_resident_memory_bytes") {
        let _ = write!(o, "  rss {}", fmt_bytes(rss));
    }
    if cur.sum("process_cpu_seconds_total").is_some() {
        let _ = write!(
            o,
            "  cpu {:.1}% of a core",
            rate("process_cpu_seconds_total") * 100.0
        );
    }
    let _ = writeln!(o, "  (rates over {dt:.1} s)");
    let _ = writeln!(o);

    // Sessions, ring fill, CPU and leases per worker.
    let states = cur
        .samples
        .iter()
        .filter(|s| s.name == "gatewayd_sessions_by_state");
    let mut workers: BTreeMap<u64, BTreeMap<String, f64>> = BTreeMap::new();
    for s in states {
        if let (Some(w), Some(st)) = (s.label("worker"), s.label("state")) {
            if let Ok(w) = w.parse() {
                *workers.entry(w).or_default().entry(st.into()).or_default() += s.value;
            }
        }
    }
    if workers.is_empty() {
        // An older node: the per-state gauges under their own names.
        for (name, st) in [
            ("gatewayd_sessions", "connected"),
            ("gatewayd_sessions_detached", "detached"),
            ("gatewayd_sessions_degraded", "degraded"),
        ] {
            for (w, v) in cur.by(name, "worker") {
                if let Ok(w) = w.parse() {
                    workers.entry(w).or_default().insert(st.into(), v);
                }
            }
        }
    }
    let _ = writeln!(
        o,
        "{:<8} {:>10} {:>9} {:>9} {:>11}  {:>22}  {:>6}  {:>13}",
        "worker",
        "connected",
        "detached",
        "degraded",
        "handshaking",
        "ring used/capacity",
        "busy",
        "leases/lapsed"
    );
    let mut tot = [0.0f64; 8];
    for (w, st) in &workers {
        let ws = w.to_string();
        let get = |k: &str| st.get(k).copied().unwrap_or(0.0);
        let used = cur.with("gatewayd_ring_chunks_used", &[("worker", &ws)]);
        let cap = cur.with("gatewayd_ring_chunks_capacity", &[("worker", &ws)]);
        let busy = (cur.with("gatewayd_worker_busy_seconds_total", &[("worker", &ws)])
            - prev.with("gatewayd_worker_busy_seconds_total", &[("worker", &ws)]))
            / dt;
        let held = cur.with("gatewayd_leases", &[("worker", &ws), ("state", "held")]);
        let lapsed = cur.with("gatewayd_leases", &[("worker", &ws), ("state", "lapsed")]);
        let row = [
            get("connected"),
            get("detached"),
            get("degraded"),
            get("handshaking"),
            used,
            cap,
            busy.max(0.0),
            held,
        ];
        for (t, v) in tot.iter_mut().zip(row) {
            *t += v;
        }
        let fill = if cap > 0.0 { used / cap * 100.0 } else { 0.0 };
        let _ = writeln!(
            o,
            "{:<8} {:>10} {:>9} {:>9} {:>11}  {:>22}  {:>5.1}%  {:>13}",
            w,
            row[0],
            row[1],
            row[2],
            row[3],
            format!("{used}/{cap} ({fill:.1}%)"),
            row[6] * 100.0,
            format!("{held}/{lapsed}"),
        );
    }
    if workers.len() > 1 {
        let fill = if tot[5] > 0.0 {
            tot[4] / tot[5] * 100.0
        } else {
            0.0
        };
        let _ = writeln!(
            o,
            "{:<8} {:>10} {:>9} {:>9} {:>11}  {:>22}  {:>5.1}%",
            "all",
            tot[0],
            tot[1],
            tot[2],
            tot[3],
            format!("{}/{} ({fill:.1}%)", tot[4], tot[5]),
            tot[6] * 100.0,
        );
    }
    let _ = writeln!(o);

    let _ = writeln!(
        o,
        "events in   {:>10.1}/s   deliveries {:>10.1}/s   sent {}/s   (worker events {:.1}/s: each worker gets every event)",
        rate("gatewayd_ingest_records_total"),
        rate("gatewayd_deliveries_total"),
        fmt_bytes(rate("gatewayd_sent_bytes_total")),
        rate("gatewayd_events_in_total"),
    );
    let _ = writeln!(
        o,
        "identifies  {:>10.1}/s   refused {:>6.1}/s   resumes {:>6.1}/s   refused {:>6.1}/s",
        rate("gatewayd_identifies_total"),
        rate("gatewayd_identifies_refused_total"),
        rate("gatewayd_resumes_total"),
        rate("gatewayd_resumes_refused_total"),
    );
    // REST: requests by status class per second, 429s, and the p99 of writes.
    let by_status = |sc: &Scrape| sc.by("gatewayd_rest_responses_total", "status");
    let (now_s, before_s) = (by_status(cur), by_status(prev));
    let class_rate = |first: char| -> f64 {
        let sum = |m: &BTreeMap<String, f64>| -> f64 {
            m.iter()
                .filter(|(k, _)| k.starts_with(first))
                .map(|(_, v)| v)
                .sum()
        };
        ((sum(&now_s) - sum(&before_s)) / dt).max(0.0)
    };
    let rest_p99 = quantile(prev, cur, "gatewayd_rest_request_duration_seconds", 0.99)
        .map_or("-".to_string(), fmt_secs);
    let _ = writeln!(
        o,
        "rest        {:>10.1}/s   2xx {:>8.1}/s   4xx {:>6.1}/s   429 {:>6.1}/s   5xx {:>6.1}/s   p99 {}   bans {}",
        class_rate('2') + class_rate('4') + class_rate('5'),
        class_rate('2'),
        class_rate('4'),
        rate("gatewayd_rest_limited_total"),
        class_rate('5'),
        rest_p99,
        cur.sum("gatewayd_rest_bans_total").unwrap_or(0.0),
    );
    let p99 = |name: &str| quantile(prev, cur, name, 0.99).map_or("-".to_string(), fmt_secs);
    let (opened, acked) = (
        rate("gatewayd_interactions_opened_total"),
        rate("gatewayd_interactions_acks_total"),
    );
    let _ = writeln!(
        o,
        "interactions {:>9.1}/s   acked {:>6.1}/s   missed {:>6.1}/s   deferred {:>6.1}/s   ack p99 {}   refused {:>5.1}/s",
        opened,
        acked,
        rate("gatewayd_interactions_misses_total"),
        rate("gatewayd_interactions_deferrals_total"),
        p99("gatewayd_interaction_ack_seconds"),
        rate("gatewayd_interactions_refused_total"),
    );
    let brownout = cur.sum("gatewayd_registry_brownout").unwrap_or(0.0) > 0.0;
    let _ = writeln!(
        o,
        "registry    call p99 {}  ({:.1} calls/s)   revocation apply p99 {}   brownout {}",
        p99("gatewayd_registry_call_seconds"),
        rate("gatewayd_registry_call_seconds_count"),
        p99("gatewayd_revocation_apply_seconds"),
        if brownout { "YES" } else { "no" },
    );
    let mut refusals: Vec<String> = cur
        .by("gatewayd_identify_refusals_total", "reason")
        .into_iter()
        .filter(|(_, v)| *v > 0.0)
        .map(|(r, v)| format!("{r} {v}"))
        .collect();
    if refusals.is_empty() {
        refusals.push("none".into());
    }
    let _ = writeln!(o, "refusals    {}", refusals.join("  "));
    let _ = writeln!(o);

    let now = cur.by("gatewayd_drops_total", "reason");
    let before = prev.by("gatewayd_drops_total", "reason");
    let _ = writeln!(o, "drops (total, per second)");
    if now.is_empty() {
        let _ = writeln!(o, "  (not exposed by this node)");
    }
    for (reason, v) in &now {
        let r = (v - before.get(reason).copied().unwrap_or(0.0)) / dt;
        let _ = writeln!(o, "  {reason:<22} {v:>12}  {:>8.1}/s", r.max(0.0));
    }
    o
}

pub fn run(args: StatsArgs) -> Result<(), String> {
    let mut prev = scrape(&args.admin)?;
    loop {
        std::thread::sleep(args.interval);
        let cur = match scrape(&args.admin) {
            Ok(c) => c,
            Err(e) if !args.once => {
                // The node may be restarting: say so and keep trying.
                print!("\x1b[2J\x1b[H{e}\n(retrying every {:?})\n", args.interval);
                let _ = std::io::stdout().flush();
                continue;
            }
            Err(e) => return Err(e),
        };
        let screen = render(&args.admin, &prev, &cur);
        let mut stdout = std::io::stdout().lock();
        let written = if args.once {
            stdout.write_all(screen.as_bytes())
        } else {
            // Clear the screen, home the cursor, redraw.
            stdout
                .write_all(b"\x1b[2J\x1b[H")
                .and_then(|_| stdout.write_all(screen.as_bytes()))
        };
        if written.and_then(|_| stdout.flush()).is_err() || args.once {
            return Ok(());
        }
        prev = cur;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1s").unwrap(), Duration::from_secs(1));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("1h").is_err());
        assert!(parse_duration("x").is_err());
    }

    #[test]
    fn parses_samples_and_quantiles() {
        let text = "# HELP a_seconds x\n# TYPE a_seconds histogram\n\
                    a_seconds_bucket{le=\"0.001\"} 1\na_seconds_bucket{le=\"0.01\"} 99\n\
                    a_seconds_bucket{le=\"+Inf\"} 100\na_seconds_count 100\n\
                    b_total{worker=\"0\",reason=\"a \\\"q\\\", b\"} 3\nc 1.5e3\n";
        let s = parse(text).unwrap();
        assert_eq!(s.len(), 6);
        assert_eq!(s[4].label("reason"), Some("a \"q\", b"));
        assert_eq!(s[5].value, 1500.0);
        let empty = Scrape {
            at: Instant::now(),
            samples: vec![],
        };
        let cur = Scrape {
            at: Instant::now(),
            samples: s,
        };
        assert_eq!(quantile(&empty, &cur, "a_seconds", 0.5), Some(0.01));
        assert_eq!(
            quantile(&empty, &cur, "a_seconds", 0.999),
            Some(f64::INFINITY)
        );
        assert_eq!(quantile(&cur, &cur, "a_seconds", 0.5), Some(0.01));
        assert!(parse("bad{le=\"1\" 2").is_err());
    }

    #[test]
    fn unreachable_admin_port_is_a_clear_error() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let e = scrape(&format!("127.0.0.1:{port}")).err().unwrap();
        assert!(e.contains("cannot reach the admin port"), "{e}");
    }
}
