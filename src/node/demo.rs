//! The demo a fresh node comes with (README.md), and only with the demo
//! on (`demo.enabled`): the application `demo-bot`, its `Demo Server` and
//! its token in `<data_dir>/demo-token`. With the demo off nothing is
//! seeded; a demo application an earlier start left is kept (deleting is
//! the operator's call) and named in a warning at every start.

use registry::Registry;

use crate::config::Config;
use crate::ingest::demo::DemoTarget;

/// The demo's target for the traffic source, seeded on first start (with
/// its token published) when the demo is on; None when it is off.
pub(super) fn prepare(cfg: &Config, registry: &dyn Registry) -> Result<Option<DemoTarget>, String> {
    if cfg.demo.enabled {
        return seed(cfg, registry).map(Some);
    }
    warn_of_leftover(cfg, registry)?;
    Ok(None)
}

/// `gatewayd registry` with the flags that reach this node's registry
/// (a PostgreSQL URL is not printed: it may hold a password).
fn registry_command(cfg: &Config) -> String {
    if !cfg.registry_url.is_empty() {
        "GATEWAYD_REGISTRY_URL=<this node's registry_url> gatewayd registry".into()
    } else if cfg.registry_path.as_os_str().is_empty() {
        format!("gatewayd registry --data-dir {}", cfg.data_dir.display())
    } else {
        format!(
            "gatewayd registry --registry-path {}",
            cfg.registry_path.display()
        )
    }
}

/// The demo is off but the registry holds a demo application, whose token
/// still authenticates: say so, with the commands that remove it.
fn warn_of_leftover(cfg: &Config, registry: &dyn Registry) -> Result<(), String> {
    let Some(found) = registry
        .find_demo()
        .map_err(|e| format!("looking for demo data: {e}"))?
    else {
        return Ok(());
    };
    let cli = registry_command(cfg);
    let app = found.app.id;
    let server = found
        .server_id
        .map(|s| format!(", and its server with `{cli} delete-server --server {s}`"))
        .unwrap_or_default();
    let token_path = cfg.data_path("demo-token");
    let token_file = if token_path.exists() {
        format!(" (its token is in {})", token_path.display())
    } else {
        String::new()
    };
    tracing::warn!(
        app_id = app,
        "the demo is off (demo.enabled = false) but the registry holds the demo application \
         {:?} (id {app}) from an earlier start; its token still authenticates{token_file}. \
         Remove it with `{cli} delete-app --app {app}`{server}",
        found.app.name,
    );
    Ok(())
}

/// Seed the demo application on first start and publish its token.
fn seed(cfg: &Config, registry: &dyn Registry) -> Result<DemoTarget, String> {
    let token_path = cfg.data_path("demo-token");
    let Some(seed) = registry
        .seed_demo()
        .map_err(|e| format!("seeding demo data: {e}"))?
    else {
        let app = registry
            .find_demo()
            .ok()
            .flatten()
            .map_or(String::from("ID"), |f| f.app.id.to_string());
        return Err(format!(
            "demo data is incomplete (demo-bot exists without its server): start with \
             --no-demo, or remove it with `{} delete-app --app {app}` to have it seeded again",
            registry_command(cfg)
        ));
    };
    match &seed.token {
        Some(token) => {
            write_secret(&token_path, token)
                .map_err(|e| format!("writing {}: {e}", token_path.display()))?;
            println!(
                "demo bot token (shown once, also in {}): {token}",
                token_path.display()
            );
        }
        None if !cfg.registry_url.is_empty() => {
            // A shared registry: another node (or an earlier run) holds the
            // token; resetting it here would end that node's demo sessions.
            if !token_path.exists() {
                println!("demo bot exists in the shared registry; its token is where it was first written (or use `gatewayd registry reset-token`)");
            }
        }
        None => {
            if !token_path.exists() {
                // The token was lost: issue a new one rather than leave the demo unusable.
                let token = registry
                    .reset_token(seed.app.id)
                    .map_err(|e| e.to_string())?;
                write_secret(&token_path, &token)
                    .map_err(|e| format!("writing {}: {e}", token_path.display()))?;
                println!(
                    "demo bot token reset (in {}): {token}",
                    token_path.display()
                );
            }
        }
    }
    let owner = registry
        .server_snapshot(seed.server_id)
        .ok()
        .flatten()
        .map(|s| s.server.owner_id);
    let person = owner
        .and_then(|o| registry.user(o).ok().flatten())
        .map(|u| crate::protocol::guild::person(&u));
    Ok(DemoTarget {
        server_id: seed.server_id,
        channel_id: seed.general_channel_id,
        bot_user_id: seed.app.bot_user_id,
        person,
    })
}

fn write_secret(path: &std::path::Path, secret: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    writeln!(f, "{secret}")
}
