//! `gatewayd registry ...`: manage the registry file while the node runs or
//! not (SQLite in WAL mode; identifies read it fresh).

mod developers;

use std::path::PathBuf;

use clap::{Args, Subcommand};
use registry::{OverwriteKind, Registry, SqliteRegistry};

#[derive(Args)]
pub struct RegistryArgs {
    /// Data directory holding registry.sqlite.
    #[arg(long, default_value = "./gatewayd-data")]
    data_dir: PathBuf,
    /// Registry file (default: <data-dir>/registry.sqlite).
    #[arg(long)]
    registry_path: Option<PathBuf>,
    /// A shared PostgreSQL registry instead of the file.
    #[arg(long, env = "GATEWAYD_REGISTRY_URL")]
    registry_url: Option<String>,
    #[command(subcommand)]
    cmd: RegistryCmd,
}

#[derive(Subcommand)]
enum RegistryCmd {
    /// Create an application (bot); prints its id and token (shown once).
    AddApp {
        #[arg(long)]
        name: String,
        /// Approved privileged intents bitset (GUILD_MEMBERS 2, GUILD_PRESENCES 256, MESSAGE_CONTENT 32768).
        #[arg(long, default_value_t = 0)]
        privileged_intents: u64,
        #[arg(long, default_value_t = 1)]
        max_concurrency: u32,
    },
    /// Issue a new token; the old one stops working.
    ResetToken {
        #[arg(long)]
        app: u64,
    },
    /// Change the approved privileged intents of an application.
    SetIntents {
        #[arg(long)]
        app: u64,
        #[arg(long)]
        privileged_intents: u64,
    },
    /// Change an application's identify limits.
    SetLimits {
        #[arg(long)]
        app: u64,
        /// Identify buckets (shard_id % max_concurrency), one identify each per 5 s.
        #[arg(long)]
        max_concurrency: Option<u32>,
        /// Identifies allowed per 24 h.
        #[arg(long)]
        session_start_total: Option<u32>,
    },
    /// Delete an application and all its installations.
    DeleteApp {
        #[arg(long)]
        app: u64,
    },
    /// Delete a server and everything in it (installations, each revoked
    /// first, channels, roles, members).
    DeleteServer {
        #[arg(long)]
        server: u64,
    },
    /// Create a server with a #general text channel.
    AddServer {
        #[arg(long)]
        name: String,
    },
    /// Add a channel to a server.
    AddChannel {
        #[arg(long)]
        server: u64,
        #[arg(long)]
        name: String,
        /// 0 text, 2 voice, 4 category, 5 announcement.
        #[arg(long, default_value_t = 0)]
        kind: u8,
    },
    /// Add a role to a server.
    AddRole {
        #[arg(long)]
        server: u64,
        #[arg(long)]
        name: String,
        #[arg(long)]
        permissions: u64,
    },
    /// Set a channel permission overwrite for a role or member.
    SetOverwrite {
        #[arg(long)]
        channel: u64,
        #[arg(long)]
        target: u64,
        /// "role" or "member".
        #[arg(long, default_value = "role")]
        kind: String,
        #[arg(long, default_value_t = 0)]
        allow: u64,
        #[arg(long, default_value_t = 0)]
        deny: u64,
    },
    /// Install an application in a server with a granted permission bitset.
    Install {
        #[arg(long)]
        app: u64,
        #[arg(long)]
        server: u64,
        /// Default: VIEW_CHANNEL | SEND_MESSAGES | READ_MESSAGE_HISTORY.
        #[arg(long, default_value_t = proto::permissions::EVERYONE_DEFAULT)]
        permissions: u64,
    },
    /// Remove an application from a server (revoke).
    #[command(alias = "revoke")]
    Uninstall {
        #[arg(long)]
        app: u64,
        #[arg(long)]
        server: u64,
    },
    /// Create a user (a person of the chat service); prints its id.
    AddUser {
        #[arg(long)]
        name: String,
    },
    /// Add a user to a server as a member, optionally with roles.
    AddMember {
        #[arg(long)]
        server: u64,
        #[arg(long)]
        user: u64,
        /// Role ids, comma-separated (not @everyone, not a bot's managed role).
        #[arg(long, value_delimiter = ',')]
        roles: Vec<u64>,
    },
    /// Replace a member's roles (an empty --roles removes them all).
    SetMemberRoles {
        #[arg(long)]
        server: u64,
        #[arg(long)]
        user: u64,
        #[arg(long, value_delimiter = ',')]
        roles: Vec<u64>,
    },
    /// List a server's members (people) with their roles.
    Members {
        #[arg(long)]
        server: u64,
    },
    /// Show one application: its verify_key (the Ed25519 public key bots
    /// check interaction signatures with) and its interactions endpoint.
    ShowApp {
        #[arg(long)]
        app: u64,
    },
    /// Set the interactions endpoint URL after checking it as the platform
    /// does: a signed PING must get 200 {"type":1} and a PING with a bad
    /// signature must get 401, both sent through an egress.
    SetEndpoint {
        #[arg(long)]
        app: u64,
        #[arg(long, required_unless_present = "clear")]
        url: Option<String>,
        /// Remove the endpoint (interactions go over the gateway again).
        #[arg(long, conflicts_with = "url")]
        clear: bool,
        /// The egress to call through (Unix socket path or host:port);
        /// default: start one for this command.
        #[arg(long)]
        egress: Option<String>,
        /// For the egress this command starts: ranges it may reach anyway
        /// (development and tests), comma-separated.
        #[arg(long, value_delimiter = ',')]
        egress_allow_private_cidrs: Vec<String>,
        /// Time each of the two checks has.
        #[arg(long, default_value_t = 3_000)]
        timeout_ms: u64,
    },
    /// List an application's commands (global, or a server's).
    Commands {
        #[arg(long)]
        app: u64,
        /// A server's commands instead of the global ones.
        #[arg(long)]
        server: Option<u64>,
    },
    /// List applications, servers and installations.
    List,
    /// Developer accounts: people who sign in to the portal and see the
    /// applications they own (docs/registry.md).
    Developer {
        #[command(subcommand)]
        cmd: developers::DeveloperCmd,
    },
    /// Privileged-intent requests from applications: list, approve, deny.
    Intents {
        #[command(subcommand)]
        cmd: developers::IntentsCmd,
    },
}

pub fn run(args: RegistryArgs) -> Result<(), String> {
    let reg: Box<dyn Registry> = match &args.registry_url {
        Some(url) => Box::new(
            registry::PostgresRegistry::connect(url, std::time::Duration::from_secs(10))
                .map_err(|e| format!("connecting to the PostgreSQL registry: {e}"))?,
        ),
        None => {
            let path = args
                .registry_path
                .unwrap_or_else(|| args.data_dir.join("registry.sqlite"));
            Box::new(
                SqliteRegistry::open(&path)
                    .map_err(|e| format!("opening {}: {e}", path.display()))?,
            )
        }
    };
    let e = |e: registry::RegistryError| e.to_string();
    match args.cmd {
        RegistryCmd::AddApp {
            name,
            privileged_intents,
            max_concurrency,
        } => {
            let (app, token) = reg
                .create_application(&name, privileged_intents, max_concurrency)
                .map_err(e)?;
            println!("application_id={}", app.id);
            println!("token={token}");
        }
        RegistryCmd::ResetToken { app } => println!("token={}", reg.reset_token(app).map_err(e)?),
        RegistryCmd::SetIntents {
            app,
            privileged_intents,
        } => {
            let a = reg
                .set_approved_intents(app, privileged_intents)
                .map_err(e)?;
            println!(
                "application_id={} approved_intents={}",
                a.id, a.approved_intents
            );
        }
        RegistryCmd::SetLimits {
            app,
            max_concurrency,
            session_start_total,
        } => {
            if let Some(n) = max_concurrency {
                reg.set_max_concurrency(app, n).map_err(e)?;
            }
            if let Some(n) = session_start_total {
                reg.set_session_start_total(app, n).map_err(e)?;
            }
            let a = reg
                .application(app)
                .map_err(e)?
                .ok_or(format!("no application {app}"))?;
            println!(
                "application_id={} max_concurrency={} session_start_total={}",
                a.id, a.max_concurrency, a.session_start_total
            );
        }
        RegistryCmd::DeleteApp { app } => {
            println!("deleted={}", reg.delete_application(app).map_err(e)?)
        }
        RegistryCmd::DeleteServer { server } => {
            // Uninstalled first, one by one: each writes its revocation,
            // so a running node ends those bots' access to the server now
            // rather than when their leases lapse.
            for i in reg.installations_in_server(server).map_err(e)? {
                reg.uninstall(i.application_id, server).map_err(e)?;
            }
            println!("deleted={}", reg.delete_server(server).map_err(e)?)
        }
        RegistryCmd::AddServer { name } => {
            let s = reg.create_server(&name, 0).map_err(e)?;
            let c = reg.create_channel(s.id, "general", 0, None).map_err(e)?;
            println!("server_id={}", s.id);
            println!("channel_id={}", c.id);
        }
        RegistryCmd::AddChannel { server, name, kind } => {
            println!(
                "channel_id={}",
                reg.create_channel(server, &name, kind, None).map_err(e)?.id
            )
        }
        RegistryCmd::AddRole {
            server,
            name,
            permissions,
        } => {
            println!(
                "role_id={}",
                reg.create_role(server, &name, permissions).map_err(e)?.id
            )
        }
        RegistryCmd::SetOverwrite {
            channel,
            target,
            kind,
            allow,
            deny,
        } => {
            let kind = match kind.as_str() {
                "role" => OverwriteKind::Role,
                "member" => OverwriteKind::Member,
                other => return Err(format!("--kind must be role or member, not {other:?}")),
            };
            reg.set_overwrite(channel, target, kind, allow, deny)
                .map_err(e)?;
            println!("ok");
        }
        RegistryCmd::Install {
            app,
            server,
            permissions,
        } => {
            let i = reg.install(app, server, permissions).map_err(e)?;
            println!(
                "installed application_id={} server_id={} permissions={}",
                i.application_id, i.server_id, i.permissions
            );
        }
        RegistryCmd::Uninstall { app, server } => {
            println!("uninstalled={}", reg.uninstall(app, server).map_err(e)?)
        }
        RegistryCmd::AddUser { name } => {
            println!("user_id={}", reg.create_user(&name).map_err(e)?.id)
        }
        RegistryCmd::AddMember {
            server,
            user,
            roles,
        } => {
            reg.add_member(server, user).map_err(e)?;
            set_member_roles(&*reg, server, user, &roles)?;
        }
        RegistryCmd::SetMemberRoles {
            server,
            user,
            roles,
        } => set_member_roles(&*reg, server, user, &roles)?,
        RegistryCmd::Members { server } => {
            let mut after = 0;
            loop {
                let page = reg
                    .list_members(server, after, registry::MAX_MEMBERS_PAGE)
                    .map_err(e)?;
                for m in &page {
                    println!(
                        "member {} name={:?} roles={:?}",
                        m.user.id, m.user.username, m.role_ids
                    );
                }
                match page.last() {
                    Some(m) if page.len() == registry::MAX_MEMBERS_PAGE as usize => {
                        after = m.user.id
                    }
                    _ => break,
                }
            }
        }
        RegistryCmd::ShowApp { app } => {
            let a = reg
                .application(app)
                .map_err(e)?
                .ok_or(format!("no application {app}"))?;
            let seed = reg.signing_seed(app).map_err(e)?;
            println!("application_id={} name={:?}", a.id, a.name);
            println!("verify_key={}", crate::egress::sign::public_key_hex(&seed));
            println!(
                "interactions_endpoint_url={}",
                reg.interactions_endpoint(app)
                    .map_err(e)?
                    .unwrap_or_default()
            );
        }
        RegistryCmd::SetEndpoint {
            app,
            url,
            clear,
            egress,
            egress_allow_private_cidrs,
            timeout_ms,
        } => match url.filter(|_| !clear) {
            None => {
                reg.set_interactions_endpoint(app, None).map_err(e)?;
                println!("interactions_endpoint_url=");
            }
            Some(url) => {
                let seed = reg.signing_seed(app).map_err(e)?;
                verify_endpoint(
                    &url,
                    &seed,
                    egress.as_deref(),
                    &egress_allow_private_cidrs,
                    std::time::Duration::from_millis(timeout_ms),
                )?;
                reg.set_interactions_endpoint(app, Some(&url)).map_err(e)?;
                println!("verified: signed PING answered, bad signature refused");
                println!("interactions_endpoint_url={url}");
            }
        },
        RegistryCmd::Commands { app, server } => {
            let scope = server.map_or("global".to_string(), |s| format!("server:{s}"));
            for c in reg.commands(app, server).map_err(e)? {
                println!(
                    "command {} name={:?} type={} scope={scope}",
                    c.id, c.name, c.kind
                );
            }
        }
        RegistryCmd::Developer { cmd } => developers::run_developer(&*reg, cmd)?,
        RegistryCmd::Intents { cmd } => developers::run_intents(&*reg, cmd)?,
        RegistryCmd::List => {
            for a in reg.list_applications().map_err(e)? {
                println!(
                    "application {} name={:?} approved_intents={} max_concurrency={}",
                    a.id, a.name, a.approved_intents, a.max_concurrency
                );
                for i in reg.installations_of_app(a.id).map_err(e)? {
                    println!(
                        "  installed in server {} permissions={}",
                        i.server_id, i.permissions
                    );
                }
            }
            for s in reg.list_servers().map_err(e)? {
                println!("server {} name={:?}", s.id, s.name);
            }
        }
    }
    Ok(())
}

/// The endpoint check through an egress: the one named, or a child
/// started for this command (with an empty environment: the registry URL
/// does not reach it).
fn verify_endpoint(
    url: &str,
    seed: &[u8; 32],
    egress: Option<&str>,
    allow: &[String],
    each: std::time::Duration,
) -> Result<(), String> {
    use crate::egress::child::EgressChild;
    use crate::egress::client::{Addr, Defaults};
    let (addr, _child) = match egress {
        Some(a) => (Addr::parse(a)?, None),
        None => {
            let addr = Addr::Unix(std::env::temp_dir().join(format!(
                "gatewayd-egress-{}-{:08x}.sock",
                std::process::id(),
                getrandom::u32().unwrap_or(0)
            )));
            let exe = std::env::current_exe().map_err(|e| format!("own executable: {e}"))?;
            let child = EgressChild::spawn(&exe, &addr, allow, 4)?;
            (addr, Some(child))
        }
    };
    let client = crate::egress::EgressClient::new(addr, Defaults::default());
    client
        .verify_endpoint(url, seed, each)
        .map_err(|why| format!("endpoint {url} not accepted: {why}"))
}

fn set_member_roles(
    reg: &dyn Registry,
    server: u64,
    user: u64,
    roles: &[u64],
) -> Result<(), String> {
    let m = reg
        .set_member_roles(server, user, roles)
        .map_err(|err| err.to_string())?;
    println!(
        "member server_id={server} user_id={user} roles={:?}",
        m.role_ids
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use clap::Parser;

    use super::developers::{DeveloperCmd, IntentsCmd};
    use super::{RegistryArgs, RegistryCmd};

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: RegistryArgs,
    }

    fn parse(line: &str) -> Result<RegistryCmd, clap::Error> {
        Cli::try_parse_from(line.split_whitespace()).map(|c| c.args.cmd)
    }

    #[test]
    fn a_password_comes_from_a_file_or_stdin_never_a_flag() {
        match parse("x developer add alice --password-file /tmp/pw") {
            Ok(RegistryCmd::Developer {
                cmd: DeveloperCmd::Add { name, password },
            }) => {
                assert_eq!(name, "alice");
                assert_eq!(password.password_file, Some(PathBuf::from("/tmp/pw")));
                assert!(!password.password_stdin);
            }
            _ => panic!("not parsed as developer add"),
        }
        assert!(matches!(
            parse("x developer passwd alice --password-stdin"),
            Ok(RegistryCmd::Developer {
                cmd: DeveloperCmd::Passwd { .. }
            })
        ));
        for bad in [
            "x developer add alice",
            "x developer add alice --password-file /p --password-stdin",
            "x developer add alice --password hunter2hunter2",
            "x developer own alice notanumber",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert!(matches!(
            parse("x intents approve 42"),
            Ok(RegistryCmd::Intents {
                cmd: IntentsCmd::Approve { app_id: 42 }
            })
        ));
    }
}
