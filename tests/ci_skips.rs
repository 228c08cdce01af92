//! CI (scripts/test-all.sh) runs every test, the ignored ones included,
//! except the measurements that are run by hand: its HEAVY list. A hand-run
//! measurement missing from that list costs CI minutes on every run
//! (`cluster_cost_figures`, three 30 s windows, ran in CI until this test),
//! and a name in the list that matches no test, or matches more than the
//! measurement, skips nothing or skips too much, silently.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The names in `HEAVY=(...)` of scripts/test-all.sh.
fn heavy() -> Vec<String> {
    let script = std::fs::read_to_string(root().join("scripts/test-all.sh")).unwrap();
    let line = script
        .lines()
        .find(|l| l.starts_with("HEAVY=("))
        .expect("scripts/test-all.sh has its HEAVY=(...) line");
    line.trim_start_matches("HEAVY=(")
        .trim_end_matches(')')
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries {
        let p = e.unwrap().path();
        if p.is_dir() {
            if p.file_name().is_some_and(|n| n != "target") {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every test function of the workspace: (name, its ignore reason if any).
fn tests() -> Vec<(String, Option<String>)> {
    let mut files = Vec::new();
    for dir in ["src", "tests", "benches"] {
        rust_files(&root().join(dir), &mut files);
    }
    for member in std::fs::read_dir(root()).unwrap() {
        let p = member.unwrap().path();
        if p.join("Cargo.toml").is_file() && p != root() {
            rust_files(&p, &mut files);
        }
    }
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let (mut in_test, mut reason) = (false, None);
        for line in text.lines().map(str::trim) {
            if line == "#[test]" {
                in_test = true;
            } else if let Some(r) = line.strip_prefix("#[ignore = \"") {
                reason = Some(r.trim_end_matches("\"]").to_string());
            } else if let Some(rest) = line.strip_prefix("fn ") {
                if in_test {
                    let name = rest.split(['(', '<']).next().unwrap().to_string();
                    out.push((name, reason.take()));
                }
                (in_test, reason) = (false, None);
            } else if !line.starts_with("#[") && !line.starts_with("//") {
                (in_test, reason) = (false, None);
            }
        }
    }
    out
}

/// What the ignore reasons of hand-run measurements say.
fn run_by_hand(reason: &str) -> bool {
    reason.contains("by hand") || reason.starts_with("heavy")
}

#[test]
fn every_hand_run_measurement_and_nothing_else_is_skipped_by_ci() {
    let heavy = heavy();
    let tests = tests();
    assert!(
        tests.len() > 100,
        "the scan finds the tests: {}",
        tests.len()
    );
    for (name, reason) in &tests {
        let skipped = heavy.iter().any(|h| name.contains(h.as_str()));
        let by_hand = reason.as_deref().is_some_and(run_by_hand);
        assert_eq!(
            skipped, by_hand,
            "{name} (ignore reason {reason:?}): CI's HEAVY list in scripts/test-all.sh must \
             name exactly the tests run by hand (--skip matches substrings)"
        );
    }
    for h in &heavy {
        assert!(
            tests.iter().any(|(n, _)| n.contains(h.as_str())),
            "HEAVY names {h}, which is no test"
        );
    }
}
