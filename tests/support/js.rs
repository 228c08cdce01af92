//! discord.js, Eris and discordeno for the library tests: the `node_modules`
//! scripts/test-all.sh installs from tests/js/package-lock.json (outside
//! the clone, in `GATEWAYD_NODE_MODULES`), and the scripts of tests/js run
//! with it.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::node::Node;
use super::python::Script;

/// The `node_modules` with discord.js 14: `GATEWAYD_NODE_MODULES`, else
/// tests/js/node_modules (an `npm ci` there by hand). Those tests are
/// `#[ignore]`d; run with `--include-ignored` they fail here without one.
pub fn discord_js_modules() -> PathBuf {
    modules_with("discord.js", "14.")
}

/// The `node_modules` with Eris 0.18 and pako (Eris's inflater for
/// `compress: true` without the native zlib-sync), as
/// [`discord_js_modules`] finds it.
pub fn eris_modules() -> PathBuf {
    let p = modules_with("eris", "0.18.");
    let pako = p.join("pako/package.json");
    assert!(
        pako.exists(),
        "{} is missing: Eris needs pako for compress: true (tests/js/package.json pins it); \
         (cd tests/js && npm ci --ignore-scripts)",
        pako.display()
    );
    p
}

/// The `node_modules` with discordeno 21 (`@discordeno/bot`) and fzstd
/// (its optional pure-JS zstd decoder, for `zstd-stream`), as
/// [`discord_js_modules`] finds it.
pub fn discordeno_modules() -> PathBuf {
    let p = modules_with("@discordeno/bot", "21.");
    let fzstd = p.join("fzstd/package.json");
    assert!(
        fzstd.exists(),
        "{} is missing: discordeno decodes zstd-stream with fzstd (an optional dependency of \
         @discordeno/gateway, in tests/js/package-lock.json); (cd tests/js && npm ci --ignore-scripts)",
        fzstd.display()
    );
    p
}

/// `GATEWAYD_NODE_MODULES`, else tests/js/node_modules, checked to hold
/// `package` at a version starting with `major`.
fn modules_with(package: &str, major: &str) -> PathBuf {
    let check = |p: &Path| -> Result<(), String> {
        let pkg = p.join(package).join("package.json");
        let text = std::fs::read_to_string(&pkg).map_err(|e| format!("{}: {e}", pkg.display()))?;
        let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| e.to_string())?;
        match v["version"].as_str() {
            Some(ver) if ver.starts_with(major) => Ok(()),
            other => Err(format!(
                "{} is {package} {other:?}, not {major}x",
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
            "this test needs {package} {major}x: {e}\n  scripts/test-all.sh installs it; by hand: \
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
    spawn_with_env(modules, node, token, file, tag, args, &[])
}

/// [`spawn`] with these environment variables set for Node.js too (e.g.
/// `NODE_EXTRA_CA_CERTS`, the CA of a node serving TLS).
pub fn spawn_with_env(
    modules: &Path,
    node: &Node,
    token: &str,
    file: &str,
    tag: &str,
    args: &[&str],
    env: &[(&str, &std::ffi::OsStr)],
) -> Script {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/js")
        .join(file);
    let mut cmd = Command::new("node");
    cmd.arg(&script).args(args).env("NODE_PATH", modules);
    cmd.envs(env.iter().copied());
    Script::spawn_command(cmd, node, token, file, tag)
}
