//! The discord.py 2.x interpreter for the library tests.

use std::process::Command;

/// The Python interpreter with discord.py 2.x for the library tests:
/// `GATEWAYD_PYTHON`, else `python3` if it has discord.py. Those tests are
/// `#[ignore]`d (plain `cargo test` lists them, with the reason); run with
/// `--include-ignored` (scripts/test-all.sh makes the venv) they fail here
/// without one.
pub fn discord_py_python() -> String {
    let check = |p: &str| -> Result<(), String> {
        let out = Command::new(p)
            .args([
                "-c",
                "import discord, sys; sys.exit(0 if discord.version_info.major == 2 else 3)",
            ])
            .output()
            .map_err(|e| format!("cannot run {p}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{p} has no discord.py 2.x ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    };
    if let Some(p) = std::env::var_os("GATEWAYD_PYTHON") {
        let p = p.to_string_lossy().into_owned();
        check(&p).unwrap_or_else(|e| panic!("GATEWAYD_PYTHON is set but unusable: {e}"));
        return p;
    }
    match check("python3") {
        Ok(()) => "python3".into(),
        Err(e) => panic!(
            "this test needs discord.py 2.x: {e}\n  scripts/test-all.sh makes a venv; by hand: \
             python3 -m venv /tmp/venv && /tmp/venv/bin/pip install -r tests/py/requirements.txt \
             && export GATEWAYD_PYTHON=/tmp/venv/bin/python"
        ),
    }
}
