//! The result of one scenario run: a JSON file, a self-contained HTML page
//! (inline SVG charts drawn here, no script, no external assets) and a
//! one-screen text summary.
//!
//! A scenario fills a [`Report`] (claims, figures, latency histograms via
//! [`Report::add_histogram`], time series) and writes it with
//! [`Report::write_json`] and [`Report::write_html`]. Latencies are in
//! microseconds everywhere in the data; the HTML shows milliseconds.
//!
//! Files: `model` (the data and how a scenario fills it, JSON in and out),
//! `summary` (the text summary), `html` (the page), `svg` (its charts),
//! `format` (number, time and escaping helpers the others share). This
//! file only declares and re-exports.

mod format;
mod html;
mod model;
mod summary;
mod svg;
#[cfg(test)]
mod tests;

pub use format::esc;
pub use model::{
    host_description, Claim, Figure, LatencyPhase, Report, Series, CURVE_MAX_PERCENTILE,
    CURVE_POINTS,
};
pub use summary::{SUMMARY_MAX_LINES, SUMMARY_WIDTH};
