//! The scenarios (`loadgen scenario NAME`), one per claim of the
//! design (../shared/DESIGN.md, last section) plus steady state. Each starts
//! what it needs as child processes (or attaches), bounds its own time,
//! stops what it started, writes `result.json`, `report.html` and
//! `summary.txt` to its output directory, and fails (exit 1) when a claim
//! fails.
//!
//! One file per scenario (steady, storm, slow_consumer, revocation,
//! recovery for `storm --recovery`, rolling for rolling-release); what they
//! share sits in leaf files below them: `opts` (the options), `setup`
//! (registry, world, nodes, fleet), `sampler` (per-second samples),
//! `claims` (figures and claims reported alike). This file only declares,
//! re-exports and dispatches ([`run`]).

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::report::Report;

mod claims;
mod opts;
mod recovery;
mod revocation;
mod rolling;
mod sampler;
mod setup;
mod slow_consumer;
mod steady;
mod storm;
#[cfg(test)]
mod tests;

pub use opts::{Common, RecoveryOpts, RevocationOpts, RollingOpts, SlowOpts, StormOpts};
pub use recovery::recovery_toml;

pub enum Which {
    /// With `Some`: Kafka ingest, the session store and `[recovery]`
    /// (or, with an empty config, Kafka ingest alone), for the A/B of the
    /// summaries' cost (scripts/recovery-ab.sh).
    Steady(Option<RecoveryOpts>),
    Storm(StormOpts),
    SlowConsumer(SlowOpts),
    Revocation(RevocationOpts),
    RollingRelease(RollingOpts),
}

/// Runs one scenario; Ok(passed).
pub fn run(which: Which, c: Common) -> Result<bool, String> {
    std::fs::create_dir_all(&c.out).map_err(|e| format!("{}: {e}", c.out.display()))?;
    let started = Instant::now();
    let name = match which {
        Which::Steady(_) => "steady",
        Which::Storm(_) => "storm",
        Which::SlowConsumer(_) => "slow-consumer",
        Which::Revocation(_) => "revocation",
        Which::RollingRelease(_) => "rolling-release",
    };
    let mut rep = Report::new(name, &c.command);
    let res = match which {
        Which::Steady(r) => steady::steady(&c, r.as_ref(), &mut rep),
        Which::Storm(o) => storm::storm(&c, &o, &mut rep),
        Which::SlowConsumer(o) => slow_consumer::slow_consumer(&c, &o, &mut rep),
        Which::Revocation(o) => revocation::revocation(&c, &o, &mut rep),
        Which::RollingRelease(o) => rolling::rolling_release(&c, &o, &mut rep),
    };
    if let Err(e) = &res {
        rep.claim("scenario ran to the end", false, "no error", e);
    }
    rep.duration_s = started.elapsed().as_secs_f64();
    // Node data directories and the generated registry are scratch (the
    // logs stay in logs/); LOADGEN_KEEP_WORK=1 keeps them for a post-mortem.
    if std::env::var_os("LOADGEN_KEEP_WORK").is_none() {
        let _ = std::fs::remove_dir_all(c.out.join("work"));
    }
    rep.passed = !rep.claims.is_empty() && rep.claims.iter().all(|c| c.passed);
    rep.write_json(&c.out.join("result.json"))
        .map_err(|e| format!("writing result.json: {e}"))?;
    rep.write_html(&c.out.join("report.html"))
        .map_err(|e| format!("writing report.html: {e}"))?;
    let summary = rep.text_summary();
    let _ = std::fs::write(c.out.join("summary.txt"), &summary);
    println!("{summary}");
    println!(
        "loadgen: wrote {0}/result.json, {0}/report.html, {0}/summary.txt",
        c.out.display()
    );
    Ok(rep.passed)
}

pub fn default_out(name: &str) -> PathBuf {
    let t = crate::clock::unix_ms() / 1000;
    Path::new("loadgen-results").join(format!("{name}-{t}"))
}
