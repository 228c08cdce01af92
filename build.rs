//! The commit the node is built from, for `gatewayd_build_info{commit}` and
//! `gatewayd --version`: `GATEWAYD_COMMIT` in the environment if set (a
//! packager building from a tarball), else `git rev-parse --short HEAD` when
//! this tree is a git checkout of its own (a `.git` here: a tarball unpacked
//! inside another repository must not take that one's commit), else
//! "unknown". Git missing or failing is never an error.
//!
//! The script reruns when HEAD moves: HEAD itself (a checkout), the branch
//! ref HEAD names (a commit), and packed-refs; only files that exist are
//! watched (Cargo reruns a script on every build for a missing one).

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=GATEWAYD_COMMIT");
    let dir = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by Cargo"));
    let commit = std::env::var("GATEWAYD_COMMIT")
        .ok()
        .map(|c| sanitize(&c))
        .filter(|c| !c.is_empty())
        .or_else(|| git_commit(&dir))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=GATEWAYD_COMMIT={commit}");
}

/// A label value without quoting: letters, digits and `.-_+` only.
fn sanitize(s: &str) -> String {
    s.trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+'))
        .take(64)
        .collect()
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    let text = text.trim();
    (out.status.success() && !text.is_empty()).then(|| text.to_string())
}

fn git_commit(dir: &Path) -> Option<String> {
    // A directory in a clone, a file in a worktree.
    if !dir.join(".git").exists() {
        return None;
    }
    let mut watch = vec!["HEAD".to_string(), "packed-refs".to_string()];
    // Detached: HEAD holds the commit itself and is watched already.
    watch.extend(git(dir, &["symbolic-ref", "-q", "HEAD"]));
    for name in &watch {
        if let Some(path) = git(dir, &["rev-parse", "--git-path", name]) {
            let path = dir.join(path);
            if path.is_file() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    git(dir, &["rev-parse", "--short", "HEAD"]).map(|c| sanitize(&c))
}
