//! The registry CLI (`gatewayd registry ...`) as an operator runs it while
//! a node is up, against the node's file or a shared PostgreSQL registry,
//! and fresh databases on the test PostgreSQL server.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `gatewayd registry --data-dir DIR ...`, run while the node is up.
pub struct Registry {
    bin: PathBuf,
    dir: PathBuf,
    /// A shared PostgreSQL registry instead of the node's file.
    url: Option<String>,
}

/// A fresh database on the test PostgreSQL server: (admin URL, its URL).
/// The tests that call this are `#[ignore]`d (plain `cargo test` lists
/// them, with the reason); with `--include-ignored` they fail without a
/// server.
pub fn pg_database() -> (String, String) {
    let admin = match std::env::var("GATEWAYD_TEST_DATABASE_URL") {
        Ok(u) if !u.trim().is_empty() => u,
        _ => panic!(
            "GATEWAYD_TEST_DATABASE_URL is not set: this test needs a PostgreSQL server. \
             scripts/test-all.sh starts one; by hand: eval \"$(scripts/pg-test-server.sh start)\""
        ),
    };
    let name = format!(
        "gatewayd_it_{}_{:08x}",
        std::process::id(),
        getrandom::u32().unwrap()
    );
    let mut client =
        postgres::Client::connect(&admin, postgres::NoTls).expect("connect to the test server");
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap();
    let (scheme, rest) = admin.split_once("://").expect("a postgres:// URL");
    let authority = rest.split('/').next().unwrap();
    (admin.clone(), format!("{scheme}://{authority}/{name}"))
}

#[derive(Clone, Debug)]
pub struct App {
    pub name: String,
    pub id: u64,
    pub token: String,
}

impl Registry {
    pub fn new(data_dir: &Path) -> Registry {
        Registry {
            bin: PathBuf::from(env!("CARGO_BIN_EXE_gatewayd")),
            dir: data_dir.to_path_buf(),
            url: None,
        }
    }

    /// The CLI against a shared PostgreSQL registry.
    pub fn with_url(data_dir: &Path, url: Option<&str>) -> Registry {
        Registry {
            url: url.map(str::to_string),
            ..Registry::new(data_dir)
        }
    }

    /// Run one registry command; returns its `key=value` output lines.
    pub fn run(&self, args: &[&str]) -> BTreeMap<String, String> {
        self.text(args)
            .lines()
            .flat_map(|l| l.split_whitespace())
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Run one registry command; returns its output as printed (`list`).
    pub fn text(&self, args: &[&str]) -> String {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("registry").arg("--data-dir").arg(&self.dir);
        if let Some(url) = &self.url {
            cmd.arg("--registry-url").arg(url);
        }
        let out = cmd.args(args).output().expect("run gatewayd registry");
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "gatewayd registry {args:?} failed ({}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    }

    fn id(out: &BTreeMap<String, String>, key: &str) -> u64 {
        out.get(key)
            .unwrap_or_else(|| panic!("no {key}= in registry output {out:?}"))
            .parse()
            .unwrap()
    }

    pub fn add_app(&self, name: &str, privileged_intents: u64) -> App {
        self.add_app_with(name, privileged_intents, 1)
    }

    pub fn add_app_with(&self, name: &str, privileged_intents: u64, max_concurrency: u32) -> App {
        let out = self.run(&[
            "add-app",
            "--name",
            name,
            "--privileged-intents",
            &privileged_intents.to_string(),
            "--max-concurrency",
            &max_concurrency.to_string(),
        ]);
        App {
            name: name.to_string(),
            id: Self::id(&out, "application_id"),
            token: out["token"].clone(),
        }
    }

    /// A developer account (`registry developer add`, the password from a
    /// file as an operator would give it).
    pub fn add_developer(&self, name: &str, password: &str) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("password");
        std::fs::write(&file, format!("{password}\n")).unwrap();
        self.text(&[
            "developer",
            "add",
            name,
            "--password-file",
            file.to_str().unwrap(),
        ]);
    }

    pub fn own(&self, developer: &str, app: u64) {
        self.text(&["developer", "own", developer, &app.to_string()]);
    }

    pub fn disown(&self, developer: &str, app: u64) {
        self.text(&["developer", "disown", developer, &app.to_string()]);
    }

    /// A server with its `#general`: (server id, general channel id).
    pub fn add_server(&self, name: &str) -> (u64, u64) {
        let out = self.run(&["add-server", "--name", name]);
        (Self::id(&out, "server_id"), Self::id(&out, "channel_id"))
    }

    pub fn add_channel(&self, server: u64, name: &str) -> u64 {
        let out = self.run(&[
            "add-channel",
            "--server",
            &server.to_string(),
            "--name",
            name,
        ]);
        Self::id(&out, "channel_id")
    }

    pub fn add_role(&self, server: u64, name: &str, permissions: u64) -> u64 {
        let out = self.run(&[
            "add-role",
            "--server",
            &server.to_string(),
            "--name",
            name,
            "--permissions",
            &permissions.to_string(),
        ]);
        Self::id(&out, "role_id")
    }

    /// `kind` is "role" or "member".
    pub fn set_overwrite(&self, channel: u64, target: u64, kind: &str, allow: u64, deny: u64) {
        self.run(&[
            "set-overwrite",
            "--channel",
            &channel.to_string(),
            "--target",
            &target.to_string(),
            "--kind",
            kind,
            "--allow",
            &allow.to_string(),
            "--deny",
            &deny.to_string(),
        ]);
    }

    /// Install with a granted bitset (`None`: the CLI default).
    pub fn install(&self, app: u64, server: u64, permissions: Option<u64>) {
        let (a, s) = (app.to_string(), server.to_string());
        let p = permissions.map(|p| p.to_string());
        let mut args = vec!["install", "--app", &a, "--server", &s];
        if let Some(p) = &p {
            args.extend(["--permissions", p.as_str()]);
        }
        self.run(&args);
    }

    /// A person: `add-user`, then `add-member` with these roles.
    pub fn add_member(&self, server: u64, name: &str, roles: &[u64]) -> u64 {
        let user = Self::id(&self.run(&["add-user", "--name", name]), "user_id");
        let roles: Vec<String> = roles.iter().map(u64::to_string).collect();
        let (s, u, r) = (server.to_string(), user.to_string(), roles.join(","));
        let mut args = vec!["add-member", "--server", &s, "--user", &u];
        if !roles.is_empty() {
            args.extend(["--roles", r.as_str()]);
        }
        self.run(&args);
        user
    }

    pub fn uninstall(&self, app: u64, server: u64) {
        self.run(&[
            "uninstall",
            "--app",
            &app.to_string(),
            "--server",
            &server.to_string(),
        ]);
    }
}

/// The value of `key=` in a command's output (words split on whitespace).
pub fn kv(out: &std::process::Output, key: &str) -> Option<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .flat_map(|l| l.split_whitespace())
        .find_map(|w| w.strip_prefix(&format!("{key}=")).map(str::to_string))
}
