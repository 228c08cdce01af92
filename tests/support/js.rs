//! discord.js for the library tests: the `node_modules` scripts/test-all.sh
//! installs from tests/js/package-lock.json (outside the clone, in
//! `GATEWAYD_NODE_MODULES`), and the scripts of tests/js run with it.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::node::Node;
use super::python::Script;

/// The `node_modules` with discord.js 14: `GATEWAYD_NODE_MODULES`, else
/// tests/js/node_modules (an `npm ci` there by hand). Those tests are
/// `#[ignore]`d; run with `--include-ignored` they fail here without one.
pub fn discord_js_modules() -> PathBuf {
    let check = |p: &Path| -> Result<(), String> {
        let pkg = p.join("discord.js/package.json");
        let text = std::fs::read_to_string(&pkg).map_err(|e| format!("{}: {e}", pkg.display()))?;
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
        match v["version"].as_str() {
            Some(ver) if ver.starts_with("14.") => Ok(()),
            other => Err(format!(
                "{} is discord.js {other:?}, not 14.x",
                pkg.display()
            )),
        }
    };
    if let Some(p) = std::env::var_os("GATEWAYD_NODE_MODULES") {
        let p = PathBuf::from(p);
        check(&p).unwrap_or_else(|e| panic!("GATEWAYD_NODE_MODULES is set but unusable: {e}"));
        return p;
    }
    let local = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/js/node_modules");
    match check(&local) {
        Ok(()) => local,
        Err(e) => panic!(
            "this test needs discord.js 14: {e}\n  scripts/test-all.sh installs it; by hand: \
             (cd tests/js && npm ci --ignore-scripts)"
        ),
    }
}

/// axe-core's browser build (tests/js/package.json pins it), for the
/// portal's accessibility check: injected into the page by WebDriver.
pub fn axe_core_js() -> String {
    let p = discord_js_modules().join("axe-core/axe.min.js");
    std::fs::read_to_string(&p).unwrap_or_else(|e| {
        panic!(
            "{}: {e}: axe-core is not installed; scripts/test-all.sh installs tests/js's \
             packages (by hand: cd tests/js && npm ci --ignore-scripts)",
            p.display()
        )
    })
}

/// A script of tests/js run by Node.js as the bot whose token is `token`.
pub fn spawn(
    modules: &Path,
    node: &Node,
    token: &str,
    file: &str,
    tag: &str,
    args: &[&str],
) -> Script {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/js")
        .join(file);
    let mut cmd = Command::new("node");
    cmd.arg(&script).args(args).env("NODE_PATH", modules);
    Script::spawn_command(cmd, node, token, file, tag)
}
