//! Tests of the report: JSON round trip (NaN as null), the HTML page
//! (SVGs present, every field escaped, empty and degenerate data), the
//! text summary's bounds, the percentile curve, ticks and UTC times.

use super::format::utc_string;
use super::svg::{nice_ticks, tick_label};
use super::*;
use hdrhistogram::Histogram;

fn hist() -> Histogram<u64> {
    let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).unwrap();
    // A long tail: mostly ~1 ms, some 10 ms, a few 100 ms, one 2 s.
    for i in 0..100_000u64 {
        let v = match i % 1000 {
            0 => 100_000 + i,
            1..=9 => 10_000 + i % 500,
            _ => 800 + i % 400,
        };
        h.record(v).unwrap();
    }
    h.record(2_000_000).unwrap();
    h
}

fn sample() -> Report {
    let mut r = Report {
        scenario: "storm".into(),
        command: "loadgen scenario storm --sessions 40000".into(),
        started_unix_ms: 1_700_000_000_000,
        duration_s: 93.25,
        host: "2 cores, kernel 6.18".into(),
        passed: false,
        ..Report::default()
    };
    r.claim("all sessions back", true, "100 %", "100 %");
    r.claim("registry p99 during storm", false, "< 50 ms", "72.1 ms");
    r.figure("throttle on", "time until all back p99", 12.5, "s");
    r.figure("throttle off", "time until all back p99", 31.25, "s");
    r.figure("throttle on", "identifies refused", 0.0, "");
    r.figure("throttle off", "identifies refused", 1234.0, "");
    r.add_histogram("steady", &hist());
    let mut h2 = Histogram::<u64>::new(3).unwrap();
    for v in [500u64, 700, 900, 40_000] {
        h2.record(v).unwrap();
    }
    r.add_histogram("storm", &h2);
    r.series.push(Series {
        name: "sessions connected".into(),
        unit: "sessions".into(),
        points: (0..50).map(|i| (i as f64, (i * 800) as f64)).collect(),
    });
    r.series.push(Series {
        name: "gatewayd-a RSS".into(),
        unit: "MiB".into(),
        points: (0..50)
            .map(|i| (i as f64 * 2.0, 100.0 + i as f64))
            .collect(),
    });
    r.series.push(Series {
        name: "gatewayd-b RSS".into(),
        unit: "MiB".into(),
        points: (0..50)
            .map(|i| (i as f64 * 2.0, 90.0 + 0.5 * i as f64))
            .collect(),
    });
    r.notes
        .push("killed gatewayd-a at 30 s <script>alert(1)</script>".into());
    r
}

#[test]
fn json_round_trip() {
    let r = sample();
    let dir = std::env::temp_dir().join(format!("loadgen-report-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("r.json");
    r.write_json(&path).unwrap();
    let back = Report::read_json(&path).unwrap();
    assert_eq!(back, r);
    // Plain serde too.
    let text = std::fs::read_to_string(&path).unwrap();
    let back2: Report = serde_json::from_str(&text).unwrap();
    assert_eq!(back2, r);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn html_has_svgs_and_escapes() {
    let r = sample();
    let html = r.html();
    // Percentile plot + one chart for "sessions" + one for "MiB".
    assert_eq!(html.matches("<svg ").count(), 3, "{html}");
    assert_eq!(html.matches("</svg>").count(), 3);
    assert!(html.contains("Latency by percentile"));
    for label in ["50%", "90%", "99%", "99.9%", "99.99%"] {
        assert!(
            html.contains(&format!(">{label}</text>")),
            "missing x label {label}"
        );
    }
    assert!(html.contains("latency (ms)"));
    assert!(html.contains("seconds since start"));
    assert!(html.contains("gatewayd-a RSS") && html.contains("gatewayd-b RSS"));
    assert!(html.contains("<polyline"));
    // Escaping: the note's script never appears raw.
    assert!(!html.contains("<script"));
    assert!(html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
    // Self-contained: no external references.
    assert!(!html.contains("src="));
    assert!(!html.contains("href="));
    assert!(html.contains("FAIL"));
    assert!(html.contains("throttle on") && html.contains("throttle off"));
    // Writes to a file.
    let dir = std::env::temp_dir().join(format!("loadgen-report-html-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("r.html");
    r.write_html(&path).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), html);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn json_reads_non_finite_numbers_back_as_nan() {
    let mut r = Report {
        duration_s: f64::NAN,
        ..Report::default()
    };
    r.figure("", "ratio", f64::INFINITY, "");
    r.series.push(Series {
        name: "s".into(),
        unit: "u".into(),
        points: vec![(1.0, f64::NAN)],
    });
    let text = serde_json::to_string(&r).unwrap();
    let back: Report = serde_json::from_str(&text).unwrap();
    assert!(back.duration_s.is_nan());
    assert!(back.figures[0].value.is_nan());
    assert_eq!(back.series[0].points[0].0, 1.0);
    assert!(back.series[0].points[0].1.is_nan());
}

#[test]
fn html_escapes_every_field() {
    let mut r = Report {
        scenario: "<b>".into(),
        command: "a & b \"c\"".into(),
        host: "<i>".into(),
        ..Report::default()
    };
    r.claim("<c>", true, "<e>", "<m>");
    r.figure("<grp>", "<n>", 1.0, "<u>");
    r.series.push(Series {
        name: "<s>".into(),
        unit: "<su>".into(),
        points: vec![(0.0, 1.0)],
    });
    r.latency.push(LatencyPhase {
        phase: "<p>".into(),
        ..LatencyPhase::default()
    });
    let html = r.html();
    for raw in [
        "<b>", "<i>", "<c>", "<e>", "<m>", "<grp>", "<n>", "<u>", "<s>", "<su>", "<p>", "a & b",
    ] {
        assert!(!html.contains(raw), "unescaped {raw}");
    }
    assert!(html.contains("a &amp; b &quot;c&quot;"));
}

#[test]
fn html_handles_empty_and_degenerate_data() {
    let mut r = Report::default();
    r.series.push(Series {
        name: "flat".into(),
        unit: "x".into(),
        points: vec![(1.0, 5.0), (2.0, 5.0)],
    });
    r.series.push(Series {
        name: "empty".into(),
        unit: "y".into(),
        points: vec![],
    });
    r.series.push(Series {
        name: "nan".into(),
        unit: "z".into(),
        points: vec![(f64::NAN, 1.0), (1.0, f64::INFINITY)],
    });
    r.add_histogram("empty", &Histogram::<u64>::new(3).unwrap());
    let html = r.html();
    assert!(!html.contains("NaN") && !html.contains("inf"));
    assert_eq!(html.matches("<svg ").count(), 4);
    // Many series in one chart: the legend stays beside the plot.
    let mut r = Report::default();
    for i in 0..20 {
        r.series.push(Series {
            name: format!("s{i}"),
            unit: "u".into(),
            points: vec![(0.0, i as f64), (1.0, i as f64 + 1.0)],
        });
    }
    let html = r.html();
    assert_eq!(html.matches("<polyline").count(), 20);
    assert!(html.contains("… 9 more</text>"), "{html}");
}

#[test]
fn text_summary_fits_one_screen() {
    let r = sample();
    let s = r.text_summary();
    assert!(s.starts_with("== storm : FAIL"));
    assert!(s.contains("[FAIL] registry p99 during storm"));
    assert!(s.contains("p99.9"));
    let lines: Vec<&str> = s.lines().collect();
    assert!(lines.len() < 40, "{} lines", lines.len());
    assert!(lines.iter().all(|l| l.chars().count() <= 100));

    // Many of everything, long strings: still one screen, failures first.
    let mut big = sample();
    big.command = "x".repeat(500);
    for i in 0..100 {
        big.claim(&format!("claim {i}"), true, "e", "m");
        big.figure(
            "g",
            &format!("figure {i} {}", "y".repeat(200)),
            i as f64 * 1.5,
            "u",
        );
        big.add_histogram(&format!("phase {i}"), &hist());
        big.notes.push(format!("note {i}\nwith newline"));
    }
    big.claim("late failure", false, "e", "m");
    let s = big.text_summary();
    let lines: Vec<&str> = s.lines().collect();
    assert!(lines.len() < 40, "{} lines:\n{s}", lines.len());
    assert!(lines.iter().all(|l| l.chars().count() <= 100));
    assert!(s.contains("late failure"), "failed claims come first:\n{s}");
    assert!(s.contains("more"));
    for title in ["claims:", "figures:", "latency:", "notes:"] {
        assert!(lines.contains(&title), "{title} missing:\n{s}");
    }

    // Empty report.
    let s = Report::default().text_summary();
    assert!(s.lines().count() < 40);
}

#[test]
fn percentile_curve_is_monotone() {
    let mut r = Report::default();
    r.add_histogram("p", &hist());
    let l = &r.latency[0];
    assert_eq!(l.count, 100_001);
    assert!(
        l.curve.len() >= 50 && l.curve.len() <= 70,
        "{}",
        l.curve.len()
    );
    assert_eq!(l.curve[0].0, 0.0);
    assert!((l.curve.last().unwrap().0 - 99.999).abs() < 1e-9);
    for w in l.curve.windows(2) {
        assert!(w[1].0 > w[0].0, "percentiles increase: {:?}", w);
        assert!(w[1].1 >= w[0].1, "values never decrease: {:?}", w);
    }
    // Points are spread on a log scale of 1/(1-p): several beyond 99 %.
    assert!(l.curve.iter().filter(|(p, _)| *p > 99.0).count() >= 20);
    assert!(
        l.p50_us <= l.p90_us
            && l.p90_us <= l.p99_us
            && l.p99_us <= l.p999_us
            && l.p999_us <= l.max_us
    );
    assert!(l.p50_us >= 800 && l.p50_us < 1300, "{}", l.p50_us);
    assert!(l.max_us >= 2_000_000);
    // Replacing a phase keeps one entry.
    r.add_histogram("p", &hist());
    assert_eq!(r.latency.len(), 1);
}

#[test]
fn ticks_are_nice() {
    let (lo, hi, t) = nice_ticks(0.0, 37.0, 5);
    assert_eq!((lo, hi), (0.0, 40.0));
    assert_eq!(t, vec![0.0, 10.0, 20.0, 30.0, 40.0]);
    let (lo, hi, _) = nice_ticks(5.0, 5.0, 5);
    assert!(lo <= 5.0 && hi > 5.0);
    assert_eq!(tick_label(0.25, 0.05), "0.25");
    assert_eq!(tick_label(20.0, 10.0), "20");
    assert_eq!(utc_string(0), "1970-01-01 00:00:00 UTC");
    assert_eq!(utc_string(1_700_000_000_000), "2023-11-14 22:13:20 UTC");
}
