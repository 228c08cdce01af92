//! The report's inline SVG charts: the latency percentile plot (x on a
//! log scale of 1/(1-p)) and line charts of time series sharing a unit.
//! Fixed geometry, 1/2/5 ticks, a legend of at most `LEGEND_ROWS` rows
//! beside the plot (further series summarised).

use std::fmt::Write as _;

use super::format::{clip, esc};
use super::model::{LatencyPhase, Series, CURVE_MAX_PERCENTILE};

pub(super) const PALETTE: [&str; 10] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

// Chart geometry (SVG user units).
pub(super) const W: f64 = 900.0;
pub(super) const H: f64 = 340.0;
pub(super) const LEFT: f64 = 70.0;
pub(super) const TOP: f64 = 36.0;
pub(super) const PLOT_W: f64 = 600.0;
pub(super) const PLOT_H: f64 = 250.0;
pub(super) const LEGEND_X: f64 = LEFT + PLOT_W + 20.0;

/// Tick positions covering [lo, hi] with a 1/2/5 x 10^k step: (lo', hi', ticks).
pub(super) fn nice_ticks(lo: f64, hi: f64, target: usize) -> (f64, f64, Vec<f64>) {
    let (mut lo, mut hi) = if lo.is_finite() && hi.is_finite() {
        (lo, hi)
    } else {
        (0.0, 1.0)
    };
    if hi < lo {
        std::mem::swap(&mut lo, &mut hi);
    }
    if hi - lo <= f64::EPSILON * hi.abs().max(1.0) {
        let pad = if hi == 0.0 { 1.0 } else { hi.abs() * 0.1 };
        lo -= if lo == 0.0 { 0.0 } else { pad };
        hi += pad;
    }
    let raw = (hi - lo) / target.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let lo2 = (lo / step).floor() * step;
    let hi2 = (hi / step).ceil() * step;
    let n = ((hi2 - lo2) / step).round() as usize;
    let ticks = (0..=n.min(50)).map(|i| lo2 + step * i as f64).collect();
    (lo2, hi2, ticks)
}

/// A tick label with as many decimals as the step needs.
pub(super) fn tick_label(v: f64, step: f64) -> String {
    let decimals = if step > 0.0 {
        (-step.log10().floor()).clamp(0.0, 6.0) as usize
    } else {
        0
    };
    let s = format!("{:.*}", decimals, v);
    if s.starts_with('-') && s.trim_start_matches(['-', '0', '.']).is_empty() {
        s[1..].to_string()
    } else {
        s
    }
}

pub(super) fn svg_open(out: &mut String, title: &str) {
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {W} {H}\" width=\"{W}\" height=\"{H}\" font-family=\"sans-serif\" font-size=\"12\" role=\"img\" aria-label=\"{t}\">\n<title>{t}</title>\n<rect x=\"0\" y=\"0\" width=\"{W}\" height=\"{H}\" fill=\"#fff\"/>\n<text x=\"{cx}\" y=\"20\" text-anchor=\"middle\" font-size=\"14\" font-weight=\"bold\">{t}</text>\n",
        t = esc(title),
        cx = LEFT + PLOT_W / 2.0
    );
}

/// Y axis: grid lines, tick labels and a rotated label.
pub(super) fn y_axis(out: &mut String, lo: f64, hi: f64, ticks: &[f64], label: &str) {
    let step = if ticks.len() > 1 {
        ticks[1] - ticks[0]
    } else {
        1.0
    };
    for &t in ticks {
        let y = TOP + PLOT_H - (t - lo) / (hi - lo) * PLOT_H;
        let _ = write!(
            out,
            "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{x2}\" y2=\"{y:.1}\" stroke=\"#e4e4e4\"/>\n<text x=\"{tx}\" y=\"{ty:.1}\" text-anchor=\"end\">{l}</text>\n",
            x2 = LEFT + PLOT_W,
            tx = LEFT - 6.0,
            ty = y + 4.0,
            l = esc(&tick_label(t, step))
        );
    }
    let cy = TOP + PLOT_H / 2.0;
    let _ = writeln!(
        out,
        "<text x=\"16\" y=\"{cy}\" text-anchor=\"middle\" transform=\"rotate(-90 16 {cy})\">{}</text>",
        esc(label)
    );
}

/// X axis tick at data position `x` (already mapped to SVG units).
pub(super) fn x_tick(out: &mut String, sx: f64, label: &str) {
    let yb = TOP + PLOT_H;
    let _ = write!(
        out,
        "<line x1=\"{sx:.1}\" y1=\"{TOP}\" x2=\"{sx:.1}\" y2=\"{yb}\" stroke=\"#e4e4e4\"/>\n<line x1=\"{sx:.1}\" y1=\"{yb}\" x2=\"{sx:.1}\" y2=\"{y2}\" stroke=\"#444\"/>\n<text x=\"{sx:.1}\" y=\"{ty}\" text-anchor=\"middle\">{l}</text>\n",
        y2 = yb + 5.0,
        ty = yb + 19.0,
        l = esc(label)
    );
}

pub(super) fn frame_and_xlabel(out: &mut String, label: &str) {
    let _ = write!(
        out,
        "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{PLOT_W}\" height=\"{PLOT_H}\" fill=\"none\" stroke=\"#444\"/>\n<text x=\"{cx}\" y=\"{ly}\" text-anchor=\"middle\">{l}</text>\n",
        cx = LEFT + PLOT_W / 2.0,
        ly = TOP + PLOT_H + 40.0,
        l = esc(label)
    );
}

/// Legend rows fit beside the plot; further series are summarised.
pub(super) const LEGEND_ROWS: usize = 12;

pub(super) fn legend(out: &mut String, i: usize, name: &str, total: usize) {
    let y = TOP + 8.0 + 20.0 * i as f64;
    if i >= LEGEND_ROWS || (i == LEGEND_ROWS - 1 && total > LEGEND_ROWS) {
        if i == LEGEND_ROWS - 1 {
            let _ = writeln!(
                out,
                "<text x=\"{LEGEND_X}\" y=\"{ty}\">… {n} more</text>",
                ty = y + 4.0,
                n = total - i
            );
        }
        return;
    }
    let color = PALETTE[i % PALETTE.len()];
    let _ = writeln!(
        out,
        "<g><title>{full}</title><line x1=\"{LEGEND_X}\" y1=\"{y}\" x2=\"{x2}\" y2=\"{y}\" stroke=\"{color}\" stroke-width=\"3\"/><text x=\"{tx}\" y=\"{ty}\">{l}</text></g>",
        full = esc(name),
        x2 = LEGEND_X + 22.0,
        tx = LEGEND_X + 28.0,
        ty = y + 4.0,
        l = esc(&clip(name, 24))
    );
}

pub(super) fn polyline(out: &mut String, i: usize, pts: &[(f64, f64)]) {
    if pts.is_empty() {
        return;
    }
    let color = PALETTE[i % PALETTE.len()];
    if pts.len() == 1 {
        let _ = writeln!(
            out,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{color}\"/>",
            pts[0].0, pts[0].1
        );
        return;
    }
    let mut p = String::with_capacity(pts.len() * 14);
    for (x, y) in pts {
        let _ = write!(p, "{x:.1},{y:.1} ");
    }
    let _ = writeln!(
        out,
        "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" stroke-linejoin=\"round\" points=\"{}\"/>",
        p.trim_end()
    );
}

/// Percentile plot: x = log10(1/(1-p)), y = latency in ms, one line per phase.
pub(super) fn percentile_svg(phases: &[LatencyPhase]) -> String {
    let mut out = String::new();
    svg_open(&mut out, "Latency by percentile");
    let x_of = |pct: f64| -> f64 {
        let p = (pct / 100.0).clamp(0.0, CURVE_MAX_PERCENTILE / 100.0);
        (1.0 / (1.0 - p)).log10()
    };
    let x_max = x_of(CURVE_MAX_PERCENTILE);
    let y_max_ms = phases
        .iter()
        .flat_map(|l| l.curve.iter().map(|(_, v)| *v as f64 / 1000.0))
        .fold(0.0f64, f64::max);
    let (lo, hi, ticks) = nice_ticks(0.0, if y_max_ms > 0.0 { y_max_ms } else { 1.0 }, 5);
    y_axis(&mut out, lo, hi, &ticks, "latency (ms)");
    for (pct, label) in [
        (0.0, "0%"),
        (50.0, "50%"),
        (90.0, "90%"),
        (99.0, "99%"),
        (99.9, "99.9%"),
        (99.99, "99.99%"),
        (99.999, "99.999%"),
    ] {
        x_tick(&mut out, LEFT + x_of(pct) / x_max * PLOT_W, label);
    }
    frame_and_xlabel(&mut out, "percentile");
    for (i, l) in phases.iter().enumerate() {
        let pts: Vec<(f64, f64)> = l
            .curve
            .iter()
            .map(|(p, v)| {
                (
                    LEFT + x_of(*p) / x_max * PLOT_W,
                    TOP + PLOT_H - ((*v as f64 / 1000.0) - lo) / (hi - lo) * PLOT_H,
                )
            })
            .collect();
        polyline(&mut out, i, &pts);
        legend(&mut out, i, &l.phase, phases.len());
    }
    out.push_str("</svg>\n");
    out
}

/// Line chart of several series sharing one unit; x = seconds since start.
pub(super) fn series_svg(title: &str, unit: &str, series: &[&Series]) -> String {
    let mut out = String::new();
    svg_open(&mut out, title);
    let finite = |(x, y): &&(f64, f64)| x.is_finite() && y.is_finite();
    let all: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|s| s.points.iter().filter(finite).copied())
        .collect();
    let (mut x0, mut x1, mut y0, mut y1) = (
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::INFINITY,
        f64::NEG_INFINITY,
    );
    for (x, y) in &all {
        x0 = x0.min(*x);
        x1 = x1.max(*x);
        y0 = y0.min(*y);
        y1 = y1.max(*y);
    }
    if all.is_empty() {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    // Start both axes at zero when the data is non-negative: honest scales.
    if x0 >= 0.0 {
        x0 = 0.0;
    }
    if y0 >= 0.0 {
        y0 = 0.0;
    }
    let (ylo, yhi, yticks) = nice_ticks(y0, y1, 5);
    let (xlo, xhi, xticks) = nice_ticks(x0, x1, 8);
    y_axis(
        &mut out,
        ylo,
        yhi,
        &yticks,
        if unit.is_empty() { "value" } else { unit },
    );
    let xstep = if xticks.len() > 1 {
        xticks[1] - xticks[0]
    } else {
        1.0
    };
    let sx = |x: f64| LEFT + (x - xlo) / (xhi - xlo) * PLOT_W;
    let sy = |y: f64| TOP + PLOT_H - (y - ylo) / (yhi - ylo) * PLOT_H;
    for &t in &xticks {
        x_tick(&mut out, sx(t), &tick_label(t, xstep));
    }
    frame_and_xlabel(&mut out, "seconds since start");
    if all.is_empty() {
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"#888\">no data</text>",
            LEFT + PLOT_W / 2.0,
            TOP + PLOT_H / 2.0
        );
    }
    for (i, s) in series.iter().enumerate() {
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter(finite)
            .map(|(x, y)| (sx(*x), sy(*y)))
            .collect();
        polyline(&mut out, i, &pts);
        legend(&mut out, i, &s.name, series.len());
    }
    out.push_str("</svg>\n");
    out
}
